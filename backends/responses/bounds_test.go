package responses

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// setChainLimits lowers the chain bounds for one test.
func setChainLimits(t *testing.T, n int, bytes int64) {
	t.Helper()
	oldN, oldB := maxChain, maxChainBytes
	maxChain, maxChainBytes = n, bytes
	t.Cleanup(func() { maxChain, maxChainBytes = oldN, oldB })
}

// A chain longer than maxChain is refused with a 400 naming
// previous_response_id, not silently cut at its start, and the model is not
// called; input_items of the longest allowed chain still lists it whole.
func TestChainTooLong(t *testing.T) {
	setChainLimits(t, 3, 1<<20)
	e := newEnv(t, envOptions{})
	prev := ""
	for i := range 4 { // r0 starts it; r3's history is r0..r2, three responses
		body := `{"model":"m","input":"turn ` + string(rune('a'+i)) + `"`
		if prev != "" {
			body += `,"previous_response_id":"` + prev + `"`
		}
		prev = e.create("alice", body+`}`).Get("id").Str
	}
	calls := e.rec.count()
	status, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"more","previous_response_id":"`+prev+`"}`)
	wantError(t, status, body, http.StatusBadRequest, "previous_response_id")
	if !strings.Contains(gjson.GetBytes(body, "error.message").Str, "more than 3 responses") {
		t.Errorf("message %s", body)
	}
	if e.rec.count() != calls {
		t.Errorf("the model was called for a refused conversation")
	}
	status, body = e.do("alice", http.MethodGet, "/v1/responses/"+prev+"/input_items?order=asc&limit=100", "")
	if status != http.StatusOK {
		t.Fatalf("input_items: %d %s", status, body)
	}
	if n := len(gjson.GetBytes(body, "data").Array()); n != 7 { // 4 inputs, 3 earlier outputs
		t.Errorf("input_items lists %d items, want 7: %s", n, body)
	}
}

// A chain whose stored items exceed maxChainBytes is refused with a 400
// before its items are loaded.
func TestChainTooLarge(t *testing.T) {
	setChainLimits(t, 1000, 6000)
	e := newEnv(t, envOptions{})
	big := strings.Repeat("word ", 400) // 2000 bytes of input, echoed back: about 4300 stored
	r1 := e.create("alice", `{"model":"m","input":"`+big+`"}`)
	r2 := e.create("alice", `{"model":"m","input":"`+big+`","previous_response_id":"`+r1.Get("id").Str+`"}`)
	status, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"again","previous_response_id":"`+r2.Get("id").Str+`"}`)
	wantError(t, status, body, http.StatusBadRequest, "previous_response_id")
	if !strings.Contains(gjson.GetBytes(body, "error.message").Str, "more than 6000 bytes") {
		t.Errorf("message %s", body)
	}
}

// parallelGateway is a model that, whenever tools are offered, calls
// web_search n times in parallel in one step, and answers in text
// otherwise.
type parallelGateway struct {
	n     int
	steps atomic.Int64
}

func (g *parallelGateway) Do(_ context.Context, _, _, _, _ string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	g.steps.Add(1)
	out := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"final answer"},"finish_reason":"stop"}]}`
	if gjson.GetBytes(b, "tools").Exists() {
		var calls []string
		for i := range g.n {
			calls = append(calls, `{"id":"call_`+string(rune('a'+i%26))+string(rune('a'+i/26))+`","type":"function","function":{"name":"web_search","arguments":"{\"query\":\"q\"}"}}`)
		}
		out = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
			strings.Join(calls, ",") + `]},"finish_reason":"tool_calls"}]}`
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(out))}, nil
}

// Built-in tool calls a model makes in parallel count one by one: past
// max_tool_calls (or the gateway's own cap) they are not run, and the model
// is told so.
func TestParallelToolCallsBounded(t *testing.T) {
	tests := []struct {
		name, extra string
		parallel    int
		want        int
	}{
		{"max_tool_calls", `,"max_tool_calls":2`, 5, 2},
		{"gateway cap", ``, 3 * maxBuiltinCalls, maxBuiltinCalls},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var searches atomic.Int64
			brave := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				searches.Add(1)
				w.Header().Set("content-type", "application/json")
				_, _ = io.WriteString(w, `{"web":{"results":[{"title":"T","url":"https://e.example/","description":"d"}]}}`)
			}))
			defer brave.Close()
			gw := &parallelGateway{n: tc.parallel}
			svc, err := New(t.Context(), Options{DataDir: t.TempDir(), Gateway: gw, Search: NewBrave(brave.URL, braveKey), Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			e := &env{t: t, svc: svc, srv: httptest.NewServer(withCaller(svc.Handler()))}
			defer e.srv.Close()
			r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"web_search"}]`+tc.extra+`}`)
			if got := searches.Load(); got != int64(tc.want) {
				t.Errorf("%d searches ran, want %d", got, tc.want)
			}
			n := 0
			for _, it := range r.Get("output").Array() {
				if it.Get("type").Str == "web_search_call" {
					n++
				}
			}
			if n != tc.want || outputText(r) != "final answer" {
				t.Errorf("%d web_search_call items, want %d; text %q", n, tc.want, outputText(r))
			}
		})
	}
}

// A model stream that does not end within maxStreamBytes fails the response
// (response.failed, the partial text kept) instead of growing it without
// bound.
func TestStreamTooLong(t *testing.T) {
	old := maxStreamBytes
	maxStreamBytes = 16 << 10
	t.Cleanup(func() { maxStreamBytes = old })
	e := newEnv(t, envOptions{})
	e.fault(fake.HeaderChunks, "20000") // far more than 16 KiB of chunks
	_, evs := e.stream("alice", `{"model":"m","input":"go","stream":true}`)
	checkEvents(t, evs)
	last := evs[len(evs)-1]
	if last.name != "response.failed" || last.data.Get("response.error.code").Str != "server_error" ||
		!strings.Contains(last.data.Get("response.error.message").Str, "exceeded") {
		t.Fatalf("last event %s, error %s", last.name, last.data.Get("response.error").Raw)
	}
	if n := len(outputText(last.data.Get("response"))); n == 0 || n > 16<<10+32<<10 {
		t.Errorf("kept %d bytes of text", n)
	}
}
