package batches_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/backends/batches/batchestest"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// TestPostgresStore is the PostgreSQL run of the Store conformance suite.
func TestPostgresStore(t *testing.T) {
	batchestest.Run(t, func(t *testing.T) batches.Store {
		s, err := batches.OpenPostgresStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestResults runs the Results conformance suite on the local spool and on
// PostgreSQL.
func TestResults(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		batchestest.RunResults(t, func(t *testing.T) batches.Results { return batches.NewLocalResults(t.TempDir()) })
	})
	t.Run("postgres", func(t *testing.T) {
		batchestest.RunResults(t, func(t *testing.T) batches.Results {
			s, err := batches.OpenPostgresStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return batches.NewPostgresResults(s.Pool(), nil)
		})
	})
	t.Run("postgres-sealed", func(t *testing.T) {
		ring, err := envelope.NewKeyring(bytes.Repeat([]byte{7}, envelope.KeySize))
		if err != nil {
			t.Fatal(err)
		}
		batchestest.RunResults(t, func(t *testing.T) batches.Results {
			s, err := batches.OpenPostgresStore(t.Context(), pgtest.DSN(t), pgdb.Pool{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				// The rows hold no plaintext: no custom_id's line shows.
				var plain int
				if err := s.Pool().QueryRow(context.Background(),
					`SELECT count(*) FROM batch_results WHERE position('"custom_id"'::bytea in line) > 0`).Scan(&plain); err != nil {
					t.Error(err)
				} else if plain != 0 {
					t.Errorf("%d result rows stored in the clear", plain)
				}
				s.Close()
			})
			return batches.NewPostgresResults(s.Pool(), ring)
		})
	})
}
