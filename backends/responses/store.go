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

// Bounds of a conversation replayed through previous_response_id: every
// turn loads the whole chain into memory and re-sends it to the model, so
// a chain past either is refused with a 400 rather than silently cut
// (which would drop the conversation's start) or loaded whatever its size.
// Variables for the tests.
var (
	// maxChain bounds how many responses a chain may hold.
	maxChain = 1000
	// maxChainBytes bounds the stored input and output items of a chain
	// together: what one create request may carry.
	maxChainBytes int64 = maxRequestBody
)

// errChainTooLong and errChainTooLarge: the chain is past maxChain
// responses or maxChainBytes bytes.
var (
	errChainTooLong  = errors.New("responses: conversation too long")
	errChainTooLarge = errors.New("responses: conversation too large")
)

// errNotFound is a response id that is absent, expired, deleted or another
// owner's: the store does not tell them apart.
var errNotFound = errors.New("responses: not found")

// stored is one stored response.
type stored struct {
	ID, Owner, PreviousID string
	CreatedAt, ExpiresAt  time.Time
	// Body is the Response object as returned to the client.
	Body []byte
	// Input is this response's own input items (a JSON array), normalized
	// with ids; Output is its output items (a JSON array).
	Input, Output []byte
}

// store keeps responses in SQLite. A response's body, input and output are
// sealed (envelope) under a data key of its own, kept in the data_keys
// table under the response's id: deleting or sweeping a response deletes
// its key in the same transaction, then Erase checkpoints it out of the
// WAL.
type store struct {
	db     *sql.DB
	keys   *envelope.Keyring
	eraser *sqlitedb.Eraser
}

// Sealed fields of a response, bound into each ciphertext.
const (
	fieldBody   = "body"
	fieldInput  = "input"
	fieldOutput = "output"
)

