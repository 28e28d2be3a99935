// Package vectorstorestest is the conformance suite of vectorstores.Store:
// every implementation runs it (the SQLite store in backends/vectorstores,
// others beside their code) with a func that opens an empty store. Chunk
// text and data keys are sealed and wrapped as the Service does, under a
// key-encryption key of the suite's own: a Store treats them as opaque.
package vectorstorestest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Run runs the suite. open returns a new, empty store; Run closes it.
func Run(t *testing.T, open func(t *testing.T) vectorstores.Store) {
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
		{"CreateGet", testCreateGet},
		{"OwnerIsolation", testOwnerIsolation},
		{"ModifyAndExpiry", testModifyAndExpiry},
		{"SweepStores", testSweepStores},
		{"ListStores", testListStores},
		{"ListFiles", testListFiles},
		{"Attach", testAttach},
		{"StoreFull", testStoreFull},
		{"Indexing", testIndexing},
		{"IndexingFailed", testIndexingFailed},
		{"DetachedWhileIndexing", testDetachedWhileIndexing},
		{"StaleJobAfterCompletion", testStaleJobAfterCompletion},
		{"DeleteErases", testDeleteErases},
		{"ConcurrentAttach", testConcurrentAttach},
		{"ConcurrentChunkLimit", testConcurrentChunkLimit},
		{"Batches", testBatches},
		{"BatchCancel", testBatchCancel},
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

// now has nanoseconds: a store keeps them.
var now = time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)

type h struct {
	t    *testing.T
	s    vectorstores.Store
	ring *envelope.Keyring
	n    int64
}

func (h *h) storeRow(owner, id string, created time.Time) vectorstores.StoreRow {
	return vectorstores.StoreRow{ID: id, Owner: owner, Name: "n-" + id, Description: "d", Metadata: []byte(`{"k":"v"}`),
		CreatedAt: created, LastActiveAt: created}
}

func (h *h) fileRow(owner, storeID, fileID string, created time.Time) vectorstores.FileRow {
	h.n++
	return vectorstores.FileRow{StoreID: storeID, FileID: fileID, Owner: owner, Filename: fileID + ".txt", Gen: h.n*1000 + 7,
		Status: vectorstores.StatusInProgress, ChunkTokens: 800, Overlap: 400, CreatedAt: created}
}

func (h *h) create(st vectorstores.StoreRow, files ...vectorstores.FileRow) {
	h.t.Helper()
	if err := h.s.CreateStore(h.t.Context(), st, files); err != nil {
		h.t.Fatalf("create %s: %v", st.ID, err)
	}
}

func (h *h) notFound(what string, err error) {
	h.t.Helper()
	var nf *vectorstores.NotFoundError
	if !errors.As(err, &nf) || !errors.Is(err, vectorstores.ErrNotFound) {
		h.t.Errorf("%s: %v, want a *NotFoundError", what, err)
	}
}

func jobOf(f vectorstores.FileRow) vectorstores.Job {
	return vectorstores.Job{StoreID: f.StoreID, FileID: f.FileID, Owner: f.Owner, Filename: f.Filename, Gen: f.Gen,
		ChunkTokens: f.ChunkTokens, Overlap: f.Overlap}
}

// key makes a wrapped data key for a generation.
func (h *h) key(f vectorstores.FileRow) []byte {
	h.t.Helper()
	_, w, err := h.ring.NewDataKey(fmt.Sprintf("test:%s/%s/%d", f.StoreID, f.FileID, f.Gen))
	if err != nil {
		h.t.Fatal(err)
	}
	return w
}

func chunks(first, n int) []vectorstores.Chunk {
	out := make([]vectorstores.Chunk, n)
	for i := range out {
		seq := int64(first + i)
		out[i] = vectorstores.Chunk{Seq: seq, Sealed: []byte(fmt.Sprintf("sealed-%d", seq)), Vector: []byte{byte(seq), 1, 2, 3}}
	}
	return out
}

func noCheck(int64, int64) error { return nil }

// index runs f through indexing with n chunks and finishes it completed.
func (h *h) index(f vectorstores.FileRow, n int) []byte {
	h.t.Helper()
	ctx := h.t.Context()
	key := h.key(f)
	if err := h.s.ResetChunks(ctx, jobOf(f), key); err != nil {
		h.t.Fatalf("reset %s: %v", f.FileID, err)
	}
	if n > 0 {
		if err := h.s.InsertChunks(ctx, jobOf(f), chunks(0, n), noCheck); err != nil {
			h.t.Fatalf("insert %s: %v", f.FileID, err)
		}
	}
	if err := h.s.Finish(ctx, jobOf(f), vectorstores.StatusCompleted, "", "", int64(n*10)); err != nil {
		h.t.Fatalf("finish %s: %v", f.FileID, err)
	}
	return key
}

// scan returns the chunks Scan reads, as "file/seq", sorted.
func (h *h) scan(storeID string) []string {
	h.t.Helper()
	var out []string
	err := h.s.Scan(h.t.Context(), storeID, func(c vectorstores.ScannedChunk) error {
		out = append(out, fmt.Sprintf("%s/%d", c.FileID, c.Seq))
		return nil
	})
	if err != nil {
		h.t.Fatalf("scan %s: %v", storeID, err)
	}
	slices.Sort(out)
	return out
}

