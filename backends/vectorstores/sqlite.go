package vectorstores

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// SQLiteStore is the SQLite Store: DATA_DIR/vectorstores.db, in WAL mode
// with the schema up to date (sqlitedb), created with mode 0600. It is
// this package's alone (docs/backends-design.md: each store opens its own
// SQLite file), so indexing a large file never holds a lock another
// service waits on. Wrapped data keys are kept in its data_keys table
// under chunkKeyID, so key rotation (switchyard datakey) finds them;
// deletes are checkpointed out of the WAL (sqlitedb.Eraser).
type SQLiteStore struct {
	db     *sql.DB
	keys   *envelope.Keyring // Check on open and the legacy migration only
	eraser *sqlitedb.Eraser
	log    *slog.Logger
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLiteStore opens (creating and migrating) dataDir/vectorstores.db.
// keys must hold the key-encryption keys of the data keys stored there;
// chunks written before encryption at rest are sealed under it on open.
// log may be nil (slog.Default()).
func OpenSQLiteStore(ctx context.Context, dataDir string, keys *envelope.Keyring, log *slog.Logger) (*SQLiteStore, error) {
	if dataDir == "" {
		return nil, errors.New("vectorstores: empty data directory")
	}
	if log == nil {
		log = slog.Default()
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dataDir, dbFile), "vectorstores", migrations)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: open: %w", err)
	}
	if err := keys.Check(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("vectorstores: open: %w", err)
	}
	s := &SQLiteStore{db: db, keys: keys, eraser: sqlitedb.NewEraser(db), log: log}
	if err := s.sealLegacy(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("vectorstores: open: %w", err)
	}
	return s, nil
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// migrations[i] brings the schema from version i to i+1. Append only: never
// edit a migration that has shipped. Versioned by sqlitedb as component
// "vectorstores".
var migrations = []string{
	// 1: stores, their files and the files' chunks. Times are Unix
	// nanoseconds. A store's expires_at is last_active_at plus
	// expires_days, NULL without expires_after. A store_files row's gen is
	// random per attach; its chunks carry it, so chunks written by an
	// indexer that lost a race with a detach (or a detach and re-attach)
	// are never read, and the sweeper deletes them. vector is the unit-
	// length embedding as little-endian float32s.
	`CREATE TABLE stores (
		id             TEXT PRIMARY KEY,
		owner          TEXT NOT NULL,
		name           TEXT NOT NULL,
		description    TEXT NOT NULL,
		metadata       TEXT NOT NULL,
		created_at     INTEGER NOT NULL,
		last_active_at INTEGER NOT NULL,
		expires_days   INTEGER,
		expires_at     INTEGER
	) STRICT;
	CREATE INDEX stores_owner_created ON stores (owner, created_at, id);
	CREATE INDEX stores_expires ON stores (expires_at) WHERE expires_at IS NOT NULL;
	CREATE TABLE store_files (
		store_id      TEXT NOT NULL,
		file_id       TEXT NOT NULL,
		owner         TEXT NOT NULL,
		filename      TEXT NOT NULL,
		gen           INTEGER NOT NULL,
		status        TEXT NOT NULL,
		error_code    TEXT,
		error_message TEXT,
		chunk_tokens  INTEGER NOT NULL,
		overlap       INTEGER NOT NULL,
		usage_bytes   INTEGER NOT NULL,
		attributes    TEXT,
		created_at    INTEGER NOT NULL,
		PRIMARY KEY (store_id, file_id)
	) STRICT;
	CREATE INDEX store_files_created ON store_files (store_id, created_at, file_id);
	CREATE INDEX store_files_pending ON store_files (created_at) WHERE status = 'in_progress';
	CREATE TABLE chunks (
		id       INTEGER PRIMARY KEY,
		store_id TEXT NOT NULL,
		file_id  TEXT NOT NULL,
		gen      INTEGER NOT NULL,
		seq      INTEGER NOT NULL,
		text     TEXT NOT NULL,
		vector   BLOB NOT NULL
	) STRICT;
	CREATE INDEX chunks_file ON chunks (store_id, file_id, gen);`,
	// 2: each file's chunk count (of its current generation), so the
	// indexer can hold stores and owners to their chunk limits without
	// counting the chunks table; the owner index serves the owner's total.
	`ALTER TABLE store_files ADD COLUMN chunks INTEGER NOT NULL DEFAULT 0;
	UPDATE store_files SET chunks = (SELECT COUNT(*) FROM chunks c
		WHERE c.store_id = store_files.store_id AND c.file_id = store_files.file_id AND c.gen = store_files.gen);
	CREATE INDEX store_files_owner ON store_files (owner);`,
	// 3: sealed chunk text. sealed_text is the chunk's text sealed
	// (envelope) under the data key of its attach generation (chunkKeyID),
	// text then ''; chunks written before have sealed_text NULL until
	// sealLegacy seals them on open.
	`ALTER TABLE chunks ADD COLUMN sealed_text BLOB;
	CREATE INDEX chunks_unsealed ON chunks (id) WHERE sealed_text IS NULL;`,
	// 4: the wrapped data keys.
	envelope.KeysMigration,
	// 5: file batches. A batch's files carry its id (batch_id, NULL for
	// files attached otherwise); its status and counts are its files'.
	// cancelled_at is set when a cancel cancelled its files in progress.
	`CREATE TABLE file_batches (
		id           TEXT PRIMARY KEY,
		store_id     TEXT NOT NULL,
		owner        TEXT NOT NULL,
		created_at   INTEGER NOT NULL,
		cancelled_at INTEGER
	) STRICT;
	CREATE INDEX file_batches_store ON file_batches (store_id);
	ALTER TABLE store_files ADD COLUMN batch_id TEXT;
	CREATE INDEX store_files_batch ON store_files (batch_id, created_at, file_id) WHERE batch_id IS NOT NULL;`,
}

