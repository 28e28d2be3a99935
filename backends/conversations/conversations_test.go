package conversations_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/conversations"
)

// newService is a Service on SQLite in a temporary data directory, served
// as owner alice (or the owner named in the x-test-owner header).
func newService(t *testing.T) (*conversations.Service, *httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := conversations.New(t.Context(), conversations.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := r.Header.Get("x-test-owner")
		if owner == "" {
			owner = "alice"
		}
		h.ServeHTTP(w, r.WithContext(caller.With(r.Context(), caller.Caller{Owner: owner})))
	}))
	t.Cleanup(srv.Close)
	return s, srv, dir
}

func do(t *testing.T, srv *httptest.Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func msg(text string) string {
	return `{"type":"message","role":"user","content":` + fmt.Sprintf("%q", text) + `}`
}

func items(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = msg(fmt.Sprint("item ", i))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// TestRequestBounds: what the API refuses, each with a 400 naming the
// field (or a 404/405), never a 500.
func TestRequestBounds(t *testing.T) {
	_, srv, _ := newService(t)
	code, body := do(t, srv, "POST", "/v1/conversations", `{"items":`+items(2)+`}`)
	if code != 200 {
		t.Fatalf("create: %d %s", code, body)
	}
	id := gjson.Get(body, "id").Str
	big := strings.Repeat("x", conversations.MaxItemBytes)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		param                    string
	}{
		{"21 items on create", "POST", "/v1/conversations", `{"items":` + items(21) + `}`, 400, "items"},
		{"21 items on add", "POST", "/v1/conversations/" + id + "/items", `{"items":` + items(21) + `}`, 400, "items"},
		{"an item too large", "POST", "/v1/conversations/" + id + "/items", `{"items":[` + msg(big) + `]}`, 400, "items[0]"},
		{"items not an array", "POST", "/v1/conversations", `{"items":{}}`, 400, "items"},
		{"a bad item", "POST", "/v1/conversations", `{"items":[{"type":"message","role":"robot","content":"x"}]}`, 400, "items[0].role"},
		{"a slash in an id", "POST", "/v1/conversations", `{"items":[{"id":"a/b","role":"user","content":"x"}]}`, 400, "items[0].id"},
		{"duplicate ids", "POST", "/v1/conversations", `{"items":[{"id":"a","role":"user","content":"x"},{"id":"a","role":"user","content":"y"}]}`, 400, "items[1].id"},
		{"an id already there", "POST", "/v1/conversations/" + id + "/items", `{"items":[{"id":"a","role":"user","content":"x"}]}`, 200, ""},
		{"the same id again", "POST", "/v1/conversations/" + id + "/items", `{"items":[{"id":"a","role":"user","content":"x"}]}`, 400, "items"},
		{"too much metadata", "POST", "/v1/conversations", `{"metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, 400, "metadata.k"},
		{"update without metadata", "POST", "/v1/conversations/" + id, `{}`, 400, "metadata"},
		{"not JSON", "POST", "/v1/conversations", `{`, 400, ""},
		{"add without items", "POST", "/v1/conversations/" + id + "/items", `{}`, 400, "items"},
		{"limit 0", "GET", "/v1/conversations/" + id + "/items?limit=0", "", 400, "limit"},
		{"limit 101", "GET", "/v1/conversations/" + id + "/items?limit=101", "", 400, "limit"},
		{"order sideways", "GET", "/v1/conversations/" + id + "/items?order=up", "", 400, "order"},
		{"after an unknown item", "GET", "/v1/conversations/" + id + "/items?after=nope", "", 400, "after"},
		{"an unknown include", "GET", "/v1/conversations/" + id + "/items?include[]=everything", "", 400, "include"},
		{"a known include", "GET", "/v1/conversations/" + id + "/items?include[]=message.output_text.logprobs", "", 200, ""},
		{"an unknown conversation", "GET", "/v1/conversations/conv_nope", "", 404, "conversation_id"},
		{"an unknown item", "GET", "/v1/conversations/" + id + "/items/nope", "", 404, "item_id"},
		{"a method", "PUT", "/v1/conversations/" + id, "", 405, ""},
		{"a path", "GET", "/v1/conversations/" + id + "/other", "", 404, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, srv, tc.method, tc.path, tc.body)
			if code != tc.status || (tc.status != 200 && gjson.Get(body, "error.message").Str == "") {
				t.Fatalf("%d %.300s, want %d", code, body, tc.status)
			}
			if tc.param != "" && gjson.Get(body, "error.param").Str != tc.param {
				t.Errorf("param %q, want %q (%s)", gjson.Get(body, "error.param").Str, tc.param, body)
			}
		})
	}
}

// TestDeleteErases: deleting an item or the conversation removes the rows
// and data keys from the database, and the content from its files.
func TestDeleteErases(t *testing.T) {
	_, srv, dir := newService(t)
	const marker = "erase-marker-conv-4c1e"
	code, body := do(t, srv, "POST", "/v1/conversations", `{"metadata":{"m":"`+marker+`-meta"},"items":[`+msg(marker+"-one")+`,`+msg("two")+`]}`)
	if code != 200 {
		t.Fatal(code, body)
	}
	id := gjson.Get(body, "id").Str
	_, list := do(t, srv, "GET", "/v1/conversations/"+id+"/items?order=asc", "")
	first := gjson.Get(list, "data.0.id").Str
	if !strings.Contains(list, marker+"-one") {
		t.Fatalf("items: %s", list)
	}
	// Sealed at rest: the plaintext is nowhere in the files.
	for _, f := range dataFiles(t, dir) {
		if bytes.Contains(f.data, []byte(marker)) {
			t.Errorf("%s holds the plaintext", f.name)
		}
	}
	db := openSQLite(t, dir)
	count := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(context.Background(), q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM data_keys`); n != 3 {
		t.Fatalf("%d data keys, want 3 (conversation and two items)", n)
	}
	if code, body := do(t, srv, "DELETE", "/v1/conversations/"+id+"/items/"+first, ""); code != 200 || gjson.Get(body, "object").Str != "conversation" {
		t.Fatalf("delete item: %d %s", code, body)
	}
	if n := count(`SELECT count(*) FROM data_keys WHERE object_id = ?`, conversations.ItemKeyID(id, first)); n != 0 {
		t.Errorf("the deleted item's key remains")
	}
	if code, body := do(t, srv, "DELETE", "/v1/conversations/"+id, ""); code != 200 || !gjson.Get(body, "deleted").Bool() ||
		gjson.Get(body, "object").Str != "conversation.deleted" {
		t.Fatalf("delete: %d %s", code, body)
	}
	if n := count(`SELECT (SELECT count(*) FROM conversations) + (SELECT count(*) FROM conversation_items) + (SELECT count(*) FROM data_keys)`); n != 0 {
		t.Errorf("%d rows and keys remain", n)
	}
	if code, _ := do(t, srv, "GET", "/v1/conversations/"+id, ""); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
}

// TestOwners: another owner's conversation is absent on every route.
func TestOwners(t *testing.T) {
	_, srv, _ := newService(t)
	_, body := do(t, srv, "POST", "/v1/conversations", `{"items":`+items(1)+`}`)
	id := gjson.Get(body, "id").Str
	_, list := do(t, srv, "GET", "/v1/conversations/"+id+"/items", "")
	item := gjson.Get(list, "data.0.id").Str
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/conversations/" + id, ""},
		{"POST", "/v1/conversations/" + id, `{"metadata":{}}`},
		{"DELETE", "/v1/conversations/" + id, ""},
		{"GET", "/v1/conversations/" + id + "/items", ""},
		{"POST", "/v1/conversations/" + id + "/items", `{"items":` + items(1) + `}`},
		{"GET", "/v1/conversations/" + id + "/items/" + item, ""},
		{"DELETE", "/v1/conversations/" + id + "/items/" + item, ""},
	} {
		req, _ := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader(r.body))
		req.Header.Set("x-test-owner", "bob")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("%s %s as bob: %d", r.method, r.path, resp.StatusCode)
		}
	}
	if _, list2 := do(t, srv, "GET", "/v1/conversations/"+id+"/items", ""); list2 != list {
		t.Errorf("alice's items changed: %s", list2)
	}
}
