// Package routingstore keeps the control plane's routing overlay (the admin
// API's drained providers and per-model routing overrides, see
// controlplane.RoutingStore) where every control-plane replica and restart
// finds it: in the key database under the data directory (SQLite, embedded
// mode) or in PostgreSQL (fleet mode), as one row holding the overlay and
// its version, replaced by compare-and-set on the version.
package routingstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// component is this package's schema component, in SQLite's
// schema_versions and in pgdb.
const component = "routing"

// dbFile is the key database in the data directory (internal/keys), which
// the overlay shares: one file to back up and to mount.
const dbFile = "switchyard.db"

// migrations[i] brings the SQLite schema from version i to i+1. Append only.
var migrations = []string{
	// 1: the overlay, one row, as JSON, and its version.
	`CREATE TABLE routing_overlay (
		id      INTEGER PRIMARY KEY CHECK (id = 1),
		version INTEGER NOT NULL,
		overlay TEXT NOT NULL
	);
	INSERT INTO routing_overlay (id, version, overlay) VALUES (1, 0, '{}');`,
}

// SQLiteStore keeps the overlay in the key database of a data directory.
// Several processes may share it.
type SQLiteStore struct {
	db *sql.DB
}

// OpenSQLite opens, creating if necessary, the overlay's table in the key
// database under dataDir.
func OpenSQLite(ctx context.Context, dataDir string) (*SQLiteStore, error) {
	if dataDir == "" {
		return nil, errors.New("routingstore: open: empty data directory")
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dataDir, dbFile), component, migrations)
	if err != nil {
		return nil, fmt.Errorf("routingstore: open: %w", err)
	}
	return &SQLiteStore{db: db}, nil
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// Load implements controlplane.RoutingStore.
func (s *SQLiteStore) Load(ctx context.Context) (controlplane.RoutingOverlay, int64, error) {
	var v int64
	var raw string
	if err := s.db.QueryRowContext(ctx, `SELECT version, overlay FROM routing_overlay WHERE id = 1`).Scan(&v, &raw); err != nil {
		return controlplane.RoutingOverlay{}, 0, fmt.Errorf("routingstore: load: %w", err)
	}
	return decode(raw, v)
}

// Save implements controlplane.RoutingStore: one UPDATE conditioned on the
// version, so of two replicas saving on the same version one wins and the
// other gets ErrStale.
func (s *SQLiteStore) Save(ctx context.Context, prev int64, o controlplane.RoutingOverlay) (int64, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return 0, fmt.Errorf("routingstore: save: %w", err)
	}
	var v int64
	err = s.db.QueryRowContext(ctx,
		`UPDATE routing_overlay SET version = version + 1, overlay = ? WHERE id = 1 AND version = ? RETURNING version`,
		string(raw), prev).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("routingstore: save at version %d: %w", prev, controlplane.ErrStale)
	}
	if err != nil {
		return 0, fmt.Errorf("routingstore: save: %w", err)
	}
	return v, nil
}

func decode(raw string, v int64) (controlplane.RoutingOverlay, int64, error) {
	var o controlplane.RoutingOverlay
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return controlplane.RoutingOverlay{}, 0, fmt.Errorf("routingstore: load: version %d: %w", v, err)
	}
	return o, v, nil
}
