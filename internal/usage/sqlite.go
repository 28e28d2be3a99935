package usage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// dbFile is the data directory's shared database (the key store's too).
const dbFile = "switchyard.db"

// component is this package's row in schema_versions.
const component = "usage"

// migrations[i] brings the usage schema from version i to i+1. Append only.
var migrations = []string{
	// 1: daily rows. cost_micros is an integer so sums never drift.
	`CREATE TABLE usage_daily (
		day           TEXT NOT NULL,   -- YYYY-MM-DD, UTC
		key_id        TEXT NOT NULL,
		model         TEXT NOT NULL,
		limit_id      TEXT NOT NULL,   -- the key's rotation chain, for budgets
		requests      INTEGER NOT NULL,
		input_tokens  INTEGER NOT NULL,
		cached_tokens INTEGER NOT NULL,
		output_tokens INTEGER NOT NULL,
		errors        INTEGER NOT NULL,
		cost_micros   INTEGER NOT NULL,
		PRIMARY KEY (day, key_id, model)
	) STRICT;
	CREATE INDEX usage_daily_key ON usage_daily (key_id, day);
	CREATE INDEX usage_daily_limit ON usage_daily (day, limit_id);`,
}

// SQLite is the Store in the data directory's SQLite database.
type SQLite struct {
	db *sql.DB
}

// OpenSQLite opens, creating if necessary, the usage store in dataDir.
func OpenSQLite(ctx context.Context, dataDir string) (*SQLite, error) {
	if dataDir == "" {
		return nil, errors.New("usage: open: empty data directory")
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dataDir, dbFile), component, migrations)
	if err != nil {
		return nil, fmt.Errorf("usage: open: %w", err)
	}
	return &SQLite{db: db}, nil
}

// Close closes the database.
func (s *SQLite) Close() error { return s.db.Close() }

// Add implements Store.
func (s *SQLite) Add(ctx context.Context, rows []Row) error {
	if len(rows) == 0 {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("usage: add: %w", err)
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO usage_daily
		(day, key_id, model, limit_id, requests, input_tokens, cached_tokens, output_tokens, errors, cost_micros)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (day, key_id, model) DO UPDATE SET
			requests = requests + excluded.requests,
			input_tokens = input_tokens + excluded.input_tokens,
			cached_tokens = cached_tokens + excluded.cached_tokens,
			output_tokens = output_tokens + excluded.output_tokens,
			errors = errors + excluded.errors,
			cost_micros = cost_micros + excluded.cost_micros`)
	if err != nil {
		return fmt.Errorf("usage: add: %w", err)
	}
	defer stmt.Close()
	for _, r := range rows {
		if _, err := stmt.ExecContext(ctx, r.Day, r.KeyID, r.Model, r.LimitID, r.Requests, r.InputTokens,
			r.CachedTokens, r.OutputTokens, r.Errors, r.CostMicros); err != nil {
			return fmt.Errorf("usage: add: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("usage: add: %w", err)
	}
	return nil
}

// Query implements Reader.
func (s *SQLite) Query(ctx context.Context, q Query) ([]Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	until := q.Until
	if until == "" {
		until = "9999-12-31"
	}
	rows, err := s.db.QueryContext(ctx, `SELECT day, key_id, limit_id, model, requests, input_tokens, cached_tokens,
		output_tokens, errors, cost_micros FROM usage_daily
		WHERE (?1 = '' OR key_id = ?1) AND day >= ?2 AND day <= ?3
		ORDER BY day, key_id, model`, q.KeyID, q.Since, until)
	if err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	defer rows.Close()
	out := []Row{}
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.Day, &r.KeyID, &r.LimitID, &r.Model, &r.Requests, &r.InputTokens, &r.CachedTokens,
			&r.OutputTokens, &r.Errors, &r.CostMicros); err != nil {
			return nil, fmt.Errorf("usage: query: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	return out, nil
}

// MonthSpend implements Store.
func (s *SQLite) MonthSpend(ctx context.Context, monthStart string) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT limit_id, SUM(cost_micros) FROM usage_daily
		WHERE day >= ? AND day <= ? GROUP BY limit_id`, monthStart, monthEnd(monthStart))
	if err != nil {
		return nil, fmt.Errorf("usage: month spend: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("usage: month spend: %w", err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("usage: month spend: %w", err)
	}
	return out, nil
}

var _ Store = (*SQLite)(nil)
