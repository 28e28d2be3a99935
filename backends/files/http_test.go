package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

// withOwner stands in for caller.Require: the bearer token names the owner,
// and a request without one carries no caller at all.
func withOwner(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if owner, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			r = r.WithContext(caller.With(r.Context(), caller.Caller{Owner: owner}))
		}
		h.ServeHTTP(w, r)
	})
}

// part is one field of a multipart form; a filename makes it a file part.
type part struct{ name, filename, content string }

func multipartBody(t *testing.T, parts ...part) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		var (
			w   io.Writer
			err error
		)
		if p.filename != "" || p.name == "file" {
			h := textproto.MIMEHeader{}
			disp := fmt.Sprintf(`form-data; name=%q`, p.name)
			if p.filename != "" {
				disp += fmt.Sprintf(`; filename=%q`, p.filename)
			}
			h.Set("Content-Disposition", disp)
			h.Set("Content-Type", "application/octet-stream")
			w, err = mw.CreatePart(h)
		} else {
			w, err = mw.CreateFormField(p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, mw.FormDataContentType()
}

// serve sends a request through the handler; owner "" sends no caller.
func serve(t *testing.T, s *Store, method, target, owner, contentType string, body io.Reader) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, target, body)
	if owner != "" {
		r.Header.Set("Authorization", "Bearer "+owner)
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	withOwner(s.Handler()).ServeHTTP(rec, r)
	return rec
}

func upload(t *testing.T, s *Store, owner string, parts ...part) *httptest.ResponseRecorder {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	return serve(t, s, http.MethodPost, "/v1/files", owner, ct, body)
}

// apiErrorBody is the OpenAI error shape; pointers tell null from "".
type apiErrorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// checkError asserts rec is an OpenAI-shaped error with the given status,
// code and param ("" for null), and returns its message.
func checkError(t *testing.T, rec *httptest.ResponseRecorder, status int, code, param string) string {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status = %d, want %d; body %s", rec.Code, status, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("error content-type = %q", ct)
	}
	schematest.Conforms(t, "ErrorResponse", rec.Body.Bytes())
	var e apiErrorBody
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("error body %s: %v", rec.Body, err)
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	if deref(e.Error.Code) != code || deref(e.Error.Param) != param || e.Error.Message == "" {
		t.Fatalf("error = code %q param %q message %q, want code %q param %q; body %s",
			deref(e.Error.Code), deref(e.Error.Param), e.Error.Message, code, param, rec.Body)
	}
	return e.Error.Message
}

// decodeFile checks a 200 file object against the schema and decodes it,
// with its raw keys so tests can tell an absent field from a zero one.
func decodeFile(t *testing.T, rec *httptest.ResponseRecorder) (fileObject, map[string]json.RawMessage) {
	t.Helper()
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
	}
	schematest.Conforms(t, "OpenAIFile", rec.Body.Bytes())
	var f fileObject
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	return f, raw
}

