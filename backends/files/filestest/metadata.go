package filestest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// RunMetadata runs the metadata store suite; open returns a new, empty
// store, released by the test's cleanup.
func RunMetadata(t *testing.T, open func(t *testing.T) files.Metadata) {
	tests := []struct {
		name string
		fn   func(*testing.T, *metaEnv)
	}{
		{"InsertGet", testInsertGet},
		{"InsertDuplicate", testInsertDuplicate},
		{"DataKey", testDataKey},
		{"Delete", testMetaDelete},
		{"ListOrderAndPages", testListPages},
		{"ListFilters", testListFilters},
		{"ListCursors", testListCursors},
		{"Exists", testExists},
		{"SweepExpired", testSweepExpired},
		{"SweepTombstones", testSweepTombstones},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ring, err := envelope.NewKeyring(randomKey(t))
			if err != nil {
				t.Fatal(err)
			}
			tt.fn(t, &metaEnv{m: open(t), ring: ring, now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)})
		})
	}
}

func randomKey(t *testing.T) []byte {
	k := make([]byte, envelope.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

type metaEnv struct {
	m    files.Metadata
	ring *envelope.Keyring
	now  time.Time
	seq  int
}

// id returns a new well-formed file id, increasing with each call.
func (e *metaEnv) id() string {
	e.seq++
	return fmt.Sprintf("file-%024d", e.seq)
}

// insert adds a sealed file of owner created at the env's clock plus at,
// expiring at expires (zero: never), and returns it with its wrapped key.
func (e *metaEnv) insert(t *testing.T, owner, purpose string, at time.Duration, expires time.Time) (files.File, []byte) {
	t.Helper()
	id := e.id()
	_, wrapped, err := e.ring.NewDataKey(id)
	if err != nil {
		t.Fatal(err)
	}
	f := files.File{ID: id, Owner: owner, Filename: "f-" + id + ".jsonl", Purpose: purpose, Bytes: int64(e.seq * 10),
		CreatedAt: e.now.Add(at), ExpiresAt: expires}
	if err := e.m.Insert(context.Background(), f, wrapped); err != nil {
		t.Fatalf("Insert: %v", err)
	}
	return f, wrapped
}

func ids(fs []files.File) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.ID
	}
	return out
}

func testInsertGet(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	// Nanoseconds and odd characters survive the round trip.
	f := files.File{ID: e.id(), Owner: "owner-a", Filename: `naïve "name";.jsonl`, Purpose: files.PurposeBatch,
		Bytes: 1 << 40, CreatedAt: e.now.Add(123456789 * time.Nanosecond), ExpiresAt: e.now.Add(time.Hour + 1)}
	_, wrapped, err := e.ring.NewDataKey(f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.m.Insert(ctx, f, wrapped); err != nil {
		t.Fatal(err)
	}
	got, err := e.m.Get(ctx, "owner-a", f.ID)
	if err != nil || !reflect.DeepEqual(got, f) {
		t.Fatalf("Get = %+v, %v; want %+v", got, err, f)
	}
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("CreatedAt in %v, want UTC", got.CreatedAt.Location())
	}
	noExpiry, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	if got, err := e.m.Get(ctx, "owner-a", noExpiry.ID); err != nil || !got.ExpiresAt.IsZero() {
		t.Errorf("Get of a file kept until deleted = %+v, %v", got, err)
	}
	// Get does not judge expiry: that is the service's.
	expired, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, e.now.Add(-time.Hour))
	if _, err := e.m.Get(ctx, "owner-a", expired.ID); err != nil {
		t.Errorf("Get of an expired file: %v", err)
	}
	for _, tt := range []struct{ owner, id string }{
		{"owner-b", f.ID}, {"", f.ID}, {"owner-a", e.id()}, {"owner-a", ""},
	} {
		if _, err := e.m.Get(ctx, tt.owner, tt.id); !errors.Is(err, files.ErrNotFound) {
			t.Errorf("Get(%q, %q) err = %v, want ErrNotFound", tt.owner, tt.id, err)
		}
	}
}

