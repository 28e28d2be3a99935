// Package files owns the OpenAI Files API of the gateway's backends
// (/v1/files): streaming uploads, file metadata, content download,
// listing, deletion and retention (expires_at and a sweeper).
// docs/backends-design.md is the contract; the batch runner and the
// Responses service use a *Store through interfaces they declare.
//
// Store is the service; http.go serves it. It keeps files in two stores it
// declares and any implementation may provide: Metadata (rows, wrapped
// data keys, tombstones; SQLiteMetadata keeps them in DATA_DIR/files.db)
// and Blobs (content; DiskBlobs keeps it under DATA_DIR/files/). filestest
// is the conformance suite of both; Open assembles the SQLite and disk ones.
//
// A file is a row plus a blob named after its id. The row is written only
// once the blob is complete and durable (Blobs.Put), and a delete removes
// the row before the blob, so a visible row always has its whole content
// and a crash leaves at worst an unreferenced blob, which Open removes. A
// deleted or swept file leaves a tombstone (id, owner, created_at) that
// only List reads, so the file still works as an after cursor for
// CursorRetention; the sweeper removes it then. Content never passes
// through memory as a whole: uploads and downloads are streamed.
//
// Blobs are sealed at rest (envelope) above the blob store, which only
// ever holds ciphertext: each file's content is a sealed stream under a
// data key of its own, stored wrapped beside the row and inserted and
// deleted with it, so a deleted file's blob is unreadable even where a
// copy of it survives.
//
// One Store opened by Open owns a data directory: Open cleans up what a
// crashed process left behind, which would race with another process
// uploading into the same directory.
package files

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Purposes of a file. Clients may upload every purpose but PurposeBatchOutput,
// which only the batch runner creates (output and error files).
const (
	PurposeBatch       = "batch"
	PurposeBatchOutput = "batch_output"
	PurposeUserData    = "user_data"
	PurposeAssistants  = "assistants"
	PurposeFineTune    = "fine-tune"
	PurposeVision      = "vision"
	PurposeEvals       = "evals"
)

// Limits from docs/backends-design.md.
const (
	// DefaultMaxBytes is the upload limit per file: OpenAI's 200 MB, in
	// decimal megabytes as OpenAI counts them.
	DefaultMaxBytes = 200 * 1000 * 1000
	// BatchOutputRetention is how long a batch_output file is kept when its
	// creator does not say.
	BatchOutputRetention = 30 * 24 * time.Hour
	// MinExpiresAfter and MaxExpiresAfter bound a client's expires_after.
	MinExpiresAfter = time.Hour
	MaxExpiresAfter = 30 * 24 * time.Hour
	// MaxListLimit is the largest (and default) page size of List.
	MaxListLimit = 10000
	// CursorRetention is how long a deleted or swept file still works as
	// List's after cursor (it is invisible everywhere else at once), so a
	// client that lists a page, deletes each file and then asks for the
	// next page gets it.
	CursorRetention = 24 * time.Hour

	defaultSweepInterval = 5 * time.Minute
	maxFilenameBytes     = 1024
	idPrefix             = "file-"
	idRandLen            = 24
	partSuffix           = ".part"
	sealSuffix           = ".seal" // a legacy blob being sealed (sealLegacy)
	blobField            = "blob"  // the sealed field of a file
	dbFile               = "files.db"
	blobDirName          = "files"
)

// ErrNotFound is returned for a file that does not exist, belongs to another
// owner, has expired or was deleted: callers must not tell these apart, so
// an id reveals nothing about other owners.
var ErrNotFound = errors.New("files: not found")

// ErrTooLarge is returned by Create when the content exceeds maxBytes; the
// partial content is not kept.
var ErrTooLarge = errors.New("files: file too large")

// ErrInvalid is matched (errors.Is) by errors about the caller's input (a
// purpose, a filename, a list parameter). Their messages are meant for the
// client.
var ErrInvalid = errors.New("files: invalid input")

