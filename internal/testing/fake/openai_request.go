package fake

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// chatRequest holds the parts of a chat completion request the fake reacts
// to; everything else is accepted and ignored, as a permissive upstream would.
type chatRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	N                   *int            `json:"n"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools          []chatTool      `json:"tools"`
	ToolChoice     json.RawMessage `json:"tool_choice"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`

	// Derived by parseChatRequest.
	n        int
	maxWords int // -1: unlimited
	stops    []string
	tool     *chatFunction // the function to call, nil to answer in text
	// jsonOut: answer in JSON (response_format json_object or json_schema,
	// or the vendors' equivalents), following schema when it is set.
	jsonOut bool
	schema  json.RawMessage
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"` // string, array of parts, or null
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters"` // a JSON Schema
}

// maxChoices is OpenAI's limit on n.
const maxChoices = 128

// parseChatRequest decodes and checks body, returning the OpenAI error a real
// upstream would give for the same mistake.
func parseChatRequest(body []byte) (*chatRequest, *apierror.Error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return nil, apierror.InvalidParam(typeErr.Field, "Invalid type for '%s': expected %s, but got %s.",
				typeErr.Field, typeErr.Type, typeErr.Value)
		}
		return nil, apierror.InvalidJSON()
	}
	if req.Model == "" {
		return nil, apierror.MissingParam("model")
	}
	if req.Messages == nil {
		return nil, apierror.MissingParam("messages")
	}
	if len(req.Messages) == 0 {
		return nil, apierror.InvalidParam("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}

	req.n = 1
	if req.N != nil {
		if *req.N < 1 || *req.N > maxChoices {
			return nil, apierror.InvalidParam("n", "Invalid 'n': integer out of range. Expected a value between 1 and %d, but got %d instead.", maxChoices, *req.N)
		}
		req.n = *req.N
	}

	req.maxWords = -1
	for _, p := range []struct {
		name string
		v    *int
	}{{"max_tokens", req.MaxTokens}, {"max_completion_tokens", req.MaxCompletionTokens}} {
		if p.v == nil {
			continue
		}
		if *p.v < 1 {
			return nil, apierror.InvalidParam(p.name, "Invalid '%s': integer below minimum value. Expected a value >= 1, but got %d instead.", p.name, *p.v)
		}
		if req.maxWords < 0 || *p.v < req.maxWords {
			req.maxWords = *p.v
		}
	}

	stops, ok := parseStop(req.Stop)
	if !ok {
		return nil, apierror.InvalidParam("stop", "Invalid 'stop': expected a string or an array of up to 4 strings.")
	}
	req.stops = stops

	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			req.jsonOut = true
		case "json_schema":
			if rf.JSONSchema == nil {
				return nil, apierror.MissingParam("response_format.json_schema")
			}
			req.jsonOut, req.schema = true, rf.JSONSchema.Schema
		default:
			return nil, apierror.InvalidParam("response_format.type", "Invalid value: '%s'. Supported values are: 'text', 'json_object' and 'json_schema'.", rf.Type)
		}
	}

	tool, aerr := chooseTool(&req)
	if aerr != nil {
		return nil, aerr
	}
	req.tool = tool
	return &req, nil
}

// parseStop accepts null, a string, or an array of up to 4 strings. Empty
// strings are dropped: they would otherwise match at offset 0.
func parseStop(raw json.RawMessage) ([]string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var list []string
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		list = []string{s}
	} else if json.Unmarshal(raw, &list) != nil || len(list) > 4 {
		return nil, false
	}
	stops := list[:0]
	for _, s := range list {
		if s != "" {
			stops = append(stops, s)
		}
	}
	return stops, true
}

// chooseTool decides whether the reply is a tool call and to which function:
// only when there are function tools, tool_choice is not "none", and the
// conversation does not end with a tool result (which is answered in text)
// unless tool_choice names the function, which forces the call whatever came
// before (as the gateway's structured output through Anthropic relies on).
func chooseTool(req *chatRequest) (*chatFunction, *apierror.Error) {
	var funcs []*chatFunction
	for i := range req.Tools {
		if req.Tools[i].Type == "function" {
			funcs = append(funcs, &req.Tools[i].Function)
		}
	}

	choice := bytes.TrimSpace(req.ToolChoice)
	var named string
	if len(choice) > 0 && choice[0] == '{' {
		var c struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if json.Unmarshal(choice, &c) != nil {
			return nil, apierror.InvalidParam("tool_choice", "Invalid 'tool_choice': expected a string or an object.")
		}
		// Other object forms (allowed_tools, custom) behave like "auto".
		if c.Type == "function" {
			named = c.Function.Name
			found := false
			for _, f := range funcs {
				found = found || f.Name == named
			}
			if !found {
				return nil, apierror.InvalidParam("tool_choice", "Invalid 'tool_choice': function '%s' is not among the request's tools.", named)
			}
		}
	} else if len(choice) > 0 && string(choice) != "null" {
		var s string
		if json.Unmarshal(choice, &s) != nil {
			return nil, apierror.InvalidParam("tool_choice", "Invalid 'tool_choice': expected a string or an object.")
		}
		if s == "none" {
			return nil, nil
		}
	}

	if len(funcs) == 0 || (named == "" && req.Messages[len(req.Messages)-1].Role == "tool") {
		return nil, nil
	}
	for _, f := range funcs {
		if named == "" || f.Name == named {
			return f, nil
		}
	}
	return nil, nil // unreachable: named was checked above
}

// text returns a message's text: the string content, or the text parts of an
// array content joined by newlines. Other parts (images, audio) and null
// content contribute nothing.
func (m *chatMessage) text() string {
	raw := bytes.TrimSpace(m.Content)
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	case '[':
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(raw, &parts)
		var texts []string
		for _, p := range parts {
			if p.Type == "text" {
				texts = append(texts, p.Text)
			}
		}
		return strings.Join(texts, "\n")
	}
	return ""
}
