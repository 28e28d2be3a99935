// Package files owns the OpenAI Files API of the gateway's backends
// (/v1/files): streaming uploads to disk, file metadata in SQLite
// (DATA_DIR/files.db), blobs under DATA_DIR/files/, listing, content
// download, deletion and retention (expires_at and a sweeper).
// docs/backends-design.md is the contract; the batch runner and the
// Responses service use a *Store through interfaces they declare.
//
// A file is a row plus a blob named after its id. The row is written only
// once the blob is complete on disk (streamed to a ".part" file, fsynced and
// renamed into place), and a delete removes the row before the blob, so a
// visible row always has its whole content and a crash leaves at worst an
// unreferenced blob, which Open removes. A deleted or swept file leaves a
// tombstone (id, owner, created_at) that only List reads, so the file still
// works as an after cursor for CursorRetention; the sweeper removes it then.
// Content never passes through memory
// as a whole: uploads and downloads are copied with a fixed-size buffer.
//
// Blobs are sealed at rest (envelope): each file's content is a sealed
// stream under a data key of its own, stored wrapped in files.db beside
// the row and inserted and deleted in the same transaction, so a deleted
// file's blob is unreadable even where a copy of it survives.
//
// One Store owns a data directory: Open cleans up what a crashed process
// left behind, which would race with another process uploading into the
// same directory.
package files

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
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

// Store is the file store. It is safe for concurrent use.
type Store struct {
	db         *sql.DB
	keys       *envelope.Keyring
	eraser     *sqlitedb.Eraser
	blobDir    string
	maxBytes   int64
	sweepEvery time.Duration
	log        *slog.Logger
	clock      func() time.Time
}

