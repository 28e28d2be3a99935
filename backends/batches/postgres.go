package batches

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PGComponent is the pgdb component name of the batches tables.
const PGComponent = "batches"

// PostgresStore is the fleet Store: the batches table in a PostgreSQL
// database shared by every backends replica. Create serializes an owner's
// creates with a transaction-scoped advisory lock keyed by the owner, so
// the limit and allowance checks and the insert are atomic across
// replicas; Transition is one conditional UPDATE; Claim takes a lease with
// SELECT ... FOR UPDATE SKIP LOCKED. Lease times use the database's clock,
// so replicas with skewed clocks agree on when a lease expires.
type PostgresStore struct {
	pool  *pgxpool.Pool
	owned bool
}

var _ Store = (*PostgresStore)(nil)

// OpenPostgresStore opens the pool at dsn and migrates the batches tables.
// The store closes the pool.
func OpenPostgresStore(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, PGComponent, PGMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("batches: %w", err)
	}
	return &PostgresStore{pool: pool, owned: true}, nil
}

// NewPostgresStore uses pool, already migrated with PGMigrations under
// PGComponent (pgdb.Open). Close leaves the pool open.
func NewPostgresStore(pool *pgxpool.Pool) *PostgresStore { return &PostgresStore{pool: pool} }

// PGMigrations are the batches component's migrations (pgdb.Open): append
// only.
var PGMigrations = []string{
	// seq orders listings and claims and is the cursor's position. Lease:
	// lease_owner is the replica running the batch ('' for none) until
	// lease_until. results holds each line's result as it is recorded
	// (PostgresResults), keyed by custom_id (unique within a batch), so a
	// result is recorded once whichever replica records it.
	`CREATE TABLE batches (
		seq                  BIGSERIAL PRIMARY KEY,
		id                   TEXT NOT NULL UNIQUE,
		owner                TEXT NOT NULL,
		endpoint             TEXT NOT NULL,
		model                TEXT NOT NULL DEFAULT '',
		input_file_id        TEXT NOT NULL,
		completion_window    TEXT NOT NULL,
		status               TEXT NOT NULL,
		output_file_id       TEXT NOT NULL DEFAULT '',
		error_file_id        TEXT NOT NULL DEFAULT '',
		errors               JSONB,
		metadata             JSONB,
		output_expires_after BIGINT NOT NULL DEFAULT 0,
		created_at           BIGINT NOT NULL,
		in_progress_at       BIGINT NOT NULL DEFAULT 0,
		expires_at           BIGINT NOT NULL,
		finalizing_at        BIGINT NOT NULL DEFAULT 0,
		completed_at         BIGINT NOT NULL DEFAULT 0,
		failed_at            BIGINT NOT NULL DEFAULT 0,
		expired_at           BIGINT NOT NULL DEFAULT 0,
		cancelling_at        BIGINT NOT NULL DEFAULT 0,
		cancelled_at         BIGINT NOT NULL DEFAULT 0,
		total                BIGINT NOT NULL DEFAULT 0,
		completed            BIGINT NOT NULL DEFAULT 0,
		failed               BIGINT NOT NULL DEFAULT 0,
		input_tokens         BIGINT NOT NULL DEFAULT 0,
		cached_tokens        BIGINT NOT NULL DEFAULT 0,
		output_tokens        BIGINT NOT NULL DEFAULT 0,
		reasoning_tokens     BIGINT NOT NULL DEFAULT 0,
		total_tokens         BIGINT NOT NULL DEFAULT 0,
		lines                BIGINT NOT NULL DEFAULT 0,
		lease_owner          TEXT NOT NULL DEFAULT '',
		lease_until          TIMESTAMPTZ
	);
	CREATE INDEX batches_owner ON batches (owner, seq);
	CREATE INDEX batches_owner_created ON batches (owner, created_at);
	CREATE INDEX batches_runnable ON batches (seq) WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling');
	CREATE TABLE batch_results (
		batch_id  TEXT NOT NULL,
		custom_id TEXT NOT NULL,
		idx       BIGINT NOT NULL,
		kind      SMALLINT NOT NULL,
		line      BYTEA NOT NULL,
		PRIMARY KEY (batch_id, custom_id)
	);
	CREATE INDEX batch_results_order ON batch_results (batch_id, kind, idx);`,
	// The wrapped data key that seals a batch's result lines
	// (PostgresResults with a keyring), deleted with them.
	`CREATE TABLE batch_result_keys (
		batch_id TEXT PRIMARY KEY,
		wrapped  BYTEA NOT NULL
	);`,
}

// Close closes the pool if the store opened it.
func (s *PostgresStore) Close() error {
	if s.owned {
		s.pool.Close()
	}
	return nil
}

