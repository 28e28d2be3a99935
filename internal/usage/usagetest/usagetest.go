// Package usagetest is the conformance suite of usage.Store: every
// implementation (SQLite, Postgres) runs Run against a fresh store, and
// RunShared against two handles on one storage.
package usagetest

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/usage"
)

// Run runs the suite; open returns a new, empty store (closed by the suite).
func Run(t *testing.T, open func(t *testing.T) usage.Store) {
	ctx := context.Background()
	fresh := func(t *testing.T) usage.Store {
		s := open(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}

	t.Run("AddAccumulates", func(t *testing.T) {
		s := fresh(t)
		r := usage.Row{Day: "2026-11-03", KeyID: "key_a", LimitID: "key_a", Model: "openai/gpt-4o",
			Requests: 2, InputTokens: 100, CachedTokens: 40, OutputTokens: 7, Errors: 1, CostMicros: 1234}
		if err := s.Add(ctx, []usage.Row{r}); err != nil {
			t.Fatal(err)
		}
		if err := s.Add(ctx, []usage.Row{r}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Query(ctx, usage.Query{KeyID: "key_a"})
		if err != nil {
			t.Fatal(err)
		}
		want := r
		want.Requests, want.InputTokens, want.CachedTokens, want.OutputTokens, want.Errors, want.CostMicros = 4, 200, 80, 14, 2, 2468
		if len(got) != 1 || got[0] != want {
			t.Fatalf("rows %+v, want [%+v]", got, want)
		}
	})

	t.Run("QueryFiltersAndOrders", func(t *testing.T) {
		s := fresh(t)
		rows := []usage.Row{
			{Day: "2026-11-02", KeyID: "key_b", LimitID: "key_b", Model: "m/x", Requests: 1},
			{Day: "2026-11-01", KeyID: "key_a", LimitID: "key_a", Model: "m/y", Requests: 1},
			{Day: "2026-11-01", KeyID: "key_a", LimitID: "key_a", Model: "m/x", Requests: 1},
			{Day: "2026-10-31", KeyID: "key_a", LimitID: "key_a", Model: "m/x", Requests: 1},
			{Day: "2026-11-05", KeyID: "key_a", LimitID: "key_a", Model: "m/x", Requests: 1},
		}
		if err := s.Add(ctx, rows); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			q    usage.Query
			want []string // day/key/model
		}{
			{usage.Query{}, []string{"2026-10-31/key_a/m/x", "2026-11-01/key_a/m/x", "2026-11-01/key_a/m/y", "2026-11-02/key_b/m/x", "2026-11-05/key_a/m/x"}},
			{usage.Query{KeyID: "key_a", Since: "2026-11-01"}, []string{"2026-11-01/key_a/m/x", "2026-11-01/key_a/m/y", "2026-11-05/key_a/m/x"}},
			{usage.Query{Since: "2026-11-01", Until: "2026-11-02"}, []string{"2026-11-01/key_a/m/x", "2026-11-01/key_a/m/y", "2026-11-02/key_b/m/x"}},
			{usage.Query{KeyID: "key_c"}, nil},
		} {
			got, err := s.Query(ctx, tc.q)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, r := range got {
				names = append(names, r.Day+"/"+r.KeyID+"/"+r.Model)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("Query(%+v) = %v, want %v", tc.q, names, tc.want)
			}
		}
	})

	t.Run("QueryRejectsBadDays", func(t *testing.T) {
		s := fresh(t)
		for _, q := range []usage.Query{{Since: "2026-13-01"}, {Until: "yesterday"}, {Since: "2026-11-02", Until: "2026-11-01"}} {
			if _, err := s.Query(ctx, q); !errors.Is(err, usage.ErrInvalid) {
				t.Errorf("Query(%+v): error %v, want ErrInvalid", q, err)
			}
		}
	})

	t.Run("MonthSpendByLimitID", func(t *testing.T) {
		s := fresh(t)
		rows := []usage.Row{
			{Day: "2026-10-31", KeyID: "key_a", LimitID: "key_a", Model: "m/x", CostMicros: 1000},
			{Day: "2026-11-01", KeyID: "key_a", LimitID: "key_a", Model: "m/x", CostMicros: 5},
			{Day: "2026-11-30", KeyID: "key_a2", LimitID: "key_a", Model: "m/y", CostMicros: 7}, // a rotated key
			{Day: "2026-11-15", KeyID: "key_b", LimitID: "key_b", Model: "m/x", CostMicros: 11},
			{Day: "2026-12-01", KeyID: "key_b", LimitID: "key_b", Model: "m/x", CostMicros: 1000},
		}
		if err := s.Add(ctx, rows); err != nil {
			t.Fatal(err)
		}
		got, err := s.MonthSpend(ctx, "2026-11-01")
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got["key_a"] != 12 || got["key_b"] != 11 {
			t.Fatalf("MonthSpend = %v, want key_a 12, key_b 11", got)
		}
	})

	t.Run("AddIsAtomic", func(t *testing.T) {
		s := fresh(t)
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Add(ctx, []usage.Row{{Day: "2026-11-01", KeyID: "k", LimitID: "k", Model: "m/x", Requests: 1}}); err == nil {
			t.Fatal("Add with a cancelled context succeeded")
		}
		got, err := s.Query(context.Background(), usage.Query{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 0 {
			t.Fatalf("rows after a failed Add: %+v", got)
		}
	})
}

// RunShared runs the cases of two stores on one storage, as two replicas
// (or two processes on one data directory) hold: open returns two handles
// on one new, empty storage (closed by the suite).
func RunShared(t *testing.T, open func(t *testing.T) (a, b usage.Store)) {
	ctx := context.Background()

	t.Run("ConcurrentAddsSum", func(t *testing.T) {
		a, b := open(t)
		t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
		// The same rows from both, in opposite orders, many times at once:
		// every count adds up and no flush fails (no deadlock between the
		// two writers).
		var rows []usage.Row
		for _, key := range []string{"key_a", "key_b", "key_c"} {
			for _, model := range []string{"m/x", "m/y"} {
				rows = append(rows, usage.Row{Day: "2026-11-03", KeyID: key, LimitID: key, Model: model, Requests: 1, CostMicros: 10})
			}
		}
		reversed := slices.Clone(rows)
		slices.Reverse(reversed)
		const rounds = 20
		errs := make(chan error, 2*rounds)
		for range rounds {
			go func() { errs <- a.Add(ctx, rows) }()
			go func() { errs <- b.Add(ctx, reversed) }()
		}
		for range 2 * rounds {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []usage.Store{a, b} {
			got, err := s.Query(ctx, usage.Query{})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(rows) {
				t.Fatalf("%d rows, want %d: %+v", len(got), len(rows), got)
			}
			for _, r := range got {
				if r.Requests != 2*rounds || r.CostMicros != 20*rounds {
					t.Errorf("row %+v: want %d requests, %d micros", r, 2*rounds, 20*rounds)
				}
			}
			spend, err := s.MonthSpend(ctx, "2026-11-01")
			if err != nil {
				t.Fatal(err)
			}
			if spend["key_a"] != 2*20*rounds {
				t.Errorf("MonthSpend = %v, want key_a %d", spend, 2*20*rounds)
			}
		}
	})
}