func TestUploadRoundTrip(t *testing.T) {
	binary := "\x00\x01\xfe\xff{\"a\":1}\r\n" + strings.Repeat("z", 100<<10)
	tests := []struct {
		name        string
		parts       []part
		wantPurpose string
		wantType    string
		wantExpires int64 // seconds after created_at; 0: no expires_at
	}{
		{"purpose first (Python and Node SDKs)", []part{{name: "purpose", content: "user_data"}, {name: "file", filename: "data.bin", content: binary}},
			PurposeUserData, "application/octet-stream", 0},
		{"file first (Go SDK)", []part{{name: "file", filename: "input.jsonl", content: "{\"custom_id\":\"1\"}\n"}, {name: "purpose", content: "batch"}},
			PurposeBatch, "application/jsonl", 0},
		{"expires_after in brackets", []part{{name: "purpose", content: "assistants"}, {name: "expires_after[anchor]", content: "created_at"},
			{name: "expires_after[seconds]", content: "3600"}, {name: "file", filename: "a.pdf", content: "pdf"}},
			PurposeAssistants, "application/octet-stream", 3600},
		{"expires_after after the file, dotted", []part{{name: "file", filename: "b.txt", content: "b"}, {name: "purpose", content: "fine-tune"},
			{name: "expires_after.anchor", content: "created_at"}, {name: "expires_after.seconds", content: "2592000"}},
			PurposeFineTune, "application/octet-stream", 2592000},
		{"unknown small field ignored", []part{{name: "purpose", content: "vision"}, {name: "extra", content: "x"}, {name: "file", filename: "i.png", content: "png"}},
			PurposeVision, "application/octet-stream", 0},
		{"evals", []part{{name: "purpose", content: "evals"}, {name: "file", filename: "e.jsonl", content: "{}\n"}},
			PurposeEvals, "application/jsonl", 0},
		{"empty file", []part{{name: "purpose", content: "user_data"}, {name: "file", filename: "empty.txt", content: ""}},
			PurposeUserData, "application/octet-stream", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), Options{})
			var content, filename string
			for _, p := range tt.parts {
				if p.name == "file" {
					content, filename = p.content, p.filename
				}
			}
			rec := upload(t, s, "owner-a", tt.parts...)
			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200; body %s", rec.Code, rec.Body)
			}
			if tt.wantPurpose != PurposeEvals {
				// The official OpenAIFile schema leaves "evals" out of its
				// purpose enum, although CreateFileRequest accepts it.
				schematest.Conforms(t, "OpenAIFile", rec.Body.Bytes())
			}
			var (
				f   fileObject
				raw map[string]json.RawMessage
			)
			if err := json.Unmarshal(rec.Body.Bytes(), &f); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
				t.Fatal(err)
			}
			if !wellFormedID(f.ID) || f.Object != "file" || f.Bytes != int64(len(content)) || f.Filename != filename ||
				f.Purpose != tt.wantPurpose || f.Status != "processed" || f.CreatedAt == 0 {
				t.Fatalf("file object = %+v", f)
			}
			if tt.wantExpires == 0 {
				if _, ok := raw["expires_at"]; ok {
					t.Errorf("expires_at present for a file kept until deleted: %s", rec.Body)
				}
			} else if f.ExpiresAt == nil || *f.ExpiresAt != f.CreatedAt+tt.wantExpires {
				t.Errorf("expires_at = %v, want created_at+%d = %d", f.ExpiresAt, tt.wantExpires, f.CreatedAt+tt.wantExpires)
			}

			get := serve(t, s, http.MethodGet, "/v1/files/"+f.ID, "owner-a", "", nil)
			if get.Code != http.StatusOK || get.Body.String() != rec.Body.String() {
				t.Fatalf("GET = %d %s, want the upload's object %s", get.Code, get.Body, rec.Body)
			}
			dl := serve(t, s, http.MethodGet, "/v1/files/"+f.ID+"/content", "owner-a", "", nil)
			if dl.Code != http.StatusOK || dl.Body.String() != content {
				t.Fatalf("content = %d, %d bytes; want 200 and the %d uploaded bytes", dl.Code, dl.Body.Len(), len(content))
			}
			if ct := dl.Header().Get("Content-Type"); ct != tt.wantType {
				t.Errorf("content-type = %q, want %q", ct, tt.wantType)
			}
			if cl := dl.Header().Get("Content-Length"); cl != fmt.Sprint(len(content)) {
				t.Errorf("content-length = %q, want %d", cl, len(content))
			}
			if names := blobNames(t, s); !slices.Equal(names, []string{f.ID}) {
				t.Errorf("blob dir = %v, want just %s", names, f.ID)
			}
		})
	}
}

