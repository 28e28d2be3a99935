package batches

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// apiError is the OpenAI error body.
type apiError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func wantError(t *testing.T, code int, body []byte, wantStatus int, wantCode, wantParam string) {
	t.Helper()
	if code != wantStatus {
		t.Fatalf("status %d, want %d: %s", code, wantStatus, body)
	}
	schematest.Conforms(t, "ErrorResponse", body)
	e := decode[apiError](t, body)
	if e.Error.Message == "" {
		t.Errorf("empty message: %s", body)
	}
	if got := deref(e.Error.Code); wantCode != "" && got != wantCode {
		t.Errorf("code %q, want %q: %s", got, wantCode, body)
	}
	if got := deref(e.Error.Param); got != wantParam {
		t.Errorf("param %q, want %q: %s", got, wantParam, body)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestCreateErrors(t *testing.T) {
	e := newEnv(t, envConfig{})
	input := e.upload("alice", files.PurposeBatch, chatLines(1))
	userData := e.upload("alice", files.PurposeUserData, chatLines(1))
	bobs := e.upload("bob", files.PurposeBatch, chatLines(1))
	long := strings.Repeat("x", 65)
	tooMany := map[string]string{}
	for i := range 17 {
		tooMany[fmt.Sprint("k", i)] = "v"
	}
	tooManyJSON, _ := json.Marshal(tooMany)
	req := func(fields string) string {
		return `{"input_file_id":"` + input + `","endpoint":"/v1/chat/completions","completion_window":"24h"` + fields + `}`
	}
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		param  string
	}{
		{"not json", `{"input_file_id":`, 400, "invalid_json", ""},
		{"missing input_file_id", `{"endpoint":"/v1/chat/completions","completion_window":"24h"}`, 400, "missing_required_parameter", "input_file_id"},
		{"input_file_id not a string", `{"input_file_id":7,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, 400, "invalid_type", "input_file_id"},
		{"missing endpoint", `{"input_file_id":"` + input + `","completion_window":"24h"}`, 400, "missing_required_parameter", "endpoint"},
		{"unsupported endpoint", `{"input_file_id":"` + input + `","endpoint":"/v1/completions","completion_window":"24h"}`, 400, "invalid_value", "endpoint"},
		{"missing completion_window", `{"input_file_id":"` + input + `","endpoint":"/v1/embeddings"}`, 400, "missing_required_parameter", "completion_window"},
		{"window not 24h", `{"input_file_id":"` + input + `","endpoint":"/v1/embeddings","completion_window":"48h"}`, 400, "invalid_value", "completion_window"},
		{"metadata too many pairs", req(`,"metadata":` + string(tooManyJSON)), 400, "invalid_value", "metadata"},
		{"metadata key too long", req(`,"metadata":{"` + long + `":"v"}`), 400, "invalid_value", "metadata"},
		{"metadata value too long", req(`,"metadata":{"k":"` + strings.Repeat("é", 513) + `"}`), 400, "invalid_value", "metadata.k"},
		{"metadata value not a string", req(`,"metadata":{"k":1}`), 400, "invalid_value", "metadata.k"},
		{"output_expires_after too short", req(`,"output_expires_after":{"anchor":"created_at","seconds":60}`), 400, "invalid_value", "output_expires_after.seconds"},
		{"output_expires_after bad anchor", req(`,"output_expires_after":{"anchor":"now","seconds":3600}`), 400, "invalid_value", "output_expires_after.anchor"},
		{"no such file", `{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 404, "not_found", "input_file_id"},
		{"another owner's file", `{"input_file_id":"` + bobs + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 404, "not_found", "input_file_id"},
		{"file not for batches", `{"input_file_id":"` + userData + `","endpoint":"/v1/chat/completions","completion_window":"24h"}`, 400, "invalid_value", "input_file_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := e.call("alice", http.MethodPost, "/v1/batches", tt.body)
			wantError(t, code, body, tt.status, tt.code, tt.param)
		})
	}

	t.Run("accepted at the limits", func(t *testing.T) {
		meta := map[string]string{}
		for i := range 16 {
			meta[fmt.Sprintf("%064d", i)] = strings.Repeat("é", 512)
		}
		mj, _ := json.Marshal(meta)
		code, body, _ := e.call("alice", http.MethodPost, "/v1/batches",
			req(`,"metadata":`+string(mj)+`,"output_expires_after":{"anchor":"created_at","seconds":3600}`))
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		schematest.Conforms(t, "Batch", body)
		b := decode[batchView](t, body)
		if b.Status != StatusValidating || len(b.Metadata) != 16 || b.ExpiresAt != b.CreatedAt+24*3600 {
			t.Errorf("created batch: %s", body)
		}
	})
}

func TestAuthAndRoutes(t *testing.T) {
	e := newEnv(t, envConfig{})
	tests := []struct {
		name, owner, method, path string
		status                    int
		code, allow               string
	}{
		{"no caller", "", http.MethodGet, "/v1/batches", 401, "invalid_api_key", ""},
		{"no caller create", "", http.MethodPost, "/v1/batches", 401, "invalid_api_key", ""},
		{"delete collection", "alice", http.MethodDelete, "/v1/batches", 405, "method_not_allowed", "GET, HEAD, POST"},
		{"post to a batch", "alice", http.MethodPost, "/v1/batches/batch_x", 405, "method_not_allowed", "GET, HEAD"},
		{"delete a batch", "alice", http.MethodDelete, "/v1/batches/batch_x", 405, "method_not_allowed", "GET, HEAD"},
		{"get cancel", "alice", http.MethodGet, "/v1/batches/batch_x/cancel", 405, "method_not_allowed", "POST"},
		{"unknown action", "alice", http.MethodPost, "/v1/batches/batch_x/retry", 404, "unknown_url", ""},
		{"unknown sibling", "alice", http.MethodGet, "/v1/batchesx", 404, "unknown_url", ""},
		{"missing batch", "alice", http.MethodGet, "/v1/batches/batch_nope", 404, "not_found", ""},
		{"cancel missing batch", "alice", http.MethodPost, "/v1/batches/batch_nope/cancel", 404, "not_found", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, h := e.call(tt.owner, tt.method, tt.path, "")
			if code != tt.status {
				t.Fatalf("status %d, want %d: %s", code, tt.status, body)
			}
			schematest.Conforms(t, "ErrorResponse", body)
			if got := deref(decode[apiError](t, body).Error.Code); got != tt.code {
				t.Errorf("code %q, want %q", got, tt.code)
			}
			if got := h.Get("allow"); got != tt.allow {
				t.Errorf("allow %q, want %q", got, tt.allow)
			}
		})
	}
}

