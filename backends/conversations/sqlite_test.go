package conversations_test

import (
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/backends/conversations/conversationstest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// TestSQLiteStore is the SQLite run of the Store conformance suite.
func TestSQLiteStore(t *testing.T) {
	conversationstest.Run(t, func(t *testing.T) conversations.Store {
		dir := t.TempDir()
		keys, err := envelope.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := conversations.OpenSQLiteStore(t.Context(), dir, keys)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// openSQLite opens the store's file a second time, to look at its rows.
func openSQLite(t *testing.T, dir string) *sql.DB {
	t.Helper()
	db, err := sqlitedb.Open(t.Context(), filepath.Join(dir, conversations.DBFile), "conversations-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

type dataFile struct {
	name string
	data []byte
}

// dataFiles reads every file in dir.
func dataFiles(t *testing.T, dir string) []dataFile {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []dataFile
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, dataFile{e.Name(), b})
	}
	return out
}