func openStore(ctx context.Context, dataDir string) (*store, error) {
	if dataDir == "" {
		return nil, errors.New("responses: open store: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	// Stored conversations are the owners' data: sqlitedb creates the file
	// 0600, in WAL mode so reads (GET, chain walks) proceed while a create
	// writes.
	keys, err := envelope.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), "responses", migrations)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	if err := keys.Check(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	s := &store{db: db, keys: keys, eraser: sqlitedb.NewEraser(db)}
	if err := s.sealLegacy(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	return s, nil
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

func (s *store) close() error { return s.db.Close() }

func (s *store) put(ctx context.Context, r *stored) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	dk, err := s.keys.Create(ctx, tx, r.ID)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO responses (id, owner, previous_id, created_at, expires_at, body, input, output, sealed)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)`,
		r.ID, r.Owner, r.PreviousID, r.CreatedAt.Unix(), r.ExpiresAt.Unix(),
		dk.Seal(fieldBody, r.Body), dk.Seal(fieldInput, r.Input), dk.Seal(fieldOutput, r.Output)); err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	return nil
}

// open returns the plaintext of fields of response id as stored (sealed or
// not), in place.
func (s *store) open(ctx context.Context, id string, sealed bool, fields map[string]*[]byte) error {
	if !sealed {
		return nil
	}
	dk, err := s.keys.Get(ctx, s.db, id)
	if err != nil {
		return err
	}
	for name, v := range fields {
		pt, err := dk.Open(name, *v)
		if err != nil {
			return err
		}
		*v = pt
	}
	return nil
}

// body returns the stored Response object of owner's id, live at now.
func (s *store) body(ctx context.Context, owner, id string, now time.Time) ([]byte, error) {
	var b []byte
	var sealed bool
	err := s.db.QueryRowContext(ctx,
		`SELECT body, sealed FROM responses WHERE id = ? AND owner = ? AND expires_at > ?`,
		id, owner, now.Unix()).Scan(&b, &sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err == nil {
		err = s.open(ctx, id, sealed, map[string]*[]byte{fieldBody: &b})
	}
	if errors.Is(err, envelope.ErrNoKey) {
		return nil, errNotFound // deleted since the row was read
	}
	if err != nil {
		return nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	return b, nil
}

func (s *store) delete(ctx context.Context, owner, id string, now time.Time) error {
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
		return errNotFound
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
func (s *store) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	_ = s.eraser.Erase(context.WithoutCancel(ctx))
}

// chain returns the conversation that id ends: id's response and its
// ancestors through previous_response_id, oldest first, each with its input
// and output items. The walk stops at an ancestor that is gone (deleted or
// expired): that part of the history no longer exists. errNotFound when id
// itself is not owner's live response; errChainTooLong or errChainTooLarge
// when the chain is past maxLen responses or, maxBytes > 0, past maxBytes
// bytes of items: the sizes are checked before any item is read.
func (s *store) chain(ctx context.Context, owner, id string, now time.Time, maxLen int, maxBytes int64) ([]stored, error) {
	const walk = `
		WITH RECURSIVE chain(id, previous_id, size, depth) AS (
			SELECT id, previous_id, length(input) + length(output) - sealed * ?, 0 FROM responses
			 WHERE id = ? AND owner = ? AND expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, length(r.input) + length(r.output) - r.sealed * ?, c.depth + 1
			  FROM responses r JOIN chain c ON r.id = c.previous_id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)`
	// Sizes are the plaintext's: a sealed row's columns are each
	// SealOverhead longer.
	// depth < maxLen stops the walk at maxLen+1 responses: one more than
	// allowed says the chain is too long, and a cycle (impossible with
	// generated ids) would end there too.
	var n, size int64
	if err := s.db.QueryRowContext(ctx, walk+`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM chain`,
		2*envelope.SealOverhead, id, owner, now.Unix(), 2*envelope.SealOverhead, owner, now.Unix(), maxLen).Scan(&n, &size); err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	switch {
	case n == 0:
		return nil, errNotFound
	case n > int64(maxLen):
		return nil, errChainTooLong
	case maxBytes > 0 && size > maxBytes:
		return nil, errChainTooLarge
	}
	rows, err := s.db.QueryContext(ctx, `
		WITH RECURSIVE chain(id, previous_id, input, output, sealed, depth) AS (
			SELECT id, previous_id, input, output, sealed, 0 FROM responses
			 WHERE id = ? AND owner = ? AND expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, r.input, r.output, r.sealed, c.depth + 1
			  FROM responses r JOIN chain c ON r.id = c.previous_id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)
		SELECT id, previous_id, input, output, sealed FROM chain ORDER BY depth DESC`,
		id, owner, now.Unix(), owner, now.Unix(), maxLen-1)
	if err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	defer rows.Close()
	var out []stored
	var sealed []bool
	for rows.Next() {
		var r stored
		var sl bool
		if err := rows.Scan(&r.ID, &r.PreviousID, &r.Input, &r.Output, &sl); err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		r.Owner = owner
		out = append(out, r)
		sealed = append(sealed, sl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	rows.Close() // before open reads the keys: one connection at a time
	if len(out) == 0 {
		return nil, errNotFound
	}
	// Newest first, so that a response deleted since the walk (its key
	// gone) ends the chain there, as the walk itself would have.
	for i := len(out) - 1; i >= 0; i-- {
		r := &out[i]
		err := s.open(ctx, r.ID, sealed[i], map[string]*[]byte{fieldInput: &r.Input, fieldOutput: &r.Output})
		if errors.Is(err, envelope.ErrNoKey) {
			if i == len(out)-1 {
				return nil, errNotFound
			}
			return out[i+1:], nil
		}
		if err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
	}
	return out, nil
}

// sweep deletes responses expired at now and reports how many.
func (s *store) sweep(ctx context.Context, now time.Time) (int64, error) {
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
// from the files. Until it has run they are read as they are.
func (s *store) sealLegacy(ctx context.Context) error {
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

func (s *store) sealSome(ctx context.Context) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, body, input, output FROM responses WHERE sealed = 0 LIMIT ?`, legacyBatch)
	if err != nil {
		return 0, err
	}
	var todo []stored
	for rows.Next() {
		var r stored
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