func testInsertDuplicate(t *testing.T, e *metaEnv) {
	f, wrapped := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	dup := f
	dup.Owner, dup.Filename = "owner-b", "other.txt"
	if err := e.m.Insert(context.Background(), dup, wrapped); err == nil {
		t.Fatal("a second Insert of one id succeeded")
	}
	if got, err := e.m.Get(context.Background(), "owner-a", f.ID); err != nil || !reflect.DeepEqual(got, f) {
		t.Errorf("the first file after a duplicate Insert = %+v, %v", got, err)
	}
}

func testDataKey(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	f, wrapped := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	got, err := e.m.DataKey(ctx, f.ID)
	if err != nil || !bytes.Equal(got, wrapped) {
		t.Fatalf("DataKey = %x, %v; want %x", got, err, wrapped)
	}
	// The stored key still unwraps: it was stored whole.
	if _, err := e.ring.Unwrap(f.ID, got); err != nil {
		t.Errorf("stored key does not unwrap: %v", err)
	}
	plain := files.File{ID: e.id(), Owner: "owner-a", Filename: "old.txt", Purpose: files.PurposeUserData, CreatedAt: e.now}
	if err := e.m.Insert(ctx, plain, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := e.m.DataKey(ctx, plain.ID); err != nil || got != nil {
		t.Errorf("DataKey of an unsealed file = %x, %v; want nil, nil", got, err)
	}
	if _, err := e.m.DataKey(ctx, e.id()); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("DataKey of an unknown file: %v, want ErrNotFound", err)
	}
	if err := e.m.Delete(ctx, "owner-a", f.ID, e.now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.DataKey(ctx, f.ID); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("DataKey after Delete: %v, want ErrNotFound", err)
	}
}

func testMetaDelete(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	f, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	other, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	if err := e.m.Delete(ctx, "owner-b", f.ID, e.now); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Delete by another owner: %v, want ErrNotFound", err)
	}
	if err := e.m.Delete(ctx, "owner-a", f.ID, e.now); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx, "owner-a", f.ID, e.now); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := e.m.Get(ctx, "owner-a", f.ID); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if _, err := e.m.Get(ctx, "owner-a", other.ID); err != nil {
		t.Errorf("Delete touched another file: %v", err)
	}
	// An expired file is already gone for its owner: the sweeper's.
	exp, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, e.now.Add(time.Minute))
	if err := e.m.Delete(ctx, "owner-a", exp.ID, e.now.Add(time.Minute)); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Delete at expiry: %v, want ErrNotFound", err)
	}
	if err := e.m.Delete(ctx, "owner-a", e.id(), e.now); !errors.Is(err, files.ErrNotFound) {
		t.Errorf("Delete of an unknown id: %v", err)
	}
}

func list(t *testing.T, e *metaEnv, owner string, q files.ListQuery, now time.Time) ([]string, bool) {
	t.Helper()
	if q.Limit == 0 {
		q.Limit = files.MaxListLimit
	}
	if q.Order == "" {
		q.Order = files.OrderDesc
	}
	fs, more, err := e.m.List(context.Background(), owner, q, now)
	if err != nil {
		t.Fatalf("List(%s, %+v): %v", owner, q, err)
	}
	return ids(fs), more
}

func testListPages(t *testing.T, e *metaEnv) {
	if got, more := list(t, e, "owner-a", files.ListQuery{}, e.now); len(got) != 0 || more {
		t.Fatalf("List of nothing = %v, %v", got, more)
	}
	// Five files, the middle three created at the same instant: the id
	// breaks the tie.
	var made []files.File
	for _, at := range []time.Duration{0, time.Second, time.Second, time.Second, 2 * time.Second} {
		f, _ := e.insert(t, "owner-a", files.PurposeUserData, at, time.Time{})
		made = append(made, f)
	}
	asc := ids(made)
	desc := slices.Clone(asc)
	slices.Reverse(desc)
	fs, more, err := e.m.List(context.Background(), "owner-a", files.ListQuery{Limit: 10, Order: files.OrderAsc}, e.now.Add(time.Hour))
	if err != nil || more || !reflect.DeepEqual(fs, made) {
		t.Fatalf("List asc = %+v, %v, %v; want %+v", fs, more, err, made)
	}
	if got, _ := list(t, e, "owner-a", files.ListQuery{}, e.now); !slices.Equal(got, desc) {
		t.Errorf("List desc = %v, want %v", got, desc)
	}
	for _, order := range []string{files.OrderAsc, files.OrderDesc} {
		want := asc
		if order == files.OrderDesc {
			want = desc
		}
		var got []string
		after := ""
		for page := 0; ; page++ {
			ids, more := list(t, e, "owner-a", files.ListQuery{Limit: 2, Order: order, After: after}, e.now)
			got = append(got, ids...)
			if !more {
				break
			}
			if len(ids) != 2 || page > 5 {
				t.Fatalf("%s page %d: %v", order, page, ids)
			}
			after = ids[len(ids)-1]
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s pages of 2 = %v, want %v", order, got, want)
		}
	}
	if got, more := list(t, e, "owner-a", files.ListQuery{Limit: 5}, e.now); len(got) != 5 || more {
		t.Errorf("List limit 5 of 5 = %d, more %v; want 5, false", len(got), more)
	}
}

