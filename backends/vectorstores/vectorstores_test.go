package vectorstores

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

func TestSpecAvailable(t *testing.T) { schematest.RequireSpec(t) }

// corpus uploads the files most tests search.
func corpus(e *env, owner string) map[string]string {
	return map[string]string{
		"pets":    e.upload(owner, "pets.txt", "Cats are small carnivorous mammals. They purr and sleep most of the day."),
		"guide":   e.upload(owner, "guide.md", "# Sample guide\n\nThis sample document explains the sample procedure for testing."),
		"numbers": e.upload(owner, "numbers.csv", "id,value\n1,alpha\n2,beta\n"),
		"pdf":     e.upload(owner, "deck.pptx", "PK binary-ish content"),
		"bad":     e.upload(owner, "bad.txt", "valid start \xff\xfe then invalid bytes"),
	}
}

func idsJSON(ids ...string) string {
	return `["` + strings.Join(ids, `","`) + `"]`
}

func TestCreateIndexAndSearch(t *testing.T) {
	e := newEnv(t)
	f := corpus(e, "alice")
	created := e.ok("alice", http.MethodPost, "/v1/vector_stores",
		`{"name":"docs","metadata":{"team":"a"},"file_ids":`+idsJSON(f["pets"], f["guide"], f["numbers"], f["pdf"], f["bad"])+`}`,
		"VectorStoreObject")
	if !strings.HasPrefix(created.Get("id").Str, "vs_") || created.Get("object").Str != "vector_store" ||
		created.Get("name").Str != "docs" || created.Get("file_counts.total").Int() != 5 ||
		created.Get("metadata.team").Str != "a" || created.Get("expires_at").Type != gjson.Null {
		t.Fatalf("created %s", created.Raw)
	}
	id := created.Get("id").Str
	st := e.wait("alice", id)
	if st.Get("status").Str != "completed" || st.Get("file_counts").Raw != `{"in_progress":0,"completed":3,"failed":2,"cancelled":0,"total":5}` ||
		st.Get("usage_bytes").Int() <= 0 {
		t.Fatalf("indexed %s", st.Raw)
	}

	// Failed files say why; the others are completed without an error.
	failed := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id+"/files?filter=failed&order=asc", "", "ListVectorStoreFilesResponse")
	wantErrs := map[string]string{f["pdf"]: "unsupported_file", f["bad"]: "invalid_file"}
	if failed.Get("data.#").Int() != 2 {
		t.Fatalf("failed files %s", failed.Raw)
	}
	for _, fo := range failed.Get("data").Array() {
		schematest.Conforms(t, "VectorStoreFileObject", []byte(fo.Raw))
		if fo.Get("status").Str != "failed" || fo.Get("last_error.code").Str != wantErrs[fo.Get("id").Str] ||
			fo.Get("last_error.message").Str == "" || fo.Get("usage_bytes").Int() != 0 {
			t.Errorf("failed file %s", fo.Raw)
		}
	}
	done := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+id+"/files/"+f["guide"], "", "VectorStoreFileObject")
	if done.Get("status").Str != "completed" || done.Get("last_error").Type != gjson.Null ||
		done.Get("vector_store_id").Str != id || done.Get("chunking_strategy").Raw != `{"type":"static","static":{"max_chunk_size_tokens":800,"chunk_overlap_tokens":400}}` {
		t.Errorf("completed file %s", done.Raw)
	}

	tests := []struct {
		name, body string
		first      []string // the files expected first, in order
	}{
		{"words of one file", `{"query":"sample procedure"}`, []string{f["guide"]}},
		{"case-insensitive", `{"query":"CATS PURR"}`, []string{f["pets"]}},
		{"csv cell", `{"query":"beta","max_num_results":1}`, []string{f["numbers"]}},
		{"two queries", `{"query":["cats","alpha"],"max_num_results":2}`, []string{f["pets"], f["numbers"]}},
		{"threshold drops the rest", `{"query":"sample","ranking_options":{"ranker":"none","score_threshold":0.25}}`, []string{f["guide"]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", tc.body, "VectorStoreSearchResultsPage")
			data := page.Get("data").Array()
			if page.Get("object").Str != "vector_store.search_results.page" || page.Get("has_more").Bool() || len(data) < len(tc.first) {
				t.Fatalf("page %s", page.Raw)
			}
			var firsts []string
			for i := range tc.first {
				firsts = append(firsts, data[i].Get("file_id").Str)
			}
			if strings.Join(firsts, ",") != strings.Join(tc.first, ",") && !(len(tc.first) == 2 && firsts[0] == tc.first[1] && firsts[1] == tc.first[0]) {
				t.Errorf("first results %v, want %v: %s", firsts, tc.first, page.Raw)
			}
			prev := 2.0
			for _, d := range data {
				sc := d.Get("score").Float()
				if sc < 0 || sc > 1 || sc > prev {
					t.Errorf("scores not in [0,1] descending: %s", page.Raw)
				}
				prev = sc
				if d.Get("content.0.type").Str != "text" || d.Get("content.0.text").Str == "" || d.Get("filename").Str == "" {
					t.Errorf("result %s", d.Raw)
				}
			}
			// Only completed files are searched.
			for _, d := range data {
				if fid := d.Get("file_id").Str; fid == f["pdf"] || fid == f["bad"] {
					t.Errorf("failed file %s in results", fid)
				}
			}
		})
	}

	// The Go API the Responses tool uses.
	res, err := e.svc.Search(t.Context(), "alice", []string{id}, "sample", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].FileID != f["guide"] || res[0].Filename != "guide.md" || !strings.Contains(res[0].Text, "sample procedure") {
		t.Errorf("Search: %+v", res)
	}
}

func TestChunkingThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	var sb strings.Builder
	for i := range 600 {
		fmt.Fprintf(&sb, "word%03d ", i)
	}
	fid := e.upload("alice", "long.txt", sb.String())
	st := e.createStore("alice", `{"file_ids":["`+fid+`"],"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":100,"chunk_overlap_tokens":50}}}`)
	if st.Get("file_counts.completed").Int() != 1 {
		t.Fatalf("store %s", st.Raw)
	}
	fo := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+st.Get("id").Str+"/files/"+fid, "", "VectorStoreFileObject")
	if fo.Get("chunking_strategy.static").Raw != `{"max_chunk_size_tokens":100,"chunk_overlap_tokens":50}` {
		t.Errorf("file %s", fo.Raw)
	}
	page := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+st.Get("id").Str+"/search", `{"query":"word300","max_num_results":50}`, "VectorStoreSearchResultsPage")
	data := page.Get("data").Array()
	if len(data) < 10 {
		t.Fatalf("%d chunks found", len(data))
	}
	if !strings.Contains(data[0].Get("content.0.text").Str, "word300") {
		t.Errorf("first chunk does not hold the word: %s", data[0].Raw)
	}
	for _, d := range data {
		if n := e.svc.tok.Count(d.Get("content.0.text").Str); n > 100 {
			t.Errorf("chunk of %d tokens", n)
		}
	}
}

