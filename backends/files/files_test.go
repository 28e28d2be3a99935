package files

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blobNames lists the blob directory, part files included.
func blobNames(t *testing.T, s *Store) []string {
	t.Helper()
	entries, err := os.ReadDir(blobDir(s))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func mustCreate(t *testing.T, s *Store, owner string, meta File, content string) File {
	t.Helper()
	f, err := s.Create(context.Background(), owner, meta, strings.NewReader(content), 0)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return f
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := newID()
		if err != nil {
			t.Fatal(err)
		}
		if !wellFormedID(id) || len(id) != len("file-")+24 {
			t.Fatalf("id %q is not file- + 24 base62 characters", id)
		}
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "file-", "file-abc", "file-" + strings.Repeat("a", 23) + "!",
		"file-" + strings.Repeat("a", 25), "../" + strings.Repeat("a", 26), "FILE-" + strings.Repeat("a", 24)} {
		if wellFormedID(bad) {
			t.Errorf("wellFormedID(%q) = true", bad)
		}
	}
}

func TestCreateGetOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	content := []byte("line one\n\x00\xff binary \r\n")
	f, err := s.Create(ctx, "owner-a", File{Filename: "in.jsonl", Purpose: PurposeBatch}, bytes.NewReader(content), 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Bytes != int64(len(content)) || f.Owner != "owner-a" || f.Purpose != PurposeBatch || !f.ExpiresAt.IsZero() {
		t.Fatalf("created %+v", f)
	}
	got, err := s.Get(ctx, "owner-a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got != f {
		t.Fatalf("Get = %+v, want %+v", got, f)
	}
	_, fh, err := s.Open(ctx, "owner-a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(fh)
	fh.Close()
	if err != nil || !bytes.Equal(b, content) {
		t.Fatalf("content = %q, %v; want %q", b, err, content)
	}
	if names := blobNames(t, s); !slices.Equal(names, []string{f.ID}) {
		t.Fatalf("blob dir = %v, want just %s", names, f.ID)
	}
}

func TestCreateRejects(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	tests := []struct {
		name    string
		owner   string
		meta    File
		content string
		max     int64
		want    error
	}{
		{"over maxBytes", "o", File{Filename: "a.txt", Purpose: PurposeUserData}, "12345", 4, ErrTooLarge},
		{"unknown purpose", "o", File{Filename: "a.txt", Purpose: "nope"}, "x", 0, ErrInvalid},
		{"no filename", "o", File{Purpose: PurposeUserData}, "x", 0, ErrInvalid},
		{"bad utf-8 filename", "o", File{Filename: "\xff.txt", Purpose: PurposeUserData}, "x", 0, ErrInvalid},
		{"no owner", "", File{Filename: "a.txt", Purpose: PurposeUserData}, "x", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.Create(ctx, tt.owner, tt.meta, strings.NewReader(tt.content), tt.max)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Create error = %v, want %v", err, tt.want)
			}
			if names := blobNames(t, s); len(names) != 0 {
				t.Fatalf("blob dir after a refused create = %v, want empty", names)
			}
		})
	}
	// Exactly maxBytes is allowed.
	if _, err := s.Create(ctx, "o", File{Filename: "a.txt", Purpose: PurposeUserData}, strings.NewReader("1234"), 4); err != nil {
		t.Fatalf("Create at exactly maxBytes: %v", err)
	}
}

// failingReader returns some bytes, then an error, as a client body cut
// short does.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

func TestCreateReaderErrorKeepsNothing(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	_, err := s.Create(context.Background(), "o", File{Filename: "a.txt", Purpose: PurposeUserData}, &failingReader{n: 100 << 10}, 0)
	var re *readError
	if !errors.As(err, &re) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Create error = %v, want a read error wrapping io.ErrUnexpectedEOF", err)
	}
	if names := blobNames(t, s); len(names) != 0 {
		t.Fatalf("blob dir = %v, want empty", names)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Create(ctx, "o", File{Filename: "a.txt", Purpose: PurposeUserData}, strings.NewReader("x"), 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context = %v, want context.Canceled", err)
	}
}

