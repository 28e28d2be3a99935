package batches

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// Batch statuses (OpenAI's).
const (
	statusValidating = "validating"
	statusFailed     = "failed"
	statusInProgress = "in_progress"
	statusFinalizing = "finalizing"
	statusCompleted  = "completed"
	statusExpired    = "expired"
	statusCancelling = "cancelling"
	statusCancelled  = "cancelled"
)

// activeStatuses are the statuses that count against MaxActive and that Run
// picks up after a restart.
var activeStatuses = []string{statusValidating, statusInProgress, statusFinalizing, statusCancelling}

func terminal(status string) bool {
	switch status {
	case statusFailed, statusCompleted, statusExpired, statusCancelled:
		return true
	}
	return false
}

// stampColumn is the timestamp column a status sets when a batch enters it.
var stampColumn = map[string]string{
	statusInProgress: "in_progress_at",
	statusFinalizing: "finalizing_at",
	statusCompleted:  "completed_at",
	statusFailed:     "failed_at",
	statusExpired:    "expired_at",
	statusCancelling: "cancelling_at",
	statusCancelled:  "cancelled_at",
}

// batch is a stored batch. Timestamps are Unix seconds, 0 when unset.
type batch struct {
	ID, Owner, Endpoint, Model, InputFileID, CompletionWindow, Status string
	OutputFileID, ErrorFileID                                         string
	Errors                                                            []batchError
	CreatedAt, InProgressAt, ExpiresAt, FinalizingAt, CompletedAt     int64
	FailedAt, ExpiredAt, CancellingAt, CancelledAt                    int64
	Counts                                                            counts
	Metadata                                                          map[string]string
	// OutputExpiresAfter is the retention of the output and error files in
	// seconds, 0 for the default.
	OutputExpiresAfter int64
	// Lines is the input's request lines counted at create time (stored,
	// not read back: only the allowance check sums it).
	Lines int64
}

// batchError is one entry of a failed batch's errors.data.
type batchError struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"`
	Line    *int    `json:"line"`
}

// counts are a batch's progress: request_counts and usage.
type counts struct {
	Total, Completed, Failed                                              int64
	InputTokens, CachedTokens, OutputTokens, ReasoningTokens, TotalTokens int64
}

var (
	errNotFound  = errors.New("batches: not found")
	errLimit     = errors.New("batches: too many active batches")
	errAllowance = errors.New("batches: daily line allowance reached")
	errBadCursor = errors.New("batches: unknown cursor")
)

const dbFile = "batches.db"

// store is the SQLite batch table.
type store struct {
	db  *sql.DB
	dir string // the data directory, absolute
}

func openStore(ctx context.Context, dataDir string) (*store, error) {
	if dataDir == "" {
		return nil, errors.New("batches: open: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("batches: open: %w", err)
	}
	// Batch metadata is the owners' data: sqlitedb creates the file 0600.
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), "batches", migrations)
	if err != nil {
		return nil, fmt.Errorf("batches: open: %w", err)
	}
	return &store{db: db, dir: dir}, nil
}

// migrations[i] brings the schema from version i to i+1 (versioned by
// sqlitedb as component "batches"). Append only.
var migrations = []string{
	// seq orders listings (newest first) and is the pagination cursor's
	// position. errors and metadata are JSON, NULL when absent.
	`CREATE TABLE batches (
		seq                INTEGER PRIMARY KEY AUTOINCREMENT,
		id                 TEXT NOT NULL UNIQUE,
		owner              TEXT NOT NULL,
		endpoint           TEXT NOT NULL,
		model              TEXT NOT NULL DEFAULT '',
		input_file_id      TEXT NOT NULL,
		completion_window  TEXT NOT NULL,
		status             TEXT NOT NULL,
		output_file_id     TEXT NOT NULL DEFAULT '',
		error_file_id      TEXT NOT NULL DEFAULT '',
		errors             TEXT,
		metadata           TEXT,
		output_expires_after INTEGER NOT NULL DEFAULT 0,
		created_at         INTEGER NOT NULL,
		in_progress_at     INTEGER NOT NULL DEFAULT 0,
		expires_at         INTEGER NOT NULL,
		finalizing_at      INTEGER NOT NULL DEFAULT 0,
		completed_at       INTEGER NOT NULL DEFAULT 0,
		failed_at          INTEGER NOT NULL DEFAULT 0,
		expired_at         INTEGER NOT NULL DEFAULT 0,
		cancelling_at      INTEGER NOT NULL DEFAULT 0,
		cancelled_at       INTEGER NOT NULL DEFAULT 0,
		total              INTEGER NOT NULL DEFAULT 0,
		completed          INTEGER NOT NULL DEFAULT 0,
		failed             INTEGER NOT NULL DEFAULT 0,
		input_tokens       INTEGER NOT NULL DEFAULT 0,
		cached_tokens      INTEGER NOT NULL DEFAULT 0,
		output_tokens      INTEGER NOT NULL DEFAULT 0,
		reasoning_tokens   INTEGER NOT NULL DEFAULT 0,
		total_tokens       INTEGER NOT NULL DEFAULT 0
	) STRICT;
	CREATE INDEX batches_owner ON batches (owner, seq);
	CREATE INDEX batches_status ON batches (status);`,
	// lines is the input's request lines counted at create time, what the
	// batch draws from its owner's daily line allowance.
	`ALTER TABLE batches ADD COLUMN lines INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX batches_owner_created ON batches (owner, created_at);`,
}

