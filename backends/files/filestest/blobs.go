// Package filestest is the conformance suite of the files service's stores:
// RunBlobs for a files.Blobs implementation, RunMetadata for a
// files.Metadata one. Every implementation passes both before the service
// runs on it.
//
//	func TestBlobsConformance(t *testing.T) {
//		filestest.RunBlobs(t, func(t *testing.T) files.Blobs { return openEmptyBucket(t) })
//	}
package filestest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/backends/files"
)

// RunBlobs runs the blob store suite; open returns a new, empty store,
// released by the test's cleanup.
func RunBlobs(t *testing.T, open func(t *testing.T) files.Blobs) {
	tests := []struct {
		name string
		fn   func(*testing.T, files.Blobs)
	}{
		{"PutOpenRoundTrip", testPutOpen},
		{"PutEmpty", testPutEmpty},
		{"PutLimit", testPutLimit},
		{"PutReaderErrorLeavesNothing", testPutReaderError},
		{"PutCanceledLeavesNothing", testPutCanceled},
		{"PutRejectsPathKeys", testPutBadKeys},
		{"OpenMissing", testOpenMissing},
		{"OpenRange", testOpenRange},
		{"DeleteIdempotent", testDelete},
		{"ListByPrefix", testList},
		{"ConcurrentPuts", testConcurrentPuts},
		{"PutStreamsWithoutBuffering", testPutStreams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// pattern is deterministic content of n bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func put(t *testing.T, b files.Blobs, key string, content []byte) {
	t.Helper()
	n, err := b.Put(context.Background(), key, bytes.NewReader(content), 0)
	if err != nil || n != int64(len(content)) {
		t.Fatalf("Put(%s) = %d, %v; want %d", key, n, err, len(content))
	}
}

func read(t *testing.T, b files.Blobs, key string) ([]byte, int64) {
	t.Helper()
	rc, size, err := b.Open(context.Background(), key)
	if err != nil {
		t.Fatalf("Open(%s): %v", key, err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return got, size
}

func keys(t *testing.T, b files.Blobs, prefix string) []string {
	t.Helper()
	var out []string
	for info, err := range b.List(context.Background(), prefix) {
		if err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		out = append(out, info.Key)
	}
	slices.Sort(out)
	return out
}

func checkAbsent(t *testing.T, b files.Blobs, key string) {
	t.Helper()
	if _, _, err := b.Open(context.Background(), key); !errors.Is(err, files.ErrBlobNotFound) {
		t.Errorf("Open(%s) err = %v, want ErrBlobNotFound", key, err)
	}
	if slices.Contains(keys(t, b, ""), key) {
		t.Errorf("List shows %s", key)
	}
}

func testPutOpen(t *testing.T, b files.Blobs) {
	for _, size := range []int{1, 1000, 64<<10 + 3, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("file-round-%d", size)
			content := pattern(size)
			put(t, b, key, content)
			got, n := read(t, b, key)
			if n != int64(size) || !bytes.Equal(got, content) {
				t.Fatalf("Open = %d bytes (size %d), want the %d put", len(got), n, size)
			}
		})
	}
}

func testPutEmpty(t *testing.T, b files.Blobs) {
	put(t, b, "file-empty", nil)
	if got, n := read(t, b, "file-empty"); n != 0 || len(got) != 0 {
		t.Fatalf("empty blob: %d bytes, size %d", len(got), n)
	}
	if !slices.Contains(keys(t, b, ""), "file-empty") {
		t.Error("empty blob not listed")
	}
}

func testPutLimit(t *testing.T, b files.Blobs) {
	ctx := context.Background()
	const limit = 100_000
	content := pattern(limit + 1)
	if n, err := b.Put(ctx, "file-exact", bytes.NewReader(content[:limit]), limit); err != nil || n != limit {
		t.Fatalf("Put of exactly the limit = %d, %v", n, err)
	}
	n, err := b.Put(ctx, "file-over", bytes.NewReader(content), limit)
	if !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("Put over the limit = %d, %v; want ErrTooLarge", n, err)
	}
	checkAbsent(t, b, "file-over")
	// Far over: the reader is not drained to the end to find out.
	big := &countingReader{r: bytes.NewReader(pattern(10 * limit))}
	if _, err := b.Put(ctx, "file-far-over", big, limit); !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("Put far over the limit: %v; want ErrTooLarge", err)
	}
	if big.n > 2*limit+1<<20 {
		t.Errorf("Put read %d bytes of a source over a %d-byte limit", big.n, limit)
	}
	checkAbsent(t, b, "file-far-over")
	if got, _ := read(t, b, "file-exact"); !bytes.Equal(got, content[:limit]) {
		t.Error("the blob at the limit changed")
	}
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// failingReader yields n bytes, then fails.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

func testPutReaderError(t *testing.T, b files.Blobs) {
	boom := errors.New("client went away")
	_, err := b.Put(context.Background(), "file-broken", &failingReader{n: 200_000, err: boom}, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("Put from a failing reader: err = %v, want it to wrap the reader's", err)
	}
	checkAbsent(t, b, "file-broken")
}

// cancelingReader yields some bytes, then cancels the context and keeps
// yielding: the store must notice ctx and stop.
type cancelingReader struct {
	left   int
	cancel context.CancelFunc
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.cancel()
	}
	c.left -= len(p)
	clear(p)
	return len(p), nil
}

