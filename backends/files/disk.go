package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"strings"
)

// DiskBlobs is the Blobs implementation on a local directory: one file per
// blob, named by its key, mode 0600 in a 0700 directory. Put streams to
// "<key>.part", fsyncs it, renames it into place and fsyncs the directory,
// so a blob is either whole and durable or absent.
//
// One DiskBlobs owns its directory: OpenDiskBlobs removes the part files a
// crashed process left, which would race with another process writing
// into the same directory.
type DiskBlobs struct {
	dir string
}

// OpenDiskBlobs opens (creating it, mode 0700) the blob directory dir and
// removes the part files of interrupted Puts.
func OpenDiskBlobs(dir string) (*DiskBlobs, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("files: open blobs: %w", err)
	}
	// 0700: uploads are other people's data.
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("files: open blobs: %w", err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return nil, fmt.Errorf("files: open blobs: %w", err)
	}
	for _, e := range entries {
		if key, ok := strings.CutSuffix(e.Name(), partSuffix); ok && e.Type().IsRegular() && validKey(key) {
			if err := os.Remove(filepath.Join(abs, e.Name())); err != nil {
				return nil, fmt.Errorf("files: open blobs: %w", err)
			}
		}
	}
	return &DiskBlobs{dir: abs}, nil
}

// validKey reports whether key is a blob key (see Blobs): a plain file
// name, never a path, never hidden, never a part file.
func validKey(key string) bool {
	if key == "" || key[0] == '.' || strings.HasSuffix(key, partSuffix) {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func (d *DiskBlobs) path(key string) (string, error) {
	if !validKey(key) {
		return "", fmt.Errorf("files: invalid blob key %q", key)
	}
	return filepath.Join(d.dir, key), nil
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (cr ctxReader) Read(p []byte) (int, error) {
	if err := cr.ctx.Err(); err != nil {
		return 0, err
	}
	return cr.r.Read(p)
}

// Put implements Blobs. io.Copy's buffer is all the memory it uses.
func (d *DiskBlobs) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	final, err := d.path(key)
	if err != nil {
		return 0, err
	}
	part := final + partSuffix
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	kept := false
	defer func() {
		if !kept {
			f.Close()
			os.Remove(part)
		}
	}()
	var from io.Reader = ctxReader{ctx: ctx, r: r}
	if limit > 0 {
		// One byte more than allowed tells "exactly the limit" from "over".
		from = io.LimitReader(from, limit+1)
	}
	n, err := io.Copy(f, from)
	if err != nil {
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	if limit > 0 && n > limit {
		return 0, fmt.Errorf("files: put %s: more than %d bytes: %w", key, limit, ErrTooLarge)
	}
	// The row that will name this blob must never point at content the OS
	// could still lose.
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	kept = true
	if err := os.Rename(part, final); err != nil {
		os.Remove(part)
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	if err := syncDir(d.dir); err != nil {
		os.Remove(final)
		return 0, fmt.Errorf("files: put %s: %w", key, err)
	}
	return n, nil
}

// Open implements Blobs. The reader is the *os.File itself, so reads at
// any offset (ReadAt) and sendfile work, and it keeps reading the content
// if the blob is deleted meanwhile.
func (d *DiskBlobs) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %w", ErrBlobNotFound, err)
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, fmt.Errorf("files: open blob %s: %w", key, ErrBlobNotFound)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("files: open blob %s: %w", key, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("files: open blob %s: %w", key, err)
	}
	return f, fi.Size(), nil
}

// OpenRange implements Blobs.
func (d *DiskBlobs) OpenRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n < 0 {
		return nil, fmt.Errorf("files: open blob %s: invalid range %d+%d", key, off, n)
	}
	rc, _, err := d.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	f := rc.(*os.File)
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

// Delete implements Blobs.
func (d *DiskBlobs) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("files: delete blob %s: %w", key, err)
	}
	return nil
}

// List implements Blobs. Names that are not blob keys (part files, anything
// else an operator put there) are not listed.
func (d *DiskBlobs) List(ctx context.Context, prefix string) iter.Seq2[BlobInfo, error] {
	return func(yield func(BlobInfo, error) bool) {
		entries, err := os.ReadDir(d.dir)
		if err != nil {
			yield(BlobInfo{}, fmt.Errorf("files: list blobs: %w", err))
			return
		}
		for _, e := range entries {
			name := e.Name()
			if !e.Type().IsRegular() || !validKey(name) || !strings.HasPrefix(name, prefix) {
				continue
			}
			if err := ctx.Err(); err != nil {
				yield(BlobInfo{}, err)
				return
			}
			fi, err := e.Info()
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted since the directory was read
			}
			if err != nil {
				if !yield(BlobInfo{}, fmt.Errorf("files: list blobs: %w", err)) {
					return
				}
				continue
			}
			if !yield(BlobInfo{Key: name, Size: fi.Size(), Modified: fi.ModTime()}, nil) {
				return
			}
		}
	}
}

// rename moves blob from over blob to, durably. Only the sealing of blobs
// written before encryption at rest (legacy.go) needs it, and only on disk,
// where such blobs exist.
func (d *DiskBlobs) rename(from, to string) error {
	src, err := d.path(from)
	if err != nil {
		return err
	}
	dst, err := d.path(to)
	if err != nil {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	return syncDir(d.dir)
}

// syncDir makes a rename durable: the new directory entry is only on disk
// once the directory itself is fsynced.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