// Pool is the store's pool (for PostgresResults on the same database).
func (s *PostgresStore) Pool() *pgxpool.Pool { return s.pool }

func scanPGBatch(r pgx.Row) (Batch, error) {
	var b Batch
	var errs, meta []byte
	c := &b.Counts
	err := r.Scan(&b.ID, &b.Owner, &b.Endpoint, &b.Model, &b.InputFileID, &b.CompletionWindow, &b.Status,
		&b.OutputFileID, &b.ErrorFileID, &errs, &meta, &b.OutputExpiresAfter,
		&b.CreatedAt, &b.InProgressAt, &b.ExpiresAt, &b.FinalizingAt, &b.CompletedAt, &b.FailedAt, &b.ExpiredAt,
		&b.CancellingAt, &b.CancelledAt, &c.Total, &c.Completed, &c.Failed,
		&c.InputTokens, &c.CachedTokens, &c.OutputTokens, &c.ReasoningTokens, &c.TotalTokens)
	if err != nil {
		return Batch{}, err
	}
	if errs != nil {
		if err := json.Unmarshal(errs, &b.Errors); err != nil {
			return Batch{}, fmt.Errorf("batch %s: errors: %w", b.ID, err)
		}
	}
	if meta != nil {
		if err := json.Unmarshal(meta, &b.Metadata); err != nil {
			return Batch{}, fmt.Errorf("batch %s: metadata: %w", b.ID, err)
		}
	}
	return b, nil
}

// ownerLockClass is the first key of the advisory lock that serializes an
// owner's creates (the second is the owner's hash).
const ownerLockClass = 0x62617463 // "batc"

// Create is Store.Create: an advisory lock on the owner, held to the end
// of the transaction, makes the checks and the insert one step across
// replicas.
func (s *PostgresStore) Create(ctx context.Context, b Batch, maxActive int, al *Allowance) error {
	var meta []byte
	if b.Metadata != nil {
		j, err := json.Marshal(b.Metadata)
		if err != nil {
			return fmt.Errorf("batches: insert: %w", err)
		}
		meta = j
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, ownerLockClass, b.Owner); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM batches WHERE owner = $1 AND status = ANY($2)`,
			b.Owner, activeStatuses).Scan(&n); err != nil {
			return err
		}
		if n >= maxActive {
			return ErrLimit
		}
		if al != nil && al.LinesPerDay > 0 {
			rows, err := tx.Query(ctx, `SELECT created_at, lines FROM batches
				WHERE owner = $1 AND created_at > $2 AND lines > 0 AND NOT (status = $3 AND in_progress_at = 0)
				ORDER BY created_at`, b.Owner, b.CreatedAt-AllowanceWindow, StatusFailed)
			if err != nil {
				return err
			}
			window, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WindowEntry, error) {
				var e WindowEntry
				err := r.Scan(&e.CreatedAt, &e.Lines)
				return e, err
			})
			if err != nil {
				return err
			}
			if err := FitAllowance(b, window, al); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO batches
			(id, owner, endpoint, input_file_id, completion_window, status, metadata, output_expires_after, created_at, expires_at, lines)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			b.ID, b.Owner, b.Endpoint, b.InputFileID, b.CompletionWindow, b.Status, meta, b.OutputExpiresAfter,
			b.CreatedAt, b.ExpiresAt, b.Lines)
		return err
	})
	if errors.Is(err, ErrLimit) || errors.Is(err, ErrAllowance) {
		return err
	}
	if err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	return nil
}

// Get is Store.Get.
func (s *PostgresStore) Get(ctx context.Context, owner, id string) (Batch, error) {
	b, err := scanPGBatch(s.pool.QueryRow(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = $1 AND owner = $2`, id, owner))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, ErrNotFound
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batches: get: %w", err)
	}
	return b, nil
}

