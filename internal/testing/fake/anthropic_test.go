package fake

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tests of the Anthropic fake on its own wire format. Translation through it
// is tested in providers/anthropic.

const anthropicKey = "sk-ant-test"

func anthropicServer(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewAnthropic(opts))
	t.Cleanup(srv.Close)
	return srv
}

// anthropicPost sends body to /v1/messages with the key and version headers
// a client sends, then the given headers (alternating names and values; an
// empty value removes a header).
func anthropicPost(t *testing.T, srv *httptest.Server, body string, headers ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/messages", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-api-key", anthropicKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	for i := 0; i+1 < len(headers); i += 2 {
		if headers[i+1] == "" {
			req.Header.Del(headers[i])
		} else {
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type anthropicGot struct {
	ID           string  `json:"id"`
	Type         string  `json:"type"`
	Role         string  `json:"role"`
	Model        string  `json:"model"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Content      []struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	} `json:"content"`
	Usage struct {
		InputTokens              *int `json:"input_tokens"`
		OutputTokens             *int `json:"output_tokens"`
		CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
		CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

func anthropicMessageOK(t *testing.T, resp *http.Response) anthropicGot {
	t.Helper()
	b := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var m anthropicGot
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s: %v", b, err)
	}
	if m.Type != "message" || m.Role != "assistant" || !strings.HasPrefix(m.ID, "msg_") || m.StopReason == nil {
		t.Errorf("message envelope %s", b)
	}
	if m.Usage.InputTokens == nil || m.Usage.OutputTokens == nil || m.Usage.CacheReadInputTokens == nil || m.Usage.CacheCreationInputTokens == nil {
		t.Errorf("usage incomplete: %s", b)
	}
	return m
}

// anthropicWantError checks an Anthropic-shaped error response.
func anthropicWantError(t *testing.T, resp *http.Response, status int, typ, msgPart string) {
	t.Helper()
	b := readBody(t, resp)
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, status, b)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %s: %v", b, err)
	}
	if e.Type != "error" || e.Error.Type != typ || !strings.Contains(e.Error.Message, msgPart) {
		t.Errorf("error %s, want type %q with message containing %q", b, typ, msgPart)
	}
}

const anthropicWeatherTool = `"tools":[{"name":"get_weather","description":"Weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}}}},
	{"name":"get_time","input_schema":{"type":"object","properties":{}}}]`

func TestAnthropicMessage(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		headers []string
		text    string // want text content ("" with a tool call)
		tool    string // want tool name
		input   string
		stop    string
		stopSeq string
		in, out int
	}{
		{name: "echo", body: `{"model":"claude-fake","max_tokens":100,"messages":[{"role":"user","content":"hello there"}]}`,
			text: "Echo: hello there", stop: "end_turn", in: 2, out: 3},
		{name: "system counted", body: `{"model":"m","max_tokens":100,"system":"Be very brief.","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"you"}]}]}`,
			text: "Echo: hi\nyou", stop: "end_turn", in: 5, out: 3},
		{name: "system blocks", body: `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"One two."}],"messages":[{"role":"user","content":"hi"}]}`,
			text: "Echo: hi", stop: "end_turn", in: 3, out: 2},
		{name: "max tokens", body: `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"one two three"}]}`,
			text: "Echo: one", stop: "max_tokens", in: 3, out: 2},
		{name: "stop sequence", body: `{"model":"m","max_tokens":100,"stop_sequences":["zzz","three"],"messages":[{"role":"user","content":"one two three four"}]}`,
			text: "Echo: one two ", stop: "stop_sequence", stopSeq: "three", in: 4, out: 3},
		{name: "stop sequence absent", body: `{"model":"m","max_tokens":100,"stop_sequences":["zzz"],"messages":[{"role":"user","content":"one"}]}`,
			text: "Echo: one", stop: "end_turn", in: 1, out: 2},
		{name: "stop beyond the limit is max_tokens", body: `{"model":"m","max_tokens":2,"stop_sequences":["four"],"messages":[{"role":"user","content":"one two three four"}]}`,
			text: "Echo: one", stop: "max_tokens", in: 4, out: 2},
		{name: "tool call", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"messages":[{"role":"user","content":"weather?"}]}`,
			tool: "get_weather", input: `{"city":"sample","days":1}`, stop: "tool_use", in: 1, out: 3},
		{name: "named tool", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"tool_choice":{"type":"tool","name":"get_time"},"messages":[{"role":"user","content":"time?"}]}`,
			tool: "get_time", input: `{}`, stop: "tool_use", in: 1, out: 1},
		{name: "tool choice any", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"tool_choice":{"type":"any","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"x"}]}`,
			tool: "get_weather", input: `{"city":"sample","days":1}`, stop: "tool_use", in: 1, out: 3},
		{name: "tool choice none", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"tool_choice":{"type":"none"},"messages":[{"role":"user","content":"x"}]}`,
			text: "Echo: x", stop: "end_turn", in: 1, out: 2},
		{name: "after tool result", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"messages":[
			{"role":"user","content":"weather?"},
			{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny and warm"}]}]}`,
			text: "The tool returned: sunny and warm", stop: "end_turn", in: 1 + 1 + 3, out: 6},
		{name: "text after tool result", body: `{"model":"m","max_tokens":100,` + anthropicWeatherTool + `,"messages":[
			{"role":"user","content":"weather?"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},
			{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"rain"}]},{"type":"text","text":"thanks"}]}]}`,
			tool: "get_weather", input: `{"city":"sample","days":1}`, stop: "tool_use", in: 4, out: 3},
		{name: "image ignored", body: `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"text","text":"what?"}]}]}`,
			text: "Echo: what?", stop: "end_turn", in: 1, out: 2},
		{name: "chunks", headers: []string{HeaderChunks, "4"}, body: `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`,
			text: "Echo: hi lorem ipsum", stop: "end_turn", in: 1, out: 4},
	}
	srv := anthropicServer(t, Options{APIKey: anthropicKey})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := anthropicMessageOK(t, anthropicPost(t, srv, tt.body, tt.headers...))
			if m.Model == "" || *m.StopReason != tt.stop {
				t.Errorf("model %q stop_reason %q, want %q", m.Model, *m.StopReason, tt.stop)
			}
			if got := ""; m.StopSequence != nil {
				got = *m.StopSequence
				if got != tt.stopSeq {
					t.Errorf("stop_sequence %q, want %q", got, tt.stopSeq)
				}
			} else if tt.stopSeq != "" {
				t.Errorf("stop_sequence null, want %q", tt.stopSeq)
			}
			if len(m.Content) != 1 {
				t.Fatalf("content %+v", m.Content)
			}
			c := m.Content[0]
			if tt.tool != "" {
				if c.Type != "tool_use" || c.Name != tt.tool || string(c.Input) != tt.input || !strings.HasPrefix(c.ID, "toolu_") {
					t.Errorf("block %+v (input %s), want tool_use %s %s", c, c.Input, tt.tool, tt.input)
				}
			} else if c.Type != "text" || c.Text != tt.text {
				t.Errorf("block %+v, want text %q", c, tt.text)
			}
			if *m.Usage.InputTokens != tt.in || *m.Usage.OutputTokens != tt.out || *m.Usage.CacheReadInputTokens != 0 {
				t.Errorf("usage in %d out %d cache %d, want %d %d 0", *m.Usage.InputTokens, *m.Usage.OutputTokens, *m.Usage.CacheReadInputTokens, tt.in, tt.out)
			}
		})
	}
}

