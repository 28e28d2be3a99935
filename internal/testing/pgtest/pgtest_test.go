package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Each test gets its own empty database, and it is gone after the test.
func TestDatabasePerTest(t *testing.T) {
	ctx := context.Background()
	var names [2]string
	for i := range names {
		t.Run("sub", func(t *testing.T) {
			pool := pgtest.Pool(t)
			if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&names[i]); err != nil {
				t.Fatal(err)
			}
			// Empty: a table made by another test is not here.
			if _, err := pool.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
				t.Fatal(err)
			}
		})
	}
	if names[0] == names[1] {
		t.Fatalf("both tests got database %q", names[0])
	}
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = ANY($1)", names[:]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d of the subtests' databases %v are still there after their tests", n, names)
	}
}

// TestServerOutsideTests: Start runs a cluster of its own (as cmd/bench
// does, outside go test), whose databases accept connections, and Stop
// removes it.
func TestServerOutsideTests(t *testing.T) {
	s, err := pgtest.Start()
	if err != nil {
		testserver.Unavailable(t, "PostgreSQL", "this test does not run against a real server", err)
	}
	ctx := context.Background()
	dsn, err := s.CreateDatabase(ctx, "bench")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil || db != "bench" {
		t.Fatalf("current_database() = %q, %v", db, err)
	}
	conn.Close(ctx)
	if v, err := s.Version(ctx); err != nil || v == "" {
		t.Errorf("Version() = %q, %v", v, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.Connect(ctx, dsn); err == nil {
		t.Error("the cluster still accepts connections after Stop")
	}
}

// Restart keeps the databases and their rows; a pool reconnects after it.
func TestRestart(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	if _, err := pool.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	pgtest.Restart(t)
	var x int
	// The pool's old connections were closed by the shutdown; the first
	// query may land on one of them.
	err := pool.QueryRow(ctx, "SELECT x FROM kept").Scan(&x)
	if err != nil {
		err = pool.QueryRow(ctx, "SELECT x FROM kept").Scan(&x)
	}
	if err != nil || x != 42 {
		t.Fatalf("after the restart: %d, %v", x, err)
	}
}
