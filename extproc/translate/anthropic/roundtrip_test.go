package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// Round trips: an OpenAI request goes through TranslateRequest to the
// Anthropic fake, and its answer through TranslateResponse or a Stream back
// to the client, as extproc does. The OpenAI fake answers the same request
// directly, so the two paths can be compared: the fakes share their "model".

const (
	upstreamKey   = "sk-ant-roundtrip"
	upstreamModel = "claude-fake-1"
)

// newGateway starts a stand-in for Switchyard in front of an Anthropic fake:
// it translates the request, forwards it with Path and Headers (and any
// x-fake-* headers), and translates the reply, feeding streams to the
// Stream in small reads so that events arrive split.
func newGateway(t *testing.T, credential string, opts Options) *httptest.Server {
	t.Helper()
	upstream := httptest.NewServer(fake.NewAnthropic(fake.Options{APIKey: upstreamKey}))
	t.Cleanup(upstream.Close)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		clientModel := gjson.GetBytes(body, "model").String()
		stream := gjson.GetBytes(body, "stream").Bool()
		up, err := TranslateRequest(body, upstreamModel, opts)
		if err != nil {
			writeErr(w, err)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, upstream.URL+Path(stream), bytes.NewReader(up))
		if err != nil {
			t.Error(err)
			return
		}
		for _, h := range Headers(credential) {
			req.Header.Set(h.Name, h.Value)
		}
		for name, v := range r.Header {
			if strings.HasPrefix(strings.ToLower(name), "x-fake-") {
				req.Header[name] = v
			}
		}
		resp, err := upstream.Client().Do(req)
		if err != nil {
			writeErr(w, apierror.Server(http.StatusBadGateway, "upstream_unreachable", err.Error()))
			return
		}
		defer resp.Body.Close()
		if ra := resp.Header.Get("retry-after"); ra != "" {
			w.Header().Set("retry-after", ra)
		}
		if stream && resp.StatusCode == http.StatusOK {
			w.Header().Set("content-type", "text/event-stream")
			s := NewStream(clientModel)
			buf := make([]byte, 13)
			var out []byte
			for {
				n, rerr := resp.Body.Read(buf)
				// A read error (EOF, or the connection cut) ends the stream.
				out, _ = s.Translate(out[:0], buf[:n], rerr != nil)
				w.Write(out)
				w.(http.Flusher).Flush()
				if rerr != nil {
					return
				}
			}
		}
		b, _ := io.ReadAll(resp.Body)
		out, err := TranslateResponse(resp.StatusCode, b, clientModel)
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(resp.StatusCode)
		w.Write(out)
	}))
	t.Cleanup(gw.Close)
	return gw
}

func writeErr(w http.ResponseWriter, err error) {
	e, ok := errors.AsType[*apierror.Error](err)
	if !ok {
		e = apierror.Server(http.StatusInternalServerError, "internal", err.Error())
	}
	e.Write(w)
}