func testCreateGet(t *testing.T, h *h) {
	ctx := t.Context()
	st := h.storeRow("alice", "vs_1", now)
	st.ExpiresDays = 3
	st.ExpiresAt = vectorstores.ExpiryOf(now, 3)
	f1 := h.fileRow("alice", "vs_1", "file-1", now)
	f1.Attributes = []byte(`{"a":1}`)
	f2 := h.fileRow("alice", "vs_1", "file-2", now.Add(time.Nanosecond))
	h.create(st, f1, f2)
	got, err := h.s.GetStore(ctx, "alice", "vs_1", now)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CreatedAt.Equal(st.CreatedAt) || !got.ExpiresAt.Equal(st.ExpiresAt) || !got.LastActiveAt.Equal(st.LastActiveAt) {
		t.Errorf("times: got %+v, want %+v", got, st)
	}
	got.CreatedAt, got.LastActiveAt, got.ExpiresAt = st.CreatedAt, st.LastActiveAt, st.ExpiresAt
	if !reflect.DeepEqual(got, st) {
		t.Errorf("store:\n got %+v\nwant %+v", got, st)
	}
	for _, want := range []vectorstores.FileRow{f1, f2} {
		f, err := h.s.GetFile(ctx, "alice", "vs_1", want.FileID, now)
		if err != nil {
			t.Fatal(err)
		}
		if !f.CreatedAt.Equal(want.CreatedAt) {
			t.Errorf("file created %v, want %v", f.CreatedAt, want.CreatedAt)
		}
		f.CreatedAt = want.CreatedAt
		if !reflect.DeepEqual(f, want) {
			t.Errorf("file:\n got %+v\nwant %+v", f, want)
		}
	}
	var fnf *vectorstores.FileNotFoundError
	if _, err := h.s.GetFile(ctx, "alice", "vs_1", "file-none", now); !errors.As(err, &fnf) || fnf.ID != "file-none" {
		t.Errorf("missing file: %v, want *FileNotFoundError", err)
	}
	_, err = h.s.GetStore(ctx, "alice", "vs_none", now)
	h.notFound("missing store", err)
	c, err := h.s.Counts(ctx, "vs_1")
	if err != nil || c != (vectorstores.Counts{InProgress: 2, Total: 2}) {
		t.Errorf("counts %+v, %v", c, err)
	}
	// Attributes are replaced, and removed with nil.
	if f, err := h.s.SetAttributes(ctx, "alice", "vs_1", "file-1", now, []byte(`{"b":2}`)); err != nil || string(f.Attributes) != `{"b":2}` {
		t.Errorf("set attributes: %s, %v", f.Attributes, err)
	}
	if _, err := h.s.SetAttributes(ctx, "alice", "vs_1", "file-1", now, nil); err != nil {
		t.Fatal(err)
	}
	if f, err := h.s.GetFile(ctx, "alice", "vs_1", "file-1", now); err != nil || f.Attributes != nil {
		t.Errorf("attributes after removal: %s, %v", f.Attributes, err)
	}
}

func testOwnerIsolation(t *testing.T, h *h) {
	ctx := t.Context()
	f := h.fileRow("alice", "vs_a", "file-1", now)
	h.create(h.storeRow("alice", "vs_a", now), f)
	h.create(h.storeRow("bob", "vs_b", now))
	_, err := h.s.GetStore(ctx, "bob", "vs_a", now)
	h.notFound("get", err)
	_, err = h.s.ModifyStore(ctx, "bob", "vs_a", now, vectorstores.StorePatch{Name: new("x")})
	h.notFound("modify", err)
	h.notFound("delete", h.s.DeleteStore(ctx, "bob", "vs_a", now))
	_, err = h.s.AttachFiles(ctx, "bob", "vs_a", now, []vectorstores.FileRow{h.fileRow("bob", "vs_a", "file-2", now)})
	h.notFound("attach", err)
	_, err = h.s.GetFile(ctx, "bob", "vs_a", "file-1", now)
	h.notFound("get file", err)
	_, err = h.s.SetAttributes(ctx, "bob", "vs_a", "file-1", now, []byte(`{}`))
	h.notFound("set attributes", err)
	h.notFound("detach", h.s.DetachFile(ctx, "bob", "vs_a", "file-1", now))
	if _, err := h.s.CreateBatch(ctx, vectorstores.BatchRow{ID: "vsfb_a", StoreID: "vs_a", Owner: "alice", CreatedAt: now}, now, nil); err != nil {
		t.Fatal(err)
	}
	_, err = h.s.CreateBatch(ctx, vectorstores.BatchRow{ID: "vsfb_b", StoreID: "vs_a", Owner: "bob", CreatedAt: now}, now,
		[]vectorstores.FileRow{h.fileRow("bob", "vs_a", "file-3", now)})
	h.notFound("create batch", err)
	_, err = h.s.GetBatch(ctx, "bob", "vs_a", "vsfb_a", now)
	h.notFound("get batch", err)
	_, err = h.s.CancelBatch(ctx, "bob", "vs_a", "vsfb_a", now)
	h.notFound("cancel batch", err)
	_, _, err = h.s.ListFiles(ctx, "bob", "vs_a", now, vectorstores.ListQuery{Limit: 10, BatchID: "vsfb_a"})
	h.notFound("list batch files", err)
	// Bob's own store does not reach alice's batch either.
	var bnf *vectorstores.BatchNotFoundError
	if _, err := h.s.GetBatch(ctx, "bob", "vs_b", "vsfb_a", now); !errors.As(err, &bnf) {
		t.Errorf("alice's batch through bob's store: %v, want *BatchNotFoundError", err)
	}
	_, _, err = h.s.ListFiles(ctx, "bob", "vs_a", now, vectorstores.ListQuery{Limit: 10})
	h.notFound("list files", err)
	list, _, err := h.s.ListStores(ctx, "bob", now, vectorstores.ListQuery{Limit: 10})
	if err != nil || len(list) != 1 || list[0].ID != "vs_b" {
		t.Errorf("bob's stores: %+v, %v", list, err)
	}
	var cur *vectorstores.InvalidCursorError
	if _, _, err := h.s.ListStores(ctx, "bob", now, vectorstores.ListQuery{Limit: 10, After: "vs_a"}); !errors.As(err, &cur) || cur.Param != "after" {
		t.Errorf("bob's list after alice's store: %v, want *InvalidCursorError", err)
	}
	// Alice's store is untouched.
	if got, err := h.s.GetFile(ctx, "alice", "vs_a", "file-1", now); err != nil || got.Status != vectorstores.StatusInProgress {
		t.Errorf("alice's file: %+v, %v", got, err)
	}
}

