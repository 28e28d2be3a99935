package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
)

var update = flag.Bool("update", false, "rewrite the streaming golden files")

// goldenCreated replaces the clock in golden tests.
const goldenCreated = 1700000000

func newTestStream() *Stream { return newReplyStream(Reply{}) }

func newReplyStream(r Reply) *Stream {
	s := r.NewStream("client-model")
	s.created = goldenCreated
	return s
}

// translateAll feeds in to a new Stream in the given pieces, the last with
// eos, and returns the concatenated output and the last error.
func translateAll(pieces ...[]byte) ([]byte, error) { return translateReply(Reply{}, pieces...) }

// translateReply is translateAll for a request marked with r.
func translateReply(r Reply, pieces ...[]byte) ([]byte, error) {
	s := newReplyStream(r)
	var out []byte
	var err error
	for i, p := range pieces {
		out, err = s.Translate(out, p, i == len(pieces)-1)
	}
	return out, err
}

func TestStreamGolden(t *testing.T) {
	for _, g := range []struct {
		name  string
		reply Reply
	}{{"text", Reply{}}, {"tool_use", Reply{}}, {"error", Reply{}}, {"structured", Reply{Structured: true}},
		// The same stream for a request that did not ask for structured
		// output: json_response is the client's own tool then.
		{"structured_unmarked", Reply{}}} {
		name := g.name
		translateAll := func(pieces ...[]byte) ([]byte, error) { return translateReply(g.reply, pieces...) }
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", strings.TrimSuffix(name, "_unmarked")+".sse"))
			if err != nil {
				t.Fatal(err)
			}
			got, err := translateAll(in)
			if err != nil {
				t.Fatalf("Translate: %v", err)
			}
			golden := filepath.Join("testdata", name+".openai")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("output differs from %s\n got:\n%s\nwant:\n%s", golden, got, want)
			}
			checkChunks(t, got, "client-model")

			// Chunk boundaries must not matter: every split in two, byte by
			// byte, and with CRLF line ends.
			for i := 0; i <= len(in); i++ {
				out, err := translateAll(in[:i], in[i:])
				if err != nil || !bytes.Equal(out, want) {
					t.Fatalf("split at %d: err %v, output\n%s", i, err, out)
				}
			}
			bytewise := make([][]byte, len(in))
			for i := range in {
				bytewise[i] = in[i : i+1]
			}
			if out, err := translateAll(bytewise...); err != nil || !bytes.Equal(out, want) {
				t.Fatalf("byte by byte: err %v, output\n%s", err, out)
			}
			crlf := bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n"))
			if out, err := translateAll(crlf); err != nil || !bytes.Equal(out, want) {
				t.Fatalf("CRLF: err %v, output\n%s", err, out)
			}
		})
	}
}

