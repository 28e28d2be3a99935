package vectorstores

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// The database rows and their queries. Every query that a client's request
// leads to filters by owner, and a store past its expires_at is treated as
// absent everywhere (the sweeper deletes it later).

// Statuses of a vector store file.
const (
	statusInProgress = "in_progress"
	statusCompleted  = "completed"
	statusFailed     = "failed"
	statusCancelled  = "cancelled"
)

// Codes of a vector store file's last_error (OpenAI's enum).
const (
	codeServer      = "server_error"
	codeUnsupported = "unsupported_file"
	codeInvalid     = "invalid_file"
)

type storeRow struct {
	ID, Owner, Name, Description string
	Metadata                     []byte // a JSON object
	CreatedAt, LastActiveAt      time.Time
	ExpiresDays                  int       // 0: no expires_after
	ExpiresAt                    time.Time // zero: never
}

type fileRow struct {
	StoreID, FileID, Owner, Filename string
	Gen                              int64
	Status                           string
	ErrCode, ErrMessage              string
	ChunkTokens, Overlap             int
	UsageBytes                       int64
	Attributes                       []byte // a JSON object, or nil
	CreatedAt                        time.Time
}

// counts are a store's file_counts and usage_bytes.
type counts struct {
	InProgress, Completed, Failed, Cancelled, Total int64
	UsageBytes                                      int64
}

// errInvalidCursor is an after/before id that names no item of the list.
type errInvalidCursor struct{ param, id string }

func (e *errInvalidCursor) Error() string { return "vectorstores: no such " + e.param + " id " + e.id }

// errStoreFull is an attach past MaxFilesPerStore.
var errStoreFull = errors.New("vectorstores: store full")

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

// expiresAt is when a store anchored at lastActive expires; zero: never.
func expiresAt(lastActive time.Time, days int) time.Time {
	if days <= 0 {
		return time.Time{}
	}
	return lastActive.Add(time.Duration(days) * 24 * time.Hour)
}

const storeColumns = `id, owner, name, description, metadata, created_at, last_active_at, expires_days, expires_at`

type scanner interface{ Scan(dest ...any) error }