// TestAnthropicMatchesOpenAI checks that both fakes give the same answer to
// the same conversation.
func TestAnthropicMatchesOpenAI(t *testing.T) {
	openAI := newServer(t, Options{})
	anth := anthropicServer(t, Options{})
	oResp := post(t, openAI, `{"model":"m","max_tokens":50,"stop":["four"],"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"one two three four five"}]}`)
	var o gotCompletion
	if err := json.Unmarshal(readBody(t, oResp), &o); err != nil {
		t.Fatal(err)
	}
	a := anthropicMessageOK(t, anthropicPost(t, anth, `{"model":"m","max_tokens":50,"stop_sequences":["four"],"system":"Be brief.","messages":[{"role":"user","content":"one two three four five"}]}`))
	if *o.Choices[0].Message.Content != a.Content[0].Text || o.Usage.PromptTokens != *a.Usage.InputTokens || o.Usage.CompletionTokens != *a.Usage.OutputTokens {
		t.Errorf("OpenAI fake %q %+v, Anthropic fake %q in %d out %d", *o.Choices[0].Message.Content, o.Usage, a.Content[0].Text, *a.Usage.InputTokens, *a.Usage.OutputTokens)
	}
}

func TestAnthropicDeterministic(t *testing.T) {
	srv := anthropicServer(t, Options{})
	body := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"same"}]}`
	a := anthropicMessageOK(t, anthropicPost(t, srv, body))
	b := anthropicMessageOK(t, anthropicPost(t, srv, body))
	if a.ID != b.ID || a.Content[0].Text != b.Content[0].Text {
		t.Errorf("replies differ: %+v / %+v", a, b)
	}
}

func TestAnthropicErrors(t *testing.T) {
	const ok = `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name    string
		path    string
		method  string
		body    string
		headers []string
		status  int
		typ     string
		msg     string
	}{
		{name: "no key", body: ok, headers: []string{"x-api-key", ""}, status: 401, typ: "authentication_error", msg: "x-api-key header is required"},
		{name: "wrong key", body: ok, headers: []string{"x-api-key", "sk-other"}, status: 401, typ: "authentication_error", msg: "invalid x-api-key"},
		{name: "bearer is not enough", body: ok, headers: []string{"x-api-key", "", "authorization", "Bearer " + anthropicKey}, status: 401, typ: "authentication_error"},
		{name: "no version", body: ok, headers: []string{"anthropic-version", ""}, status: 400, typ: "invalid_request_error", msg: "anthropic-version"},
		{name: "openai path", path: "/v1/chat/completions", body: ok, status: 404, typ: "not_found_error"},
		{name: "GET", method: http.MethodGet, status: 405, typ: "invalid_request_error"},
		{name: "not JSON", body: `{`, status: 400, typ: "invalid_request_error", msg: "JSON"},
		{name: "no max_tokens", body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "max_tokens: Field required"},
		{name: "zero max_tokens", body: `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "max_tokens"},
		{name: "no model", body: `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "model: Field required"},
		{name: "no messages", body: `{"model":"m","max_tokens":5,"messages":[]}`, status: 400, typ: "invalid_request_error", msg: "messages"},
		{name: "unknown field", body: `{"model":"m","max_tokens":5,"n":2,"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "n: Extra inputs are not permitted"},
		{name: "metadata field", body: `{"model":"m","max_tokens":5,"metadata":{"user":"u"},"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "metadata.user"},
		{name: "system role", body: `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"},{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "messages.0.role"},
		{name: "temperature", body: `{"model":"m","max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"hi"}]}`, status: 400, typ: "invalid_request_error", msg: "temperature"},
		{name: "empty text block", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, status: 400, typ: "invalid_request_error", msg: "non-empty"},
		{name: "empty content", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":""}]}`, status: 400, typ: "invalid_request_error", msg: "non-empty content"},
		{name: "unknown block", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, status: 400, typ: "invalid_request_error", msg: "image_url"},
		{name: "bad image type", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"Qk0="}}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "media_type"},
		{name: "bad base64", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"%%%"}}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "base64"},
		{name: "unanswered tool use", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"y"}]}`,
			status: 400, typ: "invalid_request_error", msg: "toolu_1"},
		{name: "stray tool result", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_9","content":"z"}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "unexpected `tool_use_id`"},
		{name: "tool result not first", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},
			{"role":"user","content":[{"type":"text","text":"y"},{"type":"tool_result","tool_use_id":"toolu_1","content":"z"}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "must come first"},
		{name: "tool input not an object", body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},
			{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":"{}"}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "dictionary"},
		{name: "tool without schema", body: `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],"messages":[{"role":"user","content":"x"}]}`,
			status: 400, typ: "invalid_request_error", msg: "input_schema"},
		{name: "unknown named tool", body: `{"model":"m","max_tokens":5,` + anthropicWeatherTool + `,"tool_choice":{"type":"tool","name":"nope"},"messages":[{"role":"user","content":"x"}]}`,
			status: 400, typ: "invalid_request_error", msg: "nope"},
		{name: "tool_choice without tools", body: `{"model":"m","max_tokens":5,"tool_choice":{"type":"auto"},"messages":[{"role":"user","content":"x"}]}`,
			status: 400, typ: "invalid_request_error", msg: "tool_choice"},
		{name: "bad fault header", body: ok, headers: []string{HeaderStatus, "200"}, status: 400, typ: "invalid_request_error", msg: HeaderStatus},
	}
	srv := anthropicServer(t, Options{APIKey: anthropicKey})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			if tt.path != "" || tt.method != "" {
				path, method := tt.path, tt.method
				if path == "" {
					path = "/v1/messages"
				}
				if method == "" {
					method = http.MethodPost
				}
				req, _ := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(tt.body))
				req.Header.Set("x-api-key", anthropicKey)
				req.Header.Set("anthropic-version", "2023-06-01")
				var err error
				if resp, err = srv.Client().Do(req); err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
			} else {
				resp = anthropicPost(t, srv, tt.body, tt.headers...)
			}
			anthropicWantError(t, resp, tt.status, tt.typ, tt.msg)
		})
	}
}

func TestAnthropicFaultStatus(t *testing.T) {
	tests := []struct {
		headers    []string
		opts       Options
		status     int
		typ        string
		retryAfter string
	}{
		{headers: []string{HeaderStatus, "429", HeaderRetryAfter, "3"}, status: 429, typ: "rate_limit_error", retryAfter: "3"},
		{headers: []string{HeaderStatus, "529"}, status: 529, typ: "overloaded_error"},
		{headers: []string{HeaderStatus, "500"}, status: 500, typ: "api_error"},
		{headers: []string{HeaderStatus, "504"}, status: 504, typ: "timeout_error"},
		{headers: []string{HeaderStatus, "401"}, status: 401, typ: "authentication_error"},
		{headers: []string{HeaderStatus, "403"}, status: 403, typ: "permission_error"},
		{headers: []string{HeaderStatus, "404"}, status: 404, typ: "not_found_error"},
		{headers: []string{HeaderStatus, "413"}, status: 413, typ: "request_too_large"},
		{headers: []string{HeaderStatus, "402"}, status: 402, typ: "billing_error"},
		{headers: []string{HeaderStatus, "400"}, status: 400, typ: "invalid_request_error"},
		{opts: Options{Fault: Fault{Status: 503}}, status: 503, typ: "api_error"},
	}
	for _, tt := range tests {
		t.Run(tt.typ+"/"+http.StatusText(tt.status), func(t *testing.T) {
			srv := anthropicServer(t, tt.opts)
			// The fault comes before the body is checked.
			resp := anthropicPost(t, srv, `not json`, tt.headers...)
			anthropicWantError(t, resp, tt.status, tt.typ, "Injected fault")
			if got := resp.Header.Get("retry-after"); got != tt.retryAfter {
				t.Errorf("retry-after = %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

func TestAnthropicFaultDelay(t *testing.T) {
	srv := anthropicServer(t, Options{})
	start := time.Now()
	anthropicMessageOK(t, anthropicPost(t, srv, `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, HeaderDelayMS, "80"))
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Errorf("answered after %v, want >= 80ms", d)
	}
}

