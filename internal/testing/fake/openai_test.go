package fake

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

const weatherTools = `"tools":[
	{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
		"city":{"type":"string"},"days":{"type":"integer"},"metric":{"type":"boolean"},
		"scale":{"type":["number","null"]},"extra":{"type":"object"}}}}},
	{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}]`

func TestChatCompletion(t *testing.T) {
	srv := newServer(t, Options{})
	type want struct {
		content  []string // per choice; nil entry means content must be null
		finish   string
		usage    gotUsage
		toolName string
		toolArgs string
	}
	tests := []struct {
		name    string
		body    string
		headers []string
		want    want
	}{{
		name: "echo",
		body: `{"model":"gpt-test","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hello there"}]}`,
		// prompt: 3 + 2 words; completion: "Echo:", "hello", "there".
		want: want{content: []string{"Echo: hello there"}, finish: "stop", usage: gotUsage{5, 3, 8}},
	}, {
		name: "echoes the last user message",
		body: `{"model":"m","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"Echo: first"},{"role":"user","content":"second"},{"role":"assistant","content":null}]}`,
		want: want{content: []string{"Echo: second"}, finish: "stop", usage: gotUsage{1 + 2 + 1 + 1, 2, 7}},
	}, {
		name: "content parts",
		body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look at"},{"type":"image_url","image_url":{"url":"data:,"}},{"type":"text","text":"this"}]}]}`,
		want: want{content: []string{"Echo: look at\nthis"}, finish: "stop", usage: gotUsage{3, 4, 7}},
	}, {
		name: "n=2",
		body: `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`,
		want: want{content: []string{"Echo: hi", "(choice 1) Echo: hi"}, finish: "stop", usage: gotUsage{1, 2 + 4, 7}},
	}, {
		name: "stop string",
		body: `{"model":"m","stop":"three","messages":[{"role":"user","content":"one two three four"}]}`,
		want: want{content: []string{"Echo: one two "}, finish: "stop", usage: gotUsage{4, 3, 7}},
	}, {
		name: "stop array takes the earliest",
		body: `{"model":"m","stop":["four"," two"],"messages":[{"role":"user","content":"one two three four"}]}`,
		want: want{content: []string{"Echo: one"}, finish: "stop", usage: gotUsage{4, 2, 6}},
	}, {
		name: "max_tokens",
		body: `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"one two three"}]}`,
		want: want{content: []string{"Echo: one"}, finish: "length", usage: gotUsage{3, 2, 5}},
	}, {
		name: "max_completion_tokens",
		body: `{"model":"m","max_completion_tokens":3,"messages":[{"role":"user","content":"one two three"}]}`,
		want: want{content: []string{"Echo: one two"}, finish: "length", usage: gotUsage{3, 3, 6}},
	}, {
		name: "max_tokens not reached",
		body: `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"one"}]}`,
		want: want{content: []string{"Echo: one"}, finish: "stop", usage: gotUsage{1, 2, 3}},
	}, {
		name: "stop beyond max_tokens ends in length",
		body: `{"model":"m","max_tokens":2,"stop":"three","messages":[{"role":"user","content":"one two three"}]}`,
		want: want{content: []string{"Echo: one"}, finish: "length", usage: gotUsage{3, 2, 5}},
	}, {
		name:    "x-fake-chunks pads",
		body:    `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		headers: []string{HeaderChunks, "5"},
		want:    want{content: []string{"Echo: hi lorem ipsum dolor"}, finish: "stop", usage: gotUsage{1, 5, 6}},
	}, {
		name: "tool call",
		body: `{"model":"m",` + weatherTools + `,"messages":[{"role":"user","content":"weather in Paris?"}]}`,
		want: want{content: []string{""}, finish: "tool_calls", usage: gotUsage{3, 6, 9}, toolName: "get_weather",
			toolArgs: `{"city":"sample","days":1,"extra":{},"metric":true,"scale":1}`},
	}, {
		name: "tool_choice names a function",
		body: `{"model":"m",` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"get_time"}},"messages":[{"role":"user","content":"time?"}]}`,
		want: want{content: []string{""}, finish: "tool_calls", usage: gotUsage{1, 2, 3}, toolName: "get_time", toolArgs: `{"zone":"sample"}`},
	}, {
		name: "tool_choice none",
		body: `{"model":"m",` + weatherTools + `,"tool_choice":"none","messages":[{"role":"user","content":"weather?"}]}`,
		want: want{content: []string{"Echo: weather?"}, finish: "stop", usage: gotUsage{1, 2, 3}},
	}, {
		name: "answer after tool result",
		body: `{"model":"m",` + weatherTools + `,"messages":[
			{"role":"user","content":"weather in Paris?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"sunny, 21C"}]}`,
		want: want{content: []string{"The tool returned: sunny, 21C"}, finish: "stop", usage: gotUsage{3 + 1 + 2, 5, 11}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := post(t, srv, tt.body, tt.headers...)
			b := readBody(t, resp)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if ct := resp.Header.Get("content-type"); ct != "application/json" {
				t.Errorf("content-type = %q", ct)
			}
			conforms(t, "CreateChatCompletionResponse", b)
			var got gotCompletion
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			var reqModel struct{ Model string }
			_ = json.Unmarshal([]byte(tt.body), &reqModel)
			if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != reqModel.Model || got.Created == 0 {
				t.Errorf("envelope: id %q object %q model %q created %d", got.ID, got.Object, got.Model, got.Created)
			}
			if len(got.Choices) != len(tt.want.content) {
				t.Fatalf("%d choices, want %d: %s", len(got.Choices), len(tt.want.content), b)
			}
			for i, c := range got.Choices {
				if c.Index != i || c.Message.Role != "assistant" || c.FinishReason != tt.want.finish {
					t.Errorf("choice %d: index %d role %q finish %q, want finish %q", i, c.Index, c.Message.Role, c.FinishReason, tt.want.finish)
				}
				if tt.want.toolName != "" {
					if c.Message.Content != nil {
						t.Errorf("choice %d: content %q, want null with a tool call", i, *c.Message.Content)
					}
					if len(c.Message.ToolCalls) != 1 {
						t.Fatalf("choice %d: %d tool calls, want 1", i, len(c.Message.ToolCalls))
					}
					tc := c.Message.ToolCalls[0]
					if !strings.HasPrefix(tc.ID, "call_") || tc.Type != "function" || tc.Function.Name != tt.want.toolName ||
						tc.Function.Arguments == nil || *tc.Function.Arguments != tt.want.toolArgs {
						t.Errorf("choice %d: tool call %+v (args %v), want %s(%s)", i, tc, tc.Function.Arguments, tt.want.toolName, tt.want.toolArgs)
					}
					continue
				}
				if c.Message.Content == nil || *c.Message.Content != tt.want.content[i] {
					t.Errorf("choice %d: content %v, want %q", i, c.Message.Content, tt.want.content[i])
				}
			}
			if got.Usage != tt.want.usage {
				t.Errorf("usage %+v, want %+v", got.Usage, tt.want.usage)
			}
		})
	}
}

// TestDeterministic checks that the same request gets the same id and reply,
// and that any change to the request changes the id.
func TestDeterministic(t *testing.T) {
	srv := newServer(t, Options{})
	get := func(body string) gotCompletion {
		var c gotCompletion
		if err := json.Unmarshal(readBody(t, post(t, srv, body)), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := get(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	b := get(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	c := get(`{"model":"m","messages":[{"role":"user","content":"ho"}]}`)
	if a.ID != b.ID || *a.Choices[0].Message.Content != *b.Choices[0].Message.Content {
		t.Errorf("same request, different replies: %+v vs %+v", a, b)
	}
	if a.ID == c.ID {
		t.Errorf("different requests share id %s", a.ID)
	}
}

func TestChatCompletionErrors(t *testing.T) {
	srv := newServer(t, Options{})
	tests := []struct {
		name, method, path, body string
		headers                  []string
		status                   int
		code, param              string
	}{
		{name: "invalid JSON", body: `{"model":`, status: 400, code: "invalid_json"},
		{name: "not an object", body: `[1]`, status: 400, code: "invalid_json"},
		{name: "missing model", body: `{"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "missing_required_parameter", param: "model"},
		{name: "missing messages", body: `{"model":"m"}`, status: 400, code: "missing_required_parameter", param: "messages"},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, status: 400, code: "invalid_value", param: "messages"},
		{name: "wrong type", body: `{"model":"m","n":"two","messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "n"},
		{name: "n out of range", body: `{"model":"m","n":0,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "n"},
		{name: "max_tokens zero", body: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "max_tokens"},
		{name: "bad stop", body: `{"model":"m","stop":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, code: "invalid_value", param: "stop"},
		{name: "unknown tool_choice", body: `{"model":"m",` + weatherTools + `,"tool_choice":{"type":"function","function":{"name":"nope"}},"messages":[{"role":"user","content":"hi"}]}`,
			status: 400, code: "invalid_value", param: "tool_choice"},
		{name: "unknown path", path: "/v1/moderations", body: `{}`, status: 404, code: "unknown_url"},
		{name: "wrong method", method: http.MethodGet, status: 405, code: "method_not_allowed"},
		{name: "bad fault header", body: `{}`, headers: []string{HeaderStatus, "oops"}, status: 400, code: "invalid_value", param: HeaderStatus},
		{name: "fault status out of range", body: `{}`, headers: []string{HeaderStatus, "200"}, status: 400, code: "invalid_value", param: HeaderStatus},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method, path := tt.method, tt.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/chat/completions"
			}
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			e := wantError(t, resp, tt.status, tt.code)
			if tt.param != "" && (e.Error.Param == nil || *e.Error.Param != tt.param) {
				t.Errorf("param = %v, want %q", e.Error.Param, tt.param)
			}
			if e.Error.Type != "invalid_request_error" {
				t.Errorf("type = %q, want invalid_request_error", e.Error.Type)
			}
		})
	}
}

func TestUnprefixedPath(t *testing.T) {
	srv := newServer(t, Options{})
	resp, err := srv.Client().Post(srv.URL+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

func TestAuth(t *testing.T) {
	srv := newServer(t, Options{APIKey: "sk-test-123456789"})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name, auth string
		status     int
	}{
		{"missing", "", 401},
		{"wrong key", "Bearer sk-wrong-000000000", 401},
		{"not bearer", "Basic c2stdGVzdA==", 401},
		{"right key", "Bearer sk-test-123456789", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			if tt.auth == "" {
				resp = post(t, srv, body)
			} else {
				resp = post(t, srv, body, "authorization", tt.auth)
			}
			if tt.status == 200 {
				if b := readBody(t, resp); resp.StatusCode != 200 {
					t.Fatalf("status %d: %s", resp.StatusCode, b)
				}
				return
			}
			e := wantError(t, resp, tt.status, "invalid_api_key")
			if strings.Contains(e.Error.Message, "sk-wrong-000000000") {
				t.Errorf("message echoes the whole key: %q", e.Error.Message)
			}
		})
	}
}

func TestSplitPieces(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"   ", nil},
		{"one", []string{"one"}},
		{"Echo: hello world", []string{"Echo:", " hello", " world"}},
		{"  lead  and trail \n", []string{"  lead", "  and", " trail \n"}},
		{"a\n\nb", []string{"a", "\n\nb"}},
	}
	for _, tt := range tests {
		got := splitPieces(tt.in)
		if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
			t.Errorf("splitPieces(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitArguments(t *testing.T) {
	for _, args := range []string{`{"a":"sample"}`, `{"é":"sample","ü":1}`, `{}`, ``} {
		frags := splitArguments(args, argumentFragments)
		if strings.Join(frags, "") != args || len(frags) > argumentFragments+1 {
			t.Errorf("splitArguments(%q) = %q", args, frags)
		}
		for _, f := range frags {
			if !utf8.ValidString(f) {
				t.Errorf("fragment %q of %q is not valid UTF-8", f, args)
			}
		}
	}
}
