package responses

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

const (
	// dbFile is the Responses service's own database inside the data
	// directory: its writes never wait on the files or batches stores.
	dbFile = "responses.db"
)

// SQLiteStore is the SQLite Store: DATA_DIR/responses.db, the Responses
// service's own database (its writes never wait on the files or batches
// stores), in WAL mode so reads (GET, chain walks) proceed while a create
// writes. Wrapped data keys are kept in its data_keys table (envelope), so
// key rotation (switchyard datakey) finds them; deletes are checkpointed
// out of the WAL (sqlitedb.Eraser).
type SQLiteStore struct {
	db     *sql.DB
	keys   *envelope.Keyring
	eraser *sqlitedb.Eraser
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLiteStore opens (creating and migrating) dataDir/responses.db.
// keys must hold the key-encryption keys of the data keys stored there; it
// also seals the rows a binary without encryption at rest wrote.
func OpenSQLiteStore(ctx context.Context, dataDir string, keys *envelope.Keyring) (*SQLiteStore, error) {
	if dataDir == "" {
		return nil, errors.New("responses: open store: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	// Stored conversations are the owners' data: sqlitedb creates the file
	// 0600.
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), "responses", migrations)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	if err := keys.Check(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	s := &SQLiteStore{db: db, keys: keys, eraser: sqlitedb.NewEraser(db)}
	if err := s.sealLegacy(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	return s, nil
}

// openStore is the default store of New: SQLite in dataDir, sealed under
// the keyring of dataDir (envelope.Load).
func openStore(ctx context.Context, dataDir string) (*store, error) {
	keys, err := envelope.Load(dataDir)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	raw, err := OpenSQLiteStore(ctx, dataDir, keys)
	if err != nil {
		return nil, err
	}
	return &store{raw: raw, keys: keys}, nil
}

// migrations[i] brings the schema from version i to i+1 (versioned by
// sqlitedb as component "responses"). Append only.
var migrations = []string{
	`CREATE TABLE responses (
		id          TEXT PRIMARY KEY,
		owner       TEXT NOT NULL,
		previous_id TEXT NOT NULL,   -- '' when the response starts a conversation
		created_at  INTEGER NOT NULL, -- Unix seconds
		expires_at  INTEGER NOT NULL, -- Unix seconds
		body        BLOB NOT NULL,    -- the Response object
		input       BLOB NOT NULL,    -- this response's input items, JSON array
		output      BLOB NOT NULL     -- its output items, JSON array
	) STRICT;
	CREATE INDEX responses_expires ON responses (expires_at);`,
	// 2: sealed responses. sealed is 1 when body, input and output are
	// sealed under the data key of the response's id; rows written before
	// are 0 until sealLegacy seals them on open.
	`ALTER TABLE responses ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX responses_unsealed ON responses (id) WHERE sealed = 0;`,
	// 3: the wrapped data keys.
	envelope.KeysMigration,
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// Put is Store.Put: the row and its key in one transaction.
func (s *SQLiteStore) Put(ctx context.Context, r Row) error {
	kekID, err := envelope.WrappedKEKID(r.Key)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`,
		r.ID, kekID, r.Key); err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO responses (id, owner, previous_id, created_at, expires_at, body, input, output, sealed)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)`,
		r.ID, r.Owner, r.PreviousID, r.CreatedAt.Unix(), r.ExpiresAt.Unix(), r.Body, r.Input, r.Output); err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	return nil
}

// Body is Store.Body. The row and its key are read in one statement: a
// row whose key is gone (a delete in progress) is absent.
func (s *SQLiteStore) Body(ctx context.Context, owner, id string, now time.Time) ([]byte, []byte, error) {
	var b, w []byte
	err := s.db.QueryRowContext(ctx,
		`SELECT r.body, k.wrapped FROM responses r JOIN data_keys k ON k.object_id = r.id
		 WHERE r.id = ? AND r.owner = ? AND r.expires_at > ?`,
		id, owner, now.Unix()).Scan(&b, &w)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	return b, w, nil
}

// Delete is Store.Delete.
func (s *SQLiteStore) Delete(ctx context.Context, owner, id string, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx,
		`DELETE FROM responses WHERE id = ? AND owner = ? AND expires_at > ?`, id, owner, now.Unix())
	if err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	} else if n == 0 {
		return ErrNotFound
	}
	if err := envelope.Delete(ctx, tx, id); err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	s.erase(ctx)
	return nil
}

// erase checkpoints deleted rows and keys out of the WAL (sqlitedb.Erase).
// The delete has happened either way: a checkpoint held back by a reader
// leaves the old pages to the next delete or sweep, so failure is not the
// client's error.
func (s *SQLiteStore) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	_ = s.eraser.Erase(context.WithoutCancel(ctx))
}

