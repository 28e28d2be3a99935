package files

import (
	"context"
	"database/sql"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// openDB opens (creating it with mode 0600) the metadata database at path in
// WAL mode with the schema up to date (sqlitedb). files.db is this package's
// alone (docs/backends-design.md: each store opens its own SQLite file, so a
// batch runner writing progress never waits on an upload's metadata write).
func openDB(ctx context.Context, path string) (*sql.DB, error) {
	return sqlitedb.Open(ctx, path, "files", migrations)
}

// migrations[i] brings the schema from version i to i+1. Append only: never
// edit a migration that has shipped. Versioned by sqlitedb as component "files".
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
	// 2: tombstones of deleted and swept files, kept for CursorRetention so
	// a list cursor naming one still resolves (List alone reads them). The
	// primary key serves cursor resolution, the gone_at index the sweeper.
	`CREATE TABLE file_tombstones (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		gone_at    INTEGER NOT NULL
	) STRICT;
	CREATE INDEX file_tombstones_gone ON file_tombstones (gone_at);`,
	// 3: sealed blobs. sealed is 1 when the blob is a sealed stream
	// (envelope) under the data key of the file's id; files written before
	// are 0 until sealLegacy seals them on open.
	`ALTER TABLE files ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX files_unsealed ON files (id) WHERE sealed = 0;`,
	// 4: the wrapped data keys.
	envelope.KeysMigration,
}
