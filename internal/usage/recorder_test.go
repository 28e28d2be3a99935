package usage_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/usage"
)

// flaky fails Add while fail is set.
type flaky struct {
	usage.Store
	fail atomic.Bool
}

func (f *flaky) Add(ctx context.Context, rows []usage.Row) error {
	if f.fail.Load() {
		return errors.New("disk full")
	}
	return f.Store.Add(ctx, rows)
}

func openStore(t *testing.T) *flaky {
	t.Helper()
	s, err := usage.OpenSQLite(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &flaky{Store: s}
}

func TestRecorderAggregatesAndFlushes(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	r, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	r.Record(usage.Event{Time: day, KeyID: "key_a", LimitID: "key_a", Model: "m/x", Input: 10, Cached: 4, Output: 3, CostMicros: 100})
	r.Record(usage.Event{Time: day, KeyID: "key_a", LimitID: "key_a", Model: "m/x", Input: 5, Output: 1, CostMicros: 50})
	r.Record(usage.Event{Time: day, KeyID: "key_a", LimitID: "key_a", Model: "m/x", Error: true})

	// Nothing is written before a flush: the hot path never waits for it.
	if rows, _ := store.Query(ctx, usage.Query{}); len(rows) != 0 {
		t.Fatalf("rows before a flush: %+v", rows)
	}
	// A failed flush keeps the aggregate; the next one writes it all.
	store.fail.Store(true)
	if err := r.Flush(ctx); err == nil {
		t.Fatal("flush into a failing store succeeded")
	}
	r.Record(usage.Event{Time: day, KeyID: "key_a", LimitID: "key_a", Model: "m/x", Input: 1, CostMicros: 1})
	store.fail.Store(false)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := store.Query(ctx, usage.Query{})
	if err != nil {
		t.Fatal(err)
	}
	want := usage.Row{Day: "2026-11-03", KeyID: "key_a", LimitID: "key_a", Model: "m/x",
		Requests: 4, InputTokens: 16, CachedTokens: 4, OutputTokens: 4, Errors: 1, CostMicros: 151}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows %+v, want [%+v]", rows, want)
	}
}

func TestRecorderMonthSpend(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	now := time.Now().UTC()
	// Spend already stored this month (by an earlier run), and last month.
	if err := store.Add(ctx, []usage.Row{
		{Day: now.Format(usage.DayLayout), KeyID: "key_old", LimitID: "key_a", Model: "m/x", CostMicros: 1000},
		{Day: now.AddDate(0, -1, 0).Format(usage.DayLayout), KeyID: "key_a", LimitID: "key_a", Model: "m/x", CostMicros: 99999},
	}); err != nil {
		t.Fatal(err)
	}
	r, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.MonthSpend("key_a", now); got != 1000 {
		t.Fatalf("spend at start %d, want 1000", got)
	}
	r.Record(usage.Event{Time: now, KeyID: "key_new", LimitID: "key_a", Model: "m/x", CostMicros: 25})
	r.Record(usage.Event{Time: now, KeyID: "key_b", LimitID: "key_b", Model: "m/x", CostMicros: 7})
	if got := r.MonthSpend("key_a", now); got != 1025 {
		t.Fatalf("spend after recording %d, want 1025", got)
	}
	// Flushing (and the reload after it) neither loses nor doubles spend.
	if err := r.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.MonthSpend("key_a", now); got != 1025 {
		t.Fatalf("spend after a flush %d, want 1025", got)
	}
	store.fail.Store(true)
	r.Record(usage.Event{Time: now, KeyID: "key_new", LimitID: "key_a", Model: "m/x", CostMicros: 5})
	_ = r.Flush(ctx)
	if got := r.MonthSpend("key_a", now); got != 1030 {
		t.Fatalf("spend after a failed flush %d, want 1030", got)
	}
	if got := r.MonthSpend("key_b", now); got != 7 {
		t.Fatalf("key_b spend %d, want 7", got)
	}
}

