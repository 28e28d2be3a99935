// Package batchestest is the conformance suite of batches.Store: every
// implementation runs it (the SQLite store in backends/batches, others
// beside their code) with a func that opens an empty store.
package batchestest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/batches"
)

// Run runs the suite. open returns a new, empty store; Run closes it.
func Run(t *testing.T, open func(t *testing.T) batches.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s batches.Store)
	}{
		{"CreateGet", testCreateGet},
		{"OwnerIsolation", testOwnerIsolation},
		{"ListCursor", testListCursor},
		{"ActiveLimit", testActiveLimit},
		{"Allowance", testAllowance},
		{"Transition", testTransition},
		{"Update", testUpdate},
		{"Active", testActive},
		{"ConcurrentCreate", testConcurrentCreate},
		{"ConcurrentTransition", testConcurrentTransition},
		{"Claim", testClaim},
		{"ConcurrentClaim", testConcurrentClaim},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Unix()

func newBatch(owner, id string, created int64) batches.Batch {
	return batches.Batch{ID: id, Owner: owner, Endpoint: "/v1/chat/completions", InputFileID: "file-" + id,
		CompletionWindow: "24h", Status: batches.StatusValidating, CreatedAt: created, ExpiresAt: created + 86400}
}

func create(t *testing.T, s batches.Store, b batches.Batch) {
	t.Helper()
	if err := s.Create(t.Context(), b, 1000, nil); err != nil {
		t.Fatalf("create %s: %v", b.ID, err)
	}
}

func get(t *testing.T, s batches.Store, owner, id string) batches.Batch {
	t.Helper()
	b, err := s.Get(t.Context(), owner, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return b
}

func testCreateGet(t *testing.T, s batches.Store) {
	b := newBatch("alice", "batch_1", base)
	b.Metadata = map[string]string{"k": "v"}
	b.OutputExpiresAfter = 3600
	b.Lines = 7
	create(t, s, b)
	got := get(t, s, "alice", "batch_1")
	want := b
	want.Lines = 0 // stored for the allowance, not read back
	got.Lines = 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("get:\n got %+v\nwant %+v", got, want)
	}
	loaded, err := s.Load(t.Context(), "batch_1")
	if err != nil {
		t.Fatal(err)
	}
	loaded.Lines = 0
	if !reflect.DeepEqual(loaded, want) {
		t.Errorf("load:\n got %+v\nwant %+v", loaded, want)
	}
	// No metadata stays nil.
	create(t, s, newBatch("alice", "batch_2", base+1))
	if m := get(t, s, "alice", "batch_2").Metadata; m != nil {
		t.Errorf("metadata %v, want nil", m)
	}
	if _, err := s.Get(t.Context(), "alice", "batch_none"); !errors.Is(err, batches.ErrNotFound) {
		t.Errorf("get missing: %v, want ErrNotFound", err)
	}
	if _, err := s.Load(t.Context(), "batch_none"); !errors.Is(err, batches.ErrNotFound) {
		t.Errorf("load missing: %v, want ErrNotFound", err)
	}
}

func testOwnerIsolation(t *testing.T, s batches.Store) {
	create(t, s, newBatch("alice", "batch_a", base))
	create(t, s, newBatch("bob", "batch_b", base+1))
	if _, err := s.Get(t.Context(), "bob", "batch_a"); !errors.Is(err, batches.ErrNotFound) {
		t.Errorf("bob gets alice's batch: %v, want ErrNotFound", err)
	}
	list, _, err := s.List(t.Context(), "bob", "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "batch_b" {
		t.Errorf("bob's list: %v", ids(list))
	}
	if _, _, err := s.List(t.Context(), "bob", "batch_a", 10); !errors.Is(err, batches.ErrBadCursor) {
		t.Errorf("bob lists after alice's batch: %v, want ErrBadCursor", err)
	}
	// One owner's active batches do not count against another's limit.
	if err := s.Create(t.Context(), newBatch("carol", "batch_c", base+2), 1, nil); err != nil {
		t.Errorf("carol's first batch with limit 1: %v", err)
	}
}

func ids(bs []batches.Batch) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.ID)
	}
	return out
}

