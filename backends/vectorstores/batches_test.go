package vectorstores

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

// waitBatch polls a file batch until it is no longer in progress.
func (e *env) waitBatch(owner, id, batchID string) gjson.Result {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b := e.ok(owner, http.MethodGet, "/v1/vector_stores/"+id+"/file_batches/"+batchID, "", "VectorStoreFileBatchObject")
		if b.Get("status").Str != StatusInProgress {
			return b
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("batch %s still in progress: %s", batchID, b.Raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFileBatches: a batch attaches its files (with the request's
// attributes and chunking, or each file's own), reports their progress as
// its status and file_counts, lists them, and they are searched; another
// owner sees none of it.
func TestFileBatches(t *testing.T) {
	e := newEnv(t)
	f := corpus(e, "alice")
	id := e.createStore("alice", `{"name":"docs"}`).Get("id").Str
	base := "/v1/vector_stores/" + id + "/file_batches"

	b := e.ok("alice", http.MethodPost, base,
		`{"file_ids":`+idsJSON(f["pets"], f["guide"], f["bad"], f["pets"])+`,"attributes":{"team":"a","n":1},
		  "chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":50}}}`,
		"VectorStoreFileBatchObject")
	batchID := b.Get("id").Str
	if !strings.HasPrefix(batchID, "vsfb_") || b.Get("object").Str != "vector_store.files_batch" || b.Get("vector_store_id").Str != id ||
		b.Get("status").Str != StatusInProgress || b.Get("created_at").Int() != e.clock.Now().Unix() ||
		b.Get("file_counts").Raw != `{"in_progress":3,"completed":0,"failed":0,"cancelled":0,"total":3}` {
		t.Fatalf("created batch %s", b.Raw)
	}
	// Failed files count as failed; the batch is completed all the same.
	b = e.waitBatch("alice", id, batchID)
	if b.Get("status").Str != StatusCompleted || b.Get("file_counts").Raw != `{"in_progress":0,"completed":2,"failed":1,"cancelled":0,"total":3}` {
		t.Fatalf("finished batch %s", b.Raw)
	}

	list := e.ok("alice", http.MethodGet, base+"/"+batchID+"/files?order=asc", "", "ListVectorStoreFilesResponse")
	if list.Get("object").Str != "list" || list.Get("data.#").Int() != 3 || list.Get("has_more").Bool() {
		t.Fatalf("batch files %s", list.Raw)
	}
	for _, fo := range list.Get("data").Array() {
		schematest.Conforms(t, "VectorStoreFileObject", []byte(fo.Raw))
		if fo.Get("attributes").Raw != `{"team":"a","n":1}` || fo.Get("vector_store_id").Str != id ||
			fo.Get("chunking_strategy.static.max_chunk_size_tokens").Int() != 200 || fo.Get("chunking_strategy.static.chunk_overlap_tokens").Int() != 50 {
			t.Errorf("batch file %s", fo.Raw)
		}
	}
	failed := e.ok("alice", http.MethodGet, base+"/"+batchID+"/files?filter=failed", "", "ListVectorStoreFilesResponse")
	if failed.Get("data.#").Int() != 1 || failed.Get("data.0.id").Str != f["bad"] || failed.Get("data.0.last_error.code").Str != "invalid_file" {
		t.Errorf("failed batch files %s", failed.Raw)
	}
	page := e.ok("alice", http.MethodGet, base+"/"+batchID+"/files?limit=2", "", "ListVectorStoreFilesResponse")
	if page.Get("data.#").Int() != 2 || !page.Get("has_more").Bool() {
		t.Fatalf("first page %s", page.Raw)
	}
	rest := e.ok("alice", http.MethodGet, base+"/"+batchID+"/files?limit=2&after="+page.Get("last_id").Str, "", "ListVectorStoreFilesResponse")
	if rest.Get("data.#").Int() != 1 || rest.Get("has_more").Bool() {
		t.Errorf("second page %s", rest.Raw)
	}

	// The files are searched, with the batch's attributes.
	res := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search",
		`{"query":"sample procedure","filters":{"type":"eq","key":"team","value":"a"}}`, "VectorStoreSearchResultsPage")
	if res.Get("data.0.file_id").Str != f["guide"] || res.Get("data.0.attributes.team").Str != "a" {
		t.Errorf("search %s", res.Raw)
	}

	// files: each file its own settings; a second batch of the same store.
	b2 := e.ok("alice", http.MethodPost, base, `{"files":[
		{"file_id":"`+f["numbers"]+`","attributes":{"kind":"csv"}},
		{"file_id":"`+f["guide"]+`","attributes":{"kind":"ignored"}}],"attributes":{"team":"ignored"}}`, "VectorStoreFileBatchObject")
	b2 = e.waitBatch("alice", id, b2.Get("id").Str)
	if b2.Get("status").Str != StatusCompleted || b2.Get("file_counts.completed").Int() != 2 || b2.Get("file_counts.total").Int() != 2 {
		t.Errorf("second batch %s", b2.Raw)
	}
	num := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id+"/files/"+f["numbers"], "", "VectorStoreFileObject")
	if num.Get("attributes").Raw != `{"kind":"csv"}` || num.Get("chunking_strategy.static.max_chunk_size_tokens").Int() != AutoChunkTokens {
		t.Errorf("file of the files form %s", num.Raw)
	}
	// A file already attached joins the new batch as it was.
	guide := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id+"/files/"+f["guide"], "", "VectorStoreFileObject")
	if guide.Get("attributes.team").Str != "a" {
		t.Errorf("re-batched file %s", guide.Raw)
	}
	first := e.ok("alice", http.MethodGet, base+"/"+batchID, "", "VectorStoreFileBatchObject")
	if first.Get("file_counts.total").Int() != 2 {
		t.Errorf("first batch after its file joined another: %s", first.Raw)
	}
	st := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id, "", "VectorStoreObject")
	if st.Get("file_counts.total").Int() != 4 {
		t.Errorf("store %s", st.Raw)
	}

	// A completed batch cannot be cancelled.
	e.wantError("alice", http.MethodPost, base+"/"+batchID+"/cancel", "", http.StatusConflict, "")

	// Another owner: every batch path is a 404, and nothing is attached.
	other := e.upload("bob", "b.txt", "bob's text")
	for _, tc := range []struct{ method, path, body, param string }{
		{http.MethodGet, base + "/" + batchID, "", "vector_store_id"},
		{http.MethodPost, base + "/" + batchID + "/cancel", "", "vector_store_id"},
		{http.MethodGet, base + "/" + batchID + "/files", "", "vector_store_id"},
		{http.MethodPost, base, `{"file_ids":["` + other + `"]}`, "vector_store_id"},
	} {
		e.wantError("bob", tc.method, tc.path, tc.body, http.StatusNotFound, tc.param)
	}
	bobStore := e.createStore("bob", `{}`).Get("id").Str
	e.wantError("bob", http.MethodGet, "/v1/vector_stores/"+bobStore+"/file_batches/"+batchID, "", http.StatusNotFound, "batch_id")
	// Alice's batch cannot name bob's file.
	e.wantError("alice", http.MethodPost, base, `{"files":[{"file_id":"`+other+`"}]}`, http.StatusNotFound, "files[0].file_id")
}

