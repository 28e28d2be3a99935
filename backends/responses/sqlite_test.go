package responses_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/responses/responsestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// TestSQLiteStore is the SQLite run of the Store conformance suite.
func TestSQLiteStore(t *testing.T) {
	responsestest.Run(t, func(t *testing.T) responses.Store {
		dir := t.TempDir()
		keys, err := envelope.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := responses.OpenSQLiteStore(t.Context(), dir, keys)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