func testListCursor(t *testing.T, s batches.Store) {
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("batch_%d", i)
		// Same created_at for some: the order is the order of creation.
		create(t, s, newBatch("alice", id, base+int64(i/2)))
		want = append([]string{id}, want...)
	}
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 7 {
			t.Fatal("pagination does not end")
		}
		page, more, err := s.List(t.Context(), "alice", after, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("page of %d, limit 3", len(page))
		}
		got = append(got, ids(page)...)
		if !more {
			break
		}
		after = page[len(page)-1].ID
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pages %v, want %v", got, want)
	}
	page, more, err := s.List(t.Context(), "alice", "", 7)
	if err != nil || more || len(page) != 7 {
		t.Errorf("list all with limit 7: %d, more %v, %v", len(page), more, err)
	}
	page, more, err = s.List(t.Context(), "alice", want[6], 3)
	if err != nil || more || len(page) != 0 {
		t.Errorf("list after the oldest: %v, more %v, %v", ids(page), more, err)
	}
	if _, _, err := s.List(t.Context(), "alice", "batch_none", 3); !errors.Is(err, batches.ErrBadCursor) {
		t.Errorf("unknown cursor: %v, want ErrBadCursor", err)
	}
}

func testActiveLimit(t *testing.T, s batches.Store) {
	ctx := t.Context()
	for i := range 2 {
		if err := s.Create(ctx, newBatch("alice", fmt.Sprintf("batch_%d", i), base), 2, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(ctx, newBatch("alice", "batch_2", base), 2, nil); !errors.Is(err, batches.ErrLimit) {
		t.Fatalf("third active batch: %v, want ErrLimit", err)
	}
	if _, err := s.Get(ctx, "alice", "batch_2"); !errors.Is(err, batches.ErrNotFound) {
		t.Errorf("a refused batch was stored: %v", err)
	}
	// Every non-terminal status counts; a terminal one frees a place.
	for _, st := range []string{batches.StatusInProgress, batches.StatusFinalizing, batches.StatusCancelling} {
		if ok, err := s.Transition(ctx, "batch_0", []string{batches.StatusValidating, batches.StatusInProgress, batches.StatusFinalizing}, st, time.Unix(base, 0), batches.Change{}); err != nil || !ok {
			t.Fatalf("-> %s: %v %v", st, ok, err)
		}
		if err := s.Create(ctx, newBatch("alice", "batch_2", base), 2, nil); !errors.Is(err, batches.ErrLimit) {
			t.Errorf("with one batch %s: %v, want ErrLimit", st, err)
		}
	}
	if ok, err := s.Transition(ctx, "batch_0", []string{batches.StatusCancelling}, batches.StatusCancelled, time.Unix(base, 0), batches.Change{}); err != nil || !ok {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if err := s.Create(ctx, newBatch("alice", "batch_2", base), 2, nil); err != nil {
		t.Errorf("after one ended: %v", err)
	}
}

func testAllowance(t *testing.T, s batches.Store) {
	ctx := t.Context()
	add := func(id string, created, lines int64, al *batches.Allowance) error {
		b := newBatch("alice", id, created)
		b.Lines = lines
		return s.Create(ctx, b, 1000, al)
	}
	al := func() *batches.Allowance { return &batches.Allowance{LinesPerDay: 100} }
	if err := add("batch_1", base, 40, al()); err != nil {
		t.Fatal(err)
	}
	if err := add("batch_2", base+100, 50, al()); err != nil {
		t.Fatal(err)
	}
	// A batch that failed without running does not count.
	if err := add("batch_f", base+150, 10, al()); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Transition(ctx, "batch_f", []string{batches.StatusValidating}, batches.StatusFailed, time.Unix(base+150, 0), batches.Change{}); !ok || err != nil {
		t.Fatalf("fail: %v %v", ok, err)
	}
	// One that failed after it started does.
	if err := add("batch_r", base+160, 5, al()); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{batches.StatusInProgress, batches.StatusFailed} {
		if ok, err := s.Transition(ctx, "batch_r", []string{batches.StatusValidating, batches.StatusInProgress}, to, time.Unix(base+160, 0), batches.Change{}); !ok || err != nil {
			t.Fatalf("-> %s: %v %v", to, ok, err)
		}
	}
	// 95 used: 20 more do not fit until batch_1 (40) leaves the window.
	a := al()
	if err := add("batch_3", base+200, 20, a); !errors.Is(err, batches.ErrAllowance) {
		t.Fatalf("over the allowance: %v, want ErrAllowance", err)
	}
	if a.Used != 95 || a.ResetAt != base+batches.AllowanceWindow {
		t.Errorf("used %d reset %d, want 95 and %d", a.Used, a.ResetAt, base+batches.AllowanceWindow)
	}
	// 60 fit only when batch_2 leaves too.
	a = al()
	if err := add("batch_3", base+200, 60, a); !errors.Is(err, batches.ErrAllowance) {
		t.Fatalf("over the allowance: %v", err)
	}
	if a.ResetAt != base+100+batches.AllowanceWindow {
		t.Errorf("reset %d, want %d", a.ResetAt, base+100+batches.AllowanceWindow)
	}
	// Exactly what is left fits; without an allowance anything does.
	if err := add("batch_4", base+200, 5, al()); err != nil {
		t.Errorf("what is left: %v", err)
	}
	if err := add("batch_5", base+200, 1000, nil); err != nil {
		t.Errorf("no allowance: %v", err)
	}
	if err := add("batch_6", base+200, 1000, &batches.Allowance{}); err != nil {
		t.Errorf("zero allowance (none): %v", err)
	}
	// Once batch_1 is out of the window its lines are free again; another
	// owner's lines never count.
	if err := add("batch_7", base+batches.AllowanceWindow, 10, al()); !errors.Is(err, batches.ErrAllowance) {
		t.Errorf("batch_5 (1000) still in the window: %v", err)
	}
	b := newBatch("bob", "batch_b", base+200)
	b.Lines = 100
	if err := s.Create(ctx, b, 1000, al()); err != nil {
		t.Errorf("bob's own allowance: %v", err)
	}
}

func testTransition(t *testing.T, s batches.Store) {
	ctx := t.Context()
	create(t, s, newBatch("alice", "batch_1", base))
	at := time.Unix(base+10, 0)
	ok, err := s.Transition(ctx, "batch_1", []string{batches.StatusInProgress}, batches.StatusFinalizing, at, batches.Change{})
	if err != nil || ok {
		t.Fatalf("from a status it is not in: %v %v", ok, err)
	}
	model := "gpt-x"
	ok, err = s.Transition(ctx, "batch_1", []string{batches.StatusValidating}, batches.StatusInProgress, at,
		batches.Change{Total: new(int64(3)), Model: &model})
	if err != nil || !ok {
		t.Fatalf("validating -> in_progress: %v %v", ok, err)
	}
	b := get(t, s, "alice", "batch_1")
	if b.Status != batches.StatusInProgress || b.InProgressAt != base+10 || b.Counts.Total != 3 || b.Model != "gpt-x" {
		t.Errorf("after in_progress: %+v", b)
	}
	errs := []batches.BatchError{{Code: "c", Message: "m", Param: new("input_file_id"), Line: new(2)}}
	c := batches.Counts{Total: 3, Completed: 2, Failed: 1, InputTokens: 10, CachedTokens: 1, OutputTokens: 5, ReasoningTokens: 2, TotalTokens: 15}
	ok, err = s.Transition(ctx, "batch_1", []string{batches.StatusInProgress}, batches.StatusFailed, time.Unix(base+20, 0),
		batches.Change{Counts: &c, Errors: errs})
	if err != nil || !ok {
		t.Fatalf("-> failed: %v %v", ok, err)
	}
	b = get(t, s, "alice", "batch_1")
	if b.Status != batches.StatusFailed || b.FailedAt != base+20 || b.InProgressAt != base+10 || b.Counts != c || !reflect.DeepEqual(b.Errors, errs) {
		t.Errorf("after failed: %+v", b)
	}
	// Every status stamps its own timestamp.
	for i, st := range []string{batches.StatusInProgress, batches.StatusFinalizing, batches.StatusCompleted, batches.StatusExpired, batches.StatusCancelling, batches.StatusCancelled, batches.StatusFailed} {
		id := fmt.Sprintf("batch_s%d", i)
		create(t, s, newBatch("alice", id, base))
		if ok, err := s.Transition(ctx, id, []string{batches.StatusValidating}, st, time.Unix(base+99, 0), batches.Change{}); !ok || err != nil {
			t.Fatalf("-> %s: %v %v", st, ok, err)
		}
		b := get(t, s, "alice", id)
		if p := batches.StampOf(&b, st); p == nil || *p != base+99 {
			t.Errorf("%s: stamp not set: %+v", st, b)
		}
	}
	if ok, err := s.Transition(ctx, "batch_none", []string{batches.StatusValidating}, batches.StatusFailed, at, batches.Change{}); ok || err != nil {
		t.Errorf("missing batch: %v %v", ok, err)
	}
}

func testUpdate(t *testing.T, s batches.Store) {
	ctx := t.Context()
	create(t, s, newBatch("alice", "batch_1", base))
	c := batches.Counts{Total: 5, Completed: 1, Failed: 1, InputTokens: 3, OutputTokens: 4, TotalTokens: 7}
	if err := s.Update(ctx, "batch_1", batches.Change{Counts: &c}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, "batch_1", batches.Change{OutputFileID: new("file-out")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, "batch_1", batches.Change{ErrorFileID: new("file-err")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Update(ctx, "batch_1", batches.Change{}); err != nil {
		t.Fatal(err)
	}
	b := get(t, s, "alice", "batch_1")
	if b.Counts != c || b.OutputFileID != "file-out" || b.ErrorFileID != "file-err" || b.Status != batches.StatusValidating {
		t.Errorf("after updates: %+v", b)
	}
}

func testActive(t *testing.T, s batches.Store) {
	ctx := t.Context()
	create(t, s, newBatch("alice", "batch_1", base))
	create(t, s, newBatch("bob", "batch_2", base+1))
	create(t, s, newBatch("alice", "batch_3", base+2))
	if ok, err := s.Transition(ctx, "batch_2", []string{batches.StatusValidating}, batches.StatusCompleted, time.Unix(base, 0), batches.Change{}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	got, err := s.Active(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"batch_1", "batch_3"}) {
		t.Errorf("active %v, want oldest first [batch_1 batch_3]", got)
	}
	for id, want := range map[string]bool{"batch_1": true, "batch_2": false, "batch_none": false} {
		if got, err := s.IsActive(ctx, id); err != nil || got != want {
			t.Errorf("IsActive(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
}

func testConcurrentCreate(t *testing.T, s batches.Store) {
	ctx := context.WithoutCancel(t.Context())
	const n, limit = 12, 3
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = s.Create(ctx, newBatch("alice", fmt.Sprintf("batch_%d", i), base), limit, nil)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, batches.ErrLimit):
			t.Errorf("create: %v", err)
		}
	}
	if ok != limit {
		t.Errorf("%d concurrent creates passed the limit of %d", ok, limit)
	}
}

func testConcurrentTransition(t *testing.T, s batches.Store) {
	ctx := context.WithoutCancel(t.Context())
	create(t, s, newBatch("alice", "batch_1", base))
	// A cancel and the runner race from validating: exactly one wins.
	var wg sync.WaitGroup
	won := make([]bool, 8)
	for i := range won {
		to := batches.StatusCancelling
		if i%2 == 1 {
			to = batches.StatusInProgress
		}
		wg.Go(func() {
			ok, err := s.Transition(ctx, "batch_1", []string{batches.StatusValidating}, to, time.Unix(base, 0), batches.Change{})
			if err != nil {
				t.Errorf("transition: %v", err)
			}
			won[i] = ok
		})
	}
	wg.Wait()
	n := 0
	for _, w := range won {
		if w {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d transitions from validating succeeded, want 1", n)
	}
}

func claim(t *testing.T, s batches.Store, replica string, lease time.Duration) string {
	t.Helper()
	id, err := s.Claim(t.Context(), replica, lease)
	if err != nil {
		t.Fatalf("claim by %s: %v", replica, err)
	}
	return id
}

func renew(t *testing.T, s batches.Store, id, replica string) bool {
	t.Helper()
	ok, err := s.Renew(t.Context(), id, replica, time.Hour)
	if err != nil {
		t.Fatalf("renew %s by %s: %v", id, replica, err)
	}
	return ok
}

func testClaim(t *testing.T, s batches.Store) {
	ctx := t.Context()
	create(t, s, newBatch("alice", "batch_1", base))
	create(t, s, newBatch("bob", "batch_2", base+1))
	create(t, s, newBatch("alice", "batch_3", base+2))
	if _, err := s.Transition(ctx, "batch_3", []string{batches.StatusValidating}, batches.StatusFailed, time.Unix(base, 0), batches.Change{}); err != nil {
		t.Fatal(err)
	}
	if id := claim(t, s, "A", time.Hour); id != "batch_1" {
		t.Fatalf("A claims %q, want the oldest, batch_1", id)
	}
	if id := claim(t, s, "B", time.Hour); id != "batch_2" {
		t.Fatalf("B claims %q, want batch_2", id)
	}
	if id := claim(t, s, "C", time.Hour); id != "" {
		t.Fatalf("C claims %q: every runnable batch is leased and batch_3 is terminal", id)
	}
	if !renew(t, s, "batch_1", "A") {
		t.Error("A cannot renew its own lease")
	}
	if renew(t, s, "batch_1", "B") {
		t.Error("B renews A's lease")
	}
	if err := s.Release(ctx, "batch_1", "B"); err != nil {
		t.Fatal(err)
	}
	if id := claim(t, s, "C", time.Hour); id != "" {
		t.Fatalf("C claims %q after B released a lease B does not hold", id)
	}
	if err := s.Release(ctx, "batch_1", "A"); err != nil {
		t.Fatal(err)
	}
	if id := claim(t, s, "C", time.Hour); id != "batch_1" {
		t.Fatalf("C claims %q after A released batch_1", id)
	}
	// A terminal batch gives up its lease.
	if _, err := s.Transition(ctx, "batch_2", []string{batches.StatusValidating}, batches.StatusCancelled, time.Unix(base, 0), batches.Change{}); err != nil {
		t.Fatal(err)
	}
	if renew(t, s, "batch_2", "B") {
		t.Error("B renews the lease of a cancelled batch")
	}
	// Release with no id releases all of a replica's leases.
	if err := s.Release(ctx, "", "C"); err != nil {
		t.Fatal(err)
	}
	if id := claim(t, s, "D", time.Hour); id != "batch_1" {
		t.Fatalf("D claims %q after C released everything", id)
	}
	// An expired lease is claimed by another replica, and is not renewed.
	create(t, s, newBatch("carol", "batch_4", base+3))
	if id := claim(t, s, "E", time.Millisecond); id != "batch_4" {
		t.Fatalf("E claims %q, want batch_4", id)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		id := claim(t, s, "F", time.Hour)
		if id == "batch_4" {
			break
		}
		if id != "" {
			t.Fatalf("F claims %q, want batch_4 once E's lease expires", id)
		}
		if time.Now().After(deadline) {
			t.Fatal("E's 1 ms lease never expired")
		}
		time.Sleep(5 * time.Millisecond) // polling for the lease's end, not asserting on it
	}
	if renew(t, s, "batch_4", "E") {
		t.Error("E renews a lease F took over")
	}
	if !renew(t, s, "batch_4", "F") {
		t.Error("F cannot renew the lease it took over")
	}
}

func testConcurrentClaim(t *testing.T, s batches.Store) {
	const n = 20
	for i := range n {
		create(t, s, newBatch(fmt.Sprintf("owner%d", i%5), fmt.Sprintf("batch_%02d", i), base+int64(i)))
	}
	var mu sync.Mutex
	got := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replica := fmt.Sprintf("r%d", r)
			for {
				id, err := s.Claim(context.Background(), replica, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				if id == "" {
					return
				}
				mu.Lock()
				if prev, ok := got[id]; ok {
					errs <- fmt.Errorf("%s claimed by %s and %s", id, prev, replica)
				}
				got[id] = replica
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(got) != n {
		t.Errorf("%d batches claimed, want %d", len(got), n)
	}
}