// erase checkpoints deleted keys and chunks out of the WAL
// (sqlitedb.Erase); one held back by a reader is left to the next delete
// or sweep.
func (s *SQLiteStore) erase(ctx context.Context) {
	// Not the request's context: the delete is done, a client leaving
	// must not stop its erasure.
	if err := s.eraser.Erase(context.WithoutCancel(ctx)); err != nil {
		s.log.Warn("vectorstores: erasing deleted data keys from the WAL is deferred to the next delete", "err", err)
	}
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

const storeColumns = `id, owner, name, description, metadata, created_at, last_active_at, expires_days, expires_at`

type scanner interface{ Scan(dest ...any) error }

// pageRows is a query's rows as database/sql and pgx both return them.
type pageRows interface {
	scanner
	Next() bool
	Err() error
}

// readPage reads one page of a list query that asked for limit+1 rows:
// the rows (in the order asked for, reversed back when the query ran
// backwards for a before cursor) and whether more follow. Both stores'
// lists use it.
func readPage[T any](rows pageRows, scan func(scanner) (T, error), limit int, reversed bool) ([]T, bool, error) {
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, false, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	more := len(out) > limit
	if more {
		out = out[:limit]
	}
	if reversed {
		slices.Reverse(out)
	}
	return out, more, nil
}

func scanStore(row scanner) (StoreRow, error) {
	var (
		st               StoreRow
		meta             string
		created, active  int64
		days, expiration sql.NullInt64
	)
	if err := row.Scan(&st.ID, &st.Owner, &st.Name, &st.Description, &meta, &created, &active, &days, &expiration); err != nil {
		return StoreRow{}, err
	}
	st.Metadata = []byte(meta)
	st.CreatedAt, st.LastActiveAt = fromNanos(created), fromNanos(active)
	if days.Valid {
		st.ExpiresDays = int(days.Int64)
	}
	if expiration.Valid {
		st.ExpiresAt = fromNanos(expiration.Int64)
	}
	return st, nil
}

const fileColumns = `store_id, file_id, owner, filename, gen, status, error_code, error_message, chunk_tokens, overlap, usage_bytes, attributes, created_at, batch_id`

func scanFile(row scanner) (FileRow, error) {
	var (
		f             FileRow
		code, msg     sql.NullString
		attrs, batch  sql.NullString
		created       int64
		chunk, overlp int64
	)
	if err := row.Scan(&f.StoreID, &f.FileID, &f.Owner, &f.Filename, &f.Gen, &f.Status, &code, &msg,
		&chunk, &overlp, &f.UsageBytes, &attrs, &created, &batch); err != nil {
		return FileRow{}, err
	}
	f.BatchID = batch.String
	f.ErrCode, f.ErrMessage = code.String, msg.String
	f.ChunkTokens, f.Overlap = int(chunk), int(overlp)
	if attrs.Valid {
		f.Attributes = []byte(attrs.String)
	}
	f.CreatedAt = fromNanos(created)
	return f, nil
}

// liveStore is the WHERE clause of an owner's live store by id.
const liveStore = `id = ? AND owner = ? AND (expires_at IS NULL OR expires_at > ?)`

type rowQuerier interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}

// getStore returns owner's store id live at now, or a *NotFoundError.
func getStore(ctx context.Context, q rowQuerier, owner, id string, now time.Time) (StoreRow, error) {
	st, err := scanStore(q.QueryRowContext(ctx, `SELECT `+storeColumns+` FROM stores WHERE `+liveStore,
		id, owner, now.UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return StoreRow{}, &NotFoundError{ID: id}
	}
	if err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: get %s: %w", id, err)
	}
	return st, nil
}

