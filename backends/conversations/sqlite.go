package conversations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// DBFile is the conversations' own database inside the data directory:
// its writes never wait on the other services' stores.
const DBFile = "conversations.db"

// SQLiteStore is the SQLite Store: DATA_DIR/conversations.db in WAL mode.
// Wrapped data keys are kept in its data_keys table (envelope), so key
// rotation (switchyard datakey) finds them; deletes are checkpointed out
// of the WAL (sqlitedb.Eraser).
type SQLiteStore struct {
	db     *sql.DB
	eraser *sqlitedb.Eraser
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLiteStore opens (creating and migrating) dataDir/conversations.db.
// keys must hold the key-encryption keys of the data keys stored there.
func OpenSQLiteStore(ctx context.Context, dataDir string, keys *envelope.Keyring) (*SQLiteStore, error) {
	if dataDir == "" {
		return nil, errors.New("conversations: open store: empty data directory")
	}
	db, err := sqlitedb.Open(ctx, filepath.Join(dataDir, DBFile), "conversations", sqliteMigrations)
	if err != nil {
		return nil, fmt.Errorf("conversations: open store: %w", err)
	}
	if err := keys.Check(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("conversations: open store: %w", err)
	}
	return &SQLiteStore{db: db, eraser: sqlitedb.NewEraser(db)}, nil
}

// sqliteMigrations[i] brings the schema from version i to i+1 (versioned
// by sqlitedb as component "conversations"). Append only.
var sqliteMigrations = []string{
	`CREATE TABLE conversations (
		id         TEXT PRIMARY KEY,
		owner      TEXT NOT NULL,
		created_at INTEGER NOT NULL, -- Unix seconds
		metadata   BLOB NOT NULL     -- sealed metadata object
	) STRICT;
	CREATE TABLE conversation_items (
		seq             INTEGER PRIMARY KEY AUTOINCREMENT, -- the order items were added
		conversation_id TEXT NOT NULL,
		item_id         TEXT NOT NULL,
		body            BLOB NOT NULL, -- the sealed item
		UNIQUE (conversation_id, item_id)
	) STRICT;`,
	envelope.KeysMigration,
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

func putKey(ctx context.Context, tx *sql.Tx, objectID string, wrapped []byte) error {
	kekID, err := envelope.WrappedKEKID(wrapped)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO data_keys (object_id, kek_id, wrapped) VALUES (?, ?, ?)`, objectID, kekID, wrapped)
	return err
}

// Create is Store.Create: one transaction.
func (s *SQLiteStore) Create(ctx context.Context, c Row, items []ItemRow) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	defer tx.Rollback()
	if err := putKey(ctx, tx, c.ID, c.Key); err != nil {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO conversations (id, owner, created_at, metadata) VALUES (?, ?, ?, ?)`,
		c.ID, c.Owner, c.CreatedAt.Unix(), c.Metadata); err != nil {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	if err := s.insertItems(ctx, tx, c.ID, items); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	return nil
}

func (s *SQLiteStore) insertItems(ctx context.Context, tx *sql.Tx, id string, items []ItemRow) error {
	for _, it := range items {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM conversation_items WHERE conversation_id = ? AND item_id = ?`,
			id, it.ID).Scan(&n); err != nil {
			return fmt.Errorf("conversations: add items to %s: %w", id, err)
		}
		if n > 0 {
			return ErrDuplicateItem
		}
		err := putKey(ctx, tx, ItemKeyID(id, it.ID), it.Key)
		if err == nil {
			_, err = tx.ExecContext(ctx, `INSERT INTO conversation_items (conversation_id, item_id, body) VALUES (?, ?, ?)`,
				id, it.ID, it.Body)
		}
		if isUnique(err) {
			return ErrDuplicateItem
		}
		if err != nil {
			return fmt.Errorf("conversations: add items to %s: %w", id, err)
		}
	}
	return nil
}

// owns reports whether owner's conversation id exists, within q.
func owns(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, owner, id string) error {
	var n int
	if err := q.QueryRowContext(ctx, `SELECT count(*) FROM conversations WHERE id = ? AND owner = ?`, id, owner).Scan(&n); err != nil {
		return fmt.Errorf("conversations: %s: %w", id, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Get is Store.Get.
func (s *SQLiteStore) Get(ctx context.Context, owner, id string) (Row, error) {
	r := Row{ID: id, Owner: owner}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT c.created_at, c.metadata, k.wrapped FROM conversations c
		JOIN data_keys k ON k.object_id = c.id WHERE c.id = ? AND c.owner = ?`, id, owner).Scan(&created, &r.Metadata, &r.Key)
	if errors.Is(err, sql.ErrNoRows) {
		return Row{}, ErrNotFound
	}
	if err != nil {
		return Row{}, fmt.Errorf("conversations: get %s: %w", id, err)
	}
	r.CreatedAt = time.Unix(created, 0)
	return r, nil
}

// SetMetadata is Store.SetMetadata.
func (s *SQLiteStore) SetMetadata(ctx context.Context, owner, id string, metadata []byte) error {
	res, err := s.db.ExecContext(ctx, `UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ?`, metadata, id, owner)
	if err != nil {
		return fmt.Errorf("conversations: update %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("conversations: update %s: %w", id, err)
	} else if n == 0 {
		return ErrNotFound
	}
	// The old metadata's pages leave the WAL with the next checkpoint.
	s.erase(ctx)
	return nil
}

// Delete is Store.Delete.
func (s *SQLiteStore) Delete(ctx context.Context, owner, id string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM conversations WHERE id = ? AND owner = ?`, id, owner)
	if err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	} else if n == 0 {
		return ErrNotFound
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM conversation_items WHERE conversation_id = ?`, id); err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	// The conversation's key and its items' keys (ItemKeyID).
	if err := envelope.Delete(ctx, tx, id); err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	if err := envelope.DeletePrefix(ctx, tx, ItemKeyID(id, "")); err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	s.erase(ctx)
	return nil
}

// erase checkpoints deleted rows and keys out of the WAL. The delete has
// happened either way: a checkpoint held back by a reader leaves the old
// pages to the next delete.
func (s *SQLiteStore) erase(ctx context.Context) {
	_ = s.eraser.Erase(context.WithoutCancel(ctx))
}

// Append is Store.Append: one transaction.
func (s *SQLiteStore) Append(ctx context.Context, owner, id string, items []ItemRow, maxItems int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("conversations: add items to %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := owns(ctx, tx, owner, id); err != nil {
		return err
	}
	if maxItems > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM conversation_items WHERE conversation_id = ?`, id).Scan(&n); err != nil {
			return fmt.Errorf("conversations: add items to %s: %w", id, err)
		}
		if n+len(items) > maxItems {
			return ErrTooManyItems
		}
	}
	if err := s.insertItems(ctx, tx, id, items); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("conversations: add items to %s: %w", id, err)
	}
	return nil
}

// itemColumns reads an item with its key: an item whose key is gone is
// absent.
const itemColumns = `SELECT i.seq, i.item_id, i.body, k.wrapped FROM conversation_items i
	JOIN data_keys k ON k.object_id = i.conversation_id || '/' || i.item_id `

// List is Store.List, in one read transaction.
func (s *SQLiteStore) List(ctx context.Context, owner, id string, p Page) ([]ItemRow, bool, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, fmt.Errorf("conversations: list %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := owns(ctx, tx, owner, id); err != nil {
		return nil, false, err
	}
	cmp, order := ">", "ASC"
	if p.Desc {
		cmp, order = "<", "DESC"
	}
	where := `WHERE i.conversation_id = ?`
	args := []any{id}
	if p.After != "" {
		var seq int64
		err := tx.QueryRowContext(ctx, `SELECT seq FROM conversation_items WHERE conversation_id = ? AND item_id = ?`, id, p.After).Scan(&seq)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, ErrItemNotFound
		}
		if err != nil {
			return nil, false, fmt.Errorf("conversations: list %s: %w", id, err)
		}
		where += ` AND i.seq ` + cmp + ` ?`
		args = append(args, seq)
	}
	args = append(args, p.Limit+1)
	rows, err := tx.QueryContext(ctx, itemColumns+where+` ORDER BY i.seq `+order+` LIMIT ?`, args...)
	if err != nil {
		return nil, false, fmt.Errorf("conversations: list %s: %w", id, err)
	}
	out, err := scanItems(rows)
	if err != nil {
		return nil, false, fmt.Errorf("conversations: list %s: %w", id, err)
	}
	more := len(out) > p.Limit
	if more {
		out = out[:p.Limit]
	}
	return out, more, nil
}

func scanItems(rows *sql.Rows) ([]ItemRow, error) {
	defer rows.Close()
	var out []ItemRow
	for rows.Next() {
		var it ItemRow
		var seq int64
		if err := rows.Scan(&seq, &it.ID, &it.Body, &it.Key); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// Item is Store.Item.
func (s *SQLiteStore) Item(ctx context.Context, owner, id, itemID string) (ItemRow, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return ItemRow{}, fmt.Errorf("conversations: item of %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := owns(ctx, tx, owner, id); err != nil {
		return ItemRow{}, err
	}
	rows, err := tx.QueryContext(ctx, itemColumns+`WHERE i.conversation_id = ? AND i.item_id = ?`, id, itemID)
	if err != nil {
		return ItemRow{}, fmt.Errorf("conversations: item of %s: %w", id, err)
	}
	out, err := scanItems(rows)
	if err != nil {
		return ItemRow{}, fmt.Errorf("conversations: item of %s: %w", id, err)
	}
	if len(out) == 0 {
		return ItemRow{}, ErrItemNotFound
	}
	return out[0], nil
}

// DeleteItem is Store.DeleteItem.
func (s *SQLiteStore) DeleteItem(ctx context.Context, owner, id, itemID string) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := owns(ctx, tx, owner, id); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM conversation_items WHERE conversation_id = ? AND item_id = ?`, id, itemID)
	if err != nil {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	} else if n == 0 {
		return ErrItemNotFound
	}
	if err := envelope.Delete(ctx, tx, ItemKeyID(id, itemID)); err != nil {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	}
	s.erase(ctx)
	return nil
}

// All is Store.All: the count and sizes first, the content only within
// the limits, in one read transaction.
func (s *SQLiteStore) All(ctx context.Context, owner, id string, lim Limits) ([]ItemRow, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("conversations: items of %s: %w", id, err)
	}
	defer tx.Rollback()
	if err := owns(ctx, tx, owner, id); err != nil {
		return nil, err
	}
	var n, size int64
	if err := tx.QueryRowContext(ctx, `SELECT count(*), coalesce(sum(length(body) - ?), 0) FROM conversation_items WHERE conversation_id = ?`,
		lim.Overhead, id).Scan(&n, &size); err != nil {
		return nil, fmt.Errorf("conversations: items of %s: %w", id, err)
	}
	if n > int64(lim.MaxItems) || (lim.MaxBytes > 0 && size > lim.MaxBytes) {
		return nil, ErrTooLarge
	}
	rows, err := tx.QueryContext(ctx, itemColumns+`WHERE i.conversation_id = ? ORDER BY i.seq`, id)
	if err != nil {
		return nil, fmt.Errorf("conversations: items of %s: %w", id, err)
	}
	out, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("conversations: items of %s: %w", id, err)
	}
	return out, nil
}

// isUnique reports a UNIQUE constraint failure (a concurrent append of the
// same item id).
func isUnique(err error) bool {
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}