func TestValidationFailures(t *testing.T) {
	e := newEnv(t, envConfig{opts: Options{MaxLines: 3}})
	e.run()
	ok := func(id string) string { return chatLine(id, "gpt-4o-mini", "hi") }
	type wantErr struct {
		code, param string
		line        int
	}
	tests := []struct {
		name  string
		input string
		want  []wantErr
	}{
		{"bad json line", ok("a") + "\n{\"custom_id\": \n", []wantErr{{"invalid_json_line", "", 2}}},
		{"not an object", "[1,2]\n", []wantErr{{"invalid_json_line", "", 1}}},
		{"duplicate custom_id", ok("a") + "\n" + ok("b") + "\n" + ok("a") + "\n", []wantErr{{"duplicate_custom_id", "custom_id", 3}}},
		{"missing custom_id", `{"method":"POST","url":"/v1/chat/completions","body":{}}` + "\n", []wantErr{{"missing_required_parameter", "custom_id", 1}}},
		{"custom_id not a string", `{"custom_id":1,"method":"POST","url":"/v1/chat/completions","body":{}}` + "\n", []wantErr{{"invalid_custom_id", "custom_id", 1}}},
		{"wrong url", ok("a") + "\n" + `{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{}}` + "\n", []wantErr{{"invalid_url", "url", 2}}},
		{"wrong method", `{"custom_id":"a","method":"GET","url":"/v1/chat/completions","body":{}}` + "\n", []wantErr{{"invalid_method", "method", 1}}},
		{"body not an object", `{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":"hi"}` + "\n", []wantErr{{"invalid_body", "body", 1}}},
		{"too many lines", ok("a") + "\n" + ok("b") + "\n" + ok("c") + "\n" + ok("d") + "\n", []wantErr{{"line_limit_exceeded", "", 4}}},
		{"empty file", "\n\n", []wantErr{{"empty_file", "input_file_id", 0}}},
		{"several errors on one line", `{"custom_id":"a","method":"PUT","url":"/v1/x"}` + "\n", []wantErr{
			{"invalid_method", "method", 1}, {"invalid_url", "url", 1}, {"missing_required_parameter", "body", 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := e.create("alice", e.upload("alice", files.PurposeBatch, tt.input), "/v1/chat/completions").ID
			b, raw := e.waitStatus("alice", id, StatusFailed)
			schematest.Conforms(t, "Batch", raw)
			if b.FailedAt == 0 || b.InProgressAt != 0 || b.OutputFileID != "" || b.ErrorFileID != "" {
				t.Errorf("failed batch: %s", raw)
			}
			if b.Errors == nil || b.Errors.Object != "list" || len(b.Errors.Data) != len(tt.want) {
				t.Fatalf("errors: %s", raw)
			}
			for i, w := range tt.want {
				got := b.Errors.Data[i]
				line := 0
				if got.Line != nil {
					line = *got.Line
				}
				if got.Code != w.code || deref(got.Param) != w.param || line != w.line || got.Message == "" {
					t.Errorf("error %d: %+v (param %q, line %d), want %+v", i, got, deref(got.Param), line, w)
				}
			}
		})
	}

	t.Run("errors are capped", func(t *testing.T) {
		e := newEnv(t, envConfig{})
		e.run()
		var sb strings.Builder
		for range maxValidationErrors + 500 {
			sb.WriteString("not json\n")
		}
		id := e.create("alice", e.upload("alice", files.PurposeBatch, sb.String()), "/v1/chat/completions").ID
		b, _ := e.waitStatus("alice", id, StatusFailed)
		if len(b.Errors.Data) != maxValidationErrors {
			t.Errorf("%d errors, want the cap %d", len(b.Errors.Data), maxValidationErrors)
		}
	})
}

// TestLifecycle runs whole batches against the fake upstream: mixed models,
// a line the upstream rejects, embeddings.
func TestLifecycle(t *testing.T) {
	schematest.RequireSpec(t)
	tests := []struct {
		name     string
		endpoint string
		lines    []string
		model    string            // the batch's model field
		ok       map[string]string // custom_id -> text the answer must contain
		failed   map[string]int    // custom_id -> status code
	}{
		{
			name:     "chat with mixed models and a rejected line",
			endpoint: "/v1/chat/completions",
			lines: []string{
				chatLine("a", "gpt-4o-mini", "first question"),
				chatLine("b", "gpt-4o", "second question"),
				`{"custom_id":"no-messages","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o"}}`,
				"",
				chatLine("c", "claude-sonnet", "third \"quoted\" question"),
			},
			ok:     map[string]string{"a": "Echo: first question", "b": "Echo: second question", "c": `Echo: third \"quoted\" question`},
			failed: map[string]int{"no-messages": 400},
		},
		{
			name:     "chat, one model, only successes",
			endpoint: "/v1/chat/completions",
			lines:    []string{chatLine("x", "gpt-4o-mini", "one"), chatLine("y", "gpt-4o-mini", "two")},
			model:    "gpt-4o-mini",
			ok:       map[string]string{"x": "Echo: one", "y": "Echo: two"},
		},
		{
			name:     "embeddings",
			endpoint: "/v1/embeddings",
			lines: []string{
				`{"custom_id":"e1","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":"hello"}}`,
				`{"custom_id":"e2","method":"POST","url":"/v1/embeddings","body":{"model":"text-embedding-3-small","input":["a","b"]}}`,
			},
			model: "text-embedding-3-small",
			ok:    map[string]string{"e1": `"object":"list"`, "e2": `"index":1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{})
			e.run()
			created := e.create("alice", e.upload("alice", files.PurposeBatch, strings.Join(tt.lines, "\n")), tt.endpoint)
			b, raw := e.waitStatus("alice", created.ID, StatusCompleted)
			schematest.Conforms(t, "Batch", raw)

			total := len(tt.ok) + len(tt.failed)
			if b.RequestCounts.Total != int64(total) || b.RequestCounts.Completed != int64(len(tt.ok)) ||
				b.RequestCounts.Failed != int64(len(tt.failed)) {
				t.Errorf("request_counts %+v, want %d/%d/%d", b.RequestCounts, total, len(tt.ok), len(tt.failed))
			}
			if b.InProgressAt == 0 || b.FinalizingAt == 0 || b.CompletedAt == 0 || b.FailedAt != 0 || b.Errors != nil {
				t.Errorf("timestamps or errors: %s", raw)
			}
			if b.Model != tt.model {
				t.Errorf("model %q, want %q", b.Model, tt.model)
			}
			if b.Usage.InputTokens == 0 || b.Usage.TotalTokens < b.Usage.InputTokens+b.Usage.OutputTokens {
				t.Errorf("usage %+v", b.Usage)
			}
			if (b.ErrorFileID != "") != (len(tt.failed) > 0) {
				t.Errorf("error_file_id %q with %d failures", b.ErrorFileID, len(tt.failed))
			}

			out := e.lines("alice", b.OutputFileID)
			if len(out) != len(tt.ok) {
				t.Fatalf("%d output lines, want %d", len(out), len(tt.ok))
			}
			seenIDs := map[string]bool{}
			for _, l := range out {
				want, ok := tt.ok[l.CustomID]
				if !ok {
					t.Errorf("unexpected output line %s", l.raw)
					continue
				}
				if !strings.HasPrefix(l.ID, "batch_req_") || seenIDs[l.ID] || l.Error != nil || l.Response == nil {
					t.Errorf("line shape: %s", l.raw)
					continue
				}
				seenIDs[l.ID] = true
				if l.Response.StatusCode != 200 || !strings.HasPrefix(l.Response.RequestID, "req_") {
					t.Errorf("response: %s", l.raw)
				}
				if !strings.Contains(string(l.Response.Body), want) {
					t.Errorf("body of %s lacks %q: %s", l.CustomID, want, l.Response.Body)
				}
				if !strings.Contains(l.raw, `"error":null`) {
					t.Errorf("error must be null: %s", l.raw)
				}
			}
			errs := e.lines("alice", b.ErrorFileID)
			if len(errs) != len(tt.failed) {
				t.Fatalf("%d error lines, want %d", len(errs), len(tt.failed))
			}
			for _, l := range errs {
				if l.Response == nil || l.Response.StatusCode != tt.failed[l.CustomID] || l.Error != nil {
					t.Errorf("error line: %s", l.raw)
					continue
				}
				schematest.Conforms(t, "ErrorResponse", l.Response.Body)
			}
			for _, id := range []string{b.OutputFileID, b.ErrorFileID} {
				if id == "" {
					continue
				}
				f, err := e.files.Get(context.Background(), "alice", id)
				if err != nil {
					t.Fatal(err)
				}
				kind := map[bool]string{true: "output", false: "error"}[id == b.OutputFileID]
				if f.Filename != b.ID+"_"+kind+".jsonl" || f.ExpiresAt.IsZero() ||
					f.ExpiresAt.Sub(f.CreatedAt) < 29*24*time.Hour || f.ExpiresAt.Sub(f.CreatedAt) > 31*24*time.Hour {
					t.Errorf("file %+v", f)
				}
				if _, err := e.files.Get(context.Background(), "bob", id); err == nil {
					t.Errorf("bob can read alice's %s file", kind)
				}
			}
			// The spool goes once the batch is terminal (just after).
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				_, err := os.Stat(filepath.Join(e.dir, "batches", b.ID))
				if os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("spool directory left behind: %v", err)
				}
			}
		})
	}
}

func TestOwnerIsolation(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(1)), "/v1/chat/completions").ID
	for _, tt := range []struct{ method, path string }{
		{http.MethodGet, "/v1/batches/" + id},
		{http.MethodPost, "/v1/batches/" + id + "/cancel"},
	} {
		code, body, _ := e.call("bob", tt.method, tt.path, "")
		wantError(t, code, body, 404, "not_found", "id")
		if !strings.Contains(string(body), "No such Batch object: "+id) {
			t.Errorf("message: %s", body)
		}
	}
	code, body, _ := e.call("bob", http.MethodGet, "/v1/batches", "")
	if code != 200 || decode[listResponse](t, body).Data == nil || len(decode[listResponse](t, body).Data) != 0 {
		t.Errorf("bob's list: %d %s", code, body)
	}
	code, body, _ = e.call("bob", http.MethodGet, "/v1/batches?after="+id, "")
	wantError(t, code, body, 400, "invalid_value", "after")
	if b, _ := e.get("alice", id); b.Status != StatusValidating {
		t.Errorf("bob's cancel touched alice's batch: %s", b.Status)
	}
}

func TestActiveLimit(t *testing.T) {
	e := newEnv(t, envConfig{}) // no runner: batches stay validating
	input := e.upload("alice", files.PurposeBatch, chatLines(1))
	var ids []string
	for range MaxActive {
		ids = append(ids, e.create("alice", input, "/v1/chat/completions").ID)
	}
	body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, input)
	code, resp, _ := e.call("alice", http.MethodPost, "/v1/batches", body)
	wantError(t, code, resp, 429, "batch_limit_exceeded", "")

	// Another owner has a limit of its own.
	e.create("bob", e.upload("bob", files.PurposeBatch, chatLines(1)), "/v1/chat/completions")

	// A cancelled batch no longer counts. (Without a runner it stays
	// cancelling, which still counts; the runner finishes it.)
	code, resp, _ = e.call("alice", http.MethodPost, "/v1/batches/"+ids[0]+"/cancel", "")
	if code != 200 || decode[batchView](t, resp).Status != StatusCancelling {
		t.Fatalf("cancel: %d %s", code, resp)
	}
	code, _, _ = e.call("alice", http.MethodPost, "/v1/batches", body)
	if code != 429 {
		t.Errorf("cancelling batch should still count: %d", code)
	}
	e.run()
	b, raw := e.waitStatus("alice", ids[0], StatusCancelled)
	if b.CancellingAt == 0 || b.CancelledAt == 0 || b.InProgressAt != 0 {
		t.Errorf("cancelled while validating: %s", raw)
	}
	for _, id := range ids[1:] {
		e.waitStatus("alice", id, StatusCompleted)
	}
	code, resp, _ = e.call("alice", http.MethodPost, "/v1/batches", body)
	if code != 200 {
		t.Errorf("after the batches finished: %d %s", code, resp)
	}
}

func TestList(t *testing.T) {
	e := newEnv(t, envConfig{})
	input := e.upload("alice", files.PurposeBatch, chatLines(1))
	var ids []string
	for range 5 {
		ids = append(ids, e.create("alice", input, "/v1/chat/completions").ID)
	}
	newest := func(i int) string { return ids[len(ids)-1-i] }

	tests := []struct {
		query   string
		want    []string
		hasMore bool
	}{
		{"", []string{newest(0), newest(1), newest(2), newest(3), newest(4)}, false},
		{"?limit=2", []string{newest(0), newest(1)}, true},
		{"?limit=2&after=" + newest(1), []string{newest(2), newest(3)}, true},
		{"?limit=2&after=" + newest(3), []string{newest(4)}, false},
		{"?after=" + newest(4), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			code, body, _ := e.call("alice", http.MethodGet, "/v1/batches"+tt.query, "")
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			schematest.Conforms(t, "ListBatchesResponse", body)
			l := decode[listResponse](t, body)
			var got []string
			for _, b := range l.Data {
				got = append(got, b.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || l.HasMore != tt.hasMore || l.Object != "list" {
				t.Errorf("got %v has_more %v, want %v %v", got, l.HasMore, tt.want, tt.hasMore)
			}
			if len(got) > 0 && (l.FirstID != got[0] || l.LastID != got[len(got)-1]) {
				t.Errorf("first_id %q last_id %q", l.FirstID, l.LastID)
			}
		})
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?limit=x"} {
		code, body, _ := e.call("alice", http.MethodGet, "/v1/batches"+q, "")
		wantError(t, code, body, 400, "invalid_value", "limit")
	}
}

func TestCancel(t *testing.T) {
	const n = 300
	e := newEnv(t, envConfig{
		opts: Options{Concurrency: 4},
		fake: fake.Options{Fault: fake.Fault{Delay: 20 * time.Millisecond}},
	})
	e.run()
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(n)), "/v1/chat/completions").ID
	e.wait("alice", id, "partly done", func(b batchView) bool { return b.RequestCounts.Completed >= 8 })

	code, body, _ := e.call("alice", http.MethodPost, "/v1/batches/"+id+"/cancel", "")
	if code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	schematest.Conforms(t, "Batch", body)
	if b := decode[batchView](t, body); b.Status != StatusCancelling && b.Status != StatusCancelled || b.CancellingAt == 0 {
		t.Errorf("cancel answered %s", body)
	}
	b, raw := e.waitStatus("alice", id, StatusCancelled)
	schematest.Conforms(t, "Batch", raw)
	if b.CancelledAt == 0 || b.CompletedAt != 0 || b.RequestCounts.Total != n {
		t.Errorf("cancelled batch: %s", raw)
	}
	out := e.lines("alice", b.OutputFileID)
	if int64(len(out)) != b.RequestCounts.Completed || len(out) == 0 || len(out) >= n-10 {
		t.Errorf("%d output lines, completed %d of %d", len(out), b.RequestCounts.Completed, n)
	}
	if b.ErrorFileID != "" || b.RequestCounts.Failed != 0 {
		t.Errorf("cancelled lines are not failures: %s", raw)
	}

	// Cancelling again is a no-op; a finished batch cannot be cancelled.
	code, body, _ = e.call("alice", http.MethodPost, "/v1/batches/"+id+"/cancel", "")
	wantError(t, code, body, 409, "invalid_batch_status", "")
}

func TestExpiry(t *testing.T) {
	const n = 200
	clk := newClock(time.Now())
	e := newEnv(t, envConfig{
		opts: Options{Concurrency: 4, Now: clk.Now},
		fake: fake.Options{Fault: fake.Fault{Delay: 20 * time.Millisecond}},
	})
	e.run()
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(n)), "/v1/chat/completions").ID
	e.wait("alice", id, "partly done", func(b batchView) bool { return b.RequestCounts.Completed >= 8 })
	clk.Advance(24*time.Hour + time.Second)

	b, raw := e.waitStatus("alice", id, StatusExpired)
	schematest.Conforms(t, "Batch", raw)
	if b.ExpiredAt < b.ExpiresAt || b.CompletedAt != 0 || b.RequestCounts.Total != n ||
		b.RequestCounts.Completed+b.RequestCounts.Failed != n {
		t.Errorf("expired batch: %s", raw)
	}
	out, errs := e.lines("alice", b.OutputFileID), e.lines("alice", b.ErrorFileID)
	if len(out) == 0 || len(out) >= n || int64(len(out)) != b.RequestCounts.Completed {
		t.Errorf("%d output lines of %d (completed %d)", len(out), n, b.RequestCounts.Completed)
	}
	seen := map[string]int{}
	for _, l := range out {
		seen[l.CustomID]++
	}
	for _, l := range errs {
		seen[l.CustomID]++
		if l.Response != nil || l.Error == nil || l.Error.Code != "batch_expired" || !strings.HasPrefix(l.ID, "batch_req_") {
			t.Errorf("expired line: %s", l.raw)
		}
	}
	for i := range n {
		if c := seen[fmt.Sprintf("req-%d", i)]; c != 1 {
			t.Errorf("req-%d has %d results", i, c)
		}
	}
}

// TestExpiredBeforeStart: a batch created and not picked up within its
// window (the gateway was down) expires without sending anything.
func TestExpiredBeforeStart(t *testing.T) {
	clk := newClock(time.Now())
	e := newEnv(t, envConfig{opts: Options{Now: clk.Now}})
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(3)), "/v1/chat/completions").ID
	clk.Advance(25 * time.Hour)
	e.run()
	b, raw := e.waitStatus("alice", id, StatusExpired)
	if b.OutputFileID != "" || b.ErrorFileID != "" || b.ExpiredAt == 0 {
		t.Errorf("%s", raw)
	}
}

// TestResume stops the runner in the middle of a batch, as a restart would,
// and checks the next runner finishes it with every line answered once.
func TestResume(t *testing.T) {
	const n = 400
	e := newEnv(t, envConfig{
		opts: Options{Concurrency: 8},
		fake: fake.Options{Fault: fake.Fault{Delay: 10 * time.Millisecond}},
	})
	e.run()
	lines := chatLines(n) + `{"custom_id":"bad","method":"POST","url":"/v1/chat/completions","body":{"model":"m"}}` + "\n"
	id := e.create("alice", e.upload("alice", files.PurposeBatch, lines), "/v1/chat/completions").ID
	e.wait("alice", id, "partly done", func(b batchView) bool { return b.RequestCounts.Completed >= 40 })
	e.stop()

	b, _ := e.get("alice", id)
	if b.Status != StatusInProgress {
		t.Fatalf("after stop: %s", b.Status)
	}
	spool := filepath.Join(e.dir, "batches", id, spoolOutput)
	before, err := os.ReadFile(spool)
	if err != nil {
		t.Fatal(err)
	}
	done := strings.Count(string(before), "\n")
	if done == 0 || done >= n {
		t.Fatalf("%d lines done before the restart", done)
	}
	// A crash in the middle of a write leaves a partial last line.
	f, err := os.OpenFile(spool, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id":"batch_req_x","custom_id":"req-`)
	f.Close()

	e.restart()
	b, raw := e.waitStatus("alice", id, StatusCompleted)
	if b.RequestCounts.Total != n+1 || b.RequestCounts.Completed != n || b.RequestCounts.Failed != 1 {
		t.Errorf("counts after resume: %s", raw)
	}
	seen := map[string]int{}
	for _, l := range append(e.lines("alice", b.OutputFileID), e.lines("alice", b.ErrorFileID)...) {
		seen[l.CustomID]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("req-%d", i)]; c != 1 {
			t.Errorf("req-%d has %d results", i, c)
		}
	}
	if seen["bad"] != 1 || len(seen) != n+1 {
		t.Errorf("%d custom_ids, bad %d", len(seen), seen["bad"])
	}
}

// TestResumeStates: a restart finds batches in each non-terminal state and
// finishes them.
func TestResumeStates(t *testing.T) {
	e := newEnv(t, envConfig{})
	ctx := context.Background()
	input := e.upload("alice", files.PurposeBatch, chatLines(2))
	ids := map[string]string{}
	for _, st := range []string{StatusValidating, StatusFinalizing, StatusCancelling} {
		id := e.create("alice", input, "/v1/chat/completions").ID
		ids[st] = id
		if st == StatusValidating {
			continue
		}
		// Results already spooled by the previous process.
		dir := filepath.Join(e.dir, "batches", id)
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, spoolOutput), []byte(`{"id":"batch_req_1","custom_id":"req-0","response":{"status_code":200,"request_id":"r","body":{"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}},"error":null}`+"\n"), 0o600)
		if _, err := e.svc.store.Transition(ctx, id, []string{StatusValidating}, st, time.Now(), Change{Total: new(int64(2))}); err != nil {
			t.Fatal(err)
		}
	}
	e.run()
	want := map[string]string{StatusValidating: StatusCompleted, StatusFinalizing: StatusCompleted, StatusCancelling: StatusCancelled}
	for from, id := range ids {
		b, raw := e.waitStatus("alice", id, want[from])
		if from != StatusValidating && (b.RequestCounts.Completed != 1 || b.Usage.TotalTokens != 5 || b.OutputFileID == "") {
			t.Errorf("%s -> %s: %s", from, want[from], raw)
		}
	}
}

