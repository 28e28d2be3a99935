package anthropic

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard-ai/switchyard/extproc/translate"
)

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"array","items":{"type":"integer"}}},"required":["city","days"],"additionalProperties":false}`

const clientTool = `{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}`

func TestTranslateRequestStructured(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]`
	const head = `{"model":"claude-up","max_tokens":4096,` + msgs
	const jsonTool = `{"name":"json_response","description":"Respond to the user by calling this tool: its input is your whole answer, as a JSON value following the schema.","input_schema":`
	const forced = `"tool_choice":{"type":"tool","name":"json_response","disable_parallel_tool_use":true}`
	tests := []struct {
		name string
		in   string
		opts Options
		want string
	}{
		{
			name: "json_schema becomes a forced tool",
			in:   `,"response_format":{"type":"json_schema","json_schema":{"name":"weather","strict":true,"schema":` + weatherSchema + `}}`,
			want: head + `,"tools":[` + jsonTool + weatherSchema + `}],` + forced + `}`,
		},
		{
			name: "json_schema description describes the tool",
			in:   `,"response_format":{"type":"json_schema","json_schema":{"name":"w","description":"The forecast.","schema":` + weatherSchema + `}}`,
			want: head + `,"tools":[{"name":"json_response","description":"The forecast.","input_schema":` + weatherSchema + `}],` + forced + `}`,
		},
		{
			name: "json_schema without a type gets object",
			in:   `,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"properties":{"a":{"type":"string"}}}}}`,
			want: head + `,"tools":[` + jsonTool + `{"type":"object","properties":{"a":{"type":"string"}}}}],` + forced + `}`,
		},
		{
			name: "json_schema without a schema is JSON mode",
			in:   `,"response_format":{"type":"json_schema","json_schema":{"name":"w"}}`,
			want: head + `,"tools":[` + jsonTool + `{"type":"object","additionalProperties":true}}],` + forced + `}`,
		},
		{
			name: "json_object is any object",
			in:   `,"response_format":{"type":"json_object"}`,
			want: head + `,"tools":[` + jsonTool + `{"type":"object","additionalProperties":true}}],` + forced + `}`,
		},
		{
			name: "text is plain",
			in:   `,"response_format":{"type":"text"}`,
			want: head + `}`,
		},
		{
			name: "client tools: any tool, the answer among them",
			in:   `,"response_format":{"type":"json_object"},"tools":[` + clientTool + `],"parallel_tool_calls":false`,
			want: head + `,"tools":[{"name":"get_time","input_schema":{"type":"object","properties":{}}},` + jsonTool +
				`{"type":"object","additionalProperties":true}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}`,
		},
		{
			name: "client tools with tool_choice none: the answer forced",
			in:   `,"response_format":{"type":"json_object"},"tools":[` + clientTool + `],"tool_choice":"none"`,
			want: head + `,"tools":[{"name":"get_time","input_schema":{"type":"object","properties":{}}},` + jsonTool +
				`{"type":"object","additionalProperties":true}}],` + forced + `}`,
		},
		{
			name: "a named function stays forced",
			in:   `,"response_format":{"type":"json_object"},"tools":[` + clientTool + `],"tool_choice":{"type":"function","function":{"name":"get_time"}}`,
			want: head + `,"tools":[{"name":"get_time","input_schema":{"type":"object","properties":{}}},` + jsonTool +
				`{"type":"object","additionalProperties":true}}],"tool_choice":{"type":"tool","name":"get_time"}}`,
		},
		{
			name: "a root that is not an object dropped",
			in:   `,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"array"}}}`,
			opts: Options{DropUnsupported: true},
			want: head + `}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts = tt.opts
			opts.NoCacheControl = true
			body := `{"model":"m",` + userHi + tt.in + `}`
			got, err := TranslateRequest([]byte(body), "claude-up", opts)
			if err != nil {
				t.Fatalf("TranslateRequest: %v", err)
			}
			jsonEqual(t, got, tt.want)
		})
	}

	t.Run("reserved tool name", func(t *testing.T) {
		body := `{"model":"m",` + userHi + `,"response_format":{"type":"json_object"},"tools":[{"type":"function","function":{"name":"json_response"}}]}`
		_, err := TranslateRequest([]byte(body), "claude-up", Options{})
		wantAPIError(t, err, http.StatusBadRequest, "invalid_value", "tools[0].function.name")
		// Without response_format it is an ordinary name.
		body = `{"model":"m",` + userHi + `,"tools":[{"type":"function","function":{"name":"json_response"}}]}`
		if _, err := TranslateRequest([]byte(body), "claude-up", Options{}); err != nil {
			t.Errorf("without response_format: %v", err)
		}
	})
}

func TestTranslateChatReplyMarks(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want bool
	}{
		{`,"response_format":{"type":"json_object"}`, true},
		{`,"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":` + weatherSchema + `}}`, true},
		{`,"response_format":{"type":"text"}`, false},
		{``, false},
	} {
		body := `{"model":"m",` + userHi + tt.in + `}`
		_, r, err := translateForTest(body)
		if err != nil || r.Structured != tt.want {
			t.Errorf("%s: Structured %v, err %v; want %v", tt.in, r.Structured, err, tt.want)
		}
	}
}

func TestTranslateResponseStructured(t *testing.T) {
	answer := msgPrefix + `"content":[{"type":"tool_use","id":"toolu_01A","name":"json_response","input":{"city":"Paris","days":[1,2]}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":40}}`
	t.Run("the answer is the content", func(t *testing.T) {
		out, err := Reply{Structured: true}.Translate(http.StatusOK, []byte(answer), "client-model")
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, completion(t, out), `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
			"message":{"role":"assistant","content":"{\"city\":\"Paris\",\"days\":[1,2]}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],
			"usage":{"prompt_tokens":30,"completion_tokens":40,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":0}}}`)
	})
	t.Run("unmarked: a tool call", func(t *testing.T) {
		out, err := TranslateResponse(http.StatusOK, []byte(answer), "client-model")
		if err != nil {
			t.Fatal(err)
		}
		var c struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
				Message      struct {
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(out, &c); err != nil || c.Choices[0].FinishReason != "tool_calls" || len(c.Choices[0].Message.ToolCalls) != 1 {
			t.Errorf("got %s (err %v), want a tool call", out, err)
		}
	})
	t.Run("with a client's call", func(t *testing.T) {
		in := msgPrefix + `"content":[{"type":"tool_use","id":"toolu_01B","name":"get_time","input":{}}],` +
			`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":40}}`
		out, err := Reply{Structured: true}.Translate(http.StatusOK, []byte(in), "client-model")
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, completion(t, out), `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
			"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[
				{"id":"toolu_01B","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":30,"completion_tokens":40,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":0}}}`)
	})
	t.Run("cut short", func(t *testing.T) {
		in := msgPrefix + `"content":[{"type":"tool_use","id":"toolu_01A","name":"json_response","input":{}}],` +
			`"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":40}}`
		out, err := Reply{Structured: true}.Translate(http.StatusOK, []byte(in), "client-model")
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, completion(t, out), `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
			"message":{"role":"assistant","content":"{}","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"length"}],
			"usage":{"prompt_tokens":30,"completion_tokens":40,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":0}}}`)
	})
}

func TestStreamStructuredAccumulates(t *testing.T) {
	in, err := readTestdata("structured.sse")
	if err != nil {
		t.Fatal(err)
	}
	out, err := translateReply(Reply{Structured: true}, in)
	if err != nil {
		t.Fatal(err)
	}
	c := accumulate(t, out).Choices[0]
	var v map[string]any
	if err := json.Unmarshal([]byte(c.Message.Content), &v); err != nil || v["city"] != "Paris" {
		t.Errorf("content %q (err %v), want the JSON answer", c.Message.Content, err)
	}
	if c.FinishReason != "stop" || len(c.Message.ToolCalls) != 0 {
		t.Errorf("finish_reason %q, %d tool calls; want stop and none", c.FinishReason, len(c.Message.ToolCalls))
	}
}

func translateForTest(body string) ([]byte, Reply, error) {
	var f translate.ChatRequest
	if !f.Parse([]byte(body)) {
		return nil, Reply{}, errors.New("not JSON")
	}
	return TranslateChatReply(&f, len(body), "claude-up", Options{})
}

func readTestdata(name string) ([]byte, error) { return os.ReadFile(filepath.Join("testdata", name)) }
