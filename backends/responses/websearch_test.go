package responses

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

const braveKey = "brave-test-key"

// braveEnv is an env whose service searches a fake Brave API.
func braveEnv(t *testing.T, opts fake.Options) (*env, *atomic.Int64) {
	t.Helper()
	opts.APIKey = braveKey
	var searches atomic.Int64
	h := fake.NewBraveSearch(opts)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		searches.Add(1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return newEnv(t, envOptions{search: NewBrave(srv.URL, braveKey)}), &searches
}

// checkCitations checks that every url_citation spans its URL in the text
// (indexes in code points) or, when the text cites none, the whole text.
func checkCitations(t *testing.T, msg gjson.Result, results []fake.BraveResult) {
	t.Helper()
	part := msg.Get("content.0")
	text := []rune(part.Get("text").Str)
	anns := part.Get("annotations").Array()
	if len(anns) != len(results) {
		t.Fatalf("%d annotations for %d results: %s", len(anns), len(results), part.Raw)
	}
	for i, a := range anns {
		start, end := int(a.Get("start_index").Int()), int(a.Get("end_index").Int())
		if a.Get("type").Str != "url_citation" || a.Get("url").Str != results[i].URL || a.Get("title").Str != results[i].Title {
			t.Errorf("annotation %d: %s", i, a.Raw)
		}
		if start < 0 || end > len(text) || string(text[start:end]) != results[i].URL {
			t.Errorf("annotation %d spans %d-%d, not its URL", i, start, end)
		}
	}
}

func TestWebSearch(t *testing.T) {
	tests := []struct {
		name, tool string
		results    int
	}{
		{"web_search", `{"type":"web_search"}`, 5},
		{"web_search_preview", `{"type":"web_search_preview"}`, 5},
		{"low context", `{"type":"web_search","search_context_size":"low"}`, 3},
		{"high context", `{"type":"web_search_2025_08_26","search_context_size":"high"}`, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, searches := braveEnv(t, fake.Options{})
			r := e.create("alice", `{"model":"m","input":"What happened today? Préparez-vous.","tools":[`+tc.tool+`]}`)
			// The fake model calls the first function, web_search, with
			// query "sample", then answers with the tool's text.
			ws, msg := r.Get("output.0"), r.Get("output.1")
			if r.Get("output.#").Int() != 2 || ws.Get("type").Str != "web_search_call" || ws.Get("status").Str != "completed" ||
				!strings.HasPrefix(ws.Get("id").Str, "ws_") || ws.Get("action").Raw != `{"type":"search","query":"sample"}` {
				t.Fatalf("output %s", r.Get("output").Raw)
			}
			results := fake.BraveResults("sample", tc.results)
			if !strings.HasPrefix(outputText(r), `The tool returned: Search results for "sample":`) ||
				!strings.Contains(outputText(r), results[0].URL) {
				t.Errorf("text %q", outputText(r))
			}
			checkCitations(t, msg, results)
			if searches.Load() != 1 || e.rec.count() != 2 {
				t.Errorf("%d searches, %d model calls", searches.Load(), e.rec.count())
			}
			if r.Get("tools.0").Raw != tc.tool {
				t.Errorf("tools echo %s", r.Get("tools").Raw)
			}

			// The model was offered the search as a function, and got the
			// results back as the call's tool message.
			first := gjson.ParseBytes(e.rec.bodies[0])
			if first.Get("tools.0.function.name").Str != webSearchFunction || first.Get("tool_choice").Str != "auto" {
				t.Errorf("first request %s", first.Raw)
			}
			msgs := e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("tool_calls.0.function.name").Str != webSearchFunction ||
				msgs[2].Get("role").Str != "tool" || msgs[2].Get("tool_call_id").Str != msgs[1].Get("tool_calls.0.id").Str {
				t.Errorf("second request messages %v", msgs)
			}

			// The conversation continues without the search call: chat
			// completions has no place for it, the cited answer stays.
			e.create("alice", `{"model":"m","previous_response_id":"`+r.Get("id").Str+`","input":"thanks"}`)
			msgs = e.rec.last(t).Get("messages").Array()
			if len(msgs) != 3 || msgs[1].Get("role").Str != "assistant" || msgs[1].Get("content").Str != outputText(r) {
				t.Errorf("follow-up messages %v", msgs)
			}
		})
	}
}

