package responses

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// TestPostgresSweepOneReplica: while another replica holds the sweep lock
// (it is sweeping), a sweep does nothing and returns at once; once the
// lock is free, the expired rows go.
func TestPostgresSweepOneReplica(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	s, err := OpenPostgresStore(ctx, dsn, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	kek, _ := envelope.NewKey()
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	_, w, err := ring.NewDataKey("resp_1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, Row{ID: "resp_1", Owner: "alice", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Body: []byte("b"), Input: []byte("i"), Output: []byte("o"), Key: w}); err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, dsn) // the other replica's sweeping connection
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, sweepLock); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, now.Add(2*time.Hour)); err != nil || n != 0 {
		t.Errorf("sweep while another replica sweeps: %d, %v; want 0", n, err)
	}
	var left int
	if err := other.QueryRow(ctx, `SELECT count(*) FROM responses`).Scan(&left); err != nil || left != 1 {
		t.Errorf("rows left: %d, %v", left, err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, sweepLock); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Sweep(ctx, now.Add(2*time.Hour)); err != nil || n != 1 {
		t.Errorf("sweep with the lock free: %d, %v; want 1", n, err)
	}
}
