package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"runtime"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/switchyard-ai/switchyard/internal/objstore"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
)

func TestMain(m *testing.M) { s3test.Main(m) }

const part = 5 << 20 // S3's smallest part, to keep multipart tests small

// newStore returns a Store on a fresh bucket of the test gateway, built by
// New from a Config as the gateway's will be, and the raw client.
func newStore(t *testing.T, partSize int64) (*objstore.Store, *s3.Client) {
	t.Helper()
	c, bucket := s3test.Bucket(t)
	s, err := objstore.New(context.Background(), objstore.Config{
		Endpoint: s3test.Endpoint(t), Bucket: bucket, Region: s3test.Region, PathStyle: true,
		AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, PartSize: partSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// pattern is a reader of n deterministic bytes that holds none of them:
// byte i is i%251, so a part stored out of order or twice changes the
// content.
type pattern struct{ off, n int64 }

func (p *pattern) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

func patternBytes(n int64) []byte {
	b, _ := io.ReadAll(&pattern{n: n})
	return b
}

// nothingLeft fails t if the bucket holds any object or unfinished upload.
func nothingLeft(t *testing.T, s *objstore.Store, c *s3.Client) {
	t.Helper()
	keys, err := s.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Errorf("objects left: %v", keys)
	}
	ups, err := c.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket())})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left unfinished", len(ups.Uploads))
	}
}

func readAll(t *testing.T, s *objstore.Store, key string) ([]byte, int64) {
	t.Helper()
	rc, size, err := s.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b, size
}

func TestPutOpenRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, part)
	for _, tc := range []struct {
		name  string
		size  int64
		limit int64
	}{
		{"empty", 0, 0},
		{"small", 1000, 0},
		{"exactly the limit", 1000, 1000},
		{"one part exactly", part, 0},
		{"two parts exactly", 2 * part, 2 * part},
		{"multipart with a short last part", 2*part + 12345, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "rt/" + tc.name
			n, err := s.Put(ctx, key, &pattern{n: tc.size}, tc.limit)
			if err != nil || n != tc.size {
				t.Fatalf("Put = %d, %v; want %d", n, err, tc.size)
			}
			got, size := readAll(t, s, key)
			if size != tc.size || !bytes.Equal(got, patternBytes(tc.size)) {
				t.Fatalf("read back %d bytes (size %d), want the %d put", len(got), size, tc.size)
			}
		})
	}
}

// Over the limit, Put stores nothing and leaves no upload behind, whether
// the excess shows in the first part or after parts were sent; an object
// already under the key is untouched.
func TestPutOversizeAbortsAndLeavesNothing(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		size, limit int64
	}{
		{"single part", 1001, 1000},
		{"one byte over a part", part + 1, part},
		{"after two parts", 3*part + 10, 2*part + 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := newStore(t, part)
			_, err := s.Put(ctx, "k", &pattern{n: tc.size}, tc.limit)
			if !errors.Is(err, objstore.ErrTooLarge) {
				t.Fatalf("Put: %v, want ErrTooLarge", err)
			}
			nothingLeft(t, s, c)

			if _, err := s.Put(ctx, "k", bytes.NewReader([]byte("old")), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Put(ctx, "k", &pattern{n: tc.size}, tc.limit); !errors.Is(err, objstore.ErrTooLarge) {
				t.Fatalf("Put over an object: %v, want ErrTooLarge", err)
			}
			if got, _ := readAll(t, s, "k"); string(got) != "old" {
				t.Fatalf("the object under the key became %d bytes, want the old one", len(got))
			}
		})
	}
}

type failingReader struct {
	r     io.Reader
	after int64
}

var errBroken = errors.New("client went away")

func (f *failingReader) Read(b []byte) (int, error) {
	if f.after <= 0 {
		return 0, errBroken
	}
	b = b[:min(int64(len(b)), f.after)]
	n, err := f.r.Read(b)
	f.after -= int64(n)
	return n, err
}

// A source that fails mid-upload, or a context cancelled mid-upload, leaves
// nothing; the source's error is told apart from the store's.
func TestPutFailureAborts(t *testing.T) {
	s, c := newStore(t, part)
	_, err := s.Put(context.Background(), "k", &failingReader{r: &pattern{n: 4 * part}, after: 2*part + 7}, 0)
	var se *objstore.SourceError
	if !errors.As(err, &se) || !errors.Is(err, errBroken) {
		t.Fatalf("Put from a failing source: %v, want a SourceError wrapping its error", err)
	}
	nothingLeft(t, s, c)

	ctx, cancel := context.WithCancel(context.Background())
	r := &cancelAfter{r: &pattern{n: 4 * part}, after: part + 1, cancel: cancel}
	if _, err := s.Put(ctx, "k", r, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: %v, want context.Canceled", err)
	}
	nothingLeft(t, s, c)
}

