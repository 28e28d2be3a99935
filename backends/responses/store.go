package responses

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/switchyard-ai/switchyard/sqlitedb"
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

// store keeps responses in SQLite.
type store struct {
	db *sql.DB
}

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
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), "responses", migrations)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	return &store{db: db}, nil
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
}

func (s *store) close() error { return s.db.Close() }

func (s *store) put(ctx context.Context, r *stored) error {
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO responses (id, owner, previous_id, created_at, expires_at, body, input, output)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Owner, r.PreviousID, r.CreatedAt.Unix(), r.ExpiresAt.Unix(), r.Body, r.Input, r.Output)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	return nil
}

// body returns the stored Response object of owner's id, live at now.
func (s *store) body(ctx context.Context, owner, id string, now time.Time) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx,
		`SELECT body FROM responses WHERE id = ? AND owner = ? AND expires_at > ?`,
		id, owner, now.Unix()).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	return b, nil
}

func (s *store) delete(ctx context.Context, owner, id string, now time.Time) error {
	res, err := s.db.ExecContext(ctx,
		`DELETE FROM responses WHERE id = ? AND owner = ? AND expires_at > ?`, id, owner, now.Unix())
	if err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	} else if n == 0 {
		return errNotFound
	}
	return nil
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
			SELECT id, previous_id, length(input) + length(output), 0 FROM responses
			 WHERE id = ? AND owner = ? AND expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, length(r.input) + length(r.output), c.depth + 1
			  FROM responses r JOIN chain c ON r.id = c.previous_id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)`
	// depth < maxLen stops the walk at maxLen+1 responses: one more than
	// allowed says the chain is too long, and a cycle (impossible with
	// generated ids) would end there too.
	var n, size int64
	if err := s.db.QueryRowContext(ctx, walk+`SELECT COUNT(*), COALESCE(SUM(size), 0) FROM chain`,
		id, owner, now.Unix(), owner, now.Unix(), maxLen).Scan(&n, &size); err != nil {
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
		WITH RECURSIVE chain(id, previous_id, input, output, depth) AS (
			SELECT id, previous_id, input, output, 0 FROM responses
			 WHERE id = ? AND owner = ? AND expires_at > ?
			UNION ALL
			SELECT r.id, r.previous_id, r.input, r.output, c.depth + 1
			  FROM responses r JOIN chain c ON r.id = c.previous_id
			 WHERE r.owner = ? AND r.expires_at > ? AND c.depth < ?
		)
		SELECT id, previous_id, input, output FROM chain ORDER BY depth DESC`,
		id, owner, now.Unix(), owner, now.Unix(), maxLen-1)
	if err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	defer rows.Close()
	var out []stored
	for rows.Next() {
		var r stored
		if err := rows.Scan(&r.ID, &r.PreviousID, &r.Input, &r.Output); err != nil {
			return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
		}
		r.Owner = owner
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, errNotFound
	}
	return out, nil
}

// sweep deletes responses expired at now and reports how many.
func (s *store) sweep(ctx context.Context, now time.Time) (int64, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM responses WHERE expires_at <= ?`, now.Unix())
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	return n, nil
}
