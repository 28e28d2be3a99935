package sqlitedb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestOpenCreatesPrivateFileAndMigrates(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "x.db")
	m1 := []string{`CREATE TABLE a (id INTEGER PRIMARY KEY) STRICT`}
	db, err := Open(ctx, path, "alpha", m1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO a (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal mode %q, %v", mode, err)
	}
	db.Close()
	for p, want := range map[string]os.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v (%v)", p, fi.Mode().Perm(), want, err)
		}
	}

	// A second migration runs once, keeps the data; another component in
	// the same file has its own version.
	m2 := append(m1, `ALTER TABLE a ADD COLUMN b TEXT`)
	db, err = Open(ctx, path, "alpha", m2)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM a WHERE b IS NULL`).Scan(&n); err != nil || n != 1 {
		t.Errorf("rows after migration: %d, %v", n, err)
	}
	db.Close()
	db, err = Open(ctx, path, "beta", []string{`CREATE TABLE c (id INTEGER) STRICT`})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	// An older binary refuses a newer schema.
	if _, err := Open(ctx, path, "alpha", m1); !errors.Is(err, ErrNewerSchema) {
		t.Errorf("older binary: err = %v, want ErrNewerSchema", err)
	}
}

// TestConcurrentOpen: processes starting together against a new file all
// open it (the busy retries and the IMMEDIATE migration).
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	m := []string{`CREATE TABLE a (id INTEGER PRIMARY KEY) STRICT`}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			db, err := Open(ctx, path, "alpha", m)
			if err == nil {
				_, err = db.ExecContext(ctx, `INSERT INTO a DEFAULT VALUES`)
				db.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestDSNEscapesPath(t *testing.T) {
	got := DSN("/data/odd?dir%/x.db")
	want := "file:///data/odd%3Fdir%25/x.db?_busy_timeout=5000&_txlock=immediate"
	if got != want {
		t.Errorf("DSN = %q, want %q", got, want)
	}
}

// make run passes the relative ".data": Open must resolve it against the
// working directory, not the file system root.
func TestOpenRelativePath(t *testing.T) {
	t.Chdir(t.TempDir())
	db, err := Open(context.Background(), filepath.Join(".data", "x.db"), "test", []string{`CREATE TABLE t (x INTEGER) STRICT`})
	if err != nil {
		t.Fatalf("Open relative path: %v", err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(".data", "x.db-wal")); err != nil {
		t.Errorf("the WAL is not beside the relative path: %v", err)
	}
}

func TestOpenErrorNamesPathAndCause(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A data "directory" that is a file cannot be created by anyone, root
	// included, so this runs the same either way.
	_, err := Open(context.Background(), filepath.Join(blocker, "x.db"), "test", nil)
	if err == nil || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("Open under a file: %v, want an error naming %s", err, blocker)
	}
}
