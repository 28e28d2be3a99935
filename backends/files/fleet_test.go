package files_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/files/filestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/objstore"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// TestMain stops the test PostgreSQL and S3 servers the fleet runs start.
func TestMain(m *testing.M) {
	testserver.Main(m, map[string]func() error{"pgtest": pgtest.Stop, "s3test": s3test.Stop})
}

func openPostgresMetadata(t *testing.T, dsn string) *files.PostgresMetadata {
	t.Helper()
	m, err := files.OpenPostgresMetadata(context.Background(), dsn, pgdb.Pool{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func openS3Blobs(t *testing.T) *files.S3Blobs {
	t.Helper()
	c, bucket := s3test.Bucket(t)
	st, err := objstore.NewFromClient(c, bucket, 0)
	if err != nil {
		t.Fatal(err)
	}
	return files.NewS3Blobs(st)
}

// TestPostgresMetadataConformance is the PostgreSQL run of the metadata
// suite.
func TestPostgresMetadataConformance(t *testing.T) {
	filestest.RunMetadata(t, func(t *testing.T) files.Metadata { return openPostgresMetadata(t, pgtest.DSN(t)) })
}

// TestS3BlobsConformance is the S3 run of the blob store suite.
func TestS3BlobsConformance(t *testing.T) {
	filestest.RunBlobs(t, func(t *testing.T) files.Blobs { return openS3Blobs(t) })
}

// TestSweepLockOneAtATime: of two replicas on one database, only one holds
// the sweep lock at a time, and it passes on when released.
func TestSweepLockOneAtATime(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	a, b := openPostgresMetadata(t, dsn), openPostgresMetadata(t, dsn)
	releaseA, ok, err := a.TrySweepLock(ctx)
	if err != nil || !ok {
		t.Fatalf("first TrySweepLock = %v, %v; want it taken", ok, err)
	}
	if _, ok, err := b.TrySweepLock(ctx); err != nil || ok {
		t.Fatalf("TrySweepLock while another replica holds it = %v, %v; want not taken", ok, err)
	}
	if _, ok, err := a.TrySweepLock(ctx); err != nil || ok {
		t.Fatalf("TrySweepLock on another connection of the holder = %v, %v; want not taken", ok, err)
	}
	releaseA()
	releaseB, ok, err := b.TrySweepLock(ctx)
	if err != nil || !ok {
		t.Fatalf("TrySweepLock after the release = %v, %v; want it taken", ok, err)
	}
	releaseB()
}

// TestPostgresMetadataChecksKEKs: a replica opening the shared metadata
// checks that its keyring can unwrap every stored file's data key, and
// refuses to start, naming the missing key, when it cannot.
func TestPostgresMetadataChecksKEKs(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	key := func(b byte) []byte { k := make([]byte, envelope.KeySize); k[0] = b; return k }
	ring, err := envelope.NewKeyring(key(1))
	if err != nil {
		t.Fatal(err)
	}
	m, err := files.OpenPostgresMetadata(ctx, dsn, pgdb.Pool{}, ring)
	if err != nil {
		t.Fatal(err)
	}
	_, wrapped, err := ring.NewDataKey("file-abc")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Insert(ctx, files.File{ID: "file-abc", Owner: "key_o", Filename: "a.txt", Purpose: "assistants", Bytes: 1, CreatedAt: time.Now()}, wrapped); err != nil {
		t.Fatal(err)
	}
	m.Close()
	again, err := files.OpenPostgresMetadata(ctx, dsn, pgdb.Pool{}, ring)
	if err != nil {
		t.Fatalf("reopening with the same keyring: %v", err)
	}
	again.Close()
	other, err := envelope.NewKeyring(key(2))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := files.OpenPostgresMetadata(ctx, dsn, pgdb.Pool{}, other); err == nil || !strings.Contains(err.Error(), ring.PrimaryID()) {
		if m != nil {
			m.Close()
		}
		t.Fatalf("opening with another keyring: %v; want a refusal naming key %s", err, ring.PrimaryID())
	}
}
