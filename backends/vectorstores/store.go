package vectorstores

import (
	"context"
	"errors"
	"time"
)

// Store is the state the Service consumes: vector stores, the files
// attached to them, the files' chunks with their embeddings, and the
// indexing work (files in_progress). The first implementation is SQLite
// (OpenSQLiteStore); vectorstorestest.Run is the conformance suite any
// implementation must pass.
//
// Encryption at rest is the Service's, above the Store: chunk text arrives
// sealed and each attach generation's data key wrapped (envelope), and a
// Store keeps both as opaque bytes. A generation's key is deleted with it
// (detach, store deletion or expiry, failed indexing) in the same atomic
// step, so its chunks are unreadable from then on even before SweepChunks
// deletes them.
//
// Every call a client's request leads to filters by owner, and a store
// past its ExpiresAt (at the now passed in) is absent everywhere, as if
// deleted: a *NotFoundError. Times are kept to the nanosecond.
// Implementations are safe for concurrent use.
type Store interface {
	// CreateStore inserts st and its files (in_progress) in one step.
	CreateStore(ctx context.Context, st StoreRow, files []FileRow) error
	// GetStore returns owner's live store id.
	GetStore(ctx context.Context, owner, id string, now time.Time) (StoreRow, error)
	// ModifyStore applies p to owner's live store id and returns it;
	// setting expires_after anchors ExpiresAt at LastActiveAt (ExpiryOf).
	ModifyStore(ctx context.Context, owner, id string, now time.Time, p StorePatch) (StoreRow, error)
	// DeleteStore deletes owner's live store id, its files and its data
	// keys; its chunks are left to SweepChunks.
	DeleteStore(ctx context.Context, owner, id string, now time.Time) error
	// ListStores returns a page of owner's live stores and whether more
	// follow. A cursor that is not one of them is an
	// *InvalidCursorError.
	ListStores(ctx context.Context, owner string, now time.Time, q ListQuery) ([]StoreRow, bool, error)
	// Counts returns store id's file counts by status and usage.
	Counts(ctx context.Context, id string) (Counts, error)
	// Touch records that store id was used at now, moving its expiry.
	Touch(ctx context.Context, id string, now time.Time) error

	// AttachFiles adds files to owner's live store id, skipping those
	// already attached, and returns each file's row (the existing one for
	// those). ErrStoreFull if the store would hold more than
	// MaxFilesPerStore files; then none is attached.
	AttachFiles(ctx context.Context, owner, id string, now time.Time, files []FileRow) ([]FileRow, error)
	// GetFile returns file fileID of owner's live store id, or a
	// *FileNotFoundError.
	GetFile(ctx context.Context, owner, id, fileID string, now time.Time) (FileRow, error)
	// SetAttributes replaces the attributes of file fileID of owner's
	// live store id (nil: none) and returns it.
	SetAttributes(ctx context.Context, owner, id, fileID string, now time.Time, attrs []byte) (FileRow, error)
	// DetachFile removes file fileID from owner's live store id with its
	// generation's data key; its chunks are unreachable at once and left
	// to SweepChunks.
	DetachFile(ctx context.Context, owner, id, fileID string, now time.Time) error
	// ListFiles returns a page of the files of owner's live store id (with
	// q.Status, of that status only; with q.BatchID, of that batch only,
	// a *BatchNotFoundError if it is not one of the store's batches). A
	// cursor that is not one of the listed files is an
	// *InvalidCursorError.
	ListFiles(ctx context.Context, owner, id string, now time.Time, q ListQuery) ([]FileRow, bool, error)

	// CreateBatch inserts file batch b into owner's live store b.StoreID
	// with its files in one step: those not yet attached are attached (as
	// AttachFiles, their BatchID b.ID), those already attached join b as
	// they are. It returns b with its Counts. ErrStoreFull, and nothing
	// changed, if the store would hold more than MaxFilesPerStore files.
	CreateBatch(ctx context.Context, b BatchRow, now time.Time, files []FileRow) (BatchRow, error)
	// GetBatch returns batch batchID of owner's live store id with its
	// Counts, or a *BatchNotFoundError.
	GetBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error)
	// CancelBatch cancels batch batchID of owner's live store id: in one
	// step its files still in progress become cancelled (their chunks and
	// data keys go; an indexer working on one finds it no longer in
	// progress and stops) and the batch records CancelledAt now. A batch
	// already cancelled is returned as it is; one with no file in
	// progress is ErrBatchDone, nothing changed.
	CancelBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error)

	// Pending returns up to limit files in_progress, oldest attached
	// first, of every owner: the indexing work.
	Pending(ctx context.Context, limit int) ([]Job, error)
	// ResetChunks starts (or restarts) indexing j: it deletes the chunks
	// of j's generation, zeroes its chunk count and replaces its data key
	// with key. ErrDetached, and nothing changed, if j's generation is no
	// longer attached.
	ResetChunks(ctx context.Context, j Job, key []byte) error
	// ChunkCounts returns the chunks held by store storeID and by all of
	// owner's stores, including those of files being indexed.
	ChunkCounts(ctx context.Context, storeID, owner string) (inStore, ofOwner int64, err error)
	// InsertChunks stores chunks of j in one step if j's generation is
	// still attached and in_progress (else ErrDetached) and check, called
	// with ChunkCounts as of that step, returns nil (else its error);
	// nothing is written otherwise.
	InsertChunks(ctx context.Context, j Job, chunks []Chunk, check func(inStore, ofOwner int64) error) error
	// Finish records j's outcome if j's generation is still attached and
	// in_progress: status (StatusCompleted or StatusFailed), last_error
	// code and message ("" for none) and usage. A file that did not
	// complete keeps no chunks and loses its data key.
	Finish(ctx context.Context, j Job, status, code, message string, usage int64) error

	// ChunkKeys returns the wrapped data keys of store storeID's attached
	// generations.
	ChunkKeys(ctx context.Context, storeID string) (map[FileGen][]byte, error)
	// ChunkKey returns one generation's wrapped data key, or an error
	// wrapping envelope.ErrNoKey.
	ChunkKey(ctx context.Context, storeID string, fg FileGen) ([]byte, error)
	// Scan calls fn with every chunk of store storeID's completed,
	// attached files, in no set order, streaming: it never holds more than
	// a chunk in memory. An error from fn ends the scan and is returned.
	Scan(ctx context.Context, storeID string, fn func(ScannedChunk) error) error

	// SweepStores deletes the stores expired at now with their files and
	// data keys, and reports how many.
	SweepStores(ctx context.Context, now time.Time) (int, error)
	// SweepChunks deletes the chunks and data keys no attached file
	// generation owns (detached files, deleted stores, lost indexing
	// races), and reports how many chunks.
	SweepChunks(ctx context.Context) (int, error)
	Close() error
}

