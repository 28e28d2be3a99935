// Package conversationstest is the conformance suite of
// conversations.Store: every implementation runs it with a func that
// opens an empty store. Rows are sealed and keys wrapped as the Service's
// sealing layer does, under a key-encryption key of the suite's own: a
// Store treats both as opaque bytes.
package conversationstest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Run runs the suite. open returns a new, empty store; Run closes it.
func Run(t *testing.T, open func(t *testing.T) conversations.Store) {
	kek, err := envelope.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h *h)
	}{
		{"CreateGet", testCreateGet},
		{"OwnerIsolation", testOwnerIsolation},
		{"SetMetadata", testSetMetadata},
		{"ListPages", testListPages},
		{"AppendAllOrNothing", testAppendAllOrNothing},
		{"MaxItems", testMaxItems},
		{"DeleteItem", testDeleteItem},
		{"Delete", testDelete},
		{"AllLimits", testAllLimits},
		{"ConcurrentAppends", testConcurrentAppends},
	} {
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
	s    conversations.Store
	ring *envelope.Keyring
}

func (h *h) create(owner, id, meta string, itemIDs ...string) {
	h.t.Helper()
	dk, w, err := h.ring.NewDataKey(id)
	if err != nil {
		h.t.Fatal(err)
	}
	r := conversations.Row{ID: id, Owner: owner, CreatedAt: now, Metadata: dk.Seal("metadata", []byte(meta)), Key: w}
	if err := h.s.Create(h.t.Context(), r, h.items(id, itemIDs...)); err != nil {
		h.t.Fatalf("create %s: %v", id, err)
	}
}

func (h *h) items(conv string, ids ...string) []conversations.ItemRow {
	h.t.Helper()
	out := make([]conversations.ItemRow, len(ids))
	for i, id := range ids {
		dk, w, err := h.ring.NewDataKey(conversations.ItemKeyID(conv, id))
		if err != nil {
			h.t.Fatal(err)
		}
		out[i] = conversations.ItemRow{ID: id, Body: dk.Seal("item", []byte(`{"id":"`+id+`"}`)), Key: w}
	}
	return out
}

// open checks that it is conv's item and returns its id.
func (h *h) open(conv string, it conversations.ItemRow) string {
	h.t.Helper()
	dk, err := h.ring.Unwrap(conversations.ItemKeyID(conv, it.ID), it.Key)
	if err != nil {
		h.t.Fatalf("item %s: %v", it.ID, err)
	}
	b, err := dk.Open("item", it.Body)
	if err != nil || string(b) != `{"id":"`+it.ID+`"}` {
		h.t.Fatalf("item %s: %q, %v", it.ID, b, err)
	}
	return it.ID
}

func (h *h) ids(conv string, items []conversations.ItemRow) string {
	h.t.Helper()
	s := ""
	for i, it := range items {
		if i > 0 {
			s += ","
		}
		s += h.open(conv, it)
	}
	return s
}

func (h *h) list(owner, conv string, p conversations.Page) (string, bool) {
	h.t.Helper()
	items, more, err := h.s.List(h.t.Context(), owner, conv, p)
	if err != nil {
		h.t.Fatalf("list %s %+v: %v", conv, p, err)
	}
	return h.ids(conv, items), more
}