// TestFileBatchErrors: bad requests are 400s naming the parameter, unknown
// batches and paths 404s.
func TestFileBatchErrors(t *testing.T) {
	e := newEnv(t)
	fid := e.upload("alice", "a.txt", "text")
	id := e.createStore("alice", `{}`).Get("id").Str
	base := "/v1/vector_stores/" + id + "/file_batches"
	many := make([]string, MaxBatchFiles+1)
	for i := range many {
		many[i] = fmt.Sprintf("file-%d", i)
	}
	for _, tc := range []struct {
		name, body, param string
	}{
		{"no files", `{}`, "file_ids"},
		{"both forms", `{"file_ids":["` + fid + `"],"files":[{"file_id":"` + fid + `"}]}`, "files"},
		{"empty file_ids", `{"file_ids":[]}`, "file_ids"},
		{"too many file_ids", `{"file_ids":` + idsJSON(many...) + `}`, "file_ids"},
		{"too many files", `{"files":[` + strings.Repeat(`{"file_id":"x"},`, MaxBatchFiles) + `{"file_id":"y"}]}`, "files"},
		{"file_ids not an array", `{"file_ids":"` + fid + `"}`, "file_ids"},
		{"file id not a string", `{"file_ids":[1]}`, "file_ids[0]"},
		{"file without id", `{"files":[{"attributes":{}}]}`, "files[0].file_id"},
		{"file twice", `{"files":[{"file_id":"` + fid + `"},{"file_id":"` + fid + `"}]}`, "files[1].file_id"},
		{"bad chunking", `{"file_ids":["` + fid + `"],"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":5,"chunk_overlap_tokens":0}}}`, "chunking_strategy.static.max_chunk_size_tokens"},
		{"bad file chunking", `{"files":[{"file_id":"` + fid + `","chunking_strategy":{"type":"other"}}]}`, "files[0].chunking_strategy.type"},
		{"bad attributes", `{"file_ids":["` + fid + `"],"attributes":{"k":[1]}}`, "attributes.k"},
		{"bad file attributes", `{"files":[{"file_id":"` + fid + `","attributes":"x"}]}`, "files[0].attributes"},
		{"not json", `{`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.wantError("alice", http.MethodPost, base, tc.body, http.StatusBadRequest, tc.param)
		})
	}
	e.wantError("alice", http.MethodPost, base, `{"file_ids":["file-none"]}`, http.StatusNotFound, "file_ids")
	e.wantError("alice", http.MethodPost, "/v1/vector_stores/vs_none/file_batches", `{"file_ids":["`+fid+`"]}`, http.StatusNotFound, "vector_store_id")
	for _, p := range []string{base + "/vsfb_none", base + "/vsfb_none/files"} {
		e.wantError("alice", http.MethodGet, p, "", http.StatusNotFound, "batch_id")
	}
	e.wantError("alice", http.MethodPost, base+"/vsfb_none/cancel", "", http.StatusNotFound, "batch_id")
	e.wantError("alice", http.MethodGet, base+"//files", "", http.StatusNotFound, "")
	e.wantError("alice", http.MethodGet, base, "", http.StatusMethodNotAllowed, "")
	e.wantError("alice", http.MethodDelete, base+"/vsfb_none", "", http.StatusMethodNotAllowed, "")
	e.wantError("alice", http.MethodGet, base+"/vsfb_none/files?filter=done", "", http.StatusBadRequest, "filter")
	// Nothing was attached by the refused requests.
	if c, err := e.svc.store.Counts(t.Context(), id); err != nil || c.Total != 0 {
		t.Errorf("files after refused batches: %+v, %v", c, err)
	}
}

