package fake

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// The official SDK is the client that matters: these tests check it can
// consume the fake, plain and streamed.

func sdkClient(t *testing.T, opts Options) openai.Client {
	t.Helper()
	srv := newServer(t, opts)
	return openai.NewClient(
		option.WithBaseURL(srv.URL+"/v1"),
		option.WithAPIKey(opts.APIKey),
		option.WithMaxRetries(0),
	)
}

func TestSDK(t *testing.T) {
	client := sdkClient(t, Options{APIKey: "sk-sdk"})
	resp, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-fake",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello sdk")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	c := resp.Choices[0]
	if c.Message.Content != "Echo: hello sdk" || c.FinishReason != "stop" || string(c.Message.Role) != "assistant" {
		t.Errorf("choice %+v", c)
	}
	if resp.Model != "gpt-fake" || resp.Usage.PromptTokens != 2 || resp.Usage.CompletionTokens != 3 || resp.Usage.TotalTokens != 5 {
		t.Errorf("model %q usage %+v", resp.Model, resp.Usage)
	}
}

func TestSDKStream(t *testing.T) {
	client := sdkClient(t, Options{APIKey: "sk-sdk"})
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:         "gpt-fake",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream me please")},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	var acc openai.ChatCompletionAccumulator
	finished := ""
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator rejected chunk %s", stream.Current().RawJSON())
		}
		if content, ok := acc.JustFinishedContent(); ok {
			finished = content
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("%d choices", len(acc.Choices))
	}
	c := acc.Choices[0]
	const want = "Echo: stream me please"
	if string(c.Message.Role) != "assistant" || c.Message.Content != want || c.FinishReason != "stop" {
		t.Errorf("accumulated choice: role %q content %q finish %q", c.Message.Role, c.Message.Content, c.FinishReason)
	}
	if finished != want {
		t.Errorf("JustFinishedContent = %q, want %q", finished, want)
	}
	if u := acc.Usage; u.PromptTokens != 3 || u.CompletionTokens != 4 || u.TotalTokens != 7 {
		t.Errorf("usage %+v", u)
	}
}

func TestSDKStreamToolCall(t *testing.T) {
	client := sdkClient(t, Options{})
	stream := client.Chat.Completions.NewStreaming(t.Context(), openai.ChatCompletionNewParams{
		Model:    "gpt-fake",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
			Name:       "get_weather",
			Parameters: openai.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
	})
	var acc openai.ChatCompletionAccumulator
	var done *openai.FinishedChatCompletionToolCall
	for stream.Next() {
		if !acc.AddChunk(stream.Current()) {
			t.Fatalf("accumulator rejected chunk %s", stream.Current().RawJSON())
		}
		if tc, ok := acc.JustFinishedToolCall(); ok {
			done = &tc
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if done == nil || done.Name != "get_weather" || done.Arguments != `{"city":"sample"}` || done.ID == "" {
		t.Fatalf("finished tool call %+v", done)
	}
	if c := acc.Choices[0]; c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 || c.Message.ToolCalls[0].ID != done.ID {
		t.Errorf("accumulated choice %+v", c)
	}
}

func TestSDKErrors(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		reqOpts []option.RequestOption
		status  int
		code    string
	}{
		{name: "bad key", opts: Options{APIKey: "sk-right"}, reqOpts: []option.RequestOption{option.WithAPIKey("sk-wrong")},
			status: http.StatusUnauthorized, code: "invalid_api_key"},
		{name: "injected 503", reqOpts: []option.RequestOption{option.WithHeader(HeaderStatus, "503")},
			status: http.StatusServiceUnavailable, code: "fake_fault"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := sdkClient(t, tt.opts)
			_, err := client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
				Model:    "gpt-fake",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
			}, tt.reqOpts...)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("err = %v, want *openai.Error", err)
			}
			if apiErr.StatusCode != tt.status || apiErr.Code != tt.code {
				t.Errorf("status %d code %q, want %d %q", apiErr.StatusCode, apiErr.Code, tt.status, tt.code)
			}
		})
	}
}

// TestSDKStreamCut checks that the SDK reports a cut stream as an error rather
// than as a short but complete answer.
func TestSDKStreamCut(t *testing.T) {
	client := sdkClient(t, Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-fake",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("one two three")},
	}, option.WithHeader(HeaderCutAfter, "2"))
	n := 0
	for stream.Next() {
		n++
	}
	if stream.Err() == nil {
		t.Fatalf("stream of %d chunks ended without error", n)
	}
	if n != 2 {
		t.Errorf("read %d chunks before the cut, want 2", n)
	}
}
