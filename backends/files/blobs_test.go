package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// streamOnlyBlobs is DiskBlobs seen as a remote store would be: Open's
// reader is a plain stream (no ReadAt, no Seek), and ranged reads are
// counted.
type streamOnlyBlobs struct {
	*DiskBlobs
	ranges atomic.Int64
}

func (b *streamOnlyBlobs) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	rc, size, err := b.DiskBlobs.Open(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return struct {
		io.Reader
		io.Closer
	}{rc, rc}, size, nil
}

func (b *streamOnlyBlobs) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	b.ranges.Add(1)
	return b.DiskBlobs.OpenRange(ctx, key, off, n)
}

// TestServiceOverStreamOnlyBlobs runs the service on a blob store without
// random access: a whole read is one stream, reads at an offset open a
// range, and the content is the same either way.
func TestServiceOverStreamOnlyBlobs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	disk, err := OpenDiskBlobs(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	blobs := &streamOnlyBlobs{DiskBlobs: disk}
	meta, err := OpenSQLiteMetadata(ctx, filepath.Join(dir, "files.db"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	kek := make([]byte, envelope.KeySize)
	rand.Read(kek)
	ring, err := envelope.NewKeyring(kek)
	if err != nil {
		t.Fatal(err)
	}
	s := New(meta, blobs, ring, Options{})
	t.Cleanup(func() { s.Close() })

	content := make([]byte, 5*envelope.SegmentSize+123)
	rand.Read(content)
	f, err := s.Create(ctx, "owner-a", File{Filename: "a.bin", Purpose: PurposeUserData}, bytes.NewReader(content), 0)
	if err != nil {
		t.Fatal(err)
	}
	_, c, err := s.Open(ctx, "owner-a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("sequential read: %d bytes, %v", len(got), err)
	}
	if n := blobs.ranges.Load(); n != 0 {
		t.Errorf("a sequential read opened %d ranges, want 0 (one stream)", n)
	}
	for _, off := range []int64{3*envelope.SegmentSize + 7, 10, int64(len(content)) - 50} {
		p := make([]byte, 40)
		if n, err := c.ReadAt(p, off); err != nil || n != len(p) || !bytes.Equal(p, content[off:off+40]) {
			t.Errorf("ReadAt(%d) = %d, %v; wrong content", off, n, err)
		}
	}
	if blobs.ranges.Load() == 0 {
		t.Error("reads at an offset opened no range")
	}
	if _, err := c.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(c); err != nil || !bytes.Equal(got, content) {
		t.Errorf("read after Seek(0): %d bytes, %v", len(got), err)
	}

	// Over the limit keeps nothing, in this store too.
	if _, err := s.Create(ctx, "owner-a", File{Filename: "b.bin", Purpose: PurposeUserData}, bytes.NewReader(content), 1000); err == nil {
		t.Fatal("Create over the limit succeeded")
	}
	var left []string
	for b, err := range blobs.List(ctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, b.Key)
	}
	if len(left) != 1 || left[0] != f.ID {
		t.Errorf("blobs after a rejected Create: %v, want only %s", left, f.ID)
	}
}
