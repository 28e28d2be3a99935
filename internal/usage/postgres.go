package usage

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresComponent is the pgdb component (schema version table) of the
// Postgres store.
const PostgresComponent = "usage"

// PostgresMigrations[i] brings the Postgres schema from version i to i+1
// (pgdb.Open). Append only.
var PostgresMigrations = []string{
	// 1: daily rows, as in SQLite. Days are text (YYYY-MM-DD, UTC) and
	// the text columns compare bytewise (COLLATE "C"), so both stores
	// filter and order alike whatever the database's locale; cost_micros
	// is an integer so sums never drift.
	`CREATE TABLE usage_daily (
		day           text COLLATE "C" NOT NULL,
		key_id        text COLLATE "C" NOT NULL,
		model         text COLLATE "C" NOT NULL,
		limit_id      text COLLATE "C" NOT NULL, -- the key's rotation chain, for budgets
		requests      bigint NOT NULL,
		input_tokens  bigint NOT NULL,
		cached_tokens bigint NOT NULL,
		output_tokens bigint NOT NULL,
		errors        bigint NOT NULL,
		cost_micros   bigint NOT NULL,
		PRIMARY KEY (day, key_id, model)
	);
	CREATE INDEX usage_daily_key ON usage_daily (key_id, day);
	CREATE INDEX usage_daily_limit ON usage_daily (day, limit_id);`,
}

// PostgresStore is the Store of a fleet: every replica adds its aggregate
// to the same rows, so usage reads and month spend (budgets) cover every
// replica's requests.
type PostgresStore struct {
	pool *pgxpool.Pool
}

var _ Store = (*PostgresStore)(nil)

// OpenPostgres connects to dsn (pgdb.Open) and migrates the usage table.
// Close closes the pool.
func OpenPostgres(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("usage: open: %w", err)
	}
	return &PostgresStore{pool: pool}, nil
}

// Close closes the pool.
func (s *PostgresStore) Close() error {
	s.pool.Close()
	return nil
}

// Add implements Store. Rows are written in (day, key, model) order, so
// two replicas flushing the same rows at once lock them in the same order
// and never deadlock.
func (s *PostgresStore) Add(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.KeyID, b.KeyID), cmp.Compare(a.Model, b.Model))
	})
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, r := range rows {
			b.Queue(`INSERT INTO usage_daily
				(day, key_id, model, limit_id, requests, input_tokens, cached_tokens, output_tokens, errors, cost_micros)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
				ON CONFLICT (day, key_id, model) DO UPDATE SET
					requests = usage_daily.requests + excluded.requests,
					input_tokens = usage_daily.input_tokens + excluded.input_tokens,
					cached_tokens = usage_daily.cached_tokens + excluded.cached_tokens,
					output_tokens = usage_daily.output_tokens + excluded.output_tokens,
					errors = usage_daily.errors + excluded.errors,
					cost_micros = usage_daily.cost_micros + excluded.cost_micros`,
				r.Day, r.KeyID, r.Model, r.LimitID, r.Requests, r.InputTokens, r.CachedTokens, r.OutputTokens, r.Errors, r.CostMicros)
		}
		return tx.SendBatch(ctx, &b).Close()
	})
	if err != nil {
		return fmt.Errorf("usage: add: %w", err)
	}
	return nil
}

// Query implements Reader.
func (s *PostgresStore) Query(ctx context.Context, q Query) ([]Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	until := q.Until
	if until == "" {
		until = "9999-12-31"
	}
	rows, err := s.pool.Query(ctx, `SELECT day, key_id, limit_id, model, requests, input_tokens, cached_tokens,
		output_tokens, errors, cost_micros FROM usage_daily
		WHERE ($1 = '' OR key_id = $1) AND day >= $2 AND day <= $3
		ORDER BY day, key_id, model`, q.KeyID, q.Since, until)
	if err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var u Row
		err := r.Scan(&u.Day, &u.KeyID, &u.LimitID, &u.Model, &u.Requests, &u.InputTokens, &u.CachedTokens,
			&u.OutputTokens, &u.Errors, &u.CostMicros)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	if out == nil {
		out = []Row{}
	}
	return out, nil
}

// MonthSpend implements Store.
func (s *PostgresStore) MonthSpend(ctx context.Context, monthStart string) (map[string]int64, error) {
	rows, err := s.pool.Query(ctx, `SELECT limit_id, SUM(cost_micros)::bigint FROM usage_daily
		WHERE day >= $1 AND day <= $2 GROUP BY limit_id`, monthStart, monthEnd(monthStart))
	if err != nil {
		return nil, fmt.Errorf("usage: month spend: %w", err)
	}
	out := map[string]int64{}
	var id string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("usage: month spend: %w", err)
	}
	return out, nil
}
