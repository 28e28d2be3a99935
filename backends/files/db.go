package files

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
)

// busyTimeout is how long a statement waits for another connection to
// release a lock before failing with SQLITE_BUSY. Metadata writes are tiny,
// so this only needs to cover a checkpoint or a sweep batch.
const busyTimeout = 5 * time.Second

// openDB opens (creating it with mode 0600) the metadata database at path in
// WAL mode with the schema up to date. files.db is this package's alone
// (docs/backends-design.md: each store opens its own SQLite file, so a batch
// runner writing progress never waits on an upload's metadata write).
func openDB(ctx context.Context, path string) (*sql.DB, error) {
	// Create the file ourselves: SQLite would create it with 0644 (less the
	// umask), and it copies the main file's mode to the -wal and -shm files.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	// Some lock acquisitions during a journal mode change and WAL recovery
	// return SQLITE_BUSY at once instead of calling the busy handler, hence
	// a retry on top of busy_timeout.
	err = retryBusy(ctx, func() error {
		if err := enableWAL(ctx, db); err != nil {
			return err
		}
		return migrate(ctx, db)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return db, nil
}

// dsn builds the modernc.org/sqlite data source name; the driver applies the
// parameters to every pooled connection, which matters because busy_timeout
// is per connection.
func dsn(path string) string {
	q := url.Values{}
	q.Set("_busy_timeout", fmt.Sprint(busyTimeout.Milliseconds()))
	// BEGIN IMMEDIATE takes the write lock up front, so a read-then-write
	// transaction never fails on the lock upgrade without waiting.
	q.Set("_txlock", "immediate")
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // Windows drive paths: file:///C:/...
	}
	// A file: URI, so that a data directory containing '?' or '%' cannot be
	// mistaken for query parameters.
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// errNotWAL reports that SQLite declined to switch to WAL, which it does by
// returning the old mode rather than an error.
var errNotWAL = errors.New("journal mode is not wal")

// enableWAL switches the file to write-ahead logging, so listings and
// downloads read while an upload's row or a sweep is being written.
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

// retryBusy calls f until it succeeds, fails with an error other than
// "database busy", ctx is done, or busyTimeout has passed.
func retryBusy(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(busyTimeout)
	wait := 5 * time.Millisecond
	for {
		err := f()
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
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

// isBusy reports whether err means another connection holds a conflicting
// lock, so that retrying later may succeed.
func isBusy(err error) bool {
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

// migrations[i] brings the schema from version i to i+1. Append only: never
// edit a migration that has shipped. The version is PRAGMA user_version,
// which is enough because no other component shares files.db.
var migrations = []string{
	// 1: files. Times are Unix nanoseconds; expires_at NULL: kept until
	// deleted. The owner index serves listings (keyset on created_at, id)
	// and every owner-filtered lookup; the partial index serves the sweeper.
	`CREATE TABLE files (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		filename   TEXT NOT NULL,
		purpose    TEXT NOT NULL,
		bytes      INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		expires_at INTEGER
	) STRICT;
	CREATE INDEX files_owner_created ON files (owner, created_at, id);
	CREATE INDEX files_expires ON files (expires_at) WHERE expires_at IS NOT NULL;`,
}

func migrate(ctx context.Context, db *sql.DB) error {
	// IMMEDIATE (see dsn): two openers of a new file cannot both migrate.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version); err != nil {
		return fmt.Errorf("migrate: read version: %w", err)
	}
	if version > len(migrations) {
		// An older binary must not write to a schema it does not know.
		return fmt.Errorf("migrate: database schema version %d is newer than this binary supports (%d)",
			version, len(migrations))
	}
	if version == len(migrations) {
		return nil
	}
	for v := version; v < len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate to version %d: %w", v+1, err)
		}
	}
	// PRAGMA takes no bound parameters; the value is our own integer.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, len(migrations))); err != nil {
		return fmt.Errorf("migrate: write version: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}