func TestUploadRejected(t *testing.T) {
	jsonl := part{name: "file", filename: "in.jsonl", content: "{}\n"}
	txt := part{name: "file", filename: "in.txt", content: "x"}
	purpose := func(p string) part { return part{name: "purpose", content: p} }
	field := func(name, v string) part { return part{name: name, content: v} }
	tests := []struct {
		name   string
		parts  []part
		raw    string // instead of parts: a body sent as text/plain or a broken form
		rawCT  string
		status int
		code   string
		param  string
	}{
		{name: "not multipart", raw: `{"purpose":"batch"}`, rawCT: "application/json", status: 400, code: "invalid_value"},
		{name: "no content type", raw: "x", status: 400, code: "invalid_value"},
		{name: "missing file", parts: []part{purpose("batch")}, status: 400, code: "missing_required_parameter", param: "file"},
		{name: "missing purpose", parts: []part{jsonl}, status: 400, code: "missing_required_parameter", param: "purpose"},
		{name: "empty form", parts: nil, status: 400, code: "missing_required_parameter", param: "purpose"},
		{name: "unknown purpose first", parts: []part{purpose("nope"), jsonl}, status: 400, code: "invalid_value", param: "purpose"},
		{name: "unknown purpose after the file", parts: []part{jsonl, purpose("nope")}, status: 400, code: "invalid_value", param: "purpose"},
		{name: "batch_output is the runner's", parts: []part{purpose("batch_output"), jsonl}, status: 400, code: "invalid_value", param: "purpose"},
		{name: "batch_output after the file", parts: []part{jsonl, purpose("batch_output")}, status: 400, code: "invalid_value", param: "purpose"},
		{name: "batch needs .jsonl", parts: []part{purpose("batch"), txt}, status: 400, code: "invalid_value", param: "file"},
		{name: "batch needs .jsonl, file first", parts: []part{txt, purpose("batch")}, status: 400, code: "invalid_value", param: "file"},
		{name: "file part without filename", parts: []part{purpose("user_data"), {name: "file", content: "x"}}, status: 400, code: "invalid_value", param: "file"},
		{name: "two files", parts: []part{purpose("user_data"), jsonl, jsonl}, status: 400, code: "invalid_value", param: "file"},
		{name: "bad anchor", parts: []part{purpose("user_data"), field("expires_after[anchor]", "last_used_at"), field("expires_after[seconds]", "3600"), jsonl},
			status: 400, code: "invalid_value", param: "expires_after.anchor"},
		{name: "seconds too small", parts: []part{purpose("user_data"), field("expires_after[anchor]", "created_at"), field("expires_after[seconds]", "3599"), jsonl},
			status: 400, code: "invalid_value", param: "expires_after.seconds"},
		{name: "seconds too large", parts: []part{purpose("user_data"), field("expires_after[anchor]", "created_at"), field("expires_after[seconds]", "2592001"), jsonl},
			status: 400, code: "invalid_value", param: "expires_after.seconds"},
		{name: "seconds not a number", parts: []part{jsonl, purpose("user_data"), field("expires_after[anchor]", "created_at"), field("expires_after[seconds]", "1h")},
			status: 400, code: "invalid_value", param: "expires_after.seconds"},
		{name: "anchor without seconds", parts: []part{purpose("user_data"), field("expires_after[anchor]", "created_at"), jsonl},
			status: 400, code: "missing_required_parameter", param: "expires_after.seconds"},
		{name: "seconds without anchor", parts: []part{purpose("user_data"), field("expires_after[seconds]", "3600"), jsonl},
			status: 400, code: "missing_required_parameter", param: "expires_after.anchor"},
		{name: "oversized purpose field", parts: []part{purpose(strings.Repeat("b", maxFieldBytes+1)), jsonl}, status: 400, code: "invalid_value", param: "purpose"},
		{name: "truncated body", raw: "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nuser_data\r\n--B\r\n" +
			"Content-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhalf a fi", rawCT: "multipart/form-data; boundary=B",
			status: 400, code: "invalid_value", param: "file"},
		{name: "too many fields", parts: slices.Repeat([]part{field("x", "y")}, maxParts+1), status: 400, code: "invalid_value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), Options{})
			var rec *httptest.ResponseRecorder
			if tt.raw != "" {
				rec = serve(t, s, http.MethodPost, "/v1/files", "owner-a", tt.rawCT, strings.NewReader(tt.raw))
			} else {
				rec = upload(t, s, "owner-a", tt.parts...)
			}
			checkError(t, rec, tt.status, tt.code, tt.param)
			// A refused upload keeps nothing: no blob, no part file, no row.
			if names := blobNames(t, s); len(names) != 0 {
				t.Errorf("blob dir after a refused upload = %v", names)
			}
			if files, _, _ := s.List(context.Background(), "owner-a", ListQuery{}); len(files) != 0 {
				t.Errorf("%d files listed after a refused upload", len(files))
			}
		})
	}
}

