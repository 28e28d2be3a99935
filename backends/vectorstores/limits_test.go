package vectorstores

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestChunkLimits: a store holds at most MaxStoreChunks chunks and an
// owner's stores at most MaxOwnerChunks; a file that would go past either
// fails with last_error naming the limit and keeps no chunks, and what was
// indexed before stays searchable.
func TestChunkLimits(t *testing.T) {
	const static = `"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":100,"chunk_overlap_tokens":0}}`
	var doc strings.Builder
	for i := range 60 {
		fmt.Fprintf(&doc, "Paragraph %d tells of lighthouses, harbours and the tides of the northern sea.\n", i)
	}
	text := doc.String()

	// k: the chunks one such file makes.
	probe := newEnv(t)
	k := 0
	for ch := newChunker(strings.NewReader(text), probe.svc.tok, 100, 0, MaxFileTokens); ; k++ {
		_, ok, err := ch.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
	}
	if k < 3 {
		t.Fatalf("the test file makes %d chunks, want several", k)
	}

	// A store fits one file and a bit; the owner, three files and a bit.
	e := newEnv(t, func(o *Options) {
		o.MaxStoreChunks = int64(k + k/2)
		o.MaxOwnerChunks = int64(3*k + k/2)
	})
	fileStatus := func(owner, store, file string) (string, string, string) {
		fo := e.ok(owner, http.MethodGet, "/v1/vector_stores/"+store+"/files/"+file, "", "VectorStoreFileObject")
		return fo.Get("status").Str, fo.Get("last_error.code").Str, fo.Get("last_error.message").Str
	}
	newStore := func(owner string, ids ...string) string {
		return e.createStore(owner, `{"file_ids":`+idsJSON(ids...)+`,`+static+`}`).Get("id").Str
	}

	a, b := e.upload("alice", "a.txt", text), e.upload("alice", "b.txt", text)
	s1 := newStore("alice", a)
	if st, _, msg := fileStatus("alice", s1, a); st != StatusCompleted {
		t.Fatalf("first file: %s %s", st, msg)
	}
	e.ok("alice", http.MethodPost, "/v1/vector_stores/"+s1+"/files", `{"file_id":"`+b+`",`+static+`}`, "VectorStoreFileObject")
	e.wait("alice", s1)
	st, code, msg := fileStatus("alice", s1, b)
	if st != StatusFailed || code != codeInvalid || !strings.Contains(msg, fmt.Sprintf("limit of %d chunks", k+k/2)) {
		t.Fatalf("file past the store's limit: %s %s %q", st, code, msg)
	}
	var left int
	if err := e.svc.testDB().QueryRowContext(t.Context(), `SELECT COUNT(*) FROM chunks WHERE file_id = ?`, b).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the failed file kept %d chunks (%v)", left, err)
	}
	res := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+s1+"/search", `{"query":"lighthouses"}`, "VectorStoreSearchResultsPage")
	if res.Get("data.#").Int() == 0 || res.Get("data.0.file_id").Str != a {
		t.Fatalf("search after a refused file: %s", res.Raw)
	}

	// Across stores: the owner's total. Two more stores of one file each
	// fit (3k chunks); a fourth file does not, whichever store it goes to.
	c, d, f := e.upload("alice", "c.txt", text), e.upload("alice", "d.txt", text), e.upload("alice", "f.txt", text)
	s2, s3 := newStore("alice", c), newStore("alice", d)
	for _, x := range []struct{ s, f string }{{s2, c}, {s3, d}} {
		if st, _, msg := fileStatus("alice", x.s, x.f); st != StatusCompleted {
			t.Fatalf("file within the owner's limit: %s %s", st, msg)
		}
	}
	s4 := newStore("alice", f)
	st, code, msg = fileStatus("alice", s4, f)
	if st != StatusFailed || code != codeInvalid || !strings.Contains(msg, fmt.Sprintf("limit of %d chunks in all", 3*k+k/2)) {
		t.Fatalf("file past the owner's limit: %s %s %q", st, code, msg)
	}

	// Another owner has its own quota.
	g := e.upload("bob", "g.txt", text)
	s5 := newStore("bob", g)
	if st, _, msg := fileStatus("bob", s5, g); st != StatusCompleted {
		t.Fatalf("another owner's file: %s %s", st, msg)
	}

	// Detaching a file makes room again (the failed file is attached
	// again: an attached file, failed or not, is left as it is).
	e.ok("alice", http.MethodDelete, "/v1/vector_stores/"+s2+"/files/"+c, "", "DeleteVectorStoreFileResponse")
	e.ok("alice", http.MethodDelete, "/v1/vector_stores/"+s4+"/files/"+f, "", "DeleteVectorStoreFileResponse")
	e.ok("alice", http.MethodPost, "/v1/vector_stores/"+s4+"/files", `{"file_id":"`+f+`",`+static+`}`, "VectorStoreFileObject")
	e.wait("alice", s4)
	if st, _, msg := fileStatus("alice", s4, f); st != StatusCompleted {
		t.Fatalf("file attached again after room was made: %s %s", st, msg)
	}
}
