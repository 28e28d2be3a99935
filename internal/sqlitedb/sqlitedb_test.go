package sqlitedb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
	want := "file:///data/odd%3Fdir%25/x.db?_busy_timeout=5000&_pragma=secure_delete%281%29&_txlock=immediate"
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

// TestDeletedContentLeavesTheFiles: once a row is deleted and Erase has
// run, its content is in none of the database's files, neither while the
// database is open (the WAL held it) nor after it is closed. Short rows
// live inside a page, long ones on overflow pages: both are checked.
func TestDeletedContentLeavesTheFiles(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(ctx, path, "test", []string{`CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL) STRICT`})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	short := "marker-short-7f3a9c"
	long := "marker-long-c41e02" + strings.Repeat("x", 20000)
	for i, body := range []string{"keep-1", short, "keep-2", long, "keep-3"} {
		if _, err := db.ExecContext(ctx, `INSERT INTO t (id, body) VALUES (?, ?)`, i, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// As after an automatic checkpoint: the rows are in the main file too.
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM t WHERE id IN (1, 3)`); err != nil {
		t.Fatal(err)
	}
	if err := Erase(ctx, db); err != nil {
		t.Fatal(err)
	}
	markers := []string{short, "marker-long-c41e02"}
	assertAbsent(t, "open", path, markers)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("rows kept: %d, %v", n, err)
	}
	db.Close()
	assertAbsent(t, "closed", path, markers)
}

func assertAbsent(t *testing.T, when, path string, markers []string) {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markers {
			if strings.Contains(string(b), m) {
				t.Errorf("%s: deleted content %q is still in %s", when, m, filepath.Base(p))
			}
		}
	}
}

// TestEraserPendingWhileAReaderHoldsBack: a reader on an old snapshot
// holds the checkpoint back, so the deleted content stays in the WAL and
// the Eraser says so; the next Erase after the reader is done removes it.
func TestEraserPendingWhileAReaderHoldsBack(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(ctx, path, "test", []string{`CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB NOT NULL) STRICT`})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const marker = "marker-held-back-91aa"
	if _, err := db.ExecContext(ctx, `INSERT INTO t (id, body) VALUES (1, ?), (2, ?)`, []byte(marker), []byte("other")); err != nil {
		t.Fatal(err)
	}
	e := NewEraser(db)
	if err := e.Erase(ctx); err != nil || e.Pending() {
		t.Fatalf("first Erase: %v, pending %v", err, e.Pending())
	}
	reader, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.ExecContext(ctx, `BEGIN DEFERRED`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := reader.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("reader: %d, %v", n, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM t WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := e.Erase(short); err == nil || !e.Pending() {
		t.Fatalf("Erase under a reader: %v, pending %v", err, e.Pending())
	}
	if _, err := reader.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	if err := e.Erase(ctx); err != nil || e.Pending() {
		t.Fatalf("Erase after the reader: %v, pending %v", err, e.Pending())
	}
	assertAbsent(t, "after the reader", path, []string{marker})
}
