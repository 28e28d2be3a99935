package gemini

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/sse"
)

// Recorded Gemini alt=sse streams (events end in CRLF CRLF, as Gemini's do).
const (
	geminiTextStream = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hello\"}],\"role\": \"model\"}}],\"usageMetadata\": {\"promptTokenCount\": 8,\"totalTokenCount\": 8,\"promptTokensDetails\": [{\"modality\": \"TEXT\",\"tokenCount\": 8}]},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-text-1\"}\r\n\r\n" +
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" there, \\\"friend\\\" \\u00e9\"}],\"role\": \"model\"}}],\"usageMetadata\": {\"promptTokenCount\": 8,\"totalTokenCount\": 8},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-text-1\"}\r\n\r\n" +
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"!\\n\"}],\"role\": \"model\"},\"finishReason\": \"STOP\"}],\"usageMetadata\": {\"promptTokenCount\": 8,\"candidatesTokenCount\": 4,\"totalTokenCount\": 12,\"cachedContentTokenCount\": 2},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"resp-text-1\"}\r\n\r\n"

	geminiCallStream = "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"**Planning** I should call the tool.\",\"thought\": true}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 30,\"totalTokenCount\": 42,\"thoughtsTokenCount\": 12},\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"resp-call-1\"}\r\n\r\n" +
		"data: {\"candidates\": [{\"content\": {\"parts\": [{\"functionCall\": {\"name\": \"get_weather\",\"args\": {\"city\": \"Paris\",\"unit\": \"c\"}},\"thoughtSignature\": \"CiQBVKhc7hVKMd0=\"},{\"functionCall\": {\"name\": \"get_time\",\"args\": {}}}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 30,\"candidatesTokenCount\": 8,\"totalTokenCount\": 50,\"thoughtsTokenCount\": 12},\"modelVersion\": \"gemini-2.5-pro\",\"responseId\": \"resp-call-1\"}\r\n\r\n"
)

const (
	textHead = `data: {"id":"chatcmpl-resp-text-1","object":"chat.completion.chunk","created":1700000000,"model":"client-model",`
	callHead = `data: {"id":"chatcmpl-resp-call-1","object":"chat.completion.chunk","created":1700000000,"model":"client-model",`
)

var (
	weatherCallID = string(appendCallID(nil, "resp-call-1", 0, 0, "get_weather", `{"city": "Paris","unit": "c"}`))
	timeCallID    = string(appendCallID(nil, "resp-call-1", 0, 1, "get_time", `{}`))

	openAITextStream = textHead + `"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}` + "\n\n" +
		textHead + `"choices":[{"index":0,"delta":{"content":" there, \"friend\" \u00e9"},"finish_reason":null}]}` + "\n\n" +
		textHead + `"choices":[{"index":0,"delta":{"content":"!\n"},"finish_reason":null}]}` + "\n\n" +
		textHead + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		textHead + `"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":4,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n" +
		"data: [DONE]\n\n"

	openAICallStream = callHead + `"choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[` +
		`{"index":0,"id":"` + weatherCallID + `","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},"finish_reason":null}]}` + "\n\n" +
		callHead + `"choices":[{"index":0,"delta":{"tool_calls":[` +
		`{"index":1,"id":"` + timeCallID + `","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":null}]}` + "\n\n" +
		callHead + `"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
		callHead + `"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":20,"total_tokens":50,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":12}}}` + "\n\n" +
		"data: [DONE]\n\n"
)

// translateAll feeds in to a new Stream in the given pieces, the last with eos.
func translateAll(t testing.TB, pieces ...string) string {
	t.Helper()
	s := NewStream("client-model")
	var out []byte
	for i, p := range pieces {
		var err error
		out, err = s.Translate(out, []byte(p), i == len(pieces)-1)
		if err != nil {
			t.Fatalf("Translate piece %d: %v", i, err)
		}
	}
	return string(out)
}

func TestStreamGolden(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"text", geminiTextStream, openAITextStream},
		{"function calls", geminiCallStream, openAICallStream},
		{"LF separators", strings.ReplaceAll(geminiTextStream, "\r\n", "\n"), openAITextStream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translateAll(t, tt.in, "")
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			// Chunk boundaries must not matter: every split in two, and
			// byte by byte, give the same bytes.
			for i := 0; i <= len(tt.in); i++ {
				if got := translateAll(t, tt.in[:i], tt.in[i:]); got != tt.want {
					t.Fatalf("split at %d: got\n%s", i, got)
				}
			}
			bytewise := make([]string, 0, len(tt.in)+1)
			for i := range len(tt.in) {
				bytewise = append(bytewise, tt.in[i:i+1])
			}
			if got := translateAll(t, append(bytewise, "")...); got != tt.want {
				t.Fatalf("byte by byte: got\n%s", got)
			}
			// eos may come with the last data rather than after it.
			if got := translateAll(t, tt.in); got != tt.want {
				t.Fatalf("eos with data: got\n%s", got)
			}
			checkChunks(t, got)
		})
	}
}

