package e2e

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/openai/openai-go/v3"
)

// TestAccumulatorHelpers runs the tool loop of openai-go's README on a model
// of every vendor kind: the accumulator's JustFinished* helpers fire only
// when a chunk no longer continues the content or tool call before it, so
// each vendor's stream must end them with a finish chunk of its own.
func TestAccumulatorHelpers(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini"} {
		for _, usage := range []bool{false, true} {
			name := model
			if usage {
				name += "/include_usage"
			}
			t.Run(name, func(t *testing.T) {
				params := func(text string, tools bool) openai.ChatCompletionNewParams {
					p := openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
					if tools {
						p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
					}
					if usage {
						p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					}
					return p
				}
				t.Run("content", func(t *testing.T) {
					stream := c.Chat.Completions.NewStreaming(ctx, params("finish this content", false))
					var acc openai.ChatCompletionAccumulator
					var finished []string
					for stream.Next() {
						acc.AddChunk(stream.Current())
						if content, ok := acc.JustFinishedContent(); ok {
							finished = append(finished, content)
						}
						if tool, ok := acc.JustFinishedToolCall(); ok {
							t.Errorf("a tool call finished in a text answer: %+v", tool)
						}
					}
					if err := stream.Err(); err != nil {
						t.Fatal(err)
					}
					if len(finished) != 1 || finished[0] != "Echo: finish this content" {
						t.Errorf("JustFinishedContent fired with %q, want once with the whole answer", finished)
					}
				})
				t.Run("tool call", func(t *testing.T) {
					stream := c.Chat.Completions.NewStreaming(ctx, params("what is the weather in Paris?", true))
					var acc openai.ChatCompletionAccumulator
					var calls []openai.FinishedChatCompletionToolCall
					for stream.Next() {
						acc.AddChunk(stream.Current())
						if tool, ok := acc.JustFinishedToolCall(); ok {
							calls = append(calls, tool)
						}
					}
					if err := stream.Err(); err != nil {
						t.Fatal(err)
					}
					if len(calls) != 1 {
						t.Fatalf("JustFinishedToolCall fired %d times (%+v), want once", len(calls), calls)
					}
					call, want := calls[0], acc.Choices[0].Message.ToolCalls
					if call.Name != "get_weather" || call.Index != 0 || len(want) != 1 || call.ID != want[0].ID ||
						call.Arguments != want[0].Function.Arguments || !json.Valid([]byte(call.Arguments)) {
						t.Errorf("finished tool call %+v, accumulated %+v", call, want)
					}
				})
			})
		}
	}
}