// TestRetries: lines the gateway could not answer, or answered 503, are
// retried; lines it never answers end in the error file.
func TestRetries(t *testing.T) {
	tests := []struct {
		name      string
		gw        *flakyGateway
		completed int64
		errCode   string
	}{
		{"transport error then 503 then success", &flakyGateway{transport: 1, unavailable: 2}, 5, ""},
		{"503 past the retries", &flakyGateway{unavailable: 10}, 0, ""},
		{"gateway unreachable", &flakyGateway{always: true}, 0, "request_failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, envConfig{opts: Options{MaxRetries: 3}, wrap: func(g Gateway) Gateway { tt.gw.next = g; return tt.gw }})
			e.run()
			id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(5)), "/v1/chat/completions").ID
			b, raw := e.waitStatus("alice", id, StatusCompleted)
			if b.RequestCounts.Completed != tt.completed || b.RequestCounts.Failed != 5-tt.completed {
				t.Errorf("counts: %s", raw)
			}
			if got := tt.gw.calls.Load(); got != 5*4 {
				t.Errorf("%d gateway calls, want 5 lines x 4 attempts", got)
			}
			for _, l := range e.lines("alice", b.ErrorFileID) {
				switch tt.errCode {
				case "":
					if l.Response == nil || l.Response.StatusCode != 503 || l.Error != nil {
						t.Errorf("error line: %s", l.raw)
					}
				default:
					if l.Response != nil || l.Error == nil || l.Error.Code != tt.errCode || strings.Contains(l.Error.Message, "10.0.0.1") {
						t.Errorf("error line: %s", l.raw)
					}
				}
			}
		})
	}
}

