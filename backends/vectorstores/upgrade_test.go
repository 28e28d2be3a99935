package vectorstores

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// checkUpgraded: a file attached before file batches existed belongs to
// none, and joins a batch as it is.
func checkUpgraded(t *testing.T, s Store) {
	t.Helper()
	ctx := t.Context()
	now := time.Unix(1_750_000_000, 0)
	f, err := s.GetFile(ctx, "alice", "vs_old", "file-old", now)
	if err != nil || f.BatchID != "" || f.Status != StatusCompleted {
		t.Fatalf("old file after the upgrade: %+v, %v", f, err)
	}
	b, err := s.CreateBatch(ctx, BatchRow{ID: "vsfb_1", StoreID: "vs_old", Owner: "alice", CreatedAt: now}, now,
		[]FileRow{f, newFile("vs_old", "alice", "file-new", "n.txt", 800, 400, nil, now)})
	if err != nil || b.Counts != (Counts{InProgress: 1, Completed: 1, Total: 2}) {
		t.Fatalf("batch after the upgrade: %+v, %v", b, err)
	}
}

// TestSQLiteUpgradeToBatches migrates a database of the schema before file
// batches.
func TestSQLiteUpgradeToBatches(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), "vectorstores", migrations[:4])
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO stores (id, owner, name, description, metadata, created_at, last_active_at) VALUES ('vs_old', 'alice', '', '', '{}', 1, 1)`,
		`INSERT INTO store_files (store_id, file_id, owner, filename, gen, status, chunk_tokens, overlap, usage_bytes, created_at)
			VALUES ('vs_old', 'file-old', 'alice', 'o.txt', 7, 'completed', 800, 400, 0, 1)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	keys, err := envelope.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenSQLiteStore(ctx, dir, keys, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkUpgraded(t, s)
}

// TestPostgresUpgradeToBatches migrates a database of the schema before
// file batches.
func TestPostgresUpgradeToBatches(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	pool, err := pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations[:1], pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO vector_stores (id, owner, name, description, metadata, created_at, last_active_at) VALUES ('vs_old', 'alice', '', '', '{}', 1, 1)`,
		`INSERT INTO vector_store_files (store_id, file_id, owner, filename, gen, status, chunk_tokens, overlap, usage_bytes, created_at)
			VALUES ('vs_old', 'file-old', 'alice', 'o.txt', 7, 'completed', 800, 400, 0, 1)`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	pool.Close()
	s := openPG(t, dsn, "replica-a", PostgresOptions{})
	checkUpgraded(t, s)
}
