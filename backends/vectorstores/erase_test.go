package vectorstores

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// dbFilesContaining names those of the service database's files (main,
// -wal, -shm) whose bytes contain needle.
func dbFilesContaining(t *testing.T, e *env, needle []byte) []string {
	t.Helper()
	var seq int
	var name, path string
	if err := e.svc.testDB().QueryRow(`PRAGMA database_list`).Scan(&seq, &name, &path); err != nil {
		t.Fatal(err)
	}
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
			found = append(found, p)
		}
	}
	return found
}

// TestChunksSealedAndDetachErases: chunk text is stored only sealed,
// searches return it unchanged, and detaching the file or deleting the
// store deletes the chunks' data key at once, before the sweeper deletes
// the chunks themselves.
func TestChunksSealedAndDetachErases(t *testing.T) {
	e := newEnv(t)
	const marker = "zebrafishmarker"
	drop := e.upload("alice", "drop.txt", "the secret word is "+marker+" and nothing else")
	keep := e.upload("alice", "keep.txt", "apples and oranges")
	st := e.createStore("alice", `{"file_ids":["`+drop+`","`+keep+`"]}`)
	id := st.Get("id").Str
	base := "/v1/vector_stores/" + id
	if f := dbFilesContaining(t, e, []byte(marker)); len(f) > 0 {
		t.Errorf("chunk text in the clear in %v", f)
	}
	page := e.ok("alice", http.MethodPost, base+"/search", `{"query":"`+marker+`"}`, "VectorStoreSearchResultsPage")
	if !strings.Contains(page.Raw, "the secret word is "+marker) {
		t.Fatalf("search: %s", page.Raw)
	}

	var gen int64
	if err := e.svc.testDB().QueryRow(`SELECT gen FROM store_files WHERE store_id = ? AND file_id = ?`, id, drop).Scan(&gen); err != nil {
		t.Fatal(err)
	}
	kid := chunkKeyID(id, drop, gen)
	var wrapped []byte
	if err := e.svc.testDB().QueryRow(`SELECT wrapped FROM data_keys WHERE object_id = ?`, kid).Scan(&wrapped); err != nil {
		t.Fatal(err)
	}
	e.ok("alice", http.MethodDelete, base+"/files/"+drop, "", "DeleteVectorStoreFileResponse")
	// The chunks are still there until the sweep, but nothing opens them.
	var left int
	if err := e.svc.testDB().QueryRow(`SELECT COUNT(*) FROM chunks WHERE store_id = ? AND file_id = ?`, id, drop).Scan(&left); err != nil || left == 0 {
		t.Fatalf("chunks before the sweep: %d, %v", left, err)
	}
	if _, err := e.svc.keys.Get(t.Context(), e.svc.testDB(), kid); !errors.Is(err, envelope.ErrNoKey) {
		t.Errorf("data key after detach: %v", err)
	}
	if f := dbFilesContaining(t, e, wrapped); len(f) > 0 {
		t.Errorf("the detached file's data key is still in %v", f)
	}
	// The other file is still searchable.
	page = e.ok("alice", http.MethodPost, base+"/search", `{"query":"apples"}`, "VectorStoreSearchResultsPage")
	if !strings.Contains(page.Raw, "apples and oranges") {
		t.Fatalf("search after detach: %s", page.Raw)
	}

	e.ok("alice", http.MethodDelete, base, "", "DeleteVectorStoreResponse")
	var keys int
	if err := e.svc.testDB().QueryRow(`SELECT COUNT(*) FROM data_keys`).Scan(&keys); err != nil || keys != 0 {
		t.Errorf("data keys after deleting the store: %d, %v", keys, err)
	}
	e.svc.sweep(t.Context())
	if n := e.chunkCount(); n != 0 {
		t.Errorf("%d chunks left after the sweep", n)
	}
}

// TestLegacyChunksSealedOnOpen: chunks stored in the clear by an earlier
// binary are sealed when the service opens, and still searchable.
func TestLegacyChunksSealedOnOpen(t *testing.T) {
	e := newEnv(t)
	const marker = "quokkamarker"
	f := e.upload("alice", "a.txt", "legacy words "+marker)
	st := e.createStore("alice", `{"file_ids":["`+f+`"]}`)
	id := st.Get("id").Str
	// Make the chunks what an earlier binary left: plaintext, no key.
	if _, err := e.svc.testDB().Exec(`UPDATE chunks SET text = 'legacy words ' || ?, sealed_text = NULL`, marker); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.testDB().Exec(`DELETE FROM data_keys`); err != nil {
		t.Fatal(err)
	}
	// Plaintext rows are read as they are.
	page := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", `{"query":"`+marker+`"}`, "VectorStoreSearchResultsPage")
	if !strings.Contains(page.Raw, "legacy words "+marker) {
		t.Fatalf("search of plaintext chunks: %s", page.Raw)
	}
	if err := e.svc.store.(*SQLiteStore).sealLegacy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if f := dbFilesContaining(t, e, []byte(marker)); len(f) > 0 {
		t.Errorf("after sealing, legacy chunk text is still in the clear in %v", f)
	}
	page = e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", `{"query":"`+marker+`"}`, "VectorStoreSearchResultsPage")
	if !strings.Contains(page.Raw, "legacy words "+marker) {
		t.Fatalf("search after sealing: %s", page.Raw)
	}
}