func testListFilters(t *testing.T, e *metaEnv) {
	a1, _ := e.insert(t, "owner-a", files.PurposeBatch, 0, time.Time{})
	a2, _ := e.insert(t, "owner-a", files.PurposeUserData, time.Second, e.now.Add(time.Hour))
	a3, _ := e.insert(t, "owner-a", files.PurposeBatch, 2*time.Second, e.now.Add(time.Minute))
	b1, _ := e.insert(t, "owner-b", files.PurposeBatch, 3*time.Second, time.Time{})
	for _, tt := range []struct {
		desc  string
		owner string
		q     files.ListQuery
		now   time.Time
		want  []string
	}{
		{"owner a", "owner-a", files.ListQuery{}, e.now, []string{a3.ID, a2.ID, a1.ID}},
		{"owner b", "owner-b", files.ListQuery{}, e.now, []string{b1.ID}},
		{"unknown owner", "owner-c", files.ListQuery{}, e.now, nil},
		{"purpose", "owner-a", files.ListQuery{Purpose: files.PurposeBatch}, e.now, []string{a3.ID, a1.ID}},
		{"at expiry", "owner-a", files.ListQuery{}, e.now.Add(time.Minute), []string{a2.ID, a1.ID}},
		{"later", "owner-a", files.ListQuery{}, e.now.Add(2 * time.Hour), []string{a1.ID}},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			if got, _ := list(t, e, tt.owner, tt.q, tt.now); !slices.Equal(got, tt.want) {
				t.Errorf("List = %v, want %v", got, tt.want)
			}
		})
	}
}

func testListCursors(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	var made []files.File
	for i := range 4 {
		f, _ := e.insert(t, "owner-a", files.PurposeUserData, time.Duration(i)*time.Second, time.Time{})
		made = append(made, f)
	}
	expiring, _ := e.insert(t, "owner-a", files.PurposeUserData, 10*time.Second, e.now.Add(time.Minute))
	other, _ := e.insert(t, "owner-b", files.PurposeUserData, time.Second, time.Time{})
	// A deleted file still works as a cursor for CursorRetention.
	if err := e.m.Delete(ctx, "owner-a", made[1].ID, e.now); err != nil {
		t.Fatal(err)
	}
	asc := files.ListQuery{Order: files.OrderAsc, After: made[1].ID}
	if got, _ := list(t, e, "owner-a", asc, e.now.Add(time.Hour)); !slices.Equal(got, []string{made[2].ID, made[3].ID}) {
		t.Errorf("after a deleted file = %v", got)
	}
	desc := files.ListQuery{Order: files.OrderDesc, After: made[1].ID}
	if got, _ := list(t, e, "owner-a", desc, e.now.Add(time.Hour)); !slices.Equal(got, []string{made[0].ID}) {
		t.Errorf("desc after a deleted file = %v", got)
	}
	// An expired file not yet swept works too, and is not listed itself.
	q := files.ListQuery{Order: files.OrderDesc, After: expiring.ID}
	if got, _ := list(t, e, "owner-a", q, e.now.Add(time.Hour)); !slices.Equal(got, []string{made[3].ID, made[2].ID, made[0].ID}) {
		t.Errorf("after an expired file = %v", got)
	}
	for _, tt := range []struct {
		desc  string
		after string
		now   time.Time
	}{
		{"another owner's file", other.ID, e.now},
		{"an unknown id", e.id(), e.now},
		{"a tombstone past retention", made[1].ID, e.now.Add(files.CursorRetention)},
	} {
		_, _, err := e.m.List(ctx, "owner-a", files.ListQuery{Limit: 10, Order: files.OrderAsc, After: tt.after}, tt.now)
		if !errors.Is(err, files.ErrNotFound) {
			t.Errorf("after %s: err = %v, want ErrNotFound", tt.desc, err)
		}
	}
	// Just inside retention it still resolves.
	if _, _, err := e.m.List(ctx, "owner-a", files.ListQuery{Limit: 10, Order: files.OrderAsc, After: made[1].ID},
		e.now.Add(files.CursorRetention-time.Nanosecond)); err != nil {
		t.Errorf("tombstone just inside retention: %v", err)
	}
}