// GetStore is Store.GetStore.
func (s *SQLiteStore) GetStore(ctx context.Context, owner, id string, now time.Time) (StoreRow, error) {
	return getStore(ctx, s.db, owner, id, now)
}

// Counts is Store.Counts.
func (s *SQLiteStore) Counts(ctx context.Context, id string) (Counts, error) {
	c, err := countFiles(ctx, s.db, `store_id = ?`, id)
	if err != nil {
		return Counts{}, fmt.Errorf("vectorstores: count files of %s: %w", id, err)
	}
	return c, nil
}

type querier interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}

// countFiles counts the files where where holds, by status.
func countFiles(ctx context.Context, q querier, where string, args ...any) (Counts, error) {
	rows, err := q.QueryContext(ctx,
		`SELECT status, COUNT(*), COALESCE(SUM(usage_bytes), 0) FROM store_files WHERE `+where+` GROUP BY status`, args...)
	if err != nil {
		return Counts{}, err
	}
	defer rows.Close()
	var c Counts
	for rows.Next() {
		var (
			status string
			n, b   int64
		)
		if err := rows.Scan(&status, &n, &b); err != nil {
			return Counts{}, err
		}
		c.add(status, n, b)
	}
	return c, rows.Err()
}

func insertFile(ctx context.Context, tx *sql.Tx, f FileRow) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO store_files (`+fileColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		f.StoreID, f.FileID, f.Owner, f.Filename, f.Gen, f.Status, nullString(f.ErrCode), nullString(f.ErrMessage),
		f.ChunkTokens, f.Overlap, f.UsageBytes, nullBytes(f.Attributes), f.CreatedAt.UnixNano(), nullString(f.BatchID))
	return err
}

// CreateStore is Store.CreateStore: one transaction.
func (s *SQLiteStore) CreateStore(ctx context.Context, st StoreRow, fs []FileRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO stores (`+storeColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		st.ID, st.Owner, st.Name, st.Description, string(st.Metadata), st.CreatedAt.UnixNano(), st.LastActiveAt.UnixNano(),
		nullInt(st.ExpiresDays), nullTime(st.ExpiresAt)); err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	for _, f := range fs {
		if err := insertFile(ctx, tx, f); err != nil {
			return fmt.Errorf("vectorstores: create: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	return nil
}

func nullInt(n int) any {
	if n == 0 {
		return nil
	}
	return n
}

// ModifyStore is Store.ModifyStore.
func (s *SQLiteStore) ModifyStore(ctx context.Context, owner, id string, now time.Time, p StorePatch) (StoreRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	defer tx.Rollback()
	st, err := getStore(ctx, tx, owner, id, now)
	if err != nil {
		return StoreRow{}, err
	}
	if p.Name != nil {
		st.Name = *p.Name
	}
	if p.Metadata != nil {
		st.Metadata = p.Metadata
	}
	if p.SetExpiry {
		st.ExpiresDays = p.ExpiresDays
		st.ExpiresAt = ExpiryOf(st.LastActiveAt, st.ExpiresDays)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE stores SET name = ?, metadata = ?, expires_days = ?, expires_at = ? WHERE id = ?`,
		st.Name, string(st.Metadata), nullInt(st.ExpiresDays), nullTime(st.ExpiresAt), id); err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	return st, nil
}

// DeleteStore is Store.DeleteStore.
func (s *SQLiteStore) DeleteStore(ctx context.Context, owner, id string, now time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM stores WHERE `+liveStore, id, owner, now.UnixNano())
	if err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	} else if n == 0 {
		return &NotFoundError{ID: id}
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM store_files WHERE store_id = ?`, id); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM file_batches WHERE store_id = ?`, id); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if err := envelope.DeletePrefix(ctx, tx, storeKeyPrefix(id)); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	s.erase(ctx)
	return nil
}

// keyset renders the page's WHERE additions and ORDER BY on (created_at,
// key) given the cursor items' positions, and whether the rows come back
// reversed (a before page is read nearest-first, then flipped).
func keyset(q ListQuery, key string, after, before *cursorPos) (where string, args []any, order string, reversed bool) {
	lt, gt, asc, desc := "<", ">", "ASC", "DESC"
	fwdCmp, fwdDir, backCmp, backDir := gt, asc, lt, desc
	if q.Desc {
		fwdCmp, fwdDir, backCmp, backDir = lt, desc, gt, asc
	}
	add := func(cmp string, p *cursorPos) {
		where += ` AND (created_at ` + cmp + ` ? OR (created_at = ? AND ` + key + ` ` + cmp + ` ?))`
		args = append(args, p.created, p.created, p.id)
	}
	if after != nil {
		add(fwdCmp, after)
	}
	if before != nil {
		add(backCmp, before)
	}
	if before != nil && after == nil {
		return where, args, ` ORDER BY created_at ` + backDir + `, ` + key + ` ` + backDir, true
	}
	return where, args, ` ORDER BY created_at ` + fwdDir + `, ` + key + ` ` + fwdDir, false
}

type cursorPos struct {
	created int64
	id      string
}

// ListStores is Store.ListStores.
func (s *SQLiteStore) ListStores(ctx context.Context, owner string, now time.Time, q ListQuery) ([]StoreRow, bool, error) {
	pos := func(param, id string) (*cursorPos, error) {
		if id == "" {
			return nil, nil
		}
		st, err := getStore(ctx, s.db, owner, id, now)
		if errors.Is(err, ErrNotFound) {
			return nil, &InvalidCursorError{Param: param, ID: id}
		}
		if err != nil {
			return nil, err
		}
		return &cursorPos{st.CreatedAt.UnixNano(), st.ID}, nil
	}
	after, err := pos("after", q.After)
	if err != nil {
		return nil, false, err
	}
	before, err := pos("before", q.Before)
	if err != nil {
		return nil, false, err
	}
	where, kargs, order, reversed := keyset(q, "id", after, before)
	args := append([]any{owner, now.UnixNano()}, kargs...)
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+storeColumns+` FROM stores WHERE owner = ? AND (expires_at IS NULL OR expires_at > ?)`+
		where+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list: %w", err)
	}
	defer rows.Close()
	out, more, err := readPage(rows, scanStore, q.Limit, reversed)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list: %w", err)
	}
	return out, more, nil
}

