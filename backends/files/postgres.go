package files

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresMetadata is the Metadata implementation in PostgreSQL, shared by
// every backends replica of a fleet. Each file's wrapped data key is a
// column of its row, so the two are inserted and deleted together. It is
// safe for concurrent use by any number of processes.
//
// Deleting a row (and so its data key) makes PostgreSQL mark it dead; the
// bytes stay in the table's pages until (auto)vacuum reuses them, and in
// the write-ahead log and backups for as long as those are kept: erasure
// on PostgreSQL is as good as the database's retention of old data.
type PostgresMetadata struct {
	pool *pgxpool.Pool
}

// pgMigrations[i] brings the files schema in PostgreSQL from version i to
// i+1 (component "files"). Append only. Times are Unix nanoseconds, as in
// SQLite.
var pgMigrations = []string{
	// 1: files with their wrapped data keys (NULL: a blob not sealed,
	// which no PostgreSQL deployment has, kept for the interface's sake),
	// and tombstones. kek_id says which KEK wrapped the key, for rotation.
	`CREATE TABLE files (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		filename   TEXT NOT NULL,
		purpose    TEXT NOT NULL,
		bytes      BIGINT NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT,
		kek_id     TEXT,
		wrapped    BYTEA
	);
	CREATE INDEX files_owner_created ON files (owner, created_at, id);
	CREATE INDEX files_expires ON files (expires_at) WHERE expires_at IS NOT NULL;
	CREATE INDEX files_kek ON files (kek_id);
	CREATE TABLE file_tombstones (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		gone_at    BIGINT NOT NULL
	);
	CREATE INDEX file_tombstones_gone ON file_tombstones (gone_at);`,
}

