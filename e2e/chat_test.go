package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

func chatParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "demo/chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

func TestChatCompletions(t *testing.T) {
	s := newStack(t, stackOptions{})
	c := s.client()
	ctx := context.Background()

	t.Run("non-streaming", func(t *testing.T) {
		res, err := c.Chat.Completions.New(ctx, chatParams("hello there gateway"))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || !strings.Contains(res.Choices[0].Message.Content, "hello there gateway") {
			t.Fatalf("choices = %+v", res.Choices)
		}
		if res.Choices[0].FinishReason != "stop" || res.Choices[0].Message.Role != "assistant" {
			t.Errorf("finish_reason %q role %q", res.Choices[0].FinishReason, res.Choices[0].Message.Role)
		}
		if res.Usage.PromptTokens == 0 || res.Usage.CompletionTokens == 0 ||
			res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
			t.Errorf("usage = %+v", res.Usage)
		}
		// The upstream saw its own model name, not the client's.
		reqs := s.upstream.all()
		last := reqs[len(reqs)-1]
		var body struct{ Model string }
		if err := json.Unmarshal(last.body, &body); err != nil || body.Model != "fake-chat-1" {
			t.Errorf("upstream model = %q (%v), want fake-chat-1", body.Model, err)
		}
	})

	t.Run("streaming accumulated with usage", func(t *testing.T) {
		p := chatParams("stream this please")
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			acc.AddChunk(stream.Current())
			chunks++
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 4 {
			t.Errorf("got %d chunks; want a real stream", chunks)
		}
		got := acc.Choices[0]
		if got.Message.Role != "assistant" || !strings.Contains(got.Message.Content, "stream this please") || got.FinishReason != "stop" {
			t.Errorf("accumulated choice = role %q content %q finish %q", got.Message.Role, got.Message.Content, got.FinishReason)
		}
		if acc.Usage.TotalTokens == 0 || acc.Usage.CompletionTokens == 0 {
			t.Errorf("usage = %+v, want it (include_usage was asked)", acc.Usage)
		}
	})

	t.Run("streaming without include_usage keeps the client's view", func(t *testing.T) {
		stream := c.Chat.Completions.NewStreaming(ctx, chatParams("no usage for me"))
		var sawUsageChunk bool
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			ch := stream.Current()
			acc.AddChunk(ch)
			if len(ch.Choices) == 0 {
				sawUsageChunk = true
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if sawUsageChunk {
			t.Error("client got a usage chunk it did not ask for")
		}
		if !strings.Contains(acc.Choices[0].Message.Content, "no usage for me") {
			t.Errorf("content = %q", acc.Choices[0].Message.Content)
		}
		// The gateway asked the upstream for usage so it can count tokens.
		reqs := s.upstream.all()
		if !strings.Contains(string(reqs[len(reqs)-1].body), `"include_usage":true`) {
			t.Errorf("upstream request did not ask for usage: %s", reqs[len(reqs)-1].body)
		}
	})

	t.Run("tool call round trip", func(t *testing.T) {
		p := chatParams("what is the weather in Paris?")
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather",
			Parameters: shared.FunctionParameters{
				"type":       "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}},
				"required":   []string{"city"},
			},
		})}
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		msg := res.Choices[0].Message
		if res.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
			t.Fatalf("want one get_weather call, got finish %q calls %+v", res.Choices[0].FinishReason, msg.ToolCalls)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args); err != nil || args["city"] == nil {
			t.Errorf("arguments %q: %v", msg.ToolCalls[0].Function.Arguments, err)
		}
		p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("sunny, 21C", msg.ToolCalls[0].ID))
		final, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if final.Choices[0].FinishReason != "stop" || !strings.Contains(final.Choices[0].Message.Content, "sunny, 21C") {
			t.Errorf("final answer = %q (%s)", final.Choices[0].Message.Content, final.Choices[0].FinishReason)
		}
	})

	t.Run("streamed tool call", func(t *testing.T) {
		p := chatParams("weather?")
		p.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})}
		stream := c.Chat.Completions.NewStreaming(ctx, p)
		acc := openai.ChatCompletionAccumulator{}
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		calls := acc.Choices[0].Message.ToolCalls
		if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) || acc.Choices[0].FinishReason != "tool_calls" {
			t.Errorf("accumulated tool calls = %+v finish %q", calls, acc.Choices[0].FinishReason)
		}
	})

	t.Run("n=2", func(t *testing.T) {
		p := chatParams("two answers")
		p.N = openai.Int(2)
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 2 || res.Choices[0].Index != 0 || res.Choices[1].Index != 1 {
			t.Fatalf("choices = %+v", res.Choices)
		}
	})

	t.Run("stop sequence", func(t *testing.T) {
		p := chatParams("alpha beta gamma delta")
		p.Stop = openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"gamma"}}
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		content := res.Choices[0].Message.Content
		if strings.Contains(content, "gamma") || !strings.Contains(content, "beta") || res.Choices[0].FinishReason != "stop" {
			t.Errorf("content %q finish %q", content, res.Choices[0].FinishReason)
		}
	})

	t.Run("6 MiB prompt", func(t *testing.T) {
		// Large bodies travel to extproc in one gRPC message; the gateway
		// sizes that limit from max_request_body_bytes.
		p := chatParams("big " + strings.Repeat("x", 6<<20))
		p.MaxTokens = openai.Int(1)
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].FinishReason != "length" || res.Usage.PromptTokens == 0 {
			t.Errorf("finish %q usage %+v", res.Choices[0].FinishReason, res.Usage)
		}
	})

	t.Run("max_tokens gives length", func(t *testing.T) {
		p := chatParams("one two three four five six seven eight")
		p.MaxTokens = openai.Int(2)
		res, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].FinishReason != "length" || res.Usage.CompletionTokens != 2 {
			t.Errorf("finish %q usage %+v", res.Choices[0].FinishReason, res.Usage)
		}
	})
}

