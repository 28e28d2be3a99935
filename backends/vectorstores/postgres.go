package vectorstores

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresComponent is the pgdb component (schema version table) of the
// Postgres store.
const PostgresComponent = "vectorstores"

// PostgresMigrations[i] brings the Postgres schema from version i to i+1
// (pgdb.Open). Append only.
var PostgresMigrations = []string{
	// 1: stores, files, chunks. Times are Unix nanoseconds. A store's
	// version changes with every change to the chunks a search reads
	// (indexing, detach, attributes), keying the replicas' vector caches. A
	// file row holds its generation's wrapped data key (NULL before
	// indexing starts and after it fails), so a detach or a store's
	// deletion deletes the key with the row; claimed_by and lease_until
	// are the indexing claim (the replica indexing the generation, and
	// until when its claim holds unless renewed).
	`CREATE TABLE vector_stores (
		id             text PRIMARY KEY,
		owner          text NOT NULL,
		name           text NOT NULL,
		description    text NOT NULL,
		metadata       text NOT NULL,
		created_at     bigint NOT NULL,
		last_active_at bigint NOT NULL,
		expires_days   integer,
		expires_at     bigint,
		version        bigint NOT NULL DEFAULT 0
	);
	CREATE INDEX vector_stores_owner_created ON vector_stores (owner, created_at, id);
	CREATE INDEX vector_stores_expires ON vector_stores (expires_at) WHERE expires_at IS NOT NULL;
	CREATE TABLE vector_store_files (
		store_id      text NOT NULL,
		file_id       text NOT NULL,
		owner         text NOT NULL,
		filename      text NOT NULL,
		gen           bigint NOT NULL,
		status        text NOT NULL,
		error_code    text,
		error_message text,
		chunk_tokens  integer NOT NULL,
		overlap       integer NOT NULL,
		usage_bytes   bigint NOT NULL,
		attributes    text,
		created_at    bigint NOT NULL,
		chunks        bigint NOT NULL DEFAULT 0,
		kek_id        text,
		data_key      bytea,
		claimed_by    text,
		lease_until   timestamptz,
		PRIMARY KEY (store_id, file_id)
	);
	CREATE INDEX vector_store_files_created ON vector_store_files (store_id, created_at, file_id);
	CREATE INDEX vector_store_files_pending ON vector_store_files (created_at) WHERE status = 'in_progress';
	CREATE INDEX vector_store_files_owner ON vector_store_files (owner);
	CREATE TABLE vector_store_chunks (
		id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		store_id text NOT NULL,
		file_id  text NOT NULL,
		gen      bigint NOT NULL,
		seq      bigint NOT NULL,
		sealed   bytea NOT NULL,  -- the chunk's text, sealed
		vector   bytea NOT NULL   -- the embedding, little-endian float32s
	);
	CREATE INDEX vector_store_chunks_file ON vector_store_chunks (store_id, file_id, gen);`,
	// 2: file batches. A batch's files carry its id (batch_id, NULL for
	// files attached otherwise); its status and counts are its files'.
	// cancelled_at is set when a cancel cancelled its files in progress.
	`CREATE TABLE vector_store_file_batches (
		id           text PRIMARY KEY,
		store_id     text NOT NULL,
		owner        text NOT NULL,
		created_at   bigint NOT NULL,
		cancelled_at bigint
	);
	CREATE INDEX vector_store_file_batches_store ON vector_store_file_batches (store_id);
	ALTER TABLE vector_store_files ADD COLUMN batch_id text;
	CREATE INDEX vector_store_files_batch ON vector_store_files (batch_id, created_at, file_id) WHERE batch_id IS NOT NULL;`,
}

// ErrLeaseLost is indexing work another replica claimed after this one's
// lease on it ran out: this replica stops and writes nothing more. It
// matches ErrDetached, so the Service stops as for a detached file.
var ErrLeaseLost = fmt.Errorf("%w (claimed by another replica after this one's lease ran out)", ErrDetached)

// Defaults of PostgresOptions.
const (
	DefaultLease      = time.Minute
	DefaultCacheBytes = 256 << 20
)

// PostgresOptions configures a PostgresStore.
type PostgresOptions struct {
	// Pool sizes the connection pool (OpenPostgresStore).
	Pool pgdb.Pool
	// Lease is how long a replica's claim on a file being indexed holds
	// without renewal; the replica renews it every Lease/3 while it
	// indexes. A replica that dies leaves its files to the others after
	// at most Lease. 0: DefaultLease.
	Lease time.Duration
	// CacheBytes bounds this replica's cache of stores' chunks (vectors
	// and sealed text), least recently searched evicted first; a store
	// larger than it is read from the database at every search. 0:
	// DefaultCacheBytes; negative: no cache.
	CacheBytes int64
	// Replica names this replica in claimed_by; "": host name, process id
	// and a random suffix.
	Replica string
	// Logger; nil: slog.Default().
	Logger *slog.Logger
}

