package files

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/objstore"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
)

// TestSharedOrphansSpareYoungBlobs: the clean-up of blobs without a row
// on a shared store leaves a blob younger than OrphanMinAge alone (another
// replica may be between its Put and its Insert) and removes it once the
// age bound allows.
func TestSharedOrphansSpareYoungBlobs(t *testing.T) {
	ctx := context.Background()
	meta, err := OpenPostgresMetadata(ctx, pgtest.DSN(t), pgdb.Pool{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	c, bucket := s3test.Bucket(t)
	st, err := objstore.NewFromClient(c, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	blobs := NewS3Blobs(st)
	ring, err := envelope.NewKeyring(bytes.Repeat([]byte{7}, envelope.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	s := New(meta, blobs, ring, Options{})
	kept, err := s.Create(ctx, "owner", File{Filename: "a.txt", Purpose: PurposeUserData}, bytes.NewReader([]byte("kept")), 0)
	if err != nil {
		t.Fatal(err)
	}
	uploading, err := newID()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blobs.Put(ctx, uploading, bytes.NewReader([]byte("row not inserted yet")), 0); err != nil {
		t.Fatal(err)
	}
	if err := s.reconcile(ctx, OrphanMinAge); err != nil {
		t.Fatal(err)
	}
	if _, _, err := blobs.Open(ctx, uploading); err != nil {
		t.Fatalf("a young blob without a row was removed: %v", err)
	}
	// Without the age bound (as the embedded store runs it at open) it goes,
	// and a blob with its row stays.
	if err := s.reconcile(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := blobs.Open(ctx, uploading); !errors.Is(err, ErrBlobNotFound) {
		t.Fatalf("orphan blob after reconcile: %v", err)
	}
	if _, c, err := s.Open(ctx, "owner", kept.ID); err != nil {
		t.Fatalf("a file with its row lost its blob: %v", err)
	} else {
		c.Close()
	}
}