func TestUploadTooLarge(t *testing.T) {
	const limit = 1 << 20
	tests := []struct {
		name      string
		size      int
		fileFirst bool
		status    int
	}{
		{"exactly the limit", limit, false, http.StatusOK},
		{"one byte over", limit + 1, false, http.StatusRequestEntityTooLarge},
		{"one byte over, file first", limit + 1, true, http.StatusRequestEntityTooLarge},
		{"far over", 5 * limit, false, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), Options{MaxBytes: limit})
			file := part{name: "file", filename: "big.bin", content: strings.Repeat("a", tt.size)}
			parts := []part{{name: "purpose", content: "user_data"}, file}
			if tt.fileFirst {
				parts = []part{file, {name: "purpose", content: "user_data"}}
			}
			rec := upload(t, s, "owner-a", parts...)
			names := blobNames(t, s)
			if tt.status == http.StatusOK {
				f, _ := decodeFile(t, rec)
				if f.Bytes != int64(tt.size) || !slices.Equal(names, []string{f.ID}) {
					t.Fatalf("bytes = %d, blobs = %v", f.Bytes, names)
				}
				return
			}
			checkError(t, rec, tt.status, "file_too_large", "file")
			if len(names) != 0 {
				t.Fatalf("blob dir after 413 = %v, want empty (no part file left)", names)
			}
		})
	}
}

func TestDefaultUploadLimit(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	if s.maxBytes != 200*1000*1000 {
		t.Fatalf("default upload limit = %d, want 200 MB", s.maxBytes)
	}
}

func TestOwnerIsolationHTTP(t *testing.T) {
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	a, _ := decodeFile(t, upload(t, s, "owner-a", part{name: "purpose", content: "user_data"}, part{name: "file", filename: "a.txt", content: "a's"}))
	expiring, _ := decodeFile(t, upload(t, s, "owner-a", part{name: "purpose", content: "user_data"},
		part{name: "expires_after[anchor]", content: "created_at"}, part{name: "expires_after[seconds]", content: "3600"},
		part{name: "file", filename: "e.txt", content: "e"}))
	deleted, _ := decodeFile(t, upload(t, s, "owner-a", part{name: "purpose", content: "user_data"}, part{name: "file", filename: "d.txt", content: "d"}))
	if rec := serve(t, s, http.MethodDelete, "/v1/files/"+deleted.ID, "owner-a", "", nil); rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	clk.Advance(time.Hour)

	tests := []struct {
		name, owner, method, id, suffix string
	}{
		{"other owner get", "owner-b", http.MethodGet, a.ID, ""},
		{"other owner content", "owner-b", http.MethodGet, a.ID, "/content"},
		{"other owner delete", "owner-b", http.MethodDelete, a.ID, ""},
		{"expired get", "owner-a", http.MethodGet, expiring.ID, ""},
		{"expired content", "owner-a", http.MethodGet, expiring.ID, "/content"},
		{"expired delete", "owner-a", http.MethodDelete, expiring.ID, ""},
		{"deleted get", "owner-a", http.MethodGet, deleted.ID, ""},
		{"deleted content", "owner-a", http.MethodGet, deleted.ID, "/content"},
		{"deleted delete", "owner-a", http.MethodDelete, deleted.ID, ""},
		{"never existed", "owner-a", http.MethodGet, "file-" + strings.Repeat("Q", 24), ""},
		{"malformed id", "owner-a", http.MethodGet, "file-nope", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, s, tt.method, "/v1/files/"+tt.id+tt.suffix, tt.owner, "", nil)
			msg := checkError(t, rec, http.StatusNotFound, "not_found", "id")
			if msg != "No such File object: "+tt.id {
				t.Fatalf("message = %q", msg)
			}
			var e apiErrorBody
			json.Unmarshal(rec.Body.Bytes(), &e)
			if e.Error.Type != "invalid_request_error" {
				t.Fatalf("type = %q", e.Error.Type)
			}
		})
	}

	var list listObject
	rec := serve(t, s, http.MethodGet, "/v1/files", "owner-b", "", nil)
	json.Unmarshal(rec.Body.Bytes(), &list)
	if rec.Code != http.StatusOK || len(list.Data) != 0 {
		t.Fatalf("owner-b list = %d %s, want empty", rec.Code, rec.Body)
	}
	// Owner A still has its file, and only the live one is listed.
	rec = serve(t, s, http.MethodGet, "/v1/files", "owner-a", "", nil)
	json.Unmarshal(rec.Body.Bytes(), &list)
	if len(list.Data) != 1 || list.Data[0].ID != a.ID {
		t.Fatalf("owner-a list = %s, want just %s", rec.Body, a.ID)
	}
}

