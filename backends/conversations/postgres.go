package conversations

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// PostgresComponent is the pgdb component (schema version table) of the
// Postgres store.
const PostgresComponent = "conversations"

// PostgresMigrations[i] brings the Postgres schema from version i to i+1
// (pgdb.Open). Append only.
var PostgresMigrations = []string{
	// 1: conversations and their items, each row with its wrapped data key:
	// a row cannot exist without its key nor a key without its row. Items
	// go with their conversation (ON DELETE CASCADE); seq is the order
	// they were added.
	`CREATE TABLE conversations (
		id         text PRIMARY KEY,
		owner      text NOT NULL,
		created_at bigint NOT NULL, -- Unix seconds
		metadata   bytea NOT NULL,  -- sealed metadata object
		kek_id     text NOT NULL,
		data_key   bytea NOT NULL
	);
	CREATE TABLE conversation_items (
		seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
		item_id         text NOT NULL,
		body            bytea NOT NULL, -- the sealed item
		kek_id          text NOT NULL,
		data_key        bytea NOT NULL,
		UNIQUE (conversation_id, item_id)
	);`,
}

// PostgresStore is the Store of a fleet: every replica reads and writes one
// PostgreSQL database, so a conversation continues whichever replica
// serves its next turn. Deleted rows leave the tables at once; their old
// tuples stay in the server's files until VACUUM reuses the space, and in
// the WAL and backups for their retention: the data key is deleted with
// the row, so what stays there is ciphertext whose key only such copies
// still hold.
type PostgresStore struct {
	pool *pgxpool.Pool
	own  bool
}

var _ Store = (*PostgresStore)(nil)

// OpenPostgresStore connects to dsn (pgdb.Open) and migrates the
// conversations tables. Close closes the pool.
func OpenPostgresStore(ctx context.Context, dsn string, p pgdb.Pool) (*PostgresStore, error) {
	pool, err := pgdb.Open(ctx, dsn, PostgresComponent, PostgresMigrations, p)
	if err != nil {
		return nil, fmt.Errorf("conversations: open store: %w", err)
	}
	return &PostgresStore{pool: pool, own: true}, nil
}

// Close closes the pool if the store opened it.
func (s *PostgresStore) Close() error {
	if s.own {
		s.pool.Close()
	}
	return nil
}

// tx runs f in a transaction, retried while the database is briefly
// unreachable (pgdb.Retry).
func (s *PostgresStore) tx(ctx context.Context, opts pgx.TxOptions, f func(pgx.Tx) error) error {
	return pgdb.Retry(ctx, func() error {
		return pgx.BeginTxFunc(ctx, s.pool, opts, f)
	})
}

var readOnly = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}

// Create is Store.Create.
func (s *PostgresStore) Create(ctx context.Context, c Row, items []ItemRow) error {
	kekID, err := envelope.WrappedKEKID(c.Key)
	if err != nil {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	attempt := 0
	err = s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		attempt++
		if _, err := tx.Exec(ctx, `INSERT INTO conversations (id, owner, created_at, metadata, kek_id, data_key)
			VALUES ($1, $2, $3, $4, $5, $6)`, c.ID, c.Owner, c.CreatedAt.Unix(), c.Metadata, kekID, c.Key); err != nil {
			return err
		}
		return insertItems(ctx, tx, c.ID, items)
	})
	if attempt > 1 && pgdb.IsUniqueViolation(err) {
		// A commit lost in transit: this conversation, stored.
		return nil
	}
	if err != nil && !errors.Is(err, ErrDuplicateItem) {
		return fmt.Errorf("conversations: create %s: %w", c.ID, err)
	}
	return err
}

func insertItems(ctx context.Context, tx pgx.Tx, id string, items []ItemRow) error {
	for _, it := range items {
		kekID, err := envelope.WrappedKEKID(it.Key)
		if err != nil {
			return err
		}
		// ON CONFLICT DO NOTHING rather than a unique violation, which
		// would abort the transaction before ErrDuplicateItem is known.
		tag, err := tx.Exec(ctx, `INSERT INTO conversation_items (conversation_id, item_id, body, kek_id, data_key)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (conversation_id, item_id) DO NOTHING`, id, it.ID, it.Body, kekID, it.Key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrDuplicateItem
		}
	}
	return nil
}

