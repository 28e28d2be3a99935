// Package keys owns API keys: issuing, hashing, storing and looking them up
// on the hot path.
//
// Keys are operator-issued client credentials sent as
// "Authorization: Bearer <key>". A key looks like "sk-sy-" followed by 43
// random base62 characters. Only its SHA-256 hash is stored; the plain key is
// shown once, by Create, and never again. Listings identify a key by its ID
// ("key_" + 16 hex characters) and a short display prefix.
//
// Storage is behind interfaces declared by their consumers: the Cache reads
// a Source (below, in cache.go), the admin API and the CLI manage keys
// through their own (backends/admin.KeyStore), and keystest is the
// conformance suite every implementation passes. SQLiteStore is the first
// implementation: <dataDir>/switchyard.db in WAL mode, so the CLI
// ("switchyard keys ...") and a running gateway can use it at the same time.
// The gateway should answer requests through a Cache rather than the store,
// and run the Cache's Watch, which polls the store's change counter
// (Version, kept by triggers on every write) and drops the cache when it
// moves: that is how a revocation made by another process reaches it.
//
// Keys may carry their own rate limits (RPM, TPM) and a model allow-list.
// Rotate issues a replacement and lets the old key work until a grace
// period ends (ExpiresAt); a key and its replacements share one LimitID, the
// identity rate limits are counted on.
package keys

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// ErrNotFound is returned for a key that is unknown or revoked. Callers
// authenticating a request must not distinguish the two: both are simply
// "invalid API key".
var ErrNotFound = errors.New("keys: not found")

// ErrInvalid is matched (errors.Is) by errors about the caller's input: a
// bad name, tier, limit, model list or grace period, or a key that cannot
// be rotated again. Their messages are meant for the operator.
var ErrInvalid = errors.New("keys: invalid input")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// Key is a stored API key. It never holds the secret itself.
type Key struct {
	ID        string
	Prefix    string // first 12 characters of the secret, for display only
	Name      string
	Tier      string
	CreatedAt time.Time
	RevokedAt time.Time // zero if active
	// ExpiresAt, when not zero, is when the key stops working: Rotate sets
	// it on the key it replaces, to the end of the grace period.
	ExpiresAt time.Time
	// Lineage is the ID of the first key of a rotation chain, "" for a key
	// that was not issued by Rotate. See LimitID.
	Lineage string
	// ReplacedBy is the ID of the key Rotate issued in this one's place.
	ReplacedBy string
	// RPM and TPM, when positive, replace the tier's requests and tokens
	// per minute for this key (enterprise keys).
	RPM, TPM int64
	// Models, when not empty, lists the only model ids the key may use.
	Models []string
	// MonthlyBudget, when positive, is what the key (its rotation chain)
	// may spend in a calendar month (UTC), in micro-dollars; the gateway
	// refuses its requests once it is spent. BudgetAlertRatio is the
	// fraction of it past which a warning is logged (0:
	// DefaultBudgetAlertRatio).
	MonthlyBudget    int64
	BudgetAlertRatio float64
}

// DefaultBudgetAlertRatio is the budget alert threshold of a key that sets
// none.
const DefaultBudgetAlertRatio = 0.8

// AlertRatio is the key's budget alert threshold.
func (k Key) AlertRatio() float64 {
	if k.BudgetAlertRatio > 0 {
		return k.BudgetAlertRatio
	}
	return DefaultBudgetAlertRatio
}

// Revoked reports whether the key has been revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Expired reports whether the key's grace period (after Rotate) is over at
// time now.
func (k Key) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// LimitID is the identity rate limits are counted against: the ID of the
// first key of the key's rotation chain. A rotated key and its replacement
// share it, so rotating neither resets a key's counters nor doubles its
// allowance while both keys work during the grace period.
func (k Key) LimitID() string {
	if k.Lineage != "" {
		return k.Lineage
	}
	return k.ID
}

// AllowsModel reports whether the key may use the model with canonical id
// model: every model when the key has no allow-list.
func (k Key) AllowsModel(model string) bool {
	return len(k.Models) == 0 || slices.Contains(k.Models, model)
}

const (
	// dbFile is the name of the database file inside the data directory.
	dbFile = "switchyard.db"

	maxNameLen  = 200 // characters
	maxTierLen  = 200 // characters
	maxModels   = 1000
	maxModelLen = 200       // characters
	maxLimit    = 1<<32 - 1 // the ratelimit API's requests_per_unit is a uint32

)

