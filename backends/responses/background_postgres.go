package responses

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// BackgroundPostgresMigrations[i] brings the Postgres schema of the
// background runs (component BackgroundComponent) from version i to i+1.
// Append only.
var BackgroundPostgresMigrations = []string{
	// 1: the runs and their stream events. Leases use the database's
	// clock, so replicas with skewed clocks agree on when one expires.
	`CREATE TABLE background_runs (
		id          text PRIMARY KEY,
		owner       text NOT NULL,
		created_at  bigint NOT NULL,   -- Unix seconds
		status      text NOT NULL,
		stream      boolean NOT NULL,
		attempts    integer NOT NULL DEFAULT 0,
		next_seq    bigint NOT NULL,
		request     bytea NOT NULL,    -- sealed, as the snapshot and the rest
		input       bytea NOT NULL,
		messages    bytea NOT NULL,
		snapshot    bytea NOT NULL,
		data_key    bytea NOT NULL,    -- the wrapped data key
		lease_owner text NOT NULL DEFAULT '',
		lease_until timestamptz
	);
	CREATE INDEX background_runs_claim ON background_runs (created_at, id) WHERE status IN ('queued', 'in_progress');
	CREATE INDEX background_runs_owner ON background_runs (owner) WHERE status IN ('queued', 'in_progress');
	CREATE INDEX background_runs_ended ON background_runs (created_at) WHERE status NOT IN ('queued', 'in_progress');
	CREATE TABLE background_events (
		run_id text NOT NULL,
		seq    bigint NOT NULL,
		data   bytea NOT NULL,
		PRIMARY KEY (run_id, seq)
	);`,
}

// PostgresBackgroundStore is the BackgroundStore of a fleet: every replica
// claims runs from one database (SELECT ... FOR UPDATE SKIP LOCKED), so a
// run created on one replica runs on any, and a dead replica's runs are
// taken over by the others once its leases expire.
type PostgresBackgroundStore struct {
	pool *pgxpool.Pool
	own  bool
}

var _ BackgroundStore = (*PostgresBackgroundStore)(nil)

// OpenPostgresBackgroundStore connects to dsn (pgdb.Open) and migrates the
// background tables. Close closes the pool.
func OpenPostgresBackgroundStore(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresBackgroundStore, error) {
	pool, err := pgdb.Open(ctx, dsn, BackgroundComponent, BackgroundPostgresMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("responses: open background store: %w", err)
	}
	return &PostgresBackgroundStore{pool: pool, own: true}, nil
}

// Close closes the pool if the store opened it.
func (s *PostgresBackgroundStore) Close() error {
	if s.own {
		s.pool.Close()
	}
	return nil
}

// Create is BackgroundStore.Create. The owner's count and the insert are
// serialized per owner (a transaction advisory lock), so concurrent
// creates on several replicas cannot pass the bound together.
func (s *PostgresBackgroundStore) Create(ctx context.Context, r BackgroundRun, maxActive int) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('switchyard.responses.background:' || $1, 0))`, r.Owner); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM background_runs WHERE owner = $1 AND status IN ('queued', 'in_progress')`,
			r.Owner).Scan(&n); err != nil {
			return err
		}
		if n >= maxActive {
			return ErrTooManyRuns
		}
		if _, err := tx.Exec(ctx, `INSERT INTO background_runs (`+bgRunColumns+`) VALUES ($1, $2, $3, $4, $5, 0, $6, $7, $8, $9, $10, $11)`,
			r.ID, r.Owner, r.CreatedAt.Unix(), r.Status, r.Stream, r.NextSeq, r.Request, r.Input, r.Messages, r.Snapshot, r.Key); err != nil {
			return err
		}
		return pgInsertEvents(ctx, tx, r.ID, r.Events)
	})
	if errors.Is(err, ErrTooManyRuns) {
		return err
	}
	if err != nil {
		return fmt.Errorf("responses: background create %s: %w", r.ID, err)
	}
	return nil
}

func pgInsertEvents(ctx context.Context, tx pgx.Tx, id string, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	seqs := make([]int64, len(evs))
	data := make([][]byte, len(evs))
	for i, ev := range evs {
		seqs[i], data[i] = ev.Seq, ev.Data
	}
	_, err := tx.Exec(ctx, `INSERT INTO background_events (run_id, seq, data) SELECT $1, * FROM unnest($2::bigint[], $3::bytea[])`,
		id, seqs, data)
	return err
}