func TestOwnerIsolation(t *testing.T) {
	e := newEnv(t)
	aliceFile := e.upload("alice", "a.txt", "alice secret sample")
	bobFile := e.upload("bob", "b.txt", "bob notes")
	st := e.createStore("alice", `{"file_ids":["`+aliceFile+`"]}`)
	id := st.Get("id").Str
	base := "/v1/vector_stores/" + id

	tests := []struct {
		name, owner, method, path, body, param string
	}{
		{"get", "bob", http.MethodGet, base, "", "vector_store_id"},
		{"modify", "bob", http.MethodPost, base, `{"name":"x"}`, "vector_store_id"},
		{"delete", "bob", http.MethodDelete, base, "", "vector_store_id"},
		{"search", "bob", http.MethodPost, base + "/search", `{"query":"sample"}`, "vector_store_id"},
		{"list files", "bob", http.MethodGet, base + "/files", "", "vector_store_id"},
		{"get file", "bob", http.MethodGet, base + "/files/" + aliceFile, "", "vector_store_id"},
		{"detach file", "bob", http.MethodDelete, base + "/files/" + aliceFile, "", "vector_store_id"},
		{"attach to another's store", "bob", http.MethodPost, base + "/files", `{"file_id":"` + bobFile + `"}`, "vector_store_id"},
		{"attach another's file", "alice", http.MethodPost, base + "/files", `{"file_id":"` + bobFile + `"}`, "file_id"},
		{"create with another's file", "bob", http.MethodPost, "/v1/vector_stores", `{"file_ids":["` + aliceFile + `"]}`, "file_ids"},
		{"unknown store", "alice", http.MethodGet, "/v1/vector_stores/vs_nope", "", "vector_store_id"},
		{"unattached file", "alice", http.MethodGet, base + "/files/file-nope", "", "file_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.wantError(tc.owner, tc.method, tc.path, tc.body, http.StatusNotFound, tc.param)
		})
	}
	if l := e.ok("bob", http.MethodGet, "/v1/vector_stores", "", "ListVectorStoresResponse"); l.Get("data.#").Int() != 0 {
		t.Errorf("bob lists %s", l.Raw)
	}
	_, err := e.svc.Search(t.Context(), "bob", []string{id}, "sample", 5)
	var nf *NotFoundError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &nf) || nf.ID != id {
		t.Errorf("Search as bob: %v", err)
	}
	if err := e.svc.CheckStores(t.Context(), "alice", []string{id}); err != nil {
		t.Errorf("CheckStores: %v", err)
	}
	// Nothing of alice's changed.
	if got := e.ok("alice", http.MethodGet, base, "", "VectorStoreObject"); got.Get("file_counts.completed").Int() != 1 {
		t.Errorf("alice's store %s", got.Raw)
	}
}

func TestDetachAndDelete(t *testing.T) {
	e := newEnv(t)
	keep := e.upload("alice", "keep.txt", "apples and oranges")
	drop := e.upload("alice", "drop.txt", "sample text to forget")
	st := e.createStore("alice", `{"file_ids":["`+keep+`","`+drop+`"]}`)
	id := st.Get("id").Str
	base := "/v1/vector_stores/" + id
	before := e.chunkCount()

	del := e.ok("alice", http.MethodDelete, base+"/files/"+drop, "", "DeleteVectorStoreFileResponse")
	if strings.TrimSpace(del.Raw) != `{"id":"`+drop+`","object":"vector_store.file.deleted","deleted":true}` {
		t.Errorf("detach %s", del.Raw)
	}
	e.wantError("alice", http.MethodDelete, base+"/files/"+drop, "", http.StatusNotFound, "file_id")
	page := e.ok("alice", http.MethodPost, base+"/search", `{"query":"sample text to forget"}`, "VectorStoreSearchResultsPage")
	for _, d := range page.Get("data").Array() {
		if d.Get("file_id").Str == drop {
			t.Errorf("detached file found: %s", page.Raw)
		}
	}
	if got := e.ok("alice", http.MethodGet, base, "", "VectorStoreObject"); got.Get("file_counts.total").Int() != 1 {
		t.Errorf("after detach %s", got.Raw)
	}
	// The file itself stays in /v1/files (OpenAI does not cascade).
	if _, err := e.files.Get(t.Context(), "alice", drop); err != nil {
		t.Errorf("file gone: %v", err)
	}
	e.svc.sweep(t.Context())
	if after := e.chunkCount(); after >= before {
		t.Errorf("chunks %d before the sweep, %d after", before, after)
	}

	// Re-attaching indexes it again.
	e.ok("alice", http.MethodPost, base+"/files", `{"file_id":"`+drop+`","attributes":{"kind":"again"}}`, "VectorStoreFileObject")
	if got := e.wait("alice", id); got.Get("file_counts.completed").Int() != 2 {
		t.Errorf("after re-attach %s", got.Raw)
	}

	gone := e.ok("alice", http.MethodDelete, base, "", "DeleteVectorStoreResponse")
	if strings.TrimSpace(gone.Raw) != `{"id":"`+id+`","object":"vector_store.deleted","deleted":true}` {
		t.Errorf("delete %s", gone.Raw)
	}
	e.wantError("alice", http.MethodGet, base, "", http.StatusNotFound, "vector_store_id")
	e.wantError("alice", http.MethodPost, base+"/search", `{"query":"apples"}`, http.StatusNotFound, "vector_store_id")
	e.svc.sweep(t.Context())
	if n := e.chunkCount(); n != 0 {
		t.Errorf("%d chunks left after deleting the store", n)
	}
}

