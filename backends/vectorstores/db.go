package vectorstores

import (
	"context"
	"database/sql"

	"github.com/switchyard-ai/switchyard/sqlitedb"
)

// openDB opens (creating it with mode 0600) the database at path in WAL
// mode with the schema up to date (sqlitedb). vectorstores.db is this
// package's alone (docs/backends-design.md: each store opens its own SQLite
// file), so indexing a large file never holds a lock another service waits
// on.
func openDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, "vectorstores", migrations)
}

// migrations[i] brings the schema from version i to i+1. Append only: never
// edit a migration that has shipped. Versioned by sqlitedb as component
// "vectorstores".
var migrations = []string{
	// 1: stores, their files and the files' chunks. Times are Unix
	// nanoseconds. A store's expires_at is last_active_at plus
	// expires_days, NULL without expires_after. A store_files row's gen is
	// random per attach; its chunks carry it, so chunks written by an
	// indexer that lost a race with a detach (or a detach and re-attach)
	// are never read, and the sweeper deletes them. vector is the unit-
	// length embedding as little-endian float32s.
	`CREATE TABLE stores (
		id             TEXT PRIMARY KEY,
		owner          TEXT NOT NULL,
		name           TEXT NOT NULL,
		description    TEXT NOT NULL,
		metadata       TEXT NOT NULL,
		created_at     INTEGER NOT NULL,
		last_active_at INTEGER NOT NULL,
		expires_days   INTEGER,
		expires_at     INTEGER
	) STRICT;
	CREATE INDEX stores_owner_created ON stores (owner, created_at, id);
	CREATE INDEX stores_expires ON stores (expires_at) WHERE expires_at IS NOT NULL;
	CREATE TABLE store_files (
		store_id      TEXT NOT NULL,
		file_id       TEXT NOT NULL,
		owner         TEXT NOT NULL,
		filename      TEXT NOT NULL,
		gen           INTEGER NOT NULL,
		status        TEXT NOT NULL,
		error_code    TEXT,
		error_message TEXT,
		chunk_tokens  INTEGER NOT NULL,
		overlap       INTEGER NOT NULL,
		usage_bytes   INTEGER NOT NULL,
		attributes    TEXT,
		created_at    INTEGER NOT NULL,
		PRIMARY KEY (store_id, file_id)
	) STRICT;
	CREATE INDEX store_files_created ON store_files (store_id, created_at, file_id);
	CREATE INDEX store_files_pending ON store_files (created_at) WHERE status = 'in_progress';
	CREATE TABLE chunks (
		id       INTEGER PRIMARY KEY,
		store_id TEXT NOT NULL,
		file_id  TEXT NOT NULL,
		gen      INTEGER NOT NULL,
		seq      INTEGER NOT NULL,
		text     TEXT NOT NULL,
		vector   BLOB NOT NULL
	) STRICT;
	CREATE INDEX chunks_file ON chunks (store_id, file_id, gen);`,
	// 2: each file's chunk count (of its current generation), so the
	// indexer can hold stores and owners to their chunk limits without
	// counting the chunks table; the owner index serves the owner's total.
	`ALTER TABLE store_files ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0;
	UPDATE store_files SET chunks = (SELECT COUNT(*) FROM chunks c
		WHERE c.store_id = store_files.store_id AND c.file_id = store_files.file_id AND c.gen = store_files.gen);
	CREATE INDEX store_files_owner ON store_files (owner);`,
}