// AttachFiles is Store.AttachFiles: one transaction.
func (s *SQLiteStore) AttachFiles(ctx context.Context, owner, id string, now time.Time, fs []FileRow) ([]FileRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := getStore(ctx, tx, owner, id, now); err != nil {
		return nil, err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM store_files WHERE store_id = ?`, id).Scan(&n); err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	out := make([]FileRow, 0, len(fs))
	for _, f := range fs {
		existing, err := scanFile(tx.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM store_files WHERE store_id = ? AND file_id = ?`, id, f.FileID))
		if err == nil {
			out = append(out, existing)
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
		}
		if n >= MaxFilesPerStore {
			return nil, ErrStoreFull
		}
		if err := insertFile(ctx, tx, f); err != nil {
			return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
		}
		n++
		out = append(out, f)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	return out, nil
}

// GetFile is Store.GetFile.
func (s *SQLiteStore) GetFile(ctx context.Context, owner, id, fileID string, now time.Time) (FileRow, error) {
	if _, err := getStore(ctx, s.db, owner, id, now); err != nil {
		return FileRow{}, err
	}
	f, err := scanFile(s.db.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM store_files WHERE store_id = ? AND file_id = ?`, id, fileID))
	if errors.Is(err, sql.ErrNoRows) {
		return FileRow{}, &FileNotFoundError{ID: fileID}
	}
	if err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: get file %s of %s: %w", fileID, id, err)
	}
	return f, nil
}

// SetAttributes is Store.SetAttributes.
func (s *SQLiteStore) SetAttributes(ctx context.Context, owner, id, fileID string, now time.Time, attrs []byte) (FileRow, error) {
	f, err := s.GetFile(ctx, owner, id, fileID, now)
	if err != nil {
		return FileRow{}, err
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE store_files SET attributes = ? WHERE store_id = ? AND file_id = ?`,
		nullBytes(attrs), id, fileID); err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	f.Attributes = attrs
	return f, nil
}

// DetachFile is Store.DetachFile: searches join on the file row, so the
// chunks are unreachable at once; an indexer still working on the file
// finds its row gone and stops.
func (s *SQLiteStore) DetachFile(ctx context.Context, owner, id, fileID string, now time.Time) error {
	if _, err := getStore(ctx, s.db, owner, id, now); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	defer tx.Rollback()
	var gen int64
	err = tx.QueryRowContext(ctx, `DELETE FROM store_files WHERE store_id = ? AND file_id = ? RETURNING gen`, id, fileID).Scan(&gen)
	if errors.Is(err, sql.ErrNoRows) {
		return &FileNotFoundError{ID: fileID}
	}
	if err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	if err := envelope.Delete(ctx, tx, chunkKeyID(id, fileID, gen)); err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	s.erase(ctx)
	return nil
}

