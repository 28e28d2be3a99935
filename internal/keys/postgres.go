package keys

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresStore is the key store in PostgreSQL, shared by every replica of
// a fleet and by the CLI. It is safe for concurrent use, and any number of
// processes may use one database at once: each write is one transaction,
// and the change counter (Version) is bumped, and a notification sent on
// NotifyChannel, by a trigger in that same transaction, so a change is
// announced exactly when it becomes visible.
type PostgresStore struct {
	pool *pgxpool.Pool
}

// NotifyChannel is the LISTEN/NOTIFY channel every key change is announced
// on (by trigger, in the writing transaction).
const NotifyChannel = "switchyard_keys"

// pgMigrations[i] brings the keys schema in PostgreSQL from version i to
// i+1 (component "keys", pgdb). Append only. Times are Unix nanoseconds,
// as in SQLite, so a Key round-trips to the nanosecond.
var pgMigrations = []string{
	// 1: the keys, the change counter, and the trigger that bumps it and
	// notifies listeners on every row written. seq orders keys created in
	// the same nanosecond (SQLite's rowid).
	`CREATE TABLE api_keys (
		seq         BIGINT GENERATED ALWAYS AS IDENTITY,
		id          TEXT PRIMARY KEY,
		hash        TEXT NOT NULL UNIQUE,
		prefix      TEXT NOT NULL,
		name        TEXT NOT NULL,
		tier        TEXT NOT NULL,
		created_at  BIGINT NOT NULL,
		revoked_at  BIGINT,
		expires_at  BIGINT,
		lineage     TEXT,
		replaced_by TEXT,
		rpm         BIGINT,
		tpm         BIGINT,
		models      TEXT
	);
	CREATE INDEX api_keys_chain ON api_keys ((COALESCE(lineage, id)), created_at);
	CREATE TABLE key_changes (
		id      INTEGER PRIMARY KEY CHECK (id = 1),
		version BIGINT NOT NULL
	);
	INSERT INTO key_changes (id, version) VALUES (1, 0);
	CREATE FUNCTION switchyard_keys_changed() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		UPDATE key_changes SET version = version + 1 WHERE id = 1;
		PERFORM pg_notify('` + NotifyChannel + `', '');
		RETURN NULL;
	END $$;
	CREATE TRIGGER api_keys_changed AFTER INSERT OR UPDATE OR DELETE ON api_keys
		FOR EACH ROW EXECUTE FUNCTION switchyard_keys_changed();`,
	// 2: a key chain's monthly spend budget (micro-dollars) and its alert
	// ratio (NULL: none, the default), as SQLite's migration 3.
	`ALTER TABLE api_keys ADD COLUMN monthly_budget BIGINT;
	ALTER TABLE api_keys ADD COLUMN budget_alert_ratio DOUBLE PRECISION;`,
}

// OpenPostgres connects to the database at dsn with pool sizing p and
// brings the keys schema up to date (pgdb.Open, component "keys").
func OpenPostgres(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, component, pgMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("keys: open: %w", err)
	}
	return &PostgresStore{pool: pool}, nil
}

// Close closes the store's connection pool.
func (s *PostgresStore) Close() error {
	s.pool.Close()
	return nil
}

// Create issues a new key with the tier's limits and access to every model.
func (s *PostgresStore) Create(ctx context.Context, name, tier string) (string, Key, error) {
	return s.Issue(ctx, Spec{Name: name, Tier: tier})
}

// Issue issues a new key and returns its secret (see SQLiteStore.Issue).
func (s *PostgresStore) Issue(ctx context.Context, sp Spec) (secret string, k Key, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		secret, k, err = pgInsertKey(ctx, tx, sp, "")
		return err
	})
	if err != nil {
		return "", Key{}, wrapErr("create", err)
	}
	return secret, k, nil
}

// wrapErr prefixes a database error; input errors (ErrInvalid, ErrNotFound)
// already say what they are.
func wrapErr(op string, err error) error {
	if errors.Is(err, ErrInvalid) || errors.Is(err, ErrNotFound) || strings.HasPrefix(err.Error(), "keys:") {
		return err
	}
	return fmt.Errorf("keys: %s: %w", op, err)
}