// OpenPostgresMetadata connects to dsn with pool sizing p, brings the
// files schema up to date (pgdb, component "files") and, when ring is not
// nil, checks that ring holds every KEK the stored data keys are wrapped
// under (a replica started with another key must not start).
func OpenPostgresMetadata(ctx context.Context, dsn string, p pgdb.Pool, ring *envelope.Keyring) (*PostgresMetadata, error) {
	pool, err := pgdb.Open(ctx, dsn, "files", pgMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("files: open: %w", err)
	}
	m := &PostgresMetadata{pool: pool}
	if ring != nil {
		if err := m.checkKEKs(ctx, ring); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return m, nil
}

func (m *PostgresMetadata) checkKEKs(ctx context.Context, ring *envelope.Keyring) error {
	rows, err := m.pool.Query(ctx, `SELECT kek_id, count(*) FROM files WHERE kek_id IS NOT NULL GROUP BY kek_id`)
	if err != nil {
		return fmt.Errorf("files: open: %w", err)
	}
	// Exported fields: pgx maps columns to a struct's exported fields only.
	type use struct {
		ID string
		N  int64
	}
	uses, err := pgx.CollectRows(rows, pgx.RowToStructByPos[use])
	if err != nil {
		return fmt.Errorf("files: open: %w", err)
	}
	have := ring.IDs()
	var missing []string
	for _, u := range uses {
		if !slices.Contains(have, u.ID) {
			missing = append(missing, fmt.Sprintf("%s (%d data keys)", u.ID, u.N))
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("files: open: %w: %s; the keys come from %s, which holds %s (every replica must share the same keys)",
			envelope.ErrMissingKEK, strings.Join(missing, ", "), ring.Source(), strings.Join(have, ", "))
	}
	return nil
}

// Close closes the connection pool.
func (m *PostgresMetadata) Close() error {
	m.pool.Close()
	return nil
}

func pgNullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

// Insert implements Metadata: the row carries its wrapped key.
func (m *PostgresMetadata) Insert(ctx context.Context, f File, wrapped []byte) error {
	var kekID any
	if wrapped != nil {
		id, err := envelope.WrappedKEKID(wrapped)
		if err != nil {
			return err
		}
		kekID = id
	}
	if _, err := m.pool.Exec(ctx,
		`INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at, kek_id, wrapped)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		f.ID, f.Owner, f.Filename, f.Purpose, f.Bytes, f.CreatedAt.UnixNano(), pgNullTime(f.ExpiresAt), kekID, wrapped); err != nil {
		return fmt.Errorf("files: insert %s: %w", f.ID, err)
	}
	return nil
}

// Get implements Metadata.
func (m *PostgresMetadata) Get(ctx context.Context, owner, id string) (File, error) {
	f, err := scanFile(m.pool.QueryRow(ctx,
		`SELECT `+fileColumns+` FROM files WHERE id = $1 AND owner = $2`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return File{}, fmt.Errorf("files: get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("files: get %s: %w", id, err)
	}
	return f, nil
}

// DataKey implements Metadata.
func (m *PostgresMetadata) DataKey(ctx context.Context, id string) ([]byte, error) {
	var wrapped []byte
	err := m.pool.QueryRow(ctx, `SELECT wrapped FROM files WHERE id = $1`, id).Scan(&wrapped)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("files: data key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("files: data key %s: %w", id, err)
	}
	return wrapped, nil
}

// tombstone records files gone at $1 from the rows a data-modifying CTE
// named gone returned; a tombstone of the same id (impossible with random
// ids, but cheap to make safe) is replaced.
const tombstone = `INSERT INTO file_tombstones (id, owner, created_at, gone_at)
	SELECT id, owner, created_at, $1 FROM gone
	ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, created_at = EXCLUDED.created_at, gone_at = EXCLUDED.gone_at`

// Delete implements Metadata: the row (with its key) goes and its
// tombstone comes in one statement, so one transaction.
func (m *PostgresMetadata) Delete(ctx context.Context, owner, id string, now time.Time) error {
	var n int
	err := m.pool.QueryRow(ctx,
		`WITH gone AS (
			DELETE FROM files WHERE id = $2 AND owner = $3 AND (expires_at IS NULL OR expires_at > $1)
			RETURNING id, owner, created_at),
		 t AS (`+tombstone+`)
		 SELECT count(*) FROM gone`, now.UnixNano(), id, owner).Scan(&n)
	if err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("files: delete %s: %w", id, ErrNotFound)
	}
	return nil
}

// List implements Metadata with keyset pagination on (created_at, id).
func (m *PostgresMetadata) List(ctx context.Context, owner string, q ListQuery, now time.Time) ([]File, bool, error) {
	cmp, dir := "<", "DESC"
	if q.Order == OrderAsc {
		cmp, dir = ">", "ASC"
	}
	args := []any{owner, now.UnixNano()}
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	where := `owner = $1 AND (expires_at IS NULL OR expires_at > $2)`
	if q.Purpose != "" {
		where += ` AND purpose = ` + arg(q.Purpose)
	}
	if q.After != "" {
		c, err := m.cursor(ctx, owner, q.After, now)
		if err != nil {
			return nil, false, err
		}
		ca, ia := arg(c), arg(q.After)
		where += ` AND (created_at ` + cmp + ` ` + ca + ` OR (created_at = ` + ca + ` AND id ` + cmp + ` ` + ia + `))`
	}
	rows, err := m.pool.Query(ctx, `SELECT `+fileColumns+` FROM files WHERE `+where+
		` ORDER BY created_at `+dir+`, id `+dir+` LIMIT `+arg(q.Limit+1), args...)
	if err != nil {
		return nil, false, fmt.Errorf("files: list: %w", err)
	}
	defer rows.Close()
	out := []File{}
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, false, fmt.Errorf("files: list: %w", err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("files: list: %w", err)
	}
	more := len(out) > q.Limit
	if more {
		out = out[:q.Limit]
	}
	return out, more, nil
}

// cursor is SQLiteMetadata.cursor on PostgreSQL.
func (m *PostgresMetadata) cursor(ctx context.Context, owner, id string, now time.Time) (int64, error) {
	var created int64
	err := m.pool.QueryRow(ctx,
		`SELECT created_at FROM files WHERE id = $1 AND owner = $2
		 UNION ALL
		 SELECT created_at FROM file_tombstones WHERE id = $1 AND owner = $2 AND gone_at > $3
		 LIMIT 1`,
		id, owner, now.Add(-CursorRetention).UnixNano()).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("files: cursor %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("files: cursor %s: %w", id, err)
	}
	return created, nil
}

// Exists implements Metadata.
func (m *PostgresMetadata) Exists(ctx context.Context, id string) (bool, error) {
	var ok bool
	if err := m.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM files WHERE id = $1)`, id).Scan(&ok); err != nil {
		return false, fmt.Errorf("files: exists %s: %w", id, err)
	}
	return ok, nil
}

// SweepExpired implements Metadata in one statement: the expired rows
// (locked with SKIP LOCKED, so a concurrent sweep or delete never waits on
// or repeats them) go with their keys, and their tombstones come.
func (m *PostgresMetadata) SweepExpired(ctx context.Context, now time.Time, limit int) ([]string, error) {
	rows, err := m.pool.Query(ctx,
		`WITH gone AS (
			DELETE FROM files WHERE id IN (
				SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= $1
				ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
			RETURNING id, owner, created_at),
		 t AS (`+tombstone+`)
		 SELECT id FROM gone`, now.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	return ids, nil
}

// SweepTombstones implements Metadata.
func (m *PostgresMetadata) SweepTombstones(ctx context.Context, before time.Time, limit int) (int, error) {
	tag, err := m.pool.Exec(ctx,
		`DELETE FROM file_tombstones WHERE id IN (
			SELECT id FROM file_tombstones WHERE gone_at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		before.UnixNano(), limit)
	if err != nil {
		return 0, fmt.Errorf("files: sweep tombstones: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// sweepLockID is the advisory lock key that makes the sweep run on one
// replica at a time (see TrySweepLock).
var sweepLockID = func() int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard.files.sweep"))
	return int64(h.Sum64())
}()

// TrySweepLock takes the files sweeper's PostgreSQL advisory lock without
// waiting, on a connection it holds until release is called. ok is false
// when another replica holds it. The lock is the session's, so a replica
// that dies mid-sweep releases it with its connection.
func (m *PostgresMetadata) TrySweepLock(ctx context.Context) (release func(), ok bool, err error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("files: sweep lock: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, sweepLockID).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("files: sweep lock: %w", err)
		}
		return nil, false, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		var unlocked bool
		if err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock($1)`, sweepLockID).Scan(&unlocked); err != nil || !unlocked {
			// Closing the connection releases the lock for sure.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}