func testModifyAndExpiry(t *testing.T, h *h) {
	ctx := t.Context()
	h.create(h.storeRow("alice", "vs_1", now))
	st, err := h.s.ModifyStore(ctx, "alice", "vs_1", now, vectorstores.StorePatch{Name: new("renamed"), Metadata: []byte(`{"x":"y"}`)})
	if err != nil || st.Name != "renamed" || string(st.Metadata) != `{"x":"y"}` || !st.ExpiresAt.IsZero() {
		t.Fatalf("modify: %+v, %v", st, err)
	}
	// expires_after anchors at the last activity.
	st, err = h.s.ModifyStore(ctx, "alice", "vs_1", now, vectorstores.StorePatch{SetExpiry: true, ExpiresDays: 1})
	if err != nil || st.ExpiresDays != 1 || !st.ExpiresAt.Equal(now.Add(24*time.Hour)) || st.Name != "renamed" {
		t.Fatalf("set expiry: %+v, %v", st, err)
	}
	got, err := h.s.GetStore(ctx, "alice", "vs_1", now)
	if err != nil || !got.ExpiresAt.Equal(now.Add(24*time.Hour)) || got.Name != "renamed" {
		t.Errorf("after modify: %+v, %v", got, err)
	}
	// Use moves the expiry.
	later := now.Add(20 * time.Hour)
	if err := h.s.Touch(ctx, "vs_1", later); err != nil {
		t.Fatal(err)
	}
	got, err = h.s.GetStore(ctx, "alice", "vs_1", later)
	if err != nil || !got.LastActiveAt.Equal(later) || !got.ExpiresAt.Equal(later.Add(24*time.Hour)) {
		t.Errorf("after touch: %+v, %v", got, err)
	}
	// Past its expiry a store is absent everywhere.
	gone := later.Add(24 * time.Hour)
	_, err = h.s.GetStore(ctx, "alice", "vs_1", gone)
	h.notFound("expired get", err)
	_, err = h.s.ModifyStore(ctx, "alice", "vs_1", gone, vectorstores.StorePatch{Name: new("x")})
	h.notFound("expired modify", err)
	if list, _, err := h.s.ListStores(ctx, "alice", gone, vectorstores.ListQuery{Limit: 10}); err != nil || len(list) != 0 {
		t.Errorf("expired in list: %+v, %v", list, err)
	}
	h.notFound("expired delete", h.s.DeleteStore(ctx, "alice", "vs_1", gone))
	// Removing expires_after makes it live forever.
	if st, err := h.s.ModifyStore(ctx, "alice", "vs_1", later, vectorstores.StorePatch{SetExpiry: true}); err != nil || !st.ExpiresAt.IsZero() || st.ExpiresDays != 0 {
		t.Errorf("remove expiry: %+v, %v", st, err)
	}
	if _, err := h.s.GetStore(ctx, "alice", "vs_1", gone.Add(1000*time.Hour)); err != nil {
		t.Errorf("without expiry: %v", err)
	}
}

func testSweepStores(t *testing.T, h *h) {
	ctx := t.Context()
	for i, days := range []int{1, 1, 2, 0} {
		st := h.storeRow("alice", fmt.Sprintf("vs_%d", i), now)
		st.ExpiresDays, st.ExpiresAt = days, vectorstores.ExpiryOf(now, days)
		f := h.fileRow("alice", st.ID, "file-1", now)
		h.create(st, f)
		h.index(f, 2)
	}
	if n, err := h.s.SweepStores(ctx, now.Add(24*time.Hour-1)); err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d, %v", n, err)
	}
	n, err := h.s.SweepStores(ctx, now.Add(24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want 2", n, err)
	}
	// Gone with their files and keys, not just hidden.
	_, err = h.s.GetStore(ctx, "alice", "vs_0", now)
	h.notFound("swept store", err)
	if _, err := h.s.ChunkKey(ctx, "vs_0", vectorstores.FileGen{FileID: "file-1", Gen: 1007}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("swept store's key: %v, want ErrNoKey", err)
	}
	if got := h.scan("vs_0"); len(got) != 0 {
		t.Errorf("swept store's chunks are read: %v", got)
	}
	if c, err := h.s.Counts(ctx, "vs_0"); err != nil || c.Total != 0 {
		t.Errorf("swept store's files: %+v, %v", c, err)
	}
	if n, err := h.s.SweepChunks(ctx); err != nil || n != 4 {
		t.Errorf("chunks swept: %d, %v; want 4", n, err)
	}
	for _, id := range []string{"vs_2", "vs_3"} {
		if got := h.scan(id); len(got) != 2 {
			t.Errorf("%s after the sweeps: %v", id, got)
		}
	}
}

func testListStores(t *testing.T, h *h) {
	ctx := t.Context()
	var all []string
	for i := range 7 {
		// Pairs share a creation time: ties go by id.
		id := fmt.Sprintf("vs_%d", i)
		h.create(h.storeRow("alice", id, now.Add(time.Duration(i/2)*time.Second)))
		all = append(all, id)
	}
	desc := slices.Clone(all)
	slices.Reverse(desc)
	ids := func(rows []vectorstores.StoreRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    vectorstores.ListQuery
		want []string
		more bool
	}{
		{"desc first page", vectorstores.ListQuery{Limit: 3, Desc: true}, desc[:3], true},
		{"desc after", vectorstores.ListQuery{Limit: 3, Desc: true, After: desc[2]}, desc[3:6], true},
		{"desc last page", vectorstores.ListQuery{Limit: 3, Desc: true, After: desc[5]}, desc[6:], false},
		{"asc", vectorstores.ListQuery{Limit: 10}, all, false},
		{"asc after", vectorstores.ListQuery{Limit: 2, After: all[2]}, all[3:5], true},
		{"asc before", vectorstores.ListQuery{Limit: 2, Before: all[4]}, all[2:4], true},
		{"desc before", vectorstores.ListQuery{Limit: 2, Desc: true, Before: desc[4]}, desc[2:4], true},
		{"before the first", vectorstores.ListQuery{Limit: 2, Before: all[0]}, nil, false},
		{"between", vectorstores.ListQuery{Limit: 10, After: all[1], Before: all[5]}, all[2:5], false},
	} {
		got, more, err := h.s.ListStores(ctx, "alice", now, tc.q)
		if err != nil || !reflect.DeepEqual(ids(got), tc.want) || more != tc.more {
			t.Errorf("%s: %v more %v, %v; want %v more %v", tc.name, ids(got), more, err, tc.want, tc.more)
		}
	}
	var cur *vectorstores.InvalidCursorError
	if _, _, err := h.s.ListStores(ctx, "alice", now, vectorstores.ListQuery{Limit: 2, Before: "vs_none"}); !errors.As(err, &cur) || cur.Param != "before" || cur.ID != "vs_none" {
		t.Errorf("unknown cursor: %v", err)
	}
}