func TestListPagination(t *testing.T) {
	e := newEnv(t)
	var ids []string // oldest first
	for i := range 5 {
		st := e.ok("alice", http.MethodPost, "/v1/vector_stores", fmt.Sprintf(`{"name":"s%d"}`, i), "VectorStoreObject")
		ids = append(ids, st.Get("id").Str)
		e.clock.Add(time.Second)
	}
	e.ok("bob", http.MethodPost, "/v1/vector_stores", `{"name":"bob's"}`, "VectorStoreObject")

	page := func(query string) ([]string, bool) {
		l := e.ok("alice", http.MethodGet, "/v1/vector_stores"+query, "", "ListVectorStoresResponse")
		var got []string
		for _, d := range l.Get("data").Array() {
			got = append(got, d.Get("id").Str)
		}
		if len(got) > 0 && (l.Get("first_id").Str != got[0] || l.Get("last_id").Str != got[len(got)-1]) {
			t.Errorf("first/last ids %s", l.Raw)
		}
		return got, l.Get("has_more").Bool()
	}
	tests := []struct {
		name, query string
		want        []string
		more        bool
	}{
		{"default newest first", "", []string{ids[4], ids[3], ids[2], ids[1], ids[0]}, false},
		{"first page", "?limit=2", []string{ids[4], ids[3]}, true},
		{"after", "?limit=2&after=" + ids[3], []string{ids[2], ids[1]}, true},
		{"last page", "?limit=2&after=" + ids[1], []string{ids[0]}, false},
		{"asc", "?order=asc&limit=3", []string{ids[0], ids[1], ids[2]}, true},
		{"asc after", "?order=asc&after=" + ids[2], []string{ids[3], ids[4]}, false},
		{"before", "?limit=2&before=" + ids[1], []string{ids[3], ids[2]}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, more := page(tc.query)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || more != tc.more {
				t.Errorf("got %v more=%v, want %v more=%v", got, more, tc.want, tc.more)
			}
		})
	}
	e.wantError("alice", http.MethodGet, "/v1/vector_stores?limit=101", "", http.StatusBadRequest, "limit")
	e.wantError("alice", http.MethodGet, "/v1/vector_stores?order=up", "", http.StatusBadRequest, "order")
	e.wantError("alice", http.MethodGet, "/v1/vector_stores?after=vs_missing", "", http.StatusBadRequest, "after")

	// Files of a store page the same way.
	var fids []string
	for i := range 3 {
		fids = append(fids, e.upload("alice", fmt.Sprintf("f%d.txt", i), "text"))
		e.clock.Add(time.Second)
	}
	st := e.ok("alice", http.MethodPost, "/v1/vector_stores", `{}`, "VectorStoreObject")
	for _, fid := range fids {
		e.ok("alice", http.MethodPost, "/v1/vector_stores/"+st.Get("id").Str+"/files", `{"file_id":"`+fid+`"}`, "VectorStoreFileObject")
		e.clock.Add(time.Second)
	}
	l := e.ok("alice", http.MethodGet, "/v1/vector_stores/"+st.Get("id").Str+"/files?limit=2&order=asc&after="+fids[0], "", "ListVectorStoreFilesResponse")
	if l.Get("data.#").Int() != 2 || l.Get("data.0.id").Str != fids[1] || l.Get("has_more").Bool() {
		t.Errorf("files page %s", l.Raw)
	}
}