// events splits an OpenAI stream into its data payloads, checking each chunk
// against the schema and that the stream ends with [DONE].
func events(t *testing.T, stream string) []string {
	t.Helper()
	var data []string
	var sp sse.Splitter
	if err := sp.Feed([]byte(stream), true, func(ev sse.Event) error {
		data = append(data, string(ev.Data))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", stream)
	}
	for _, d := range data[:len(data)-1] {
		conforms(t, "CreateChatCompletionStreamResponse", []byte(d))
	}
	return data[:len(data)-1]
}

// checkChunks validates every chunk and the invariants clients rely on.
func checkChunks(t *testing.T, stream string) {
	t.Helper()
	var id string
	var created int64
	for i, d := range events(t, stream) {
		var c struct {
			ID      string `json:"id"`
			Created int64  `json:"created"`
		}
		decode(t, []byte(d), &c)
		if i == 0 {
			id, created = c.ID, c.Created
		} else if c.ID != id || c.Created != created {
			t.Errorf("chunk %d: id/created %s/%d differ from %s/%d", i, c.ID, c.Created, id, created)
		}
	}
}

// accumulate runs the stream through openai-go's accumulator, as SDK users
// do.
func accumulate(t *testing.T, stream string) openai.ChatCompletionAccumulator {
	t.Helper()
	acc, _, _ := accumulateFinished(t, stream)
	return acc
}

// accumulateFinished is accumulate, also collecting what the accumulator's
// JustFinishedContent and JustFinishedToolCall report along the way (the
// tool loop of openai-go's README).
func accumulateFinished(t *testing.T, stream string) (acc openai.ChatCompletionAccumulator, contents []string, calls []openai.FinishedChatCompletionToolCall) {
	t.Helper()
	for i, d := range events(t, stream) {
		var chunk openai.ChatCompletionChunk
		if err := json.Unmarshal([]byte(d), &chunk); err != nil {
			t.Fatalf("chunk %d %s: %v", i, d, err)
		}
		if !acc.AddChunk(chunk) {
			t.Fatalf("accumulator rejected chunk %d: %s", i, d)
		}
		if c, ok := acc.JustFinishedContent(); ok {
			contents = append(contents, c)
		}
		if tc, ok := acc.JustFinishedToolCall(); ok {
			calls = append(calls, tc)
		}
	}
	return acc, contents, calls
}

// The accumulator's JustFinished helpers fire once per finished content and
// per tool call: each ends with a chunk that no longer continues it.
func TestStreamJustFinished(t *testing.T) {
	_, contents, calls := accumulateFinished(t, translateAll(t, geminiTextStream, ""))
	if len(contents) != 1 || contents[0] != "Hello there, \"friend\" é!\n" || len(calls) != 0 {
		t.Errorf("text: finished contents %q, calls %+v", contents, calls)
	}
	_, contents, calls = accumulateFinished(t, translateAll(t, geminiCallStream, ""))
	if len(contents) != 0 || len(calls) != 2 {
		t.Fatalf("calls: finished contents %q, calls %+v", contents, calls)
	}
	if c := calls[0]; c.Index != 0 || c.ID != weatherCallID || c.Name != "get_weather" || c.Arguments != `{"city":"Paris","unit":"c"}` {
		t.Errorf("call 0 = %+v", c)
	}
	if c := calls[1]; c.Index != 1 || c.ID != timeCallID || c.Name != "get_time" || c.Arguments != `{}` {
		t.Errorf("call 1 = %+v", c)
	}
}

func TestStreamAccumulate(t *testing.T) {
	t.Run("text", func(t *testing.T) {
		acc := accumulate(t, translateAll(t, geminiTextStream, ""))
		if len(acc.Choices) != 1 {
			t.Fatalf("choices = %d", len(acc.Choices))
		}
		c := acc.Choices[0]
		if c.Message.Role != "assistant" || c.Message.Content != "Hello there, \"friend\" é!\n" || c.FinishReason != "stop" {
			t.Errorf("choice = %+v", c)
		}
		if u := acc.Usage; u.PromptTokens != 8 || u.CompletionTokens != 4 || u.TotalTokens != 12 || u.PromptTokensDetails.CachedTokens != 2 {
			t.Errorf("usage = %+v", u)
		}
		if acc.ID != "chatcmpl-resp-text-1" || acc.Model != "client-model" {
			t.Errorf("id %q model %q", acc.ID, acc.Model)
		}
	})
	t.Run("function calls", func(t *testing.T) {
		acc := accumulate(t, translateAll(t, geminiCallStream, ""))
		c := acc.Choices[0]
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 2 {
			t.Fatalf("choice = %+v", c)
		}
		tc := c.Message.ToolCalls[0]
		if tc.ID != weatherCallID || tc.Type != "function" || tc.Function.Name != "get_weather" || tc.Function.Arguments != `{"city":"Paris","unit":"c"}` {
			t.Errorf("tool call 0 = %+v", tc)
		}
		if tc := c.Message.ToolCalls[1]; tc.ID != timeCallID || tc.Function.Name != "get_time" || tc.Function.Arguments != `{}` {
			t.Errorf("tool call 1 = %+v", tc)
		}
		if u := acc.Usage; u.PromptTokens != 30 || u.CompletionTokens != 20 || u.CompletionTokensDetails.ReasoningTokens != 12 {
			t.Errorf("usage = %+v", u)
		}
	})
}

// The JSON and the streamed translation of the same answer agree on tool
// call ids, so a client may switch between them mid-conversation.
func TestStreamCallIDsMatchJSON(t *testing.T) {
	body := `{"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris","unit": "c"}},"thoughtSignature": "CiQBVKhc7hVKMd0="},{"functionCall": {"name": "get_time","args": {}}}],"role": "model"},"finishReason": "STOP","index": 0}],"responseId": "resp-call-1"}`
	out, err := TranslateResponse(200, []byte(body), "client-model")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), weatherCallID) || !strings.Contains(string(out), timeCallID) {
		t.Errorf("JSON ids differ from the stream's %s, %s: %s", weatherCallID, timeCallID, out)
	}
}

