package conversations_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/backends/conversations/conversationstest"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresStore is the Postgres run of the Store conformance suite.
func TestPostgresStore(t *testing.T) {
	conversationstest.Run(t, func(t *testing.T) conversations.Store {
		s, err := conversations.OpenPostgresStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