func testListFiles(t *testing.T, h *h) {
	ctx := t.Context()
	var fs []vectorstores.FileRow
	for i := range 5 {
		fs = append(fs, h.fileRow("alice", "vs_1", fmt.Sprintf("file-%d", i), now.Add(time.Duration(i)*time.Millisecond)))
	}
	h.create(h.storeRow("alice", "vs_1", now), fs...)
	h.create(h.storeRow("alice", "vs_2", now), h.fileRow("alice", "vs_2", "file-x", now))
	h.index(fs[1], 1)
	h.index(fs[3], 1)
	ids := func(rows []vectorstores.FileRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, r.FileID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		q    vectorstores.ListQuery
		want []string
		more bool
	}{
		{"desc", vectorstores.ListQuery{Limit: 2, Desc: true}, []string{"file-4", "file-3"}, true},
		{"asc after", vectorstores.ListQuery{Limit: 2, After: "file-1"}, []string{"file-2", "file-3"}, true},
		{"before", vectorstores.ListQuery{Limit: 10, Before: "file-2"}, []string{"file-0", "file-1"}, false},
		{"completed", vectorstores.ListQuery{Limit: 10, Status: vectorstores.StatusCompleted}, []string{"file-1", "file-3"}, false},
		{"in progress, desc", vectorstores.ListQuery{Limit: 2, Desc: true, Status: vectorstores.StatusInProgress}, []string{"file-4", "file-2"}, true},
		{"failed", vectorstores.ListQuery{Limit: 10, Status: vectorstores.StatusFailed}, nil, false},
	} {
		got, more, err := h.s.ListFiles(ctx, "alice", "vs_1", now, tc.q)
		if err != nil || !reflect.DeepEqual(ids(got), tc.want) || more != tc.more {
			t.Errorf("%s: %v more %v, %v; want %v more %v", tc.name, ids(got), more, err, tc.want, tc.more)
		}
	}
	// Another store's file is no cursor here.
	var cur *vectorstores.InvalidCursorError
	if _, _, err := h.s.ListFiles(ctx, "alice", "vs_1", now, vectorstores.ListQuery{Limit: 2, After: "file-x"}); !errors.As(err, &cur) {
		t.Errorf("cursor of another store: %v", err)
	}
	if c, err := h.s.Counts(ctx, "vs_1"); err != nil || c != (vectorstores.Counts{InProgress: 3, Completed: 2, Total: 5, UsageBytes: 20}) {
		t.Errorf("counts %+v, %v", c, err)
	}
}

func testAttach(t *testing.T, h *h) {
	ctx := t.Context()
	first := h.fileRow("alice", "vs_1", "file-1", now)
	h.create(h.storeRow("alice", "vs_1", now), first)
	again := h.fileRow("alice", "vs_1", "file-1", now.Add(time.Second))
	fresh := h.fileRow("alice", "vs_1", "file-2", now.Add(time.Second))
	got, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{again, fresh})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Gen != first.Gen || got[1].Gen != fresh.Gen {
		t.Errorf("attach returned %+v; want the existing row, then the new one", got)
	}
	// Detach and attach again: a new generation, the old chunks unread.
	h.index(first, 2)
	if err := h.s.DetachFile(ctx, "alice", "vs_1", "file-1", now); err != nil {
		t.Fatal(err)
	}
	var fnf *vectorstores.FileNotFoundError
	if err := h.s.DetachFile(ctx, "alice", "vs_1", "file-1", now); !errors.As(err, &fnf) {
		t.Errorf("detach twice: %v, want *FileNotFoundError", err)
	}
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{again}); err != nil {
		t.Fatal(err)
	}
	if got := h.scan("vs_1"); len(got) != 0 {
		t.Errorf("chunks of a detached generation are read: %v", got)
	}
	h.index(again, 1)
	if got := h.scan("vs_1"); !reflect.DeepEqual(got, []string{"file-1/0"}) {
		t.Errorf("after re-indexing: %v", got)
	}
}

func testStoreFull(t *testing.T, h *h) {
	ctx := t.Context()
	fs := make([]vectorstores.FileRow, vectorstores.MaxFilesPerStore-1)
	for i := range fs {
		fs[i] = h.fileRow("alice", "vs_1", fmt.Sprintf("file-%05d", i), now)
	}
	h.create(h.storeRow("alice", "vs_1", now), fs...)
	more := []vectorstores.FileRow{h.fileRow("alice", "vs_1", "file-a", now), h.fileRow("alice", "vs_1", "file-b", now)}
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, more); !errors.Is(err, vectorstores.ErrStoreFull) {
		t.Fatalf("past MaxFilesPerStore: %v, want ErrStoreFull", err)
	}
	var fnf *vectorstores.FileNotFoundError
	if _, err := h.s.GetFile(ctx, "alice", "vs_1", "file-a", now); !errors.As(err, &fnf) {
		t.Errorf("a refused attach left a file: %v", err)
	}
	// Nor does a batch past it, which leaves no batch behind.
	if _, err := h.s.CreateBatch(ctx, vectorstores.BatchRow{ID: "vsfb_1", StoreID: "vs_1", Owner: "alice", CreatedAt: now}, now, more); !errors.Is(err, vectorstores.ErrStoreFull) {
		t.Fatalf("batch past MaxFilesPerStore: %v, want ErrStoreFull", err)
	}
	var bnf *vectorstores.BatchNotFoundError
	if _, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now); !errors.As(err, &bnf) {
		t.Errorf("a refused batch was kept: %v", err)
	}
	if _, err := h.s.GetFile(ctx, "alice", "vs_1", "file-a", now); !errors.As(err, &fnf) {
		t.Errorf("a refused batch left a file: %v", err)
	}
	// Files already attached do not count again.
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{fs[0], more[0]}); err != nil {
		t.Errorf("up to the limit: %v", err)
	}
}

