package responsestest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/responses"
)

// RunBackground is the conformance suite of responses.BackgroundStore.
// open returns a new, empty store; RunBackground closes it. The store
// treats content as opaque bytes, so the runs here carry plain markers.
func RunBackground(t *testing.T, open func(t *testing.T) responses.BackgroundStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s responses.BackgroundStore)
	}{
		{"CreateGet", testBgCreateGet},
		{"PerOwnerBound", testBgPerOwnerBound},
		{"ClaimAndLease", testBgClaimAndLease},
		{"Advance", testBgAdvance},
		{"Cancel", testBgCancel},
		{"EndedAndRelease", testBgEndedAndRelease},
		{"DeleteAndSweep", testBgDeleteAndSweep},
		{"ConcurrentClaims", testBgConcurrentClaims},
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

func bgRun(owner, id string, created time.Time, events int) responses.BackgroundRun {
	r := responses.BackgroundRun{ID: id, Owner: owner, CreatedAt: created, Status: "queued", Stream: events > 0,
		Request: []byte("req " + id), Input: []byte("in " + id), Messages: []byte("msgs " + id),
		Snapshot: []byte("snap " + id), Key: []byte("key " + id)}
	for i := range events {
		r.Events = append(r.Events, responses.Event{Seq: int64(i), Data: fmt.Appendf(nil, "ev %d", i)})
	}
	r.NextSeq = int64(events)
	return r
}

func mustCreate(t *testing.T, s responses.BackgroundStore, r responses.BackgroundRun) {
	t.Helper()
	if err := s.Create(t.Context(), r, 100); err != nil {
		t.Fatalf("create %s: %v", r.ID, err)
	}
}

func mustClaim(t *testing.T, s responses.BackgroundStore, replica string, lease time.Duration) responses.BackgroundRun {
	t.Helper()
	r, ok, err := s.Claim(t.Context(), replica, lease)
	if err != nil || !ok {
		t.Fatalf("claim by %s: %v %v", replica, ok, err)
	}
	return r
}

func noClaim(t *testing.T, s responses.BackgroundStore, replica string) {
	t.Helper()
	r, ok, err := s.Claim(t.Context(), replica, time.Minute)
	if err != nil || ok {
		t.Fatalf("claim by %s: %s %v %v; want none", replica, r.ID, ok, err)
	}
}

func eventSeqs(t *testing.T, s responses.BackgroundStore, owner, id string, after int64, limit int) string {
	t.Helper()
	evs, err := s.Events(t.Context(), owner, id, after, limit)
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	var out []string
	for _, ev := range evs {
		if string(ev.Data) != fmt.Sprintf("ev %d", ev.Seq) {
			t.Errorf("event %d of %s holds %q", ev.Seq, id, ev.Data)
		}
		out = append(out, fmt.Sprint(ev.Seq))
	}
	return fmt.Sprint(out)
}

func testBgCreateGet(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_1", now, 2))
	r, err := s.Get(t.Context(), "alice", "resp_1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "queued" || !r.Stream || r.NextSeq != 2 || !r.CreatedAt.Equal(now) ||
		string(r.Request) != "req resp_1" || string(r.Input) != "in resp_1" || string(r.Messages) != "msgs resp_1" ||
		string(r.Snapshot) != "snap resp_1" || string(r.Key) != "key resp_1" {
		t.Errorf("got %+v", r)
	}
	if _, err := s.Get(t.Context(), "bob", "resp_1"); !errors.Is(err, responses.ErrNotFound) {
		t.Errorf("bob's get: %v", err)
	}
	if got := eventSeqs(t, s, "alice", "resp_1", -1, 10); got != "[0 1]" {
		t.Errorf("events %s", got)
	}
	if got := eventSeqs(t, s, "alice", "resp_1", 0, 10); got != "[1]" {
		t.Errorf("events after 0: %s", got)
	}
	if got := eventSeqs(t, s, "bob", "resp_1", -1, 10); got != "[]" {
		t.Errorf("bob sees events %s", got)
	}
	if err := s.Create(t.Context(), bgRun("alice", "resp_1", now, 0), 100); err == nil {
		t.Error("a second run with the same id was created")
	}
}

func testBgPerOwnerBound(t *testing.T, s responses.BackgroundStore) {
	for i := range 2 {
		if err := s.Create(t.Context(), bgRun("alice", fmt.Sprint("resp_a", i), now, 0), 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(t.Context(), bgRun("alice", "resp_a2", now, 0), 2); !errors.Is(err, responses.ErrTooManyRuns) {
		t.Fatalf("third run: %v, want ErrTooManyRuns", err)
	}
	if err := s.Create(t.Context(), bgRun("bob", "resp_b0", now, 0), 2); err != nil {
		t.Errorf("bob's run: %v", err)
	}
	// A finished run no longer counts.
	r := mustClaim(t, s, "r1", time.Minute)
	if ok, err := s.Advance(t.Context(), r.ID, "r1", responses.Advance{Status: "completed"}); !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	if err := s.Create(t.Context(), bgRun(r.Owner, "resp_x", now, 0), 2); err != nil {
		t.Errorf("after one finished: %v", err)
	}
	// Concurrent creates cannot pass the bound together.
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := range 8 {
		wg.Go(func() {
			err := s.Create(t.Context(), bgRun("carol", fmt.Sprint("resp_c", i), now, 0), 3)
			if err != nil && !errors.Is(err, responses.ErrTooManyRuns) {
				t.Errorf("create: %v", err)
			}
			if err == nil {
				mu.Lock()
				created++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if created != 3 {
		t.Errorf("%d concurrent creates passed a bound of 3", created)
	}
}

func testBgClaimAndLease(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_2", now.Add(time.Second), 0))
	mustCreate(t, s, bgRun("alice", "resp_1", now, 0))
	// Oldest first; each run to one replica while its lease lives.
	a := mustClaim(t, s, "r1", time.Minute)
	b := mustClaim(t, s, "r2", time.Minute)
	if a.ID != "resp_1" || b.ID != "resp_2" || a.Attempts != 1 || string(a.Snapshot) != "snap resp_1" {
		t.Fatalf("claimed %s (attempt %d) then %s", a.ID, a.Attempts, b.ID)
	}
	noClaim(t, s, "r3")
	if ok, err := s.Renew(t.Context(), "resp_1", "r1", time.Minute); !ok || err != nil {
		t.Errorf("renew by the holder: %v %v", ok, err)
	}
	if ok, err := s.Renew(t.Context(), "resp_1", "r2", time.Minute); ok || err != nil {
		t.Errorf("renew by another: %v %v", ok, err)
	}
	// A lease that has expired (renewed into the past) is taken over,
	// and its old holder can neither renew nor advance.
	if ok, err := s.Renew(t.Context(), "resp_1", "r1", -time.Second); !ok || err != nil {
		t.Fatalf("renew: %v %v", ok, err)
	}
	if ok, err := s.Renew(t.Context(), "resp_1", "r1", time.Minute); ok || err != nil {
		t.Errorf("renew of an expired lease: %v %v", ok, err)
	}
	c := mustClaim(t, s, "r3", time.Minute)
	if c.ID != "resp_1" || c.Attempts != 2 {
		t.Errorf("took over %s attempt %d", c.ID, c.Attempts)
	}
	if ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Status: "in_progress"}); ok || err != nil {
		t.Errorf("advance by the old holder: %v %v", ok, err)
	}
}

func testBgAdvance(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_1", now, 2))
	mustClaim(t, s, "r1", time.Minute)
	evs := func(from, to int) []responses.Event {
		var out []responses.Event
		for i := from; i < to; i++ {
			out = append(out, responses.Event{Seq: int64(i), Data: fmt.Appendf(nil, "ev %d", i)})
		}
		return out
	}
	ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Status: "in_progress", Snapshot: []byte("snap 2"), Events: evs(2, 5)})
	if !ok || err != nil {
		t.Fatalf("advance: %v %v", ok, err)
	}
	if ok, err := s.Advance(t.Context(), "resp_1", "r2", responses.Advance{Events: evs(5, 6)}); ok || err != nil {
		t.Errorf("advance by a replica without the lease: %v %v", ok, err)
	}
	if ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Events: evs(5, 7)}); !ok || err != nil {
		t.Fatalf("events only: %v %v", ok, err)
	}
	r, err := s.Get(t.Context(), "alice", "resp_1")
	if err != nil || r.Status != "in_progress" || string(r.Snapshot) != "snap 2" || r.NextSeq != 7 {
		t.Fatalf("after advancing: %+v %v", r, err)
	}
	if got := eventSeqs(t, s, "alice", "resp_1", 3, 2); got != "[4 5]" {
		t.Errorf("page after 3: %s", got)
	}
	ok, err = s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Status: "completed", Snapshot: []byte("final"), Events: evs(7, 8)})
	if !ok || err != nil {
		t.Fatalf("finish: %v %v", ok, err)
	}
	// Ended: no more writes, no renewal, nothing to run (until stored it
	// is claimable to be stored).
	if ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Events: evs(8, 9)}); ok || err != nil {
		t.Errorf("advance after the end: %v %v", ok, err)
	}
	if ok, err := s.Renew(t.Context(), "resp_1", "r1", time.Minute); ok || err != nil {
		t.Errorf("renew after the end: %v %v", ok, err)
	}
	if ok, err := s.Cancel(t.Context(), "alice", "resp_1", []byte("cancelled")); ok || err != nil {
		t.Errorf("cancel after the end: %v %v", ok, err)
	}
	r, _ = s.Get(t.Context(), "alice", "resp_1")
	if r.Status != "completed" || string(r.Snapshot) != "final" || r.NextSeq != 8 {
		t.Errorf("final: %+v", r)
	}
	if got := eventSeqs(t, s, "alice", "resp_1", -1, 100); got != "[0 1 2 3 4 5 6 7]" {
		t.Errorf("events %s", got)
	}
}