// TestLongLine: a line of several megabytes is read, checked and sent
// whole.
func TestLongLine(t *testing.T) {
	e := newEnv(t, envConfig{})
	e.run()
	big := strings.Repeat("word ", 1<<20) // 5 MiB
	input := chatLine("small", "m", "hi") + "\n" + chatLine("big", "m", big) + "\n"
	id := e.create("alice", e.upload("alice", files.PurposeBatch, input), "/v1/chat/completions").ID
	b, raw := e.waitStatus("alice", id, StatusCompleted)
	if b.RequestCounts.Completed != 2 {
		t.Fatalf("%s", raw)
	}
	for _, l := range e.lines("alice", b.OutputFileID) {
		if l.CustomID == "big" && !strings.Contains(string(l.Response.Body), strings.TrimSpace(big[:1000])) {
			t.Errorf("big line's answer does not echo it")
		}
	}
}

func TestLineReader(t *testing.T) {
	tests := []struct {
		name  string
		input string
		max   int
		want  []string // "!" marks a too-long line, "~" a line without a newline
	}{
		{"plain", "a\nbb\n", 10, []string{"a", "bb"}},
		{"crlf and no final newline", "a\r\nbb", 10, []string{"a", "~bb"}},
		{"empty lines", "\n\na\n", 10, []string{"", "", "a"}},
		{"too long", "abc\n" + strings.Repeat("x", 200_000) + "\nz\n", 100_000, []string{"abc", "!", "z"}},
		{"long within the limit", strings.Repeat("y", 150_000) + "\n", 200_000, []string{strings.Repeat("y", 150_000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := newLineReader(strings.NewReader(tt.input), tt.max)
			var got []string
			for {
				line, tooLong, complete, err := lr.next()
				if err != nil {
					break
				}
				s := string(line)
				if tooLong {
					s = "!"
				} else if !complete {
					s = "~" + s
				}
				got = append(got, s)
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %.80q, want %.80q", got, tt.want)
			}
			if lr.off != int64(len(tt.input)) {
				t.Errorf("offset %d, want %d", lr.off, len(tt.input))
			}
		})
	}
}

// TestInputDeleted: a batch whose input file is deleted before it runs
// fails, saying why.
func TestInputDeleted(t *testing.T) {
	e := newEnv(t, envConfig{})
	input := e.upload("alice", files.PurposeBatch, chatLines(2))
	id := e.create("alice", input, "/v1/chat/completions").ID
	if err := e.files.Delete(context.Background(), "alice", input); err != nil {
		t.Fatal(err)
	}
	e.run()
	b, raw := e.waitStatus("alice", id, StatusFailed)
	schematest.Conforms(t, "Batch", raw)
	if b.Errors == nil || len(b.Errors.Data) != 1 || b.Errors.Data[0].Code != "input_file_deleted" ||
		deref(b.Errors.Data[0].Param) != "input_file_id" {
		t.Errorf("%s", raw)
	}
}
