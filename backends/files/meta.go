package files

import (
	"context"
	"time"
)

// Metadata holds the files' rows, their wrapped data keys and the
// tombstones of deleted files. It is declared here, by the files service
// that consumes it; SQLiteMetadata (files.db) is the first implementation
// and filestest.RunMetadata the suite every implementation passes.
//
// It stores what it is given: validating input, choosing ids and times and
// deciding expiry are the service's. Times are kept to the nanosecond, in
// UTC. Errors for a missing row wrap ErrNotFound.
type Metadata interface {
	// Insert adds f's row and its wrapped data key, atomically: no reader
	// ever sees the row without its key. wrapped nil marks a file whose
	// blob is not sealed (written before encryption at rest).
	Insert(ctx context.Context, f File, wrapped []byte) error
	// Get returns owner's file id, expired or not; another owner's file is
	// not found.
	Get(ctx context.Context, owner, id string) (File, error)
	// DataKey returns the wrapped data key of file id: nil for a file
	// whose blob is not sealed, ErrNotFound once the file is deleted.
	DataKey(ctx context.Context, id string) ([]byte, error)
	// Delete removes owner's file id if it is live at now (not expired),
	// with its data key, and leaves a tombstone gone at now; ErrNotFound
	// otherwise. After it returns, the data key is erased from storage as
	// far as the implementation can (SQLite: out of its write-ahead log).
	Delete(ctx context.Context, owner, id string, now time.Time) error
	// List returns a page of owner's files live at now in the order of
	// (CreatedAt, ID), and whether more follow. q is already validated
	// (Limit 1..MaxListLimit, Order asc or desc, Purpose known or empty);
	// q.After, when set, is a file id (live, expired, or gone less than
	// CursorRetention before now) of owner's, and the page starts after it;
	// any other id is ErrNotFound.
	List(ctx context.Context, owner string, q ListQuery, now time.Time) ([]File, bool, error)
	// Exists reports whether a row, expired or not, names id: orphan
	// sweeps keep the blobs of those.
	Exists(ctx context.Context, id string) (bool, error)
	// SweepExpired deletes up to limit files expired at now (ExpiresAt at
	// or before it) with their data keys, leaving tombstones gone at now,
	// and returns their ids; the service then deletes their blobs.
	SweepExpired(ctx context.Context, now time.Time, limit int) ([]string, error)
	// SweepTombstones deletes up to limit tombstones gone at or before
	// before and returns how many it deleted.
	SweepTombstones(ctx context.Context, before time.Time, limit int) (int, error)
}
