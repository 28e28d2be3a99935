package batches_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/backends/batches/batchestest"
)

// TestSQLiteStore is the SQLite run of the Store conformance suite.
func TestSQLiteStore(t *testing.T) {
	batchestest.Run(t, func(t *testing.T) batches.Store {
		s, err := batches.OpenSQLiteStore(t.Context(), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