// anthropicSSEEvent is one parsed event of an Anthropic stream.
type anthropicSSEEvent struct {
	name, data string
}

// anthropicReadStream parses an Anthropic event stream, checking each event
// has an event: line matching its data's type. clean is false when the stream
// was cut.
func anthropicReadStream(t *testing.T, resp *http.Response) (events []anthropicSSEEvent, clean bool) {
	t.Helper()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
	}
	if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	r := bufio.NewReader(resp.Body)
	var cur anthropicSSEEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return events, errors.Is(err, io.EOF) && line == "" && cur == (anthropicSSEEvent{})
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			var typed struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal([]byte(cur.data), &typed); err != nil || typed.Type != cur.name {
				t.Fatalf("event %q with data %s (%v)", cur.name, cur.data, err)
			}
			events = append(events, cur)
			cur = anthropicSSEEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			cur.data = line[len("data: "):]
		default:
			t.Fatalf("unexpected line %q", line)
		}
	}
}

func anthropicNames(events []anthropicSSEEvent) string {
	var names []string
	for _, e := range events {
		names = append(names, e.name)
	}
	return strings.Join(names, ",")
}

func TestAnthropicStream(t *testing.T) {
	srv := anthropicServer(t, Options{})
	t.Run("text", func(t *testing.T) {
		body := `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"one two three"}]}`
		events, clean := anthropicReadStream(t, anthropicPost(t, srv, body))
		const want = "message_start,content_block_start,ping,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
		if got := anthropicNames(events); !clean || got != want {
			t.Fatalf("events %s (clean %v), want %s", got, clean, want)
		}
		var text strings.Builder
		for _, e := range events[3:7] {
			var d struct {
				Index int `json:"index"`
				Delta struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"delta"`
			}
			if json.Unmarshal([]byte(e.data), &d) != nil || d.Delta.Type != "text_delta" {
				t.Fatalf("delta %s", e.data)
			}
			text.WriteString(d.Delta.Text)
		}
		// The stream says what the JSON reply says.
		m := anthropicMessageOK(t, anthropicPost(t, srv, strings.Replace(body, `"stream":true`, `"stream":false`, 1)))
		if text.String() != m.Content[0].Text {
			t.Errorf("streamed %q, replied %q", text.String(), m.Content[0].Text)
		}
		var start struct {
			Message anthropicGot `json:"message"`
		}
		// Ids hash the request, which differs in "stream"; only the shape is compared.
		if json.Unmarshal([]byte(events[0].data), &start) != nil || !strings.HasPrefix(start.Message.ID, "msg_") ||
			*start.Message.Usage.InputTokens != 3 || start.Message.StopReason != nil {
			t.Errorf("message_start %s", events[0].data)
		}
		if events[1].data != `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` {
			t.Errorf("content_block_start %s", events[1].data)
		}
		if want := `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":4}}`; events[8].data != want {
			t.Errorf("message_delta %s, want %s", events[8].data, want)
		}
	})
	t.Run("tool use", func(t *testing.T) {
		body := `{"model":"m","max_tokens":100,"stream":true,` + anthropicWeatherTool + `,"messages":[{"role":"user","content":"weather?"}]}`
		events, clean := anthropicReadStream(t, anthropicPost(t, srv, body))
		const want = "message_start,content_block_start,ping,content_block_delta,content_block_delta,content_block_delta,content_block_delta,content_block_stop,message_delta,message_stop"
		if got := anthropicNames(events); !clean || got != want {
			t.Fatalf("events %s (clean %v), want %s", got, clean, want)
		}
		var start struct {
			ContentBlock struct {
				Type  string          `json:"type"`
				ID    string          `json:"id"`
				Name  string          `json:"name"`
				Input json.RawMessage `json:"input"`
			} `json:"content_block"`
		}
		if json.Unmarshal([]byte(events[1].data), &start) != nil || start.ContentBlock.Type != "tool_use" ||
			start.ContentBlock.Name != "get_weather" || string(start.ContentBlock.Input) != "{}" || !strings.HasPrefix(start.ContentBlock.ID, "toolu_") {
			t.Errorf("content_block_start %s", events[1].data)
		}
		var args strings.Builder
		for _, e := range events[3:7] {
			var d struct {
				Delta struct {
					Type        string  `json:"type"`
					PartialJSON *string `json:"partial_json"`
				} `json:"delta"`
			}
			if json.Unmarshal([]byte(e.data), &d) != nil || d.Delta.Type != "input_json_delta" || d.Delta.PartialJSON == nil {
				t.Fatalf("delta %s", e.data)
			}
			args.WriteString(*d.Delta.PartialJSON)
		}
		if args.String() != `{"city":"sample","days":1}` {
			t.Errorf("streamed input %s", args.String())
		}
		if !strings.Contains(events[8].data, `"stop_reason":"tool_use"`) || !strings.Contains(events[8].data, `"output_tokens":3`) {
			t.Errorf("message_delta %s", events[8].data)
		}
	})
	t.Run("empty reply has no block", func(t *testing.T) {
		body := `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]}`
		events, clean := anthropicReadStream(t, anthropicPost(t, srv, body, HeaderChunks, "0"))
		if got := anthropicNames(events); !clean || got != "message_start,ping,message_delta,message_stop" {
			t.Errorf("events %s (clean %v)", got, clean)
		}
	})
	t.Run("stop sequence", func(t *testing.T) {
		body := `{"model":"m","max_tokens":100,"stream":true,"stop_sequences":["two"],"messages":[{"role":"user","content":"one two"}]}`
		events, _ := anthropicReadStream(t, anthropicPost(t, srv, body))
		if last := events[len(events)-2].data; !strings.Contains(last, `"stop_reason":"stop_sequence","stop_sequence":"two"`) {
			t.Errorf("message_delta %s", last)
		}
	})
}

func TestAnthropicStreamCut(t *testing.T) {
	srv := anthropicServer(t, Options{})
	body := `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"one two three"}]}`
	for _, n := range []int{0, 1, 4, 9} {
		events, clean := anthropicReadStream(t, anthropicPost(t, srv, body, HeaderCutAfter, strconv.Itoa(n)))
		if clean || len(events) != n {
			t.Errorf("cut after %d: %d events, clean %v", n, len(events), clean)
		}
	}
	events, clean := anthropicReadStream(t, anthropicPost(t, srv, body, HeaderCutAfter, "10"))
	if !clean || len(events) != 10 {
		t.Errorf("cut at the end: %d events, clean %v", len(events), clean)
	}
}