func TestStreamCases(t *testing.T) {
	head := func(id string) string {
		return `data: {"id":"chatcmpl-` + id + `","object":"chat.completion.chunk","created":1700000000,"model":"client-model",`
	}
	zeroUsage := `"usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n"
	tests := []struct {
		name, in, want string
	}{
		{
			name: "no finish reason: one is added at the end",
			in:   "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"}}],\"responseId\":\"r\"}\r\n\r\n",
			want: head("r") + `"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}` + "\n\n" +
				head("r") + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				head("r") + `"choices":[],` + zeroUsage + "data: [DONE]\n\n",
		},
		{
			name: "finish reason alone, after the text",
			in: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"}}],\"responseId\":\"r\"}\n\n" +
				"data: {\"candidates\":[{\"content\":{\"role\":\"model\"},\"finishReason\":\"MAX_TOKENS\"}],\"responseId\":\"r\"}\n\n",
			want: head("r") + `"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}` + "\n\n" +
				head("r") + `"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n" +
				head("r") + `"choices":[],` + zeroUsage + "data: [DONE]\n\n",
		},
		{
			name: "blocked prompt",
			in:   "data: {\"promptFeedback\":{\"blockReason\":\"PROHIBITED_CONTENT\"},\"usageMetadata\":{\"promptTokenCount\":5,\"totalTokenCount\":5},\"responseId\":\"b\"}\r\n\r\n",
			want: head("b") + `"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":"content_filter"}]}` + "\n\n" +
				head("b") + `"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}` + "\n\n" +
				"data: [DONE]\n\n",
		},
		{
			name: "safety stop mid-answer",
			in: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Well\"}],\"role\":\"model\"}}],\"responseId\":\"s\"}\n\n" +
				"data: {\"candidates\":[{\"finishReason\":\"SAFETY\",\"safetyRatings\":[]}],\"responseId\":\"s\"}\n\n",
			want: head("s") + `"choices":[{"index":0,"delta":{"role":"assistant","content":"Well"},"finish_reason":null}]}` + "\n\n" +
				head("s") + `"choices":[{"index":0,"delta":{},"finish_reason":"content_filter"}]}` + "\n\n" +
				head("s") + `"choices":[],` + zeroUsage + "data: [DONE]\n\n",
		},
		{
			name: "two candidates",
			in: "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"A\"}],\"role\":\"model\"}},{\"content\":{\"parts\":[{\"text\":\"B\"}],\"role\":\"model\"},\"index\":1}],\"responseId\":\"m\"}\n\n" +
				"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"},{\"content\":{\"parts\":[{\"text\":\"b\"}],\"role\":\"model\"},\"finishReason\":\"STOP\",\"index\":1}],\"responseId\":\"m\"}\n\n",
			want: head("m") + `"choices":[{"index":0,"delta":{"role":"assistant","content":"A"},"finish_reason":null}]}` + "\n\n" +
				head("m") + `"choices":[{"index":1,"delta":{"role":"assistant","content":"B"},"finish_reason":null}]}` + "\n\n" +
				head("m") + `"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}` + "\n\n" +
				head("m") + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				head("m") + `"choices":[{"index":1,"delta":{"content":"b"},"finish_reason":null}]}` + "\n\n" +
				head("m") + `"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				head("m") + `"choices":[],` + zeroUsage + "data: [DONE]\n\n",
		},
		{
			name: "keep-alive comments are ignored",
			in:   ": ping\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}],\"responseId\":\"k\"}\n\n",
			want: head("k") + `"choices":[{"index":0,"delta":{"role":"assistant","content":"x"},"finish_reason":null}]}` + "\n\n" +
				head("k") + `"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				head("k") + `"choices":[],` + zeroUsage + "data: [DONE]\n\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := translateAll(t, tt.in, "")
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
			checkChunks(t, got)
			accumulate(t, got)
		})
	}
}