// Chain is Store.Chain: a recursive walk, first of the sizes, then of the
// content. A response whose key is gone ends the walk as a deleted one
// does.
func (s *SQLiteStore) Chain(ctx context.Context, owner, id string, now time.Time, lim ChainLimits) ([]Row, error) {
	const walk = `
		WITH RECURSIVE chain(id, previous_id, size, depth) AS (
			SELECT r.id, r.previous_id, length(r.input) + length(r.output) - ?, 0
			  FROM responses r JOIN data_keys k ON k.object_id = r.id
			 WHERE r.id = ? AND r.owner = ? AND r.expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, length(r.input) + length(r.output) - ?, c.depth + 1
			  FROM chain c JOIN responses r ON r.id = c.previous_id JOIN data_keys k ON k.object_id = r.id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)`
	// depth < MaxLen stops the walk at MaxLen+1 responses: one more than
	// allowed says the chain is too long, and a cycle (impossible with
	// generated ids) would end there too.
	var n, size int64
	if err := s.db.QueryRowContext(ctx, walk+`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM chain`,
		lim.Overhead, id, owner, now.Unix(), lim.Overhead, owner, now.Unix(), lim.MaxLen).Scan(&n, &size); err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	switch {
	case n == 0:
		return nil, ErrNotFound
	case n > int64(lim.MaxLen):
		return nil, ErrChainTooLong
	case lim.MaxBytes > 0 && size > lim.MaxBytes:
		return nil, ErrChainTooLarge
	}
	rows, err := s.db.QueryContext(ctx, `
		WITH RECURSIVE chain(id, previous_id, created_at, expires_at, input, output, wrapped, depth) AS (
			SELECT r.id, r.previous_id, r.created_at, r.expires_at, r.input, r.output, k.wrapped, 0
			  FROM responses r JOIN data_keys k ON k.object_id = r.id
			 WHERE r.id = ? AND r.owner = ? AND r.expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, r.created_at, r.expires_at, r.input, r.output, k.wrapped, c.depth + 1
			  FROM chain c JOIN responses r ON r.id = c.previous_id JOIN data_keys k ON k.object_id = r.id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)
		SELECT id, previous_id, created_at, expires_at, input, output, wrapped FROM chain ORDER BY depth DESC`,
		id, owner, now.Unix(), owner, now.Unix(), lim.MaxLen-1)
	if err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		r := Row{Owner: owner}
		var created, expires int64
		if err := rows.Scan(&r.ID, &r.PreviousID, &created, &expires, &r.Input, &r.Output, &r.Key); err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		r.CreatedAt, r.ExpiresAt = time.Unix(created, 0), time.Unix(expires, 0)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, ErrNotFound // deleted since the sizes were read
	}
	return out, nil
}

// Sweep is Store.Sweep.
func (s *SQLiteStore) Sweep(ctx context.Context, now time.Time) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx,
		`DELETE FROM data_keys WHERE object_id IN (SELECT id FROM responses WHERE expires_at <= ?)`, now.Unix()); err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM responses WHERE expires_at <= ?`, now.Unix())
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	if n > 0 || s.eraser.Pending() {
		s.erase(ctx)
	}
	return n, nil
}

// legacyBatch bounds one transaction of sealLegacy.
const legacyBatch = 100

// sealLegacy seals the rows a binary without encryption at rest wrote
// (sealed = 0), a batch per transaction, and then erases their plaintext
// from the files. It runs on open, before any read: the reads assume every
// row is sealed. This migration is SQLite's alone (no other store ever
// held plaintext), so it seals here rather than in the layer above.
func (s *SQLiteStore) sealLegacy(ctx context.Context) error {
	total := 0
	for {
		n, err := s.sealSome(ctx)
		if err != nil {
			return fmt.Errorf("seal stored responses: %w", err)
		}
		total += n
		if n < legacyBatch {
			break
		}
	}
	if total > 0 {
		s.erase(ctx)
	}
	return nil
}

func (s *SQLiteStore) sealSome(ctx context.Context) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, body, input, output FROM responses WHERE sealed = 0 LIMIT ?`, legacyBatch)
	if err != nil {
		return 0, err
	}
	var todo []Row
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.ID, &r.Body, &r.Input, &r.Output); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, r := range todo {
		// A key left by an interrupted attempt is replaced: its row was
		// never marked sealed.
		if err := envelope.Delete(ctx, tx, r.ID); err != nil {
			return 0, err
		}
		dk, err := s.keys.Create(ctx, tx, r.ID)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE responses SET body = ?, input = ?, output = ?, sealed = 1 WHERE id = ?`,
			dk.Seal(fieldBody, r.Body), dk.Seal(fieldInput, r.Input), dk.Seal(fieldOutput, r.Output), r.ID); err != nil {
			return 0, err
		}
	}
	return len(todo), tx.Commit()
}
