// Package sqlitedb owns opening the SQLite files Switchyard's stores keep
// in the data directory (keys, files, batches, responses, vector stores):
// created with mode 0600, in WAL mode, with a busy timeout, secure deletion
// and BEGIN IMMEDIATE transactions on every pooled connection, retried while another process
// opens the same file, and with each component's schema brought up to date
// by append-only migrations.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// BusyTimeout is how long a statement waits for another connection or
// process to release a lock before failing with SQLITE_BUSY. Writes are
// small, so waits are short in practice; this covers a checkpoint or a
// migration.
const BusyTimeout = 5 * time.Second

// ErrNewerSchema reports a database written by a newer binary: an older one
// must not write to a schema it does not know.
var ErrNewerSchema = errors.New("database schema is newer than this binary supports")

// Open opens, creating if necessary, the database at path (its directory
// with mode 0700, the file with 0600: it holds owners' data) and applies
// component's pending migrations. migrations[i] brings the component's
// tables from version i to i+1; append only, never edit one that shipped.
// Versions are kept per component in a schema_versions table, so several
// components may share one file.
func Open(ctx context.Context, path, component string, migrations []string) (*sql.DB, error) {
	// A relative path is resolved here, once, against the working directory:
	// the driver takes a file: URI, which has no relative form, so every
	// caller passing make run's default ".data" would otherwise open
	// "/.data/...".
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: %s: %w", path, err)
	}
	path = abs
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sqlitedb: create data directory %s: %w%s", filepath.Dir(path), err, hint(err))
	}
	// Create the file ourselves: SQLite would create it with 0644 (less the
	// umask), and it copies the main file's mode to the -wal and -shm files,
	// so getting this one right covers all three.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: open %s: %w%s", path, err, hint(err))
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("sqlitedb: %s: %w", path, err)
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlitedb: %s: %w", path, err)
	}
	// Some of SQLite's lock acquisitions during a journal mode change and
	// WAL recovery return SQLITE_BUSY at once instead of calling the busy
	// handler, so two processes opening a new file together need this retry
	// on top of busy_timeout.
	err = RetryBusy(ctx, func() error {
		if err := enableWAL(ctx, db); err != nil {
			return err
		}
		return migrate(ctx, db, component, migrations)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlitedb: %s: %w%s", path, err, hint(err))
	}
	return db, nil
}

// hint names the likely cause of an error opening a database file, for the
// operator reading the start-up failure.
func hint(err error) string {
	var se *sqlite.Error
	switch {
	case errors.Is(err, fs.ErrPermission):
		return " (hint: the user running switchyard cannot write there; choose another --data-dir or fix its owner)"
	case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_CANTOPEN:
		return " (hint: the directory must exist and be writable, and -wal/-shm files beside the database must be writable by this user)"
	case errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY:
		return " (hint: the database or its directory is read-only for this user)"
	}
	return ""
}

// DSN is the modernc.org/sqlite data source name for the file at path. The
// driver applies its parameters to every pooled connection, which matters
// because busy_timeout is per connection.
func DSN(path string) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(BusyTimeout.Milliseconds()))
	// journal_mode is deliberately not set here: WAL is a property of the
	// file, set once by Open. As a per-connection pragma it would make every
	// new pooled connection try to change the journal mode, which can fail
	// with SQLITE_BUSY without waiting while another process holds a lock.

	// BEGIN IMMEDIATE takes the write lock up front. With the default
	// deferred BEGIN, two read-then-write transactions can deadlock on the
	// lock upgrade, and SQLite then fails one with SQLITE_BUSY without
	// consulting busy_timeout.
	q.Set("_txlock", "immediate")
	// secure_delete zeroes deleted content (cells, freed and overflow
	// pages) instead of leaving it in free space, so a deleted response or
	// data key is gone from the file once Erase has checkpointed. It is per
	// connection, hence here. It costs extra writes on delete only.
	q.Add("_pragma", "secure_delete(1)")
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows drive paths: file:///C:/...
	}
	// A file: URI, rather than the bare path, so that a data directory
	// containing '?' or '%' cannot be mistaken for query parameters.
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// errNotWAL reports that SQLite declined to switch to WAL, which it does by
// returning the old mode rather than an error, typically because another
// connection holds a lock.
var errNotWAL = errors.New("journal mode is not wal")