// Statuses of a vector store file.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusFailed     = "failed"
	StatusCancelled  = "cancelled"
)

// StoreRow is a vector store.
type StoreRow struct {
	ID, Owner, Name, Description string
	Metadata                     []byte // a JSON object
	CreatedAt, LastActiveAt      time.Time
	ExpiresDays                  int       // 0: no expires_after
	ExpiresAt                    time.Time // zero: never
}

// FileRow is a file attached to a store. Gen is random per attach: chunks
// carry it, so chunks written by an indexer that lost a race with a detach
// (or a detach and re-attach) are never read.
type FileRow struct {
	StoreID, FileID, Owner, Filename string
	Gen                              int64
	Status                           string
	ErrCode, ErrMessage              string
	ChunkTokens, Overlap             int
	UsageBytes                       int64
	Attributes                       []byte // a JSON object, or nil
	CreatedAt                        time.Time
	BatchID                          string // the file batch it came with, "" for none
}

// BatchRow is a file batch: files attached to a store by one request. Its
// status is its files': Status.
type BatchRow struct {
	ID, StoreID, Owner string
	CreatedAt          time.Time
	CancelledAt        time.Time // zero: not cancelled
	Counts             Counts    // its files' (read; CreateBatch ignores it)
}

// Status is the batch's status, from its files: cancelled once cancelled,
// in_progress while a file is, else completed (failed files count as
// failed in its file_counts; the batch is still completed, as OpenAI's
// is).
func (b BatchRow) Status() string {
	switch {
	case !b.CancelledAt.IsZero():
		return StatusCancelled
	case b.Counts.InProgress > 0:
		return StatusInProgress
	}
	return StatusCompleted
}

