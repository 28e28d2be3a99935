package anthropic

import (
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/extproc/translate"
)

// StructuredTool is the tool a request for structured output is answered
// through. Anthropic's Messages API (version 2023-06-01, without betas) has
// no response format, but a tool the model is made to call gets an input
// that follows the tool's input_schema: the schema becomes that tool's, and
// the input it is called with becomes the answer's content. A client's own
// function of this name is refused while response_format asks for JSON.
const StructuredTool = "json_response"

// anyObject is the schema of response_format json_object: any JSON object.
const anyObject = `{"type":"object","additionalProperties":true}`

// defaultStructuredDesc tells the model what the tool is for when the
// client's json_schema has no description.
const defaultStructuredDesc = `"Respond to the user by calling this tool: its input is your whole answer, as a JSON value following the schema."`

// structuredOutput reads response_format: json_object and json_schema set
// t.structured to the schema StructuredTool is given. A json_schema whose
// root is not an object is refused (Anthropic's input_schema must be one;
// OpenAI's strict mode wants one too) unless Options.DropUnsupported, which
// drops it.
func (t *translator) structuredOutput(f *translate.ChatRequest) error {
	rf := f.ResponseFormat
	if !rf.IsObject() {
		return nil
	}
	t.structuredDesc = defaultStructuredDesc
	switch rf.Get("type").Str {
	case "json_object":
		t.structured = anyObject
	case "json_schema":
		js := rf.Get("json_schema")
		if d := js.Get("description"); d.Type == gjson.String && d.Raw != `""` {
			t.structuredDesc = d.Raw
		}
		schema := js.Get("schema")
		if !schema.IsObject() || !nonEmpty(schema) {
			t.structured = anyObject // no schema: JSON mode, as OpenAI does
			return nil
		}
		if typ := schema.Get("type"); typ.Exists() && typ.Str != "object" {
			if e := t.refuse(unsupportedValue("response_format.json_schema.schema",
				"the schema's root must be of type 'object' for this model's provider (Anthropic); got %s.", typ.Raw)); e != nil {
				return e
			}
			return nil
		}
		t.structured = string(appendSchema(nil, schema))
	}
	return nil
}

// appendStructuredChoice appends the tool_choice of a request for
// structured output; clientTools is how many of the client's tools were
// sent before StructuredTool.
//
// Without client tools (or with tool_choice "none", when they stay only for
// earlier turns' tool_use blocks) StructuredTool is forced. With them, and
// tool_choice absent, "auto" or "required", the choice is "any": the model
// either calls one of the client's functions or answers through
// StructuredTool, which is as close as Anthropic gets to OpenAI's "call a
// tool or answer in the format". A named function stays forced: that turn
// is a tool call either way.
func (t *translator) appendStructuredChoice(out []byte, f *translate.ChatRequest, clientTools int) ([]byte, error) {
	forced := clientTools == 0
	name := ""
	switch tc := f.ToolChoice; {
	case tc.Type == gjson.String && tc.Str == "none":
		forced = true
	case tc.IsObject() && tc.Get("type").Str == "function" && clientTools > 0:
		// appendToolChoice checks the name and the parallel flag.
		return t.appendToolChoice(out, f)
	case tc.IsObject() && tc.Get("type").Str != "function":
		if e := t.refuse(unsupportedValue("tool_choice",
			"'tool_choice' of type '%s' is not supported by this model's provider (Anthropic).", tc.Get("type").Str)); e != nil {
			return nil, e
		}
	}
	if forced {
		name = `"` + StructuredTool + `"`
	}
	out = append(out, `,"tool_choice":{"type":"`...)
	if forced {
		// One call: two answers would not make one JSON value.
		out = append(out, `tool","name":`...)
		out = append(out, name...)
		out = append(out, `,"disable_parallel_tool_use":true`...)
	} else {
		out = append(out, `any"`...)
		if f.ParallelToolCalls.Type == gjson.False {
			out = append(out, `,"disable_parallel_tool_use":true`...)
		}
	}
	return append(out, '}'), nil
}

// Reply says how the reply to a translated request is translated back.
// The zero Reply is right for every request TranslateChatReply did not
// mark otherwise.
type Reply struct {
	// Structured: the request asked for structured output, sent as
	// StructuredTool. Its tool_use input becomes the message content (a
	// JSON string) rather than a tool call, and the reply finishes "stop"
	// unless the model also called a client's function.
	Structured bool
}

// isStructured reports whether a tool_use block of this name carries the
// structured answer.
func (r Reply) isStructured(name gjson.Result) bool {
	return r.Structured && name.Type == gjson.String && name.Str == StructuredTool
}