// apiError asserts err is an OpenAI API error with the given status and code.
func apiError(t *testing.T, err error, status int, code string) *openai.Error {
	t.Helper()
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want an *openai.Error", err)
	}
	if e.StatusCode != status || e.Code != code {
		t.Errorf("status %d code %q, want %d %q (message %q)", e.StatusCode, e.Code, status, code, e.Message)
	}
	return e
}

func TestChatErrors(t *testing.T) {
	s := newStack(t, stackOptions{maxBody: 64 << 10})
	ctx := context.Background()

	t.Run("no key", func(t *testing.T) {
		resp, body := s.post(t, "/chat/completions", "", []byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`))
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), `"invalid_api_key"`) {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		if resp.Header.Get("x-request-id") == "" {
			t.Error("no x-request-id on the error response")
		}
		validateSchema(t, "ErrorResponse", body)
	})
	t.Run("wrong key", func(t *testing.T) {
		c := s.client(option.WithAPIKey("sk-sy-notarealkey0000000000000000000000000000"))
		_, err := c.Chat.Completions.New(ctx, chatParams("hi"))
		apiError(t, err, http.StatusUnauthorized, "invalid_api_key")
	})
	t.Run("unknown model", func(t *testing.T) {
		p := chatParams("hi")
		p.Model = "nobody/nothing"
		c := s.client()
		_, err := c.Chat.Completions.New(ctx, p)
		apiError(t, err, http.StatusNotFound, "model_not_found")
		_, body := s.post(t, "/chat/completions", s.key, []byte(`{"model":"nobody/nothing","messages":[{"role":"user","content":"hi"}]}`))
		validateSchema(t, "ErrorResponse", body)
	})
	t.Run("bad json", func(t *testing.T) {
		resp, body := s.post(t, "/chat/completions", s.key, []byte(`{"model":"demo/chat","messages":[`))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"invalid_json"`) {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		validateSchema(t, "ErrorResponse", body)
	})
	t.Run("temperature 3", func(t *testing.T) {
		p := chatParams("hi")
		p.Temperature = openai.Float(3)
		c := s.client()
		_, err := c.Chat.Completions.New(ctx, p)
		// The code OpenAI itself sends for an out-of-range number.
		if e := apiError(t, err, http.StatusBadRequest, "decimal_above_max_value"); e.Param != "temperature" {
			t.Errorf("param = %q, want temperature", e.Param)
		}
	})
	t.Run("oversized body", func(t *testing.T) {
		big := `{"model":"demo/chat","messages":[{"role":"user","content":"` + strings.Repeat("a", 100<<10) + `"}]}`
		resp, body := s.post(t, "/chat/completions", s.key, []byte(big))
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"error"`) {
			t.Errorf("status %d body %.200s", resp.StatusCode, body)
		}
		validateSchema(t, "ErrorResponse", body)
	})
	t.Run("provider 500 passed through", func(t *testing.T) {
		c := s.client(option.WithHeader("x-fake-status", "500"))
		_, err := c.Chat.Completions.New(ctx, chatParams("hi"))
		e := apiError(t, err, http.StatusInternalServerError, "fake_fault")
		if e.Type != "server_error" {
			t.Errorf("type = %q", e.Type)
		}
	})
	t.Run("unknown path", func(t *testing.T) {
		resp, body := s.post(t, "/nothing/here", s.key, []byte(`{}`))
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		validateSchema(t, "ErrorResponse", body)
	})
}

// TestSecretsAndContentStayPut checks that the client's key never reaches the
// upstream, the provider's key never reaches the client, forged internal
// headers are dropped, and no prompt text lands in the gateway's logs.
func TestSecretsAndContentStayPut(t *testing.T) {
	s := newStack(t, stackOptions{})
	const marker = "zebra-quartz-marker-31337"
	var headers http.Header
	c := s.client(option.WithHeader("x-switchyard-model", "forged/model"), option.WithHeader("x-switchyard-key-id", "key_forged"))
	res, err := c.Chat.Completions.New(context.Background(), chatParams("secret prompt "+marker), option.WithResponseInto(new(*http.Response)), option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(r)
		if resp != nil {
			headers = resp.Header.Clone()
		}
		return resp, err
	}))
	if err != nil {
		t.Fatal(err)
	}
	stream := c.Chat.Completions.NewStreaming(context.Background(), chatParams("streamed secret "+marker))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.upstream.all() {
		for name, vals := range r.header {
			for _, v := range vals {
				if strings.Contains(v, s.key) {
					t.Errorf("client key reached the upstream in %s", name)
				}
				if strings.HasPrefix(strings.ToLower(name), "x-switchyard-") && strings.Contains(v, "forged") {
					t.Errorf("forged internal header reached the upstream: %s: %s", name, v)
				}
			}
		}
		if got := r.header.Get("Authorization"); got != "Bearer "+s.providerKey {
			t.Errorf("upstream authorization = %q, want the provider key", got)
		}
	}
	raw, _ := json.Marshal(res)
	for name, vals := range headers {
		if strings.Contains(strings.Join(vals, " "), s.providerKey) {
			t.Errorf("provider key reached the client in header %s", name)
		}
	}
	if strings.Contains(string(raw), s.providerKey) {
		t.Error("provider key reached the client in the body")
	}
	logs := s.logs.String()
	for _, secret := range []string{marker, s.key, s.providerKey} {
		if strings.Contains(logs, secret) {
			t.Errorf("gateway logs contain %.12s…", secret)
		}
	}
	if !strings.Contains(logs, `"access"`) || !strings.Contains(logs, `demo/chat`) {
		t.Errorf("no access log line with the model in the logs:\n%s", logs)
	}
}