// cancelAfter cancels its context once after bytes have been read.
type cancelAfter struct {
	r      io.Reader
	after  int64
	cancel func()
}

func (c *cancelAfter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.after -= int64(n)
	if c.after <= 0 {
		c.cancel()
	}
	return n, err
}

// A 200 MB upload streams: the process allocates about one part's worth
// of buffers, not the object. TotalAlloc counts every allocation made
// during the Put (nothing is freed from it), so the bound holds whatever
// the garbage collector did; it is far below the object's size.
func TestPutLargeStreamsInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the 200 MB upload is not run")
	}
	const size = 200 << 20
	s, _ := newStore(t, 0) // DefaultPartSize
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, err := s.Put(context.Background(), "big", &pattern{n: size}, size)
	runtime.ReadMemStats(&after)
	if err != nil || n != size {
		t.Fatalf("Put = %d, %v", n, err)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB upload allocated %d MiB", size>>20, alloc>>20)
	if alloc > 64<<20 {
		t.Fatalf("a %d MiB upload allocated %d MiB; it must stream in parts", size>>20, alloc>>20)
	}
	rc, got, err := s.Open(context.Background(), "big")
	if err != nil || got != size {
		t.Fatalf("Open: size %d, %v", got, err)
	}
	defer rc.Close()
	h, want := sha256.New(), sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	io.Copy(want, &pattern{n: size})
	if !bytes.Equal(h.Sum(nil), want.Sum(nil)) {
		t.Fatal("the 200 MB object read back differs from what was put")
	}
}

func TestMissingKeyIsNotFound(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, part)
	_, _, err := s.Open(ctx, "nope")
	if !errors.Is(err, objstore.ErrNotFound) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open: %v, want ErrNotFound", err)
	}
	if _, _, err := s.OpenRange(ctx, "nope", 0, 10); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("OpenRange: %v, want ErrNotFound", err)
	}
	if _, err := s.Size(ctx, "nope"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Size: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "nope"); err != nil {
		t.Fatalf("Delete of a missing key: %v, want success", err)
	}
}

func TestOpenRange(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, part)
	content := patternBytes(1000)
	if _, err := s.Put(ctx, "k", bytes.NewReader(content), 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off, n int64
		want   []byte
	}{
		{0, 10, content[:10]},
		{500, 100, content[500:600]},
		{990, -1, content[990:]},
		{990, 100, content[990:]},
		{1000, 10, nil},
		{5000, -1, nil},
	} {
		rc, size, err := s.OpenRange(ctx, "k", tc.off, tc.n)
		if err != nil {
			t.Fatalf("OpenRange(%d, %d): %v", tc.off, tc.n, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || size != 1000 || !bytes.Equal(got, tc.want) {
			t.Errorf("OpenRange(%d, %d) = %d bytes, size %d, %v; want %d bytes, size 1000", tc.off, tc.n, len(got), size, err, len(tc.want))
		}
	}
}

func TestListAndDelete(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, part)
	for _, k := range []string{"files/a", "files/b", "batches/c", "filesx"} {
		if _, err := s.Put(ctx, k, bytes.NewReader([]byte(k)), 0); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.List(ctx, "files/")
	if err != nil || !slices.Equal(got, []string{"files/a", "files/b"}) {
		t.Fatalf("List(files/) = %v, %v", got, err)
	}
	if err := s.Delete(ctx, "files/a"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(ctx, "files/a"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Open after Delete: %v", err)
	}
	got, err = s.List(ctx, "")
	if err != nil || !slices.Equal(got, []string{"batches/c", "files/b", "filesx"}) {
		t.Fatalf("List() = %v, %v", got, err)
	}
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t, part)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	cfg := objstore.Config{Endpoint: s3test.Endpoint(t), Bucket: s.Bucket(), Region: s3test.Region, PathStyle: true,
		AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey}
	for _, tc := range []struct {
		name   string
		modify func(*objstore.Config)
		want   error
	}{
		{"missing bucket", func(c *objstore.Config) { c.Bucket = "no-such-bucket" }, objstore.ErrNoBucket},
		{"wrong secret", func(c *objstore.Config) { c.SecretKey = "wrong" }, objstore.ErrAccessDenied},
		{"unknown access key", func(c *objstore.Config) { c.AccessKey = "nobody" }, objstore.ErrAccessDenied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			tc.modify(&c)
			bad, err := objstore.New(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if err := bad.Check(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("Check: %v, want %v", err, tc.want)
			}
		})
	}
}