// call posts an OpenAI chat request and returns the status and body.
func call(t *testing.T, url, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// answer is what a client makes of a reply, streamed or not.
type answer struct {
	content, finish string
	calls           []string // "name args"
	prompt, output  int64
}

// answerOf reads a 200 reply: a completion, or a stream accumulated by the
// SDK's accumulator after checking every chunk.
func answerOf(t *testing.T, stream bool, b []byte) answer {
	t.Helper()
	var cc openai.ChatCompletion
	if stream {
		checkChunks(t, b, "gpt-client")
		acc := accumulate(t, b)
		cc = acc.ChatCompletion
	} else {
		conforms(t, "CreateChatCompletionResponse", b)
		if err := json.Unmarshal(b, &cc); err != nil {
			t.Fatal(err)
		}
	}
	if len(cc.Choices) != 1 {
		t.Fatalf("%d choices in %s", len(cc.Choices), b)
	}
	c := cc.Choices[0]
	a := answer{content: c.Message.Content, finish: c.FinishReason, prompt: cc.Usage.PromptTokens, output: cc.Usage.CompletionTokens}
	for _, tc := range c.Message.ToolCalls {
		if tc.ID == "" || tc.Type != "function" {
			t.Errorf("tool call %+v", tc)
		}
		a.calls = append(a.calls, tc.Function.Name+" "+tc.Function.Arguments)
	}
	return a
}

const weatherTools = `"tools":[{"type":"function","function":{"name":"get_weather","description":"Weather.","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}},
	{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}}}}]`

func TestRoundTripMatchesOpenAIFake(t *testing.T) {
	gw := newGateway(t, upstreamKey, Options{})
	direct := httptest.NewServer(fake.NewOpenAI(fake.Options{}))
	t.Cleanup(direct.Close)

	tests := []struct {
		name    string
		params  string // after "model"
		headers []string
		want    answer // checked on the translated path; the direct one must agree
	}{
		{name: "text", params: `"messages":[{"role":"user","content":"hello there"}]`,
			want: answer{content: "Echo: hello there", finish: "stop", prompt: 2, output: 3}},
		{name: "system and parts", params: `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"look"},
			{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},{"type":"text","text":"here"}]}]`,
			want: answer{content: "Echo: look\nhere", finish: "stop", prompt: 4, output: 3}},
		{name: "image URL and PDF", params: `"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}},
			{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0xLjQ="}},{"type":"text","text":"compare"}]}]`,
			want: answer{content: "Echo: compare", finish: "stop", prompt: 1, output: 2}},
		{name: "stop", params: `"stop":["four","x"],"messages":[{"role":"user","content":"one two three four five"}]`,
			want: answer{content: "Echo: one two three ", finish: "stop", prompt: 5, output: 4}},
		{name: "length", params: `"max_tokens":2,"messages":[{"role":"user","content":"one two three"}]`,
			want: answer{content: "Echo: one", finish: "length", prompt: 3, output: 2}},
		{name: "max_completion_tokens", params: `"max_completion_tokens":3,"messages":[{"role":"user","content":"one two three"}]`,
			want: answer{content: "Echo: one two", finish: "length", prompt: 3, output: 3}},
		{name: "tool call", params: weatherTools + `,"messages":[{"role":"user","content":"weather?"}]`,
			want: answer{finish: "tool_calls", calls: []string{`get_weather {"city":"sample","days":1}`}, prompt: 1, output: 3}},
		{name: "named tool, no parallel", params: weatherTools + `,"parallel_tool_calls":false,"tool_choice":{"type":"function","function":{"name":"get_time"}},"messages":[{"role":"user","content":"time?"}]`,
			want: answer{finish: "tool_calls", calls: []string{`get_time {"tz":"sample"}`}, prompt: 1, output: 2}},
		{name: "required", params: weatherTools + `,"tool_choice":"required","messages":[{"role":"user","content":"x"}]`,
			want: answer{finish: "tool_calls", calls: []string{`get_weather {"city":"sample","days":1}`}, prompt: 1, output: 3}},
		{name: "tool choice none", params: weatherTools + `,"tool_choice":"none","messages":[{"role":"user","content":"just talk"}]`,
			want: answer{content: "Echo: just talk", finish: "stop", prompt: 2, output: 3}},
		{name: "after tool result", params: weatherTools + `,"messages":[{"role":"user","content":"weather?"},
			{"role":"assistant","content":null,"tool_calls":[{"id":"call_abc","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
			{"role":"tool","tool_call_id":"call_abc","content":"sunny and warm"}]`,
			want: answer{content: "The tool returned: sunny and warm", finish: "stop", prompt: 5, output: 6}},
		{name: "after two tool results", params: weatherTools + `,"messages":[{"role":"user","content":"weather?"},
			{"role":"assistant","content":"Checking both.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
				{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
			{"role":"tool","tool_call_id":"call_1","content":"sunny"},{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rainy"}]}]`,
			want: answer{content: "The tool returned: rainy", finish: "stop", prompt: 5, output: 4}},
		{name: "chunks header", params: `"messages":[{"role":"user","content":"hi"}]`, headers: []string{fake.HeaderChunks, "6"},
			want: answer{content: "Echo: hi lorem ipsum dolor sit", finish: "stop", prompt: 1, output: 6}},
		{name: "dropped seed and penalties", params: `"seed":1,"presence_penalty":0,"messages":[{"role":"user","content":"hi"}]`,
			want: answer{content: "Echo: hi", finish: "stop", prompt: 1, output: 2}},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			name := tt.name
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				body := `{"model":"gpt-client",` + tt.params
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				body += `}`
				status, _, b := call(t, gw.URL, body, tt.headers...)
				if status != http.StatusOK {
					t.Fatalf("gateway status %d: %s", status, b)
				}
				got := answerOf(t, stream, b)
				if !equalAnswers(got, tt.want) {
					t.Errorf("through Anthropic: %+v\nwant %+v", got, tt.want)
				}
				status, _, b = call(t, direct.URL, body, tt.headers...)
				if status != http.StatusOK {
					t.Fatalf("OpenAI fake status %d: %s", status, b)
				}
				if d := answerOf(t, stream, b); !equalAnswers(d, got) {
					t.Errorf("OpenAI fake answers %+v, the Anthropic round trip %+v", d, got)
				}
			})
		}
	}
}