// Open opens, creating if necessary, the file store in the data directory
// dir: metadata in dir/files.db, blobs in dir/files/. It removes what a
// crash left behind (partial uploads, blobs without a row) before returning.
func Open(ctx context.Context, dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("files: open: empty data directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	s := &Store{
		blobDir:    filepath.Join(abs, blobDirName),
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
	// 0700: uploads are other people's data.
	if err := os.MkdirAll(s.blobDir, 0o700); err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	if s.keys, err = envelope.Load(abs); err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	db, err := openDB(ctx, filepath.Join(abs, dbFile))
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	if err := s.keys.Check(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("files: open: %w", err)
	}
	s.db = db
	s.eraser = sqlitedb.NewEraser(db)
	if err := s.reconcile(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("files: open: %w", err)
	}
	if err := s.sealLegacy(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("files: open: %w", err)
	}
	return s, nil
}

// Close closes the database. Readers already holding a Content from Open
// keep working.
func (s *Store) Close() error { return s.db.Close() }

// now is the store's clock, at the nanosecond precision the database keeps,
// so a File returned by Create equals the one Get returns later.
func (s *Store) now() time.Time { return time.Unix(0, s.clock().UnixNano()).UTC() }

func (s *Store) blobPath(id string) string { return filepath.Join(s.blobDir, id) }

// Create stores the content read from r as a new file of owner, with
// meta's Filename, Purpose and ExpiresAt (the other fields are set here). r
// is streamed to disk; more than maxBytes (when positive) fails with
// ErrTooLarge and keeps nothing. A batch_output file without ExpiresAt is
// kept for BatchOutputRetention.
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

// staged is content written to a temporary file in the blob directory,
// fsynced, waiting for its row. The id is chosen up front so the part file
// can be named after it.
type staged struct {
	id, path string
	bytes    int64
	wrapped  []byte // the file's data key, wrapped, to store with the row
}

// readError marks a failure to read the content (the client's body ended
// early or was cut by the request size limit), as opposed to a failure to
// write it, which is ours.
type readError struct{ err error }

func (e *readError) Error() string { return "files: read content: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// sourceReader stops a copy when ctx ends and remembers the reader's own
// error, so stage can tell the client's fault from the disk's.
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

// stage streams r, sealed under a new data key, into a new part file,
// counting bytes: io.Copy's buffer and one sealed segment are all the
// memory an upload uses, whatever its size.
func (s *Store) stage(ctx context.Context, r io.Reader, maxBytes int64) (*staged, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	dk, wrapped, err := s.keys.NewDataKey(id)
	if err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	st := &staged{id: id, path: s.blobPath(id) + partSuffix, wrapped: wrapped}
	f, err := os.OpenFile(st.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	kept := false
	defer func() {
		if !kept {
			f.Close()
			os.Remove(st.path)
		}
	}()
	src := &sourceReader{ctx: ctx, r: r}
	var from io.Reader = src
	if maxBytes > 0 {
		// One byte more than allowed tells "exactly the limit" from "over".
		from = io.LimitReader(src, maxBytes+1)
	}
	sw, err := dk.NewWriter(f, blobField)
	if err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	n, err := io.Copy(sw, from)
	if src.err != nil {
		return nil, &readError{err: src.err}
	}
	if err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	if maxBytes > 0 && n > maxBytes {
		return nil, fmt.Errorf("files: stage: more than %d bytes: %w", maxBytes, ErrTooLarge)
	}
	if err := sw.Close(); err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	// The row must never point at content the OS could still lose.
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("files: stage: %w", err)
	}
	kept = true
	st.bytes = n
	return st, nil
}

// discard removes a staged file that will not be committed.
func (s *Store) discard(st *staged) {
	if err := os.Remove(st.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Error("files: remove staged upload", "id", st.id, "err", err)
	}
}

// commit renames a staged blob into place and inserts its row. The rename
// comes first (the doc's order reversed), so a row is never visible before
// its blob is: a crash in between leaves an unreferenced blob that Open
// removes, so either way the file is all there or not there at all.
// expiresAfter, when positive, overrides meta.ExpiresAt relative to the
// creation time. commit consumes st, also on failure.
func (s *Store) commit(ctx context.Context, st *staged, owner string, meta File, expiresAfter time.Duration) (File, error) {
	final := s.blobPath(st.id)
	if err := os.Rename(st.path, final); err != nil {
		s.discard(st)
		return File{}, fmt.Errorf("files: commit %s: %w", st.id, err)
	}
	if err := syncDir(s.blobDir); err != nil {
		os.Remove(final)
		return File{}, fmt.Errorf("files: commit %s: %w", st.id, err)
	}
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
	if err := s.insert(ctx, f, st.wrapped); err != nil {
		os.Remove(final)
		return File{}, fmt.Errorf("files: commit %s: %w", st.id, err)
	}
	return f, nil
}

// insert writes f's row and its wrapped data key in one transaction.
func (s *Store) insert(ctx context.Context, f File, wrapped []byte) error {
	kekID, err := envelope.WrappedKEKID(wrapped)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`,
		f.ID, kekID, wrapped); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at, sealed)
		 VALUES (?, ?, ?, ?, ?, ?, ?, 1)`,
		f.ID, f.Owner, f.Filename, f.Purpose, f.Bytes, f.CreatedAt.UnixNano(), nullTime(f.ExpiresAt)); err != nil {
		return err
	}
	return tx.Commit()
}

// syncDir makes a rename durable: the new directory entry is only on disk
// once the directory itself is fsynced.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

const fileColumns = `id, owner, filename, purpose, bytes, created_at, expires_at`

type scanner interface{ Scan(dest ...any) error }

func scanFile(row scanner) (File, error) {
	var (
		f       File
		created int64
		expires sql.NullInt64
	)
	if err := row.Scan(&f.ID, &f.Owner, &f.Filename, &f.Purpose, &f.Bytes, &created, &expires); err != nil {
		return File{}, err
	}
	f.CreatedAt = time.Unix(0, created).UTC()
	if expires.Valid {
		f.ExpiresAt = time.Unix(0, expires.Int64).UTC()
	}
	return f, nil
}

// Get returns owner's file id, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, owner, id string) (File, error) {
	if !wellFormedID(id) {
		return File{}, fmt.Errorf("files: get %q: %w", id, ErrNotFound)
	}
	f, err := scanFile(s.db.QueryRowContext(ctx,
		`SELECT `+fileColumns+` FROM files WHERE id = ? AND owner = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !f.live(s.now())) {
		return File{}, fmt.Errorf("files: get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("files: get %s: %w", id, err)
	}
	return f, nil
}

// Content is a file's content as Open returns it, in the clear: read
// sequentially or at any offset. Every byte read from a sealed blob has
// been authenticated; a blob altered or cut short on disk fails the read.
type Content interface {
	io.ReadSeekCloser
	io.ReaderAt
}

// sealedContent reads a sealed blob through its open handle.
type sealedContent struct {
	*envelope.Reader
	f *os.File
}

func (c *sealedContent) Close() error { return c.f.Close() }

// Open returns owner's file id and its content; the caller closes it. A file
// deleted meanwhile is ErrNotFound; one deleted after Open stays readable
// through the returned handle, which holds its data key.
func (s *Store) Open(ctx context.Context, owner, id string) (File, Content, error) {
	f, err := s.Get(ctx, owner, id)
	if err != nil {
		return File{}, nil, err
	}
	var sealed bool
	var wrapped []byte
	err = s.db.QueryRowContext(ctx,
		`SELECT f.sealed, k.wrapped FROM files f LEFT JOIN data_keys k ON k.object_id = f.id WHERE f.id = ?`,
		id).Scan(&sealed, &wrapped)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && sealed && wrapped == nil) {
		// Deleted (or swept) since the row was read.
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	fh, err := os.Open(s.blobPath(id))
	if errors.Is(err, os.ErrNotExist) {
		// Deleted (or swept) between the row read and the open.
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	if !sealed {
		return f, fh, nil // written before encryption at rest, not yet sealed
	}
	c, err := s.openSealed(id, wrapped, fh)
	if err != nil {
		fh.Close()
		return File{}, nil, fmt.Errorf("files: open %s: %w", id, err)
	}
	return f, c, nil
}

func (s *Store) openSealed(id string, wrapped []byte, fh *os.File) (*sealedContent, error) {
	dk, err := s.keys.Unwrap(id, wrapped)
	if err != nil {
		return nil, err
	}
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	r, err := dk.NewReader(fh, fi.Size(), blobField)
	if err != nil {
		return nil, err
	}
	return &sealedContent{Reader: r, f: fh}, nil
}

// Delete deletes owner's file id, or returns an error wrapping ErrNotFound.
func (s *Store) Delete(ctx context.Context, owner, id string) error {
	if !wellFormedID(id) {
		return fmt.Errorf("files: delete %q: %w", id, ErrNotFound)
	}
	now := s.now().UnixNano()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	var created int64
	err = tx.QueryRowContext(ctx,
		`DELETE FROM files WHERE id = ? AND owner = ? AND (expires_at IS NULL OR expires_at > ?) RETURNING created_at`,
		id, owner, now).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("files: delete %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	// With its data key, the blob is unreadable wherever a copy of it is.
	if err := envelope.Delete(ctx, tx, id); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	// The tombstone keeps the file's place in listings for cursors.
	if _, err := tx.ExecContext(ctx,
		`INSERT OR REPLACE INTO file_tombstones (id, owner, created_at, gone_at) VALUES (?, ?, ?, ?)`,
		id, owner, created, now); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	s.erase(ctx)
	// The row is gone, so the file is deleted whatever happens to the blob;
	// a blob left behind is removed by the next Open.
	s.removeBlob(id)
	return nil
}

// erase checkpoints deleted keys out of the WAL (sqlitedb.Erase). A
// checkpoint held back by a reader leaves them to the next delete or
// sweep: logged, not the client's error.
func (s *Store) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	if err := s.eraser.Erase(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("files: erasing deleted data keys from the WAL is deferred to the next delete", "err", err)
	}
}

func (s *Store) removeBlob(id string) {
	if err := os.Remove(s.blobPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
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
	cmp, dir := "<", "DESC"
	switch q.Order {
	case "", OrderDesc:
	case OrderAsc:
		cmp, dir = ">", "ASC"
	default:
		return nil, false, invalidf("order", "order must be 'asc' or 'desc'.")
	}
	if q.Purpose != "" && !knownPurpose(q.Purpose) {
		return nil, false, invalidf("purpose", "Invalid purpose %q.", q.Purpose)
	}
	now := s.now().UnixNano()
	where := `owner = ? AND (expires_at IS NULL OR expires_at > ?)`
	args := []any{owner, now}
	if q.Purpose != "" {
		where += ` AND purpose = ?`
		args = append(args, q.Purpose)
	}
	if q.After != "" {
		// Keyset pagination on (created_at, id): stable while files are
		// added or deleted between pages, unlike an offset.
		// The cursor may name a file deleted or expired since the previous
		// page (CursorRetention); another owner's id is as unknown as one
		// that never existed.
		c, err := s.cursor(ctx, owner, q.After)
		if errors.Is(err, ErrNotFound) {
			return nil, false, invalidf("after", "No such File object: %s", q.After)
		}
		if err != nil {
			return nil, false, err
		}
		where += ` AND (created_at ` + cmp + ` ? OR (created_at = ? AND id ` + cmp + ` ?))`
		args = append(args, c, c, q.After)
	}
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+fileColumns+` FROM files WHERE `+where+
		` ORDER BY created_at `+dir+`, id `+dir+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("files: list: %w", err)
	}
	defer rows.Close()
	out := []File{}
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, false, fmt.Errorf("files: list: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("files: list: %w", err)
	}
	more := len(out) > q.Limit
	if more {
		out = out[:q.Limit]
	}
	return out, more, nil
}

// cursor returns the created_at of owner's file id for List's after: a live
// file, one expired but not yet swept, or the tombstone of one deleted or
// swept within CursorRetention. Anything else wraps ErrNotFound.
func (s *Store) cursor(ctx context.Context, owner, id string) (int64, error) {
	if !wellFormedID(id) {
		return 0, fmt.Errorf("files: cursor %q: %w", id, ErrNotFound)
	}
	var created int64
	err := s.db.QueryRowContext(ctx,
		`SELECT created_at FROM files WHERE id = ? AND owner = ?
		 UNION ALL
		 SELECT created_at FROM file_tombstones WHERE id = ? AND owner = ? AND gone_at > ?
		 LIMIT 1`,
		id, owner, id, owner, s.now().Add(-CursorRetention).UnixNano()).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("files: cursor %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("files: cursor %s: %w", id, err)
	}
	return created, nil
}

// sweepBatch bounds how many rows one sweep transaction deletes, so a large
// backlog never holds the write lock long enough to stall uploads.
const sweepBatch = 500

// Sweep deletes the files that expired at or before now, rows first and then
// blobs, and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		ids, err := s.sweepRows(ctx, now)
		if err != nil {
			return total, err
		}
		if len(ids) > 0 {
			s.erase(ctx)
		}
		for _, id := range ids {
			s.removeBlob(id)
		}
		total += len(ids)
		if len(ids) < sweepBatch {
			break
		}
	}
	if s.eraser.Pending() {
		s.erase(ctx)
	}
	// Tombstones past CursorRetention, in batches as well.
	for {
		res, err := s.db.ExecContext(ctx,
			`DELETE FROM file_tombstones WHERE id IN (
				SELECT id FROM file_tombstones WHERE gone_at <= ? LIMIT ?
			)`, now.Add(-CursorRetention).UnixNano(), sweepBatch)
		if err != nil {
			return total, fmt.Errorf("files: sweep tombstones: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n < sweepBatch {
			return total, nil
		}
	}
}

// sweepRows deletes up to sweepBatch expired rows, leaving tombstones for
// cursors, and returns their ids.
func (s *Store) sweepRows(ctx context.Context, now time.Time) ([]string, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx,
		`DELETE FROM files WHERE id IN (
			SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?
		) RETURNING id, owner, created_at`, now.UnixNano(), sweepBatch)
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	type gone struct {
		id, owner string
		created   int64
	}
	var swept []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.id, &g.owner, &g.created); err != nil {
			rows.Close()
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		swept = append(swept, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	ids := make([]string, 0, len(swept))
	for _, g := range swept {
		if _, err := tx.ExecContext(ctx,
			`INSERT OR REPLACE INTO file_tombstones (id, owner, created_at, gone_at) VALUES (?, ?, ?, ?)`,
			g.id, g.owner, g.created, now.UnixNano()); err != nil {
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		if err := envelope.Delete(ctx, tx, g.id); err != nil {
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		ids = append(ids, g.id)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	return ids, nil
}

// Run sweeps expired files now and then every SweepInterval until ctx ends;
// it returns nil then. The owner of the Store runs it in a goroutine.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.sweepEvery)
	defer t.Stop()
	for {
		n, err := s.Sweep(ctx, s.now())
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Error("files: sweep expired files", "err", err)
		case n > 0:
			s.log.Info("files: swept expired files", "count", n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// reconcile removes what a crash left in the blob directory: part files of
// interrupted uploads, and blobs whose row was never inserted or already
// deleted. Other names are not ours and are left alone.
func (s *Store) reconcile(ctx context.Context) error {
	entries, err := os.ReadDir(s.blobDir)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	removed := 0
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		if id, ok := strings.CutSuffix(name, sealSuffix); ok && wellFormedID(id) {
			if err := s.finishSeal(ctx, id); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			continue
		}
		if id, ok := strings.CutSuffix(name, partSuffix); ok && wellFormedID(id) {
			if err := os.Remove(filepath.Join(s.blobDir, name)); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			removed++
			continue
		}
		if !wellFormedID(name) {
			continue
		}
		var one int
		err := s.db.QueryRowContext(ctx, `SELECT 1 FROM files WHERE id = ?`, name).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			if err := os.Remove(filepath.Join(s.blobDir, name)); err != nil {
				return fmt.Errorf("reconcile: %w", err)
			}
			removed++
			continue
		}
		if err != nil {
			return fmt.Errorf("reconcile: %w", err)
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
// is not found without asking the database, and never names a path.
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