// Get is BackgroundStore.Get.
func (s *PostgresBackgroundStore) Get(ctx context.Context, owner, id string) (r BackgroundRun, err error) {
	err = pgdb.Retry(ctx, func() error {
		r, err = scanRun(s.pool.QueryRow(ctx, `SELECT `+bgRunColumns+` FROM background_runs WHERE id = $1 AND owner = $2`, id, owner))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return BackgroundRun{}, ErrNotFound
	}
	if err != nil {
		return BackgroundRun{}, fmt.Errorf("responses: background get %s: %w", id, err)
	}
	return r, nil
}

// Claim is BackgroundStore.Claim: the oldest claimable run, locked with FOR
// UPDATE SKIP LOCKED so concurrent claims on other replicas pass over it,
// then leased.
func (s *PostgresBackgroundStore) Claim(ctx context.Context, replica string, lease time.Duration) (BackgroundRun, bool, error) {
	r, err := scanRun(s.pool.QueryRow(ctx, `UPDATE background_runs SET lease_owner = $1,
			lease_until = now() + $2 * interval '1 microsecond',
			attempts = attempts + 1
		WHERE id = (SELECT id FROM background_runs
			WHERE status IN ('queued', 'in_progress') AND (lease_owner = '' OR lease_until < now())
			ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING `+bgRunColumns, replica, lease.Microseconds()))
	if errors.Is(err, pgx.ErrNoRows) {
		return BackgroundRun{}, false, nil
	}
	if err != nil {
		return BackgroundRun{}, false, fmt.Errorf("responses: background claim: %w", err)
	}
	return r, true, nil
}

// Renew is BackgroundStore.Renew.
func (s *PostgresBackgroundStore) Renew(ctx context.Context, id, replica string, lease time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE background_runs SET lease_until = now() + $1 * interval '1 microsecond'
		WHERE id = $2 AND lease_owner = $3 AND lease_until >= now() AND status IN ('queued', 'in_progress')`,
		lease.Microseconds(), id, replica)
	if err != nil {
		return false, fmt.Errorf("responses: background renew %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Advance is BackgroundStore.Advance: the run's row locked, its lease
// checked, then the events and the new state written, in one transaction.
func (s *PostgresBackgroundStore) Advance(ctx context.Context, id, replica string, a Advance) (bool, error) {
	ok := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var live bool
		var next int64
		err := tx.QueryRow(ctx, `SELECT lease_owner = $2 AND lease_until >= now() AND status IN ('queued', 'in_progress'), next_seq
			FROM background_runs WHERE id = $1 FOR UPDATE`, id, replica).Scan(&live, &next)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil || !live {
			return err
		}
		if err := pgInsertEvents(ctx, tx, id, a.Events); err != nil {
			return err
		}
		if n := len(a.Events); n > 0 {
			next = max(next, a.Events[n-1].Seq+1)
		}
		terminal := a.Status != "" && terminalStatus(a.Status)
		if _, err := tx.Exec(ctx, `UPDATE background_runs SET next_seq = $2,
				status = CASE WHEN $3 = '' THEN status ELSE $3 END,
				snapshot = coalesce($4, snapshot),
				lease_owner = CASE WHEN $5 THEN '' ELSE lease_owner END,
				lease_until = CASE WHEN $5 THEN NULL ELSE lease_until END
			WHERE id = $1`, id, next, a.Status, a.Snapshot, terminal); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("responses: background advance %s: %w", id, err)
	}
	return ok, nil
}

// Cancel is BackgroundStore.Cancel.
func (s *PostgresBackgroundStore) Cancel(ctx context.Context, owner, id string, snapshot []byte) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE background_runs SET status = 'cancelled', snapshot = $3
		WHERE id = $1 AND owner = $2 AND status IN ('queued', 'in_progress')`, id, owner, snapshot)
	if err != nil {
		return false, fmt.Errorf("responses: background cancel %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	if _, err := s.Get(ctx, owner, id); err != nil {
		return false, err
	}
	return false, nil
}

// Events is BackgroundStore.Events.
func (s *PostgresBackgroundStore) Events(ctx context.Context, owner, id string, after int64, limit int) ([]Event, error) {
	var out []Event
	err := pgdb.Retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, `SELECT e.seq, e.data FROM background_events e JOIN background_runs r ON r.id = e.run_id
			WHERE r.id = $1 AND r.owner = $2 AND e.seq > $3 ORDER BY e.seq LIMIT $4`, id, owner, after, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var ev Event
			if err := rows.Scan(&ev.Seq, &ev.Data); err != nil {
				return err
			}
			out = append(out, ev)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("responses: background events %s: %w", id, err)
	}
	return out, nil
}

// Release is BackgroundStore.Release.
func (s *PostgresBackgroundStore) Release(ctx context.Context, id, replica string) error {
	var err error
	if id == "" {
		_, err = s.pool.Exec(ctx, `UPDATE background_runs SET lease_owner = '', lease_until = NULL WHERE lease_owner = $1`, replica)
	} else {
		_, err = s.pool.Exec(ctx, `UPDATE background_runs SET lease_owner = '', lease_until = NULL WHERE id = $1 AND lease_owner = $2`, id, replica)
	}
	if err != nil {
		return fmt.Errorf("responses: background release: %w", err)
	}
	return nil
}

// Delete is BackgroundStore.Delete.
func (s *PostgresBackgroundStore) Delete(ctx context.Context, owner, id string) error {
	found := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM background_runs WHERE id = $1 AND owner = $2`, id, owner)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		found = true
		_, err = tx.Exec(ctx, `DELETE FROM background_events WHERE run_id = $1`, id)
		return err
	})
	if err != nil {
		return fmt.Errorf("responses: background delete %s: %w", id, err)
	}
	if !found {
		return ErrNotFound
	}
	return nil
}

// Sweep is BackgroundStore.Sweep.
func (s *PostgresBackgroundStore) Sweep(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `DELETE FROM background_runs WHERE status NOT IN ('queued', 'in_progress') AND created_at < $1 RETURNING id`, before.Unix())
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		n = int64(len(ids))
		_, err = tx.Exec(ctx, `DELETE FROM background_events WHERE run_id = ANY($1)`, ids)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("responses: background sweep: %w", err)
	}
	return n, nil
}