func TestDeleteHTTP(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	f, _ := decodeFile(t, upload(t, s, "owner-a", part{name: "purpose", content: "batch"}, part{name: "file", filename: "in.jsonl", content: "{}\n"}))
	rec := serve(t, s, http.MethodDelete, "/v1/files/"+f.ID, "owner-a", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	schematest.Conforms(t, "DeleteFileResponse", rec.Body.Bytes())
	var d deletedObject
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil || d != (deletedObject{ID: f.ID, Object: "file", Deleted: true}) {
		t.Fatalf("delete body = %s, %v", rec.Body, err)
	}
	if _, err := os.Stat(filepath.Join(blobDir(s), f.ID)); !os.IsNotExist(err) {
		t.Fatalf("blob still on disk after delete: %v", err)
	}
}

func TestListHTTP(t *testing.T) {
	clk := newClock()
	s := openStore(t, t.TempDir(), Options{Now: clk.Now})
	var ids []string // oldest first
	for i, purpose := range []string{"batch", "user_data", "batch"} {
		f, _ := decodeFile(t, upload(t, s, "owner-a", part{name: "purpose", content: purpose},
			part{name: "file", filename: fmt.Sprintf("f%d.jsonl", i), content: "{}\n"}))
		ids = append(ids, f.ID)
		clk.Advance(time.Second)
	}
	list := func(t *testing.T, owner, query string) listObject {
		t.Helper()
		rec := serve(t, s, http.MethodGet, "/v1/files"+query, owner, "", nil)
		if rec.Code != http.StatusOK {
			t.Fatalf("list%s: %d %s", query, rec.Code, rec.Body)
		}
		schematest.Conforms(t, "ListFilesResponse", rec.Body.Bytes())
		var l listObject
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		if l.Object != "list" || l.Data == nil {
			t.Fatalf("list body %s", rec.Body)
		}
		return l
	}
	idsOf := func(l listObject) []string {
		var out []string
		for _, f := range l.Data {
			out = append(out, f.ID)
		}
		return out
	}
	tests := []struct {
		query       string
		want        []string
		more        bool
		first, last string
	}{
		{"", []string{ids[2], ids[1], ids[0]}, false, ids[2], ids[0]},
		{"?order=asc", ids, false, ids[0], ids[2]},
		{"?limit=2", []string{ids[2], ids[1]}, true, ids[2], ids[1]},
		{"?limit=2&after=" + ids[1], []string{ids[0]}, false, ids[0], ids[0]},
		{"?order=asc&limit=1&after=" + ids[0], []string{ids[1]}, true, ids[1], ids[1]},
		{"?purpose=batch", []string{ids[2], ids[0]}, false, ids[2], ids[0]},
		{"?purpose=batch_output", nil, false, "", ""},
	}
	for _, tt := range tests {
		t.Run("query "+tt.query, func(t *testing.T) {
			l := list(t, "owner-a", tt.query)
			if got := idsOf(l); !slices.Equal(got, tt.want) || l.HasMore != tt.more || l.FirstID != tt.first || l.LastID != tt.last {
				t.Fatalf("got %v more=%v first=%q last=%q; want %v more=%v first=%q last=%q",
					got, l.HasMore, l.FirstID, l.LastID, tt.want, tt.more, tt.first, tt.last)
			}
		})
	}
	if l := list(t, "owner-new", ""); len(l.Data) != 0 || l.HasMore {
		t.Fatalf("new owner's list = %+v", l)
	}

	for _, bad := range []struct{ query, param string }{
		{"?limit=0", "limit"}, {"?limit=10001", "limit"}, {"?limit=ten", "limit"},
		{"?order=up", "order"}, {"?purpose=nope", "purpose"},
		{"?after=file-" + strings.Repeat("x", 24), "after"},
	} {
		t.Run("bad "+bad.query, func(t *testing.T) {
			checkError(t, serve(t, s, http.MethodGet, "/v1/files"+bad.query, "owner-a", "", nil), 400, "invalid_value", bad.param)
		})
	}
	// Another owner's id is no cursor either.
	checkError(t, serve(t, s, http.MethodGet, "/v1/files?after="+ids[0], "owner-b", "", nil), 400, "invalid_value", "after")
}

func TestRouting(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	id := "file-" + strings.Repeat("A", 24)
	tests := []struct {
		method, path, owner string
		status              int
		code, param, allow  string
	}{
		{http.MethodGet, "/v1/files", "", 401, "invalid_api_key", "", ""},
		{http.MethodPut, "/v1/files", "o", 405, "method_not_allowed", "", "GET, HEAD, POST"},
		{http.MethodPatch, "/v1/files/" + id, "o", 405, "method_not_allowed", "", "GET, HEAD, DELETE"},
		{http.MethodPost, "/v1/files/" + id + "/content", "o", 405, "method_not_allowed", "", "GET, HEAD"},
		{http.MethodGet, "/v1/files/" + id + "/other", "o", 404, "unknown_url", "", ""},
		{http.MethodGet, "/v1/files/" + id + "/", "o", 404, "unknown_url", "", ""},
		{http.MethodGet, "/v1/files//content", "o", 404, "unknown_url", "", ""},
		{http.MethodGet, "/v1/filesystem", "o", 404, "unknown_url", "", ""},
		{http.MethodGet, "/v1/batches", "o", 404, "unknown_url", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := serve(t, s, tt.method, tt.path, tt.owner, "", nil)
			checkError(t, rec, tt.status, tt.code, tt.param)
			if got := rec.Header().Get("Allow"); got != tt.allow {
				t.Fatalf("allow = %q, want %q", got, tt.allow)
			}
		})
	}
	// A trailing slash on the collection is the collection.
	if rec := serve(t, s, http.MethodGet, "/v1/files/", "o", "", nil); rec.Code != http.StatusOK {
		t.Fatalf("GET /v1/files/ = %d", rec.Code)
	}
}

