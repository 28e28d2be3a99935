package files

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// SQLiteMetadata is the Metadata implementation in a SQLite database
// (files.db in the data directory). It is safe for concurrent use.
type SQLiteMetadata struct {
	db     *sql.DB
	eraser *sqlitedb.Eraser
	log    *slog.Logger
}

// OpenSQLiteMetadata opens (creating it with mode 0600) the metadata
// database at path in WAL mode with the schema up to date (sqlitedb), and,
// when ring is not nil, checks that ring can unwrap every stored data key.
// files.db is this package's alone (docs/backends-design.md: each store
// opens its own SQLite file, so a batch runner writing progress never waits
// on an upload's metadata write). log (nil: slog.Default) is told about
// deferred erasures.
func OpenSQLiteMetadata(ctx context.Context, path string, ring *envelope.Keyring, log *slog.Logger) (*SQLiteMetadata, error) {
	db, err := sqlitedb.Open(ctx, path, "files", migrations)
	if err != nil {
		return nil, err
	}
	if ring != nil {
		if err := ring.Check(ctx, db); err != nil {
			db.Close()
			return nil, err
		}
	}
	if log == nil {
		log = slog.Default()
	}
	return &SQLiteMetadata{db: db, eraser: sqlitedb.NewEraser(db), log: log}, nil
}

// Close closes the database.
func (m *SQLiteMetadata) Close() error { return m.db.Close() }