func TestWebSearchOptions(t *testing.T) {
	e, searches := braveEnv(t, fake.Options{})
	// A forced search is a forced call to the function, on the first step
	// only.
	r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"web_search_preview"}],
		"tool_choice":{"type":"web_search_preview"},"include":["web_search_call.action.sources"]}`)
	if got := gjson.ParseBytes(e.rec.bodies[0]).Get("tool_choice").Raw; got != `{"type":"function","function":{"name":"web_search"}}` {
		t.Errorf("first tool_choice %s", got)
	}
	if got := e.rec.last(t).Get("tool_choice").Raw; got != `"auto"` {
		t.Errorf("second tool_choice %s", got)
	}
	sources := r.Get("output.0.action.sources").Array()
	if len(sources) != 5 || sources[0].Get("url").Str != fake.BraveResults("sample", 1)[0].URL || sources[0].Get("type").Str != "url" {
		t.Errorf("sources %s", r.Get("output.0.action").Raw)
	}

	// With a function tool as well, the fake model calls the function
	// (the first tool): that goes back to the client, nothing is searched.
	before := searches.Load()
	r = e.create("alice", `{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{}}},{"type":"web_search"}]}`)
	if r.Get("output.#").Int() != 1 || r.Get("output.0.type").Str != "function_call" || searches.Load() != before {
		t.Errorf("output %s, searches %d", r.Get("output").Raw, searches.Load()-before)
	}

	// web_search is reserved while the tool is on.
	status, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","tools":[{"type":"web_search"},{"type":"function","name":"web_search"}]}`)
	wantError(t, status, body, 400, "tools[1].name")
}

func TestWebSearchStream(t *testing.T) {
	e, _ := braveEnv(t, fake.Options{})
	_, evs := e.stream("alice", `{"model":"m","input":"news","tools":[{"type":"web_search"}],"stream":true}`)
	checkEvents(t, evs)
	got := types(evs)
	head := []string{"response.created", "response.in_progress",
		"response.output_item.added", "response.web_search_call.in_progress", "response.web_search_call.searching",
		"response.web_search_call.completed", "response.output_item.done",
		"response.output_item.added", "response.content_part.added"}
	tail := []string{"response.output_text.annotation.added", "response.output_text.annotation.added",
		"response.output_text.annotation.added", "response.output_text.annotation.added", "response.output_text.annotation.added",
		"response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"}
	if len(got) < len(head)+len(tail) || !slices.Equal(got[:len(head)], head) || !slices.Equal(got[len(got)-len(tail):], tail) {
		t.Fatalf("event types %v", got)
	}
	for _, name := range got[len(head) : len(got)-len(tail)] {
		if name != "response.output_text.delta" {
			t.Fatalf("event types %v", got)
		}
	}
	if evs[2].data.Get("item.status").Str != "in_progress" || evs[3].data.Get("item_id").Str != evs[2].data.Get("item.id").Str ||
		evs[7].data.Get("output_index").Int() != 1 {
		t.Errorf("item events %s / %s / %s", evs[2].raw, evs[3].raw, evs[7].raw)
	}
	final := evs[len(evs)-1].data.Get("response")
	checkCitations(t, final.Get("output.1"), fake.BraveResults("sample", 5))
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+final.Get("id").Str, "")
	if status != 200 || string(body) != final.Raw {
		t.Errorf("GET after stream: %d %s", status, body)
	}
}

func TestWebSearchFailure(t *testing.T) {
	e, searches := braveEnv(t, fake.Options{Fault: fake.Fault{Status: 503}})
	r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`)
	if r.Get("status").Str != "completed" || r.Get("output.0.status").Str != "failed" || searches.Load() != 1 {
		t.Fatalf("response %s", r.Raw)
	}
	if txt := outputText(r); !strings.Contains(txt, "The web search failed") || r.Get("output.1.content.0.annotations").Raw != "[]" {
		t.Errorf("text %q annotations %s", txt, r.Get("output.1.content.0.annotations").Raw)
	}

	// A wrong key is a failed search too, not a failed response.
	e2 := newEnv(t, envOptions{search: NewBrave(httptestBrave(t), "wrong-key")})
	r = e2.create("alice", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`)
	if r.Get("output.0.status").Str != "failed" {
		t.Errorf("wrong key: %s", r.Get("output").Raw)
	}
}