func scanStore(row scanner) (storeRow, error) {
	var (
		st               storeRow
		meta             string
		created, active  int64
		days, expiration sql.NullInt64
	)
	if err := row.Scan(&st.ID, &st.Owner, &st.Name, &st.Description, &meta, &created, &active, &days, &expiration); err != nil {
		return storeRow{}, err
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

const fileColumns = `store_id, file_id, owner, filename, gen, status, error_code, error_message, chunk_tokens, overlap, usage_bytes, attributes, created_at`

func scanFile(row scanner) (fileRow, error) {
	var (
		f             fileRow
		code, msg     sql.NullString
		attrs         sql.NullString
		created       int64
		chunk, overlp int64
	)
	if err := row.Scan(&f.StoreID, &f.FileID, &f.Owner, &f.Filename, &f.Gen, &f.Status, &code, &msg,
		&chunk, &overlp, &f.UsageBytes, &attrs, &created); err != nil {
		return fileRow{}, err
	}
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

// getStore returns owner's live store id, or a *NotFoundError.
func (s *Service) getStore(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, owner, id string) (storeRow, error) {
	st, err := scanStore(q.QueryRowContext(ctx, `SELECT `+storeColumns+` FROM stores WHERE `+liveStore,
		id, owner, s.now().UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return storeRow{}, &NotFoundError{ID: id}
	}
	if err != nil {
		return storeRow{}, fmt.Errorf("vectorstores: get %s: %w", id, err)
	}
	return st, nil
}

// counts returns store id's file counts and usage.
func (s *Service) counts(ctx context.Context, id string) (counts, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT status, COUNT(*), COALESCE(SUM(usage_bytes), 0) FROM store_files WHERE store_id = ? GROUP BY status`, id)
	if err != nil {
		return counts{}, fmt.Errorf("vectorstores: count files of %s: %w", id, err)
	}
	defer rows.Close()
	var c counts
	for rows.Next() {
		var (
			status string
			n, b   int64
		)
		if err := rows.Scan(&status, &n, &b); err != nil {
			return counts{}, fmt.Errorf("vectorstores: count files of %s: %w", id, err)
		}
		switch status {
		case statusInProgress:
			c.InProgress = n
		case statusCompleted:
			c.Completed = n
		case statusFailed:
			c.Failed = n
		case statusCancelled:
			c.Cancelled = n
		}
		c.Total += n
		c.UsageBytes += b
	}
	if err := rows.Err(); err != nil {
		return counts{}, fmt.Errorf("vectorstores: count files of %s: %w", id, err)
	}
	return c, nil
}

// newFile is a file row about to be attached, in_progress with a fresh
// generation.
func newFile(storeID, owner, fileID, filename string, chunkTokens, overlap int, attrs []byte, now time.Time) fileRow {
	return fileRow{StoreID: storeID, FileID: fileID, Owner: owner, Filename: filename, Gen: mrand.Int64(),
		Status: statusInProgress, ChunkTokens: chunkTokens, Overlap: overlap, Attributes: attrs, CreatedAt: now}
}

func insertFile(ctx context.Context, tx *sql.Tx, f fileRow) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO store_files (`+fileColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		f.StoreID, f.FileID, f.Owner, f.Filename, f.Gen, f.Status, nullString(f.ErrCode), nullString(f.ErrMessage),
		f.ChunkTokens, f.Overlap, f.UsageBytes, nullBytes(f.Attributes), f.CreatedAt.UnixNano())
	return err
}

// createStore inserts a store and its files in one transaction.
func (s *Service) createStore(ctx context.Context, st storeRow, fs []fileRow) error {
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

// storePatch is a modify request: nil fields are left as they are.
type storePatch struct {
	name        *string
	metadata    []byte
	setExpiry   bool
	expiresDays int // with setExpiry; 0 removes expires_after
}

// modifyStore applies p to owner's store id and returns it.
func (s *Service) modifyStore(ctx context.Context, owner, id string, p storePatch) (storeRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storeRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	defer tx.Rollback()
	st, err := s.getStore(ctx, tx, owner, id)
	if err != nil {
		return storeRow{}, err
	}
	if p.name != nil {
		st.Name = *p.name
	}
	if p.metadata != nil {
		st.Metadata = p.metadata
	}
	if p.setExpiry {
		st.ExpiresDays = p.expiresDays
		st.ExpiresAt = expiresAt(st.LastActiveAt, st.ExpiresDays)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE stores SET name = ?, metadata = ?, expires_days = ?, expires_at = ? WHERE id = ?`,
		st.Name, string(st.Metadata), nullInt(st.ExpiresDays), nullTime(st.ExpiresAt), id); err != nil {
		return storeRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return storeRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	return st, nil
}

// deleteStore deletes owner's store id, its file rows and its chunks' data
// keys; the chunks, unreadable from then on, are deleted by the next sweep.
func (s *Service) deleteStore(ctx context.Context, owner, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM stores WHERE `+liveStore, id, owner, s.now().UnixNano())
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
	if err := envelope.DeletePrefix(ctx, tx, storeKeyPrefix(id)); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	s.erase(ctx)
	s.poke()
	return nil
}

// listQuery selects a page of a list, OpenAI's way: limit, order by
// creation (desc by default), after or before an item's id.
type listQuery struct {
	limit         int
	desc          bool
	after, before string
	status        string // files only: the filter parameter
}

// keyset renders the page's WHERE additions and ORDER BY on (created_at,
// key) given the cursor items' positions, and whether the rows come back
// reversed (a before page is read nearest-first, then flipped).
func keyset(q listQuery, key string, after, before *cursorPos) (where string, args []any, order string, reversed bool) {
	lt, gt, asc, desc := "<", ">", "ASC", "DESC"
	fwdCmp, fwdDir, backCmp, backDir := gt, asc, lt, desc
	if q.desc {
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

// listStores returns a page of owner's live stores and whether more follow.
func (s *Service) listStores(ctx context.Context, owner string, q listQuery) ([]storeRow, bool, error) {
	now := s.now().UnixNano()
	pos := func(param, id string) (*cursorPos, error) {
		if id == "" {
			return nil, nil
		}
		st, err := s.getStore(ctx, s.db, owner, id)
		if errors.Is(err, ErrNotFound) {
			return nil, &errInvalidCursor{param: param, id: id}
		}
		if err != nil {
			return nil, err
		}
		return &cursorPos{st.CreatedAt.UnixNano(), st.ID}, nil
	}
	after, err := pos("after", q.after)
	if err != nil {
		return nil, false, err
	}
	before, err := pos("before", q.before)
	if err != nil {
		return nil, false, err
	}
	where, kargs, order, reversed := keyset(q, "id", after, before)
	args := append([]any{owner, now}, kargs...)
	args = append(args, q.limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+storeColumns+` FROM stores WHERE owner = ? AND (expires_at IS NULL OR expires_at > ?)`+
		where+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list: %w", err)
	}
	defer rows.Close()
	var out []storeRow
	for rows.Next() {
		st, err := scanStore(rows)
		if err != nil {
			return nil, false, fmt.Errorf("vectorstores: list: %w", err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("vectorstores: list: %w", err)
	}
	more := len(out) > q.limit
	if more {
		out = out[:q.limit]
	}
	if reversed {
		slices.Reverse(out)
	}
	return out, more, nil
}

// attachFiles adds files to owner's store id, skipping those already
// attached, and returns each file's row (the existing one for those).
func (s *Service) attachFiles(ctx context.Context, owner, id string, fs []fileRow) ([]fileRow, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	defer tx.Rollback()
	if _, err := s.getStore(ctx, tx, owner, id); err != nil {
		return nil, err
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM store_files WHERE store_id = ?`, id).Scan(&n); err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	out := make([]fileRow, 0, len(fs))
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
			return nil, errStoreFull
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
	s.poke()
	return out, nil
}

// fileNotFound is a vector store file that is not attached.
type fileNotFound struct{ id string }

func (e *fileNotFound) Error() string {
	return "vectorstores: vector store file " + e.id + " not found"
}

// getFile returns file fileID of owner's store id.
func (s *Service) getFile(ctx context.Context, owner, id, fileID string) (fileRow, error) {
	if _, err := s.getStore(ctx, s.db, owner, id); err != nil {
		return fileRow{}, err
	}
	f, err := scanFile(s.db.QueryRowContext(ctx, `SELECT `+fileColumns+` FROM store_files WHERE store_id = ? AND file_id = ?`, id, fileID))
	if errors.Is(err, sql.ErrNoRows) {
		return fileRow{}, &fileNotFound{id: fileID}
	}
	if err != nil {
		return fileRow{}, fmt.Errorf("vectorstores: get file %s of %s: %w", fileID, id, err)
	}
	return f, nil
}

// setAttributes replaces a vector store file's attributes.
func (s *Service) setAttributes(ctx context.Context, owner, id, fileID string, attrs []byte) (fileRow, error) {
	f, err := s.getFile(ctx, owner, id, fileID)
	if err != nil {
		return fileRow{}, err
	}
	if _, err := s.db.ExecContext(ctx, `UPDATE store_files SET attributes = ? WHERE store_id = ? AND file_id = ?`,
		nullBytes(attrs), id, fileID); err != nil {
		return fileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	f.Attributes = attrs
	return f, nil
}

// detachFile removes file fileID from owner's store id. Its chunks are
// unreachable at once (searches join on the row), unreadable (their data
// key goes with the row) and deleted by the next sweep; an indexer still working on it finds its row gone and stops.
func (s *Service) detachFile(ctx context.Context, owner, id, fileID string) error {
	if _, err := s.getStore(ctx, s.db, owner, id); err != nil {
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
		return &fileNotFound{id: fileID}
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
	s.poke()
	return nil
}

// listFiles returns a page of the files of owner's store id.
func (s *Service) listFiles(ctx context.Context, owner, id string, q listQuery) ([]fileRow, bool, error) {
	if _, err := s.getStore(ctx, s.db, owner, id); err != nil {
		return nil, false, err
	}
	pos := func(param, fileID string) (*cursorPos, error) {
		if fileID == "" {
			return nil, nil
		}
		var created int64
		err := s.db.QueryRowContext(ctx, `SELECT created_at FROM store_files WHERE store_id = ? AND file_id = ?`, id, fileID).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, &errInvalidCursor{param: param, id: fileID}
		}
		if err != nil {
			return nil, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
		}
		return &cursorPos{created, fileID}, nil
	}
	after, err := pos("after", q.after)
	if err != nil {
		return nil, false, err
	}
	before, err := pos("before", q.before)
	if err != nil {
		return nil, false, err
	}
	where, kargs, order, reversed := keyset(q, "file_id", after, before)
	args := []any{id}
	if q.status != "" {
		where = ` AND status = ?` + where
		args = append(args, q.status)
	}
	args = append(args, kargs...)
	args = append(args, q.limit+1)
	rows, err := s.db.QueryContext(ctx, `SELECT `+fileColumns+` FROM store_files WHERE store_id = ?`+where+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
	}
	defer rows.Close()
	var out []fileRow
	for rows.Next() {
		f, err := scanFile(rows)
		if err != nil {
			return nil, false, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("vectorstores: list files of %s: %w", id, err)
	}
	more := len(out) > q.limit
	if more {
		out = out[:q.limit]
	}
	if reversed {
		slices.Reverse(out)
	}
	return out, more, nil
}

// touch records that store id was used now, moving its expiry.
func (s *Service) touch(ctx context.Context, id string) error {
	now := s.now().UnixNano()
	_, err := s.db.ExecContext(ctx, `UPDATE stores SET last_active_at = ?,
		expires_at = CASE WHEN expires_days IS NULL THEN NULL ELSE ? + expires_days * ? END WHERE id = ?`,
		now, now, int64(24*time.Hour), id)
	if err != nil {
		return fmt.Errorf("vectorstores: touch %s: %w", id, err)
	}
	return nil
}

// sweepBatch bounds the rows one sweep statement deletes, so a large
// backlog never holds the write lock long enough to stall the indexer.
const sweepBatch = 1000

// sweep deletes the expired stores and their files, then the chunks no
// attached file owns (detached, deleted stores, lost indexing races).
func (s *Service) sweep(ctx context.Context) {
	stores, err := s.sweepStores(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("vectorstores: sweep expired stores", "err", err)
	}
	chunks, err := s.sweepChunks(ctx)
	if err != nil && ctx.Err() == nil {
		s.log.Error("vectorstores: sweep detached chunks", "err", err)
	}
	if stores > 0 || chunks > 0 {
		s.log.Info("vectorstores: swept", "expired_stores", stores, "chunks", chunks)
	}
}

func (s *Service) sweepStores(ctx context.Context) (int, error) {
	total := 0
	for {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return total, err
		}
		rows, err := tx.QueryContext(ctx, `DELETE FROM stores WHERE id IN (
			SELECT id FROM stores WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?) RETURNING id`,
			s.now().UnixNano(), 100)
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

func (s *Service) sweepChunks(ctx context.Context) (int, error) {
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
