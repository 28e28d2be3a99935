// Package usage counts what every API key uses and spends: requests, input,
// cached and output tokens, errors and cost, per day (UTC), key and model.
//
// The hot path hands each request's usage to a Recorder, which only adds it
// to an aggregate in memory; the Recorder writes the aggregate to its Store
// every flush interval (and when it closes) in one transaction, so a request
// never waits for the database. The Recorder also keeps each key's
// month-to-date spend in memory, for budgets (MonthSpend).
//
// A Store persists the daily rows. SQLite (OpenSQLite, in the data
// directory's switchyard.db) is the one implementation so far; usagetest is
// the conformance suite any other (Postgres) must pass.
package usage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// DayLayout is how days are written: YYYY-MM-DD, UTC.
const DayLayout = time.DateOnly

// Row is one day's usage of one key on one model.
type Row struct {
	Day   string `json:"day"` // YYYY-MM-DD, UTC
	KeyID string `json:"key_id"`
	// LimitID is the key's rotation chain (keys.Key.LimitID): budgets are
	// counted on it, so rotating a key neither resets nor doubles its budget.
	LimitID  string `json:"limit_id"`
	Model    string `json:"model"`
	Requests int64  `json:"requests"`
	// InputTokens are the prompt tokens, cached ones included (as OpenAI's
	// usage counts them); CachedTokens are the part read from a provider's
	// prompt cache.
	InputTokens  int64 `json:"input_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// Errors are requests answered with a 4xx or 5xx status.
	Errors int64 `json:"errors"`
	// CostMicros is the cost in millionths of a US dollar.
	CostMicros int64 `json:"cost_micros"`
}

// add adds o's counts to r.
func (r *Row) add(o *Row) {
	r.Requests += o.Requests
	r.InputTokens += o.InputTokens
	r.CachedTokens += o.CachedTokens
	r.OutputTokens += o.OutputTokens
	r.Errors += o.Errors
	r.CostMicros += o.CostMicros
}

// Query selects rows. Days are inclusive, YYYY-MM-DD; empty means unbounded.
type Query struct {
	// KeyID selects one key's rows; empty selects every key's.
	KeyID string
	Since string
	Until string
}

// ErrInvalid is matched by errors about a Query the caller got wrong.
var ErrInvalid = errors.New("usage: invalid query")

// Validate checks the query's days.
func (q Query) Validate() error {
	for _, d := range []string{q.Since, q.Until} {
		if d == "" {
			continue
		}
		if _, err := time.Parse(DayLayout, d); err != nil {
			return fmt.Errorf("%w: %q is not a day (YYYY-MM-DD)", ErrInvalid, d)
		}
	}
	if q.Since != "" && q.Until != "" && q.Until < q.Since {
		return fmt.Errorf("%w: until %s is before since %s", ErrInvalid, q.Until, q.Since)
	}
	return nil
}

// Reader reads usage rows: the admin endpoint and the CLI use it.
type Reader interface {
	// Query returns the rows q selects, ordered by day, key id and model.
	Query(ctx context.Context, q Query) ([]Row, error)
}

// Store persists usage rows.
type Store interface {
	Reader
	// Add adds each row's counts to the stored row of its day, key and
	// model (creating it), all in one transaction: on error none is added.
	Add(ctx context.Context, rows []Row) error
	// MonthSpend returns the cost in micro-dollars of every limit id with
	// usage in the calendar month (UTC) that starts on the day monthStart
	// (YYYY-MM-01).
	MonthSpend(ctx context.Context, monthStart string) (map[string]int64, error)
	Close() error
}

// MonthStart is the first day of t's month (UTC), YYYY-MM-01.
func MonthStart(t time.Time) string {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC).Format(DayLayout)
}

// monthEnd is the last day of the month that starts on monthStart.
func monthEnd(monthStart string) string {
	t, _ := time.Parse(DayLayout, monthStart)
	return t.AddDate(0, 1, -1).Format(DayLayout)
}
