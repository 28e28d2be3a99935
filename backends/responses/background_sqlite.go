package responses

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// BackgroundComponent is the schema component (sqlitedb and pgdb) of the
// background runs' tables, beside the stored responses' in one database.
const BackgroundComponent = "responses_background"

// backgroundSQLiteMigrations[i] brings the SQLite schema from version i to
// i+1. Append only.
var backgroundSQLiteMigrations = []string{
	// 1: the runs and their stream events. lease_until is Unix
	// milliseconds of this process's clock (one node).
	`CREATE TABLE background_runs (
		id          TEXT PRIMARY KEY,
		owner       TEXT NOT NULL,
		created_at  INTEGER NOT NULL,          -- Unix seconds
		status      TEXT NOT NULL,
		stream      INTEGER NOT NULL,
		attempts    INTEGER NOT NULL DEFAULT 0,
		next_seq    INTEGER NOT NULL,
		request     BLOB NOT NULL,             -- sealed, as the snapshot and the rest
		input       BLOB NOT NULL,
		messages    BLOB NOT NULL,
		snapshot    BLOB NOT NULL,
		data_key    BLOB NOT NULL,             -- the wrapped data key
		lease_owner TEXT NOT NULL DEFAULT '',
		lease_until INTEGER NOT NULL DEFAULT 0
	) STRICT;
	CREATE INDEX background_runs_claim ON background_runs (created_at, id) WHERE status IN ('queued', 'in_progress');
	CREATE INDEX background_runs_owner ON background_runs (owner, status);
	CREATE TABLE background_events (
		run_id TEXT NOT NULL,
		seq    INTEGER NOT NULL,
		data   BLOB NOT NULL,
		PRIMARY KEY (run_id, seq)
	) STRICT, WITHOUT ROWID;`,
}

// SQLiteBackgroundStore is the BackgroundStore of one node: tables of its
// own in DATA_DIR/responses.db. Writes go through SQLite's single writer
// (transactions begin IMMEDIATE), so a claim and the writes it guards never
// interleave with another's; lease times are this process's clock.
type SQLiteBackgroundStore struct {
	db     *sql.DB
	eraser *sqlitedb.Eraser
	now    func() time.Time
}

var _ BackgroundStore = (*SQLiteBackgroundStore)(nil)

// OpenSQLiteBackgroundStore opens (creating and migrating) the background
// tables in dataDir/responses.db.
func OpenSQLiteBackgroundStore(ctx context.Context, dataDir string) (*SQLiteBackgroundStore, error) {
	if dataDir == "" {
		return nil, errors.New("responses: open background store: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("responses: open background store: %w", err)
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), BackgroundComponent, backgroundSQLiteMigrations)
	if err != nil {
		return nil, fmt.Errorf("responses: open background store: %w", err)
	}
	return &SQLiteBackgroundStore{db: db, eraser: sqlitedb.NewEraser(db), now: time.Now}, nil
}

// Close closes the database.
func (s *SQLiteBackgroundStore) Close() error { return s.db.Close() }

const bgRunColumns = `id, owner, created_at, status, stream, attempts, next_seq, request, input, messages, snapshot, data_key`

type scanner interface{ Scan(dest ...any) error }

func scanRun(row scanner) (BackgroundRun, error) {
	var r BackgroundRun
	var created int64
	err := row.Scan(&r.ID, &r.Owner, &created, &r.Status, &r.Stream, &r.Attempts, &r.NextSeq,
		&r.Request, &r.Input, &r.Messages, &r.Snapshot, &r.Key)
	r.CreatedAt = time.Unix(created, 0)
	return r, err
}

// Create is BackgroundStore.Create.
func (s *SQLiteBackgroundStore) Create(ctx context.Context, r BackgroundRun, maxActive int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM background_runs WHERE owner = ? AND status IN ('queued', 'in_progress')`,
		r.Owner).Scan(&n); err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	if n >= maxActive {
		return ErrTooManyRuns
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO background_runs (`+bgRunColumns+`) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?)`,
		r.ID, r.Owner, r.CreatedAt.Unix(), r.Status, r.Stream, r.NextSeq, r.Request, r.Input, r.Messages, r.Snapshot, r.Key); err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	if err := insertEvents(ctx, tx, r.ID, r.Events); err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	return nil
}

func insertEvents(ctx context.Context, tx *sql.Tx, id string, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO background_events (run_id, seq, data) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, ev := range evs {
		if _, err := stmt.ExecContext(ctx, id, ev.Seq, ev.Data); err != nil {
			return err
		}
	}
	return nil
}