// Counts are a store's file_counts and usage_bytes.
type Counts struct {
	InProgress, Completed, Failed, Cancelled, Total int64
	UsageBytes                                      int64
}

// add counts n files of status using b bytes.
func (c *Counts) add(status string, n, b int64) {
	switch status {
	case StatusInProgress:
		c.InProgress = n
	case StatusCompleted:
		c.Completed = n
	case StatusFailed:
		c.Failed = n
	case StatusCancelled:
		c.Cancelled = n
	}
	c.Total += n
	c.UsageBytes += b
}

// ListQuery selects a page of a list, OpenAI's way: Limit items, ordered by
// creation (then id) descending or ascending, after or before an item's
// id.
type ListQuery struct {
	Limit         int
	Desc          bool
	After, Before string
	Status        string // files only: the filter parameter
	BatchID       string // files only: the files of this batch
}

// StorePatch is a modify request: nil fields are left as they are.
type StorePatch struct {
	Name        *string
	Metadata    []byte
	SetExpiry   bool
	ExpiresDays int // with SetExpiry; 0 removes expires_after
}

// Job is a file to index: an in_progress file generation.
type Job struct {
	StoreID, FileID, Owner, Filename string
	Gen                              int64
	ChunkTokens, Overlap             int
}

// FileGen names one attach generation of a file: what a data key seals.
type FileGen struct {
	FileID string
	Gen    int64
}

// Chunk is one chunk of a file as stored: Seq is its place in the file,
// Sealed its text sealed under the generation's data key, Vector its
// embedding (encodeVector).
type Chunk struct {
	Seq    int64
	Sealed []byte
	Vector []byte
}

// ScannedChunk is a chunk as Scan reads it, with its file's name and
// attributes.
type ScannedChunk struct {
	FileID, Filename string
	Gen, Seq         int64
	Attributes       []byte // a JSON object, or nil
	Sealed, Vector   []byte
	// Text is set instead of Sealed only for a chunk stored in the clear
	// before encryption at rest (SQLite's legacy rows, sealed when the
	// store opens); other implementations never set it.
	Text string
}

// ExpiryOf is when a store last active at lastActive with expires_after
// days expires; zero (never) without.
func ExpiryOf(lastActive time.Time, days int) time.Time {
	if days <= 0 {
		return time.Time{}
	}
	return lastActive.Add(time.Duration(days) * 24 * time.Hour)
}

// InvalidCursorError is an after/before id that names no item of the list.
type InvalidCursorError struct{ Param, ID string }

func (e *InvalidCursorError) Error() string {
	return "vectorstores: no such " + e.Param + " id " + e.ID
}

// FileNotFoundError is a vector store file that is not attached.
type FileNotFoundError struct{ ID string }

func (e *FileNotFoundError) Error() string {
	return "vectorstores: vector store file " + e.ID + " not found"
}

// BatchNotFoundError is a file batch that is not one of the store's.
type BatchNotFoundError struct{ ID string }

func (e *BatchNotFoundError) Error() string {
	return "vectorstores: vector store file batch " + e.ID + " not found"
}

var (
	// ErrBatchDone is a cancel of a batch with no file left in progress.
	ErrBatchDone = errors.New("vectorstores: file batch no longer in progress")
	// ErrStoreFull is an attach past MaxFilesPerStore.
	ErrStoreFull = errors.New("vectorstores: store full")
	// ErrDetached is indexing work whose file generation was detached (or
	// its store deleted) meanwhile.
	ErrDetached = errors.New("vectorstores: file detached while indexing")
)