func TestStreamEmpty(t *testing.T) {
	// An upstream that sends nothing still gives clients a well-formed,
	// complete (empty) answer.
	got := translateAll(t, "")
	checkChunks(t, got)
	acc := accumulate(t, got)
	if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "stop" || acc.Choices[0].Message.Role != "assistant" {
		t.Errorf("choices = %+v", acc.Choices)
	}
}

func TestStreamUpstreamError(t *testing.T) {
	in := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"Hi\"}],\"role\":\"model\"}}],\"responseId\":\"e\"}\r\n\r\n" +
		"data: {\"error\": {\"code\": 503,\"message\": \"The model is overloaded. Please try again later.\",\"status\": \"UNAVAILABLE\"}}\r\n\r\n"
	s := NewStream("client-model")
	out, err := s.Translate(nil, []byte(in), false)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	// After the error event the stream is over: no finish, usage or [DONE].
	out, err = s.Translate(out, []byte("data: {\"candidates\":[]}\r\n\r\n"), true)
	if err != nil {
		t.Fatalf("Translate: %v", err)
	}
	var data []string
	var sp sse.Splitter
	_ = sp.Feed(out, true, func(ev sse.Event) error { data = append(data, string(ev.Data)); return nil })
	if len(data) != 2 {
		t.Fatalf("events = %q", data)
	}
	conforms(t, "CreateChatCompletionStreamResponse", []byte(data[0]))
	conforms(t, "ErrorResponse", []byte(data[1]))
	want := `{"error":{"message":"The model is overloaded. Please try again later.","type":"server_error","param":null,"code":"unavailable"}}`
	if data[1] != want {
		t.Errorf("error event = %s, want %s", data[1], want)
	}
}

func TestStreamMalformed(t *testing.T) {
	s := NewStream("m")
	out, err := s.Translate(nil, []byte("data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"ok\"}]}}]}\n\ndata: {not json}\n\n"), false)
	e := asAPIError(t, err)
	if e.Status != 502 || e.Code != "upstream_invalid_response" {
		t.Errorf("error = %+v", e)
	}
	// What came before the bad event is kept for the caller to forward.
	if !bytes.Contains(out, []byte(`"content":"ok"`)) {
		t.Errorf("output before the error lost: %s", out)
	}
}

// BenchmarkStreamTranslate measures the cost per Gemini text chunk, the
// gateway's hot path for streams.
func BenchmarkStreamTranslate(b *testing.B) {
	event := []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" The quick brown fox jumps over the lazy dog, again and again.\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"totalTokenCount\": 8},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"bench-1\"}\r\n\r\n")
	s := NewStream("client-model")
	dst := make([]byte, 0, 4096)
	dst, _ = s.Translate(dst, event, false) // the first chunk sets up the stream
	b.SetBytes(int64(len(event)))
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if dst, err = s.Translate(dst[:0], event, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStreamTranslateSplit is the same with every event arriving in two
// chunks, so the splitter carries the first half.
func BenchmarkStreamTranslateSplit(b *testing.B) {
	event := []byte("data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \" The quick brown fox jumps over the lazy dog, again and again.\"}],\"role\": \"model\"},\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 8,\"totalTokenCount\": 8},\"modelVersion\": \"gemini-2.5-flash\",\"responseId\": \"bench-1\"}\r\n\r\n")
	half := len(event) / 2
	s := NewStream("client-model")
	dst := make([]byte, 0, 4096)
	dst, _ = s.Translate(dst, event, false)
	b.SetBytes(int64(len(event)))
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = s.Translate(dst[:0], event[:half], false)
		dst, _ = s.Translate(dst, event[half:], false)
	}
}