// ListFiles is Store.ListFiles.
func (s *SQLiteStore) ListFiles(ctx context.Context, owner, id string, now time.Time, q ListQuery) ([]FileRow, bool, error) {
	if _, err := getStore(ctx, s.db, owner, id, now); err != nil {
		return nil, false, err
	}
	// scope is the files listed: the store's, or one batch's.
	scope, scopeArgs := `store_id = ?`, []any{id}
	if q.BatchID != "" {
		if _, err := getBatch(ctx, s.db, id, q.BatchID); err != nil {
			return nil, false, err
		}
		scope, scopeArgs = `store_id = ? AND batch_id = ?`, []any{id, q.BatchID}
	}
	pos := func(param, fileID string) (*cursorPos, error) {
		if fileID == "" {
			return nil, nil
		}
		var created int64
		err := s.db.QueryRowContext(ctx, `SELECT created_at FROM store_files WHERE `+scope+` AND file_id = ?`,
			append(slices.Clone(scopeArgs), fileID)...).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, &InvalidCursorError{Param: param, ID: fileID}
		}
		if err != nil {
			return nil, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
		}
		return &cursorPos{created, fileID}, nil
	}
	after, err := pos("after", q.After)
	if err != nil {
		return nil, false, err
	}
	before, err := pos("before", q.Before)
	if err != nil {
		return nil, false, err
	}
	where, kargs, order, reversed := keyset(q, "file_id", after, before)
	args := slices.Clone(scopeArgs)
	if q.Status != "" {
		where = ` AND status = ?` + where
		args = append(args, q.Status)
	}
	args = append(args, kargs...)
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+fileColumns+` FROM store_files WHERE `+scope+where+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
	}
	defer rows.Close()
	out, more, err := readPage(rows, scanFile, q.Limit, reversed)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
	}
	return out, more, nil
}

// Touch is Store.Touch.
func (s *SQLiteStore) Touch(ctx context.Context, id string, now time.Time) error {
	n := now.UnixNano()
	_, err := s.db.ExecContext(ctx, `UPDATE stores SET last_active_at = ?,
		expires_at = CASE WHEN expires_days IS NULL THEN NULL ELSE ? + expires_days * ? END WHERE id = ?`,
		n, n, int64(24*time.Hour), id)
	if err != nil {
		return fmt.Errorf("vectorstores: touch %s: %w", id, err)
	}
	return nil
}

