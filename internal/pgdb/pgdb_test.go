package pgdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The second migration would fail if the first ran twice (CREATE TABLE
// without IF NOT EXISTS), and runs counts the applications.
var migrations = []string{
	`CREATE TABLE runs (n int NOT NULL); INSERT INTO runs VALUES (1)`,
	`INSERT INTO runs VALUES (2); CREATE TABLE items (id text PRIMARY KEY)`,
}

// N replicas starting together against a new database: one migrates, the
// others wait for the advisory lock and find nothing to do.
func TestOpenConcurrentMigratesOnce(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool, err := pgdb.Open(ctx, dsn, "keys", migrations, pgdb.Pool{})
			if err == nil {
				pool.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open #%d: %v", i, err)
		}
	}
	pool, err := pgdb.Open(ctx, dsn, "keys", migrations, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var runs string
	if err := pool.QueryRow(ctx, "SELECT string_agg(n::text, ',' ORDER BY n) FROM runs").Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != "1,2" {
		t.Fatalf("migrations ran %q times, want each once (1,2)", runs)
	}
	if v, err := pgdb.SchemaVersion(ctx, pool, "keys"); err != nil || v != 2 {
		t.Fatalf("SchemaVersion = %d, %v; want 2", v, err)
	}
}

// Migrations are append-only: a binary with one more applies only it, and
// components keep separate versions in one database.
func TestOpenAppliesOnlyNewMigrations(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	pool, err := pgdb.Open(ctx, dsn, "files", migrations[:1], pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	pool, err = pgdb.Open(ctx, dsn, "files", migrations, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	other, err := pgdb.Open(ctx, dsn, "batches", []string{`CREATE TABLE b (id text)`}, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	got, err := pgdb.SchemaVersions(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["files"] != 2 || got["batches"] != 1 {
		t.Fatalf("SchemaVersions = %v, want files:2 batches:1", got)
	}
}

// An older binary refuses a schema a newer one wrote.
func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	pool, err := pgdb.Open(ctx, dsn, "responses", migrations, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	_, err = pgdb.Open(ctx, dsn, "responses", migrations[:1], pgdb.Pool{})
	if !errors.Is(err, pgdb.ErrNewerSchema) {
		t.Fatalf("Open with fewer migrations: %v, want ErrNewerSchema", err)
	}
}

func TestOpenPoolLimits(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	for _, tc := range []struct {
		name      string
		dsnSuffix string
		pool      pgdb.Pool
		wantMax   int32
	}{
		{"default", "", pgdb.Pool{}, pgdb.DefaultMaxConns},
		{"from DSN", " pool_max_conns=2", pgdb.Pool{}, 2},
		{"explicit wins over DSN", " pool_max_conns=2", pgdb.Pool{MaxConns: 3, MinConns: 5}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool, err := pgdb.Open(ctx, dsn+tc.dsnSuffix, "vectors", migrations, tc.pool)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			cfg := pool.Config()
			if cfg.MaxConns != tc.wantMax {
				t.Fatalf("MaxConns = %d, want %d", cfg.MaxConns, tc.wantMax)
			}
			if cfg.MinConns > cfg.MaxConns {
				t.Fatalf("MinConns %d > MaxConns %d", cfg.MinConns, cfg.MaxConns)
			}
			if cfg.MaxConnLifetime != pgdb.DefaultMaxConnLifetime || cfg.MaxConnIdleTime != pgdb.DefaultMaxConnIdleTime {
				t.Fatalf("lifetimes %v/%v, want the defaults", cfg.MaxConnLifetime, cfg.MaxConnIdleTime)
			}
			// The limit holds: with every connection taken, one more
			// Acquire waits until its context ends.
			for range tc.wantMax {
				c, err := pool.Acquire(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Release()
			}
			actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			if c, err := pool.Acquire(actx); err == nil {
				c.Release()
				t.Fatalf("acquired connection %d of a pool limited to %d", tc.wantMax+1, tc.wantMax)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	// No password in the error, even when the DSN does not parse.
	_, err := pgdb.Open(ctx, "postgres://u:s3cret@host:notaport/db", "keys", migrations, pgdb.Pool{})
	if !errors.Is(err, pgdb.ErrConfig) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad DSN: %v, want ErrConfig without the password", err)
	}
	_, err = pgdb.Open(ctx, dsn, "Bad-Name", migrations, pgdb.Pool{})
	if !errors.Is(err, pgdb.ErrConfig) {
		t.Fatalf("bad component: %v, want ErrConfig", err)
	}
	// A missing database is not transient: it fails at once, with a hint.
	start := time.Now()
	_, err = pgdb.Open(ctx, dsn+" dbname=no_such_db", "keys", migrations, pgdb.Pool{})
	if err == nil || !strings.Contains(err.Error(), "does not exist") || errors.Is(err, pgdb.ErrUnavailable) {
		t.Fatalf("missing database: %v", err)
	}
	if d := time.Since(start); d > pgdb.RetryFor/2 {
		t.Fatalf("a missing database was retried for %v", d)
	}
	// A failing migration leaves the version where it was.
	_, err = pgdb.Open(ctx, dsn, "keys", []string{"CREATE TABLE ok (x int)", "NOT SQL"}, pgdb.Pool{})
	if err == nil {
		t.Fatal("Open with a broken migration succeeded")
	}
	pool, err := pgdb.Open(ctx, dsn, "keys", []string{"CREATE TABLE ok (x int)"}, pgdb.Pool{})
	if err != nil {
		t.Fatalf("reopen after the failed migration: %v", err)
	}
	defer pool.Close()
	if v, _ := pgdb.SchemaVersion(ctx, pool, "keys"); v != 1 {
		t.Fatalf("version after a failed migration 2 = %d, want 1", v)
	}
}

func TestIsTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "57P03"}, true},
		{&pgconn.PgError{Code: "08006"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "53300"}), true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "28P01"}, false},
		{&pgconn.PgError{Code: "3D000"}, false},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{context.Canceled, false},
		{io.EOF, false},
		{errors.New("other"), false},
	} {
		if got := pgdb.IsTransient(tc.err); got != tc.want {
			t.Errorf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !pgdb.IsUniqueViolation(&pgconn.PgError{Code: "23505"}) || pgdb.IsUniqueViolation(&pgconn.PgError{Code: "23503"}) {
		t.Error("IsUniqueViolation")
	}
}

// Retry stops at the first non-transient error and retries transient ones.
func TestRetry(t *testing.T) {
	calls := 0
	err := pgdb.Retry(context.Background(), func() error {
		calls++
		if calls < 3 {
			return &pgconn.PgError{Code: "40001"}
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Retry: %v after %d calls, want success after 3", err, calls)
	}
	calls = 0
	want := &pgconn.PgError{Code: "23505"}
	err = pgdb.Retry(context.Background(), func() error { calls++; return want })
	if !errors.Is(err, want) || calls != 1 {
		t.Fatalf("Retry: %v after %d calls, want the error after 1", err, calls)
	}
}
