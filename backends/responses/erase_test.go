package responses

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// sqliteDB is the database under st, a SQLite store.
func sqliteDB(st *store) *sql.DB { return st.raw.(*SQLiteStore).db }

// dbFilesContaining names the files of the database at path (main, -wal,
// -shm) whose bytes contain needle.
func dbFilesContaining(t *testing.T, path string, needle []byte) []string {
	t.Helper()
	var found []string
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, needle) {
			found = append(found, filepath.Base(p))
		}
	}
	return found
}

// TestDeleteErases: a stored response's prompt is never in the database's
// files in the clear, and once the response is deleted through the API its
// data key is gone from them too, so no copy of the ciphertext (a backup,
// a stale page) can be opened again.
func TestDeleteErases(t *testing.T) {
	e := newEnv(t, envOptions{})
	dir := t.TempDir()
	svc, err := New(t.Context(), Options{DataDir: dir, Gateway: e.rec, Now: e.clock.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	srv := httptest.NewServer(withCaller(svc.Handler()))
	defer srv.Close()
	e.srv = srv

	const marker = "erase-me-prompt-5b2e77d1"
	r := e.create("alice", `{"model":"m","input":"`+marker+`"}`)
	id := r.Get("id").Str
	path := filepath.Join(dir, dbFile)
	if f := dbFilesContaining(t, path, []byte(marker)); len(f) > 0 {
		t.Errorf("the prompt is in the clear in %v", f)
	}
	// The API still returns it byte for byte.
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+id, "")
	if status != 200 || string(body) != r.Raw {
		t.Fatalf("GET: %d %s", status, body)
	}
	status, body = e.do("alice", http.MethodGet, "/v1/responses/"+id+"/input_items", "")
	if status != 200 || !strings.Contains(string(body), marker) {
		t.Fatalf("input_items: %d %s", status, body)
	}

	var wrapped []byte
	if err := sqliteDB(svc.store).QueryRow(`SELECT wrapped FROM data_keys WHERE object_id = ?`, id).Scan(&wrapped); err != nil {
		t.Fatal(err)
	}
	if status, body := e.do("alice", http.MethodDelete, "/v1/responses/"+id, ""); status != 200 {
		t.Fatalf("DELETE: %d %s", status, body)
	}
	var n int
	if err := sqliteDB(svc.store).QueryRow(`SELECT count(*) FROM data_keys WHERE object_id = ?`, id).Scan(&n); err != nil || n != 0 {
		t.Fatalf("data key after delete: %d, %v", n, err)
	}
	for _, needle := range [][]byte{wrapped, []byte(marker)} {
		if f := dbFilesContaining(t, path, needle); len(f) > 0 {
			t.Errorf("after delete, %q is still in %v", needle[:8], f)
		}
	}
}

// TestSweepErases: an expired response's data key goes with it.
func TestSweepErases(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m","input":"x"}`)
	e.clock.Add(31 * 24 * time.Hour)
	if n, err := e.svc.store.sweep(t.Context(), e.clock.Now()); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	_, err := e.svc.store.keys.Get(t.Context(), sqliteDB(e.svc.store), r.Get("id").Str)
	if !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("data key after sweep: %v", err)
	}
}

// TestLegacyRowsSealedOnOpen: rows written before encryption at rest are
// sealed when the store opens, and read as before.
func TestLegacyRowsSealedOnOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, dbFile)
	old, err := sqlitedb.Open(ctx, path, "responses", migrations[:1])
	if err != nil {
		t.Fatal(err)
	}
	const marker = "legacy-prompt-0c9d1e"
	now := time.Now()
	body := `{"id":"resp_legacy","object":"response"}`
	input := `[{"type":"message","role":"user","content":"` + marker + `"}]`
	if _, err := old.Exec(`INSERT INTO responses (id, owner, previous_id, created_at, expires_at, body, input, output)
		VALUES ('resp_legacy', 'alice', '', ?, ?, ?, ?, ?)`, now.Unix(), now.Add(time.Hour).Unix(), []byte(body), []byte(input), []byte("[]")); err != nil {
		t.Fatal(err)
	}
	old.Close()
	if f := dbFilesContaining(t, path, []byte(marker)); len(f) == 0 {
		t.Fatal("the legacy row is not in the file: the test proves nothing")
	}

	st, err := openStore(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	if f := dbFilesContaining(t, path, []byte(marker)); len(f) > 0 {
		t.Errorf("after open, the legacy prompt is still in the clear in %v", f)
	}
	b, err := st.body(ctx, "alice", "resp_legacy", now)
	if err != nil || string(b) != body {
		t.Fatalf("body: %s, %v", b, err)
	}
	chain, err := st.chain(ctx, "alice", "resp_legacy", now, 10, 1<<20)
	if err != nil || len(chain) != 1 || string(chain[0].Input) != input {
		t.Fatalf("chain: %+v, %v", chain, err)
	}
	var sealed int
	if err := sqliteDB(st).QueryRow(`SELECT sealed FROM responses`).Scan(&sealed); err != nil || sealed != 1 {
		t.Errorf("sealed = %d, %v", sealed, err)
	}
}

// TestKeyGoneMidRead: a response whose data key is deleted between the
// row read and the key read (a concurrent delete) is not found, and an
// ancestor in that state ends the chain there, as a deleted one does.
func TestKeyGoneMidRead(t *testing.T) {
	ctx := context.Background()
	st, err := openStore(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	now := time.Now()
	for i, id := range []string{"resp_a", "resp_b", "resp_c"} {
		prev := ""
		if i > 0 {
			prev = []string{"resp_a", "resp_b"}[i-1]
		}
		if err := st.put(ctx, &stored{ID: id, Owner: "alice", PreviousID: prev, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			Body: []byte(`{}`), Input: []byte(`["` + id + `"]`), Output: []byte(`[]`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sqliteDB(st).Exec(`DELETE FROM data_keys WHERE object_id IN ('resp_b', 'resp_c')`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.body(ctx, "alice", "resp_c", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("body without its key: %v, want ErrNotFound", err)
	}
	if _, err := st.chain(ctx, "alice", "resp_c", now, 10, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("chain of a response without its key: %v, want ErrNotFound", err)
	}
	if _, err := sqliteDB(st).Exec(`DELETE FROM data_keys WHERE object_id = 'resp_a'`); err != nil {
		t.Fatal(err)
	}
	// A newer response with its key: the chain is it alone.
	if err := st.put(ctx, &stored{ID: "resp_d", Owner: "alice", PreviousID: "resp_c", CreatedAt: now, ExpiresAt: now.Add(time.Hour),
		Body: []byte(`{}`), Input: []byte(`["resp_d"]`), Output: []byte(`[]`)}); err != nil {
		t.Fatal(err)
	}
	chain, err := st.chain(ctx, "alice", "resp_d", now, 10, 0)
	if err != nil || len(chain) != 1 || chain[0].ID != "resp_d" {
		t.Errorf("chain past an ancestor without its key: %+v, %v; want resp_d alone", chain, err)
	}
}