// PostgresStore is the Store of a fleet: every backends replica reads and
// writes one PostgreSQL database. Indexing work is claimed: Pending hands
// a file generation to one replica at a time (SELECT ... FOR UPDATE SKIP
// LOCKED, a lease renewed while it indexes), ResetChunks, InsertChunks and
// Finish write only under this replica's claim, and a replica that stops
// renewing loses its files to the others when the lease runs out.
//
// Embeddings are scored in the replica (no pgvector): Scan streams the
// store's chunks, and keeps them in a per-replica cache keyed by the
// store's version, bounded by CacheBytes across stores (LRU), so repeated
// searches of an unchanged store read one row from the database.
type PostgresStore struct {
	pool    *pgxpool.Pool
	own     bool
	replica string
	lease   time.Duration
	log     *slog.Logger
	cache   *vecCache

	mu     sync.Mutex
	active map[jobKey]bool // generations this replica is indexing: their leases are renewed
	stop   context.CancelFunc
	done   chan struct{}
	closed sync.Once
}

type jobKey struct {
	store, file string
	gen         int64
}

var _ Store = (*PostgresStore)(nil)

// OpenPostgresStore connects to dsn (pgdb.Open), migrates the vector
// stores' tables and starts the lease renewer. Close closes the pool.
func OpenPostgresStore(ctx context.Context, dsn string, opts PostgresOptions) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, opts.Pool)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: open: %w", err)
	}
	s := NewPostgresStore(pool, opts)
	s.own = true
	return s, nil
}

// NewPostgresStore is a Store on a pool the caller opened with
// pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, ...) and
// closes; Close leaves it open.
func NewPostgresStore(pool *pgxpool.Pool, opts PostgresOptions) *PostgresStore {
	s := &PostgresStore{pool: pool, replica: opts.Replica, lease: opts.Lease, log: opts.Logger,
		active: map[jobKey]bool{}, done: make(chan struct{})}
	if s.lease <= 0 {
		s.lease = DefaultLease
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.replica == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		s.replica = host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
	}
	switch cb := opts.CacheBytes; {
	case cb == 0:
		s.cache = newVecCache(DefaultCacheBytes)
	case cb > 0:
		s.cache = newVecCache(cb)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	go s.renewLoop(ctx)
	return s
}

// Replica is the name this store claims work under.
func (s *PostgresStore) Replica() string { return s.replica }

// Close stops renewing leases, gives back this replica's unfinished claims
// (another replica may take them at once) and closes the pool if the store
// opened it. Stop the Service's Run first.
func (s *PostgresStore) Close() error {
	s.closed.Do(s.close)
	return nil
}

func (s *PostgresStore) close() {
	s.stop()
	<-s.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.pool.Exec(ctx, `UPDATE vector_store_files SET claimed_by = NULL, lease_until = NULL
		WHERE claimed_by = $1 AND status = $2`, s.replica, StatusInProgress)
	if err != nil {
		// Not fatal: the leases run out by themselves.
		s.log.Warn("vectorstores: give back indexing claims", "err", err)
	}
	if s.own {
		s.pool.Close()
	}
}

// leaseSQL is the lease's end from now, in the database's clock: replicas'
// clocks never decide who holds a claim.
func (s *PostgresStore) leaseSQL(param int) string {
	return "now() + make_interval(secs => $" + strconv.Itoa(param) + ")"
}

func (s *PostgresStore) leaseSecs() float64 { return s.lease.Seconds() }

// renewLoop renews the leases of the generations this replica is
// indexing every Lease/3, dropping those it no longer holds.
func (s *PostgresStore) renewLoop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(max(s.lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.renew(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("vectorstores: renew indexing leases", "err", err)
		}
	}
}

func (s *PostgresStore) renew(ctx context.Context) error {
	s.mu.Lock()
	var stores, files []string
	var gens []int64
	for k := range s.active {
		stores, files, gens = append(stores, k.store), append(files, k.file), append(gens, k.gen)
	}
	s.mu.Unlock()
	if len(stores) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, `UPDATE vector_store_files SET lease_until = `+s.leaseSQL(5)+`
		WHERE claimed_by = $1 AND status = 'in_progress'
		  AND (store_id, file_id, gen) IN (SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[]))
		RETURNING store_id, file_id, gen`, s.replica, stores, files, gens, s.leaseSecs())
	if err != nil {
		return err
	}
	held := map[jobKey]bool{}
	for rows.Next() {
		var k jobKey
		if err := rows.Scan(&k.store, &k.file, &k.gen); err != nil {
			return err
		}
		held[k] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	for i := range stores {
		if k := (jobKey{stores[i], files[i], gens[i]}); !held[k] {
			delete(s.active, k)
		}
	}
	s.mu.Unlock()
	return nil
}

func (s *PostgresStore) setActive(j Job, on bool) {
	k := jobKey{j.StoreID, j.FileID, j.Gen}
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.active[k] = true
	} else {
		delete(s.active, k)
	}
}

// pgStoreColumns and pgFileColumns are read by scanStore and scanFile
// (sqlite.go), whose sql.Null* destinations pgx's stdlib-compatible Scan
// accepts.
const (
	pgStoreColumns = `id, owner, name, description, metadata, created_at, last_active_at, expires_days, expires_at`
	pgFileColumns  = `store_id, file_id, owner, filename, gen, status, error_code, error_message, chunk_tokens, overlap, usage_bytes, attributes, created_at, batch_id`
	pgLiveStore    = `id = $1 AND owner = $2 AND (expires_at IS NULL OR expires_at > $3)`
)

type pgQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func pgGetStore(ctx context.Context, q pgQuerier, owner, id string, now time.Time, lock bool) (StoreRow, error) {
	query := `SELECT ` + pgStoreColumns + ` FROM vector_stores WHERE ` + pgLiveStore
	if lock {
		query += ` FOR UPDATE`
	}
	st, err := scanStore(q.QueryRow(ctx, query, id, owner, now.UnixNano()))
	if errors.Is(err, pgx.ErrNoRows) {
		return StoreRow{}, &NotFoundError{ID: id}
	}
	if err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: get %s: %w", id, err)
	}
	return st, nil
}

func pgScanFile(row pgx.Row) (FileRow, error) { return scanFile(row) }

// rollback ends a transaction that did not commit; its error is moot.
func rollback(ctx context.Context, tx pgx.Tx) { _ = tx.Rollback(context.WithoutCancel(ctx)) }

// GetStore is Store.GetStore.
func (s *PostgresStore) GetStore(ctx context.Context, owner, id string, now time.Time) (StoreRow, error) {
	return pgGetStore(ctx, s.pool, owner, id, now, false)
}

// CreateStore is Store.CreateStore: one transaction.
func (s *PostgresStore) CreateStore(ctx context.Context, st StoreRow, fs []FileRow) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, `INSERT INTO vector_stores (`+pgStoreColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		st.ID, st.Owner, st.Name, st.Description, string(st.Metadata), st.CreatedAt.UnixNano(), st.LastActiveAt.UnixNano(),
		nullInt(st.ExpiresDays), nullTime(st.ExpiresAt)); err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	for _, f := range fs {
		if err := pgInsertFile(ctx, tx, f); err != nil {
			return fmt.Errorf("vectorstores: create: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("vectorstores: create: %w", err)
	}
	return nil
}

func pgInsertFile(ctx context.Context, tx pgx.Tx, f FileRow) error {
	_, err := tx.Exec(ctx, `INSERT INTO vector_store_files (`+pgFileColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		f.StoreID, f.FileID, f.Owner, f.Filename, f.Gen, f.Status, nullString(f.ErrCode), nullString(f.ErrMessage),
		f.ChunkTokens, f.Overlap, f.UsageBytes, nullBytes(f.Attributes), f.CreatedAt.UnixNano(), nullString(f.BatchID))
	return err
}

// ModifyStore is Store.ModifyStore.
func (s *PostgresStore) ModifyStore(ctx context.Context, owner, id string, now time.Time, p StorePatch) (StoreRow, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	defer rollback(ctx, tx)
	st, err := pgGetStore(ctx, tx, owner, id, now, true)
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
	if _, err := tx.Exec(ctx, `UPDATE vector_stores SET name = $1, metadata = $2, expires_days = $3, expires_at = $4 WHERE id = $5`,
		st.Name, string(st.Metadata), nullInt(st.ExpiresDays), nullTime(st.ExpiresAt), id); err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return StoreRow{}, fmt.Errorf("vectorstores: modify %s: %w", id, err)
	}
	return st, nil
}

// DeleteStore is Store.DeleteStore: the store and its file rows, which
// hold the data keys, in one transaction.
func (s *PostgresStore) DeleteStore(ctx context.Context, owner, id string, now time.Time) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	defer rollback(ctx, tx)
	tag, err := tx.Exec(ctx, `DELETE FROM vector_stores WHERE `+pgLiveStore, id, owner, now.UnixNano())
	if err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return &NotFoundError{ID: id}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM vector_store_files WHERE store_id = $1`, id); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM vector_store_file_batches WHERE store_id = $1`, id); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("vectorstores: delete %s: %w", id, err)
	}
	s.cache.drop(id)
	return nil
}

