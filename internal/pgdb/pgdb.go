// Package pgdb owns opening the PostgreSQL database that Switchyard's
// stores share in fleet mode (the counterpart of sqlitedb for the embedded
// mode): a pgx connection pool with bounded size and lifetimes, each
// component's schema brought up to date by append-only migrations (run by
// pressly/goose) under a PostgreSQL advisory lock, so that N replicas
// starting together migrate once while the others wait and then find
// nothing to do, and transient failures (server restarting, connection
// refused, serialization failures) retried.
package pgdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

// Pool sizing. A zero field takes the default below, unless the DSN sets
// the matching pool_* parameter (pool_max_conns, pool_min_conns,
// pool_max_conn_lifetime, pool_max_conn_idle_time, pool_health_check_period),
// which then wins over the default. A non-zero field wins over both.
type Pool struct {
	// MaxConns bounds the connections this process holds; PostgreSQL's
	// max_connections bounds the sum over every replica and component.
	MaxConns int32
	// MinConns are kept open when idle.
	MinConns int32
	// MaxConnLifetime closes a connection this old once it is idle, so
	// that connections rebalance after a failover or a proxy's restart.
	MaxConnLifetime time.Duration
	// MaxConnIdleTime closes a connection idle this long (down to MinConns).
	MaxConnIdleTime time.Duration
}

// Defaults for Pool's zero fields.
const (
	DefaultMaxConns        = 10
	DefaultMaxConnLifetime = 30 * time.Minute
	DefaultMaxConnIdleTime = 5 * time.Minute
)

// RetryFor bounds how long Open and Retry keep retrying transient errors:
// long enough to ride out a database restart or failover.
const RetryFor = 30 * time.Second

var (
	// ErrNewerSchema reports a database migrated by a newer binary: an
	// older one must not write to a schema it does not know.
	ErrNewerSchema = errors.New("database schema is newer than this binary supports")
	// ErrUnavailable reports that the server could not be reached (or kept
	// failing transiently) for RetryFor.
	ErrUnavailable = errors.New("database unavailable")
	// ErrConfig reports a DSN that cannot be parsed or a bad component name.
	ErrConfig = errors.New("database configuration")
)

var componentRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// Open connects to the database at dsn (a postgres:// URL or key=value
// string), and applies component's pending migrations. migrations[i]
// brings the component's tables from version i to i+1, each in its own
// transaction; append only, never edit one that shipped. Versions are kept
// per component (table VersionTable(component)), so several components
// share one database. The caller closes the pool.
func Open(ctx context.Context, dsn, component string, migrations []string, p Pool) (*pgxpool.Pool, error) {
	if !componentRE.MatchString(component) {
		return nil, fmt.Errorf("pgdb: %w: component %q must match %s", ErrConfig, component, componentRE)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors can quote the DSN, password included.
		return nil, fmt.Errorf("pgdb: %w: the DSN does not parse as a postgres:// URL or key=value string", ErrConfig)
	}
	applyPool(cfg, dsn, p)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgdb: %w", err)
	}
	err = Retry(ctx, func() error {
		if err := pool.Ping(ctx); err != nil {
			return err
		}
		return migrate(ctx, pool, component, migrations)
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgdb: %s (%s): %w%s", component, describe(cfg.ConnConfig), err, hint(err))
	}
	return pool, nil
}

func applyPool(cfg *pgxpool.Config, dsn string, p Pool) {
	set := func(param string) bool { return strings.Contains(dsn, param) }
	switch {
	case p.MaxConns > 0:
		cfg.MaxConns = p.MaxConns
	case !set("pool_max_conns"):
		cfg.MaxConns = DefaultMaxConns
	}
	if p.MinConns > 0 {
		cfg.MinConns = p.MinConns
	}
	if cfg.MinConns > cfg.MaxConns {
		cfg.MinConns = cfg.MaxConns
	}
	switch {
	case p.MaxConnLifetime > 0:
		cfg.MaxConnLifetime = p.MaxConnLifetime
	case !set("pool_max_conn_lifetime"):
		cfg.MaxConnLifetime = DefaultMaxConnLifetime
	}
	switch {
	case p.MaxConnIdleTime > 0:
		cfg.MaxConnIdleTime = p.MaxConnIdleTime
	case !set("pool_max_conn_idle_time"):
		cfg.MaxConnIdleTime = DefaultMaxConnIdleTime
	}
}

// describe names the server and database for an error message, without
// the password.
func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("host %s port %d database %q user %q", c.Host, c.Port, c.Database, c.User)
}

// VersionTable is the table keeping component's applied migrations.
func VersionTable(component string) string { return "switchyard_schema_" + component }

// lockID is the advisory lock key serializing component's migrations. The
// key space is per database, shared with any other application using
// advisory locks there; the hash of a namespaced name keeps collisions
// unlikely.
func lockID(component string) int64 {
	h := fnv.New64a()
	h.Write([]byte("switchyard.pgdb.migrate." + component))
	return int64(h.Sum64())
}

