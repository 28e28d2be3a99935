package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

const fakeKey = "gemini-test-key"

// gateway plays the gateway's part against the Gemini fake: translate the
// OpenAI request, send it with the provider headers, translate the answer.
type gateway struct {
	t      *testing.T
	gemini *httptest.Server
	openai *httptest.Server
	key    string
}

func newGateway(t *testing.T) *gateway {
	g := &gateway{t: t, key: fakeKey,
		gemini: httptest.NewServer(fake.NewGemini(fake.Options{APIKey: fakeKey})),
		openai: httptest.NewServer(fake.NewOpenAI(fake.Options{})),
	}
	t.Cleanup(g.gemini.Close)
	t.Cleanup(g.openai.Close)
	return g
}

// post sends body to the Gemini fake at path and returns status and body.
func (g *gateway) post(path string, body []byte, headers ...string) (*http.Response, []byte) {
	g.t.Helper()
	req, err := http.NewRequestWithContext(g.t.Context(), http.MethodPost, g.gemini.URL+path, bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	for _, h := range Headers(g.key) {
		req.Header.Set(h.Name, h.Value)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := g.gemini.Client().Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatal(err)
	}
	return resp, b
}

// chat runs a non-streaming chat request through translation and the fake.
func (g *gateway) chat(openAIBody string, opts Options, headers ...string) ([]byte, error) {
	g.t.Helper()
	req, err := TranslateRequest([]byte(openAIBody), opts)
	if err != nil {
		g.t.Fatalf("TranslateRequest: %v", err)
	}
	resp, body := g.post(ChatPath("gemini-fake", false), req, headers...)
	return TranslateResponse(resp.StatusCode, body, "client-model")
}

// stream runs a streaming chat request, reading the fake's answer in small
// reads so events straddle chunks, and returns the OpenAI stream.
func (g *gateway) stream(openAIBody string, headers ...string) (string, error) {
	g.t.Helper()
	body, err := TranslateRequest([]byte(openAIBody), Options{})
	if err != nil {
		g.t.Fatalf("TranslateRequest: %v", err)
	}
	req, err := http.NewRequestWithContext(g.t.Context(), http.MethodPost, g.gemini.URL+ChatPath("gemini-fake", true), bytes.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	for _, h := range Headers(g.key) {
		req.Header.Set(h.Name, h.Value)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := g.gemini.Client().Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		_, err := TranslateResponse(resp.StatusCode, b, "client-model")
		return "", err
	}
	if ct := resp.Header.Get("content-type"); ct != "text/event-stream" {
		g.t.Errorf("content-type %q", ct)
	}
	s := NewStream("client-model")
	var out []byte
	buf := make([]byte, 37)
	for {
		n, rerr := resp.Body.Read(buf)
		eos := rerr != nil
		var terr error
		if out, terr = s.Translate(out, buf[:n], eos); terr != nil {
			return string(out), terr
		}
		if eos {
			if rerr != io.EOF {
				return string(out), rerr
			}
			return string(out), nil
		}
	}
}

// reference asks the OpenAI fake, which the Gemini fake mirrors.
func (g *gateway) reference(openAIBody string) []byte {
	g.t.Helper()
	resp, err := g.openai.Client().Post(g.openai.URL+"/v1/chat/completions", "application/json", strings.NewReader(openAIBody))
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		g.t.Fatalf("OpenAI fake: %d %s", resp.StatusCode, b)
	}
	return b
}

// summary is what must agree between the OpenAI fake and the Gemini fake
// seen through the translation.
type summary struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func summarize(t *testing.T, b []byte) summary {
	t.Helper()
	var s summary
	decode(t, b, &s)
	return s
}

func TestRoundTripMatchesOpenAIFake(t *testing.T) {
	g := newGateway(t)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"},"metric":{"type":"boolean"}},"required":["city"],"additionalProperties":false}}},{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]`
	tests := []struct {
		name string
		body string
	}{
		{"text", `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hello there friend"}]}`},
		{"multi-turn", `{"model":"m","messages":[{"role":"user","content":"one"},{"role":"assistant","content":"two"},{"role":"user","content":"three four"}]}`},
		{"image", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"please"}]}]}`},
		{"n", `{"model":"m","n":3,"messages":[{"role":"user","content":"hi"}]}`},
		{"stop", `{"model":"m","stop":["there"],"messages":[{"role":"user","content":"hello there friend"}]}`},
		{"max_tokens", `{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hello there friend"}]}`},
		{"tools", `{"model":"m","messages":[{"role":"user","content":"weather in Paris?"}],` + tools + `}`},
		{"named tool", `{"model":"m","messages":[{"role":"user","content":"time?"}],"tool_choice":{"type":"function","function":{"name":"get_time"}},` + tools + `}`},
		{"tool_choice none", `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"none",` + tools + `}`},
		{"tool result", `{"model":"m","messages":[{"role":"user","content":"weather in Paris?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"22 degrees and sunny"}],` + tools + `}`},
		{"parallel tool results", `{"model":"m","messages":[{"role":"user","content":"both?"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"get_weather","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"get_time","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"a","content":"sunny"},{"role":"tool","tool_call_id":"b","content":"noon"}],` + tools + `}`},
		{"json schema", `{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string","format":"date-time"},"b":{"anyOf":[{"type":"integer"},{"type":"null"}]}},"required":["a","b"],"additionalProperties":false}}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := g.chat(tt.body, Options{})
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			conforms(t, "CreateChatCompletionResponse", out)
			got, want := summarize(t, out), summarize(t, g.reference(tt.body))
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Errorf("through Gemini: %s\nOpenAI fake:    %s", gj, wj)
			}
			var ids struct {
				Model   string `json:"model"`
				Choices []struct {
					Message struct {
						ToolCalls []struct {
							ID string `json:"id"`
						} `json:"tool_calls"`
					} `json:"message"`
				} `json:"choices"`
			}
			decode(t, out, &ids)
			if ids.Model != "client-model" {
				t.Errorf("model = %q", ids.Model)
			}
			for _, c := range ids.Choices {
				for _, tc := range c.Message.ToolCalls {
					if !strings.HasPrefix(tc.ID, "call_") {
						t.Errorf("tool call id %q", tc.ID)
					}
				}
			}
		})
	}
}

// A tool call the translation produced can be answered in the next turn:
// its id maps back to the function name.
func TestRoundTripToolConversation(t *testing.T) {
	g := newGateway(t)
	tools := `"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]`
	first := `{"model":"m","messages":[{"role":"user","content":"find it"}],` + tools + `}`
	out, err := g.chat(first, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			Message json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	decode(t, out, &c)
	var msg struct {
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	}
	decode(t, c.Choices[0].Message, &msg)
	second := `{"model":"m","messages":[{"role":"user","content":"find it"},` + string(c.Choices[0].Message) +
		`,{"role":"tool","tool_call_id":"` + msg.ToolCalls[0].ID + `","content":"{\"found\":true}"}],` + tools + `}`
	out, err = g.chat(second, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(t, out)
	if got := *s.Choices[0].Message.Content; got != `The tool returned: {"found":true}` {
		t.Errorf("content = %q", got)
	}
}

func TestRoundTripDropUnsupported(t *testing.T) {
	g := newGateway(t)
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"logprobs":true,"logit_bias":{"1":1},"parallel_tool_calls":false}`
	if _, err := TranslateRequest([]byte(body), Options{}); err == nil {
		t.Fatal("unsupported parameters accepted")
	}
	out, err := g.chat(body, Options{DropUnsupported: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := summarize(t, out); *s.Choices[0].Message.Content != "Echo: hi" {
		t.Errorf("content = %q", *s.Choices[0].Message.Content)
	}
}

func TestRoundTripStream(t *testing.T) {
	g := newGateway(t)
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]`
	tests := []struct {
		name, body string
		headers    []string
	}{
		{"text", `{"model":"m","stream":true,"messages":[{"role":"user","content":"the quick brown fox jumps"}]}`, nil},
		{"many chunks", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, []string{fake.HeaderChunks, "40"}},
		{"two choices", `{"model":"m","stream":true,"n":2,"messages":[{"role":"user","content":"a b c"}]}`, nil},
		{"length", `{"model":"m","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"a b c d e"}]}`, nil},
		{"tool call", `{"model":"m","stream":true,"messages":[{"role":"user","content":"weather?"}],` + tools + `}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := g.stream(tt.body, tt.headers...)
			if err != nil {
				t.Fatalf("stream: %v", err)
			}
			checkChunks(t, out)
			acc := accumulate(t, out)

			// The accumulated stream says what the JSON answer says.
			jsonBody := strings.Replace(tt.body, `"stream":true,`, "", 1)
			jout, err := g.chat(jsonBody, Options{}, tt.headers...)
			if err != nil {
				t.Fatal(err)
			}
			want := summarize(t, jout)
			if len(acc.Choices) != len(want.Choices) {
				t.Fatalf("choices %d, want %d", len(acc.Choices), len(want.Choices))
			}
			for i, c := range acc.Choices {
				w := want.Choices[i]
				if c.Message.Role != "assistant" || string(c.FinishReason) != w.FinishReason {
					t.Errorf("choice %d: role %q finish %q, want %q", i, c.Message.Role, c.FinishReason, w.FinishReason)
				}
				if w.Message.Content != nil && c.Message.Content != *w.Message.Content {
					t.Errorf("choice %d: content %q, want %q", i, c.Message.Content, *w.Message.Content)
				}
				if len(c.Message.ToolCalls) != len(w.Message.ToolCalls) {
					t.Fatalf("choice %d: %d tool calls, want %d", i, len(c.Message.ToolCalls), len(w.Message.ToolCalls))
				}
				for k, tc := range c.Message.ToolCalls {
					if tc.Function.Name != w.Message.ToolCalls[k].Function.Name || tc.Function.Arguments != w.Message.ToolCalls[k].Function.Arguments {
						t.Errorf("choice %d call %d: %+v", i, k, tc)
					}
				}
			}
			if acc.Usage.PromptTokens != int64(want.Usage.PromptTokens) || acc.Usage.CompletionTokens != int64(want.Usage.CompletionTokens) {
				t.Errorf("usage %+v, want %+v", acc.Usage, want.Usage)
			}
		})
	}
}

// A stream cut by the upstream still ends well-formed for the client; the
// gateway tells truncation apart from the transport error, not from the
// translation.
func TestRoundTripStreamCut(t *testing.T) {
	g := newGateway(t)
	out, err := g.stream(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a b c d e f"}]}`, fake.HeaderCutAfter, "2")
	if err == nil {
		t.Fatalf("no transport error for a cut stream")
	}
	if n := strings.Count(out, `"content":`); n != 2 {
		t.Errorf("%d content chunks before the cut, want 2: %s", n, out)
	}
}

func TestRoundTripFaults(t *testing.T) {
	tests := []struct {
		name       string
		key        string
		headers    []string
		status     int
		typ, code  string
		retryAfter int
	}{
		{"429", fakeKey, []string{fake.HeaderStatus, "429", fake.HeaderRetryAfter, "3"}, 429, "requests", "rate_limit_exceeded", 3},
		{"503", fakeKey, []string{fake.HeaderStatus, "503"}, 503, "server_error", "unavailable", 0},
		{"500", fakeKey, []string{fake.HeaderStatus, "500"}, 500, "server_error", "internal", 0},
		{"400", fakeKey, []string{fake.HeaderStatus, "400"}, 400, "invalid_request_error", "invalid_argument", 0},
		{"wrong key", "wrong", nil, 502, "server_error", "upstream_authentication_failed", 0},
		{"no key", "", nil, 502, "server_error", "upstream_authentication_failed", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t)
			g.key = tt.key
			for _, stream := range []bool{false, true} {
				var out []byte
				var err error
				if stream {
					var s string
					s, err = g.stream(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, tt.headers...)
					out = []byte(s)
				} else {
					out, err = g.chat(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, Options{}, tt.headers...)
				}
				var e *apierror.Error
				if !errors.As(err, &e) {
					t.Fatalf("stream %v: error %v, output %s", stream, err, out)
				}
				if e.Status != tt.status || e.Code != tt.code || e.RetryAfter != tt.retryAfter {
					t.Errorf("stream %v: got %d %q retry %d, want %d %q retry %d", stream, e.Status, e.Code, e.RetryAfter, tt.status, tt.code, tt.retryAfter)
				}
				body := e.JSON()
				conforms(t, "ErrorResponse", body)
				var b struct {
					Error struct {
						Type string `json:"type"`
					} `json:"error"`
				}
				decode(t, body, &b)
				if b.Error.Type != tt.typ {
					t.Errorf("type %q, want %q", b.Error.Type, tt.typ)
				}
			}
		})
	}
}

func TestRoundTripEmbeddings(t *testing.T) {
	g := newGateway(t)
	embed := func(body string) ([]byte, []byte) {
		t.Helper()
		req, err := TranslateEmbeddingRequest([]byte(body), "text-embedding-004")
		if err != nil {
			t.Fatal(err)
		}
		resp, b := g.post(EmbedPath("text-embedding-004"), req)
		tokens := EstimateEmbeddingTokens([]byte(body))
		floats, err := TranslateEmbeddingResponse(resp.StatusCode, b, "client-embed", false, tokens)
		if err != nil {
			t.Fatalf("floats: %v", err)
		}
		b64, err := TranslateEmbeddingResponse(resp.StatusCode, b, "client-embed", true, tokens)
		if err != nil {
			t.Fatalf("base64: %v", err)
		}
		conforms(t, "CreateEmbeddingResponse", floats)
		return floats, b64
	}
	type list struct {
		Data []struct {
			Index     int       `json:"index"`
			Embedding []float64 `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}

	floats, b64 := embed(`{"model":"e","input":["alpha","beta","alpha"],"encoding_format":"base64"}`)
	var l list
	decode(t, floats, &l)
	if len(l.Data) != 3 || l.Usage.PromptTokens != 5 {
		t.Fatalf("answer %s", floats)
	}
	for i, d := range l.Data {
		if d.Index != i || len(d.Embedding) != 768 {
			t.Errorf("vector %d: index %d, %d dims", i, d.Index, len(d.Embedding))
		}
		norm := 0.0
		for _, x := range d.Embedding {
			norm += x * x
		}
		if math.Abs(norm-1) > 1e-4 {
			t.Errorf("vector %d: norm² %v", i, norm)
		}
	}
	same := func(a, b []float64) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return len(a) == len(b)
	}
	if !same(l.Data[0].Embedding, l.Data[2].Embedding) || same(l.Data[0].Embedding, l.Data[1].Embedding) {
		t.Errorf("vectors do not follow their inputs")
	}
	var bl struct {
		Data []struct {
			Embedding string `json:"embedding"`
		} `json:"data"`
	}
	decode(t, b64, &bl)
	for i, d := range bl.Data {
		raw := decodeBase64Floats(t, d.Embedding)
		for k, x := range l.Data[i].Embedding {
			if raw[k] != float32(x) {
				t.Fatalf("vector %d value %d: base64 %v, float %v", i, k, raw[k], x)
			}
		}
	}

	floats, _ = embed(`{"model":"e","input":"alpha","dimensions":64}`)
	var one list
	decode(t, floats, &one)
	if len(one.Data) != 1 || len(one.Data[0].Embedding) != 64 {
		t.Errorf("dimensions not honoured: %s", floats)
	}
}

func TestRoundTripEmbeddingFault(t *testing.T) {
	g := newGateway(t)
	req, err := TranslateEmbeddingRequest([]byte(`{"model":"e","input":"x"}`), "text-embedding-004")
	if err != nil {
		t.Fatal(err)
	}
	resp, b := g.post(EmbedPath("text-embedding-004"), req, fake.HeaderStatus, "429", fake.HeaderRetryAfter, "2")
	out, err := TranslateEmbeddingResponse(resp.StatusCode, b, "client-embed", false, 1)
	e := asAPIError(t, err)
	if e.Status != 429 || e.Code != "rate_limit_exceeded" || e.RetryAfter != 2 {
		t.Errorf("got %+v: %s", e, out)
	}
}
