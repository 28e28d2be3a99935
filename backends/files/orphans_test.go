package files

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestSharedSweeperTakesTheLock: on a shared store, Run sweeps expired
// files only while it holds the sweep lock: nothing is swept while another
// replica holds it, and the file goes once it is released.
func TestSharedSweeperTakesTheLock(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	meta, err := OpenPostgresMetadata(ctx, dsn, pgdb.Pool{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	other, err := OpenPostgresMetadata(ctx, dsn, pgdb.Pool{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	c, bucket := s3test.Bucket(t)
	st, err := objstore.NewFromClient(c, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	ring, err := envelope.NewKeyring(bytes.Repeat([]byte{7}, envelope.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	var rounds atomic.Int64
	locker := &countingLocker{PostgresMetadata: meta, rounds: &rounds}
	now := time.Now()
	clock := func() time.Time { return now.Add(2 * time.Hour) }
	s := New(locker, NewS3Blobs(st), ring, Options{SweepInterval: 10 * time.Millisecond, Now: clock})
	f, err := s.Create(ctx, "owner", File{Filename: "a.txt", Purpose: PurposeUserData, ExpiresAt: now.Add(time.Hour)},
		bytes.NewReader([]byte("expires")), 0)
	if err != nil {
		t.Fatal(err)
	}
	held, ok, err := other.TrySweepLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TrySweepLock = %v, %v", ok, err)
	}
	// Released on every path: the pool's Close waits for the connection.
	release := sync.OnceFunc(held)
	defer release()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	// Several rounds find the lock taken: the expired file stays.
	for wait := time.Now().Add(5 * time.Second); rounds.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatal("the sweeper did not try the sweep lock")
		}
	}
	if ok, err := meta.Exists(ctx, f.ID); err != nil || !ok {
		t.Fatalf("swept while another replica held the lock: exists %v, %v", ok, err)
	}
	release()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := meta.Exists(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired file was not swept once the lock was free")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The sweep deletes the row, then the blob: wait for the second step.
	for {
		rc, _, err := NewS3Blobs(st).Open(ctx, f.ID)
		if err == nil {
			rc.Close()
		}
		if errors.Is(err, ErrBlobNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the swept file's blob: %v, want it deleted", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingLocker counts the sweep rounds that tried the lock.
type countingLocker struct {
	*PostgresMetadata
	rounds *atomic.Int64
}

func (c *countingLocker) TrySweepLock(ctx context.Context) (func(), bool, error) {
	defer c.rounds.Add(1)
	return c.PostgresMetadata.TrySweepLock(ctx)
}