func testPutCanceled(t *testing.T, b files.Blobs) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := b.Put(ctx, "file-canceled", &cancelingReader{left: 100_000, cancel: cancel}, 0)
	if err == nil {
		t.Fatal("Put whose context ended succeeded")
	}
	checkAbsent(t, b, "file-canceled")
}

func testPutBadKeys(t *testing.T, b files.Blobs) {
	for _, key := range []string{"", "../escape", "a/b", `a\b`, ".hidden"} {
		if _, err := b.Put(context.Background(), key, bytes.NewReader([]byte("x")), 0); err == nil {
			t.Errorf("Put(%q) succeeded", key)
		}
	}
	if got := keys(t, b, ""); len(got) != 0 {
		t.Errorf("List after rejected Puts = %v", got)
	}
}

func testOpenMissing(t *testing.T, b files.Blobs) {
	ctx := context.Background()
	put(t, b, "file-present", []byte("x"))
	for _, key := range []string{"file-absent", "file-pres", "file-present-2"} {
		if _, _, err := b.Open(ctx, key); !errors.Is(err, files.ErrBlobNotFound) {
			t.Errorf("Open(%s) err = %v, want ErrBlobNotFound", key, err)
		}
		if _, err := b.OpenRange(ctx, key, 0, 1); !errors.Is(err, files.ErrBlobNotFound) {
			t.Errorf("OpenRange(%s) err = %v, want ErrBlobNotFound", key, err)
		}
	}
}

func testOpenRange(t *testing.T, b files.Blobs) {
	const size = 300_000
	content := pattern(size)
	put(t, b, "file-ranged", content)
	tests := []struct{ off, n int64 }{
		{0, size}, {0, 1}, {1, 10}, {65_536, 65_552}, {size - 5, 5}, {size - 5, 100}, {size, 0}, {size, 10}, {123, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d+%d", tt.off, tt.n), func(t *testing.T) {
			rc, err := b.OpenRange(context.Background(), "file-ranged", tt.off, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			want := content[tt.off:min(tt.off+tt.n, size)]
			if !bytes.Equal(got, want) {
				t.Errorf("got %d bytes, want %d from %d", len(got), len(want), tt.off)
			}
		})
	}
}

func testDelete(t *testing.T, b files.Blobs) {
	ctx := context.Background()
	put(t, b, "file-doomed", []byte("content"))
	put(t, b, "file-kept", []byte("content"))
	for i := range 2 {
		if err := b.Delete(ctx, "file-doomed"); err != nil {
			t.Fatalf("Delete %d: %v", i, err)
		}
	}
	if err := b.Delete(ctx, "file-never"); err != nil {
		t.Errorf("Delete of a blob that never existed: %v", err)
	}
	checkAbsent(t, b, "file-doomed")
	if got, _ := read(t, b, "file-kept"); string(got) != "content" {
		t.Error("Delete touched another blob")
	}
}