func testCreateGet(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{"k":"v"}`, "a", "b")
	r, err := h.s.Get(t.Context(), "alice", "conv_1")
	if err != nil {
		t.Fatal(err)
	}
	dk, err := h.ring.Unwrap("conv_1", r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := dk.Open("metadata", r.Metadata); err != nil || string(m) != `{"k":"v"}` || !r.CreatedAt.Equal(now) || r.Owner != "alice" {
		t.Errorf("got %q %v %v %s", m, err, r.CreatedAt, r.Owner)
	}
	if got, more := h.list("alice", "conv_1", conversations.Page{Limit: 10}); got != "a,b" || more {
		t.Errorf("items %s more %v", got, more)
	}
	if _, err := h.s.Get(t.Context(), "alice", "conv_2"); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("absent: %v", err)
	}
}

func testOwnerIsolation(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a")
	ctx := t.Context()
	checks := map[string]error{}
	_, checks["Get"] = h.s.Get(ctx, "bob", "conv_1")
	checks["SetMetadata"] = h.s.SetMetadata(ctx, "bob", "conv_1", []byte("x"))
	checks["Append"] = h.s.Append(ctx, "bob", "conv_1", h.items("conv_1", "b"), 0)
	_, _, checks["List"] = h.s.List(ctx, "bob", "conv_1", conversations.Page{Limit: 10})
	_, checks["Item"] = h.s.Item(ctx, "bob", "conv_1", "a")
	checks["DeleteItem"] = h.s.DeleteItem(ctx, "bob", "conv_1", "a")
	_, checks["All"] = h.s.All(ctx, "bob", "conv_1", conversations.Limits{MaxItems: 10})
	checks["Delete"] = h.s.Delete(ctx, "bob", "conv_1")
	for op, err := range checks {
		if !errors.Is(err, conversations.ErrNotFound) {
			t.Errorf("%s by another owner: %v, want ErrNotFound", op, err)
		}
	}
	if got, _ := h.list("alice", "conv_1", conversations.Page{Limit: 10}); got != "a" {
		t.Errorf("alice's items after bob's attempts: %s", got)
	}
}

func testSetMetadata(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`)
	r, _ := h.s.Get(t.Context(), "alice", "conv_1")
	dk, _ := h.ring.Unwrap("conv_1", r.Key)
	if err := h.s.SetMetadata(t.Context(), "alice", "conv_1", dk.Seal("metadata", []byte(`{"a":"b"}`))); err != nil {
		t.Fatal(err)
	}
	r, _ = h.s.Get(t.Context(), "alice", "conv_1")
	if m, err := dk.Open("metadata", r.Metadata); err != nil || string(m) != `{"a":"b"}` {
		t.Errorf("metadata %q %v", m, err)
	}
	if err := h.s.SetMetadata(t.Context(), "alice", "conv_2", nil); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("absent: %v", err)
	}
}

func testListPages(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "i1", "i2")
	if err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", "i3", "i4", "i5"), 0); err != nil {
		t.Fatal(err)
	}
	h.create("alice", "conv_2", `{}`, "i9") // another conversation's items stay apart
	for _, tc := range []struct {
		p    conversations.Page
		want string
		more bool
	}{
		{conversations.Page{Limit: 20}, "i1,i2,i3,i4,i5", false},
		{conversations.Page{Limit: 20, Desc: true}, "i5,i4,i3,i2,i1", false},
		{conversations.Page{Limit: 2}, "i1,i2", true},
		{conversations.Page{Limit: 2, After: "i2"}, "i3,i4", true},
		{conversations.Page{Limit: 2, After: "i4"}, "i5", false},
		{conversations.Page{Limit: 2, After: "i4", Desc: true}, "i3,i2", true},
		{conversations.Page{Limit: 5, After: "i1", Desc: true}, "", false},
	} {
		got, more := h.list("alice", "conv_1", tc.p)
		if got != tc.want || more != tc.more {
			t.Errorf("%+v: %s more %v, want %s more %v", tc.p, got, more, tc.want, tc.more)
		}
	}
	if _, _, err := h.s.List(t.Context(), "alice", "conv_1", conversations.Page{Limit: 2, After: "i9"}); !errors.Is(err, conversations.ErrItemNotFound) {
		t.Errorf("after another conversation's item: %v", err)
	}
}

func testAppendAllOrNothing(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a")
	err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", "b", "a"), 0)
	if !errors.Is(err, conversations.ErrDuplicateItem) {
		t.Fatalf("duplicate id: %v", err)
	}
	if got, _ := h.list("alice", "conv_1", conversations.Page{Limit: 10}); got != "a" {
		t.Errorf("after a refused append: %s", got)
	}
	// The same item id in another conversation is another item.
	h.create("alice", "conv_2", `{}`, "a")
	if err := h.s.Append(t.Context(), "alice", "conv_missing", h.items("conv_missing", "x"), 0); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("append to an absent conversation: %v", err)
	}
}

