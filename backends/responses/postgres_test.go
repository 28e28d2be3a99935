package responses_test

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/responses/responsestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresStore is the Postgres run of the Store conformance suite.
func TestPostgresStore(t *testing.T) {
	responsestest.Run(t, func(t *testing.T) responses.Store {
		s, err := responses.OpenPostgresStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPostgresStoreReplicas: two store handles on one database, as two
// replicas hold: a conversation stored through one continues through the
// other, a delete through one is seen by the other, and only one of two
// concurrent sweeps does the work.
func TestPostgresStoreReplicas(t *testing.T) {
	dsn := pgtest.DSN(t)
	open := func() *responses.PostgresStore {
		s, err := responses.OpenPostgresStore(t.Context(), dsn, pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	kek, _ := envelope.NewKey()
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	put := func(s responses.Store, id, prev string) {
		t.Helper()
		dk, w, err := ring.NewDataKey(id)
		if err != nil {
			t.Fatal(err)
		}
		r := responses.Row{ID: id, Owner: "alice", PreviousID: prev, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Body: dk.Seal("body", []byte(`{}`)), Input: dk.Seal("input", []byte(`["`+id+`"]`)), Output: dk.Seal("output", []byte(`[]`)), Key: w}
		if err := s.Put(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	lim := responses.ChainLimits{MaxLen: 10, Overhead: 2 * envelope.SealOverhead}
	chain := func(s responses.Store, id string) []string {
		t.Helper()
		rows, err := s.Chain(t.Context(), "alice", id, now, lim)
		if err != nil {
			t.Fatalf("chain of %s: %v", id, err)
		}
		var ids []string
		for _, r := range rows {
			dk, err := ring.Unwrap(r.ID, r.Key)
			if err != nil {
				t.Fatal(err)
			}
			if in, err := dk.Open("input", r.Input); err != nil || string(in) != `["`+r.ID+`"]` {
				t.Errorf("input of %s: %q, %v", r.ID, in, err)
			}
			ids = append(ids, r.ID)
		}
		return ids
	}
	put(a, "resp_1", "")
	put(b, "resp_2", "resp_1") // the second turn on the other replica
	put(a, "resp_3", "resp_2")
	for name, s := range map[string]responses.Store{"a": a, "b": b} {
		if got := chain(s, "resp_3"); len(got) != 3 || got[0] != "resp_1" || got[2] != "resp_3" {
			t.Errorf("chain through %s: %v", name, got)
		}
	}
	if err := b.Delete(t.Context(), "alice", "resp_2", now); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Body(t.Context(), "alice", "resp_2", now); err != responses.ErrNotFound {
		t.Errorf("deleted through b, read through a: %v", err)
	}
	if got := chain(a, "resp_3"); len(got) != 1 {
		t.Errorf("chain after a delete on the other replica: %v", got)
	}

	// Concurrent sweeps: each expired row is deleted once, by whichever
	// replica holds the sweep lock; the other finds it held or nothing left.
	later := now.Add(2 * time.Hour)
	counts := make(chan int64, 2)
	for _, s := range []responses.Store{a, b} {
		go func() {
			n, err := s.Sweep(t.Context(), later)
			if err != nil {
				t.Errorf("sweep: %v", err)
			}
			counts <- n
		}()
	}
	if n := <-counts + <-counts; n != 2 {
		t.Errorf("sweeps deleted %d rows together, want the 2 left", n)
	}
}