// migrations[i] brings the schema from version i to i+1. Append only: never
// edit a migration that has shipped. Versioned by sqlitedb as component "files".
var migrations = []string{
	// 1: files. Times are Unix nanoseconds; expires_at NULL: kept until
	// deleted. The owner index serves listings (keyset on created_at, id)
	// and every owner-filtered lookup; the partial index serves the sweeper.
	`CREATE TABLE files (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		filename   TEXT NOT NULL,
		purpose    TEXT NOT NULL,
		bytes      INTEGER NOT NULL,
		created_at INTEGER NOT NULL,
		expires_at INTEGER
	) STRICT;
	CREATE INDEX files_owner_created ON files (owner, created_at, id);
	CREATE INDEX files_expires ON files (expires_at) WHERE expires_at IS NOT NULL;`,
	// 2: tombstones of deleted and swept files, kept for CursorRetention so
	// a list cursor naming one still resolves (List alone reads them). The
	// primary key serves cursor resolution, the gone_at index the sweeper.
	`CREATE TABLE file_tombstones (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		gone_at    INTEGER NOT NULL
	) STRICT;
	CREATE INDEX file_tombstones_gone ON file_tombstones (gone_at);`,
	// 3: sealed blobs. sealed is 1 when the blob is a sealed stream
	// (envelope) under the data key of the file's id; files written before
	// are 0 until sealLegacy seals them on open.
	`ALTER TABLE files ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX files_unsealed ON files (id) WHERE sealed = 0;`,
	// 4: the wrapped data keys.
	envelope.KeysMigration,
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

const fileColumns = `id, owner, filename, purpose, bytes, created_at, expires_at`

type scanner interface{ Scan(dest ...any) error }

func scanFile(row scanner) (File, error) {
	var (
		f       File
		created int64
		expires sql.NullInt64
	)
	if err := row.Scan(&f.ID, &f.Owner, &f.Filename, &f.Purpose, &f.Bytes, &created, &expires); err != nil {
		return File{}, err
	}
	f.CreatedAt = time.Unix(0, created).UTC()
	if expires.Valid {
		f.ExpiresAt = time.Unix(0, expires.Int64).UTC()
	}
	return f, nil
}

// Insert implements Metadata: the row and its wrapped data key in one
// transaction.
func (m *SQLiteMetadata) Insert(ctx context.Context, f File, wrapped []byte) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	sealed := 0
	if wrapped != nil {
		kekID, err := envelope.WrappedKEKID(wrapped)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`,
			f.ID, kekID, wrapped); err != nil {
			return err
		}
		sealed = 1
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at, sealed)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		f.ID, f.Owner, f.Filename, f.Purpose, f.Bytes, f.CreatedAt.UnixNano(), nullTime(f.ExpiresAt), sealed); err != nil {
		return err
	}
	return tx.Commit()
}

// Get implements Metadata.
func (m *SQLiteMetadata) Get(ctx context.Context, owner, id string) (File, error) {
	f, err := scanFile(m.db.QueryRowContext(ctx,
		`SELECT `+fileColumns+` FROM files WHERE id = ? AND owner = ?`, id, owner))
	if errors.Is(err, sql.ErrNoRows) {
		return File{}, fmt.Errorf("files: get %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return File{}, fmt.Errorf("files: get %s: %w", id, err)
	}
	return f, nil
}

// DataKey implements Metadata.
func (m *SQLiteMetadata) DataKey(ctx context.Context, id string) ([]byte, error) {
	var sealed bool
	var wrapped []byte
	err := m.db.QueryRowContext(ctx,
		`SELECT f.sealed, k.wrapped FROM files f LEFT JOIN data_keys k ON k.object_id = f.id WHERE f.id = ?`,
		id).Scan(&sealed, &wrapped)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && sealed && wrapped == nil) {
		return nil, fmt.Errorf("files: data key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("files: data key %s: %w", id, err)
	}
	if !sealed {
		return nil, nil
	}
	return wrapped, nil
}

// Delete implements Metadata.
func (m *SQLiteMetadata) Delete(ctx context.Context, owner, id string, now time.Time) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	var created int64
	err = tx.QueryRowContext(ctx,
		`DELETE FROM files WHERE id = ? AND owner = ? AND (expires_at IS NULL OR expires_at > ?) RETURNING created_at`,
		id, owner, now.UnixNano()).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("files: delete %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	// With its data key, the blob is unreadable wherever a copy of it is.
	if err := envelope.Delete(ctx, tx, id); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	// The tombstone keeps the file's place in listings for cursors.
	if _, err := tx.ExecContext(ctx,
		`INSERT OR REPLACE INTO file_tombstones (id, owner, created_at, gone_at) VALUES (?, ?, ?, ?)`,
		id, owner, created, now.UnixNano()); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("files: delete %s: %w", id, err)
	}
	m.erase(ctx)
	return nil
}

// erase checkpoints deleted keys out of the WAL (sqlitedb.Erase). A
// checkpoint held back by a reader leaves them to the next delete or
// sweep: logged, not the client's error.
func (m *SQLiteMetadata) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	if err := m.eraser.Erase(context.WithoutCancel(ctx)); err != nil {
		m.log.Warn("files: erasing deleted data keys from the WAL is deferred to the next delete", "err", err)
	}
}

// List implements Metadata with keyset pagination on (created_at, id):
// stable while files are added or deleted between pages, unlike an offset.
func (m *SQLiteMetadata) List(ctx context.Context, owner string, q ListQuery, now time.Time) ([]File, bool, error) {
	cmp, dir := "<", "DESC"
	if q.Order == OrderAsc {
		cmp, dir = ">", "ASC"
	}
	where := `owner = ? AND (expires_at IS NULL OR expires_at > ?)`
	args := []any{owner, now.UnixNano()}
	if q.Purpose != "" {
		where += ` AND purpose = ?`
		args = append(args, q.Purpose)
	}
	if q.After != "" {
		c, err := m.cursor(ctx, owner, q.After, now)
		if err != nil {
			return nil, false, err
		}
		where += ` AND (created_at ` + cmp + ` ? OR (created_at = ? AND id ` + cmp + ` ?))`
		args = append(args, c, c, q.After)
	}
	args = append(args, q.Limit+1)
	rows, err := m.db.QueryContext(ctx, `SELECT `+fileColumns+` FROM files WHERE `+where+
		` ORDER BY created_at `+dir+`, id `+dir+` LIMIT ?`, args...)
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

// cursor returns the created_at of owner's file id for List's after: a live
// file, one expired but not yet swept, or the tombstone of one deleted or
// swept within CursorRetention. Anything else wraps ErrNotFound.
func (m *SQLiteMetadata) cursor(ctx context.Context, owner, id string, now time.Time) (int64, error) {
	var created int64
	err := m.db.QueryRowContext(ctx,
		`SELECT created_at FROM files WHERE id = ? AND owner = ?
		 UNION ALL
		 SELECT created_at FROM file_tombstones WHERE id = ? AND owner = ? AND gone_at > ?
		 LIMIT 1`,
		id, owner, id, owner, now.Add(-CursorRetention).UnixNano()).Scan(&created)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("files: cursor %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("files: cursor %s: %w", id, err)
	}
	return created, nil
}

// Exists implements Metadata.
func (m *SQLiteMetadata) Exists(ctx context.Context, id string) (bool, error) {
	var one int
	err := m.db.QueryRowContext(ctx, `SELECT 1 FROM files WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("files: exists %s: %w", id, err)
	}
	return true, nil
}