func testIndexing(t *testing.T, h *h) {
	ctx := t.Context()
	fa := h.fileRow("alice", "vs_a", "file-1", now)
	fb := h.fileRow("bob", "vs_b", "file-2", now.Add(time.Second))
	fc := h.fileRow("alice", "vs_a", "file-3", now.Add(2*time.Second))
	h.create(h.storeRow("alice", "vs_a", now), fa, fc)
	h.create(h.storeRow("bob", "vs_b", now), fb)
	jobs, err := h.s.Pending(ctx, 2)
	if err != nil || len(jobs) != 2 || jobs[0] != jobOf(fa) || jobs[1] != jobOf(fb) {
		t.Fatalf("pending: %+v, %v; want the two oldest of any owner", jobs, err)
	}
	key := h.key(fa)
	if err := h.s.ResetChunks(ctx, jobOf(fa), key); err != nil {
		t.Fatal(err)
	}
	if w, err := h.s.ChunkKey(ctx, "vs_a", vectorstores.FileGen{FileID: "file-1", Gen: fa.Gen}); err != nil || !bytes.Equal(w, key) {
		t.Errorf("chunk key: %v", err)
	}
	var seen [][2]int64
	check := func(inStore, ofOwner int64) error {
		seen = append(seen, [2]int64{inStore, ofOwner})
		return nil
	}
	if err := h.s.InsertChunks(ctx, jobOf(fa), chunks(0, 3), check); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(fa), chunks(3, 2), check); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, [][2]int64{{0, 0}, {3, 3}}) {
		t.Errorf("check saw %v, want the counts before each insert", seen)
	}
	if in, of, err := h.s.ChunkCounts(ctx, "vs_a", "alice"); err != nil || in != 5 || of != 5 {
		t.Errorf("chunk counts: %d %d %v", in, of, err)
	}
	// A refused check writes nothing.
	limit := errors.New("limit")
	if err := h.s.InsertChunks(ctx, jobOf(fa), chunks(5, 1), func(int64, int64) error { return limit }); !errors.Is(err, limit) {
		t.Errorf("refused insert: %v", err)
	}
	if in, _, _ := h.s.ChunkCounts(ctx, "vs_a", "alice"); in != 5 {
		t.Errorf("a refused insert counted: %d", in)
	}
	// In progress: not searched yet.
	if got := h.scan("vs_a"); len(got) != 0 {
		t.Errorf("chunks of a file in progress are read: %v", got)
	}
	if err := h.s.Finish(ctx, jobOf(fa), vectorstores.StatusCompleted, "", "", 123); err != nil {
		t.Fatal(err)
	}
	if got := h.scan("vs_a"); len(got) != 5 {
		t.Errorf("completed file's chunks: %v", got)
	}
	var scanned []vectorstores.ScannedChunk
	if err := h.s.Scan(ctx, "vs_a", func(c vectorstores.ScannedChunk) error { scanned = append(scanned, c); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, c := range scanned {
		want := chunks(int(c.Seq), 1)[0]
		if c.FileID != "file-1" || c.Filename != "file-1.txt" || c.Gen != fa.Gen || !bytes.Equal(c.Sealed, want.Sealed) || !bytes.Equal(c.Vector, want.Vector) {
			t.Errorf("scanned %+v", c)
		}
	}
	stop := errors.New("stop")
	if err := h.s.Scan(ctx, "vs_a", func(vectorstores.ScannedChunk) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("scan stopped by fn: %v", err)
	}
	f, err := h.s.GetFile(ctx, "alice", "vs_a", "file-1", now)
	if err != nil || f.Status != vectorstores.StatusCompleted || f.UsageBytes != 123 || f.ErrCode != "" {
		t.Errorf("finished file: %+v, %v", f, err)
	}
	keys, err := h.s.ChunkKeys(ctx, "vs_a")
	if err != nil || len(keys) != 1 || !bytes.Equal(keys[vectorstores.FileGen{FileID: "file-1", Gen: fa.Gen}], key) {
		t.Errorf("chunk keys: %v, %v", keys, err)
	}
	// A finished file is no longer pending, and a second finish changes
	// nothing.
	jobs, _ = h.s.Pending(ctx, 10)
	if len(jobs) != 2 || jobs[0] != jobOf(fb) || jobs[1] != jobOf(fc) {
		t.Errorf("pending after finish: %+v", jobs)
	}
	if err := h.s.Finish(ctx, jobOf(fa), vectorstores.StatusFailed, "server_error", "x", 0); err != nil {
		t.Fatal(err)
	}
	if got := h.scan("vs_a"); len(got) != 5 {
		t.Errorf("a late failure undid a completed file: %v", got)
	}
}

func testIndexingFailed(t *testing.T, h *h) {
	ctx := t.Context()
	f := h.fileRow("alice", "vs_1", "file-1", now)
	h.create(h.storeRow("alice", "vs_1", now), f)
	if err := h.s.ResetChunks(ctx, jobOf(f), h.key(f)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(f), chunks(0, 4), noCheck); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Finish(ctx, jobOf(f), vectorstores.StatusFailed, "invalid_file", "too big", 0); err != nil {
		t.Fatal(err)
	}
	got, err := h.s.GetFile(ctx, "alice", "vs_1", "file-1", now)
	if err != nil || got.Status != vectorstores.StatusFailed || got.ErrCode != "invalid_file" || got.ErrMessage != "too big" {
		t.Errorf("failed file: %+v, %v", got, err)
	}
	// A failed file keeps no chunks and no key.
	if in, of, err := h.s.ChunkCounts(ctx, "vs_1", "alice"); err != nil || in != 0 || of != 0 {
		t.Errorf("chunk counts after failure: %d %d %v", in, of, err)
	}
	if _, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-1", Gen: f.Gen}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("key after failure: %v, want ErrNoKey", err)
	}
	if n, err := h.s.SweepChunks(ctx); err != nil || n != 0 {
		t.Errorf("chunks left to sweep after failure: %d, %v", n, err)
	}
	// A restart resets an attempt: its chunks go, a new key replaces the old.
	f2 := h.fileRow("alice", "vs_1", "file-2", now)
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{f2}); err != nil {
		t.Fatal(err)
	}
	if err := h.s.ResetChunks(ctx, jobOf(f2), h.key(f2)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(f2), chunks(0, 3), noCheck); err != nil {
		t.Fatal(err)
	}
	key2 := h.key(f2)
	if err := h.s.ResetChunks(ctx, jobOf(f2), key2); err != nil {
		t.Fatal(err)
	}
	if in, _, _ := h.s.ChunkCounts(ctx, "vs_1", "alice"); in != 0 {
		t.Errorf("count after reset: %d", in)
	}
	if w, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-2", Gen: f2.Gen}); err != nil || !bytes.Equal(w, key2) {
		t.Errorf("key after reset: %v", err)
	}
	if err := h.s.Finish(ctx, jobOf(f2), vectorstores.StatusCompleted, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if got := h.scan("vs_1"); len(got) != 0 {
		t.Errorf("chunks of a reset attempt are read: %v", got)
	}
}