// migrate brings component's schema up to date. It holds a session-level
// advisory lock on one connection from before it reads the version until
// after the last migration: a replica that starts while another migrates
// waits for the lock (pg_advisory_lock blocks, with no polling), then sees
// the new version and applies nothing. The lock is released when its
// connection closes, so a replica that dies mid-migration does not leave
// it held.
func migrate(ctx context.Context, pool *pgxpool.Pool, component string, migrations []string) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	id := lockID(component)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
		conn.Release()
		return fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		// A detached context: the lock must be released even when ctx
		// ended mid-migration. If unlocking fails, closing the connection
		// releases it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", id); uerr != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()

	gms := make([]*goose.Migration, len(migrations))
	for i, stmt := range migrations {
		gms[i] = goose.NewGoMigration(int64(i+1), &goose.GoFunc{
			RunTx: func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, stmt)
				return err
			},
		}, nil)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if len(gms) == 0 {
		// goose wants at least one migration; a component without any
		// has nothing to check.
		return nil
	}
	prov, err := goose.NewProvider(goose.DialectPostgres, db, nil,
		goose.WithTableName(VersionTable(component)),
		goose.WithGoMigrations(gms...),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	current, err := SchemaVersion(ctx, pool, component)
	if err != nil {
		return err
	}
	if current > int64(len(migrations)) {
		return fmt.Errorf("migrate %s: %w (version %d, this binary knows %d)", component, ErrNewerSchema, current, len(migrations))
	}
	if current == int64(len(migrations)) {
		return nil
	}
	if _, err := prov.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	return nil
}

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SchemaVersion returns component's schema version in the database q is
// connected to: the highest migration applied, 0 when none has been (no
// version table yet). It only reads.
func SchemaVersion(ctx context.Context, q querier, component string) (int64, error) {
	table := VersionTable(component)
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	err := q.QueryRow(ctx, "SELECT coalesce(max(version_id), 0) FROM "+pgx.Identifier{table}.Sanitize()+" WHERE is_applied").Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// listVersionTables lists the components' version tables in the
// connection's current schema.
const listVersionTables = `SELECT c.relname FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind = 'r' AND n.nspname = current_schema() AND c.relname LIKE 'switchyard\_schema\_%'`

// SchemaVersions returns every component's schema version found in the
// database (for `switchyard validate --check-connections`).
func SchemaVersions(ctx context.Context, pool *pgxpool.Pool) (map[string]int64, error) {
	rows, err := pool.Query(ctx, listVersionTables)
	if err != nil {
		return nil, fmt.Errorf("list schema versions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list schema versions: %w", err)
	}
	out := make(map[string]int64, len(names))
	for _, n := range names {
		comp := strings.TrimPrefix(n, "switchyard_schema_")
		v, err := SchemaVersion(ctx, pool, comp)
		if err != nil {
			return nil, err
		}
		out[comp] = v
	}
	return out, nil
}

// Retry calls f until it succeeds, fails with an error that is not
// transient (IsTransient), ctx is done, or RetryFor has passed; then it
// returns the last error, wrapped in ErrUnavailable if it was transient.
func Retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(RetryFor)
	wait := 50 * time.Millisecond
	for {
		err := f()
		if err == nil || !IsTransient(err) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w for %s: %w", ErrUnavailable, RetryFor, err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// IsTransient reports whether err may succeed when retried: the server
// could not be reached or is starting or shutting down, the connection
// broke before the request was sent, or the transaction lost a
// serialization or deadlock race.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", // serialization_failure
			"40P01", // deadlock_detected
			"55P03", // lock_not_available
			"53300", // too_many_connections
			"57P01", // admin_shutdown
			"57P02", // crash_shutdown
			"57P03": // cannot_connect_now (starting up, recovery)
			return true
		}
		return strings.HasPrefix(pe.Code, "08") // connection_exception
	}
	if pgconn.SafeToRetry(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		// Authentication and unknown database come back as a PgError
		// inside the ConnectError and were answered above; what is left
		// is the network.
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	return false
}

// IsUniqueViolation reports whether err is a unique or primary key
// constraint violation (SQLSTATE 23505).
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// hint names the likely fix for an error opening the database, for the
// operator reading the start-up failure.
func hint(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "28P01" || pe.Code == "28000":
			return " (hint: the user or password in the DSN is wrong, or pg_hba.conf does not admit this host)"
		case pe.Code == "3D000":
			return " (hint: the database named in the DSN does not exist; create it first)"
		case pe.Code == "42501":
			return " (hint: the DSN's user may not create tables in the database's current schema)"
		}
	}
	if errors.Is(err, ErrUnavailable) {
		return " (hint: check the DSN's host and port, and that the server is up and reachable from here)"
	}
	return ""
}

// Info describes the database Check reached.
type Info struct {
	Host, Database, User string
	Port                 uint16
	// ServerVersion is the server's server_version (15.8, ...).
	ServerVersion string
	// Schemas maps each component with a version table to its schema
	// version; empty before the gateway's first start.
	Schemas map[string]int64
}

// Check connects to dsn once (no retries: it answers an operator now),
// runs SELECT 1, and reads the server's version and the components' schema
// versions. It creates nothing. Its errors carry a hint naming the part of
// the DSN that is likely wrong.
func Check(ctx context.Context, dsn string) (Info, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return Info{}, fmt.Errorf("%w: the DSN does not parse as a postgres:// URL or key=value string", ErrConfig)
	}
	info := Info{Host: cfg.Host, Port: cfg.Port, Database: cfg.Database, User: cfg.User}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if IsTransient(err) {
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return info, fmt.Errorf("connect to %s: %w%s", describe(cfg), err, hint(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		return info, fmt.Errorf("SELECT 1 on %s: %w%s", describe(cfg), err, hint(err))
	}
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&info.ServerVersion); err != nil {
		return info, fmt.Errorf("read server version: %w", err)
	}
	rows, err := conn.Query(ctx, listVersionTables)
	if err != nil {
		return info, fmt.Errorf("list schema versions: %w%s", err, hint(err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return info, fmt.Errorf("list schema versions: %w%s", err, hint(err))
	}
	info.Schemas = make(map[string]int64, len(names))
	for _, n := range names {
		comp := strings.TrimPrefix(n, "switchyard_schema_")
		v, err := SchemaVersion(ctx, conn, comp)
		if err != nil {
			return info, err
		}
		info.Schemas[comp] = v
	}
	return info, nil
}