func pgInsertKey(ctx context.Context, tx pgx.Tx, sp Spec, lineage string) (string, Key, error) {
	k, secret, h, models, err := newKey(sp, lineage)
	if err != nil {
		return "", Key{}, err
	}
	if _, err := tx.Exec(ctx,
		`INSERT INTO api_keys (id, hash, prefix, name, tier, created_at, rpm, tpm, models, lineage, monthly_budget, budget_alert_ratio)
		 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`,
		k.ID, h, k.Prefix, k.Name, k.Tier, k.CreatedAt.UnixNano(),
		nullInt(k.RPM), nullInt(k.TPM), models, nullString(lineage), nullInt(k.MonthlyBudget), nullRatio(k.BudgetAlertRatio)); err != nil {
		return "", Key{}, fmt.Errorf("keys: create: %w", err)
	}
	return secret, k, nil
}

// List returns all keys, newest first, including revoked and expired ones.
func (s *PostgresStore) List(ctx context.Context) ([]Key, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY created_at DESC, seq DESC`)
	if err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	defer rows.Close()
	return collectKeys(rows)
}

// Lookup returns the active key whose secret is secret, or ErrNotFound.
// As in SQLite, only the secret's hash reaches the database.
func (s *PostgresStore) Lookup(ctx context.Context, secret string) (Key, error) {
	if !wellFormedSecret(secret) {
		return Key{}, ErrNotFound
	}
	return s.LookupHash(ctx, HashSecret(secret))
}

// LookupHash is Lookup by the SHA-256 of the secret.
func (s *PostgresStore) LookupHash(ctx context.Context, h [sha256.Size]byte) (Key, error) {
	k, err := scanKey(s.pool.QueryRow(ctx,
		`SELECT `+keyColumns+` FROM api_keys
		 WHERE hash = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`,
		hex.EncodeToString(h[:]), time.Now().UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: lookup: %w", err)
	}
	return k, nil
}

// LookupOwner returns the newest active key of the rotation chain whose
// LimitID is owner, or ErrNotFound.
func (s *PostgresStore) LookupOwner(ctx context.Context, owner string) (Key, error) {
	if owner == "" {
		return Key{}, ErrNotFound
	}
	k, err := scanKey(s.pool.QueryRow(ctx,
		`SELECT `+keyColumns+` FROM api_keys
		 WHERE COALESCE(lineage, id) = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
		 ORDER BY created_at DESC, seq DESC LIMIT 1`,
		owner, time.Now().UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: lookup owner: %w", err)
	}
	return k, nil
}

// Get returns the key named by its ID or its full secret, whatever its
// state, or an error wrapping ErrNotFound.
func (s *PostgresStore) Get(ctx context.Context, idOrSecret string) (Key, error) {
	column, value, label, err := keyRef("show", idOrSecret)
	if err != nil {
		return Key{}, err
	}
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = $1`, value))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("show %s: %w", label, ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: show %s: %w", label, err)
	}
	return k, nil
}

// Revoke revokes a key named by its ID or secret (see SQLiteStore.Revoke).
// Its trigger bumps Version and notifies every listening replica in the
// revoking transaction.
func (s *PostgresStore) Revoke(ctx context.Context, idOrSecret string) error {
	column, value, label, err := keyRef("revoke", idOrSecret)
	if err != nil {
		return err
	}
	// Only an active key's row is written (the condition is re-checked on
	// the row a concurrent revocation committed), so revoking twice moves
	// neither the first time nor the change counter; a revoked key still
	// counts as found.
	var found bool
	err = s.pool.QueryRow(ctx,
		`WITH u AS (UPDATE api_keys SET revoked_at = $2 WHERE `+column+` = $1 AND revoked_at IS NULL RETURNING 1)
		 SELECT EXISTS (SELECT 1 FROM u) OR EXISTS (SELECT 1 FROM api_keys WHERE `+column+` = $1)`,
		value, time.Now().UnixNano()).Scan(&found)
	if err != nil {
		return fmt.Errorf("keys: revoke %s: %w", label, err)
	}
	if !found {
		return fmt.Errorf("revoke %s: %w", label, ErrNotFound)
	}
	return nil
}

// Version returns the change counter, which the trigger bumps on every
// row written by any process. It only moves forward.
func (s *PostgresStore) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT version FROM key_changes WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("keys: version: %w", err)
	}
	return v, nil
}