func testExists(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	live, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	expired, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, e.now.Add(-time.Hour))
	deleted, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
	if err := e.m.Delete(ctx, "owner-a", deleted.ID, e.now); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id   string
		want bool
	}{{live.ID, true}, {expired.ID, true}, {deleted.ID, false}, {e.id(), false}} {
		if got, err := e.m.Exists(ctx, tt.id); err != nil || got != tt.want {
			t.Errorf("Exists(%s) = %v, %v; want %v", tt.id, got, err, tt.want)
		}
	}
}

func testSweepExpired(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	var expired []string
	for i := range 5 {
		f, _ := e.insert(t, "owner-a", files.PurposeUserData, time.Duration(i), e.now.Add(time.Duration(i)*time.Second))
		expired = append(expired, f.ID)
	}
	later, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, e.now.Add(time.Hour))
	kept, _ := e.insert(t, "owner-b", files.PurposeUserData, 0, time.Time{})
	at := e.now.Add(4 * time.Second) // at the last one's expiry: included
	var swept []string
	for _, want := range []int{2, 2, 1, 0} {
		ids, err := e.m.SweepExpired(ctx, at, 2)
		if err != nil || len(ids) != want {
			t.Fatalf("SweepExpired = %v, %v; want %d ids", ids, err, want)
		}
		swept = append(swept, ids...)
	}
	slices.Sort(swept)
	if !slices.Equal(swept, expired) {
		t.Errorf("swept %v, want %v", swept, expired)
	}
	for _, id := range expired {
		if ok, _ := e.m.Exists(ctx, id); ok {
			t.Errorf("%s still exists", id)
		}
		if _, err := e.m.DataKey(ctx, id); !errors.Is(err, files.ErrNotFound) {
			t.Errorf("%s's data key survived the sweep: %v", id, err)
		}
	}
	for _, f := range []files.File{later, kept} {
		if _, err := e.m.Get(ctx, f.Owner, f.ID); err != nil {
			t.Errorf("a file not expired was swept: %v", err)
		}
	}
	// The swept leave tombstones: still cursors.
	if _, _, err := e.m.List(ctx, "owner-a", files.ListQuery{Limit: 10, Order: files.OrderAsc, After: expired[0]}, at); err != nil {
		t.Errorf("swept file as a cursor: %v", err)
	}
}

func testSweepTombstones(t *testing.T, e *metaEnv) {
	ctx := context.Background()
	var gone []string
	for i := range 3 {
		f, _ := e.insert(t, "owner-a", files.PurposeUserData, 0, time.Time{})
		if err := e.m.Delete(ctx, "owner-a", f.ID, e.now.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, f.ID)
	}
	// Tombstones gone at or before the cut-off go, in batches.
	cut := e.now.Add(time.Hour)
	if n, err := e.m.SweepTombstones(ctx, cut, 1); err != nil || n != 1 {
		t.Fatalf("SweepTombstones limit 1 = %d, %v", n, err)
	}
	if n, err := e.m.SweepTombstones(ctx, cut, 10); err != nil || n != 1 {
		t.Fatalf("SweepTombstones = %d, %v; want the second", n, err)
	}
	if n, err := e.m.SweepTombstones(ctx, cut, 10); err != nil || n != 0 {
		t.Fatalf("SweepTombstones again = %d, %v; want 0", n, err)
	}
	now := e.now.Add(2 * time.Hour)
	for i, id := range gone {
		_, _, err := e.m.List(ctx, "owner-a", files.ListQuery{Limit: 10, Order: files.OrderAsc, After: id}, now)
		if swept := i < 2; swept != errors.Is(err, files.ErrNotFound) {
			t.Errorf("tombstone %d as a cursor after the sweep: err = %v", i, err)
		}
	}
}
