package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/objstore"
)

// S3Blobs is the Blobs implementation in an S3-compatible object store
// (objstore), for a fleet: every replica reads and writes the same bucket.
// Blobs live under a key prefix (S3Prefix), so the bucket may hold other
// components' objects. Put streams in multipart parts and an object
// appears only when complete; a failed or over-limit Put aborts and
// leaves nothing.
type S3Blobs struct {
	store  *objstore.Store
	prefix string
}

// S3Prefix is where the files' blobs live in the bucket.
const S3Prefix = "files/"

// NewS3Blobs returns the blob store over store.
func NewS3Blobs(store *objstore.Store) *S3Blobs {
	return &S3Blobs{store: store, prefix: S3Prefix}
}

func (b *S3Blobs) key(key string) (string, error) {
	if !validKey(key) {
		return "", fmt.Errorf("files: invalid blob key %q", key)
	}
	return b.prefix + key, nil
}

// mapErr turns objstore's errors into the ones Blobs promises.
func mapS3Err(err error) error {
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("%w (%w)", ErrBlobNotFound, err)
	case errors.Is(err, objstore.ErrTooLarge):
		return fmt.Errorf("%w (%w)", ErrTooLarge, err)
	}
	return err
}

// Put implements Blobs.
func (b *S3Blobs) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	k, err := b.key(key)
	if err != nil {
		return 0, err
	}
	n, err := b.store.Put(ctx, k, ctxReader{ctx: ctx, r: r}, limit)
	if err != nil {
		return 0, mapS3Err(err)
	}
	return n, nil
}

// Open implements Blobs.
func (b *S3Blobs) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	k, err := b.key(key)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrBlobNotFound, err)
	}
	rc, size, err := b.store.Open(ctx, k)
	if err != nil {
		return nil, 0, mapS3Err(err)
	}
	return rc, size, nil
}

// OpenRange implements Blobs.
func (b *S3Blobs) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	k, err := b.key(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBlobNotFound, err)
	}
	if n == 0 {
		// objstore answers an empty range without asking the store; a
		// missing blob must still be reported.
		if _, err := b.store.Size(ctx, k); err != nil {
			return nil, mapS3Err(err)
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	rc, _, err := b.store.OpenRange(ctx, k, off, n)
	if err != nil {
		return nil, mapS3Err(err)
	}
	return rc, nil
}

// Delete implements Blobs.
func (b *S3Blobs) Delete(ctx context.Context, key string) error {
	k, err := b.key(key)
	if err != nil {
		return err
	}
	return mapS3Err(b.store.Delete(ctx, k))
}

// List implements Blobs: one page of the bucket's listing at a time.
func (b *S3Blobs) List(ctx context.Context, prefix string) iter.Seq2[BlobInfo, error] {
	return func(yield func(BlobInfo, error) bool) {
		for o, err := range b.store.Objects(ctx, b.prefix+prefix) {
			if err != nil {
				yield(BlobInfo{}, err)
				return
			}
			key := strings.TrimPrefix(o.Key, b.prefix)
			if !validKey(key) {
				continue // not a blob of ours (a "directory" below the prefix)
			}
			if !yield(BlobInfo{Key: key, Size: o.Size, Modified: o.Modified}, nil) {
				return
			}
		}
	}
}
