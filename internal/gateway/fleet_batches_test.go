package gateway

import (
	"testing"

	"github.com/switchyard-ai/switchyard/backends"
	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestOpenFleetBatches: storage.metadata.kind postgres gives the backends
// the PostgreSQL batch store and results, migrated; sqlite leaves them to
// the embedded defaults.
func TestOpenFleetBatches(t *testing.T) {
	bo := backends.Options{DataDir: t.TempDir()}
	if err := openFleetBatches(t.Context(), config.Storage{Metadata: config.StorageMetadata{Kind: config.MetadataSQLite}}, &bo); err != nil {
		t.Fatal(err)
	}
	if bo.BatchStore != nil || bo.BatchResults != nil {
		t.Fatal("sqlite storage set a batch store")
	}
	t.Setenv("SY_TEST_PG_DSN", pgtest.DSN(t))
	st := config.Storage{Metadata: config.StorageMetadata{Kind: config.MetadataPostgres, DSNEnv: "SY_TEST_PG_DSN"}}
	if err := openFleetBatches(t.Context(), st, &bo); err != nil {
		t.Fatal(err)
	}
	ps, ok := bo.BatchStore.(*batches.PostgresStore)
	if !ok {
		t.Fatalf("batch store %T, want *batches.PostgresStore", bo.BatchStore)
	}
	defer ps.Close()
	if _, ok := bo.BatchResults.(*batches.PostgresResults); !ok {
		t.Fatalf("batch results %T, want *batches.PostgresResults", bo.BatchResults)
	}
	v, err := pgdb.SchemaVersion(t.Context(), ps.Pool(), batches.PGComponent)
	if err != nil || v != int64(len(batches.PGMigrations)) {
		t.Errorf("schema version %d, %v; want %d", v, err, len(batches.PGMigrations))
	}
	st.Metadata.DSNEnv = "SY_TEST_PG_DSN_UNSET"
	if err := openFleetBatches(t.Context(), st, &backends.Options{DataDir: t.TempDir()}); err == nil {
		t.Error("an unset DSN variable opened a store")
	}
}