func testBgCancel(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_1", now, 0))
	mustClaim(t, s, "r1", time.Minute)
	if _, err := s.Cancel(t.Context(), "bob", "resp_1", []byte("x")); !errors.Is(err, responses.ErrNotFound) {
		t.Errorf("bob's cancel: %v", err)
	}
	if ok, err := s.Cancel(t.Context(), "alice", "resp_1", []byte("cancelled")); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if ok, err := s.Cancel(t.Context(), "alice", "resp_1", []byte("again")); ok || err != nil {
		t.Errorf("second cancel: %v %v", ok, err)
	}
	if ok, err := s.Renew(t.Context(), "resp_1", "r1", time.Minute); ok || err != nil {
		t.Errorf("the runner renews a cancelled run: %v %v", ok, err)
	}
	if ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Status: "completed"}); ok || err != nil {
		t.Errorf("the runner finishes a cancelled run: %v %v", ok, err)
	}
	r, _ := s.Get(t.Context(), "alice", "resp_1")
	if r.Status != "cancelled" || string(r.Snapshot) != "cancelled" {
		t.Errorf("after cancel: %+v", r)
	}
}

func testBgEndedAndRelease(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_1", now, 0))
	mustCreate(t, s, bgRun("alice", "resp_2", now.Add(time.Second), 0))
	mustCreate(t, s, bgRun("alice", "resp_3", now.Add(2*time.Second), 0))
	mustClaim(t, s, "r1", time.Minute)
	mustClaim(t, s, "r1", time.Minute)
	if ok, err := s.Advance(t.Context(), "resp_1", "r1", responses.Advance{Status: "failed", Snapshot: []byte("failed")}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, err := s.Cancel(t.Context(), "alice", "resp_3", []byte("cancelled")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	// Ended runs are never claimed, their lease gone or not.
	noClaim(t, s, "r3")
	if err := s.Release(t.Context(), "", "r1"); err != nil {
		t.Fatal(err)
	}
	// Released, an unfinished run is claimable at once.
	if r := mustClaim(t, s, "r3", time.Minute); r.ID != "resp_2" || r.Attempts != 2 {
		t.Errorf("after release: %s attempt %d", r.ID, r.Attempts)
	}
	noClaim(t, s, "r4")
	if err := s.Release(t.Context(), "resp_2", "r1"); err != nil {
		t.Fatal(err)
	}
	noClaim(t, s, "r4") // r1 held it no longer: r3's lease stands
	if err := s.Release(t.Context(), "resp_2", "r3"); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, s, "r4", time.Minute)
}

func testBgDeleteAndSweep(t *testing.T, s responses.BackgroundStore) {
	mustCreate(t, s, bgRun("alice", "resp_1", now, 3))
	mustCreate(t, s, bgRun("alice", "resp_2", now.Add(time.Hour), 1))
	mustCreate(t, s, bgRun("alice", "resp_3", now, 0))
	if err := s.Delete(t.Context(), "bob", "resp_1"); !errors.Is(err, responses.ErrNotFound) {
		t.Errorf("bob's delete: %v", err)
	}
	if err := s.Delete(t.Context(), "alice", "resp_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(t.Context(), "alice", "resp_1"); !errors.Is(err, responses.ErrNotFound) {
		t.Errorf("get deleted: %v", err)
	}
	if got := eventSeqs(t, s, "alice", "resp_1", -1, 10); got != "[]" {
		t.Errorf("events of a deleted run: %s", got)
	}
	if err := s.Delete(t.Context(), "alice", "resp_1"); !errors.Is(err, responses.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	// Sweep: ended runs created before the cut only.
	for _, id := range []string{"resp_2", "resp_3"} {
		if ok, err := s.Cancel(t.Context(), "alice", id, []byte("cancelled")); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	mustCreate(t, s, bgRun("alice", "resp_4", now, 0)) // unfinished: kept
	n, err := s.Sweep(t.Context(), now.Add(time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d %v", n, err)
	}
	for id, want := range map[string]bool{"resp_2": true, "resp_3": false, "resp_4": true} {
		if _, err := s.Get(t.Context(), "alice", id); (err == nil) != want {
			t.Errorf("%s after sweep: %v", id, err)
		}
	}
	if got := eventSeqs(t, s, "alice", "resp_2", -1, 10); got != "[0]" {
		t.Errorf("events of a kept run: %s", got)
	}
}

func testBgConcurrentClaims(t *testing.T, s responses.BackgroundStore) {
	const runs, replicas = 20, 4
	for i := range runs {
		mustCreate(t, s, bgRun("alice", fmt.Sprintf("resp_%02d", i), now.Add(time.Duration(i)*time.Second), 0))
	}
	var mu sync.Mutex
	claimed := map[string]int{}
	var wg sync.WaitGroup
	for r := range replicas {
		wg.Go(func() {
			for {
				run, ok, err := s.Claim(t.Context(), fmt.Sprint("r", r), time.Minute)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				claimed[run.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(claimed) != runs {
		t.Errorf("%d of %d runs claimed", len(claimed), runs)
	}
	for id, n := range claimed {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
}
