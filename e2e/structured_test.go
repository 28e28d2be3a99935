package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// mathSchema is a strict structured-output schema with what SDK helpers
// generate: nested objects, arrays, enums, nullable members, $defs and $ref.
const mathSchema = `{
  "type": "object",
  "$defs": {
    "step": {
      "type": "object",
      "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}},
      "required": ["explanation", "output"],
      "additionalProperties": false
    }
  },
  "properties": {
    "steps": {"type": "array", "items": {"$ref": "#/$defs/step"}},
    "final_answer": {"type": "string"},
    "confidence": {"type": "number"},
    "attempts": {"type": "integer"},
    "verdict": {"type": "string", "enum": ["solved", "unsolved"]},
    "checked": {"type": "boolean"},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "required": ["steps", "final_answer", "confidence", "attempts", "verdict", "checked", "note"],
  "additionalProperties": false
}`

// structuredModels are the models of every vendor kind the vendor stack
// serves.
var structuredModels = []string{"vendor/gpt", "vendor/claude", "vendor/gemini"}

// schemaMap is mathSchema as the SDK takes it.
func schemaMap(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(mathSchema), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// conformsTo fails unless text is JSON that validates against schema.
func conformsTo(t *testing.T, schema, text string) {
	t.Helper()
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("structured.json", s); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("structured.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the answer is not JSON: %v\n%q", err, text)
	}
	if err := sch.Validate(inst); err != nil {
		t.Errorf("the answer does not follow the schema: %v\n%s", err, text)
	}
}

// TestStructuredOutputs asks every vendor kind for structured output with
// the official SDK, plain and streamed, through chat completions and the
// Responses API: the answer is JSON that follows the schema (json_object:
// a JSON object), in message.content, finishing "stop" with no tool calls.
func TestStructuredOutputs(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	strict := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
		JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "math_reasoning", Strict: openai.Bool(true), Schema: schemaMap(t)},
	}}
	params := func(model string, rf openai.ChatCompletionNewParamsResponseFormatUnion) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: model, ResponseFormat: rf,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are a math tutor."), openai.UserMessage("solve 8x + 7 = -23")}}
	}
	for _, model := range structuredModels {
		t.Run(model, func(t *testing.T) {
			t.Run("json_schema", func(t *testing.T) {
				res, err := c.Chat.Completions.New(ctx, params(model, strict))
				if err != nil {
					t.Fatal(err)
				}
				ch := res.Choices[0]
				if ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 {
					t.Errorf("finish_reason %q, tool calls %v; want stop and none", ch.FinishReason, ch.Message.ToolCalls)
				}
				conformsTo(t, mathSchema, ch.Message.Content)
				if res.Usage.CompletionTokens == 0 {
					t.Errorf("usage %+v", res.Usage)
				}
				validateSchema(t, "CreateChatCompletionResponse", []byte(res.RawJSON()))
				if model == "vendor/claude" { // asked through the forced tool
					if up := vs.lastRequest(t, "anthropic"); !strings.Contains(string(up.body), `"tool_choice":{"type":"tool","name":"json_response","disable_parallel_tool_use":true}`) {
						t.Errorf("Anthropic got %s", up.body)
					}
				}
			})
			t.Run("json_schema streamed", func(t *testing.T) {
				p := params(model, strict)
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				stream := c.Chat.Completions.NewStreaming(ctx, p)
				var acc openai.ChatCompletionAccumulator
				chunks := 0
				for stream.Next() {
					acc.AddChunk(stream.Current())
					chunks++
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				ch := acc.Choices[0]
				if ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 {
					t.Errorf("finish_reason %q, tool calls %v; want stop and none", ch.FinishReason, ch.Message.ToolCalls)
				}
				conformsTo(t, mathSchema, ch.Message.Content)
				if acc.Usage.CompletionTokens == 0 {
					t.Errorf("usage %+v", acc.Usage)
				}
			})
			t.Run("json_object", func(t *testing.T) {
				res, err := c.Chat.Completions.New(ctx, params(model, openai.ChatCompletionNewParamsResponseFormatUnion{
					OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}))
				if err != nil {
					t.Fatal(err)
				}
				// Any object; the fakes answer with the question.
				conformsTo(t, `{"type":"object","required":["answer"]}`, res.Choices[0].Message.Content)
			})
			t.Run("with tools", func(t *testing.T) {
				// The model may call a function first; the answer after the
				// result, tools declined, follows the format.
				p := params(model, strict)
				p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
				res, err := c.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				ch := res.Choices[0]
				if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.ToolCalls[0].Function.Name != "get_weather" {
					t.Fatalf("finish_reason %q, tool calls %+v; want a get_weather call", ch.FinishReason, ch.Message.ToolCalls)
				}
				p.Messages = append(p.Messages, ch.Message.ToParam(), openai.ToolMessage("sunny", ch.Message.ToolCalls[0].ID))
				p.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("none")}
				res, err = c.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if ch := res.Choices[0]; ch.FinishReason != "stop" || len(ch.Message.ToolCalls) != 0 {
					t.Errorf("finish_reason %q, tool calls %v; want stop and none", ch.FinishReason, ch.Message.ToolCalls)
				}
				conformsTo(t, mathSchema, res.Choices[0].Message.Content)
			})
			t.Run("responses text.format", func(t *testing.T) {
				r, err := c.Responses.New(ctx, responses.ResponseNewParams{
					Model: model,
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("solve 8x + 7 = -23")},
					Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
						OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "math_reasoning", Strict: openai.Bool(true), Schema: schemaMap(t)},
					}},
				})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != responses.ResponseStatusCompleted {
					t.Errorf("status %s", r.Status)
				}
				conformsTo(t, mathSchema, r.OutputText())
			})
			t.Run("responses text.format streamed", func(t *testing.T) {
				stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
					Model: model,
					Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("solve 8x + 7 = -23")},
					Text: responses.ResponseTextConfigParam{Format: responses.ResponseFormatTextConfigUnionParam{
						OfJSONSchema: &responses.ResponseFormatTextJSONSchemaConfigParam{Name: "math_reasoning", Strict: openai.Bool(true), Schema: schemaMap(t)},
					}},
				})
				var deltas strings.Builder
				var final *responses.Response
				for stream.Next() {
					switch ev := stream.Current(); ev.Type {
					case "response.output_text.delta":
						deltas.WriteString(ev.Delta)
					case "response.completed":
						r := ev.AsResponseCompleted().Response
						final = &r
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				if final == nil {
					t.Fatal("no response.completed event")
				}
				conformsTo(t, mathSchema, deltas.String())
				if final.OutputText() != deltas.String() {
					t.Errorf("output_text %q, deltas %q", final.OutputText(), deltas.String())
				}
			})
		})
	}
}
