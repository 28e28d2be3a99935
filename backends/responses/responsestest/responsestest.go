// Package responsestest is the conformance suite of responses.Store: every
// implementation runs it (the SQLite store in backends/responses, others
// beside their code) with a func that opens an empty store. The rows it
// stores are sealed and their keys wrapped as the Service's sealing layer
// does, under a key-encryption key of its own: a Store treats both as
// opaque bytes.
package responsestest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Run runs the suite. open returns a new, empty store; Run closes it.
func Run(t *testing.T, open func(t *testing.T) responses.Store) {
	kek, err := envelope.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, h *h)
	}{
		{"PutBody", testPutBody},
		{"OwnerIsolation", testOwnerIsolation},
		{"Expiry", testExpiry},
		{"Sweep", testSweep},
		{"DeleteErases", testDeleteErases},
		{"Chain", testChain},
		{"ChainLimits", testChainLimits},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			})
			tc.fn(t, &h{t: t, s: s, ring: ring})
		})
	}
}

var now = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

type h struct {
	t    *testing.T
	s    responses.Store
	ring *envelope.Keyring
}

// row makes a sealed row of owner's id, expiring after ttl.
func (h *h) row(owner, id, prev string, ttl time.Duration, input string) responses.Row {
	h.t.Helper()
	dk, w, err := h.ring.NewDataKey(id)
	if err != nil {
		h.t.Fatal(err)
	}
	return responses.Row{ID: id, Owner: owner, PreviousID: prev, CreatedAt: now, ExpiresAt: now.Add(ttl),
		Body: dk.Seal("body", []byte(`{"id":"`+id+`"}`)), Input: dk.Seal("input", []byte(input)),
		Output: dk.Seal("output", []byte(`[]`)), Key: w}
}

func (h *h) put(owner, id, prev string, ttl time.Duration) responses.Row {
	h.t.Helper()
	r := h.row(owner, id, prev, ttl, `["`+id+`"]`)
	if err := h.s.Put(h.t.Context(), r); err != nil {
		h.t.Fatalf("put %s: %v", id, err)
	}
	return r
}

func (h *h) notFound(what string, err error) {
	h.t.Helper()
	if !errors.Is(err, responses.ErrNotFound) {
		h.t.Errorf("%s: %v, want ErrNotFound", what, err)
	}
}

func (h *h) chainIDs(owner, id string, at time.Time) ([]string, error) {
	rows, err := h.s.Chain(h.t.Context(), owner, id, at, responses.ChainLimits{MaxLen: 100})
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids, err
}

func (h *h) wantChain(owner, id string, at time.Time, want ...string) {
	h.t.Helper()
	got, err := h.chainIDs(owner, id, at)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Errorf("chain of %s: %v, %v; want %v", id, got, err, want)
	}
}

func testPutBody(t *testing.T, h *h) {
	r := h.put("alice", "resp_1", "", time.Hour)
	body, key, err := h.s.Body(t.Context(), "alice", "resp_1", now)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, r.Body) || !bytes.Equal(key, r.Key) {
		t.Errorf("body or key changed in the store")
	}
	// The key opens what came back.
	dk, err := h.ring.Unwrap("resp_1", key)
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := dk.Open("body", body); err != nil || string(pt) != `{"id":"resp_1"}` {
		t.Errorf("open: %s, %v", pt, err)
	}
	_, _, err = h.s.Body(t.Context(), "alice", "resp_none", now)
	h.notFound("missing", err)
	// Ids are unique: a second put of the same id fails and keeps the first.
	if err := h.s.Put(t.Context(), h.row("alice", "resp_1", "", time.Hour, `[]`)); err == nil {
		t.Error("a second put of resp_1 succeeded")
	}
	if body, key, err := h.s.Body(t.Context(), "alice", "resp_1", now); err != nil || !bytes.Equal(body, r.Body) || !bytes.Equal(key, r.Key) {
		t.Errorf("after a refused put: %v", err)
	}
}