// Pending is Store.Pending.
func (s *SQLiteStore) Pending(ctx context.Context, limit int) ([]Job, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT store_id, file_id, owner, filename, gen, chunk_tokens, overlap
		FROM store_files WHERE status = ? ORDER BY created_at LIMIT ?`, StatusInProgress, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Job
	for rows.Next() {
		var j Job
		if err := rows.Scan(&j.StoreID, &j.FileID, &j.Owner, &j.Filename, &j.Gen, &j.ChunkTokens, &j.Overlap); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// Finish is Store.Finish: one transaction.
func (s *SQLiteStore) Finish(ctx context.Context, j Job, status, code, msg string, usage int64) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	chunks := "chunks"
	if status != StatusCompleted {
		chunks = "0"
	}
	res, err := tx.ExecContext(ctx, `UPDATE store_files SET status = ?, error_code = ?, error_message = ?, usage_bytes = ?, chunks = `+chunks+`
		WHERE store_id = ? AND file_id = ? AND gen = ? AND status = ?`,
		status, nullString(code), nullString(msg), usage, j.StoreID, j.FileID, j.Gen, StatusInProgress)
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	// Only the attempt that records the outcome drops the chunks: a late
	// failure (another indexer of the same generation) must not empty a
	// file already completed. Chunks of a detached generation are the
	// sweeper's.
	if n == 1 && status != StatusCompleted {
		if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE store_id = ? AND file_id = ? AND gen = ?`,
			j.StoreID, j.FileID, j.Gen); err != nil {
			return err
		}
		if err := envelope.Delete(ctx, tx, chunkKeyID(j.StoreID, j.FileID, j.Gen)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// InsertChunks is Store.InsertChunks: the check and the insert share one
// transaction.
func (s *SQLiteStore) InsertChunks(ctx context.Context, j Job, chunks []Chunk, check func(inStore, ofOwner int64) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var one int
	if err := tx.QueryRowContext(ctx, `SELECT 1 FROM store_files WHERE store_id = ? AND file_id = ? AND gen = ? AND status = ?`,
		j.StoreID, j.FileID, j.Gen, StatusInProgress).Scan(&one); errors.Is(err, sql.ErrNoRows) {
		return ErrDetached
	} else if err != nil {
		return err
	}
	inStore, ofOwner, err := chunkCounts(ctx, tx, j.StoreID, j.Owner)
	if err != nil {
		return err
	}
	if err := check(inStore, ofOwner); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE store_files SET chunks = chunks + ? WHERE store_id = ? AND file_id = ? AND gen = ?`,
		len(chunks), j.StoreID, j.FileID, j.Gen); err != nil {
		return err
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO chunks (store_id, file_id, gen, seq, text, sealed_text, vector) VALUES (?, ?, ?, ?, '', ?, ?)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	for _, c := range chunks {
		if _, err := stmt.ExecContext(ctx, j.StoreID, j.FileID, j.Gen, c.Seq, c.Sealed, c.Vector); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ResetChunks is Store.ResetChunks: one transaction, so a detached file is
// left no key.
func (s *SQLiteStore) ResetChunks(ctx context.Context, j Job, key []byte) error {
	kekID, err := envelope.WrappedKEKID(key)
	if err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// Only a file still in progress: a job listed before its file was
	// completed, or a file cancelled since, must not reset its chunks or
	// get a key back.
	res, err := tx.ExecContext(ctx, `UPDATE store_files SET chunks = 0 WHERE store_id = ? AND file_id = ? AND gen = ? AND status = ?`,
		j.StoreID, j.FileID, j.Gen, StatusInProgress)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return ErrDetached
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE store_id = ? AND file_id = ? AND gen = ?`,
		j.StoreID, j.FileID, j.Gen); err != nil {
		return err
	}
	kid := chunkKeyID(j.StoreID, j.FileID, j.Gen)
	if err := envelope.Delete(ctx, tx, kid); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`,
		kid, kekID, key); err != nil {
		return fmt.Errorf("vectorstores: store data key of %s: %w", kid, err)
	}
	return tx.Commit()
}

// chunkCounts reads the chunk counts of a store and of an owner.
func chunkCounts(ctx context.Context, q rowQuerier, storeID, owner string) (inStore, ofOwner int64, err error) {
	err = q.QueryRowContext(ctx, `SELECT
		(SELECT COALESCE(SUM(chunks), 0) FROM store_files WHERE store_id = ?),
		(SELECT COALESCE(SUM(chunks), 0) FROM store_files WHERE owner = ?)`,
		storeID, owner).Scan(&inStore, &ofOwner)
	return inStore, ofOwner, err
}

// ChunkCounts is Store.ChunkCounts.
func (s *SQLiteStore) ChunkCounts(ctx context.Context, storeID, owner string) (int64, int64, error) {
	return chunkCounts(ctx, s.db, storeID, owner)
}

// parseChunkKeyID is the inverse of chunkKeyID for the keys of store
// storeID.
func parseChunkKeyID(storeID, kid string) (FileGen, bool) {
	rest, ok := strings.CutPrefix(kid, storeKeyPrefix(storeID))
	if !ok {
		return FileGen{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return FileGen{}, false
	}
	gen, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return FileGen{}, false
	}
	return FileGen{FileID: rest[:i], Gen: gen}, true
}

// ChunkKeys is Store.ChunkKeys.
func (s *SQLiteStore) ChunkKeys(ctx context.Context, storeID string) (map[FileGen][]byte, error) {
	prefix := storeKeyPrefix(storeID)
	rows, err := s.db.QueryContext(ctx, `SELECT object_id, wrapped FROM data_keys WHERE object_id >= ? AND object_id < ?`,
		prefix, prefix+"\xff")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[FileGen][]byte{}
	for rows.Next() {
		var oid string
		var w []byte
		if err := rows.Scan(&oid, &w); err != nil {
			return nil, err
		}
		if fg, ok := parseChunkKeyID(storeID, oid); ok {
			out[fg] = w
		}
	}
	return out, rows.Err()
}

// ChunkKey is Store.ChunkKey.
func (s *SQLiteStore) ChunkKey(ctx context.Context, storeID string, fg FileGen) ([]byte, error) {
	kid := chunkKeyID(storeID, fg.FileID, fg.Gen)
	var w []byte
	err := s.db.QueryRowContext(ctx, `SELECT wrapped FROM data_keys WHERE object_id = ?`, kid).Scan(&w)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("vectorstores: data key of %s: %w", kid, envelope.ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("vectorstores: data key of %s: %w", kid, err)
	}
	return w, nil
}

// Scan is Store.Scan: one query, read a row at a time.
func (s *SQLiteStore) Scan(ctx context.Context, storeID string, fn func(ScannedChunk) error) error {
	rows, err := s.db.QueryContext(ctx, `SELECT c.file_id, c.gen, c.seq, f.filename, f.attributes, c.text, c.sealed_text, c.vector
		FROM chunks c JOIN store_files f ON f.store_id = c.store_id AND f.file_id = c.file_id AND f.gen = c.gen
		WHERE c.store_id = ? AND f.status = ?`, storeID, StatusCompleted)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c ScannedChunk
		var attrs sql.NullString
		if err := rows.Scan(&c.FileID, &c.Gen, &c.Seq, &c.Filename, &attrs, &c.Text, &c.Sealed, &c.Vector); err != nil {
			return err
		}
		if attrs.Valid {
			c.Attributes = []byte(attrs.String)
		}
		if err := fn(c); err != nil {
			return err
		}
	}
	return rows.Err()
}

// sweepBatch bounds the rows one sweep statement deletes, so a large
// backlog never holds the write lock long enough to stall the indexer.
const sweepBatch = 1000

// SweepStores is Store.SweepStores: a hundred stores per transaction.
func (s *SQLiteStore) SweepStores(ctx context.Context, now time.Time) (int, error) {
	total := 0
	for {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return total, err
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM stores WHERE id IN (
			SELECT id FROM stores WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?) RETURNING id`,
			now.UnixNano(), 100)
		if err != nil {
			tx.Rollback()
			return total, err
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				tx.Rollback()
				return total, err
			}
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, `DELETE FROM store_files WHERE store_id = ?`, id); err != nil {
				tx.Rollback()
				return total, err
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM file_batches WHERE store_id = ?`, id); err != nil {
				tx.Rollback()
				return total, err
			}
			if err := envelope.DeletePrefix(ctx, tx, storeKeyPrefix(id)); err != nil {
				tx.Rollback()
				return total, err
			}
		}
		if err := tx.Commit(); err != nil {
			return total, err
		}
		if len(ids) > 0 {
			s.erase(ctx)
		}
		total += len(ids)
		if len(ids) < 100 {
			return total, nil
		}
	}
}

// SweepChunks is Store.SweepChunks: the keys first, then the chunks, a
// sweepBatch per statement.
func (s *SQLiteStore) SweepChunks(ctx context.Context) (int, error) {
	// Data keys no attached file owns: an indexer that lost a race, or a
	// crash between creating a key and recording its outcome.
	res, err := s.db.ExecContext(ctx, `DELETE FROM data_keys WHERE object_id NOT IN (
		SELECT 'vsf:' || store_id || '/' || file_id || '/' || gen FROM store_files)`)
	if err != nil {
		return 0, err
	}
	keys, _ := res.RowsAffected()
	total := 0
	defer func() {
		if keys > 0 || total > 0 || s.eraser.Pending() {
			s.erase(ctx)
		}
	}()
	for {
		res, err := s.db.ExecContext(ctx, `DELETE FROM chunks WHERE id IN (
			SELECT c.id FROM chunks c LEFT JOIN store_files f
				ON f.store_id = c.store_id AND f.file_id = c.file_id AND f.gen = c.gen
			WHERE f.file_id IS NULL LIMIT ?)`, sweepBatch)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += int(n)
		if n < sweepBatch {
			return total, nil
		}
	}
}

// sealLegacy seals the chunk text written before encryption at rest
// (sealed_text NULL), a batch per transaction, creating each generation's
// data key when it has none, then erases the plaintext from the files.
func (s *SQLiteStore) sealLegacy(ctx context.Context) error {
	total := 0
	keys := map[string]*envelope.DataKey{}
	for {
		n, err := s.sealSome(ctx, keys)
		if err != nil {
			return fmt.Errorf("seal stored chunks: %w", err)
		}
		total += n
		if n < sweepBatch {
			break
		}
	}
	if total > 0 {
		s.log.Info("vectorstores: sealed chunks stored before encryption at rest", "count", total)
		s.erase(ctx)
	}
	return nil
}

func (s *SQLiteStore) sealSome(ctx context.Context, keys map[string]*envelope.DataKey) (int, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, store_id, file_id, gen, seq, text FROM chunks WHERE sealed_text IS NULL LIMIT ?`, sweepBatch)
	if err != nil {
		return 0, err
	}
	type chunk struct {
		id, gen, seq    int64
		store, file, tx string
	}
	var todo []chunk
	for rows.Next() {
		var c chunk
		if err := rows.Scan(&c.id, &c.store, &c.file, &c.gen, &c.seq, &c.tx); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	created := map[string]*envelope.DataKey{}
	for _, c := range todo {
		kid := chunkKeyID(c.store, c.file, c.gen)
		dk := keys[kid]
		if dk == nil {
			dk = created[kid]
		}
		if dk == nil {
			dk, err = s.keys.Get(ctx, tx, kid)
			if errors.Is(err, envelope.ErrNoKey) {
				dk, err = s.keys.Create(ctx, tx, kid)
			}
			if err != nil {
				return 0, err
			}
			created[kid] = dk
		}
		if _, err := tx.ExecContext(ctx, `UPDATE chunks SET text = '', sealed_text = ? WHERE id = ?`,
			dk.Seal(chunkField(c.seq), []byte(c.tx)), c.id); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	for k, v := range created {
		keys[k] = v
	}
	return len(todo), nil
}

const batchColumns = `id, store_id, owner, created_at, cancelled_at`

// getBatch reads batch batchID of store id (without its counts), or a
// *BatchNotFoundError.
func getBatch(ctx context.Context, q rowQuerier, id, batchID string) (BatchRow, error) {
	var (
		b         BatchRow
		created   int64
		cancelled sql.NullInt64
	)
	err := q.QueryRowContext(ctx, `SELECT `+batchColumns+` FROM file_batches WHERE id = ? AND store_id = ?`, batchID, id).
		Scan(&b.ID, &b.StoreID, &b.Owner, &created, &cancelled)
	if errors.Is(err, sql.ErrNoRows) {
		return BatchRow{}, &BatchNotFoundError{ID: batchID}
	}
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: get file batch %s of %s: %w", batchID, id, err)
	}
	b.CreatedAt = fromNanos(created)
	if cancelled.Valid {
		b.CancelledAt = fromNanos(cancelled.Int64)
	}
	return b, nil
}