// lockOwned locks owner's conversation id for the transaction (appends to
// one conversation are serialized), or returns ErrNotFound.
func lockOwned(ctx context.Context, tx pgx.Tx, owner, id string, lock bool) error {
	q := `SELECT 1 FROM conversations WHERE id = $1 AND owner = $2`
	if lock {
		q += ` FOR UPDATE`
	}
	var one int
	err := tx.QueryRow(ctx, q, id, owner).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// Get is Store.Get.
func (s *PostgresStore) Get(ctx context.Context, owner, id string) (Row, error) {
	r := Row{ID: id, Owner: owner}
	var created int64
	err := pgdb.Retry(ctx, func() error {
		return s.pool.QueryRow(ctx, `SELECT created_at, metadata, data_key FROM conversations WHERE id = $1 AND owner = $2`,
			id, owner).Scan(&created, &r.Metadata, &r.Key)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, ErrNotFound
	}
	if err != nil {
		return Row{}, fmt.Errorf("conversations: get %s: %w", id, err)
	}
	r.CreatedAt = unix(created)
	return r, nil
}

// SetMetadata is Store.SetMetadata.
func (s *PostgresStore) SetMetadata(ctx context.Context, owner, id string, metadata []byte) error {
	var n int64
	err := pgdb.Retry(ctx, func() error {
		tag, err := s.pool.Exec(ctx, `UPDATE conversations SET metadata = $3 WHERE id = $1 AND owner = $2`, id, owner, metadata)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("conversations: update %s: %w", id, err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return nil
}

// Delete is Store.Delete: the items go with the conversation (ON DELETE
// CASCADE), keys with their rows.
func (s *PostgresStore) Delete(ctx context.Context, owner, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM conversations WHERE id = $1 AND owner = $2`, id, owner)
	if err != nil {
		return fmt.Errorf("conversations: delete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// Append is Store.Append.
func (s *PostgresStore) Append(ctx context.Context, owner, id string, items []ItemRow, maxItems int) error {
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := lockOwned(ctx, tx, owner, id, true); err != nil {
			return err
		}
		if maxItems > 0 {
			var n int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM conversation_items WHERE conversation_id = $1`, id).Scan(&n); err != nil {
				return err
			}
			if n+len(items) > maxItems {
				return ErrTooManyItems
			}
		}
		return insertItems(ctx, tx, id, items)
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrDuplicateItem) && !errors.Is(err, ErrTooManyItems) {
		return fmt.Errorf("conversations: add items to %s: %w", id, err)
	}
	return err
}

func scanPgItems(rows pgx.Rows) ([]ItemRow, error) {
	defer rows.Close()
	var out []ItemRow
	for rows.Next() {
		var it ItemRow
		if err := rows.Scan(&it.ID, &it.Body, &it.Key); err != nil {
			return nil, err
		}
		out = append(out, it)
	}
	return out, rows.Err()
}

// List is Store.List, in one snapshot.
func (s *PostgresStore) List(ctx context.Context, owner, id string, p Page) (out []ItemRow, more bool, err error) {
	cmp, order := ">", "ASC"
	if p.Desc {
		cmp, order = "<", "DESC"
	}
	err = s.tx(ctx, readOnly, func(tx pgx.Tx) error {
		if err := lockOwned(ctx, tx, owner, id, false); err != nil {
			return err
		}
		var rows pgx.Rows
		var err error
		if p.After == "" {
			rows, err = tx.Query(ctx, `SELECT item_id, body, data_key FROM conversation_items WHERE conversation_id = $1
				ORDER BY seq `+order+` LIMIT $2`, id, p.Limit+1)
		} else {
			var seq int64
			err = tx.QueryRow(ctx, `SELECT seq FROM conversation_items WHERE conversation_id = $1 AND item_id = $2`, id, p.After).Scan(&seq)
			if errors.Is(err, pgx.ErrNoRows) {
				return ErrItemNotFound
			}
			if err != nil {
				return err
			}
			rows, err = tx.Query(ctx, `SELECT item_id, body, data_key FROM conversation_items WHERE conversation_id = $1
				AND seq `+cmp+` $2 ORDER BY seq `+order+` LIMIT $3`, id, seq, p.Limit+1)
		}
		if err != nil {
			return err
		}
		out, err = scanPgItems(rows)
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrItemNotFound) {
		return nil, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("conversations: list %s: %w", id, err)
	}
	if len(out) > p.Limit {
		return out[:p.Limit], true, nil
	}
	return out, false, nil
}

// Item is Store.Item.
func (s *PostgresStore) Item(ctx context.Context, owner, id, itemID string) (ItemRow, error) {
	var out []ItemRow
	err := s.tx(ctx, readOnly, func(tx pgx.Tx) error {
		if err := lockOwned(ctx, tx, owner, id, false); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT item_id, body, data_key FROM conversation_items WHERE conversation_id = $1 AND item_id = $2`, id, itemID)
		if err != nil {
			return err
		}
		out, err = scanPgItems(rows)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return ItemRow{}, err
	}
	if err != nil {
		return ItemRow{}, fmt.Errorf("conversations: item of %s: %w", id, err)
	}
	if len(out) == 0 {
		return ItemRow{}, ErrItemNotFound
	}
	return out[0], nil
}

// DeleteItem is Store.DeleteItem.
func (s *PostgresStore) DeleteItem(ctx context.Context, owner, id, itemID string) error {
	err := s.tx(ctx, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if err := lockOwned(ctx, tx, owner, id, false); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM conversation_items WHERE conversation_id = $1 AND item_id = $2`, id, itemID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return ErrItemNotFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrItemNotFound) {
		return fmt.Errorf("conversations: delete item of %s: %w", id, err)
	}
	return err
}

// All is Store.All: the count and sizes first (length() reads no TOASTed
// content), the content only within the limits, in one snapshot.
func (s *PostgresStore) All(ctx context.Context, owner, id string, lim Limits) ([]ItemRow, error) {
	var out []ItemRow
	err := s.tx(ctx, readOnly, func(tx pgx.Tx) error {
		if err := lockOwned(ctx, tx, owner, id, false); err != nil {
			return err
		}
		var n, size int64
		if err := tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(length(body)::bigint - $2), 0)::bigint
			FROM conversation_items WHERE conversation_id = $1`, id, lim.Overhead).Scan(&n, &size); err != nil {
			return err
		}
		if n > int64(lim.MaxItems) || (lim.MaxBytes > 0 && size > lim.MaxBytes) {
			return ErrTooLarge
		}
		rows, err := tx.Query(ctx, `SELECT item_id, body, data_key FROM conversation_items WHERE conversation_id = $1 ORDER BY seq`, id)
		if err != nil {
			return err
		}
		out, err = scanPgItems(rows)
		return err
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrTooLarge) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("conversations: items of %s: %w", id, err)
	}
	return out, nil
}