// pgKeyset is keyset (sqlite.go) with numbered placeholders from next.
func pgKeyset(q ListQuery, key string, after, before *cursorPos, args []any) (where string, _ []any, order string, reversed bool) {
	lt, gt, asc, desc := "<", ">", "ASC", "DESC"
	fwdCmp, fwdDir, backCmp, backDir := gt, asc, lt, desc
	if q.Desc {
		fwdCmp, fwdDir, backCmp, backDir = lt, desc, gt, asc
	}
	add := func(cmp string, p *cursorPos) {
		args = append(args, p.created, p.id)
		c, i := "$"+strconv.Itoa(len(args)-1), "$"+strconv.Itoa(len(args))
		where += ` AND (created_at ` + cmp + ` ` + c + ` OR (created_at = ` + c + ` AND ` + key + ` ` + cmp + ` ` + i + `))`
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

// ListStores is Store.ListStores.
func (s *PostgresStore) ListStores(ctx context.Context, owner string, now time.Time, q ListQuery) ([]StoreRow, bool, error) {
	pos := func(param, id string) (*cursorPos, error) {
		if id == "" {
			return nil, nil
		}
		st, err := pgGetStore(ctx, s.pool, owner, id, now, false)
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
	where, args, order, reversed := pgKeyset(q, "id", after, before, []any{owner, now.UnixNano()})
	args = append(args, q.Limit+1)
	rows, err := s.pool.Query(ctx, `SELECT `+pgStoreColumns+` FROM vector_stores WHERE owner = $1 AND (expires_at IS NULL OR expires_at > $2)`+
		where+order+` LIMIT $`+strconv.Itoa(len(args)), args...)
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

// Counts is Store.Counts.
func (s *PostgresStore) Counts(ctx context.Context, id string) (Counts, error) {
	c, err := pgCountFiles(ctx, s.pool, `store_id = $1`, id)
	if err != nil {
		return Counts{}, fmt.Errorf("vectorstores: count files of %s: %w", id, err)
	}
	return c, nil
}

type pgRowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// pgCountFiles counts the files where where holds, by status.
func pgCountFiles(ctx context.Context, q pgRowsQuerier, where string, args ...any) (Counts, error) {
	rows, err := q.Query(ctx,
		`SELECT status, count(*), coalesce(sum(usage_bytes), 0)::bigint FROM vector_store_files WHERE `+where+` GROUP BY status`, args...)
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

// Touch is Store.Touch.
func (s *PostgresStore) Touch(ctx context.Context, id string, now time.Time) error {
	_, err := s.pool.Exec(ctx, `UPDATE vector_stores SET last_active_at = $1::bigint,
		expires_at = CASE WHEN expires_days IS NULL THEN NULL ELSE $1::bigint + expires_days * $2::bigint END WHERE id = $3`,
		now.UnixNano(), int64(24*time.Hour), id)
	if err != nil {
		return fmt.Errorf("vectorstores: touch %s: %w", id, err)
	}
	return nil
}

// AttachFiles is Store.AttachFiles: one transaction holding the store's
// row, so concurrent attaches (from any replica) count its files one after
// the other.
func (s *PostgresStore) AttachFiles(ctx context.Context, owner, id string, now time.Time, fs []FileRow) ([]FileRow, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, owner, id, now, true); err != nil {
		return nil, err
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM vector_store_files WHERE store_id = $1`, id).Scan(&n); err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	out := make([]FileRow, 0, len(fs))
	for _, f := range fs {
		existing, err := pgScanFile(tx.QueryRow(ctx, `SELECT `+pgFileColumns+` FROM vector_store_files WHERE store_id = $1 AND file_id = $2`, id, f.FileID))
		if err == nil {
			out = append(out, existing)
			continue
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
		}
		if n >= MaxFilesPerStore {
			return nil, ErrStoreFull
		}
		if err := pgInsertFile(ctx, tx, f); err != nil {
			return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
		}
		n++
		out = append(out, f)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("vectorstores: attach to %s: %w", id, err)
	}
	return out, nil
}

// GetFile is Store.GetFile.
func (s *PostgresStore) GetFile(ctx context.Context, owner, id, fileID string, now time.Time) (FileRow, error) {
	if _, err := pgGetStore(ctx, s.pool, owner, id, now, false); err != nil {
		return FileRow{}, err
	}
	f, err := pgScanFile(s.pool.QueryRow(ctx, `SELECT `+pgFileColumns+` FROM vector_store_files WHERE store_id = $1 AND file_id = $2`, id, fileID))
	if errors.Is(err, pgx.ErrNoRows) {
		return FileRow{}, &FileNotFoundError{ID: fileID}
	}
	if err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: get file %s of %s: %w", fileID, id, err)
	}
	return f, nil
}

// bumpVersion marks store id's searchable chunks changed (the replicas'
// caches of it stale). Every transaction that changes a store's files or
// chunks calls it first: the store's row is then the first lock it takes,
// so such transactions cannot deadlock on each other.
func bumpVersion(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `UPDATE vector_stores SET version = version + 1 WHERE id = $1`, id)
	return err
}

// SetAttributes is Store.SetAttributes.
func (s *PostgresStore) SetAttributes(ctx context.Context, owner, id, fileID string, now time.Time, attrs []byte) (FileRow, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, owner, id, now, true); err != nil {
		return FileRow{}, err
	}
	if err := bumpVersion(ctx, tx, id); err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	f, err := pgScanFile(tx.QueryRow(ctx, `UPDATE vector_store_files SET attributes = $1 WHERE store_id = $2 AND file_id = $3
		RETURNING `+pgFileColumns, nullBytes(attrs), id, fileID))
	if errors.Is(err, pgx.ErrNoRows) {
		return FileRow{}, &FileNotFoundError{ID: fileID}
	}
	if err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return FileRow{}, fmt.Errorf("vectorstores: update file %s of %s: %w", fileID, id, err)
	}
	return f, nil
}

// DetachFile is Store.DetachFile: the row, holding the generation's data
// key, goes; searches join on it, so the chunks are unreachable at once.
func (s *PostgresStore) DetachFile(ctx context.Context, owner, id, fileID string, now time.Time) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, owner, id, now, true); err != nil {
		return err
	}
	if err := bumpVersion(ctx, tx, id); err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	tag, err := tx.Exec(ctx, `DELETE FROM vector_store_files WHERE store_id = $1 AND file_id = $2`, id, fileID)
	if err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	if tag.RowsAffected() == 0 {
		return &FileNotFoundError{ID: fileID}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("vectorstores: detach %s from %s: %w", fileID, id, err)
	}
	return nil
}

// ListFiles is Store.ListFiles.
func (s *PostgresStore) ListFiles(ctx context.Context, owner, id string, now time.Time, q ListQuery) ([]FileRow, bool, error) {
	if _, err := pgGetStore(ctx, s.pool, owner, id, now, false); err != nil {
		return nil, false, err
	}
	// scope is the files listed: the store's, or one batch's.
	scope, args := `store_id = $1`, []any{id}
	if q.BatchID != "" {
		if _, err := pgGetBatch(ctx, s.pool, id, q.BatchID); err != nil {
			return nil, false, err
		}
		scope, args = `store_id = $1 AND batch_id = $2`, []any{id, q.BatchID}
	}
	pos := func(param, fileID string) (*cursorPos, error) {
		if fileID == "" {
			return nil, nil
		}
		var created int64
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM vector_store_files WHERE `+scope+` AND file_id = $`+strconv.Itoa(len(args)+1),
			append(slices.Clone(args), fileID)...).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
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
	status := ""
	if q.Status != "" {
		args = append(args, q.Status)
		status = ` AND status = $` + strconv.Itoa(len(args))
	}
	where, args, order, reversed := pgKeyset(q, "file_id", after, before, args)
	args = append(args, q.Limit+1)
	rows, err := s.pool.Query(ctx, `SELECT `+pgFileColumns+` FROM vector_store_files WHERE `+scope+status+where+order+
		` LIMIT $`+strconv.Itoa(len(args)), args...)
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

// Pending is Store.Pending, claiming: it returns up to limit files in
// progress that no other replica holds (unclaimed, claimed by this one, or
// whose lease has run out), oldest attached first, and claims them for
// Lease. Rows another replica's transaction holds are skipped (SKIP
// LOCKED), so two replicas asking at once get different files.
func (s *PostgresStore) Pending(ctx context.Context, limit int) ([]Job, error) {
	rows, err := s.pool.Query(ctx, `UPDATE vector_store_files f SET claimed_by = $1, lease_until = `+s.leaseSQL(3)+`
		FROM (SELECT store_id, file_id FROM vector_store_files
		       WHERE status = 'in_progress' AND (claimed_by IS NULL OR claimed_by = $1 OR lease_until < now())
		       ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED) p
		WHERE f.store_id = p.store_id AND f.file_id = p.file_id
		RETURNING f.store_id, f.file_id, f.owner, f.filename, f.gen, f.chunk_tokens, f.overlap, f.created_at`,
		s.replica, limit, s.leaseSecs())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	type pending struct {
		j       Job
		created int64
	}
	var ps []pending
	for rows.Next() {
		var p pending
		if err := rows.Scan(&p.j.StoreID, &p.j.FileID, &p.j.Owner, &p.j.Filename, &p.j.Gen, &p.j.ChunkTokens, &p.j.Overlap, &p.created); err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// RETURNING keeps no order.
	slices.SortStableFunc(ps, func(a, b pending) int {
		if a.created != b.created {
			return int(min(max(a.created-b.created, -1), 1))
		}
		if a.j.StoreID != b.j.StoreID {
			if a.j.StoreID < b.j.StoreID {
				return -1
			}
			return 1
		}
		if a.j.FileID < b.j.FileID {
			return -1
		}
		return 1
	})
	out := make([]Job, len(ps))
	for i, p := range ps {
		out[i] = p.j
	}
	return out, nil
}

// claim locks j's file row in tx and checks that this replica may write
// for it: ErrDetached if the generation is gone or (inProgress) no longer
// in progress, ErrLeaseLost if another replica holds it. take: also take
// a claim that is free or has run out (starting the work).
func (s *PostgresStore) claim(ctx context.Context, tx pgx.Tx, j Job, inProgress, take bool) error {
	var (
		status    string
		claimedBy *string
		live      bool
	)
	err := tx.QueryRow(ctx, `SELECT status, claimed_by, coalesce(lease_until > now(), false) FROM vector_store_files
		WHERE store_id = $1 AND file_id = $2 AND gen = $3 FOR UPDATE`, j.StoreID, j.FileID, j.Gen).Scan(&status, &claimedBy, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrDetached
	}
	if err != nil {
		return err
	}
	if inProgress && status != StatusInProgress {
		return ErrDetached
	}
	if claimedBy != nil && *claimedBy != s.replica && (live || !take) {
		return ErrLeaseLost
	}
	return nil
}

// ResetChunks is Store.ResetChunks: it also claims j for this replica
// (unless another holds it: ErrLeaseLost) and starts renewing the claim.
func (s *PostgresStore) ResetChunks(ctx context.Context, j Job, key []byte) error {
	kekID, err := envelope.WrappedKEKID(key)
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if err := bumpVersion(ctx, tx, j.StoreID); err != nil {
		return err
	}
	// Only a file still in progress: a job listed before its file was
	// completed or cancelled must not reset its chunks or get a key back.
	if err := s.claim(ctx, tx, j, true, true); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM vector_store_chunks WHERE store_id = $1 AND file_id = $2 AND gen = $3`,
		j.StoreID, j.FileID, j.Gen); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE vector_store_files SET chunks = 0, kek_id = $4, data_key = $5,
		claimed_by = $6, lease_until = `+s.leaseSQL(7)+`
		WHERE store_id = $1 AND file_id = $2 AND gen = $3`,
		j.StoreID, j.FileID, j.Gen, kekID, key, s.replica, s.leaseSecs()); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.setActive(j, true)
	return nil
}

// ownerLock is the advisory lock serializing the chunk inserts of one
// owner's stores, so that the limit check and the insert are atomic
// across replicas.
func ownerLock(owner string) int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard.vectorstores.chunks." + owner))
	return int64(h.Sum64())
}

// InsertChunks is Store.InsertChunks. The owner's advisory lock, taken
// first, makes the counts the check sees the counts the insert adds to,
// whichever replica inserts; each insert renews this replica's lease.
func (s *PostgresStore) InsertChunks(ctx context.Context, j Job, chunks []Chunk, check func(inStore, ofOwner int64) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, ownerLock(j.Owner)); err != nil {
		return err
	}
	if err := bumpVersion(ctx, tx, j.StoreID); err != nil {
		return err
	}
	if err := s.claim(ctx, tx, j, true, false); err != nil {
		if errors.Is(err, ErrDetached) {
			s.setActive(j, false)
		}
		return err
	}
	inStore, ofOwner, err := pgChunkCounts(ctx, tx, j.StoreID, j.Owner)
	if err != nil {
		return err
	}
	if err := check(inStore, ofOwner); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE vector_store_files SET chunks = chunks + $4, claimed_by = $5, lease_until = `+s.leaseSQL(6)+`
		WHERE store_id = $1 AND file_id = $2 AND gen = $3`,
		j.StoreID, j.FileID, j.Gen, len(chunks), s.replica, s.leaseSecs()); err != nil {
		return err
	}
	rows := make([][]any, len(chunks))
	for i, c := range chunks {
		rows[i] = []any{j.StoreID, j.FileID, j.Gen, c.Seq, c.Sealed, c.Vector}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"vector_store_chunks"},
		[]string{"store_id", "file_id", "gen", "seq", "sealed", "vector"}, pgx.CopyFromRows(rows)); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	s.setActive(j, true)
	return nil
}

// Finish is Store.Finish: recorded only while j's generation is in
// progress and not another replica's; the claim ends with it.
func (s *PostgresStore) Finish(ctx context.Context, j Job, status, code, msg string, usage int64) error {
	defer s.setActive(j, false)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	if err := bumpVersion(ctx, tx, j.StoreID); err != nil {
		return err
	}
	switch err := s.claim(ctx, tx, j, true, false); {
	case errors.Is(err, ErrLeaseLost):
		s.log.Info("vectorstores: indexing outcome not recorded: another replica took the file over", "store", j.StoreID, "file", j.FileID)
		return nil
	case errors.Is(err, ErrDetached):
		return nil
	case err != nil:
		return err
	}
	completed := status == StatusCompleted
	if _, err := tx.Exec(ctx, `UPDATE vector_store_files SET status = $4, error_code = $5, error_message = $6, usage_bytes = $7,
		chunks = CASE WHEN $8 THEN chunks ELSE 0 END,
		kek_id = CASE WHEN $8 THEN kek_id END, data_key = CASE WHEN $8 THEN data_key END,
		claimed_by = NULL, lease_until = NULL
		WHERE store_id = $1 AND file_id = $2 AND gen = $3`,
		j.StoreID, j.FileID, j.Gen, status, nullString(code), nullString(msg), usage, completed); err != nil {
		return err
	}
	if !completed {
		if _, err := tx.Exec(ctx, `DELETE FROM vector_store_chunks WHERE store_id = $1 AND file_id = $2 AND gen = $3`,
			j.StoreID, j.FileID, j.Gen); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func pgChunkCounts(ctx context.Context, q pgQuerier, storeID, owner string) (inStore, ofOwner int64, err error) {
	err = q.QueryRow(ctx, `SELECT
		(SELECT coalesce(sum(chunks), 0)::bigint FROM vector_store_files WHERE store_id = $1),
		(SELECT coalesce(sum(chunks), 0)::bigint FROM vector_store_files WHERE owner = $2)`,
		storeID, owner).Scan(&inStore, &ofOwner)
	return inStore, ofOwner, err
}

// ChunkCounts is Store.ChunkCounts.
func (s *PostgresStore) ChunkCounts(ctx context.Context, storeID, owner string) (int64, int64, error) {
	return pgChunkCounts(ctx, s.pool, storeID, owner)
}

// ChunkKeys is Store.ChunkKeys.
func (s *PostgresStore) ChunkKeys(ctx context.Context, storeID string) (map[FileGen][]byte, error) {
	rows, err := s.pool.Query(ctx, `SELECT file_id, gen, data_key FROM vector_store_files WHERE store_id = $1 AND data_key IS NOT NULL`, storeID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[FileGen][]byte{}
	for rows.Next() {
		var fg FileGen
		var w []byte
		if err := rows.Scan(&fg.FileID, &fg.Gen, &w); err != nil {
			return nil, err
		}
		out[fg] = w
	}
	return out, rows.Err()
}

// ChunkKey is Store.ChunkKey.
func (s *PostgresStore) ChunkKey(ctx context.Context, storeID string, fg FileGen) ([]byte, error) {
	var w []byte
	err := s.pool.QueryRow(ctx, `SELECT data_key FROM vector_store_files WHERE store_id = $1 AND file_id = $2 AND gen = $3 AND data_key IS NOT NULL`,
		storeID, fg.FileID, fg.Gen).Scan(&w)
	kid := chunkKeyID(storeID, fg.FileID, fg.Gen)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("vectorstores: data key of %s: %w", kid, envelope.ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("vectorstores: data key of %s: %w", kid, err)
	}
	return w, nil
}

// Scan is Store.Scan. It reads the store's version and its chunks in one
// snapshot; when this replica's cache holds the store at that version the
// chunks come from memory, else they stream from the database (a row at a
// time) and, if the store fits the cache, are kept for the next search.
func (s *PostgresStore) Scan(ctx context.Context, storeID string, fn func(ScannedChunk) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer rollback(ctx, tx)
	var version int64
	err = tx.QueryRow(ctx, `SELECT version FROM vector_stores WHERE id = $1`, storeID).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // deleted: no file row, no chunk is read
	}
	if err != nil {
		return err
	}
	if cached, ok := s.cache.get(storeID, version); ok {
		rollback(ctx, tx) // the connection is not needed while fn runs
		for _, c := range cached {
			if err := fn(c); err != nil {
				return err
			}
		}
		return nil
	}
	rows, err := tx.Query(ctx, `SELECT c.file_id, c.gen, c.seq, f.filename, f.attributes, c.sealed, c.vector
		FROM vector_store_chunks c JOIN vector_store_files f ON f.store_id = c.store_id AND f.file_id = c.file_id AND f.gen = c.gen
		WHERE c.store_id = $1 AND f.status = 'completed'`, storeID)
	if err != nil {
		return err
	}
	defer rows.Close()
	fill := s.cache.filler(storeID, version)
	for rows.Next() {
		var c ScannedChunk
		var attrs *string
		if err := rows.Scan(&c.FileID, &c.Gen, &c.Seq, &c.Filename, &attrs, &c.Sealed, &c.Vector); err != nil {
			return err
		}
		if attrs != nil {
			c.Attributes = []byte(*attrs)
		}
		fill.add(c)
		if err := fn(c); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	fill.done()
	return nil
}

// sweepLock is the advisory lock key held while a replica sweeps.
var sweepLock = func() int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard.vectorstores.sweep"))
	return int64(h.Sum64())
}()

// swept runs f holding the sweep lock on one connection; when another
// replica holds it, it returns 0 at once (that replica is sweeping).
func (s *PostgresStore) swept(ctx context.Context, f func(conn *pgxpool.Conn) (int, error)) (int, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, sweepLock).Scan(&locked); err != nil {
		return 0, err
	}
	if !locked {
		return 0, nil
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, sweepLock); err != nil {
			_ = conn.Conn().Close(uctx) // closing releases the lock
		}
	}()
	return f(conn)
}

// SweepStores is Store.SweepStores: a hundred stores per transaction, by
// one replica at a time.
func (s *PostgresStore) SweepStores(ctx context.Context, now time.Time) (int, error) {
	return s.swept(ctx, func(conn *pgxpool.Conn) (int, error) {
		total := 0
		for {
			n, err := func() (int, error) {
				tx, err := conn.Begin(ctx)
				if err != nil {
					return 0, err
				}
				defer rollback(ctx, tx)
				rows, err := tx.Query(ctx, `DELETE FROM vector_stores WHERE id IN (
					SELECT id FROM vector_stores WHERE expires_at IS NOT NULL AND expires_at <= $1 LIMIT 100 FOR UPDATE SKIP LOCKED)
					RETURNING id`, now.UnixNano())
				if err != nil {
					return 0, err
				}
				ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					return 0, err
				}
				if _, err := tx.Exec(ctx, `DELETE FROM vector_store_files WHERE store_id = ANY($1)`, ids); err != nil {
					return 0, err
				}
				if _, err := tx.Exec(ctx, `DELETE FROM vector_store_file_batches WHERE store_id = ANY($1)`, ids); err != nil {
					return 0, err
				}
				if err := tx.Commit(ctx); err != nil {
					return 0, err
				}
				for _, id := range ids {
					s.cache.drop(id)
				}
				return len(ids), nil
			}()
			total += n
			if err != nil || n < 100 {
				return total, err
			}
		}
	})
}

// SweepChunks is Store.SweepChunks: the chunks of generations no file row
// holds, sweepBatch per statement, by one replica at a time. (The data keys
// live in the file rows and went with them.)
func (s *PostgresStore) SweepChunks(ctx context.Context) (int, error) {
	return s.swept(ctx, func(conn *pgxpool.Conn) (int, error) {
		total := 0
		for {
			tag, err := conn.Exec(ctx, `DELETE FROM vector_store_chunks WHERE id IN (
				SELECT c.id FROM vector_store_chunks c LEFT JOIN vector_store_files f
					ON f.store_id = c.store_id AND f.file_id = c.file_id AND f.gen = c.gen
				WHERE f.file_id IS NULL LIMIT $1)`, sweepBatch)
			if err != nil {
				return total, err
			}
			total += int(tag.RowsAffected())
			if tag.RowsAffected() < sweepBatch {
				return total, nil
			}
		}
	})
}

const pgBatchColumns = `id, store_id, owner, created_at, cancelled_at`

// pgGetBatch reads batch batchID of store id (without its counts), or a
// *BatchNotFoundError.
func pgGetBatch(ctx context.Context, q pgQuerier, id, batchID string) (BatchRow, error) {
	var (
		b         BatchRow
		created   int64
		cancelled *int64
	)
	err := q.QueryRow(ctx, `SELECT `+pgBatchColumns+` FROM vector_store_file_batches WHERE id = $1 AND store_id = $2`, batchID, id).
		Scan(&b.ID, &b.StoreID, &b.Owner, &created, &cancelled)
	if errors.Is(err, pgx.ErrNoRows) {
		return BatchRow{}, &BatchNotFoundError{ID: batchID}
	}
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: get file batch %s of %s: %w", batchID, id, err)
	}
	b.CreatedAt = fromNanos(created)
	if cancelled != nil {
		b.CancelledAt = fromNanos(*cancelled)
	}
	return b, nil
}

// pgBatchWithCounts is pgGetBatch and its files' counts.
func pgBatchWithCounts(ctx context.Context, q interface {
	pgQuerier
	pgRowsQuerier
}, id, batchID string) (BatchRow, error) {
	b, err := pgGetBatch(ctx, q, id, batchID)
	if err != nil {
		return BatchRow{}, err
	}
	if b.Counts, err = pgCountFiles(ctx, q, `store_id = $1 AND batch_id = $2`, id, batchID); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: count files of batch %s: %w", batchID, err)
	}
	return b, nil
}

// CreateBatch is Store.CreateBatch: one transaction holding the store's
// row, so concurrent attaches count its files one after the other.
func (s *PostgresStore) CreateBatch(ctx context.Context, b BatchRow, now time.Time, fs []FileRow) (BatchRow, error) {
	id := b.StoreID
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, b.Owner, id, now, true); err != nil {
		return BatchRow{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO vector_store_file_batches (`+pgBatchColumns+`) VALUES ($1, $2, $3, $4, NULL)`,
		b.ID, id, b.Owner, b.CreatedAt.UnixNano()); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM vector_store_files WHERE store_id = $1`, id).Scan(&n); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	for _, f := range fs {
		// A file already attached joins the batch as it is.
		tag, err := tx.Exec(ctx, `UPDATE vector_store_files SET batch_id = $1 WHERE store_id = $2 AND file_id = $3`, b.ID, id, f.FileID)
		if err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
		}
		if tag.RowsAffected() > 0 {
			continue
		}
		if n >= MaxFilesPerStore {
			return BatchRow{}, ErrStoreFull
		}
		f.BatchID = b.ID
		if err := pgInsertFile(ctx, tx, f); err != nil {
			return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
		}
		n++
	}
	out, err := pgBatchWithCounts(ctx, tx, id, b.ID)
	if err != nil {
		return BatchRow{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: create file batch in %s: %w", id, err)
	}
	return out, nil
}

// GetBatch is Store.GetBatch: one snapshot.
func (s *PostgresStore) GetBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: get file batch %s: %w", batchID, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, owner, id, now, false); err != nil {
		return BatchRow{}, err
	}
	return pgBatchWithCounts(ctx, tx, id, batchID)
}

// CancelBatch is Store.CancelBatch: one transaction, the store's row locked
// first (as every writer of its files does). An indexer of a cancelled
// file finds it no longer in progress at its next write and stops.
func (s *PostgresStore) CancelBatch(ctx context.Context, owner, id, batchID string, now time.Time) (BatchRow, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	defer rollback(ctx, tx)
	if _, err := pgGetStore(ctx, tx, owner, id, now, true); err != nil {
		return BatchRow{}, err
	}
	b, err := pgBatchWithCounts(ctx, tx, id, batchID)
	if err != nil {
		return BatchRow{}, err
	}
	switch b.Status() {
	case StatusCancelled:
		return b, nil
	case StatusCompleted:
		return BatchRow{}, ErrBatchDone
	}
	// A cancelled file keeps no chunks and no key, as a failed one.
	if _, err := tx.Exec(ctx, `WITH c AS (
			UPDATE vector_store_files SET status = $4, chunks = 0, usage_bytes = 0, kek_id = NULL, data_key = NULL,
				claimed_by = NULL, lease_until = NULL
			WHERE store_id = $1 AND batch_id = $2 AND status = $3 RETURNING file_id, gen)
		DELETE FROM vector_store_chunks k USING c WHERE k.store_id = $1 AND k.file_id = c.file_id AND k.gen = c.gen`,
		id, batchID, StatusInProgress, StatusCancelled); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE vector_store_file_batches SET cancelled_at = $1 WHERE id = $2`, now.UnixNano(), batchID); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	if b, err = pgBatchWithCounts(ctx, tx, id, batchID); err != nil {
		return BatchRow{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return BatchRow{}, fmt.Errorf("vectorstores: cancel file batch %s: %w", batchID, err)
	}
	return b, nil
}
