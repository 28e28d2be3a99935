package gateway

import (
	"context"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/controlplane/routingstore"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// routingMaxConns bounds the routing store's PostgreSQL pool.
const routingMaxConns = 2

// useRoutingStore gives cp the store of its routing overlay (the admin
// API's drains and routing changes) before its first snapshot, and returns
// the function that closes it: PostgreSQL when storage.metadata is
// postgres (shared by every control-plane replica), else the key database
// in dataDir; with neither, the overlay stays in memory.
func useRoutingStore(ctx context.Context, cp *controlplane.Server, st config.Storage, dataDir string) (func(), error) {
	switch {
	case st.Metadata.Kind == config.MetadataPostgres:
		dsn, err := storageDSN(st.Metadata)
		if err != nil {
			return nil, err
		}
		// One row read a second and the odd write: two connections (plus
		// the listening one) are plenty, whatever the other stores get.
		s, err := routingstore.OpenPostgres(ctx, dsn, pgdb.Pool{MaxConns: routingMaxConns})
		if err != nil {
			return nil, err
		}
		cp.SetRoutingStore(s)
		return func() { _ = s.Close() }, nil
	case dataDir != "":
		s, err := routingstore.OpenSQLite(ctx, dataDir)
		if err != nil {
			return nil, err
		}
		cp.SetRoutingStore(s)
		return func() { _ = s.Close() }, nil
	}
	return func() {}, nil
}