func TestOwnerIsolationAndDelete(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	f := mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, "secret of a")

	if _, err := s.Get(ctx, "b", f.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get by another owner = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Open(ctx, "b", f.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open by another owner = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "b", f.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Delete by another owner = %v, want ErrNotFound", err)
	}
	if files, _, err := s.List(ctx, "b", ListQuery{}); err != nil || len(files) != 0 {
		t.Errorf("List by another owner = %v, %v; want nothing", files, err)
	}
	if _, err := s.Get(ctx, "a", f.ID); err != nil {
		t.Fatalf("owner's file gone after another owner's delete: %v", err)
	}

	if err := s.Delete(ctx, "a", f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(blobDir(s), f.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("blob after delete: stat = %v, want not exist", err)
	}
	if _, err := s.Get(ctx, "a", f.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after delete = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a", f.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

func TestOpenHandleSurvivesDelete(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	f := mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, "still here")
	_, fh, err := s.Open(ctx, "a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := s.Delete(ctx, "a", f.ID); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(fh); err != nil || string(b) != "still here" {
		t.Fatalf("read after delete = %q, %v", b, err)
	}
}

func TestList(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	var ids []string // oldest first
	for i := range 5 {
		purpose := PurposeUserData
		if i%2 == 0 {
			purpose = PurposeBatch
		}
		ids = append(ids, mustCreate(t, s, "a", File{Filename: "f.jsonl", Purpose: purpose}, "x").ID)
		clk.Advance(time.Second)
	}
	// Two files created in the same nanosecond are still ordered (by id).
	same1 := mustCreate(t, s, "a", File{Filename: "f.jsonl", Purpose: PurposeVision}, "x").ID
	same2 := mustCreate(t, s, "a", File{Filename: "f.jsonl", Purpose: PurposeVision}, "x").ID
	tied := []string{same1, same2}
	slices.Sort(tied)
	all := append(slices.Clone(ids), tied...)
	rev := slices.Clone(all)
	slices.Reverse(rev)
	mustCreate(t, s, "b", File{Filename: "other.txt", Purpose: PurposeUserData}, "x")

	idsOf := func(files []File) []string {
		var out []string
		for _, f := range files {
			out = append(out, f.ID)
		}
		return out
	}
	tests := []struct {
		name     string
		q        ListQuery
		want     []string
		wantMore bool
	}{
		{"default newest first", ListQuery{}, rev, false},
		{"asc", ListQuery{Order: OrderAsc}, all, false},
		{"limit", ListQuery{Limit: 2}, rev[:2], true},
		{"after desc", ListQuery{Limit: 2, After: rev[1]}, rev[2:4], true},
		{"after asc", ListQuery{Order: OrderAsc, Limit: 3, After: all[4]}, all[5:], false},
		{"after inside a tie", ListQuery{Order: OrderAsc, After: tied[0]}, tied[1:], false},
		{"last page exact", ListQuery{Limit: 3, After: rev[3]}, rev[4:], false},
		{"purpose filter", ListQuery{Purpose: PurposeBatch, Order: OrderAsc}, []string{ids[0], ids[2], ids[4]}, false},
		{"purpose filter with cursor", ListQuery{Purpose: PurposeBatch, Limit: 1, After: ids[4]}, []string{ids[2]}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files, more, err := s.List(ctx, "a", tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := idsOf(files); !slices.Equal(got, tt.want) || more != tt.wantMore {
				t.Fatalf("List(%+v) = %v more=%v, want %v more=%v", tt.q, got, more, tt.want, tt.wantMore)
			}
		})
	}

	// Walking every page with the cursor returns each file once, in order.
	var walked []string
	q := ListQuery{Limit: 3}
	for {
		files, more, err := s.List(ctx, "a", q)
		if err != nil {
			t.Fatal(err)
		}
		walked = append(walked, idsOf(files)...)
		if !more {
			break
		}
		q.After = files[len(files)-1].ID
	}
	if !slices.Equal(walked, rev) {
		t.Fatalf("paged walk = %v, want %v", walked, rev)
	}

	for _, bad := range []struct {
		q     ListQuery
		param string
	}{
		{ListQuery{Limit: -1}, "limit"},
		{ListQuery{Limit: MaxListLimit + 1}, "limit"},
		{ListQuery{Order: "sideways"}, "order"},
		{ListQuery{Purpose: "nope"}, "purpose"},
		{ListQuery{After: "file-" + strings.Repeat("z", 24)}, "after"},
	} {
		_, _, err := s.List(ctx, "a", bad.q)
		var inv *invalidError
		if !errors.As(err, &inv) || inv.param != bad.param {
			t.Errorf("List(%+v) = %v, want an invalid %s", bad.q, err, bad.param)
		}
	}
}

func TestExpiryAndSweep(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	start := clk.Now()
	expiring := mustCreate(t, s, "a", File{Filename: "e.txt", Purpose: PurposeUserData, ExpiresAt: start.Add(time.Hour)}, "e")
	kept := mustCreate(t, s, "a", File{Filename: "k.txt", Purpose: PurposeUserData}, "k")
	output := mustCreate(t, s, "a", File{Filename: "out.jsonl", Purpose: PurposeBatchOutput}, "o")
	if want := start.Add(BatchOutputRetention); !output.ExpiresAt.Equal(want) {
		t.Fatalf("batch_output expires_at = %v, want %v (30 days)", output.ExpiresAt, want)
	}

	// Nothing is due yet.
	if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 0 {
		t.Fatalf("early Sweep = %d, %v; want 0", n, err)
	}

	clk.Advance(time.Hour) // expires_at is exclusive: gone at that instant
	if _, err := s.Get(ctx, "a", expiring.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an expired file before the sweep = %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "a", expiring.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete of an expired file = %v, want ErrNotFound", err)
	}
	if files, _, _ := s.List(ctx, "a", ListQuery{}); len(files) != 2 {
		t.Fatalf("List after expiry has %d files, want 2", len(files))
	}
	if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if names := blobNames(t, s); slices.Contains(names, expiring.ID) || len(names) != 2 {
		t.Fatalf("blob dir after sweep = %v, want the two live files", names)
	}
	var rows int
	if err := sqliteDB(s).QueryRow(`SELECT count(*) FROM files WHERE id = ?`, expiring.ID).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("expired row still in the database: %d, %v", rows, err)
	}

	clk.Advance(BatchOutputRetention)
	if n, err := s.Sweep(ctx, clk.Now()); err != nil || n != 1 {
		t.Fatalf("Sweep after 30 days = %d, %v; want 1 (the batch output)", n, err)
	}
	if _, err := s.Get(ctx, "a", kept.ID); err != nil {
		t.Fatalf("file without expiry swept: %v", err)
	}
}

func TestSweepManyInBatches(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	n := sweepBatch + 7
	// Rows and blobs written directly: Create's fsyncs would make this slow
	// and are not what is under test.
	tx, err := sqliteDB(s).Begin()
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		id, err := newID()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(blobPath(s, id), []byte("e"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(`INSERT INTO files (id, owner, filename, purpose, bytes, created_at, expires_at)
			VALUES (?, 'a', 'e.txt', 'user_data', 1, ?, ?)`, id, clk.Now().UnixNano(), clk.Now().Add(time.Hour).UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	kept := mustCreate(t, s, "a", File{Filename: "k.txt", Purpose: PurposeUserData}, "k")
	got, err := s.Sweep(ctx, clk.Now().Add(2*time.Hour))
	if err != nil || got != n {
		t.Fatalf("Sweep = %d, %v; want %d", got, err, n)
	}
	if names := blobNames(t, s); !slices.Equal(names, []string{kept.ID}) {
		t.Fatalf("%d blobs left after sweep, want only the unexpiring one", len(names))
	}
}

func TestRunSweeps(t *testing.T) {
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now, SweepInterval: 10 * time.Millisecond})
	f := mustCreate(t, s, "a", File{Filename: "e.txt", Purpose: PurposeUserData, ExpiresAt: clk.Now().Add(time.Hour)}, "e")
	clk.Advance(2 * time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(blobDir(s), f.ID)); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not sweep the expired file")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
}

func TestOpenRemovesLeftovers(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	live := mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, "live")
	s.Close()

	orphan, _ := newID() // a blob renamed into place whose row never made it
	part, _ := newID()   // an upload interrupted mid-stream
	foreign := "README"  // not ours: left alone
	for _, name := range []string{orphan, part + partSuffix, foreign} {
		if err := os.WriteFile(filepath.Join(dir, "files", name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s = openStore(t, dir, Options{})
	names := blobNames(t, s)
	slices.Sort(names)
	want := []string{live.ID, foreign}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("blob dir after reopen = %v, want %v", names, want)
	}
	if _, err := s.Get(context.Background(), "a", live.ID); err != nil {
		t.Fatalf("live file lost across reopen: %v", err)
	}
	if st, err := os.Stat(filepath.Join(dir, dbFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("files.db mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
}

// TestConcurrentCreates runs uploads, listings and deletes at once: the
// busy timeout serializes the metadata writes, and every file comes out
// whole.
func TestConcurrentCreates(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			content := strings.Repeat(string(rune('a'+i%26)), 10<<10+i)
			f, err := s.Create(ctx, "a", File{Filename: "c.txt", Purpose: PurposeUserData}, strings.NewReader(content), 0)
			if err != nil {
				errs <- err
				return
			}
			_, fh, err := s.Open(ctx, "a", f.ID)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(fh)
			fh.Close()
			if err != nil || string(b) != content {
				errs <- errors.New("content mismatch for " + f.ID)
			}
			if i%2 == 0 {
				if err := s.Delete(ctx, "a", f.ID); err != nil {
					errs <- err
				}
			}
		})
		wg.Go(func() {
			if _, _, err := s.List(ctx, "a", ListQuery{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	files, _, err := s.List(ctx, "a", ListQuery{})
	if err != nil || len(files) != n/2 {
		t.Fatalf("List = %d files, %v; want %d", len(files), err, n/2)
	}
	if names := blobNames(t, s); len(names) != n/2 {
		t.Fatalf("%d blobs on disk, want %d", len(names), n/2)
	}
}

// sqliteDB, blobDir and blobPath reach under the service into the SQLite
// and disk stores Open assembles, for tests of those implementations.
func sqliteDB(s *Store) *sql.DB { return s.meta.(*SQLiteMetadata).db }

func blobDir(s *Store) string { return s.blobs.(*DiskBlobs).dir }

func blobPath(s *Store, id string) string { return filepath.Join(blobDir(s), id) }
