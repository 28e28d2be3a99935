package vectorstores

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
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
	// 3: sealed chunk text. sealed_text is the chunk's text sealed
	// (envelope) under the data key of its attach generation (chunkKeyID),
	// text then ''; chunks written before have sealed_text NULL until
	// sealLegacy seals them on open.
	`ALTER TABLE chunks ADD COLUMN sealed_text BLOB;
	CREATE INDEX chunks_unsealed ON chunks (id) WHERE sealed_text IS NULL;`,
	// 4: the wrapped data keys.
	envelope.KeysMigration,
}

// chunkKeyID names the data key sealing the chunks of one attach
// generation of a file to a store: detaching the file, deleting the store
// or a failed indexing deletes it, and with it every chunk, at once.
func chunkKeyID(storeID, fileID string, gen int64) string {
	return storeKeyPrefix(storeID) + fileID + "/" + strconv.FormatInt(gen, 10)
}

// storeKeyPrefix starts the ids of every data key of store storeID.
func storeKeyPrefix(storeID string) string { return "vsf:" + storeID + "/" }

// chunkField binds a sealed chunk to its place in the file, so chunks
// cannot be reordered either.
func chunkField(seq int64) string { return "chunk:" + strconv.FormatInt(seq, 10) }

// erase checkpoints deleted keys and chunks out of the WAL
// (sqlitedb.Erase); one held back by a reader is left to the next delete
// or sweep.
func (s *Service) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	if err := s.eraser.Erase(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("vectorstores: erasing deleted data keys from the WAL is deferred to the next delete", "err", err)
	}
}

// sealLegacy seals the chunk text written before encryption at rest
// (sealed_text NULL), a batch per transaction, creating each generation's
// data key when it has none, then erases the plaintext from the files.
func (s *Service) sealLegacy(ctx context.Context) error {
	total := 0
	keys := map[string]*envelope.DataKey{}
	for {
		n, err := s.sealSome(ctx, keys)
		if err != nil {
			return fmt.Errorf("seal stored chunks: %w", err)
		}
		total += n
		if n < sweepBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("vectorstores: sealed chunks stored before encryption at rest", "count", total)
		s.erase(ctx)
	}
	return nil
}

func (s *Service) sealSome(ctx context.Context, keys map[string]*envelope.DataKey) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, store_id, file_id, gen, seq, text FROM chunks WHERE sealed_text IS NULL LIMIT ?`, sweepBatch)
	if err != nil {
		return 0, err
	}
	type chunk struct {
		id, gen, seq    int64
		store, file, tx string
	}
	var todo []chunk
	for rows.Next() {
		var c chunk
		if err := rows.Scan(&c.id, &c.store, &c.file, &c.gen, &c.seq, &c.tx); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	created := map[string]*envelope.DataKey{}
	for _, c := range todo {
		kid := chunkKeyID(c.store, c.file, c.gen)
		dk := keys[kid]
		if dk == nil {
			dk = created[kid]
		}
		if dk == nil {
			dk, err = s.keys.Get(ctx, tx, kid)
			if errors.Is(err, envelope.ErrNoKey) {
				dk, err = s.keys.Create(ctx, tx, kid)
			}
			if err != nil {
				return 0, err
			}
			created[kid] = dk
		}
		if _, err := tx.ExecContext(ctx, `UPDATE chunks SET text = '', sealed_text = ? WHERE id = ?`,
			dk.Seal(chunkField(c.seq), []byte(c.tx)), c.id); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	for k, v := range created {
		keys[k] = v
	}
	return len(todo), nil
}
