package e2e

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponseFormatTypeValidated: a response format outside the spec
// (text, json_object, json_schema) is the client's error, 400 naming
// response_format.type (text.format.type on /v1/responses), whichever kind
// of vendor serves the model, and reaches no vendor.
func TestResponseFormatTypeValidated(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	sent := func() int {
		n := 0
		for _, r := range vs.fakes {
			n += len(r.all())
		}
		return n
	}
	before := sent()
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini", "vendor/failover"} {
		for _, tc := range []struct {
			name, code, param string
			set               option.RequestOption
		}{
			{"unknown type", "invalid_value", "response_format.type", option.WithJSONSet("response_format.type", "yaml")},
			{"type not a string", "invalid_type", "response_format.type", option.WithJSONSet("response_format.type", 5)},
			{"no type", "missing_required_parameter", "response_format.type", option.WithJSONSet("response_format", map[string]any{})},
			{"not an object", "invalid_type", "response_format", option.WithJSONSet("response_format", "json")},
		} {
			t.Run(model+"/chat/"+tc.name, func(t *testing.T) {
				p := chatParamsFor(model, "hi")
				p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}
				_, err := c.Chat.Completions.New(ctx, p, tc.set)
				if e := apiError(t, err, 400, tc.code); e != nil && e.Param != tc.param {
					t.Errorf("param %q, want %q (%s)", e.Param, tc.param, e.Message)
				}
				s := c.Chat.Completions.NewStreaming(ctx, p, tc.set)
				for s.Next() {
				}
				if e := apiError(t, s.Err(), 400, tc.code); e != nil && e.Param != tc.param {
					t.Errorf("streaming: param %q, want %q (%s)", e.Param, tc.param, e.Message)
				}
			})
		}
		if model == "vendor/failover" {
			continue
		}
		t.Run(model+"/responses", func(t *testing.T) {
			_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: model,
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}},
				option.WithJSONSet("text", map[string]any{"format": map[string]any{"type": "yaml"}}))
			if e := apiError(t, err, 400, "invalid_value"); e != nil && e.Param != "text.format.type" {
				t.Errorf("param %q (%s)", e.Param, e.Message)
			}
		})
	}
	if n := sent() - before; n != 0 {
		t.Errorf("%d invalid requests reached a vendor", n)
	}
}
