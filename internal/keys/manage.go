package keys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxGrace bounds Rotate's grace period: a rotation is meant to retire the
// old key, not to mint a second long-lived one.
const MaxGrace = 30 * 24 * time.Hour

// Rotate issues a new key in place of an active one, named by its ID or
// secret, and keeps the old one working for grace (zero: it stops at once).
// The new key has the old one's name, tier, custom limits and model
// allow-list, and shares its rate-limit counters (see Key.LimitID).
//
// A key can be rotated once; rotate its replacement after that. The old key
// reports the new one's ID in ReplacedBy and the end of the grace period in
// ExpiresAt.
func (s *SQLiteStore) Rotate(ctx context.Context, idOrSecret string, grace time.Duration) (secret string, k Key, err error) {
	column, value, label, err := keyRef("rotate", idOrSecret)
	if err != nil {
		return "", Key{}, err
	}
	if grace < 0 || grace > MaxGrace {
		return "", Key{}, invalidf("keys: rotate %s: grace period must be between 0 and %s", label, MaxGrace)
	}
	// BEGIN IMMEDIATE (see dsn): no other writer can revoke or rotate the
	// key between the read and the writes.
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", Key{}, fmt.Errorf("keys: rotate %s: %w", label, err)
	}
	defer tx.Rollback()
	old, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = ?`, value))
	if errors.Is(err, sql.ErrNoRows) {
		return "", Key{}, fmt.Errorf("rotate %s: %w", label, ErrNotFound)
	}
	if err != nil {
		return "", Key{}, fmt.Errorf("keys: rotate %s: %w", label, err)
	}
	now := time.Now()
	switch {
	case old.Revoked(), old.Expired(now):
		return "", Key{}, fmt.Errorf("rotate %s: the key is revoked or expired: %w", label, ErrNotFound)
	case old.ReplacedBy != "":
		return "", Key{}, invalidf("keys: rotate %s: already rotated; rotate its replacement %s", label, old.ReplacedBy)
	}
	secret, k, err = insertKey(ctx, tx, Spec{Name: old.Name, Tier: old.Tier, RPM: old.RPM, TPM: old.TPM, Models: old.Models,
		MonthlyBudget: old.MonthlyBudget, BudgetAlertRatio: old.BudgetAlertRatio}, old.LimitID())
	if err != nil {
		return "", Key{}, err
	}
	if _, err := tx.ExecContext(ctx,
		`UPDATE api_keys SET expires_at = MIN(COALESCE(expires_at, ?1), ?1), replaced_by = ? WHERE id = ?`,
		now.Add(grace).UnixNano(), k.ID, old.ID); err != nil {
		return "", Key{}, fmt.Errorf("keys: rotate %s: %w", label, err)
	}
	if err := tx.Commit(); err != nil {
		return "", Key{}, fmt.Errorf("keys: rotate %s: %w", label, err)
	}
	return secret, k, nil
}

// SetTier moves a key, named by its ID or secret, to tier with the given
// custom limits (zero: the tier's). The change applies to the key's whole
// rotation chain, so a key and the replacement it shares counters with never
// disagree about their limits. It returns the updated key.
func (s *SQLiteStore) SetTier(ctx context.Context, idOrSecret, tier string, rpm, tpm int64) (Key, error) {
	tier = strings.TrimSpace(tier)
	if err := validate("tier", tier, maxTierLen); err != nil {
		return Key{}, err
	}
	if err := validateLimits(rpm, tpm); err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-tier", idOrSecret,
		`tier = ?, rpm = ?, tpm = ?`, tier, nullInt(rpm), nullInt(tpm))
}

// SetBudget sets the monthly spend budget (micro-dollars; 0: none) and its
// alert ratio (0: the default) of a key and its rotation chain. It returns
// the updated key.
func (s *SQLiteStore) SetBudget(ctx context.Context, idOrSecret string, budget int64, alertRatio float64) (Key, error) {
	if err := validateBudget(budget, alertRatio); err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-budget", idOrSecret,
		`monthly_budget = ?, budget_alert_ratio = ?`, nullInt(budget), nullRatio(alertRatio))
}

// SetModels replaces the model allow-list of a key (and its rotation chain);
// an empty list allows every model. It returns the updated key.
func (s *SQLiteStore) SetModels(ctx context.Context, idOrSecret string, models []string) (Key, error) {
	enc, err := encodeModels(models)
	if err != nil {
		return Key{}, err
	}
	return s.updateChain(ctx, "set-models", idOrSecret, `models = ?`, enc)
}

// updateChain applies set (an UPDATE's SET clause) to the named key and
// every key of its rotation chain, then returns the named key.
func (s *SQLiteStore) updateChain(ctx context.Context, op, idOrSecret, set string, args ...any) (Key, error) {
	column, value, label, err := keyRef(op, idOrSecret)
	if err != nil {
		return Key{}, err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Key{}, fmt.Errorf("keys: %s %s: %w", op, label, err)
	}
	defer tx.Rollback()
	k, err := scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = ?`, value))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("%s %s: %w", op, label, ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: %s %s: %w", op, label, err)
	}
	if _, err := tx.ExecContext(ctx,
		`UPDATE api_keys SET `+set+` WHERE COALESCE(lineage, id) = ?`, append(args, k.LimitID())...); err != nil {
		return Key{}, fmt.Errorf("keys: %s %s: %w", op, label, err)
	}
	k, err = scanKey(tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, k.ID))
	if err != nil {
		return Key{}, fmt.Errorf("keys: %s %s: %w", op, label, err)
	}
	if err := tx.Commit(); err != nil {
		return Key{}, fmt.Errorf("keys: %s %s: %w", op, label, err)
	}
	return k, nil
}
