package files_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/files/filestest"
)

// TestDiskBlobsConformance is the local-disk run of the blob store suite.
func TestDiskBlobsConformance(t *testing.T) {
	filestest.RunBlobs(t, func(t *testing.T) files.Blobs {
		b, err := files.OpenDiskBlobs(filepath.Join(t.TempDir(), "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// TestSQLiteMetadataConformance is the SQLite run of the metadata suite.
func TestSQLiteMetadataConformance(t *testing.T) {
	filestest.RunMetadata(t, func(t *testing.T) files.Metadata {
		m, err := files.OpenSQLiteMetadata(context.Background(), filepath.Join(t.TempDir(), "files.db"), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	})
}