func testDetachedWhileIndexing(t *testing.T, h *h) {
	ctx := t.Context()
	f := h.fileRow("alice", "vs_1", "file-1", now)
	h.create(h.storeRow("alice", "vs_1", now), f)
	if err := h.s.ResetChunks(ctx, jobOf(f), h.key(f)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(f), chunks(0, 2), noCheck); err != nil {
		t.Fatal(err)
	}
	if err := h.s.DetachFile(ctx, "alice", "vs_1", "file-1", now); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(f), chunks(2, 2), noCheck); !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("insert after detach: %v, want ErrDetached", err)
	}
	if err := h.s.ResetChunks(ctx, jobOf(f), h.key(f)); !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("reset after detach: %v, want ErrDetached", err)
	}
	if _, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-1", Gen: f.Gen}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("key of a detached file: %v, want ErrNoKey", err)
	}
	// A finish after the detach records nothing.
	if err := h.s.Finish(ctx, jobOf(f), vectorstores.StatusCompleted, "", "", 9); err != nil {
		t.Fatal(err)
	}
	if c, err := h.s.Counts(ctx, "vs_1"); err != nil || c.Total != 0 {
		t.Errorf("counts after a late finish: %+v, %v", c, err)
	}
	// The same file attached again is a new generation: the old job's
	// inserts are refused.
	again := h.fileRow("alice", "vs_1", "file-1", now)
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{again}); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(f), chunks(2, 2), noCheck); !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("old generation's insert after re-attach: %v, want ErrDetached", err)
	}
	if n, err := h.s.SweepChunks(ctx); err != nil || n != 2 {
		t.Errorf("swept %d, %v; want the detached generation's 2", n, err)
	}
}

func testDeleteErases(t *testing.T, h *h) {
	ctx := t.Context()
	f1 := h.fileRow("alice", "vs_1", "file-1", now)
	f2 := h.fileRow("alice", "vs_1", "file-2", now)
	other := h.fileRow("alice", "vs_2", "file-1", now)
	h.create(h.storeRow("alice", "vs_1", now), f1, f2)
	h.create(h.storeRow("alice", "vs_2", now), other)
	h.index(f1, 3)
	h.index(f2, 2)
	h.index(other, 4)
	// Detach: the file's key goes at once, its chunks stop being read.
	if err := h.s.DetachFile(ctx, "alice", "vs_1", "file-2", now); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-2", Gen: f2.Gen}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("detached file's key: %v, want ErrNoKey", err)
	}
	if got := h.scan("vs_1"); len(got) != 3 {
		t.Errorf("after detach: %v", got)
	}
	// Delete: every key of the store goes at once.
	if err := h.s.DeleteStore(ctx, "alice", "vs_1", now); err != nil {
		t.Fatal(err)
	}
	h.notFound("deleted twice", h.s.DeleteStore(ctx, "alice", "vs_1", now))
	_, err := h.s.GetStore(ctx, "alice", "vs_1", now)
	h.notFound("deleted store", err)
	if keys, err := h.s.ChunkKeys(ctx, "vs_1"); err != nil || len(keys) != 0 {
		t.Errorf("deleted store's keys: %v, %v", keys, err)
	}
	if got := h.scan("vs_1"); len(got) != 0 {
		t.Errorf("deleted store's chunks are read: %v", got)
	}
	if n, err := h.s.SweepChunks(ctx); err != nil || n != 5 {
		t.Errorf("swept %d chunks, %v; want 5", n, err)
	}
	// The other store is untouched.
	if got := h.scan("vs_2"); len(got) != 4 {
		t.Errorf("other store after the sweep: %v", got)
	}
	if keys, err := h.s.ChunkKeys(ctx, "vs_2"); err != nil || len(keys) != 1 {
		t.Errorf("other store's keys: %v, %v", keys, err)
	}
}

func testConcurrentAttach(t *testing.T, h *h) {
	ctx := context.WithoutCancel(t.Context())
	h.create(h.storeRow("alice", "vs_1", now))
	var wg sync.WaitGroup
	gens := make([]int64, 8)
	for i := range gens {
		f := h.fileRow("alice", "vs_1", "file-1", now)
		wg.Go(func() {
			got, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{f})
			if err != nil {
				t.Errorf("attach: %v", err)
				return
			}
			gens[i] = got[0].Gen
		})
	}
	wg.Wait()
	// One row, and every attach reports it.
	f, err := h.s.GetFile(ctx, "alice", "vs_1", "file-1", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		if g != f.Gen {
			t.Errorf("attach reported generation %d, the row has %d", g, f.Gen)
		}
	}
	if c, err := h.s.Counts(ctx, "vs_1"); err != nil || c.Total != 1 {
		t.Errorf("files after concurrent attaches: %+v, %v", c, err)
	}
}

func testConcurrentChunkLimit(t *testing.T, h *h) {
	ctx := context.WithoutCancel(t.Context())
	const limit = 10
	var fs []vectorstores.FileRow
	for i := range 6 {
		fs = append(fs, h.fileRow("alice", "vs_1", fmt.Sprintf("file-%d", i), now))
	}
	h.create(h.storeRow("alice", "vs_1", now), fs...)
	for _, f := range fs {
		if err := h.s.ResetChunks(ctx, jobOf(f), h.key(f)); err != nil {
			t.Fatal(err)
		}
	}
	full := errors.New("full")
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() {
			err := h.s.InsertChunks(ctx, jobOf(f), chunks(0, 3), func(inStore, _ int64) error {
				if inStore+3 > limit {
					return full
				}
				return nil
			})
			if err != nil && !errors.Is(err, full) {
				t.Errorf("insert: %v", err)
			}
		})
	}
	wg.Wait()
	// The check is atomic with the insert: at most 3 batches of 3 fit.
	if in, _, err := h.s.ChunkCounts(ctx, "vs_1", "alice"); err != nil || in != 9 {
		t.Errorf("chunks after concurrent inserts: %d, %v; want 9", in, err)
	}
}