// Get is BackgroundStore.Get.
func (s *SQLiteBackgroundStore) Get(ctx context.Context, owner, id string) (BackgroundRun, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, `SELECT `+bgRunColumns+` FROM background_runs WHERE id = ? AND owner = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return BackgroundRun{}, ErrNotFound
	}
	if err != nil {
		return BackgroundRun{}, fmt.Errorf("responses: background get %s: %w", id, err)
	}
	return r, nil
}

// Claim is BackgroundStore.Claim: the oldest claimable run, leased in the
// same (write) transaction.
func (s *SQLiteBackgroundStore) Claim(ctx context.Context, replica string, lease time.Duration) (BackgroundRun, bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return BackgroundRun{}, false, fmt.Errorf("responses: background claim: %w", err)
	}
	defer tx.Rollback()
	now := s.now()
	r, err := scanRun(tx.QueryRowContext(ctx, `SELECT `+bgRunColumns+` FROM background_runs
		WHERE status IN ('queued', 'in_progress') AND (lease_owner = '' OR lease_until < ?) ORDER BY created_at, id LIMIT 1`, now.UnixMilli()))
	if errors.Is(err, sql.ErrNoRows) {
		return BackgroundRun{}, false, nil
	}
	if err != nil {
		return BackgroundRun{}, false, fmt.Errorf("responses: background claim: %w", err)
	}
	r.Attempts++
	if _, err := tx.ExecContext(ctx, `UPDATE background_runs SET lease_owner = ?, lease_until = ?, attempts = ? WHERE id = ?`,
		replica, now.Add(lease).UnixMilli(), r.Attempts, r.ID); err != nil {
		return BackgroundRun{}, false, fmt.Errorf("responses: background claim: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return BackgroundRun{}, false, fmt.Errorf("responses: background claim: %w", err)
	}
	return r, true, nil
}

// Renew is BackgroundStore.Renew.
func (s *SQLiteBackgroundStore) Renew(ctx context.Context, id, replica string, lease time.Duration) (bool, error) {
	now := s.now()
	res, err := s.db.ExecContext(ctx, `UPDATE background_runs SET lease_until = ?
		WHERE id = ? AND lease_owner = ? AND lease_until >= ? AND status IN ('queued', 'in_progress')`,
		now.Add(lease).UnixMilli(), id, replica, now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("responses: background renew %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("responses: background renew %s: %w", id, err)
	}
	return n == 1, nil
}

// Advance is BackgroundStore.Advance.
func (s *SQLiteBackgroundStore) Advance(ctx context.Context, id, replica string, a Advance) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	defer tx.Rollback()
	var status, owner string
	var until, next int64
	err = tx.QueryRowContext(ctx, `SELECT status, lease_owner, lease_until, next_seq FROM background_runs WHERE id = ?`, id).
		Scan(&status, &owner, &until, &next)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	if owner != replica || until < s.now().UnixMilli() || terminalStatus(status) {
		return false, nil
	}
	if err := insertEvents(ctx, tx, id, a.Events); err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	if n := len(a.Events); n > 0 {
		next = max(next, a.Events[n-1].Seq+1)
	}
	q := `UPDATE background_runs SET next_seq = ?`
	args := []any{next}
	if a.Status != "" {
		q += `, status = ?`
		args = append(args, a.Status)
		if terminalStatus(a.Status) {
			q += `, lease_owner = '', lease_until = 0`
		}
	}
	if a.Snapshot != nil {
		q += `, snapshot = ?`
		args = append(args, a.Snapshot)
	}
	if _, err := tx.ExecContext(ctx, q+` WHERE id = ?`, append(args, id)...); err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	return true, nil
}

// Cancel is BackgroundStore.Cancel.
func (s *SQLiteBackgroundStore) Cancel(ctx context.Context, owner, id string, snapshot []byte) (bool, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("responses: background cancel %s: %w", id, err)
	}
	defer tx.Rollback()
	var status string
	err = tx.QueryRowContext(ctx, `SELECT status FROM background_runs WHERE id = ? AND owner = ?`, id, owner).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return false, ErrNotFound
	}
	if err != nil {
		return false, fmt.Errorf("responses: background cancel %s: %w", id, err)
	}
	if terminalStatus(status) {
		return false, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE background_runs SET status = 'cancelled', snapshot = ? WHERE id = ?`, snapshot, id); err != nil {
		return false, fmt.Errorf("responses: background cancel %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("responses: background cancel %s: %w", id, err)
	}
	return true, nil
}

// Events is BackgroundStore.Events.
func (s *SQLiteBackgroundStore) Events(ctx context.Context, owner, id string, after int64, limit int) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT e.seq, e.data FROM background_events e JOIN background_runs r ON r.id = e.run_id
		WHERE r.id = ? AND r.owner = ? AND e.seq > ? ORDER BY e.seq LIMIT ?`, id, owner, after, limit)
	if err != nil {
		return nil, fmt.Errorf("responses: background events %s: %w", id, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var ev Event
		if err := rows.Scan(&ev.Seq, &ev.Data); err != nil {
			return nil, fmt.Errorf("responses: background events %s: %w", id, err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("responses: background events %s: %w", id, err)
	}
	return out, nil
}

// Release is BackgroundStore.Release.
func (s *SQLiteBackgroundStore) Release(ctx context.Context, id, replica string) error {
	q, args := `UPDATE background_runs SET lease_owner = '', lease_until = 0 WHERE lease_owner = ?`, []any{replica}
	if id != "" {
		q, args = q+` AND id = ?`, append(args, id)
	}
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("responses: background release: %w", err)
	}
	return nil
}

// Delete is BackgroundStore.Delete; the deleted content is then erased
// from the WAL (sqlitedb.Eraser), as the stored responses' is.
func (s *SQLiteBackgroundStore) Delete(ctx context.Context, owner, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM background_runs WHERE id = ? AND owner = ?`, id, owner)
	if err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	} else if n == 0 {
		return ErrNotFound
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM background_events WHERE run_id = ?`, id); err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	}
	_ = s.eraser.Erase(context.WithoutCancel(ctx))
	return nil
}

// Sweep is BackgroundStore.Sweep.
func (s *SQLiteBackgroundStore) Sweep(ctx context.Context, before time.Time) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM background_events WHERE run_id IN
		(SELECT id FROM background_runs WHERE status NOT IN ('queued', 'in_progress') AND created_at < ?)`, before.Unix()); err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM background_runs WHERE status NOT IN ('queued', 'in_progress') AND created_at < ?`, before.Unix())
	if err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	if n > 0 {
		_ = s.eraser.Erase(context.WithoutCancel(ctx))
	}
	return n, nil
}