func TestValidation(t *testing.T) {
	e := newEnv(t)
	fid := e.upload("alice", "a.txt", "text")
	st := e.createStore("alice", `{"file_ids":["`+fid+`"]}`)
	search := "/v1/vector_stores/" + st.Get("id").Str + "/search"
	many := make([]string, MaxFileIDs+1)
	for i := range many {
		many[i] = fid
	}
	tests := []struct {
		name, path, body, param string
	}{
		{"not JSON", "/v1/vector_stores", `{`, ""},
		{"too many file_ids", "/v1/vector_stores", `{"file_ids":` + idsJSON(many...) + `}`, "file_ids"},
		{"file_ids not strings", "/v1/vector_stores", `{"file_ids":[1]}`, "file_ids[0]"},
		{"name not a string", "/v1/vector_stores", `{"name":1}`, "name"},
		{"too much metadata", "/v1/vector_stores", `{"metadata":{` + strings.Repeat(`"k":"v",`, 16) + `"z":"v"}}`, "metadata"},
		{"metadata not a string", "/v1/vector_stores", `{"metadata":{"k":1}}`, "metadata.k"},
		{"anchor", "/v1/vector_stores", `{"expires_after":{"anchor":"created_at","days":1}}`, "expires_after.anchor"},
		{"days", "/v1/vector_stores", `{"expires_after":{"anchor":"last_active_at","days":0}}`, "expires_after.days"},
		{"chunking type", "/v1/vector_stores", `{"chunking_strategy":{"type":"semantic"}}`, "chunking_strategy.type"},
		{"chunk size", "/v1/vector_stores", `{"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":99,"chunk_overlap_tokens":0}}}`, "chunking_strategy.static.max_chunk_size_tokens"},
		{"overlap over half", "/v1/vector_stores", `{"chunking_strategy":{"type":"static","static":{"max_chunk_size_tokens":200,"chunk_overlap_tokens":101}}}`, "chunking_strategy.static.chunk_overlap_tokens"},
		{"missing query", search, `{}`, "query"},
		{"empty query", search, `{"query":" "}`, "query"},
		{"empty query array", search, `{"query":[]}`, "query"},
		{"max_num_results", search, `{"query":"x","max_num_results":51}`, "max_num_results"},
		{"rewrite_query", search, `{"query":"x","rewrite_query":true}`, "rewrite_query"},
		{"filter type", search, `{"query":"x","filters":{"type":"like","key":"k","value":"v"}}`, "filters.type"},
		{"filter value", search, `{"query":"x","filters":{"type":"eq","key":"k","value":{"a":1}}}`, "filters.value"},
		{"threshold", search, `{"query":"x","ranking_options":{"score_threshold":2}}`, "ranking_options.score_threshold"},
		{"attach without file_id", "/v1/vector_stores/" + st.Get("id").Str + "/files", `{}`, "file_id"},
		{"attributes", "/v1/vector_stores/" + st.Get("id").Str + "/files", `{"file_id":"` + fid + `","attributes":{"k":{}}}`, "attributes.k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.wantError("alice", http.MethodPost, tc.path, tc.body, http.StatusBadRequest, tc.param)
		})
	}
	e.wantError("alice", http.MethodPut, "/v1/vector_stores", "", http.StatusMethodNotAllowed, "")
	// File batches are created, never listed (OpenAI has no such list).
	e.wantError("alice", http.MethodGet, "/v1/vector_stores/"+st.Get("id").Str+"/file_batches", "", http.StatusMethodNotAllowed, "")
	e.wantError("alice", http.MethodGet, "/v1/vector_stores/"+st.Get("id").Str+"/file_batches/vsfb_x/other", "", http.StatusNotFound, "")
	e.wantError("", http.MethodGet, "/v1/vector_stores", "", http.StatusUnauthorized, "")
}