// SQLiteStore is the key store kept in SQLite in the data directory. It is
// safe for concurrent use, and several SQLiteStores (in one or several
// processes) may use the same data directory at once.
type SQLiteStore struct {
	db *sql.DB
}

// OpenSQLite opens, creating if necessary, the key store in dataDir and brings its
// schema up to date. A new data directory is created with mode 0700 and a new
// database file with mode 0600; existing ones keep their permissions. WAL
// lets readers (the gateway's lookups) proceed while a writer (the CLI
// issuing or revoking a key) holds the write lock; see sqlitedb.
func OpenSQLite(ctx context.Context, dataDir string) (*SQLiteStore, error) {
	if dataDir == "" {
		return nil, errors.New("keys: open: empty data directory")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("keys: open: %w", err)
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dir, dbFile), component, migrations)
	if err != nil {
		return nil, fmt.Errorf("keys: open: %w", err)
	}
	return &SQLiteStore{db: db}, nil
}

// component is this package's row in schema_versions: switchyard.db is
// shared, and each package versions its own tables (sqlitedb).
const component = "keys"

// migrations[i] brings the keys schema from version i to i+1. Append only:
// never edit a migration that has shipped, because existing databases have
// already run it.
var migrations = []string{
	// 1: initial schema. rpm, tpm and models are per-key overrides for later
	// work (NULL means "use the tier's value"); models is a JSON array of
	// allowed model names.
	`CREATE TABLE api_keys (
		id         TEXT PRIMARY KEY,
		hash       TEXT NOT NULL UNIQUE, -- hex SHA-256 of the secret
		prefix     TEXT NOT NULL,
		name       TEXT NOT NULL,
		tier       TEXT NOT NULL,
		created_at INTEGER NOT NULL,     -- Unix nanoseconds
		revoked_at INTEGER,              -- Unix nanoseconds; NULL while active
		rpm        INTEGER,
		tpm        INTEGER,
		models     TEXT
	) STRICT`,
	// 2: rotation (expires_at, lineage, replaced_by) and the change counter
	// that running gateways poll to learn about revocations and other
	// changes made by other processes. Triggers keep the counter honest
	// whoever writes, including binaries that know nothing about it.
	`ALTER TABLE api_keys ADD COLUMN expires_at INTEGER; -- Unix nanoseconds; NULL: never
	ALTER TABLE api_keys ADD COLUMN lineage TEXT;       -- first key of the rotation chain; NULL: itself
	ALTER TABLE api_keys ADD COLUMN replaced_by TEXT;   -- the key Rotate issued in its place
	CREATE TABLE key_changes (
		id      INTEGER PRIMARY KEY CHECK (id = 1),
		version INTEGER NOT NULL
	) STRICT;
	INSERT INTO key_changes (id, version) VALUES (1, 0);
	CREATE TRIGGER api_keys_insert AFTER INSERT ON api_keys
		BEGIN UPDATE key_changes SET version = version + 1 WHERE id = 1; END;
	CREATE TRIGGER api_keys_update AFTER UPDATE ON api_keys
		BEGIN UPDATE key_changes SET version = version + 1 WHERE id = 1; END;
	CREATE TRIGGER api_keys_delete AFTER DELETE ON api_keys
		BEGIN UPDATE key_changes SET version = version + 1 WHERE id = 1; END;`,
	// 3: monthly spend budgets (micro-dollars; NULL: none) and their alert
	// threshold (NULL: the default).
	`ALTER TABLE api_keys ADD COLUMN monthly_budget INTEGER;
	ALTER TABLE api_keys ADD COLUMN budget_alert_ratio REAL;`,
}

// Close closes the database.
func (s *SQLiteStore) Close() error {
	return s.db.Close()
}

// Spec describes a key to issue.
type Spec struct {
	Name, Tier string
	// RPM and TPM, when positive, replace the tier's limits for this key.
	RPM, TPM int64
	// Models, when not empty, is the key's model allow-list.
	Models []string
	// MonthlyBudget and BudgetAlertRatio: see Key.
	MonthlyBudget    int64
	BudgetAlertRatio float64
}

