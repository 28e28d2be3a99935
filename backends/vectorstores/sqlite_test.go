package vectorstores_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/backends/vectorstores/vectorstorestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// TestSQLiteStore is the SQLite run of the Store conformance suite.
func TestSQLiteStore(t *testing.T) {
	vectorstorestest.Run(t, func(t *testing.T) vectorstores.Store {
		dir := t.TempDir()
		keys, err := envelope.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := vectorstores.OpenSQLiteStore(t.Context(), dir, keys, nil)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