func TestModifyAndExpiry(t *testing.T) {
	e := newEnv(t)
	fid := e.upload("alice", "a.txt", "sample content")
	st := e.createStore("alice", `{"name":"old","file_ids":["`+fid+`"],"expires_after":{"anchor":"last_active_at","days":2}}`)
	id := st.Get("id").Str
	base := "/v1/vector_stores/" + id
	if st.Get("expires_after").Raw != `{"anchor":"last_active_at","days":2}` ||
		st.Get("expires_at").Int() != st.Get("last_active_at").Int()+2*86400 {
		t.Fatalf("store %s", st.Raw)
	}

	// Use moves the anchor: a search a day and a half in keeps the store
	// alive past its first expiry.
	e.clock.Add(36 * time.Hour)
	e.ok("alice", http.MethodPost, base+"/search", `{"query":"sample"}`, "VectorStoreSearchResultsPage")
	e.clock.Add(36 * time.Hour)
	got := e.ok("alice", http.MethodGet, base, "", "VectorStoreObject")
	if got.Get("last_active_at").Int() != st.Get("last_active_at").Int()+36*3600 {
		t.Errorf("last_active_at not moved: %s", got.Raw)
	}

	mod := e.ok("alice", http.MethodPost, base, `{"name":"new","metadata":{"k":"v"},"expires_after":null}`, "VectorStoreObject")
	if mod.Get("name").Str != "new" || mod.Get("metadata").Raw != `{"k":"v"}` || mod.Get("expires_after").Exists() ||
		mod.Get("expires_at").Type != gjson.Null {
		t.Errorf("modified %s", mod.Raw)
	}
	mod = e.ok("alice", http.MethodPost, base, `{"expires_after":{"anchor":"last_active_at","days":1}}`, "VectorStoreObject")
	if mod.Get("name").Str != "new" || mod.Get("expires_after.days").Int() != 1 {
		t.Errorf("modified %s", mod.Raw)
	}

	// Past expiry the store is gone for every operation, then swept.
	e.clock.Add(25 * time.Hour)
	e.wantError("alice", http.MethodGet, base, "", http.StatusNotFound, "vector_store_id")
	e.wantError("alice", http.MethodPost, base+"/search", `{"query":"sample"}`, http.StatusNotFound, "vector_store_id")
	e.svc.sweep(t.Context())
	if n := e.chunkCount(); n != 0 {
		t.Errorf("%d chunks after the expired store was swept", n)
	}
}

func TestFilters(t *testing.T) {
	e := newEnv(t)
	st := e.ok("alice", http.MethodPost, "/v1/vector_stores", `{}`, "VectorStoreObject")
	id := st.Get("id").Str
	files := map[string]string{}
	for name, attrs := range map[string]string{
		"2023.txt": `{"year":2023,"team":"red","public":true}`,
		"2024.txt": `{"year":2024,"team":"blue","public":false}`,
		"none.txt": ``,
	} {
		fid := e.upload("alice", name, "sample report for "+name)
		body := `{"file_id":"` + fid + `"`
		if attrs != "" {
			body += `,"attributes":` + attrs
		}
		fo := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/files", body+`}`, "VectorStoreFileObject")
		if attrs != "" && fo.Get("attributes").Raw != attrs {
			t.Errorf("attributes %s", fo.Raw)
		}
		files[name] = fid
	}
	e.wait("alice", id)
	tests := []struct {
		name, filter string
		want         []string
	}{
		{"eq string", `{"type":"eq","key":"team","value":"red"}`, []string{"2023.txt"}},
		{"ne (missing counts)", `{"type":"ne","key":"team","value":"red"}`, []string{"2024.txt", "none.txt"}},
		{"gte number", `{"type":"gte","key":"year","value":2024}`, []string{"2024.txt"}},
		{"bool", `{"type":"eq","key":"public","value":true}`, []string{"2023.txt"}},
		{"in", `{"type":"in","key":"team","value":["blue","green"]}`, []string{"2024.txt"}},
		{"or", `{"type":"or","filters":[{"type":"eq","key":"year","value":2023},{"type":"eq","key":"team","value":"blue"}]}`, []string{"2023.txt", "2024.txt"}},
		{"and", `{"type":"and","filters":[{"type":"lt","key":"year","value":2030},{"type":"nin","key":"team","value":["red"]}]}`, []string{"2024.txt"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			page := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/search", `{"query":"sample report","filters":`+tc.filter+`}`, "VectorStoreSearchResultsPage")
			got := map[string]bool{}
			for _, d := range page.Get("data").Array() {
				got[d.Get("filename").Str] = true
			}
			if len(got) != len(tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			for _, w := range tc.want {
				if !got[w] {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
	// Attributes can be replaced.
	fo := e.ok("alice", http.MethodPost, "/v1/vector_stores/"+id+"/files/"+files["none.txt"], `{"attributes":{"team":"red"}}`, "VectorStoreFileObject")
	if fo.Get("attributes").Raw != `{"team":"red"}` {
		t.Errorf("updated %s", fo.Raw)
	}
}