// batchWithCounts is getBatch and its files' counts.
func batchWithCounts(ctx context.Context, q interface {
	rowQuerier
	querier
}, id, batchID string) (BatchRow, error) {
	b, err := getBatch(ctx, q, id, batchID)
	if err != nil {
		return BatchRow{}, err
	}
	if b.Counts, err = countFiles(ctx, q, `store_id = ? AND batch_id = ?`, id, batchID); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: count files of batch %s: %w", batchID, err)
	}
	return b, nil
}

// CreateBatch is Store.CreateBatch: one transaction.
func (s *SQLiteStore) CreateBatch(ctx context.Context, b BatchRow, now time.Time, fs []FileRow) (BatchRow, error) {
	id := b.StoreID
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := getStore(ctx, tx, b.Owner, id, now); err != nil {
		return BatchRow{}, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO file_batches (`+batchColumns+`) VALUES (?, ?, ?, ?, NULL)`,
		b.ID, id, b.Owner, b.CreatedAt.UnixNano()); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM store_files WHERE store_id = ?`, id).Scan(&n); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	for _, f := range fs {
		// A file already attached joins the batch as it is.
		res, err := tx.ExecContext(ctx, `UPDATE store_files SET batch_id = ? WHERE store_id = ? AND file_id = ?`, b.ID, id, f.FileID)
		if err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
		}
		if k, err := res.RowsAffected(); err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
		} else if k > 0 {
			continue
		}
		if n >= MaxFilesPerStore {
			return BatchRow{}, ErrStoreFull
		}
		f.BatchID = b.ID
		if err := insertFile(ctx, tx, f); err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
		}
		n++
	}
	out, err := batchWithCounts(ctx, tx, id, b.ID)
	if err != nil {
		return BatchRow{}, err
	}
	if err := tx.Commit(); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	return out, nil
}