// checkChunks validates every event of a translated stream against the
// schema and OpenAI's stream rules, with model as every chunk's model.
func checkChunks(t *testing.T, out []byte, model string) {
	t.Helper()
	data := sseData(t, out)
	var id string
	var created int64
	finishes := 0
	for i, d := range data {
		if d == "[DONE]" {
			if i != len(data)-1 {
				t.Errorf("[DONE] at event %d of %d", i, len(data))
			}
			continue
		}
		if strings.HasPrefix(d, `{"error":`) {
			conforms(t, "ErrorResponse", []byte(d))
			if i != len(data)-1 {
				t.Errorf("error event %d is not the last of %d", i, len(data))
			}
			continue
		}
		conforms(t, "CreateChatCompletionStreamResponse", []byte(d))
		var c struct {
			ID      string          `json:"id"`
			Object  string          `json:"object"`
			Created int64           `json:"created"`
			Model   string          `json:"model"`
			Usage   json.RawMessage `json:"usage"`
			Choices []struct {
				Delta struct {
					Role string `json:"role"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %d %s: %v", i, d, err)
		}
		if i == 0 {
			id, created = c.ID, c.Created
			if len(c.Choices) != 1 || c.Choices[0].Delta.Role != "assistant" {
				t.Errorf("first chunk %s has no assistant role", d)
			}
		}
		if c.ID != id || c.Model != model || c.Created != created || c.Object != "chat.completion.chunk" {
			t.Errorf("chunk %d %s: id/model/created/object differ from the first chunk's", i, d)
		}
		if !strings.HasPrefix(c.ID, "chatcmpl-") {
			t.Errorf("chunk %d: id %q model %q", i, c.ID, c.Model)
		}
		usage := string(c.Usage) != "null"
		if usage != (len(c.Choices) == 0) {
			t.Errorf("chunk %d %s: usage must be set exactly on the chunk without choices", i, d)
		}
		if usage && (i+2 != len(data) || data[i+1] != "[DONE]") {
			t.Errorf("usage chunk %d is not just before [DONE]", i)
		}
		for _, ch := range c.Choices {
			if ch.FinishReason != nil {
				finishes++
			}
		}
	}
	if last := data[len(data)-1]; last == "[DONE]" && finishes != 1 {
		t.Errorf("%d finish_reason chunks, want 1", finishes)
	}
}

// accumulate runs a translated stream through openai-go's accumulator, as an
// SDK client would.
func accumulate(t *testing.T, out []byte) openai.ChatCompletionAccumulator {
	t.Helper()
	var acc openai.ChatCompletionAccumulator
	for _, d := range sseData(t, out) {
		if d == "[DONE]" {
			break
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		if !acc.AddChunk(c) {
			t.Fatalf("accumulator rejected chunk %s", d)
		}
	}
	return acc
}

func TestStreamAccumulated(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		in, _ := os.ReadFile("testdata/text.sse")
		out, err := translateAll(in)
		if err != nil {
			t.Fatal(err)
		}
		acc := accumulate(t, out)
		if len(acc.Choices) != 1 {
			t.Fatalf("%d choices", len(acc.Choices))
		}
		c := acc.Choices[0]
		const want = "Hello! \"Quoted\"\né 😀 How can I help?"
		if c.Message.Role != "assistant" || c.Message.Content != want || c.FinishReason != "stop" {
			t.Errorf("role %q content %q finish %q", c.Message.Role, c.Message.Content, c.FinishReason)
		}
		if acc.ID != "chatcmpl-msg_01TextStreamA1b2C3" || acc.Model != "client-model" {
			t.Errorf("id %q model %q", acc.ID, acc.Model)
		}
		if u := acc.Usage; u.PromptTokens != 125 || u.CompletionTokens != 15 || u.TotalTokens != 140 || u.PromptTokensDetails.CachedTokens != 100 {
			t.Errorf("usage %+v", u)
		}
	})
	t.Run("tool_use", func(t *testing.T) {
		in, _ := os.ReadFile("testdata/tool_use.sse")
		out, err := translateAll(in)
		if err != nil {
			t.Fatal(err)
		}
		acc := accumulate(t, out)
		c := acc.Choices[0]
		if c.Message.Content != "Let me check." || c.FinishReason != "tool_calls" {
			t.Errorf("content %q finish %q", c.Message.Content, c.FinishReason)
		}
		want := []struct{ id, name, args string }{
			{"toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", `{"location": "San Francisco, CA", "unit": "fahrenheit"}`},
			{"toolu_01Hq2ZxB7kRw", "get_time", `{}`},
		}
		if len(c.Message.ToolCalls) != len(want) {
			t.Fatalf("tool calls %+v", c.Message.ToolCalls)
		}
		for i, w := range want {
			tc := c.Message.ToolCalls[i]
			if tc.ID != w.id || tc.Function.Name != w.name || tc.Function.Arguments != w.args || tc.Type != "function" {
				t.Errorf("tool call %d = %+v, want %+v", i, tc, w)
			}
		}
		if u := acc.Usage; u.PromptTokens != 472 || u.CompletionTokens != 89 || u.TotalTokens != 561 {
			t.Errorf("usage %+v", u)
		}
	})
}

func TestStreamErrorEvent(t *testing.T) {
	in, _ := os.ReadFile("testdata/error.sse")
	s := newTestStream()
	out, err := s.Translate(nil, in, false)
	if err != nil {
		t.Fatalf("an upstream error event is a translation, not a failure: %v", err)
	}
	data := sseData(t, out)
	last := data[len(data)-1]
	wantErrorBody(t, []byte(last), "server_error", "server_error", "Overloaded")
	// The stream is over: later input and eos add nothing.
	more, err := s.Translate(out, []byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), true)
	if err != nil || !bytes.Equal(more, out) {
		t.Errorf("after the error: err %v, output grew by %q", err, more[len(out):])
	}
}

func TestStreamFailures(t *testing.T) {
	start := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1}}}\n\n"
	tests := []struct {
		name string
		in   string
		code string
	}{
		{"ends early", start + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
			"upstream_stream_incomplete"},
		{"ends mid-event", start + "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi",
			"bad_upstream_response"},
		{"not JSON", start + "data: {oops}\n\n", "bad_upstream_response"},
		{"bad block index", start + "data: {\"type\":\"content_block_start\",\"index\":-1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
			"bad_upstream_response"},
		{"empty", "", "upstream_stream_incomplete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestStream()
			out, err := s.Translate(nil, []byte(tt.in), true)
			e := wantAPIError(t, err, http.StatusBadGateway, tt.code, "")
			data := sseData(t, out)
			if last := data[len(data)-1]; last != string(e.JSON()) {
				t.Errorf("last event %s, want the error %s", last, e.JSON())
			}
			for _, d := range data[:len(data)-1] {
				conforms(t, "CreateChatCompletionStreamResponse", []byte(d))
			}
			if again, err2 := s.Translate(out, []byte(start), true); !bytes.Equal(again, out) || !errors.Is(err2, e) {
				t.Errorf("after failing: output grew or error changed (%v)", err2)
			}
		})
	}
	t.Run("event too large", func(t *testing.T) {
		s := newTestStream()
		s.split.Max = 64
		_, err := s.Translate(nil, []byte("data: "+strings.Repeat("x", 100)), false)
		wantAPIError(t, err, http.StatusBadGateway, "bad_upstream_response", "")
	})
}

// TestStreamWithoutMessageStart checks that a stream missing events still
// comes out well-formed: a role chunk first, a finish reason, usage, [DONE].
func TestStreamWithoutMessageStart(t *testing.T) {
	in := "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
		"data: {\"type\":\"message_stop\"}\n\n"
	out, err := translateAll([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	checkChunks(t, out, "client-model")
	acc := accumulate(t, out)
	if c := acc.Choices[0]; c.Message.Content != "Hi" || c.FinishReason != "stop" || c.Message.Role != "assistant" {
		t.Errorf("accumulated %+v", c)
	}
}

func TestStreamStopReasons(t *testing.T) {
	for stop, want := range map[string]string{"max_tokens": "length", "refusal": "content_filter", "stop_sequence": "stop", "pause_turn": "stop"} {
		t.Run(stop, func(t *testing.T) {
			in := "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"" + stop + "\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n" +
				"data: {\"type\":\"message_stop\"}\n\n"
			out, err := translateAll([]byte(in))
			if err != nil {
				t.Fatal(err)
			}
			checkChunks(t, out, "client-model")
			if got := accumulate(t, out).Choices[0].FinishReason; got != want {
				t.Errorf("finish_reason %q, want %q", got, want)
			}
		})
	}
}

func TestStreamErrorTypes(t *testing.T) {
	for typ, code := range map[string]string{"rate_limit_error": "rate_limit_exceeded", "api_error": "server_error", "invalid_request_error": ""} {
		t.Run(typ, func(t *testing.T) {
			out, err := translateAll([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"" + typ + "\",\"message\":\"m\"}}\n\n"))
			if err != nil {
				t.Fatal(err)
			}
			data := sseData(t, out)
			if len(data) != 1 {
				t.Fatalf("events %q, want just the error", data)
			}
			e := errorFrom(0, typ, "m")
			wantErrorBody(t, []byte(data[0]), e.Type, code, "m")
			if e.Status == 0 || e.Status < 400 {
				t.Errorf("nominal status %d", e.Status)
			}
		})
	}
}

// TestStreamToolInputWhole covers a tool_use block whose input comes whole in
// content_block_start rather than as input_json_delta fragments.
func TestStreamToolInputWhole(t *testing.T) {
	in := "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":1}}}\n\n" +
		"data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"f\",\"input\":{\"a\": [1, \"\\u00e9\"]}}}\n\n" +
		"data: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":5}}\n\n" +
		"data: {\"type\":\"message_stop\"}\n\n"
	out, err := translateAll([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	checkChunks(t, out, "client-model")
	c := accumulate(t, out).Choices[0]
	if len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].Function.Arguments != `{"a": [1, "\u00e9"]}` || c.FinishReason != "tool_calls" {
		t.Errorf("accumulated %+v", c)
	}
}
