package keys_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/keys/keystest"
)

func openSQLite(t *testing.T, dir string) *keys.SQLiteStore {
	t.Helper()
	s, err := keys.OpenSQLite(context.Background(), dir)
	if err != nil {
		t.Fatalf("OpenSQLite(%q): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSQLiteConformance is the SQLite run of the key store suite.
func TestSQLiteConformance(t *testing.T) {
	keystest.Run(t, func(t *testing.T) keystest.Store { return openSQLite(t, t.TempDir()) })
}

// TestSQLiteShared runs the shared-storage checks on two stores opened on
// one data directory (the CLI and a gateway), starting from a directory
// that does not exist yet.
func TestSQLiteShared(t *testing.T) {
	keystest.RunShared(t, func(t *testing.T) (keystest.Store, keystest.Store) {
		dir := filepath.Join(t.TempDir(), "data")
		return openSQLite(t, dir), openSQLite(t, dir)
	})
}
