package files

import (
	"context"
	"errors"
	"io"
	"iter"
	"sync"
	"time"
)

// Blobs holds file contents by key. It is declared here, by the files
// service that consumes it; DiskBlobs (a local directory) is the first
// implementation and filestest.RunBlobs the suite every implementation
// passes. A blob store only ever sees ciphertext: the service seals content
// (envelope) before Put and opens it after Open, so every implementation
// gets encryption at rest.
//
// Keys are opaque names of letters, digits, '-', '_' and '.', not starting
// with '.'; the service uses file ids.
type Blobs interface {
	// Put streams r into a new blob named key, reading at most limit bytes
	// when limit is positive: more fails with an error wrapping ErrTooLarge.
	// Any failure (the limit, an error reading r, ctx ending, a storage
	// error) leaves nothing under key; success means the content is
	// durable. Put never holds the whole content in memory. It returns the
	// number of bytes stored.
	Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error)
	// Open returns the blob's content from its start and its size, or an
	// error wrapping ErrBlobNotFound. The caller closes the reader.
	Open(ctx context.Context, key string) (io.ReadCloser, int64, error)
	// OpenRange returns n bytes of the blob from offset off (fewer at its
	// end), or an error wrapping ErrBlobNotFound: the ranged read the
	// sealed-stream reader needs to start anywhere but the beginning.
	OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	// Delete removes the blob; deleting a missing one is not an error.
	Delete(ctx context.Context, key string) error
	// List yields the blobs whose key starts with prefix, in no particular
	// order, for sweeps and orphan clean-up. Blobs being written by Put are
	// not listed.
	List(ctx context.Context, prefix string) iter.Seq2[BlobInfo, error]
}

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Key  string
	Size int64
	// Modified is when the blob was written, so an orphan sweep shared by
	// several processes can leave alone a blob whose row is still being
	// inserted.
	Modified time.Time
}

// ErrBlobNotFound is wrapped by the errors of Open and OpenRange for a key
// that names no blob.
var ErrBlobNotFound = errors.New("files: no such blob")

// blobReaderAt reads a blob at any offset for envelope.Reader, which needs
// an io.ReaderAt. It keeps one sequential stream and reads on from it while
// reads are contiguous (a download: one request to the store), and opens a
// ranged read where they jump. A stream that is already an io.ReaderAt (an
// *os.File) is used directly instead (newBlobReaderAt).
type blobReaderAt struct {
	ctx   context.Context
	blobs Blobs
	key   string
	size  int64

	mu  sync.Mutex
	cur io.ReadCloser // reads from pos
	pos int64
}

// blobContent is a blob's content read through an io.ReaderAt, with the
// stream that backs it to close.
type blobContent interface {
	io.ReaderAt
	io.Closer
}

// newBlobReaderAt wraps rc, the blob key's content from offset 0.
func newBlobReaderAt(ctx context.Context, b Blobs, key string, rc io.ReadCloser, size int64) blobContent {
	if ra, ok := rc.(blobContent); ok {
		return ra
	}
	return &blobReaderAt{ctx: ctx, blobs: b, key: key, size: size, cur: rc}
}

func (r *blobReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("files: negative offset")
	}
	if off >= r.size {
		return 0, io.EOF
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || r.pos != off {
		if r.cur != nil {
			r.cur.Close()
			r.cur = nil
		}
		rc, err := r.blobs.OpenRange(r.ctx, r.key, off, r.size-off)
		if err != nil {
			return 0, err
		}
		r.cur, r.pos = rc, off
	}
	n, err := io.ReadFull(r.cur, p)
	r.pos += int64(n)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	if err != nil && err != io.EOF {
		// The stream is in an unknown state: the next read reopens.
		r.cur.Close()
		r.cur = nil
	}
	return n, err
}

func (r *blobReaderAt) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		return nil
	}
	err := r.cur.Close()
	r.cur = nil
	return err
}