func testOwnerIsolation(t *testing.T, h *h) {
	h.put("alice", "resp_a", "", time.Hour)
	h.put("bob", "resp_b", "resp_a", time.Hour) // an id bob should not know
	_, _, err := h.s.Body(t.Context(), "bob", "resp_a", now)
	h.notFound("bob reads alice's", err)
	_, err = h.s.Chain(t.Context(), "bob", "resp_a", now, responses.ChainLimits{MaxLen: 10})
	h.notFound("bob walks alice's", err)
	h.notFound("bob deletes alice's", h.s.Delete(t.Context(), "bob", "resp_a", now))
	// A chain never crosses owners.
	h.wantChain("bob", "resp_b", now, "resp_b")
	if _, _, err := h.s.Body(t.Context(), "alice", "resp_a", now); err != nil {
		t.Errorf("alice's after bob's attempts: %v", err)
	}
}

func testExpiry(t *testing.T, h *h) {
	h.put("alice", "resp_old", "", time.Hour)
	h.put("alice", "resp_new", "resp_old", 2*time.Hour)
	later := now.Add(time.Hour) // resp_old's expiry: no longer live
	_, _, err := h.s.Body(t.Context(), "alice", "resp_old", later)
	h.notFound("expired body", err)
	h.notFound("delete expired", h.s.Delete(t.Context(), "alice", "resp_old", later))
	_, err = h.s.Chain(t.Context(), "alice", "resp_old", later, responses.ChainLimits{MaxLen: 10})
	h.notFound("chain of expired", err)
	h.wantChain("alice", "resp_new", later, "resp_new")
	h.wantChain("alice", "resp_new", later.Add(-time.Second), "resp_old", "resp_new")
}

func testSweep(t *testing.T, h *h) {
	h.put("alice", "resp_1", "", time.Hour)
	h.put("bob", "resp_2", "", time.Hour)
	h.put("alice", "resp_3", "", 3*time.Hour)
	n, err := h.s.Sweep(t.Context(), now.Add(time.Hour-time.Second))
	if err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d, %v", n, err)
	}
	n, err = h.s.Sweep(t.Context(), now.Add(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want 2", n, err)
	}
	// Gone, not just hidden: read at a time it was live, it is absent.
	_, _, err = h.s.Body(t.Context(), "alice", "resp_1", now)
	h.notFound("swept", err)
	if _, _, err := h.s.Body(t.Context(), "alice", "resp_3", now); err != nil {
		t.Errorf("unexpired after sweep: %v", err)
	}
	// Its key went with it: the id can hold a new response and key.
	h.put("alice", "resp_1", "", time.Hour)
	if n, err := h.s.Sweep(t.Context(), now.Add(time.Hour)); err != nil || n != 1 {
		t.Errorf("second sweep: %d, %v", n, err)
	}
}

func testDeleteErases(t *testing.T, h *h) {
	h.put("alice", "resp_1", "", time.Hour)
	h.put("alice", "resp_2", "resp_1", time.Hour)
	h.put("alice", "resp_3", "resp_2", time.Hour)
	if err := h.s.Delete(t.Context(), "alice", "resp_2", now); err != nil {
		t.Fatal(err)
	}
	_, _, err := h.s.Body(t.Context(), "alice", "resp_2", now)
	h.notFound("deleted", err)
	h.notFound("deleted twice", h.s.Delete(t.Context(), "alice", "resp_2", now))
	// The history stops at the deleted response.
	h.wantChain("alice", "resp_3", now, "resp_3")
	h.wantChain("alice", "resp_1", now, "resp_1")
	// Its data key is gone with it: the id can be stored again with a new
	// key (a key left behind would be a duplicate).
	h.put("alice", "resp_2", "", time.Hour)
	if _, key, err := h.s.Body(t.Context(), "alice", "resp_2", now); err != nil {
		t.Errorf("re-stored: %v", err)
	} else if _, err := h.ring.Unwrap("resp_2", key); err != nil {
		t.Errorf("re-stored key: %v", err)
	}
}