// patternReader yields n bytes of a fixed 64 KiB pattern without allocating
// per read, hashing what it hands out.
type patternReader struct {
	pattern []byte
	left    int64
	off     int
	sum     interface{ Write([]byte) (int, error) }
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(int64(len(p)), r.left)], r.pattern[r.off:])
	r.off = (r.off + n) % len(r.pattern)
	r.left -= int64(n)
	r.sum.Write(p[:n])
	return n, nil
}

// TestUploadMemoryBounded streams a 50 MB upload, generated on the fly
// through an io.Pipe, into the handler and checks that the process did not
// allocate anywhere near the file's size: TotalAlloc counts every byte
// allocated during the upload (collected or not), so it bounds the heap
// growth and cannot be fooled by a GC running at the right moment.
func TestUploadMemoryBounded(t *testing.T) {
	const size = 50 << 20
	const budget = 16 << 20
	s := openStore(t, t.TempDir(), Options{})
	pattern := make([]byte, 64<<10)
	for i := range pattern {
		pattern[i] = byte(i*7 + i/251)
	}
	sum := sha256.New()
	src := &patternReader{pattern: pattern, left: size, sum: sum}

	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", "user_data")
		if err == nil {
			var w io.Writer
			if w, err = mw.CreateFormFile("file", "big.bin"); err == nil {
				buf := make([]byte, 32<<10)
				if _, err = io.CopyBuffer(w, src, buf); err == nil {
					err = mw.Close()
				}
			}
		}
		pw.CloseWithError(err)
	}()
	r := httptest.NewRequest(http.MethodPost, "/v1/files", pr)
	r.Header.Set("Content-Type", mw.FormDataContentType())
	r = r.WithContext(caller.With(r.Context(), caller.Caller{Owner: "owner-a"}))
	rec := httptest.NewRecorder()
	h := s.Handler()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.ServeHTTP(rec, r)
	runtime.ReadMemStats(&after)

	f, _ := decodeFile(t, rec)
	if f.Bytes != size {
		t.Fatalf("bytes = %d, want %d", f.Bytes, size)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	heapGrowth := int64(after.HeapInuse) - int64(before.HeapInuse)
	t.Logf("50 MB upload: %d KiB allocated, heap in use grew %d KiB", allocated>>10, heapGrowth>>10)
	if allocated > budget || heapGrowth > budget {
		t.Fatalf("upload allocated %d bytes (heap +%d); want under %d for a %d-byte file", allocated, heapGrowth, budget, size)
	}

	// And the blob is exactly what was sent.
	_, fh, err := s.Open(context.Background(), "owner-a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	got := sha256.New()
	if _, err := io.Copy(got, fh); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Sum(nil), sum.Sum(nil)) {
		t.Fatal("stored content differs from the upload")
	}
}