// Create issues a new key with the tier's limits and access to every model.
// See Issue.
func (s *SQLiteStore) Create(ctx context.Context, name, tier string) (secret string, k Key, err error) {
	return s.Issue(ctx, Spec{Name: name, Tier: tier})
}

// Issue issues a new key and returns its secret, which is not stored and
// cannot be recovered: the caller must hand it to the operator now.
func (s *SQLiteStore) Issue(ctx context.Context, sp Spec) (secret string, k Key, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", Key{}, fmt.Errorf("keys: create: %w", err)
	}
	defer tx.Rollback()
	secret, k, err = insertKey(ctx, tx, sp, "")
	if err != nil {
		return "", Key{}, err
	}
	if err := tx.Commit(); err != nil {
		return "", Key{}, fmt.Errorf("keys: create: %w", err)
	}
	return secret, k, nil
}

// insertKey adds a new key to the database inside tx.
func insertKey(ctx context.Context, tx *sql.Tx, sp Spec, lineage string) (string, Key, error) {
	k, secret, h, models, err := newKey(sp, lineage)
	if err != nil {
		return "", Key{}, err
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO api_keys (id, hash, prefix, name, tier, created_at, rpm, tpm, models, lineage, monthly_budget, budget_alert_ratio)
		 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		k.ID, h, k.Prefix, k.Name, k.Tier, k.CreatedAt.UnixNano(),
		nullInt(k.RPM), nullInt(k.TPM), models, nullString(lineage), nullInt(k.MonthlyBudget), nullRatio(k.BudgetAlertRatio)); err != nil {
		return "", Key{}, fmt.Errorf("keys: create: %w", err)
	}
	return secret, k, nil
}

// newKey validates sp and makes a new key of it: the Key, its secret, the
// hex SHA-256 to store, and the models column (NULL for none). Every store
// issues keys through it.
func newKey(sp Spec, lineage string) (k Key, secret, hash string, models any, err error) {
	name, tier := strings.TrimSpace(sp.Name), strings.TrimSpace(sp.Tier)
	if err := validate("name", name, maxNameLen); err != nil {
		return Key{}, "", "", nil, err
	}
	if err := validate("tier", tier, maxTierLen); err != nil {
		return Key{}, "", "", nil, err
	}
	if err := validateLimits(sp.RPM, sp.TPM); err != nil {
		return Key{}, "", "", nil, err
	}
	if err := validateBudget(sp.MonthlyBudget, sp.BudgetAlertRatio); err != nil {
		return Key{}, "", "", nil, err
	}
	models, err = encodeModels(sp.Models)
	if err != nil {
		return Key{}, "", "", nil, err
	}
	secret, err = newSecret()
	if err != nil {
		return Key{}, "", "", nil, err
	}
	id, err := newID()
	if err != nil {
		return Key{}, "", "", nil, err
	}
	h := HashSecret(secret)
	// Round-trip through Unix nanoseconds so that the returned CreatedAt is
	// exactly what List and Lookup will report later.
	now := time.Unix(0, time.Now().UnixNano()).UTC()
	k = Key{
		ID:        id,
		Prefix:    secret[:displayPrefixLen],
		Name:      name,
		Tier:      tier,
		CreatedAt: now,
		Lineage:   lineage,
		RPM:       sp.RPM,
		TPM:       sp.TPM,
		Models:    slices.Clone(sp.Models),

		MonthlyBudget:    sp.MonthlyBudget,
		BudgetAlertRatio: sp.BudgetAlertRatio,
	}
	if len(k.Models) == 0 {
		k.Models = nil
	}
	return k, secret, hex.EncodeToString(h[:]), models, nil
}

func validate(field, v string, maxLen int) error {
	switch {
	case v == "":
		return invalidf("keys: %s must not be empty", field)
	case !utf8.ValidString(v):
		return invalidf("keys: %s must be valid UTF-8", field)
	case utf8.RuneCountInString(v) > maxLen:
		return invalidf("keys: %s must be at most %d characters", field, maxLen)
	case strings.ContainsFunc(v, isControl):
		return invalidf("keys: %s must not contain control characters", field)
	}
	return nil
}

// isControl reports control characters (C0, DEL, C1) and the bidirectional
// formatting ones: names are printed in terminals, tables and logs, where
// they could move the cursor, forge lines or reorder what is shown.
func isControl(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r)
}