type invalidError struct{ param, msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(param, format string, args ...any) error {
	return &invalidError{param: param, msg: fmt.Sprintf(format, args...)}
}

// File is a stored file's metadata.
type File struct {
	ID, Owner, Filename, Purpose string
	Bytes                        int64
	CreatedAt, ExpiresAt         time.Time // ExpiresAt zero: kept until deleted
}

// live reports whether f is still visible at now.
func (f File) live(now time.Time) bool { return f.ExpiresAt.IsZero() || now.Before(f.ExpiresAt) }

// Options configures a Store. The zero value is the production setting.
type Options struct {
	// MaxBytes is the upload limit the HTTP handler enforces per file;
	// 0 means DefaultMaxBytes. Create takes its own limit.
	MaxBytes int64
	// SweepInterval is how often Run deletes expired files; 0 means five
	// minutes. Expired files are invisible at once; sweeping frees the disk.
	SweepInterval time.Duration
	// Logger receives metadata logs (ids, sizes, owners; never content).
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. Tests move it to expire files.
	Now func() time.Time
}

// Store is the files service: the Files API's operations over a Metadata
// store (rows, data keys, tombstones) and a Blobs store (sealed content).
// It seals content on the way in and opens it on the way out, so the blob
// store holds ciphertext only. It is safe for concurrent use.
type Store struct {
	meta       Metadata
	blobs      Blobs
	keys       *envelope.Keyring
	maxBytes   int64
	sweepEvery time.Duration
	log        *slog.Logger
	clock      func() time.Time
}

// New returns the files service over meta and blobs, sealing content under
// data keys wrapped by ring. Close closes meta and blobs when they have a
// Close method.
func New(meta Metadata, blobs Blobs, ring *envelope.Keyring, opts Options) *Store {
	s := &Store{
		meta:       meta,
		blobs:      blobs,
		keys:       ring,
		maxBytes:   opts.MaxBytes,
		sweepEvery: opts.SweepInterval,
		log:        opts.Logger,
		clock:      opts.Now,
	}
	if s.maxBytes <= 0 {
		s.maxBytes = DefaultMaxBytes
	}
	if s.sweepEvery <= 0 {
		s.sweepEvery = defaultSweepInterval
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clock == nil {
		s.clock = time.Now
	}
	return s
}

// Open opens, creating if necessary, the file store in the data directory
// dir: metadata in dir/files.db (SQLiteMetadata), blobs in dir/files/
// (DiskBlobs), the key-encryption keys as envelope.Load finds them. It
// removes what a crash left behind (partial uploads, blobs without a row)
// and seals blobs written before encryption at rest before returning.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("files: open: empty data directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	blobs, err := OpenDiskBlobs(filepath.Join(abs, blobDirName))
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	ring, err := envelope.Load(abs)
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	meta, err := OpenSQLiteMetadata(ctx, filepath.Join(abs, dbFile), ring, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	s := New(meta, blobs, ring, opts)
	if err := s.reconcile(ctx, 0); err != nil {
		meta.Close()
		return nil, fmt.Errorf("files: open: %w", err)
	}
	if err := s.sealLegacy(ctx, meta, blobs); err != nil {
		meta.Close()
		return nil, fmt.Errorf("files: open: %w", err)
	}
	return s, nil
}

// Close closes the metadata and blob stores. Readers already holding a
// Content from Open keep working where the blob store allows it (DiskBlobs
// does).
func (s *Store) Close() error {
	var errs []error
	for _, c := range []any{s.meta, s.blobs} {
		if c, ok := c.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// now is the store's clock, at the nanosecond precision the database keeps,
// so a File returned by Create equals the one Get returns later.
func (s *Store) now() time.Time { return time.Unix(0, s.clock().UnixNano()).UTC() }

// Create stores the content read from r as a new file of owner, with
// meta's Filename, Purpose and ExpiresAt (the other fields are set here). r
// is streamed to the blob store, sealed; more than maxBytes (when positive)
// fails with ErrTooLarge and keeps nothing. A batch_output file without
// ExpiresAt is kept for BatchOutputRetention.
func (s *Store) Create(ctx context.Context, owner string, meta File, r io.Reader, maxBytes int64) (File, error) {
	if err := validateMeta(owner, meta); err != nil {
		return File{}, err
	}
	st, err := s.stage(ctx, r, maxBytes)
	if err != nil {
		return File{}, err
	}
	return s.commit(ctx, st, owner, meta, 0)
}

func validateMeta(owner string, meta File) error {
	if owner == "" {
		return errors.New("files: create: empty owner")
	}
	if !knownPurpose(meta.Purpose) {
		return invalidf("purpose", "Invalid purpose %q.", meta.Purpose)
	}
	return validateFilename(meta.Filename)
}

func knownPurpose(p string) bool {
	switch p {
	case PurposeBatch, PurposeBatchOutput, PurposeUserData, PurposeAssistants, PurposeFineTune, PurposeVision, PurposeEvals:
		return true
	}
	return false
}

func validateFilename(name string) error {
	switch {
	case name == "":
		return invalidf("file", "The file must have a filename.")
	case len(name) > maxFilenameBytes:
		return invalidf("file", "The filename must be at most %d bytes.", maxFilenameBytes)
	case !utf8.ValidString(name):
		return invalidf("file", "The filename must be valid UTF-8.")
	}
	return nil
}

// staged is content stored in the blob store, sealed, waiting for its row.
// The id is chosen up front: it names the blob and the data key.
type staged struct {
	id      string
	bytes   int64  // plaintext
	wrapped []byte // the file's data key, wrapped, to store with the row
}

// readError marks a failure to read the content (the client's body ended
// early or was cut by the request size limit), as opposed to a failure to
// write it, which is ours.
type readError struct{ err error }

func (e *readError) Error() string { return "files: read content: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// sourceReader stops a copy when ctx ends and remembers the reader's own
// error, so stage can tell the client's fault from the store's.
type sourceReader struct {
	ctx context.Context
	r   io.Reader
	err error
}

func (sr *sourceReader) Read(p []byte) (int, error) {
	if err := sr.ctx.Err(); err != nil {
		sr.err = err
		return 0, err
	}
	n, err := sr.r.Read(p)
	if err != nil && err != io.EOF {
		sr.err = err
	}
	return n, err
}

// stage streams r, sealed under a new data key, into a new blob.
func (s *Store) stage(ctx context.Context, r io.Reader, maxBytes int64) (*staged, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	dk, wrapped, err := s.keys.NewDataKey(id)
	if err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	src := &sourceReader{ctx: ctx, r: r}
	plain, err := s.putSealed(ctx, id, dk, src, maxBytes)
	if err != nil && src.err == nil && ctx.Err() != nil {
		// The blob store saw the request end before the source did.
		src.err = ctx.Err()
	}
	switch {
	case src.err != nil:
		return nil, &readError{err: src.err}
	case errors.Is(err, ErrTooLarge):
		return nil, fmt.Errorf("files: stage: more than %d bytes: %w", maxBytes, ErrTooLarge)
	case err != nil:
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	return &staged{id: id, bytes: plain, wrapped: wrapped}, nil
}

// putSealed streams from, sealed under dk, into the new blob key and
// returns the plaintext size; more than maxBytes of plaintext (when
// positive) fails with ErrTooLarge and, like every failure, leaves no blob.
// Sealing runs in a goroutine writing into a pipe the blob store reads, so
// io.Copy's buffer, one sealed segment and what the blob store buffers are
// all the memory it uses, whatever the size.
func (s *Store) putSealed(ctx context.Context, key string, dk *envelope.DataKey, from io.Reader, maxBytes int64) (int64, error) {
	if maxBytes > 0 {
		// One byte more than allowed tells "exactly the limit" from "over".
		from = io.LimitReader(from, maxBytes+1)
	}
	pr, pw := io.Pipe()
	var (
		plain int64
		werr  error
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		sw, err := dk.NewWriter(pw, blobField)
		if err == nil {
			plain, err = io.Copy(sw, from)
		}
		if err == nil && maxBytes > 0 && plain > maxBytes {
			err = ErrTooLarge
		}
		if err == nil {
			err = sw.Close()
		}
		werr = err
		// nil closes with io.EOF: the blob store sees the end of the
		// content; an error makes its Put fail and keep nothing.
		pw.CloseWithError(err)
	}()
	limit := int64(0)
	if maxBytes > 0 {
		limit = envelope.SealedSize(maxBytes)
	}
	_, err := s.blobs.Put(ctx, key, pr, limit)
	// A Put that stopped reading early must not leave the sealer blocked.
	pr.CloseWithError(errors.New("files: blob store stopped reading"))
	<-done
	if errors.Is(werr, ErrTooLarge) {
		return 0, ErrTooLarge // the pipe's error failed the Put
	}
	if err != nil {
		return 0, err
	}
	return plain, nil
}

// discard removes a blob that will not get its row.
func (s *Store) discard(ctx context.Context, id string) {
	if err := s.blobs.Delete(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("files: remove staged upload", "id", id, "err", err)
	}
}

// commit inserts the row of a stored blob. The blob comes first (the doc's
// order reversed), so a row is never visible before its blob is: a crash in
// between leaves an unreferenced blob that Open removes, so either way the
// file is all there or not there at all. expiresAfter, when positive,
// overrides meta.ExpiresAt relative to the creation time. commit consumes
// st, also on failure.
func (s *Store) commit(ctx context.Context, st *staged, owner string, meta File, expiresAfter time.Duration) (File, error) {
	created := s.now()
	f := File{
		ID: st.id, Owner: owner, Filename: meta.Filename, Purpose: meta.Purpose,
		Bytes: st.bytes, CreatedAt: created, ExpiresAt: meta.ExpiresAt,
	}
	if expiresAfter > 0 {
		f.ExpiresAt = created.Add(expiresAfter)
	}
	if f.ExpiresAt.IsZero() && f.Purpose == PurposeBatchOutput {
		f.ExpiresAt = created.Add(BatchOutputRetention)
	}
	if !f.ExpiresAt.IsZero() {
		f.ExpiresAt = time.Unix(0, f.ExpiresAt.UnixNano()).UTC()
	}
	if err := s.meta.Insert(ctx, f, st.wrapped); err != nil {
		s.discard(ctx, st.id)
		return File{}, fmt.Errorf("files: commit %s: %w", st.id, err)
	}
	return f, nil
}

// Get returns owner's file id, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, owner, id string) (File, error) {
	if !wellFormedID(id) {
		return File{}, fmt.Errorf("files: get %q: %w", id, ErrNotFound)
	}
	f, err := s.meta.Get(ctx, owner, id)
	if err != nil {
		return File{}, err
	}
	if !f.live(s.now()) {
		return File{}, fmt.Errorf("files: get %s: %w", id, ErrNotFound)
	}
	return f, nil
}

// Content is a file's content as Open returns it, in the clear: read
// sequentially or at any offset. Every byte read from a sealed blob has
// been authenticated; a blob altered or cut short in storage fails the read.
type Content interface {
	io.ReadSeekCloser
	io.ReaderAt
}

// sealedContent reads a sealed blob through the blob's reader.
type sealedContent struct {
	*envelope.Reader
	blob blobContent
}

func (c *sealedContent) Close() error { return c.blob.Close() }

// plainContent is the content of a blob written before encryption at rest.
type plainContent struct {
	*io.SectionReader
	blob blobContent
}

func (c *plainContent) Close() error { return c.blob.Close() }

// Open returns owner's file id and its content; the caller closes it. A file
// deleted meanwhile is ErrNotFound; one deleted after Open stays readable
// through the returned handle where the blob store keeps an open blob
// readable (DiskBlobs does), and the handle holds the data key either way.
func (s *Store) Open(ctx context.Context, owner, id string) (File, Content, error) {
	f, err := s.Get(ctx, owner, id)
	if err != nil {
		return File{}, nil, err
	}
	wrapped, err := s.meta.DataKey(ctx, id)
	if err != nil {
		// ErrNotFound: deleted (or swept) since the row was read.
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	rc, size, err := s.blobs.Open(ctx, id)
	if errors.Is(err, ErrBlobNotFound) {
		// Deleted (or swept) between the row read and the open.
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	blob := newBlobReaderAt(ctx, s.blobs, id, rc, size)
	if wrapped == nil {
		// Written before encryption at rest, not yet sealed.
		return f, &plainContent{SectionReader: io.NewSectionReader(blob, 0, size), blob: blob}, nil
	}
	c, err := s.openSealed(id, wrapped, blob, size)
	if err != nil {
		blob.Close()
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	return f, c, nil
}

func (s *Store) openSealed(id string, wrapped []byte, blob blobContent, size int64) (*sealedContent, error) {
	dk, err := s.keys.Unwrap(id, wrapped)
	if err != nil {
		return nil, err
	}
	r, err := dk.NewReader(blob, size, blobField)
	if err != nil {
		return nil, err
	}
	return &sealedContent{Reader: r, blob: blob}, nil
}

// Delete deletes owner's file id, or returns an error wrapping ErrNotFound.
func (s *Store) Delete(ctx context.Context, owner, id string) error {
	if !wellFormedID(id) {
		return fmt.Errorf("files: delete %q: %w", id, ErrNotFound)
	}
	if err := s.meta.Delete(ctx, owner, id, s.now()); err != nil {
		return err
	}
	// The row and the data key are gone, so the file is deleted whatever
	// happens to the blob; a blob left behind is removed by the next Open.
	s.removeBlob(ctx, id)
	return nil
}

func (s *Store) removeBlob(ctx context.Context, id string) {
	// Not the request's context: the row is gone, the blob must follow.
	if err := s.blobs.Delete(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("files: remove blob", "id", id, "err", err)
	}
}

// Order of a listing by creation time.
const (
	OrderAsc  = "asc"
	OrderDesc = "desc"
)

// ListQuery selects a page of an owner's files. Zero values are OpenAI's
// defaults: every purpose, MaxListLimit files, newest first, from the start.
type ListQuery struct {
	Purpose string
	Limit   int
	Order   string // OrderAsc or OrderDesc
	After   string // a file id: the page starts after it, in Order
}

// List returns a page of owner's live files and whether more follow.
// Invalid parameters are errors matching ErrInvalid.
func (s *Store) List(ctx context.Context, owner string, q ListQuery) ([]File, bool, error) {
	switch {
	case q.Limit == 0:
		q.Limit = MaxListLimit
	case q.Limit < 1 || q.Limit > MaxListLimit:
		return nil, false, invalidf("limit", "limit must be between 1 and %d.", MaxListLimit)
	}
	switch q.Order {
	case "":
		q.Order = OrderDesc
	case OrderDesc, OrderAsc:
	default:
		return nil, false, invalidf("order", "order must be 'asc' or 'desc'.")
	}
	if q.Purpose != "" && !knownPurpose(q.Purpose) {
		return nil, false, invalidf("purpose", "Invalid purpose %q.", q.Purpose)
	}
	// The cursor may name a file deleted or expired since the previous
	// page (CursorRetention); another owner's id is as unknown as one that
	// never existed.
	if q.After != "" && !wellFormedID(q.After) {
		return nil, false, invalidf("after", "No such File object: %s", q.After)
	}
	out, more, err := s.meta.List(ctx, owner, q, s.now())
	if q.After != "" && errors.Is(err, ErrNotFound) {
		return nil, false, invalidf("after", "No such File object: %s", q.After)
	}
	return out, more, err
}

// sweepBatch bounds how many rows one sweep transaction deletes, so a large
// backlog never holds the write lock long enough to stall uploads.
const sweepBatch = 500

// Sweep deletes the files that expired at or before now, rows first and then
// blobs, and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		ids, err := s.meta.SweepExpired(ctx, now, sweepBatch)
		if err != nil {
			return total, err
		}
		for _, id := range ids {
			s.removeBlob(ctx, id)
		}
		total += len(ids)
		if len(ids) < sweepBatch {
			break
		}
	}
	// Tombstones past CursorRetention, in batches as well.
	for {
		n, err := s.meta.SweepTombstones(ctx, now.Add(-CursorRetention), sweepBatch)
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// SweepLocker is implemented by a Metadata that several processes share
// (PostgresMetadata): the sweeper runs only while holding its lock, so one
// replica sweeps at a time, and the others skip their turn.
type SweepLocker interface {
	// TrySweepLock takes the lock without waiting; ok is false when
	// another process holds it. release gives it back.
	TrySweepLock(ctx context.Context) (release func(), ok bool, err error)
}

// Bounds of the orphan clean-up a shared store runs from the sweeper.
const (
	// OrphanMinAge: a blob without a row is removed only once it is this
	// old. Another replica's upload has its blob before its row (commit),
	// for as long as the insert takes; an hour is far beyond that.
	OrphanMinAge = time.Hour
	// orphanEvery is how often a replica holding the sweep lock looks for
	// orphans (and once when it starts).
	orphanEvery = 24 * time.Hour
)

// Run sweeps expired files now and then every SweepInterval until ctx ends;
// it returns nil then. The owner of the Store runs it in a goroutine.
//
// On a shared Metadata (a SweepLocker) each round runs only under the
// sweep lock, so one replica sweeps at a time; the replica holding it also
// removes, at its first round and then daily, the blobs without a row
// older than OrphanMinAge (what a crashed replica's upload or delete left).
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	locker, shared := s.meta.(SweepLocker)
	var orphansAt time.Time
	for {
		release := func() {}
		ok := true
		if shared {
			var err error
			release, ok, err = locker.TrySweepLock(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.Error("files: take the sweep lock", "err", err)
			}
		}
		if ok {
			n, err := s.Sweep(ctx, s.now())
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Error("files: sweep expired files", "err", err)
			case n > 0:
				s.log.Info("files: swept expired files", "count", n)
			}
			if shared && (orphansAt.IsZero() || time.Since(orphansAt) >= orphanEvery) {
				orphansAt = time.Now()
				if err := s.reconcile(ctx, OrphanMinAge); err != nil && ctx.Err() == nil {
					s.log.Error("files: remove blobs without a row", "err", err)
				}
			}
			release()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reconcile removes the blobs a crash left without a row (a Create that
// never inserted it, a Delete that never removed the blob) and finishes
// the sealing of legacy blobs a crash interrupted. Keys that are not file
// ids are not ours and are left alone. minAge > 0 spares blobs younger
// than that: on a shared store, another process may be between its Put
// and its Insert.
func (s *Store) reconcile(ctx context.Context, minAge time.Duration) error {
	removed := 0
	for b, err := range s.blobs.List(ctx, idPrefix) {
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if id, ok := strings.CutSuffix(b.Key, sealSuffix); ok && wellFormedID(id) {
			if err := s.finishSeal(ctx, id); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			continue
		}
		if !wellFormedID(b.Key) || (minAge > 0 && time.Since(b.Modified) < minAge) {
			continue
		}
		ok, err := s.meta.Exists(ctx, b.Key)
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
		}
		if !ok {
			if err := s.blobs.Delete(ctx, b.Key); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			removed++
		}
	}
	if removed > 0 {
		s.log.Info("files: removed leftovers of interrupted uploads and deletes", "count", removed)
	}
	return nil
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// newID returns "file-" and 24 random base62 characters (about 143 bits).
func newID() (string, error) {
	out := make([]byte, 0, len(idPrefix)+idRandLen)
	out = append(out, idPrefix...)
	var buf [32]byte
	for len(out) < cap(out) {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("files: new id: %w", err)
		}
		for _, b := range buf {
			// Reject the top 8 byte values so every character is equally
			// likely (248 = 4 * 62).
			if b >= 248 || len(out) == cap(out) {
				continue
			}
			out = append(out, base62[b%62])
		}
	}
	return string(out), nil
}

// wellFormedID reports whether id could have come from newID. Anything else
// is not found without asking the metadata store, and never names a blob.
func wellFormedID(id string) bool {
	rest, ok := strings.CutPrefix(id, idPrefix)
	if !ok || len(rest) != idRandLen {
		return false
	}
	for i := 0; i < len(rest); i++ {
		if !strings.ContainsRune(base62, rune(rest[i])) {
			return false
		}
	}
	return true
}