func testChain(t *testing.T, h *h) {
	want := map[string]responses.Row{}
	prev := ""
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("resp_%d", i)
		want[id] = h.put("alice", id, prev, time.Hour)
		ids = append(ids, id)
		prev = id
	}
	// A fork: two responses continue resp_2.
	want["resp_x"] = h.put("alice", "resp_x", "resp_2", time.Hour)
	rows, err := h.s.Chain(t.Context(), "alice", "resp_4", now, responses.ChainLimits{MaxLen: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("chain of %d, want 5", len(rows))
	}
	for i, r := range rows {
		w := want[ids[i]]
		if r.ID != w.ID || r.Owner != "alice" || r.PreviousID != w.PreviousID ||
			!bytes.Equal(r.Input, w.Input) || !bytes.Equal(r.Output, w.Output) || !bytes.Equal(r.Key, w.Key) {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	h.wantChain("alice", "resp_x", now, "resp_0", "resp_1", "resp_2", "resp_x")
	h.wantChain("alice", "resp_0", now, "resp_0")
	_, err = h.s.Chain(t.Context(), "alice", "resp_none", now, responses.ChainLimits{MaxLen: 10})
	h.notFound("chain of missing", err)
	// An ancestor that never existed ends the walk.
	h.put("alice", "resp_orphan", "resp_gone", time.Hour)
	h.wantChain("alice", "resp_orphan", now, "resp_orphan")
}

func testChainLimits(t *testing.T, h *h) {
	prev := ""
	var size int64
	const overhead = 2 * envelope.SealOverhead
	for i := range 4 {
		id := fmt.Sprintf("resp_%d", i)
		r := h.put("alice", id, prev, time.Hour)
		size += int64(len(r.Input)+len(r.Output)) - overhead
		prev = id
	}
	chain := func(lim responses.ChainLimits) error {
		_, err := h.s.Chain(t.Context(), "alice", "resp_3", now, lim)
		return err
	}
	for _, tc := range []struct {
		name string
		lim  responses.ChainLimits
		want error
	}{
		{"exact length", responses.ChainLimits{MaxLen: 4}, nil},
		{"one too long", responses.ChainLimits{MaxLen: 3}, responses.ErrChainTooLong},
		{"far too long", responses.ChainLimits{MaxLen: 1}, responses.ErrChainTooLong},
		{"exact size", responses.ChainLimits{MaxLen: 4, MaxBytes: size, Overhead: overhead}, nil},
		{"one byte over", responses.ChainLimits{MaxLen: 4, MaxBytes: size - 1, Overhead: overhead}, responses.ErrChainTooLarge},
		{"sealed size counts without the overhead", responses.ChainLimits{MaxLen: 4, MaxBytes: size}, responses.ErrChainTooLarge},
		{"no size bound", responses.ChainLimits{MaxLen: 4}, nil},
	} {
		if err := chain(tc.lim); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func testConcurrent(t *testing.T, h *h) {
	ctx := context.WithoutCancel(t.Context())
	const n = 16
	rows := make([]responses.Row, n)
	for i := range n {
		rows[i] = h.row("alice", fmt.Sprintf("resp_%d", i), "", time.Hour, `[]`)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := h.s.Put(ctx, rows[i]); err != nil {
				t.Errorf("put: %v", err)
			}
		})
	}
	wg.Wait()
	for i := range n {
		if _, _, err := h.s.Body(ctx, "alice", rows[i].ID, now); err != nil {
			t.Errorf("%s: %v", rows[i].ID, err)
		}
	}
	// Concurrent deletes of one response: exactly one succeeds.
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = h.s.Delete(ctx, "alice", "resp_0", now) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, responses.ErrNotFound):
			t.Errorf("delete: %v", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d concurrent deletes succeeded, want 1", ok)
	}
}