func (h *h) batch(owner, storeID, id string, created time.Time, files ...vectorstores.FileRow) vectorstores.BatchRow {
	h.t.Helper()
	b, err := h.s.CreateBatch(h.t.Context(), vectorstores.BatchRow{ID: id, StoreID: storeID, Owner: owner, CreatedAt: created}, now, files)
	if err != nil {
		h.t.Fatalf("create batch %s: %v", id, err)
	}
	return b
}

func fileIDs(rows []vectorstores.FileRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, r.FileID)
	}
	return out
}

func testBatches(t *testing.T, h *h) {
	ctx := t.Context()
	old := h.fileRow("alice", "vs_1", "file-0", now)
	h.create(h.storeRow("alice", "vs_1", now), old)
	h.create(h.storeRow("alice", "vs_2", now))
	h.index(old, 1)
	var fs []vectorstores.FileRow
	for i := 1; i <= 3; i++ {
		fs = append(fs, h.fileRow("alice", "vs_1", fmt.Sprintf("file-%d", i), now.Add(time.Duration(i)*time.Millisecond)))
	}
	// New files are attached with the batch; one already attached joins it
	// as it is (completed, its generation kept).
	b := h.batch("alice", "vs_1", "vsfb_1", now, append(fs, old)...)
	if b.ID != "vsfb_1" || b.StoreID != "vs_1" || b.Owner != "alice" || !b.CreatedAt.Equal(now) || !b.CancelledAt.IsZero() ||
		b.Counts != (vectorstores.Counts{InProgress: 3, Completed: 1, Total: 4, UsageBytes: 10}) || b.Status() != vectorstores.StatusInProgress {
		t.Fatalf("created batch %+v, status %s", b, b.Status())
	}
	if f, err := h.s.GetFile(ctx, "alice", "vs_1", "file-0", now); err != nil || f.BatchID != "vsfb_1" || f.Gen != old.Gen || f.Status != vectorstores.StatusCompleted {
		t.Errorf("adopted file %+v, %v", f, err)
	}
	if f, err := h.s.GetFile(ctx, "alice", "vs_1", "file-2", now); err != nil || f.BatchID != "vsfb_1" || f.Gen != fs[1].Gen || f.Status != vectorstores.StatusInProgress {
		t.Errorf("batch file %+v, %v", f, err)
	}
	// A file attached alone belongs to no batch.
	alone := h.fileRow("alice", "vs_1", "file-9", now.Add(time.Second))
	if _, err := h.s.AttachFiles(ctx, "alice", "vs_1", now, []vectorstores.FileRow{alone}); err != nil {
		t.Fatal(err)
	}
	if c, err := h.s.Counts(ctx, "vs_1"); err != nil || c.Total != 5 {
		t.Errorf("store counts %+v, %v", c, err)
	}

	for _, tc := range []struct {
		name string
		q    vectorstores.ListQuery
		want []string
		more bool
	}{
		{"asc", vectorstores.ListQuery{Limit: 10, BatchID: "vsfb_1"}, []string{"file-0", "file-1", "file-2", "file-3"}, false},
		{"desc page", vectorstores.ListQuery{Limit: 2, Desc: true, BatchID: "vsfb_1"}, []string{"file-3", "file-2"}, true},
		{"desc after", vectorstores.ListQuery{Limit: 2, Desc: true, After: "file-2", BatchID: "vsfb_1"}, []string{"file-1", "file-0"}, false},
		{"before", vectorstores.ListQuery{Limit: 10, Before: "file-2", BatchID: "vsfb_1"}, []string{"file-0", "file-1"}, false},
		{"completed", vectorstores.ListQuery{Limit: 10, Status: vectorstores.StatusCompleted, BatchID: "vsfb_1"}, []string{"file-0"}, false},
		{"in progress", vectorstores.ListQuery{Limit: 10, Status: vectorstores.StatusInProgress, BatchID: "vsfb_1"}, []string{"file-1", "file-2", "file-3"}, false},
	} {
		got, more, err := h.s.ListFiles(ctx, "alice", "vs_1", now, tc.q)
		if err != nil || !reflect.DeepEqual(fileIDs(got), tc.want) || more != tc.more {
			t.Errorf("%s: %v more %v, %v; want %v more %v", tc.name, fileIDs(got), more, err, tc.want, tc.more)
		}
	}
	var cur *vectorstores.InvalidCursorError
	if _, _, err := h.s.ListFiles(ctx, "alice", "vs_1", now, vectorstores.ListQuery{Limit: 2, After: "file-9", BatchID: "vsfb_1"}); !errors.As(err, &cur) {
		t.Errorf("cursor outside the batch: %v, want *InvalidCursorError", err)
	}
	var bnf *vectorstores.BatchNotFoundError
	for _, tc := range []struct{ store, batch string }{{"vs_1", "vsfb_none"}, {"vs_2", "vsfb_1"}} {
		if _, err := h.s.GetBatch(ctx, "alice", tc.store, tc.batch, now); !errors.As(err, &bnf) || bnf.ID != tc.batch {
			t.Errorf("get %s of %s: %v, want *BatchNotFoundError", tc.batch, tc.store, err)
		}
		if _, _, err := h.s.ListFiles(ctx, "alice", tc.store, now, vectorstores.ListQuery{Limit: 10, BatchID: tc.batch}); !errors.As(err, &bnf) {
			t.Errorf("list %s of %s: %v, want *BatchNotFoundError", tc.batch, tc.store, err)
		}
		if _, err := h.s.CancelBatch(ctx, "alice", tc.store, tc.batch, now); !errors.As(err, &bnf) {
			t.Errorf("cancel %s of %s: %v, want *BatchNotFoundError", tc.batch, tc.store, err)
		}
	}

	// Its status follows its files: completed once none is in progress,
	// failed files counted as failed.
	h.index(fs[0], 2)
	h.index(fs[1], 1)
	if got, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now); err != nil || got.Status() != vectorstores.StatusInProgress || got.Counts.InProgress != 1 {
		t.Errorf("batch with a file left: %+v, %v", got, err)
	}
	if err := h.s.Finish(ctx, jobOf(fs[2]), vectorstores.StatusFailed, "invalid_file", "bad", 0); err != nil {
		t.Fatal(err)
	}
	got, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now)
	if err != nil || got.Status() != vectorstores.StatusCompleted ||
		got.Counts != (vectorstores.Counts{Completed: 3, Failed: 1, Total: 4, UsageBytes: 40}) {
		t.Errorf("finished batch %+v, %v", got, err)
	}
	if _, err := h.s.CancelBatch(ctx, "alice", "vs_1", "vsfb_1", now); !errors.Is(err, vectorstores.ErrBatchDone) {
		t.Errorf("cancel of a completed batch: %v, want ErrBatchDone", err)
	}
	// A detached file leaves the batch.
	if err := h.s.DetachFile(ctx, "alice", "vs_1", "file-3", now); err != nil {
		t.Fatal(err)
	}
	if got, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now); err != nil || got.Counts.Total != 3 || got.Counts.Failed != 0 {
		t.Errorf("batch after a detach: %+v, %v", got, err)
	}
	// A deleted store's batches go with it.
	if err := h.s.DeleteStore(ctx, "alice", "vs_1", now); err != nil {
		t.Fatal(err)
	}
	h.create(h.storeRow("alice", "vs_1", now))
	if _, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now); !errors.As(err, &bnf) {
		t.Errorf("batch of a deleted store: %v, want *BatchNotFoundError", err)
	}
}