// GetBatch is Store.GetBatch.
func (s *SQLiteStore) GetBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: get file batch %s: %w", batchID, err)
	}
	defer tx.Rollback()
	if _, err := getStore(ctx, tx, owner, id, now); err != nil {
		return BatchRow{}, err
	}
	return batchWithCounts(ctx, tx, id, batchID)
}

// CancelBatch is Store.CancelBatch: one transaction.
func (s *SQLiteStore) CancelBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	defer tx.Rollback()
	if _, err := getStore(ctx, tx, owner, id, now); err != nil {
		return BatchRow{}, err
	}
	b, err := batchWithCounts(ctx, tx, id, batchID)
	if err != nil {
		return BatchRow{}, err
	}
	switch b.Status() {
	case StatusCancelled:
		return b, nil
	case StatusCompleted:
		return BatchRow{}, ErrBatchDone
	}
	rows, err := tx.QueryContext(ctx, `UPDATE store_files SET status = ?, chunks = 0, usage_bytes = 0
		WHERE store_id = ? AND batch_id = ? AND status = ? RETURNING file_id, gen`, StatusCancelled, id, batchID, StatusInProgress)
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	var gens []FileGen
	for rows.Next() {
		var fg FileGen
		if err := rows.Scan(&fg.FileID, &fg.Gen); err != nil {
			rows.Close()
			return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
		}
		gens = append(gens, fg)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	// A cancelled file keeps no chunks and no key, as a failed one.
	for _, fg := range gens {
		if _, err := tx.ExecContext(ctx, `DELETE FROM chunks WHERE store_id = ? AND file_id = ? AND gen = ?`, id, fg.FileID, fg.Gen); err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
		}
		if err := envelope.Delete(ctx, tx, chunkKeyID(id, fg.FileID, fg.Gen)); err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
		}
	}
	if _, err := tx.ExecContext(ctx, `UPDATE file_batches SET cancelled_at = ? WHERE id = ?`, now.UnixNano(), batchID); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	if b, err = batchWithCounts(ctx, tx, id, batchID); err != nil {
		return BatchRow{}, err
	}
	if err := tx.Commit(); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	if len(gens) > 0 {
		s.erase(ctx)
	}
	return b, nil
}
