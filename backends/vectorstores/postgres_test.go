package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openPG opens a PostgresStore on dsn named replica, closed when t ends.
func openPG(t *testing.T, dsn, replica string, opts PostgresOptions) *PostgresStore {
	t.Helper()
	opts.Replica = replica
	s, err := OpenPostgresStore(t.Context(), dsn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func pgKey(t *testing.T, j Job) []byte {
	t.Helper()
	kek, _ := envelope.NewKey()
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := ring.NewDataKey(chunkKeyID(j.StoreID, j.FileID, j.Gen))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func pgChunks(tag string, n int) []Chunk {
	out := make([]Chunk, n)
	for i := range out {
		out[i] = Chunk{Seq: int64(i), Sealed: []byte(fmt.Sprintf("%s-%d", tag, i)), Vector: encodeVector([]float32{1, float32(i)})}
	}
	return out
}

func okCheck(int64, int64) error { return nil }

// TestPostgresClaims: indexing work is claimed by one replica at a time. A
// file another replica holds is neither handed out nor written to; when
// the holder stops renewing (it died) another takes it over after the
// lease, and the old holder's late writes are refused.
func TestPostgresClaims(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	a := openPG(t, dsn, "replica-a", PostgresOptions{})
	b := openPG(t, dsn, "replica-b", PostgresOptions{})
	now := time.Now()
	st := StoreRow{ID: "vs_1", Owner: "alice", Metadata: []byte(`{}`), CreatedAt: now, LastActiveAt: now}
	f1 := newFile("vs_1", "alice", "file-1", "a.txt", 800, 400, nil, now)
	f2 := newFile("vs_1", "alice", "file-2", "b.txt", 800, 400, nil, now.Add(time.Second))
	if err := a.CreateStore(ctx, st, []FileRow{f1, f2}); err != nil {
		t.Fatal(err)
	}
	jobs, err := a.Pending(ctx, 1)
	if err != nil || len(jobs) != 1 || jobs[0].FileID != "file-1" {
		t.Fatalf("a's pending: %+v, %v", jobs, err)
	}
	j1 := jobs[0]
	// b is handed only the file a did not claim.
	jobs, err = b.Pending(ctx, 10)
	if err != nil || len(jobs) != 1 || jobs[0].FileID != "file-2" {
		t.Fatalf("b's pending while a holds file-1: %+v, %v", jobs, err)
	}
	if err := b.ResetChunks(ctx, j1, pgKey(t, j1)); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("b starts a's file: %v, want ErrLeaseLost", err)
	}
	if err := a.ResetChunks(ctx, j1, pgKey(t, j1)); err != nil {
		t.Fatal(err)
	}
	if err := a.InsertChunks(ctx, j1, pgChunks("a", 3), okCheck); err != nil {
		t.Fatal(err)
	}
	if err := b.InsertChunks(ctx, j1, pgChunks("b", 1), okCheck); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("b writes to a's file: %v, want ErrLeaseLost", err)
	}

	// The renewer extends a's lease while it indexes.
	var before, after time.Time
	lease := func() time.Time {
		var l time.Time
		if err := a.pool.QueryRow(ctx, `SELECT lease_until FROM vector_store_files WHERE file_id = 'file-1'`).Scan(&l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	if _, err := a.pool.Exec(ctx, `UPDATE vector_store_files SET lease_until = now() + interval '1 second' WHERE file_id = 'file-1'`); err != nil {
		t.Fatal(err)
	}
	before = lease()
	if err := a.renew(ctx); err != nil {
		t.Fatal(err)
	}
	if after = lease(); !after.After(before.Add(30 * time.Second)) {
		t.Errorf("lease after renewal %v, before %v", after, before)
	}

	// a dies: its lease runs out (set in the past rather than waited for).
	if _, err := a.pool.Exec(ctx, `UPDATE vector_store_files SET lease_until = now() - interval '1 second' WHERE file_id = 'file-1'`); err != nil {
		t.Fatal(err)
	}
	jobs, err = b.Pending(ctx, 10)
	if err != nil || len(jobs) != 2 || jobs[0] != j1 {
		t.Fatalf("b's pending after a's lease ran out: %+v, %v", jobs, err)
	}
	if err := b.ResetChunks(ctx, j1, pgKey(t, j1)); err != nil {
		t.Fatalf("b takes over: %v", err)
	}
	// a's late writes are refused, its late outcome not recorded.
	if err := a.InsertChunks(ctx, j1, pgChunks("a", 1), okCheck); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("a writes after the takeover: %v, want ErrLeaseLost", err)
	}
	if err := a.Finish(ctx, j1, StatusFailed, codeServer, "x", 0); err != nil {
		t.Fatal(err)
	}
	if err := b.InsertChunks(ctx, j1, pgChunks("b", 2), okCheck); err != nil {
		t.Fatal(err)
	}
	if err := b.Finish(ctx, j1, StatusCompleted, "", "", 7); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := a.Scan(ctx, "vs_1", func(c ScannedChunk) error { got = append(got, string(c.Sealed)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0][:2] != "b-" || got[1][:2] != "b-" {
		t.Errorf("chunks after the takeover: %q, want b's 2 only", got)
	}

	// Closing a replica gives its claims back at once.
	c := openPG(t, dsn, "replica-c", PostgresOptions{})
	if jobs, err := c.Pending(ctx, 10); err != nil || len(jobs) != 0 {
		t.Fatalf("c's pending while b holds file-2: %+v, %v", jobs, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if jobs, err := c.Pending(ctx, 10); err != nil || len(jobs) != 1 || jobs[0].FileID != "file-2" {
		t.Errorf("c's pending after b closed: %+v, %v", jobs, err)
	}
}

// TestPostgresScanCache: a store's chunks are read from the replica's
// cache while its version is unchanged, and again from the database after
// any change to them, on whichever replica it happened.
func TestPostgresScanCache(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	a := openPG(t, dsn, "a", PostgresOptions{})
	b := openPG(t, dsn, "b", PostgresOptions{})
	now := time.Now()
	f := newFile("vs_1", "alice", "file-1", "a.txt", 800, 400, nil, now)
	if err := a.CreateStore(ctx, StoreRow{ID: "vs_1", Owner: "alice", Metadata: []byte(`{}`), CreatedAt: now, LastActiveAt: now}, []FileRow{f}); err != nil {
		t.Fatal(err)
	}
	j := Job{StoreID: "vs_1", FileID: "file-1", Owner: "alice", Filename: "a.txt", Gen: f.Gen}
	if err := a.ResetChunks(ctx, j, pgKey(t, j)); err != nil {
		t.Fatal(err)
	}
	if err := a.InsertChunks(ctx, j, pgChunks("x", 2), okCheck); err != nil {
		t.Fatal(err)
	}
	if err := a.Finish(ctx, j, StatusCompleted, "", "", 1); err != nil {
		t.Fatal(err)
	}
	scan := func(s *PostgresStore) (n int, attrs string) {
		t.Helper()
		if err := s.Scan(ctx, "vs_1", func(c ScannedChunk) error { n++; attrs = string(c.Attributes); return nil }); err != nil {
			t.Fatal(err)
		}
		return n, attrs
	}
	if n, _ := scan(b); n != 2 {
		t.Fatalf("first scan: %d chunks", n)
	}
	// A row changed behind the store's back (no version change) is not
	// seen: the second scan came from the cache.
	if _, err := b.pool.Exec(ctx, `DELETE FROM vector_store_chunks WHERE seq = 0`); err != nil {
		t.Fatal(err)
	}
	if n, _ := scan(b); n != 2 {
		t.Errorf("cached scan: %d chunks, want the 2 cached", n)
	}
	// A change through another replica moves the version: read afresh.
	if _, err := a.SetAttributes(ctx, "alice", "vs_1", "file-1", now, []byte(`{"k":1}`)); err != nil {
		t.Fatal(err)
	}
	if n, attrs := scan(b); n != 1 || attrs != `{"k":1}` {
		t.Errorf("scan after a change on the other replica: %d chunks, attributes %s", n, attrs)
	}
}

// TestVecCacheBounds: the cache holds at most max bytes over all stores,
// evicting the least recently used, and never a store larger than max.
func TestVecCacheBounds(t *testing.T) {
	c := newVecCache(3 * (chunkOverhead + 10))
	fill := func(store string, version int64, n int) {
		f := c.filler(store, version)
		for range n {
			f.add(ScannedChunk{Sealed: make([]byte, 10)})
		}
		f.done()
	}
	fill("big", 1, 4)
	if _, ok := c.get("big", 1); ok {
		t.Error("a store larger than the cache was cached")
	}
	fill("s1", 1, 1)
	fill("s2", 1, 1)
	fill("s3", 1, 1)
	c.get("s1", 1) // s2 is now the least recently used
	fill("s4", 1, 1)
	if _, ok := c.get("s2", 1); ok {
		t.Error("the least recently used store was kept")
	}
	for _, s := range []string{"s1", "s3", "s4"} {
		if _, ok := c.get(s, 1); !ok {
			t.Errorf("%s evicted", s)
		}
	}
	if _, ok := c.get("s1", 2); ok {
		t.Error("an entry served for another version")
	}
	if c.used > c.max {
		t.Errorf("used %d > max %d", c.used, c.max)
	}
}

// TestPostgresSweepOneReplica: while another replica holds the sweep lock,
// a sweep of expired stores or orphaned chunks does nothing; once it is
// free, they go.
func TestPostgresSweepOneReplica(t *testing.T) {
	ctx := t.Context()
	dsn := pgtest.DSN(t)
	s := openPG(t, dsn, "a", PostgresOptions{})
	now := time.Now()
	st := StoreRow{ID: "vs_1", Owner: "alice", Metadata: []byte(`{}`), CreatedAt: now, LastActiveAt: now,
		ExpiresDays: 1, ExpiresAt: now.Add(24 * time.Hour)}
	if err := s.CreateStore(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO vector_store_chunks (store_id, file_id, gen, seq, sealed, vector)
		VALUES ('vs_gone', 'file-1', 1, 0, 'x', 'y')`); err != nil {
		t.Fatal(err)
	}
	other, err := s.pool.Acquire(ctx) // the other replica's sweeping connection
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, sweepLock); err != nil {
		t.Fatal(err)
	}
	later := now.Add(48 * time.Hour)
	if n, err := s.SweepStores(ctx, later); err != nil || n != 0 {
		t.Errorf("store sweep while another replica sweeps: %d, %v", n, err)
	}
	if n, err := s.SweepChunks(ctx); err != nil || n != 0 {
		t.Errorf("chunk sweep while another replica sweeps: %d, %v", n, err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, sweepLock); err != nil {
		t.Fatal(err)
	}
	if n, err := s.SweepStores(ctx, later); err != nil || n != 1 {
		t.Errorf("store sweep: %d, %v; want 1", n, err)
	}
	if n, err := s.SweepChunks(ctx); err != nil || n != 1 {
		t.Errorf("chunk sweep: %d, %v; want 1", n, err)
	}
}

// startCounter wraps a PostgresStore, recording which replica started
// indexing which file generation (a successful ResetChunks).
type startCounter struct {
	*PostgresStore
	replica string
	mu      *sync.Mutex
	starts  map[FileGen][]string
}

func (c startCounter) ResetChunks(ctx context.Context, j Job, key []byte) error {
	err := c.PostgresStore.ResetChunks(ctx, j, key)
	if err == nil {
		c.mu.Lock()
		fg := FileGen{j.FileID, j.Gen}
		c.starts[fg] = append(c.starts[fg], c.replica)
		c.mu.Unlock()
	}
	return err
}

// TestPostgresTwoIndexers: two Services (replicas) on one database, both
// running their indexers, one file at a time each: every attached file is
// indexed by exactly one of them, and the store is searched through
// either.
func TestPostgresTwoIndexers(t *testing.T) {
	dsn := pgtest.DSN(t)
	kek, _ := envelope.NewKey()
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	starts := map[FileGen][]string{}
	replica := func(name string, files Files) func(*Options) {
		return func(o *Options) {
			o.Store = startCounter{openPG(t, dsn, name, PostgresOptions{}), name, &mu, starts}
			o.Keys = ring
			o.Concurrency = 1
			// The tick is when an idle replica looks for work attached
			// through the other.
			o.SweepInterval = 10 * time.Millisecond
			if files != nil {
				o.Files = files
			}
		}
	}
	a := newEnv(t, replica("a", nil))
	b := newEnv(t, replica("b", a.files)) // one files store, as a fleet shares it
	var ids []string
	for i := range 6 {
		ids = append(ids, a.upload("alice", fmt.Sprintf("doc%d.txt", i), fmt.Sprintf("document number %d says word%d", i, i)))
	}
	st := a.createStore("alice", `{"file_ids":["`+strings.Join(ids, `","`)+`"]}`)
	if n := st.Get("file_counts.completed").Int(); n != 6 {
		t.Fatalf("completed files: %d: %s", n, st.Raw)
	}
	mu.Lock()
	if len(starts) != 6 {
		t.Errorf("indexing started for %d generations, want 6: %v", len(starts), starts)
	}
	t.Logf("indexed by: %v", starts)
	for fg, by := range starts {
		if len(by) != 1 {
			t.Errorf("file %s indexed by %v, want one replica once", fg.FileID, by)
		}
	}
	mu.Unlock()
	for i := range 6 {
		page := b.ok("alice", http.MethodPost, "/v1/vector_stores/"+st.Get("id").Str+"/search",
			fmt.Sprintf(`{"query":"word%d"}`, i), "VectorStoreSearchResultsPage")
		if got := page.Get("data.0.file_id").Str; got != ids[i] {
			t.Errorf("search for word%d through b: first result %s, want %s", i, got, ids[i])
		}
	}
}