func testMaxItems(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a", "b")
	if err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", "c", "d"), 3); !errors.Is(err, conversations.ErrTooManyItems) {
		t.Errorf("past the bound: %v", err)
	}
	if err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", "c"), 3); err != nil {
		t.Errorf("up to the bound: %v", err)
	}
}

func testDeleteItem(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a", "b", "c")
	it, err := h.s.Item(t.Context(), "alice", "conv_1", "b")
	if err != nil || h.open("conv_1", it) != "b" {
		t.Fatalf("item: %v", err)
	}
	if err := h.s.DeleteItem(t.Context(), "alice", "conv_1", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Item(t.Context(), "alice", "conv_1", "b"); !errors.Is(err, conversations.ErrItemNotFound) {
		t.Errorf("deleted item: %v", err)
	}
	if err := h.s.DeleteItem(t.Context(), "alice", "conv_1", "b"); !errors.Is(err, conversations.ErrItemNotFound) {
		t.Errorf("deleted twice: %v", err)
	}
	if got, _ := h.list("alice", "conv_1", conversations.Page{Limit: 10}); got != "a,c" {
		t.Errorf("after the delete: %s", got)
	}
	// The id is free again, and the re-added item comes last.
	if err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", "b"), 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.list("alice", "conv_1", conversations.Page{Limit: 10}); got != "a,c,b" {
		t.Errorf("after re-adding: %s", got)
	}
}

func testDelete(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a", "b")
	h.create("alice", "conv_2", `{}`, "a")
	if err := h.s.Delete(t.Context(), "alice", "conv_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Get(t.Context(), "alice", "conv_1"); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if _, err := h.s.Item(t.Context(), "alice", "conv_1", "a"); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("item after delete: %v", err)
	}
	if err := h.s.Delete(t.Context(), "alice", "conv_1"); !errors.Is(err, conversations.ErrNotFound) {
		t.Errorf("deleted twice: %v", err)
	}
	if got, _ := h.list("alice", "conv_2", conversations.Page{Limit: 10}); got != "a" {
		t.Errorf("the other conversation: %s", got)
	}
}

func testAllLimits(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`, "a", "b", "c")
	ctx := t.Context()
	items, err := h.s.All(ctx, "alice", "conv_1", conversations.Limits{MaxItems: 3})
	if err != nil || h.ids("conv_1", items) != "a,b,c" {
		t.Fatalf("all: %v", err)
	}
	if _, err := h.s.All(ctx, "alice", "conv_1", conversations.Limits{MaxItems: 2}); !errors.Is(err, conversations.ErrTooLarge) {
		t.Errorf("past MaxItems: %v", err)
	}
	// Each plaintext is {"id":"x"}: 10 bytes.
	lim := conversations.Limits{MaxItems: 10, MaxBytes: 29, Overhead: envelope.SealOverhead}
	if _, err := h.s.All(ctx, "alice", "conv_1", lim); !errors.Is(err, conversations.ErrTooLarge) {
		t.Errorf("past MaxBytes: %v", err)
	}
	lim.MaxBytes = 30
	if _, err := h.s.All(ctx, "alice", "conv_1", lim); err != nil {
		t.Errorf("at MaxBytes: %v", err)
	}
}

func testConcurrentAppends(t *testing.T, h *h) {
	h.create("alice", "conv_1", `{}`)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 4 {
				id := fmt.Sprintf("g%d-%d", g, i)
				if err := h.s.Append(t.Context(), "alice", "conv_1", h.items("conv_1", id), 0); err != nil {
					t.Errorf("append %s: %v", id, err)
				}
			}
		})
	}
	wg.Wait()
	items, err := h.s.All(t.Context(), "alice", "conv_1", conversations.Limits{MaxItems: 100})
	if err != nil || len(items) != 24 {
		t.Fatalf("%d items, %v", len(items), err)
	}
	// Each goroutine's items are in its order.
	last := map[byte]byte{}
	for _, it := range items {
		g, i := it.ID[1], it.ID[3]
		if prev, ok := last[g]; ok && i <= prev {
			t.Errorf("g%c's items out of order", g)
		}
		last[g] = i
	}
}
