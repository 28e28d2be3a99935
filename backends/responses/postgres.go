package responses

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresComponent is the pgdb component (schema version table) of the
// Postgres store.
const PostgresComponent = "responses"

// PostgresMigrations[i] brings the Postgres schema from version i to i+1
// (pgdb.Open). Append only.
var PostgresMigrations = []string{
	// 1: one row per stored response, its wrapped data key in the same row:
	// a row cannot exist without its key nor a key without its row, and
	// a delete removes both at once. Times are Unix seconds.
	`CREATE TABLE responses (
		id          text PRIMARY KEY,
		owner       text NOT NULL,
		previous_id text NOT NULL,  -- '' when the response starts a conversation
		created_at  bigint NOT NULL,
		expires_at  bigint NOT NULL,
		body        bytea NOT NULL, -- sealed Response object
		input       bytea NOT NULL, -- sealed input items
		output      bytea NOT NULL, -- sealed output items
		kek_id      text NOT NULL,  -- the key-encryption key that wrapped data_key
		data_key    bytea NOT NULL  -- the wrapped data key
	);
	CREATE INDEX responses_expires ON responses (expires_at);`,
}

// PostgresStore is the Store of a fleet: every replica of the backends
// reads and writes one PostgreSQL database, so a conversation continues
// with previous_response_id whichever replica served its previous turn.
// The expiry sweep runs on one replica at a time (an advisory lock).
//
// Deleted rows leave the table at once; their old tuples stay in the
// server's files until VACUUM reuses the space, and in the WAL and backups
// for their retention: the data key is deleted with the row, so what stays
// there is ciphertext whose key only such copies still hold.
type PostgresStore struct {
	pool *pgxpool.Pool
	own  bool // Close closes pool
}

var _ Store = (*PostgresStore)(nil)

// OpenPostgresStore connects to dsn (pgdb.Open) and migrates the
// responses tables. Close closes the pool.
func OpenPostgresStore(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("responses: open store: %w", err)
	}
	return &PostgresStore{pool: pool, own: true}, nil
}

// NewPostgresStore is a Store on a pool the caller opened with
// pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, ...) and
// closes itself; Close leaves it open.
func NewPostgresStore(pool *pgxpool.Pool) *PostgresStore {
	return &PostgresStore{pool: pool}
}

// Close closes the pool if the store opened it.
func (s *PostgresStore) Close() error {
	if s.own {
		s.pool.Close()
	}
	return nil
}