// heldGateway holds every embeddings request until release is closed,
// telling entered as one arrives.
type heldGateway struct {
	Gateway
	entered chan struct{}
	release chan struct{}
}

func (g *heldGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	select {
	case <-g.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Gateway.Do(ctx, owner, origin, method, path, body)
}

// TestFileBatchCancel: cancelling a batch cancels its files at once, the
// one being indexed included: its indexer stops at its next write and
// stores nothing; the batch is cancelled.
func TestFileBatchCancel(t *testing.T) {
	held := &heldGateway{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, func(o *Options) {
		held.Gateway = o.Gateway
		o.Gateway = held
		o.Concurrency = 1
	})
	a, b := e.upload("alice", "a.txt", "first file"), e.upload("alice", "b.txt", "second file")
	id := e.ok("alice", http.MethodPost, "/v1/vector_stores", `{}`, "VectorStoreObject").Get("id").Str
	base := "/v1/vector_stores/" + id + "/file_batches"
	batch := e.ok("alice", http.MethodPost, base, `{"file_ids":`+idsJSON(a, b)+`}`, "VectorStoreFileBatchObject")
	batchID := batch.Get("id").Str
	<-held.entered // one file is being embedded

	c := e.ok("alice", http.MethodPost, base+"/"+batchID+"/cancel", "", "VectorStoreFileBatchObject")
	if c.Get("status").Str != StatusCancelled || c.Get("file_counts").Raw != `{"in_progress":0,"completed":0,"failed":0,"cancelled":2,"total":2}` {
		t.Fatalf("cancelled batch %s", c.Raw)
	}
	close(held.release)
	// The indexer finds its file cancelled and stops.
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.svc.mu.Lock()
		busy := len(e.svc.active)
		e.svc.mu.Unlock()
		if busy == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("indexer still busy after the cancel")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := e.chunkCount(); n != 0 {
		t.Errorf("%d chunks stored for cancelled files", n)
	}
	got := e.ok("alice", http.MethodGet, base+"/"+batchID, "", "VectorStoreFileBatchObject")
	if got.Get("status").Str != StatusCancelled || got.Get("file_counts").Raw != c.Get("file_counts").Raw {
		t.Errorf("batch after the indexer stopped %s", got.Raw)
	}
	files := e.ok("alice", http.MethodGet, base+"/"+batchID+"/files?filter=cancelled", "", "ListVectorStoreFilesResponse")
	if files.Get("data.#").Int() != 2 || files.Get("data.0.status").Str != StatusCancelled {
		t.Errorf("cancelled files %s", files.Raw)
	}
	st := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id, "", "VectorStoreObject")
	if st.Get("status").Str != StatusCompleted || st.Get("file_counts.cancelled").Int() != 2 {
		t.Errorf("store after the cancel %s", st.Raw)
	}
	// Cancelling again answers the cancelled batch.
	again := e.ok("alice", http.MethodPost, base+"/"+batchID+"/cancel", "", "VectorStoreFileBatchObject")
	if again.Get("status").Str != StatusCancelled {
		t.Errorf("second cancel %s", again.Raw)
	}
}