func testList(t *testing.T, b files.Blobs) {
	ctx := context.Background()
	if got := keys(t, b, ""); len(got) != 0 {
		t.Fatalf("List of an empty store = %v", got)
	}
	sizes := map[string]int{"file-a1": 1, "file-a2": 20, "file-b1": 300, "other": 4}
	for k, n := range sizes {
		put(t, b, k, pattern(n))
	}
	for _, tt := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"file-a1", "file-a2", "file-b1", "other"}},
		{"file-", []string{"file-a1", "file-a2", "file-b1"}},
		{"file-a", []string{"file-a1", "file-a2"}},
		{"file-a2", []string{"file-a2"}},
		{"nothing", nil},
	} {
		if got := keys(t, b, tt.prefix); !slices.Equal(got, tt.want) {
			t.Errorf("List(%q) = %v, want %v", tt.prefix, got, tt.want)
		}
	}
	for info, err := range b.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		if info.Size != int64(sizes[info.Key]) || info.Modified.IsZero() {
			t.Errorf("List: %+v, want size %d and a modification time", info, sizes[info.Key])
		}
	}
	// Stopping early is allowed.
	for range b.List(ctx, "") {
		break
	}
	if err := b.Delete(ctx, "file-a1"); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, b, "file-a"); !slices.Equal(got, []string{"file-a2"}) {
		t.Errorf("List after Delete = %v", got)
	}
}

func testConcurrentPuts(t *testing.T, b files.Blobs) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			_, errs[i] = b.Put(context.Background(), fmt.Sprintf("file-c%02d", i), bytes.NewReader(pattern(10_000+i)), 0)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
		if got, _ := read(t, b, fmt.Sprintf("file-c%02d", i)); !bytes.Equal(got, pattern(10_000+i)) {
			t.Errorf("blob %d: wrong content", i)
		}
	}
	if got := keys(t, b, "file-c"); len(got) != n {
		t.Errorf("List = %d blobs, want %d", len(got), n)
	}
}

// streamReader yields n bytes of a repeating 64 KiB block without
// allocating, hashing them.
type streamReader struct {
	block []byte
	left  int64
	off   int
	sum   io.Writer
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(int64(len(p)), r.left)], r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	r.left -= int64(n)
	r.sum.Write(p[:n])
	return n, nil
}

// testPutStreams puts 64 MiB generated on the fly and checks that the
// process allocated far less meanwhile: TotalAlloc counts every byte
// allocated during the Put, collected or not, so a store that buffers the
// content cannot pass however the GC runs. Reading it back is checked the
// same way.
func testPutStreams(t *testing.T, b files.Blobs) {
	const size = 64 << 20
	const budget = 16 << 20
	sum := sha256.New()
	src := &streamReader{block: pattern(64 << 10), left: size, sum: sum}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, err := b.Put(context.Background(), "file-big", src, size)
	runtime.ReadMemStats(&after)
	if err != nil || n != size {
		t.Fatalf("Put = %d, %v", n, err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > budget {
		t.Fatalf("Put of %d bytes allocated %d; want under %d", size, allocated, budget)
	}

	rc, got, err := b.Open(context.Background(), "file-big")
	if err != nil || got != size {
		t.Fatalf("Open = size %d, %v", got, err)
	}
	defer rc.Close()
	back := sha256.New()
	buf := make([]byte, 32<<10)
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = io.CopyBuffer(back, rc, buf)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > budget {
		t.Errorf("reading %d bytes allocated %d; want under %d", size, allocated, budget)
	}
	if !bytes.Equal(back.Sum(nil), sum.Sum(nil)) {
		t.Fatal("content read back differs")
	}
}