func equalAnswers(a, b answer) bool {
	return a.content == b.content && a.finish == b.finish && a.prompt == b.prompt && a.output == b.output &&
		strings.Join(a.calls, "|") == strings.Join(b.calls, "|")
}

// TestRoundTripMergedTurns checks consecutive user messages reach the model as
// one turn (so the fake echoes both), where OpenAI keeps them apart.
func TestRoundTripMergedTurns(t *testing.T) {
	gw := newGateway(t, upstreamKey, Options{})
	status, _, b := call(t, gw.URL, `{"model":"m","messages":[{"role":"developer","content":"Rules."},{"role":"user","content":"one"},{"role":"user","content":"two"}]}`)
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	if a := answerOf(t, false, b); a.content != "Echo: one\ntwo" || a.prompt != 3 {
		t.Errorf("answer %+v", a)
	}
}

func TestRoundTripErrors(t *testing.T) {
	tests := []struct {
		name       string
		credential string
		opts       Options
		body       string
		headers    []string
		status     int
		typ, code  string
		retryAfter string
		msg        string // part of the message
	}{
		{name: "rate limited", headers: []string{fake.HeaderStatus, "429", fake.HeaderRetryAfter, "2"},
			status: 429, typ: "requests", code: "rate_limit_exceeded", retryAfter: "2", msg: "Injected fault"},
		{name: "overloaded", headers: []string{fake.HeaderStatus, "529"}, status: 529, typ: "server_error", code: "server_error", msg: "Injected fault"},
		{name: "api error", headers: []string{fake.HeaderStatus, "500"}, status: 500, typ: "server_error", code: "server_error"},
		{name: "timeout", headers: []string{fake.HeaderStatus, "504"}, status: 504, typ: "server_error", code: "timeout"},
		{name: "permission", headers: []string{fake.HeaderStatus, "403"}, status: 403, typ: "invalid_request_error", code: "permission_denied"},
		{name: "not found", headers: []string{fake.HeaderStatus, "404"}, status: 404, typ: "invalid_request_error", code: "not_found"},
		{name: "bad upstream key", credential: "sk-wrong", status: 401, typ: "invalid_request_error", code: "invalid_api_key", msg: "invalid x-api-key"},
		{name: "upstream validation", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%%%"}}]}]}`,
			status: 400, typ: "invalid_request_error", msg: "base64"},
		{name: "unsupported parameter", body: `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`,
			status: 400, typ: "invalid_request_error", code: "unsupported_value", msg: "'n'"},
		{name: "temperature clamped when dropping", opts: Options{DropUnsupported: true},
			body: `{"model":"m","temperature":1.9,"messages":[{"role":"user","content":"hi"}]}`, status: 200},
		{name: "streamed fault", body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			headers: []string{fake.HeaderStatus, "529"}, status: 529, typ: "server_error", code: "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cred := tt.credential
			if cred == "" {
				cred = upstreamKey
			}
			gw := newGateway(t, cred, tt.opts)
			body := tt.body
			if body == "" {
				body = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
			}
			status, h, b := call(t, gw.URL, body, tt.headers...)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, b)
			}
			if status == http.StatusOK {
				answerOf(t, false, b)
				return
			}
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			conforms(t, "ErrorResponse", b)
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			code := ""
			if e.Error.Code != nil {
				code = *e.Error.Code
			}
			if e.Error.Type != tt.typ || code != tt.code || !strings.Contains(e.Error.Message, tt.msg) {
				t.Errorf("error %s, want type %q code %q message with %q", b, tt.typ, tt.code, tt.msg)
			}
			if got := h.Get("retry-after"); got != tt.retryAfter {
				t.Errorf("retry-after %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

// TestRoundTripStreamCut checks a stream the upstream drops midway reaches
// the client as chunks followed by an error event, never as a short answer
// with [DONE].
func TestRoundTripStreamCut(t *testing.T) {
	gw := newGateway(t, upstreamKey, Options{})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"one two three four"}]}`
	// message_start, content_block_start, ping, 2 deltas, then the cut.
	status, _, b := call(t, gw.URL, body, fake.HeaderCutAfter, "5")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	data := sseData(t, b)
	for _, d := range data[:len(data)-1] {
		conforms(t, "CreateChatCompletionStreamResponse", []byte(d))
	}
	wantErrorBody(t, []byte(data[len(data)-1]), "server_error", "upstream_stream_incomplete",
		"The upstream provider's stream ended before the message was complete.")
	if got := strings.Join(data[:len(data)-1], ""); !strings.Contains(got, `"content":"Echo:"`) || !strings.Contains(got, `"content":" one"`) {
		t.Errorf("chunks before the cut: %q", data)
	}
}

// TestRoundTripSDK drives the gateway with the official SDK.
func TestRoundTripSDK(t *testing.T) {
	gw := newGateway(t, upstreamKey, Options{})
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1"), option.WithAPIKey("sk-client"), option.WithMaxRetries(0))
	weather := openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
		Name:       "get_weather",
		Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	})

	t.Run("completion", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model:    "gpt-client",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage("hello sdk")},
		})
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.Choices[0]; c.Message.Content != "Echo: hello sdk" || c.FinishReason != "stop" || resp.Model != "gpt-client" {
			t.Errorf("response %+v", resp)
		}
		if resp.Usage.PromptTokens != 4 || resp.Usage.CompletionTokens != 3 || resp.Usage.TotalTokens != 7 {
			t.Errorf("usage %+v", resp.Usage)
		}
	})

	t.Run("stream with tool call", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model:         "gpt-client",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
			Tools:         []openai.ChatCompletionToolUnionParam{weather},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		var acc openai.ChatCompletionAccumulator
		var done *openai.FinishedChatCompletionToolCall
		for stream.Next() {
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("accumulator rejected %s", stream.Current().RawJSON())
			}
			if tc, ok := acc.JustFinishedToolCall(); ok {
				done = &tc
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if done == nil || done.Name != "get_weather" || done.Arguments != `{"city":"sample"}` || !strings.HasPrefix(done.ID, "toolu_") {
			t.Fatalf("finished tool call %+v", done)
		}
		if c := acc.Choices[0]; c.FinishReason != "tool_calls" || acc.Usage.CompletionTokens != 2 {
			t.Errorf("choice %+v usage %+v", c, acc.Usage)
		}
	})

	t.Run("error", func(t *testing.T) {
		_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
			Model:    "gpt-client",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, option.WithHeader(fake.HeaderStatus, "429"))
		apiErr, ok := errors.AsType[*openai.Error](err)
		if !ok {
			t.Fatalf("err = %v, want *openai.Error", err)
		}
		if apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" {
			t.Errorf("error %d %q %q", apiErr.StatusCode, apiErr.Code, apiErr.Type)
		}
	})

	t.Run("stream cut", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
			Model:    "gpt-client",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three")},
		}, option.WithHeader(fake.HeaderCutAfter, "4"))
		n := 0
		for stream.Next() {
			n++
		}
		if _, ok := errors.AsType[*ssestream.StreamError](stream.Err()); !ok {
			t.Fatalf("after %d chunks: err = %v, want a stream error event", n, stream.Err())
		}
		if !strings.Contains(stream.Err().Error(), "upstream_stream_incomplete") {
			t.Errorf("err = %v", stream.Err())
		}
	})
}
