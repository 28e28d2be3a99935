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

const dbFile = "batches.db"

// SQLiteStore is the SQLite Store: the batches table of DATA_DIR/batches.db,
// a database of its own.
type SQLiteStore struct {
	db *sql.DB
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLiteStore opens (creating and migrating) dataDir/batches.db.
func OpenSQLiteStore(ctx context.Context, dataDir string) (*SQLiteStore, error) {
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
	return &SQLiteStore{db: db}, nil
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
	// The lease on a running batch (Claim): the replica and until when
	// (Unix nanoseconds).
	`ALTER TABLE batches ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
	ALTER TABLE batches ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;`,
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

const batchColumns = `id, owner, endpoint, model, input_file_id, completion_window, status,
	output_file_id, error_file_id, errors, metadata, output_expires_after,
	created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,
	cancelling_at, cancelled_at, total, completed, failed,
	input_tokens, cached_tokens, output_tokens, reasoning_tokens, total_tokens`

type scanner interface{ Scan(dest ...any) error }

func scanBatch(r scanner) (Batch, error) {
	var b Batch
	var errs, meta sql.NullString
	c := &b.Counts
	err := r.Scan(&b.ID, &b.Owner, &b.Endpoint, &b.Model, &b.InputFileID, &b.CompletionWindow, &b.Status,
		&b.OutputFileID, &b.ErrorFileID, &errs, &meta, &b.OutputExpiresAfter,
		&b.CreatedAt, &b.InProgressAt, &b.ExpiresAt, &b.FinalizingAt, &b.CompletedAt, &b.FailedAt, &b.ExpiredAt,
		&b.CancellingAt, &b.CancelledAt, &c.Total, &c.Completed, &c.Failed,
		&c.InputTokens, &c.CachedTokens, &c.OutputTokens, &c.ReasoningTokens, &c.TotalTokens)
	if err != nil {
		return Batch{}, err
	}
	if errs.Valid {
		if err := json.Unmarshal([]byte(errs.String), &b.Errors); err != nil {
			return Batch{}, fmt.Errorf("batch %s: errors: %w", b.ID, err)
		}
	}
	if meta.Valid {
		if err := json.Unmarshal([]byte(meta.String), &b.Metadata); err != nil {
			return Batch{}, fmt.Errorf("batch %s: metadata: %w", b.ID, err)
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

// Create is Store.Create: the checks and the insert share one IMMEDIATE
// transaction.
func (s *SQLiteStore) Create(ctx context.Context, b Batch, maxActive int, al *Allowance) error {
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
		return ErrLimit
	}
	if al != nil && al.LinesPerDay > 0 {
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

// checkAllowance reads the lines of b.Owner's batches in the window ending
// at b.CreatedAt and returns ErrAllowance if b's do not fit.
func checkAllowance(ctx context.Context, tx *sql.Tx, b Batch, al *Allowance) error {
	rows, err := tx.QueryContext(ctx, `SELECT created_at, lines FROM batches
		WHERE owner = ? AND created_at > ? AND lines > 0 AND NOT (status = ? AND in_progress_at = 0)
		ORDER BY created_at`, b.Owner, b.CreatedAt-AllowanceWindow, StatusFailed)
	if err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	defer rows.Close()
	var window []WindowEntry
	for rows.Next() {
		var e WindowEntry
		if err := rows.Scan(&e.CreatedAt, &e.Lines); err != nil {
			return fmt.Errorf("batches: insert: %w", err)
		}
		window = append(window, e)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("batches: insert: %w", err)
	}
	return FitAllowance(b, window, al)
}

// Get returns owner's batch id; another owner's is ErrNotFound.
func (s *SQLiteStore) Get(ctx context.Context, owner, id string) (Batch, error) {
	b, err := scanBatch(s.db.QueryRowContext(ctx,
		`SELECT `+batchColumns+` FROM batches WHERE id = ? AND owner = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return Batch{}, ErrNotFound
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batches: get: %w", err)
	}
	return b, nil
}

// Load returns batch id whoever owns it: the runner's read.
func (s *SQLiteStore) Load(ctx context.Context, id string) (Batch, error) {
	b, err := scanBatch(s.db.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM batches WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Batch{}, ErrNotFound
	}
	if err != nil {
		return Batch{}, fmt.Errorf("batches: load: %w", err)
	}
	return b, nil
}

// List returns up to limit of owner's batches, newest first, after the batch
// named by after ("" from the newest), and whether more follow.
func (s *SQLiteStore) List(ctx context.Context, owner, after string, limit int) ([]Batch, bool, error) {
	cursor := int64(1<<63 - 1)
	if after != "" {
		err := s.db.QueryRowContext(ctx, `SELECT seq FROM batches WHERE id = ? AND owner = ?`, after, owner).Scan(&cursor)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, ErrBadCursor
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
	var out []Batch
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

// Active returns the ids of the batches not in a terminal state, oldest
// first, for Run to pick up.
func (s *SQLiteStore) Active(ctx context.Context) ([]string, error) {
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

// IsActive reports whether batch id exists and is not in a terminal state
// (for sweeping leftover spool directories).
func (s *SQLiteStore) IsActive(ctx context.Context, id string) (bool, error) {
	var status string
	err := s.db.QueryRowContext(ctx, `SELECT status FROM batches WHERE id = ?`, id).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("batches: status: %w", err)
	}
	return !Terminal(status), nil
}

// sets turns ch into column assignments; the columns are constants of
// this file, never input.
func sets(ch Change) (cols []string, args []any, err error) {
	add := func(col string, val any) {
		cols = append(cols, col+" = ?")
		args = append(args, val)
	}
	if c := ch.Counts; c != nil {
		add("total", c.Total)
		add("completed", c.Completed)
		add("failed", c.Failed)
		add("input_tokens", c.InputTokens)
		add("cached_tokens", c.CachedTokens)
		add("output_tokens", c.OutputTokens)
		add("reasoning_tokens", c.ReasoningTokens)
		add("total_tokens", c.TotalTokens)
	}
	if ch.Total != nil {
		add("total", *ch.Total)
	}
	if ch.Model != nil {
		add("model", *ch.Model)
	}
	if ch.Errors != nil {
		errs, err := json.Marshal(ch.Errors)
		if err != nil {
			return nil, nil, err
		}
		add("errors", string(errs))
	}
	if ch.OutputFileID != nil {
		add("output_file_id", *ch.OutputFileID)
	}
	if ch.ErrorFileID != nil {
		add("error_file_id", *ch.ErrorFileID)
	}
	return cols, args, nil
}

// stampColumn is the timestamp column a status sets when a batch enters it
// (StampOf).
var stampColumn = map[string]string{
	StatusInProgress: "in_progress_at",
	StatusFinalizing: "finalizing_at",
	StatusCompleted:  "completed_at",
	StatusFailed:     "failed_at",
	StatusExpired:    "expired_at",
	StatusCancelling: "cancelling_at",
	StatusCancelled:  "cancelled_at",
}

// Transition is Store.Transition: the status is compared and set in one
// UPDATE.
func (s *SQLiteStore) Transition(ctx context.Context, id string, from []string, to string, now time.Time, ch Change) (bool, error) {
	cols := []string{"status = ?"}
	args := []any{to}
	if c, ok := stampColumn[to]; ok {
		cols = append(cols, c+" = ?")
		args = append(args, now.Unix())
	}
	chCols, chArgs, err := sets(ch)
	if err != nil {
		return false, fmt.Errorf("batches: %s -> %s: %w", id, to, err)
	}
	cols = append(cols, chCols...)
	args = append(args, chArgs...)
	if Terminal(to) {
		cols = append(cols, "lease_owner = ''", "lease_until = 0")
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

// Update is Store.Update.
func (s *SQLiteStore) Update(ctx context.Context, id string, ch Change) error {
	cols, args, err := sets(ch)
	if err != nil {
		return fmt.Errorf("batches: update %s: %w", id, err)
	}
	if len(cols) == 0 {
		return nil
	}
	args = append(args, id)
	if _, err := s.db.ExecContext(ctx, `UPDATE batches SET `+strings.Join(cols, ", ")+` WHERE id = ?`, args...); err != nil {
		return fmt.Errorf("batches: update %s: %w", id, err)
	}
	return nil
}

// Claim is Store.Claim: one UPDATE picks and leases the batch. Lease times
// are this process's clock (a single node).
func (s *SQLiteStore) Claim(ctx context.Context, replicaID string, lease time.Duration) (string, error) {
	now := time.Now()
	var id string
	err := s.db.QueryRowContext(ctx, `UPDATE batches SET lease_owner = ?, lease_until = ?
		WHERE seq = (SELECT seq FROM batches WHERE status IN (?, ?, ?, ?) AND (lease_owner = '' OR lease_until < ?)
			ORDER BY seq LIMIT 1)
		RETURNING id`, replicaID, now.Add(lease).UnixNano(),
		activeStatuses[0], activeStatuses[1], activeStatuses[2], activeStatuses[3], now.UnixNano()).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("batches: claim: %w", err)
	}
	return id, nil
}

// Renew is Store.Renew.
func (s *SQLiteStore) Renew(ctx context.Context, id, replicaID string, lease time.Duration) (bool, error) {
	now := time.Now()
	res, err := s.db.ExecContext(ctx, `UPDATE batches SET lease_until = ?
		WHERE id = ? AND lease_owner = ? AND lease_until >= ? AND status IN (?, ?, ?, ?)`,
		now.Add(lease).UnixNano(), id, replicaID, now.UnixNano(),
		activeStatuses[0], activeStatuses[1], activeStatuses[2], activeStatuses[3])
	if err != nil {
		return false, fmt.Errorf("batches: renew %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("batches: renew %s: %w", id, err)
	}
	return n == 1, nil
}

// Release is Store.Release.
func (s *SQLiteStore) Release(ctx context.Context, id, replicaID string) error {
	q, args := `UPDATE batches SET lease_owner = '', lease_until = 0 WHERE lease_owner = ?`, []any{replicaID}
	if id != "" {
		q += ` AND id = ?`
		args = append(args, id)
	}
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("batches: release %s: %w", id, err)
	}
	return nil
}