// Load is Store.Load.
func (s *PostgresStore) Load(ctx context.Context, id string) (Batch, error) {
	b, err := scanPGBatch(s.pool.QueryRow(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Batch{}, ErrNotFound
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batches: load: %w", err)
	}
	return b, nil
}

// List is Store.List.
func (s *PostgresStore) List(ctx context.Context, owner, after string, limit int) ([]Batch, bool, error) {
	cursor := int64(1<<63 - 1)
	if after != "" {
		err := s.pool.QueryRow(ctx, `SELECT seq FROM batches WHERE id = $1 AND owner = $2`, after, owner).Scan(&cursor)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, false, ErrBadCursor
		}
		if err != nil {
			return nil, false, fmt.Errorf("batches: list: %w", err)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+batchColumns+` FROM batches
		WHERE owner = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`, owner, cursor, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("batches: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Batch, error) { return scanPGBatch(r) })
	if err != nil {
		return nil, false, fmt.Errorf("batches: list: %w", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// Active is Store.Active.
func (s *PostgresStore) Active(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM batches WHERE status = ANY($1) ORDER BY seq`, activeStatuses)
	if err != nil {
		return nil, fmt.Errorf("batches: active: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("batches: active: %w", err)
	}
	return ids, nil
}

// IsActive is Store.IsActive.
func (s *PostgresStore) IsActive(ctx context.Context, id string) (bool, error) {
	var status string
	err := s.pool.QueryRow(ctx, `SELECT status FROM batches WHERE id = $1`, id).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("batches: status: %w", err)
	}
	return !Terminal(status), nil
}

// pgSets is sets with numbered placeholders starting at $n.
func pgSets(ch Change, n int) (cols []string, args []any, err error) {
	cols, args, err = sets(ch)
	if err != nil {
		return nil, nil, err
	}
	for i, c := range cols {
		cols[i] = strings.TrimSuffix(c, "?") + fmt.Sprintf("$%d", n+i)
		// errors is JSONB: a JSON text converts.
		if strings.HasPrefix(c, "errors ") {
			cols[i] += "::jsonb"
		}
	}
	return cols, args, nil
}

// Transition is Store.Transition: one conditional UPDATE. A batch that
// reaches a terminal state gives up its lease.
func (s *PostgresStore) Transition(ctx context.Context, id string, from []string, to string, now time.Time, ch Change) (bool, error) {
	cols := []string{"status = $1"}
	args := []any{to}
	if c, ok := stampColumn[to]; ok {
		cols = append(cols, c+" = $2")
		args = append(args, now.Unix())
	}
	if Terminal(to) {
		cols = append(cols, "lease_owner = ''", "lease_until = NULL")
	}
	chCols, chArgs, err := pgSets(ch, len(args)+1)
	if err != nil {
		return false, fmt.Errorf("batches: %s -> %s: %w", id, to, err)
	}
	cols = append(cols, chCols...)
	args = append(args, chArgs...)
	args = append(args, id, from)
	q := fmt.Sprintf(`UPDATE batches SET %s WHERE id = $%d AND status = ANY($%d)`, strings.Join(cols, ", "), len(args)-1, len(args))
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("batches: %s -> %s: %w", id, to, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Update is Store.Update.
func (s *PostgresStore) Update(ctx context.Context, id string, ch Change) error {
	cols, args, err := pgSets(ch, 1)
	if err != nil {
		return fmt.Errorf("batches: update %s: %w", id, err)
	}
	if len(cols) == 0 {
		return nil
	}
	args = append(args, id)
	q := fmt.Sprintf(`UPDATE batches SET %s WHERE id = $%d`, strings.Join(cols, ", "), len(args))
	if _, err := s.pool.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("batches: update %s: %w", id, err)
	}
	return nil
}

// Claim is Store.Claim: the oldest runnable batch without a live lease,
// locked with FOR UPDATE SKIP LOCKED so concurrent claims on other
// replicas pass over it instead of waiting, then leased.
func (s *PostgresStore) Claim(ctx context.Context, replicaID string, lease time.Duration) (string, error) {
	var id string
	err := s.pool.QueryRow(ctx, `UPDATE batches SET lease_owner = $1, lease_until = now() + $2 * interval '1 microsecond'
		WHERE seq = (SELECT seq FROM batches
			WHERE status = ANY($3) AND (lease_owner = '' OR lease_until < now())
			ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id`, replicaID, lease.Microseconds(), activeStatuses).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("batches: claim: %w", err)
	}
	return id, nil
}

// Renew is Store.Renew. A lease that has expired is not renewed even if no
// one took it: the replica may have been cut off long enough for another
// to start the batch.
func (s *PostgresStore) Renew(ctx context.Context, id, replicaID string, lease time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE batches SET lease_until = now() + $1 * interval '1 microsecond'
		WHERE id = $2 AND lease_owner = $3 AND lease_until >= now() AND status = ANY($4)`,
		lease.Microseconds(), id, replicaID, activeStatuses)
	if err != nil {
		return false, fmt.Errorf("batches: renew %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Release is Store.Release.
func (s *PostgresStore) Release(ctx context.Context, id, replicaID string) error {
	var err error
	if id == "" {
		_, err = s.pool.Exec(ctx, `UPDATE batches SET lease_owner = '', lease_until = NULL WHERE lease_owner = $1`, replicaID)
	} else {
		_, err = s.pool.Exec(ctx, `UPDATE batches SET lease_owner = '', lease_until = NULL WHERE id = $1 AND lease_owner = $2`, id, replicaID)
	}
	if err != nil {
		return fmt.Errorf("batches: release %s: %w", id, err)
	}
	return nil
}
