package routingstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// NotifyChannel is the LISTEN/NOTIFY channel every overlay change is
// announced on (by trigger, in the saving transaction).
const NotifyChannel = "switchyard_routing"

// pgMigrations[i] brings the PostgreSQL schema (component "routing") from
// version i to i+1. Append only.
var pgMigrations = []string{
	// 1: the overlay row and the trigger announcing its changes.
	`CREATE TABLE routing_overlay (
		id      INTEGER PRIMARY KEY CHECK (id = 1),
		version BIGINT NOT NULL,
		overlay TEXT NOT NULL
	);
	INSERT INTO routing_overlay (id, version, overlay) VALUES (1, 0, '{}');
	CREATE FUNCTION switchyard_routing_changed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM pg_notify('` + NotifyChannel + `', NEW.version::text);
		RETURN NULL;
	END $$;
	CREATE TRIGGER routing_overlay_changed AFTER UPDATE ON routing_overlay
		FOR EACH ROW EXECUTE FUNCTION switchyard_routing_changed();`,
}

// PostgresStore keeps the overlay in PostgreSQL, shared by every
// control-plane replica of a fleet. A Save is one conditional UPDATE, and
// its trigger notifies every listening replica when it commits.
type PostgresStore struct {
	pool *pgxpool.Pool
}

// OpenPostgres connects to dsn with pool sizing p and brings the schema up
// to date (pgdb.Open, component "routing").
func OpenPostgres(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, component, pgMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("routingstore: open: %w", err)
	}
	return &PostgresStore{pool: pool}, nil
}

// Close closes the connection pool.
func (s *PostgresStore) Close() error {
	s.pool.Close()
	return nil
}

// Load implements controlplane.RoutingStore.
func (s *PostgresStore) Load(ctx context.Context) (controlplane.RoutingOverlay, int64, error) {
	var v int64
	var raw string
	if err := s.pool.QueryRow(ctx, `SELECT version, overlay FROM routing_overlay WHERE id = 1`).Scan(&v, &raw); err != nil {
		return controlplane.RoutingOverlay{}, 0, fmt.Errorf("routingstore: load: %w", err)
	}
	return decode(raw, v)
}

// Save implements controlplane.RoutingStore. The UPDATE's condition is
// re-checked on the row a concurrent Save committed, so exactly one of two
// Saves on the same version wins.
func (s *PostgresStore) Save(ctx context.Context, prev int64, o controlplane.RoutingOverlay) (int64, error) {
	raw, err := json.Marshal(o)
	if err != nil {
		return 0, fmt.Errorf("routingstore: save: %w", err)
	}
	var v int64
	err = s.pool.QueryRow(ctx,
		`UPDATE routing_overlay SET version = version + 1, overlay = $1 WHERE id = 1 AND version = $2 RETURNING version`,
		string(raw), prev).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("routingstore: save at version %d: %w", prev, controlplane.ErrStale)
	}
	if err != nil {
		return 0, fmt.Errorf("routingstore: save: %w", err)
	}
	return v, nil
}

// Notify implements controlplane.RoutingNotifier: pgdb.Notify on
// NotifyChannel, whose value arrives after every committed Save and after
// each (re)connection of the listening connection. The channel is closed
// when ctx ends.
func (s *PostgresStore) Notify(ctx context.Context) <-chan struct{} {
	return pgdb.Notify(ctx, s.pool, NotifyChannel)
}
