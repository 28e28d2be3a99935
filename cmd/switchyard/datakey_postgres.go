package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// On PostgreSQL (storage.metadata.kind postgres) the wrapped data keys live
// in the stores' own rows, not in data_keys tables: each table below holds
// one per row. A key is wrapped with its object id as associated data, so
// each table says how its rows name their object (as the store that wrote
// them does: files.Store, responses' sealing, vector stores' chunkKeyID,
// batches' resultKeyObject; TestDatakeyPostgres reads every kind back
// through the stores after a rewrap).
type pgKeyTable struct {
	name    string   // for the output: component/table
	table   string   // the table
	pk      []string // its primary key columns (text)
	extra   []string // more columns the object id needs, selected as text
	wrapped string   // the wrapped data key column
	kek     string   // the column naming the wrapping KEK; "" when the table has none
	object  func(cols []string) string
}

var pgKeyTables = []pgKeyTable{
	{name: "files", table: "files", pk: []string{"id"}, wrapped: "wrapped", kek: "kek_id",
		object: func(c []string) string { return c[0] }},
	{name: "responses", table: "responses", pk: []string{"id"}, wrapped: "data_key", kek: "kek_id",
		object: func(c []string) string { return c[0] }},
	{name: "vectorstores/vector_store_files", table: "vector_store_files", pk: []string{"store_id", "file_id"}, extra: []string{"gen"},
		wrapped: "data_key", kek: "kek_id",
		object: func(c []string) string { return "vsf:" + c[0] + "/" + c[1] + "/" + c[2] }},
	{name: "batches/batch_result_keys", table: "batch_result_keys", pk: []string{"batch_id"}, wrapped: "wrapped",
		object: func(c []string) string { return "batch_results/" + c[0] }},
}

// pgRewrapBatch is how many rows one rewrap transaction locks: short
// transactions, so replicas writing the same tables never wait long.
const pgRewrapBatch = 200

// openDatakeyPG connects to the fleet's database. It runs no migrations:
// the schema belongs to the stores, and a table no replica has created yet
// is skipped.
func openDatakeyPG(ctx context.Context, st config.Storage) (*pgxpool.Pool, error) {
	dsn := os.Getenv(st.Metadata.DSNEnv)
	if dsn == "" {
		return nil, fmt.Errorf("datakey: storage.metadata.dsn_env names %s, which is not set", st.Metadata.DSNEnv)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgconn's parse errors can quote the DSN, password included.
		return nil, errors.New("datakey: the DSN does not parse as a postgres:// URL or key=value string")
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("datakey: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("datakey: PostgreSQL: %w", err)
	}
	return pool, nil
}

// eachPGKeyTable calls f with each key table that exists.
func eachPGKeyTable(ctx context.Context, pool *pgxpool.Pool, f func(t pgKeyTable) error) error {
	for _, t := range pgKeyTables {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t.table).Scan(&exists); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if !exists {
			continue
		}
		if err := f(t); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	return nil
}

// kekExpr is the SQL naming the KEK that wraps a row's key: its kek column,
// or the id inside the wrapped key (version byte, id length, id: see
// envelope.WrappedKEKID).
func (t pgKeyTable) kekExpr() string {
	if t.kek != "" {
		return t.kek
	}
	return fmt.Sprintf("convert_from(substring(%[1]s from 3 for get_byte(%[1]s, 1)), 'UTF8')", t.wrapped)
}

// pgKEKsInUse counts t's data keys by the KEK that wraps them.
func pgKEKsInUse(ctx context.Context, pool *pgxpool.Pool, t pgKeyTable) (map[string]int, error) {
	rows, err := pool.Query(ctx, fmt.Sprintf(`SELECT %s, count(*) FROM %s WHERE %s IS NOT NULL GROUP BY 1`,
		t.kekExpr(), pgx.Identifier{t.table}.Sanitize(), t.wrapped))
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[id] = n
	}
	return out, rows.Err()
}

// pgRewrap rewraps every data key of t not wrapped under ring's primary
// KEK, pgRewrapBatch rows a transaction, and returns how many it rewrapped.
// The rows are locked while rewrapped (FOR UPDATE), so a replica writing
// one meanwhile waits for the commit and its own write wins; rows a
// replica holds locked are skipped (SKIP LOCKED) rather than waited for,
// and left for a later run, as are keys a replica still on an older
// primary wraps meanwhile: pgKEKsInUse shows what remains. Only the
// wrapping changes, never the data key, so replicas' cached data keys stay
// valid and a run cut short loses nothing: run it again.
func pgRewrap(ctx context.Context, pool *pgxpool.Pool, ring *envelope.Keyring, t pgKeyTable) (int, error) {
	total := 0
	for {
		n, err := pgRewrapSome(ctx, pool, ring, t)
		total += n
		if err != nil || n < pgRewrapBatch {
			return total, err
		}
	}
}

func pgRewrapSome(ctx context.Context, pool *pgxpool.Pool, ring *envelope.Keyring, t pgKeyTable) (int, error) {
	primary := ring.PrimaryID()
	cols := append(append([]string{}, t.pk...), t.extra...)
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = pgx.Identifier{c}.Sanitize() + "::text"
	}
	table := pgx.Identifier{t.table}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT %s, %s FROM %s WHERE %s IS NOT NULL AND %s <> $1 LIMIT %d FOR UPDATE SKIP LOCKED`,
		strings.Join(sel, ", "), t.wrapped, table, t.wrapped, t.kekExpr(), pgRewrapBatch), primary)
	if err != nil {
		return 0, err
	}
	type row struct {
		cols []string
		w    []byte
	}
	var todo []row
	for rows.Next() {
		r := row{cols: make([]string, len(cols))}
		dst := make([]any, 0, len(cols)+1)
		for i := range r.cols {
			dst = append(dst, &r.cols[i])
		}
		if err := rows.Scan(append(dst, &r.w)...); err != nil {
			rows.Close()
			return 0, err
		}
		todo = append(todo, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	set, first := pgx.Identifier{t.wrapped}.Sanitize()+" = $1", 2
	if t.kek != "" {
		set, first = set+", "+pgx.Identifier{t.kek}.Sanitize()+" = $2", 3
	}
	where := make([]string, len(t.pk))
	for i, c := range t.pk {
		where[i] = fmt.Sprintf("%s = $%d", pgx.Identifier{c}.Sanitize(), first+i)
	}
	update := fmt.Sprintf(`UPDATE %s SET %s WHERE %s`, table, set, strings.Join(where, " AND "))
	for _, r := range todo {
		nw, _, err := ring.RewrapKey(t.object(r.cols), r.w)
		if err != nil {
			return 0, err
		}
		args := []any{nw}
		if t.kek != "" {
			kekID, err := envelope.WrappedKEKID(nw)
			if err != nil {
				return 0, err
			}
			args = append(args, kekID)
		}
		for _, v := range r.cols[:len(t.pk)] {
			args = append(args, v)
		}
		if _, err := tx.Exec(ctx, update, args...); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return len(todo), nil
}