// SweepExpired implements Metadata.
func (m *SQLiteMetadata) SweepExpired(ctx context.Context, now time.Time, limit int) ([]string, error) {
	ids, err := m.sweepRows(ctx, now, limit)
	if len(ids) > 0 {
		m.erase(ctx)
	}
	// The last batch also retries an erasure an earlier delete deferred.
	if len(ids) < limit && m.eraser.Pending() {
		m.erase(ctx)
	}
	return ids, err
}

func (m *SQLiteMetadata) sweepRows(ctx context.Context, now time.Time, limit int) ([]string, error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx,
		`DELETE FROM files WHERE id IN (
			SELECT id FROM files WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?
		) RETURNING id, owner, created_at`, now.UnixNano(), limit)
	if err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	type gone struct {
		id, owner string
		created   int64
	}
	var swept []gone
	for rows.Next() {
		var g gone
		if err := rows.Scan(&g.id, &g.owner, &g.created); err != nil {
			rows.Close()
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		swept = append(swept, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	ids := make([]string, 0, len(swept))
	for _, g := range swept {
		if _, err := tx.ExecContext(ctx,
			`INSERT OR REPLACE INTO file_tombstones (id, owner, created_at, gone_at) VALUES (?, ?, ?, ?)`,
			g.id, g.owner, g.created, now.UnixNano()); err != nil {
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		if err := envelope.Delete(ctx, tx, g.id); err != nil {
			return nil, fmt.Errorf("files: sweep: %w", err)
		}
		ids = append(ids, g.id)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("files: sweep: %w", err)
	}
	return ids, nil
}

// SweepTombstones implements Metadata.
func (m *SQLiteMetadata) SweepTombstones(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := m.db.ExecContext(ctx,
		`DELETE FROM file_tombstones WHERE id IN (
			SELECT id FROM file_tombstones WHERE gone_at <= ? LIMIT ?
		)`, before.UnixNano(), limit)
	if err != nil {
		return 0, fmt.Errorf("files: sweep tombstones: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("files: sweep tombstones: %w", err)
	}
	return int(n), nil
}

// unsealed returns up to limit ids after after, in order, of the files
// whose blob is not sealed (legacy.go).
func (m *SQLiteMetadata) unsealed(ctx context.Context, after string, limit int) ([]string, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT id FROM files WHERE sealed = 0 AND id > ? ORDER BY id LIMIT ?`, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// markSealed stores id's data key and marks its row sealed (legacy.go).
func (m *SQLiteMetadata) markSealed(ctx context.Context, id string, wrapped []byte) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM data_keys WHERE object_id = ?`, id); err != nil {
		return err
	}
	kek, err := envelope.WrappedKEKID(wrapped)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`, id, kek, wrapped); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE files SET sealed = 1 WHERE id = ?`, id); err != nil {
		return err
	}
	return tx.Commit()
}
