package vectorstores_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/backends/vectorstores/vectorstorestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
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

// TestPostgresStore is the Postgres run of the Store conformance suite.
func TestPostgresStore(t *testing.T) {
	vectorstorestest.Run(t, func(t *testing.T) vectorstores.Store {
		s, err := vectorstores.OpenPostgresStore(t.Context(), pgtest.DSN(t), vectorstores.PostgresOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
