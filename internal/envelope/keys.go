package envelope

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// KeysMigration creates the data_keys table, where a component keeps its
// objects' wrapped data keys in its own database: a component appends it
// to its migrations. object_id is the id the key is bound to (see
// NewDataKey); kek_id says which KEK wrapped it, so Rewrap finds the keys
// that rotation has yet to move.
const KeysMigration = `CREATE TABLE data_keys (
		object_id TEXT PRIMARY KEY,
		kek_id    TEXT NOT NULL,
		wrapped   BLOB NOT NULL
	) STRICT;
	CREATE INDEX data_keys_kek ON data_keys (kek_id);`

// ErrNoKey: the object has no data key (it was deleted).
var ErrNoKey = errors.New("envelope: no data key")

// DB is what the key functions need: an *sql.DB or an *sql.Tx, so a key is
// created and deleted in the transaction that writes or deletes its object.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Create makes objectID's data key and stores it wrapped.
func (k *Keyring) Create(ctx context.Context, db DB, objectID string) (*DataKey, error) {
	dk, w, err := k.NewDataKey(objectID)
	if err != nil {
		return nil, err
	}
	kekID, err := WrappedKEKID(w)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`,
		objectID, kekID, w); err != nil {
		return nil, fmt.Errorf("envelope: store data key of %s: %w", objectID, err)
	}
	return dk, nil
}

// Get returns objectID's data key, or an error wrapping ErrNoKey.
func (k *Keyring) Get(ctx context.Context, db DB, objectID string) (*DataKey, error) {
	var w []byte
	err := db.QueryRowContext(ctx, `SELECT wrapped FROM data_keys WHERE object_id = ?`, objectID).Scan(&w)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("envelope: data key of %s: %w", objectID, ErrNoKey)
	}
	if err != nil {
		return nil, fmt.Errorf("envelope: data key of %s: %w", objectID, err)
	}
	return k.Unwrap(objectID, w)
}

// Delete deletes objectID's data key, if any: its content is unreadable
// from then on, wherever a copy of it is. The caller runs sqlitedb.Erase
// after the transaction commits so the key leaves the database's files.
func Delete(ctx context.Context, db DB, objectID string) error {
	if _, err := db.ExecContext(ctx, `DELETE FROM data_keys WHERE object_id = ?`, objectID); err != nil {
		return fmt.Errorf("envelope: delete data key of %s: %w", objectID, err)
	}
	return nil
}

// DeletePrefix deletes the data keys of every object whose id starts with
// prefix (which must not be empty).
func DeletePrefix(ctx context.Context, db DB, prefix string) error {
	if prefix == "" {
		return errors.New("envelope: delete data keys: empty prefix")
	}
	// A range rather than LIKE: ids may hold '%' or '_'. prefix+"\xff"
	// bounds every UTF-8 string starting with prefix.
	if _, err := db.ExecContext(ctx, `DELETE FROM data_keys WHERE object_id >= ? AND object_id < ?`,
		prefix, prefix+"\xff"); err != nil {
		return fmt.Errorf("envelope: delete data keys of %s*: %w", prefix, err)
	}
	return nil
}

// rewrapBatch bounds one rewrap transaction, so rotation on a live
// database never holds the write lock for long.
const rewrapBatch = 200

// Rewrap rewraps every data key in db not wrapped under the primary KEK,
// in small transactions, and returns how many it rewrapped. It fails on a
// key wrapped under a KEK the keyring lacks (ErrUnknownKEK).
func (k *Keyring) Rewrap(ctx context.Context, db *sql.DB) (int, error) {
	total := 0
	for {
		n, err := k.rewrapSome(ctx, db)
		total += n
		if err != nil || n < rewrapBatch {
			return total, err
		}
	}
}

func (k *Keyring) rewrapSome(ctx context.Context, db *sql.DB) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("envelope: rewrap: %w", err)
	}
	defer tx.Rollback()
	primary := k.PrimaryID()
	rows, err := tx.QueryContext(ctx, `SELECT object_id, wrapped FROM data_keys WHERE kek_id <> ? LIMIT ?`,
		primary, rewrapBatch)
	if err != nil {
		return 0, fmt.Errorf("envelope: rewrap: %w", err)
	}
	type row struct {
		id string
		w  []byte
	}
	var todo []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.w); err != nil {
			rows.Close()
			return 0, fmt.Errorf("envelope: rewrap: %w", err)
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("envelope: rewrap: %w", err)
	}
	for _, r := range todo {
		nw, _, err := k.RewrapKey(r.id, r.w)
		if err != nil {
			return 0, err
		}
		kekID, err := WrappedKEKID(nw)
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE data_keys SET kek_id = ?, wrapped = ? WHERE object_id = ?`,
			kekID, nw, r.id); err != nil {
			return 0, fmt.Errorf("envelope: rewrap: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("envelope: rewrap: %w", err)
	}
	return len(todo), nil
}

// KEKsInUse returns how many data keys in db each KEK wraps.
func KEKsInUse(ctx context.Context, db *sql.DB) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT kek_id, COUNT(*) FROM data_keys GROUP BY kek_id`)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
		out[id] = n
	}
	return out, rows.Err()
}

// ErrMissingKEK: a database holds data keys wrapped under KEKs the keyring
// does not have, so their objects cannot be read.
var ErrMissingKEK = errors.New("envelope: data keys are wrapped under key-encryption keys that are not configured")

// Check verifies that the keyring holds every KEK that db's data keys are
// wrapped under. A store calls it as it opens, so that a replaced or lost
// key (an unset $SWITCHYARD_DATA_KEY, a new data directory key file) stops
// the start rather than failing every read of the objects stored before.
func (k *Keyring) Check(ctx context.Context, db *sql.DB) error {
	inUse, err := KEKsInUse(ctx, db)
	if err != nil {
		return err
	}
	var missing []string
	for id, n := range inUse {
		if _, ok := k.lookup(id); !ok {
			missing = append(missing, fmt.Sprintf("%s (%d data keys)", id, n))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	return fmt.Errorf("%w: %s; the keys come from %s, which holds %s",
		ErrMissingKEK, strings.Join(missing, ", "), k.source, strings.Join(k.IDs(), ", "))
}
