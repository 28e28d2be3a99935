package responses_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/responses/responsestest"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// TestBackgroundStore runs the BackgroundStore conformance suite against
// both implementations: SQLite in a fresh data directory, Postgres in a
// fresh database.
func TestBackgroundStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func(t *testing.T) responses.BackgroundStore
	}{
		{"SQLite", func(t *testing.T) responses.BackgroundStore {
			s, err := responses.OpenSQLiteBackgroundStore(t.Context(), t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"Postgres", func(t *testing.T) responses.BackgroundStore {
			s, err := responses.OpenPostgresBackgroundStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { responsestest.RunBackground(t, tc.open) })
	}
}