func (s *store) close() error { return s.db.Close() }

const batchColumns = `id, owner, endpoint, model, input_file_id, completion_window, status,
	output_file_id, error_file_id, errors, metadata, output_expires_after,
	created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,
	cancelling_at, cancelled_at, total, completed, failed,
	input_tokens, cached_tokens, output_tokens, reasoning_tokens, total_tokens`

type scanner interface{ Scan(dest ...any) error }

func scanBatch(r scanner) (batch, error) {
	var b batch
	var errs, meta sql.NullString
	c := &b.Counts
	err := r.Scan(&b.ID, &b.Owner, &b.Endpoint, &b.Model, &b.InputFileID, &b.CompletionWindow, &b.Status,
		&b.OutputFileID, &b.ErrorFileID, &errs, &meta, &b.OutputExpiresAfter,
		&b.CreatedAt, &b.InProgressAt, &b.ExpiresAt, &b.FinalizingAt, &b.CompletedAt, &b.FailedAt, &b.ExpiredAt,
		&b.CancellingAt, &b.CancelledAt, &c.Total, &c.Completed, &c.Failed,
		&c.InputTokens, &c.CachedTokens, &c.OutputTokens, &c.ReasoningTokens, &c.TotalTokens)
	if err != nil {
		return batch{}, err
	}
	if errs.Valid {
		if err := json.Unmarshal([]byte(errs.String), &b.Errors); err != nil {
			return batch{}, fmt.Errorf("batch %s: errors: %w", b.ID, err)
		}
	}
	if meta.Valid {
		if err := json.Unmarshal([]byte(meta.String), &b.Metadata); err != nil {
			return batch{}, fmt.Errorf("batch %s: metadata: %w", b.ID, err)
		}
	}
	return b, nil
}

func nullJSON(v any, isNil bool) (sql.NullString, error) {
	if isNil {
		return sql.NullString{}, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return sql.NullString{}, err
	}
	return sql.NullString{String: string(j), Valid: true}, nil
}

// allowance is an owner's daily batch line allowance, as insert checks it.
type allowance struct {
	// linesPerDay is the most lines the owner's batches created in any 24
	// hours may hold; 0 or less: no allowance is checked.
	linesPerDay int64
	// used is filled in when insert refuses a batch: the lines counted in
	// the window, and when enough of them leave it for the batch to fit.
	used    int64
	resetAt int64
}

// allowanceWindow is the rolling window of the daily line allowance.
const allowanceWindow = 24 * 3600

// insert stores a new batch unless its owner already has maxActive batches
// not in a terminal state (errLimit), or the lines of the owner's batches
// created in the last 24 hours and b's would exceed al.linesPerDay
// (errAllowance, with al.used and al.resetAt set). Batches that failed
// validation (they never ran) do not count. The checks and the insert
// share one IMMEDIATE transaction, so concurrent creates cannot both pass
// them.
func (s *store) insert(ctx context.Context, b batch, maxActive int, al *allowance) error {
	meta, err := nullJSON(b.Metadata, b.Metadata == nil)
	if err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx,
		`SELECT count(*) FROM batches WHERE owner = ? AND status IN (?, ?, ?, ?)`,
		b.Owner, activeStatuses[0], activeStatuses[1], activeStatuses[2], activeStatuses[3]).Scan(&n); err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	if n >= maxActive {
		return errLimit
	}
	if al != nil && al.linesPerDay > 0 {
		if err := checkAllowance(ctx, tx, b, al); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO batches
		(id, owner, endpoint, input_file_id, completion_window, status, metadata, output_expires_after, created_at, expires_at, lines)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		b.ID, b.Owner, b.Endpoint, b.InputFileID, b.CompletionWindow, b.Status, meta, b.OutputExpiresAfter,
		b.CreatedAt, b.ExpiresAt, b.Lines); err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	return nil
}