func testBatchCancel(t *testing.T, h *h) {
	ctx := t.Context()
	h.create(h.storeRow("alice", "vs_1", now))
	done := h.fileRow("alice", "vs_1", "file-1", now)
	busy := h.fileRow("alice", "vs_1", "file-2", now)
	idle := h.fileRow("alice", "vs_1", "file-3", now)
	h.batch("alice", "vs_1", "vsfb_1", now, done, busy, idle)
	h.index(done, 2)
	// busy is being indexed: a key and chunks so far.
	if err := h.s.ResetChunks(ctx, jobOf(busy), h.key(busy)); err != nil {
		t.Fatal(err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(busy), chunks(0, 3), noCheck); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	b, err := h.s.CancelBatch(ctx, "alice", "vs_1", "vsfb_1", later)
	if err != nil {
		t.Fatal(err)
	}
	if b.Status() != vectorstores.StatusCancelled || !b.CancelledAt.Equal(later) ||
		b.Counts != (vectorstores.Counts{Completed: 1, Cancelled: 2, Total: 3, UsageBytes: 20}) {
		t.Errorf("cancelled batch %+v", b)
	}
	if got, err := h.s.GetBatch(ctx, "alice", "vs_1", "vsfb_1", now); err != nil || got.Status() != vectorstores.StatusCancelled || got.Counts != b.Counts {
		t.Errorf("get after cancel %+v, %v", got, err)
	}
	// The cancelled files are no work, keep no key and no chunks, and the
	// indexer's next write for one is refused.
	if jobs, err := h.s.Pending(ctx, 10); err != nil || len(jobs) != 0 {
		t.Errorf("pending after cancel: %+v, %v", jobs, err)
	}
	if _, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-2", Gen: busy.Gen}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("cancelled file's key: %v, want ErrNoKey", err)
	}
	if err := h.s.InsertChunks(ctx, jobOf(busy), chunks(3, 1), noCheck); !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("insert after cancel: %v, want ErrDetached", err)
	}
	if err := h.s.ResetChunks(ctx, jobOf(idle), h.key(idle)); !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("reset after cancel: %v, want ErrDetached", err)
	}
	if _, err := h.s.ChunkKey(ctx, "vs_1", vectorstores.FileGen{FileID: "file-3", Gen: idle.Gen}); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("a refused reset left a key: %v", err)
	}
	if err := h.s.Finish(ctx, jobOf(busy), vectorstores.StatusCompleted, "", "", 99); err != nil {
		t.Fatal(err)
	}
	if f, err := h.s.GetFile(ctx, "alice", "vs_1", "file-2", now); err != nil || f.Status != vectorstores.StatusCancelled || f.UsageBytes != 0 {
		t.Errorf("cancelled file after a late finish: %+v, %v", f, err)
	}
	if in, _, err := h.s.ChunkCounts(ctx, "vs_1", "alice"); err != nil || in != 2 {
		t.Errorf("chunk counts after cancel: %d, %v; want the completed file's 2", in, err)
	}
	if got := h.scan("vs_1"); !reflect.DeepEqual(got, []string{"file-1/0", "file-1/1"}) {
		t.Errorf("scan after cancel: %v", got)
	}
	if n, err := h.s.SweepChunks(ctx); err != nil || n != 0 {
		t.Errorf("chunks left to sweep after cancel: %d, %v", n, err)
	}
	// Cancelling again changes nothing.
	if again, err := h.s.CancelBatch(ctx, "alice", "vs_1", "vsfb_1", later.Add(time.Hour)); err != nil || !again.CancelledAt.Equal(later) || again.Counts != b.Counts {
		t.Errorf("second cancel: %+v, %v", again, err)
	}
}

// testStaleJobAfterCompletion: a job listed while its file was in progress
// and started after the file completed (the indexer's list is a snapshot)
// must not reset the completed file's chunks.
func testStaleJobAfterCompletion(t *testing.T, h *h) {
	ctx := t.Context()
	st := h.storeRow("alice", "vs_1", now)
	f := h.fileRow("alice", "vs_1", "file-1", now)
	h.create(st, f)
	h.index(f, 3)
	err := h.s.ResetChunks(ctx, jobOf(f), h.key(f))
	if !errors.Is(err, vectorstores.ErrDetached) {
		t.Errorf("ResetChunks of a completed file: %v, want ErrDetached", err)
	}
	if got := h.scan("vs_1"); len(got) != 3 {
		t.Errorf("the completed file's chunks after a stale job: %v, want its 3", got)
	}
}
