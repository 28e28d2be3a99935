package usage_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/usage"
	"github.com/switchyard-ai/switchyard/internal/usage/usagetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresStore is the Postgres run of the Store conformance suite.
func TestPostgresStore(t *testing.T) {
	usagetest.Run(t, func(t *testing.T) usage.Store {
		s, err := usage.OpenPostgres(t.Context(), pgtest.DSN(t), pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestPostgresStoreShared: two replicas' stores on one database.
func TestPostgresStoreShared(t *testing.T) {
	usagetest.RunShared(t, func(t *testing.T) (usage.Store, usage.Store) {
		dsn := pgtest.DSN(t)
		a, err := usage.OpenPostgres(t.Context(), dsn, pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := usage.OpenPostgres(t.Context(), dsn, pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	})
}