func validateLimits(rpm, tpm int64) error {
	if rpm < 0 || tpm < 0 || rpm > maxLimit || tpm > maxLimit {
		return invalidf("keys: custom limits must be between 0 (the tier's) and %d", int64(maxLimit))
	}
	return nil
}

// encodeModels renders an allow-list for the models column: NULL for none.
func encodeModels(models []string) (any, error) {
	if len(models) == 0 {
		return nil, nil
	}
	if len(models) > maxModels {
		return nil, invalidf("keys: at most %d models per key", maxModels)
	}
	for _, m := range models {
		if err := validate("model", m, maxModelLen); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(models)
	if err != nil {
		return nil, fmt.Errorf("keys: models: %w", err)
	}
	return string(b), nil
}

func nullInt(v int64) any {
	if v <= 0 {
		return nil
	}
	return v
}

func nullRatio(v float64) any {
	if v <= 0 {
		return nil
	}
	return v
}

// MaxMonthlyBudget bounds a budget: a billion dollars, in micro-dollars.
const MaxMonthlyBudget = 1e9 * 1e6

func validateBudget(budget int64, ratio float64) error {
	if budget < 0 || budget > MaxMonthlyBudget {
		return invalidf("keys: the monthly budget must be between 0 (none) and 1000000000 dollars")
	}
	if !(ratio >= 0 && ratio <= 1) {
		return invalidf("keys: the budget alert ratio must be between 0 (the default, %g) and 1", DefaultBudgetAlertRatio)
	}
	return nil
}

func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// keyColumns is what every query that returns keys selects, in the order
// scanKey reads.
const keyColumns = `id, prefix, name, tier, created_at, revoked_at, expires_at, lineage, replaced_by, rpm, tpm, models,
	monthly_budget, budget_alert_ratio`

type scanner interface{ Scan(dest ...any) error }

// keyRows is a query's rows as database/sql and pgx both return them.
type keyRows interface {
	scanner
	Next() bool
	Err() error
}

// collectKeys reads every key of rows (List, in both stores).
func collectKeys(rows keyRows) ([]Key, error) {
	var out []Key
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("keys: list: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	return out, nil
}

func scanKey(row scanner) (Key, error) {
	var (
		k                           Key
		created                     int64
		revoked, expires, rpm, tpm  sql.NullInt64
		lineage, replacedBy, models sql.NullString
		budget                      sql.NullInt64
		alertRatio                  sql.NullFloat64
	)
	if err := row.Scan(&k.ID, &k.Prefix, &k.Name, &k.Tier, &created, &revoked, &expires,
		&lineage, &replacedBy, &rpm, &tpm, &models, &budget, &alertRatio); err != nil {
		return Key{}, err
	}
	k.CreatedAt = time.Unix(0, created).UTC()
	if revoked.Valid {
		k.RevokedAt = time.Unix(0, revoked.Int64).UTC()
	}
	if expires.Valid {
		k.ExpiresAt = time.Unix(0, expires.Int64).UTC()
	}
	k.Lineage, k.ReplacedBy = lineage.String, replacedBy.String
	k.RPM, k.TPM = rpm.Int64, tpm.Int64
	k.MonthlyBudget, k.BudgetAlertRatio = budget.Int64, alertRatio.Float64
	if models.Valid && models.String != "" {
		if err := json.Unmarshal([]byte(models.String), &k.Models); err != nil {
			return Key{}, fmt.Errorf("key %s: models: %w", k.ID, err)
		}
		if len(k.Models) == 0 {
			k.Models = nil
		}
	}
	return k, nil
}

// List returns all keys, newest first, including revoked and expired ones.
func (s *SQLiteStore) List(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys ORDER BY created_at DESC, rowid DESC`)
	if err != nil {
		return nil, fmt.Errorf("keys: list: %w", err)
	}
	defer rows.Close()
	return collectKeys(rows)
}

// Lookup returns the active key whose secret is secret, or ErrNotFound if
// there is none or it has been revoked or has expired.
//
// The secret is hashed before it touches the database, so the index search
// and string comparisons SQLite performs run on the hash. Their timing can at
// most reveal how much of an attacker-chosen input's SHA-256 matches a stored
// hash, which gives no help in finding a secret.
func (s *SQLiteStore) Lookup(ctx context.Context, secret string) (Key, error) {
	if !wellFormedSecret(secret) {
		return Key{}, ErrNotFound
	}
	return s.LookupHash(ctx, HashSecret(secret))
}

// LookupHash is Lookup by the SHA-256 of the secret (HashSecret), the only
// form in which the store keeps it; the Cache calls it with the hash it is
// keyed by.
func (s *SQLiteStore) LookupHash(ctx context.Context, h [sha256.Size]byte) (Key, error) {
	k, err := scanKey(s.db.QueryRowContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys
		 WHERE hash = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`,
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
// LimitID is owner, or ErrNotFound when every key of it is revoked or
// expired. Backends act for an owner (docs/backends-design.md): its batch
// lines and responses stop working when its keys do.
func (s *SQLiteStore) LookupOwner(ctx context.Context, owner string) (Key, error) {
	if owner == "" {
		return Key{}, ErrNotFound
	}
	k, err := scanKey(s.db.QueryRowContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys
		 WHERE (id = ? OR lineage = ?) AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)
		 ORDER BY created_at DESC, rowid DESC LIMIT 1`,
		owner, owner, time.Now().UnixNano()))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, ErrNotFound
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: lookup owner: %w", err)
	}
	return k, nil
}

// Get returns the key named by its ID or its full secret, whatever its
// state (active, revoked or expired). It returns an error wrapping
// ErrNotFound if there is no such key.
func (s *SQLiteStore) Get(ctx context.Context, idOrSecret string) (Key, error) {
	column, value, label, err := keyRef("show", idOrSecret)
	if err != nil {
		return Key{}, err
	}
	k, err := scanKey(s.db.QueryRowContext(ctx,
		`SELECT `+keyColumns+` FROM api_keys WHERE `+column+` = ?`, value))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, fmt.Errorf("show %s: %w", label, ErrNotFound)
	}
	if err != nil {
		return Key{}, fmt.Errorf("keys: show %s: %w", label, err)
	}
	return k, nil
}

// keyRef maps a key ID or a full secret to the column and value that find
// it, and a label that is safe to print (never the whole secret).
func keyRef(op, idOrSecret string) (column, value, label string, err error) {
	switch {
	case wellFormedSecret(idOrSecret):
		h := HashSecret(idOrSecret)
		return "hash", hex.EncodeToString(h[:]), idOrSecret[:displayPrefixLen] + "…", nil
	case wellFormedID(idOrSecret):
		return "id", idOrSecret, idOrSecret, nil
	}
	// Do not echo the argument: it may be a mistyped secret.
	return "", "", "", fmt.Errorf("%s: argument is neither a key ID (%s…) nor a full key: %w",
		op, idPrefix, ErrNotFound)
}

// Revoke revokes a key, named either by its ID or by its full secret. It
// returns an error wrapping ErrNotFound if no such key exists. Revoking an
// already revoked key succeeds and keeps the original revocation time.
//
// Every change bumps the store's change counter (Version), which a Cache
// started with Watch polls; that is how a revocation made here reaches
// running gateways within one poll interval.
func (s *SQLiteStore) Revoke(ctx context.Context, idOrSecret string) error {
	column, value, label, err := keyRef("revoke", idOrSecret)
	if err != nil {
		return err
	}
	// COALESCE keeps the first revocation time. SQLite counts a matched row
	// as changed even when the value stays the same, so RowsAffected still
	// tells "exists" from "unknown".
	res, err := s.db.ExecContext(ctx,
		`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE `+column+` = ?`,
		time.Now().UnixNano(), value)
	if err != nil {
		return fmt.Errorf("keys: revoke %s: %w", label, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("keys: revoke %s: %w", label, err)
	}
	if n == 0 {
		return fmt.Errorf("revoke %s: %w", label, ErrNotFound)
	}
	return nil
}

// Version returns the store's change counter, which every insert, update
// and delete of a key increments (by trigger, so writers need not
// cooperate). Processes poll it to learn that their cached view is stale.
func (s *SQLiteStore) Version(ctx context.Context) (int64, error) {
	var v int64
	if err := s.db.QueryRowContext(ctx, `SELECT version FROM key_changes WHERE id = 1`).Scan(&v); err != nil {
		return 0, fmt.Errorf("keys: version: %w", err)
	}
	return v, nil
}