// checkAllowance sums the lines of b.Owner's batches in the window ending
// at b.CreatedAt and returns errAllowance if b's do not fit.
func checkAllowance(ctx context.Context, tx *sql.Tx, b batch, al *allowance) error {
	rows, err := tx.QueryContext(ctx, `SELECT created_at, lines FROM batches
		WHERE owner = ? AND created_at > ? AND lines > 0 AND NOT (status = ? AND in_progress_at = 0)
		ORDER BY created_at`, b.Owner, b.CreatedAt-allowanceWindow, statusFailed)
	if err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	defer rows.Close()
	type entry struct{ at, lines int64 }
	var window []entry
	var used int64
	for rows.Next() {
		var e entry
		if err := rows.Scan(&e.at, &e.lines); err != nil {
			return fmt.Errorf("batches: insert: %w", err)
		}
		window = append(window, e)
		used += e.lines
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	if used+b.Lines <= al.linesPerDay {
		return nil
	}
	// The batch fits once the oldest batches leave the window.
	al.used, al.resetAt = used, b.CreatedAt+allowanceWindow
	left := used
	for _, e := range window {
		left -= e.lines
		if left+b.Lines <= al.linesPerDay {
			al.resetAt = e.at + allowanceWindow
			break
		}
	}
	return errAllowance
}

// get returns owner's batch id; another owner's is errNotFound.
func (s *store) get(ctx context.Context, owner, id string) (batch, error) {
	b, err := scanBatch(s.db.QueryRowContext(ctx,
		`SELECT `+batchColumns+` FROM batches WHERE id = ? AND owner = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return batch{}, errNotFound
	}
	if err != nil {
		return batch{}, fmt.Errorf("batches: get: %w", err)
	}
	return b, nil
}

// load returns batch id whoever owns it: the runner's read.
func (s *store) load(ctx context.Context, id string) (batch, error) {
	b, err := scanBatch(s.db.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return batch{}, errNotFound
	}
	if err != nil {
		return batch{}, fmt.Errorf("batches: load: %w", err)
	}
	return b, nil
}

// list returns up to limit of owner's batches, newest first, after the batch
// named by after ("" from the newest), and whether more follow.
func (s *store) list(ctx context.Context, owner, after string, limit int) ([]batch, bool, error) {
	cursor := int64(1<<63 - 1)
	if after != "" {
		err := s.db.QueryRowContext(ctx, `SELECT seq FROM batches WHERE id = ? AND owner = ?`, after, owner).Scan(&cursor)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, errBadCursor
		}
		if err != nil {
			return nil, false, fmt.Errorf("batches: list: %w", err)
		}
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+batchColumns+` FROM batches
		WHERE owner = ? AND seq < ? ORDER BY seq DESC LIMIT ?`, owner, cursor, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("batches: list: %w", err)
	}
	defer rows.Close()
	var out []batch
	for rows.Next() {
		b, err := scanBatch(rows)
		if err != nil {
			return nil, false, fmt.Errorf("batches: list: %w", err)
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("batches: list: %w", err)
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	return out, more, nil
}

// active returns the ids of the batches not in a terminal state, oldest
// first, for Run to pick up.
func (s *store) active(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM batches WHERE status IN (?, ?, ?, ?) ORDER BY seq`,
		activeStatuses[0], activeStatuses[1], activeStatuses[2], activeStatuses[3])
	if err != nil {
		return nil, fmt.Errorf("batches: active: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("batches: active: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("batches: active: %w", err)
	}
	return ids, nil
}

// activeBatch reports whether batch id exists and is not in a terminal state
// (for sweeping leftover spool directories).
func (s *store) activeBatch(ctx context.Context, id string) (bool, error) {
	var status string
	err := s.db.QueryRowContext(ctx, `SELECT status FROM batches WHERE id = ?`, id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("batches: status: %w", err)
	}
	return !terminal(status), nil
}

// set is a column assignment of an update; columns are constants of this
// file, never input.
type set struct {
	col string
	val any
}

func countSets(c counts) []set {
	return []set{{"total", c.Total}, {"completed", c.Completed}, {"failed", c.Failed},
		{"input_tokens", c.InputTokens}, {"cached_tokens", c.CachedTokens}, {"output_tokens", c.OutputTokens},
		{"reasoning_tokens", c.ReasoningTokens}, {"total_tokens", c.TotalTokens}}
}

// transition moves batch id to status to, stamping the status's timestamp
// with now and applying sets, if its status is one of from. It reports
// whether it did: the status is compared and set in one statement, so a
// cancel and the runner's own transitions never overwrite each other.
func (s *store) transition(ctx context.Context, id string, from []string, to string, now time.Time, sets ...set) (bool, error) {
	cols := []string{"status = ?"}
	args := []any{to}
	if c, ok := stampColumn[to]; ok {
		cols = append(cols, c+" = ?")
		args = append(args, now.Unix())
	}
	for _, st := range sets {
		cols = append(cols, st.col+" = ?")
		args = append(args, st.val)
	}
	args = append(args, id)
	q := `UPDATE batches SET ` + strings.Join(cols, ", ") + ` WHERE id = ? AND status IN (?` + strings.Repeat(", ?", len(from)-1) + `)`
	for _, f := range from {
		args = append(args, f)
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("batches: %s -> %s: %w", id, to, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("batches: %s -> %s: %w", id, to, err)
	}
	return n == 1, nil
}

// update applies sets to batch id without changing its status.
func (s *store) update(ctx context.Context, id string, sets ...set) error {
	cols := make([]string, 0, len(sets))
	args := make([]any, 0, len(sets)+1)
	for _, st := range sets {
		cols = append(cols, st.col+" = ?")
		args = append(args, st.val)
	}
	args = append(args, id)
	if _, err := s.db.ExecContext(ctx, `UPDATE batches SET `+strings.Join(cols, ", ")+` WHERE id = ?`, args...); err != nil {
		return fmt.Errorf("batches: update %s: %w", id, err)
	}
	return nil
}