func TestRecorderBoundsMemory(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	store.fail.Store(true)
	r, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{MaxRows: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"m/a", "m/b", "m/c"} {
		r.Record(usage.Event{KeyID: "k", LimitID: "k", Model: m})
	}
	r.Record(usage.Event{KeyID: "k", LimitID: "k", Model: "m/a"}) // an existing row still counts
	store.fail.Store(false)
	rows, err := r.Query(ctx, usage.Query{}) // reads flush first
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Model != "m/a" || rows[0].Requests != 2 || rows[1].Model != "m/b" {
		t.Fatalf("rows %+v, want m/a (2 requests) and m/b only", rows)
	}
}

func TestWriteRows(t *testing.T) {
	rows := []usage.Row{{Day: "2026-11-01", KeyID: "key_a", LimitID: "key_a", Model: "m/x", Requests: 2, InputTokens: 10,
		CachedTokens: 4, OutputTokens: 3, Errors: 1, CostMicros: 1_000_050}}
	var csv, js strings.Builder
	if err := usage.WriteRows(&csv, usage.FormatCSV, rows); err != nil {
		t.Fatal(err)
	}
	want := "day,key_id,limit_id,model,requests,input_tokens,cached_tokens,output_tokens,errors,cost_micros,cost_usd\n" +
		"2026-11-01,key_a,key_a,m/x,2,10,4,3,1,1000050,1.000050\n"
	if csv.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", csv.String(), want)
	}
	if err := usage.WriteRows(&js, usage.FormatJSON, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"cost_usd": 1.000050`) || !strings.Contains(js.String(), `"cached_tokens": 4`) {
		t.Errorf("JSON: %s", js.String())
	}
	for micros, want := range map[int64]string{0: "0.000000", 5: "0.000005", 12_345_678: "12.345678", -1: "-0.000001"} {
		if got := usage.USD(micros); got != want {
			t.Errorf("USD(%d) = %s, want %s", micros, got, want)
		}
	}
}

// Two processes sharing a store see each other's spend once the spender
// has flushed and the other reloads; their own at once.
func TestRecorderSharedStoreSpend(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	a, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{ReloadInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	b, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{ReloadInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a.Record(usage.Event{Time: now, KeyID: "k", LimitID: "k", Model: "m/x", CostMicros: 10})
	b.Record(usage.Event{Time: now, KeyID: "k", LimitID: "k", Model: "m/x", CostMicros: 1})
	if got := b.MonthSpend("k", now); got != 1 {
		t.Fatalf("b before any flush: %d, want its own 1", got)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.MonthSpend("k", now); got != 11 {
		t.Fatalf("b after both flushed: %d, want 11", got)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.MonthSpend("k", now); got != 11 {
		t.Fatalf("a after reloading: %d, want 11", got)
	}
}

// Records racing with periodic flushes are all written, once.
func TestRecorderConcurrent(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	r, err := usage.NewRecorder(ctx, store, usage.RecorderOptions{FlushInterval: time.Millisecond, ReloadInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Start()
	const workers, each = 8, 500
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range each {
				r.Record(usage.Event{KeyID: "k", LimitID: "k", Model: []string{"m/a", "m/b"}[(w+i)%2], Input: 2, CostMicros: 3})
				_ = r.MonthSpend("k", time.Now())
			}
		}()
	}
	for range workers {
		<-done
	}
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := store.Query(ctx, usage.Query{})
	if err != nil {
		t.Fatal(err)
	}
	var n, in, cost int64
	for _, row := range rows {
		n, in, cost = n+row.Requests, in+row.InputTokens, cost+row.CostMicros
	}
	if n != workers*each || in != 2*n || cost != 3*n {
		t.Fatalf("stored %d requests, %d tokens, %d cost; want %d, %d, %d", n, in, cost, workers*each, 2*workers*each, 3*workers*each)
	}
	if got := r.MonthSpend("k", time.Now()); got != 3*workers*each {
		t.Fatalf("spend %d, want %d", got, 3*workers*each)
	}
}