// Rotate issues a replacement for an active key and keeps the old one
// working for grace (see SQLiteStore.Rotate). The old key's row is locked
// (FOR UPDATE) for the transaction, so two replicas rotating or revoking
// it at once are serialized and it is rotated at most once.
func (s *PostgresStore) Rotate(ctx context.Context, idOrSecret string, grace time.Duration) (secret string, k Key, err error) {
	column, value, label, err := keyRef("rotate", idOrSecret)
	if err != nil {
		return "", Key{}, err
	}
	if grace < 0 || grace > MaxGrace {
		return "", Key{}, invalidf("keys: rotate %s: grace period must be between 0 and %s", label, MaxGrace)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		old, err := scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = $1 FOR UPDATE`, value))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("rotate %s: %w", label, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("keys: rotate %s: %w", label, err)
		}
		now := time.Now()
		switch {
		case old.Revoked(), old.Expired(now):
			return fmt.Errorf("rotate %s: the key is revoked or expired: %w", label, ErrNotFound)
		case old.ReplacedBy != "":
			return invalidf("keys: rotate %s: already rotated; rotate its replacement %s", label, old.ReplacedBy)
		}
		secret, k, err = pgInsertKey(ctx, tx, Spec{Name: old.Name, Tier: old.Tier, RPM: old.RPM, TPM: old.TPM, Models: old.Models,
			MonthlyBudget: old.MonthlyBudget, BudgetAlertRatio: old.BudgetAlertRatio}, old.LimitID())
		if err != nil {
			return err
		}
		end := now.Add(grace).UnixNano()
		if _, err := tx.Exec(ctx,
			`UPDATE api_keys SET expires_at = LEAST(COALESCE(expires_at, $1), $1), replaced_by = $2 WHERE id = $3`,
			end, k.ID, old.ID); err != nil {
			return fmt.Errorf("keys: rotate %s: %w", label, err)
		}
		return nil
	})
	if err != nil {
		return "", Key{}, wrapErr("rotate "+label, err)
	}
	return secret, k, nil
}

// SetTier moves a key and its rotation chain to tier with the given custom
// limits (see SQLiteStore.SetTier).
func (s *PostgresStore) SetTier(ctx context.Context, idOrSecret, tier string, rpm, tpm int64) (Key, error) {
	tier = strings.TrimSpace(tier)
	if err := validate("tier", tier, maxTierLen); err != nil {
		return Key{}, err
	}
	if err := validateLimits(rpm, tpm); err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-tier", idOrSecret, `tier = $2, rpm = $3, tpm = $4`, tier, nullInt(rpm), nullInt(tpm))
}

// SetBudget sets the monthly spend budget (micro-dollars; 0: none) and its
// alert ratio (0: the default) of a key and its rotation chain (see
// SQLiteStore.SetBudget).
func (s *PostgresStore) SetBudget(ctx context.Context, idOrSecret string, budget int64, alertRatio float64) (Key, error) {
	if err := validateBudget(budget, alertRatio); err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-budget", idOrSecret, `monthly_budget = $2, budget_alert_ratio = $3`, nullInt(budget), nullRatio(alertRatio))
}

// SetModels replaces the model allow-list of a key and its rotation chain.
func (s *PostgresStore) SetModels(ctx context.Context, idOrSecret string, models []string) (Key, error) {
	enc, err := encodeModels(models)
	if err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-models", idOrSecret, `models = $2`, enc)
}

// updateChain applies set (whose parameters start at $2; $1 is the chain)
// to the named key's whole rotation chain and returns the named key.
func (s *PostgresStore) updateChain(ctx context.Context, op, idOrSecret, set string, args ...any) (Key, error) {
	column, value, label, err := keyRef(op, idOrSecret)
	if err != nil {
		return Key{}, err
	}
	var k Key
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = $1`, value))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s %s: %w", op, label, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("keys: %s %s: %w", op, label, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE api_keys SET `+set+` WHERE COALESCE(lineage, id) = $1`,
			append([]any{k.LimitID()}, args...)...); err != nil {
			return fmt.Errorf("keys: %s %s: %w", op, label, err)
		}
		k, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = $1`, k.ID))
		if err != nil {
			return fmt.Errorf("keys: %s %s: %w", op, label, err)
		}
		return nil
	})
	if err != nil {
		return Key{}, wrapErr(op+" "+label, err)
	}
	return k, nil
}

// Notify implements Notifier: pgdb.Notify on NotifyChannel, whose value
// arrives after every committed change and after each (re)connection of
// the listening connection. The channel is closed when ctx ends.
func (s *PostgresStore) Notify(ctx context.Context) <-chan struct{} {
	return pgdb.Notify(ctx, s.pool, NotifyChannel)
}