// TestOpenAIGoSDK drives the handler with the official Go SDK over real
// HTTP: it sends the file part before purpose, decodes our objects with its
// own types and pages with the last item's id.
func TestOpenAIGoSDK(t *testing.T) {
	s := openStore(t, t.TempDir(), Options{})
	srv := httptest.NewServer(withOwner(s.Handler()))
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("owner-sdk"), option.WithMaxRetries(0))
	ctx := context.Background()

	content := "{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{}}\n"
	var created []string
	for i := range 3 {
		params := openai.FileNewParams{
			File:    openai.File(strings.NewReader(content), fmt.Sprintf("in%d.jsonl", i), "application/jsonl"),
			Purpose: openai.FilePurposeBatch,
		}
		if i == 0 {
			params.ExpiresAfter = openai.FileNewParamsExpiresAfter{Seconds: 7200}
		}
		f, err := client.Files.New(ctx, params)
		if err != nil {
			t.Fatalf("Files.New: %v", err)
		}
		//lint:ignore SA1019 the files API still sends status; the test checks the wire field
		if f.Bytes != int64(len(content)) || f.Purpose != "batch" || f.Status != "processed" {
			t.Fatalf("Files.New = %+v", f)
		}
		if i == 0 && f.ExpiresAt != f.CreatedAt+7200 {
			t.Fatalf("expires_at = %d, want created_at+7200", f.ExpiresAt)
		}
		created = append(created, f.ID)
	}

	got, err := client.Files.Get(ctx, created[1])
	if err != nil || got.ID != created[1] || got.Filename != "in1.jsonl" {
		t.Fatalf("Files.Get = %+v, %v", got, err)
	}

	var listed []string
	iter := client.Files.ListAutoPaging(ctx, openai.FileListParams{Limit: openai.Int(1), Order: openai.FileListParamsOrderAsc})
	for iter.Next() {
		listed = append(listed, iter.Current().ID)
	}
	if err := iter.Err(); err != nil || !slices.Equal(listed, created) {
		t.Fatalf("auto-paged list = %v, %v; want %v", listed, err, created)
	}

	resp, err := client.Files.Content(ctx, created[2])
	if err != nil {
		t.Fatalf("Files.Content: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != content {
		t.Fatalf("content = %q", body)
	}

	del, err := client.Files.Delete(ctx, created[2])
	if err != nil || !del.Deleted || del.ID != created[2] {
		t.Fatalf("Files.Delete = %+v, %v", del, err)
	}
	_, err = client.Files.Get(ctx, created[2])
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "not_found" {
		t.Fatalf("Files.Get after delete = %v, want a 404 not_found", err)
	}
	// The other owner's SDK sees nothing.
	other := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("owner-other"), option.WithMaxRetries(0))
	if _, err := other.Files.Get(ctx, created[0]); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("other owner's Files.Get = %v, want 404", err)
	}
}

// TestContractSchemas says in -v output whether the bodies above were
// checked against the official OpenAI schema, and checks one of each.
func TestContractSchemas(t *testing.T) {
	schematest.RequireSpec(t)
	s := openStore(t, t.TempDir(), Options{})
	f, _ := decodeFile(t, upload(t, s, "o", part{name: "purpose", content: "user_data"},
		part{name: "expires_after[anchor]", content: "created_at"}, part{name: "expires_after[seconds]", content: "3600"},
		part{name: "file", filename: "a.txt", content: "a"}))
	rec := serve(t, s, http.MethodGet, "/v1/files?limit=1", "o", "", nil)
	schematest.Conforms(t, "ListFilesResponse", rec.Body.Bytes())
	rec = serve(t, s, http.MethodGet, "/v1/files?purpose=batch", "o", "", nil) // empty page
	schematest.Conforms(t, "ListFilesResponse", rec.Body.Bytes())
	rec = serve(t, s, http.MethodDelete, "/v1/files/"+f.ID, "o", "", nil)
	schematest.Conforms(t, "DeleteFileResponse", rec.Body.Bytes())
	rec = serve(t, s, http.MethodGet, "/v1/files/"+f.ID, "o", "", nil)
	schematest.Conforms(t, "ErrorResponse", rec.Body.Bytes())
}