// enableWAL switches the file to write-ahead logging, so readers proceed
// while a writer holds the write lock, and vice versa. The mode is stored
// in the file: a no-op for an existing database.
func enableWAL(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode); err != nil {
		return fmt.Errorf("set journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("%w (got %q)", errNotWAL, mode)
	}
	return nil
}

// migrate applies component's pending migrations in one transaction, which
// begins IMMEDIATE (see DSN): when two processes start together against a
// new file, one migrates while the other waits and then finds nothing to do.
func migrate(ctx context.Context, db *sql.DB, component string, migrations []string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_versions (
		component TEXT PRIMARY KEY,
		version   INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var version int
	err = tx.QueryRowContext(ctx, `SELECT version FROM schema_versions WHERE component = ?`, component).Scan(&version)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("migrate %s: %w (version %d, this binary knows %d)", component, ErrNewerSchema, version, len(migrations))
	}
	if version == len(migrations) {
		return nil
	}
	for v := version; v < len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate %s to version %d: %w", component, v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO schema_versions (component, version) VALUES (?, ?)
		 ON CONFLICT (component) DO UPDATE SET version = excluded.version`,
		component, len(migrations)); err != nil {
		return fmt.Errorf("migrate: write version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// RetryBusy calls f until it succeeds, fails with an error other than
// "database busy", ctx is done, or BusyTimeout has passed.
func RetryBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(BusyTimeout)
	wait := 5 * time.Millisecond
	for {
		err := f()
		if err == nil || !IsBusy(err) || time.Now().After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// IsBusy reports whether err means another connection holds a conflicting
// lock, so that retrying later may succeed.
func IsBusy(err error) bool {
	if errors.Is(err, errNotWAL) {
		return true
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	// The primary result code is the low byte of the extended one.
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

// Erase makes deleted content leave the database's files: callers run it
// after deleting owners' content (a stored response, a file's data key).
// secure_delete (see DSN) zeroes the deleted cells and freed pages, but in
// WAL mode the zeroed pages are new frames: the old ones, holding the
// content, stay in the -wal file and in the main file until a checkpoint
// copies the new pages over them. A TRUNCATE checkpoint does that and then
// cuts the -wal file to zero bytes. It waits (busy_timeout) for readers
// and writers; when one still holds it back, the content leaves at the next
// Erase that completes, and Erase reports ErrEraseIncomplete.
func Erase(ctx context.Context, db *sql.DB) error {
	var busy, logFrames, checkpointed int
	err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logFrames, &checkpointed)
	if err != nil {
		return fmt.Errorf("sqlitedb: erase: %w", err)
	}
	if busy != 0 {
		return ErrEraseIncomplete
	}
	return nil
}

// Eraser runs Erase for one database after its deletes, one at a time,
// and remembers a checkpoint that was held back (Pending), so that the
// store's periodic sweep can finish it even when no delete follows.
type Eraser struct {
	db      *sql.DB
	mu      sync.Mutex
	pending bool
}

// NewEraser returns an Eraser for db.
func NewEraser(db *sql.DB) *Eraser { return &Eraser{db: db} }

// Erase runs Erase, and records whether it completed.
func (e *Eraser) Erase(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	err := Erase(ctx, e.db)
	e.pending = err != nil
	return err
}

// Pending reports whether the last Erase did not complete.
func (e *Eraser) Pending() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pending
}

// ErrEraseIncomplete reports a checkpoint that another connection held
// back: the deleted content may still be in the -wal file until the next
// one.
var ErrEraseIncomplete = errors.New("sqlitedb: erase: checkpoint held back by another connection")