// TestPollAfter: a file batch or a store's file still being indexed
// answers with openai-poll-after-ms, which the SDKs' poll helpers
// (createAndPoll, uploadAndPoll) wait for before asking again; without it
// they wait 5 s however quick the indexing. A settled one has none.
func TestPollAfter(t *testing.T) {
	held := &heldGateway{entered: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, func(o *Options) {
		held.Gateway = o.Gateway
		o.Gateway = held
		o.Concurrency = 1
	})
	a := e.upload("alice", "a.txt", "first file")
	b := e.upload("alice", "b.txt", "second file")
	id := e.ok("alice", http.MethodPost, "/v1/vector_stores", `{}`, "VectorStoreObject").Get("id").Str
	base := "/v1/vector_stores/" + id
	batchID := e.ok("alice", http.MethodPost, base+"/file_batches", `{"file_ids":`+idsJSON(a)+`}`, "VectorStoreFileBatchObject").Get("id").Str
	<-held.entered // a.txt is being embedded
	e.ok("alice", http.MethodPost, base+"/files", `{"file_id":"`+b+`"}`, "VectorStoreFileObject")

	want := strconv.Itoa(int(pollAfter.Milliseconds()))
	pollAfterHeader := func(path string) (string, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(ownerHeader, "alice")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s %v", path, resp.StatusCode, body, err)
		}
		return resp.Header.Get("openai-poll-after-ms"), gjson.GetBytes(body, "status").Str
	}
	for _, path := range []string{base + "/file_batches/" + batchID, base + "/files/" + a, base + "/files/" + b} {
		if got, status := pollAfterHeader(path); status != StatusInProgress || got != want {
			t.Errorf("GET %s (%s): openai-poll-after-ms %q, want %q", path, status, got, want)
		}
	}

	close(held.release)
	e.waitBatch("alice", id, batchID)
	e.wait("alice", id)
	for _, path := range []string{base + "/file_batches/" + batchID, base + "/files/" + a, base + "/files/" + b} {
		if got, status := pollAfterHeader(path); status != StatusCompleted || got != "" {
			t.Errorf("GET %s (%s): openai-poll-after-ms %q, want none once settled", path, status, got)
		}
	}
}