// Put is Store.Put: row and key are one row, one statement.
func (s *PostgresStore) Put(ctx context.Context, r Row) error {
	kekID, err := envelope.WrappedKEKID(r.Key)
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	// Retried while the database is briefly unreachable (pgdb.Retry, within
	// ctx): the response has been generated and charged, so losing it to a
	// failover would be worse than waiting. An attempt whose commit was
	// lost in transit makes the next one a duplicate of a random id: that
	// is this row, stored.
	attempt := 0
	err = pgdb.Retry(ctx, func() error {
		attempt++
		_, err := s.pool.Exec(ctx,
			`INSERT INTO responses (id, owner, previous_id, created_at, expires_at, body, input, output, kek_id, data_key)
			 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			r.ID, r.Owner, r.PreviousID, r.CreatedAt.Unix(), r.ExpiresAt.Unix(), r.Body, r.Input, r.Output, kekID, r.Key)
		if attempt > 1 && pgdb.IsUniqueViolation(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("responses: store %s: %w", r.ID, err)
	}
	return nil
}

// Body is Store.Body.
func (s *PostgresStore) Body(ctx context.Context, owner, id string, now time.Time) ([]byte, []byte, error) {
	var b, w []byte
	err := pgdb.Retry(ctx, func() error {
		return s.pool.QueryRow(ctx,
			`SELECT body, data_key FROM responses WHERE id = $1 AND owner = $2 AND expires_at > $3`,
			id, owner, now.Unix()).Scan(&b, &w)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrNotFound
	}
	if err != nil {
		return nil, nil, fmt.Errorf("responses: get %s: %w", id, err)
	}
	return b, w, nil
}

// Delete is Store.Delete.
func (s *PostgresStore) Delete(ctx context.Context, owner, id string, now time.Time) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM responses WHERE id = $1 AND owner = $2 AND expires_at > $3`,
		id, owner, now.Unix())
	if err != nil {
		return fmt.Errorf("responses: delete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// chainWalk is the recursive walk from $1 back through previous_id, of
// owner $2's responses live at $3, at most $4+1 deep: one more than
// allowed says the chain is too long (and would end a cycle, impossible
// with generated ids). $5 is the sealing overhead per row.
const chainWalk = `
	WITH RECURSIVE chain(id, previous_id, size, depth) AS (
		SELECT id, previous_id, length(input)::bigint + length(output) - $5, 0
		  FROM responses WHERE id = $1 AND owner = $2 AND expires_at > $3
		UNION ALL
		SELECT r.id, r.previous_id, length(r.input)::bigint + length(r.output) - $5, c.depth + 1
		  FROM chain c JOIN responses r ON r.id = c.previous_id
		 WHERE r.owner = $2 AND r.expires_at > $3 AND c.depth < $4
	)`

// Chain is Store.Chain: the sizes are walked first (length() reads no
// TOASTed content), the rows only when the chain is within its bounds; both
// in one REPEATABLE READ snapshot, so a delete between them cannot make
// the rows disagree with the bounds checked.
func (s *PostgresStore) Chain(ctx context.Context, owner, id string, now time.Time, lim ChainLimits) (out []Row, err error) {
	// A read: retried while the database is briefly unreachable.
	err = pgdb.Retry(ctx, func() error {
		out, err = s.chain(ctx, owner, id, now, lim)
		return err
	})
	return out, err
}

func (s *PostgresStore) chain(ctx context.Context, owner, id string, now time.Time, lim ChainLimits) ([]Row, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("responses: chain of %s: %w", id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var n, size int64
	if err := tx.QueryRow(ctx, chainWalk+`SELECT count(*), coalesce(sum(size), 0)::bigint FROM chain`,
		id, owner, now.Unix(), lim.MaxLen, lim.Overhead).Scan(&n, &size); err != nil {
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
	rows, err := tx.Query(ctx, chainWalk+`
		SELECT r.id, r.previous_id, r.created_at, r.expires_at, r.input, r.output, r.data_key
		  FROM chain c JOIN responses r ON r.id = c.id ORDER BY c.depth DESC`,
		id, owner, now.Unix(), lim.MaxLen-1, lim.Overhead)
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
		return nil, ErrNotFound
	}
	return out, nil
}

// sweepLock is the advisory lock key held while a replica sweeps.
var sweepLock = func() int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard.responses.sweep"))
	return int64(h.Sum64())
}()

// pgSweepBatch bounds the rows one sweep statement deletes, so a large
// backlog is deleted in short transactions.
const pgSweepBatch = 1000

// Sweep is Store.Sweep. One replica sweeps at a time: a replica that finds
// the sweep lock held by another returns 0 at once (the other is deleting
// the same rows). The lock is a session advisory lock, released when the
// sweep ends or its connection closes (a replica dying mid-sweep).
func (s *PostgresStore) Sweep(ctx context.Context, now time.Time) (int64, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, sweepLock).Scan(&locked); err != nil {
		return 0, fmt.Errorf("responses: sweep: %w", err)
	}
	if !locked {
		return 0, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, sweepLock); err != nil {
			// Closing the connection releases the lock.
			_ = conn.Conn().Close(uctx)
		}
	}()
	var total int64
	for {
		tag, err := conn.Exec(ctx, `DELETE FROM responses WHERE id IN (
			SELECT id FROM responses WHERE expires_at <= $1 LIMIT $2)`, now.Unix(), pgSweepBatch)
		if err != nil {
			return total, fmt.Errorf("responses: sweep: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pgSweepBatch {
			return total, nil
		}
	}
}
