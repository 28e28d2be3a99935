package gateway

import (
	"context"
	"fmt"
	"os"

	"github.com/switchyard-ai/switchyard/backends"
	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// openFleetBatches sets bo's batch store and results to PostgreSQL when
// storage.metadata.kind is postgres (the DSN from the variable dsn_env
// names), the result rows sealed with the keyring envelope.Load finds
// for bo.DataDir; otherwise it leaves them nil, for SQLite and the local spool.
// The batches service closes the store, and with it the pool.
func openFleetBatches(ctx context.Context, st config.Storage, bo *backends.Options) error {
	if st.Metadata.Kind != config.MetadataPostgres {
		return nil
	}
	dsn := os.Getenv(st.Metadata.DSNEnv)
	if dsn == "" {
		return fmt.Errorf("gateway: backends: batches: storage.metadata.dsn_env: $%s is not set", st.Metadata.DSNEnv)
	}
	// The files store's keyring: result rows are sealed like the files
	// they become.
	ring, err := envelope.Load(bo.DataDir)
	if err != nil {
		return fmt.Errorf("gateway: backends: batches: %w", err)
	}
	s, err := batches.OpenPostgresStore(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns})
	if err != nil {
		return fmt.Errorf("gateway: backends: %w", err)
	}
	bo.BatchStore, bo.BatchResults = s, batches.NewPostgresResults(s.Pool(), ring)
	return nil
}
