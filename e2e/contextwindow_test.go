package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestContextWindowExceeded: a prompt larger than the model's context
// window (by the gateway's estimate) is refused with OpenAI's 400
// context_length_exceeded, on chat completions (param "messages") and on the
// Responses API (param "input"), instead of being forwarded.
func TestContextWindowExceeded(t *testing.T) {
	s := newStack(t, stackOptions{extraYAML: `  - id: demo/small
    context_window: 1000
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
`})
	c := s.client()
	ctx := context.Background()
	// 1000 tokens at 4 bytes a token, and then some.
	long := strings.Repeat("word ", 1000)

	t.Run("chat", func(t *testing.T) {
		before := len(s.upstream.all())
		for _, stream := range []bool{false, true} {
			p := openai.ChatCompletionNewParams{Model: "demo/small",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("Be brief."), openai.UserMessage(long)}}
			var err error
			if stream {
				st := c.Chat.Completions.NewStreaming(ctx, p)
				for st.Next() {
					t.Error("got a chunk")
				}
				err = st.Err()
			} else {
				_, err = c.Chat.Completions.New(ctx, p)
			}
			e := apiError(t, err, 400, "context_length_exceeded")
			if e.Param != "messages" || e.Type != "invalid_request_error" || !strings.Contains(e.Message, "maximum context length is 1000 tokens") {
				t.Errorf("stream %v: error %+v", stream, e)
			}
		}
		if n := len(s.upstream.all()); n != before {
			t.Errorf("%d refused requests reached the provider", n-before)
		}
		// Within the window it is served.
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo/small",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(strings.Repeat("word ", 500))}})
		if err != nil || res.Choices[0].FinishReason != "stop" {
			t.Errorf("a prompt within the window: %v", err)
		}
	})

	t.Run("responses", func(t *testing.T) {
		for _, stream := range []bool{false, true} {
			p := responses.ResponseNewParams{Model: "demo/small",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(long)}}
			var err error
			if stream {
				st := c.Responses.NewStreaming(ctx, p)
				for st.Next() {
					t.Errorf("got an event %s", st.Current().Type)
				}
				err = st.Err()
			} else {
				_, err = c.Responses.New(ctx, p)
			}
			e := apiError(t, err, 400, "context_length_exceeded")
			if e.Param != "input" || e.Type != "invalid_request_error" || e.Message == "" {
				t.Errorf("stream %v: error %+v", stream, e)
			}
		}
		// A conversation that grows past the window through
		// previous_response_id is refused the same way.
		r1, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/small",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(strings.Repeat("word ", 600))}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "demo/small", PreviousResponseID: openai.String(r1.ID),
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(strings.Repeat("more ", 400))}})
		if e := apiError(t, err, 400, "context_length_exceeded"); e.Param != "input" {
			t.Errorf("continuation: error %+v", e)
		}
	})
}