func httptestBrave(t *testing.T) string {
	srv := httptest.NewServer(fake.NewBraveSearch(fake.Options{APIKey: braveKey}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// searchingGateway is a model that searches whenever it may: it calls
// web_search while the tool is offered and answers in text otherwise.
type searchingGateway struct {
	bodies []gjson.Result
}

func (g *searchingGateway) Do(_ context.Context, _, _, _, _ string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	req := gjson.ParseBytes(b)
	g.bodies = append(g.bodies, req)
	out := `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"final answer"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	if req.Get("tools").Exists() {
		out = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_` +
			string(rune('a'+len(g.bodies))) + `","type":"function","function":{"name":"web_search","arguments":"{\"query\":\"again\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(out))}, nil
}

func TestWebSearchLoopBound(t *testing.T) {
	tests := []struct {
		name, extra string
		maxSteps    int
		searches    int
	}{
		{"max steps", ``, 3, 2},
		{"default max steps", ``, 0, 4},
		{"max_tool_calls", `,"max_tool_calls":1`, 5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gw := &searchingGateway{}
			brave := NewBrave(httptestBrave(t), braveKey)
			svc, err := New(t.Context(), Options{DataDir: t.TempDir(), Gateway: gw, Search: brave, MaxSteps: tc.maxSteps, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer svc.Close()
			e := &env{t: t, svc: svc, srv: httptest.NewServer(withCaller(svc.Handler()))}
			defer e.srv.Close()
			r := e.create("alice", `{"model":"m","input":"x","tools":[{"type":"web_search"}]`+tc.extra+`}`)
			var kinds []string
			for _, it := range r.Get("output").Array() {
				kinds = append(kinds, it.Get("type").Str)
			}
			want := append(slices.Repeat([]string{"web_search_call"}, tc.searches), "message")
			if !slices.Equal(kinds, want) || outputText(r) != "final answer" {
				t.Errorf("output %v, want %v (%q)", kinds, want, outputText(r))
			}
			if len(gw.bodies) != tc.searches+1 || gw.bodies[len(gw.bodies)-1].Get("tools").Exists() {
				t.Errorf("%d model calls; last %s", len(gw.bodies), gw.bodies[len(gw.bodies)-1].Raw)
			}
			// Usage adds up every step.
			if r.Get("usage.input_tokens").Int() != int64(3*len(gw.bodies)) || r.Get("usage.output_tokens").Int() != int64(2*len(gw.bodies)) {
				t.Errorf("usage %s", r.Get("usage").Raw)
			}
		})
	}
}

func withCaller(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get(ownerHeader); o != "" {
			r = r.WithContext(withOwner(r.Context(), o))
		}
		h.ServeHTTP(w, r)
	})
}

func TestCitations(t *testing.T) {
	res := []SearchResult{{Title: "A", URL: "https://a.example/x"}, {Title: "B", URL: "https://b.example/y"}}
	tests := []struct {
		name, text string
		want       []annotation
	}{
		{"both cited, multibyte before", "é see https://b.example/y and https://a.example/x.", []annotation{
			{URL: "https://b.example/y", Title: "B", Start: 6, End: 25},
			{URL: "https://a.example/x", Title: "A", Start: 30, End: 49},
		}},
		{"cited twice", "https://a.example/x https://a.example/x", []annotation{
			{URL: "https://a.example/x", Title: "A", Start: 0, End: 19},
			{URL: "https://a.example/x", Title: "A", Start: 20, End: 39},
		}},
		{"none cited", "no links here", []annotation{
			{URL: "https://a.example/x", Title: "A", Start: 0, End: 13},
			{URL: "https://b.example/y", Title: "B", Start: 0, End: 13},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := citations(tc.text, res)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
			for _, a := range got {
				if a.End > utf8.RuneCountInString(tc.text) {
					t.Errorf("annotation past the end: %+v", a)
				}
			}
		})
	}
}
