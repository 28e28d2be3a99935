package anthropic

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// completion decodes a translated chat.completion, checks it against the
// schema and the fields every response must have, and returns it with
// "created" removed for comparison.
func completion(t *testing.T, out []byte) []byte {
	t.Helper()
	conforms(t, "CreateChatCompletionResponse", out)
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, out)
	}
	created, ok := m["created"].(float64)
	if now := float64(time.Now().Unix()); !ok || created < now-60 || created > now+60 {
		t.Errorf("created = %v, want about now", m["created"])
	}
	delete(m, "created")
	b, _ := json.Marshal(m)
	return b
}

const msgPrefix = `{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5",`

func TestTranslateResponse(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{
			name: "text",
			in:   msgPrefix + `"content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":6}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":"Hello!","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],
				"usage":{"prompt_tokens":12,"completion_tokens":6,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":0}}}`,
		},
		{
			name: "text blocks joined, thinking left out, escapes kept",
			in: msgPrefix + `"content":[{"type":"thinking","thinking":"hmm","signature":"sig"},{"type":"text","text":"One \"quoted\"\n"},
				{"type":"text","text":"two \u00e9.","citations":[]}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":2}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":"One \"quoted\"\ntwo é.","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],
				"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}`,
		},
		{
			name: "text and tool uses",
			in: msgPrefix + `"content":[{"type":"text","text":"Let me check."},
				{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"Paris","days":[1,2]}},
				{"type":"tool_use","id":"toolu_01B","name":"get_time","input":{}}],
				"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":40}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":"Let me check.","refusal":null,"annotations":[],"tool_calls":[
					{"id":"toolu_01A","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"days\":[1,2]}"}},
					{"id":"toolu_01B","type":"function","function":{"name":"get_time","arguments":"{}"}}]},
				"logprobs":null,"finish_reason":"tool_calls"}],
				"usage":{"prompt_tokens":30,"completion_tokens":40,"total_tokens":70,"prompt_tokens_details":{"cached_tokens":0}}}`,
		},
		{
			name: "tool use only has null content",
			in: msgPrefix + `"content":[{"type":"tool_use","id":"toolu_01A","name":"f","input":{"a":"\u00e9\n"}}],
				"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":4}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[
					{"id":"toolu_01A","type":"function","function":{"name":"f","arguments":"{\"a\":\"\\u00e9\\n\"}"}}]},
				"logprobs":null,"finish_reason":"tool_calls"}],
				"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0}}}`,
		},
		{
			name: "empty content",
			in:   msgPrefix + `"content":[],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":"","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],
				"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}`,
		},
		{
			name: "cache tokens",
			in: msgPrefix + `"content":[{"type":"text","text":"x"}],"stop_reason":"end_turn","stop_sequence":null,
				"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":5,"service_tier":"standard"}}`,
			want: `{"id":"chatcmpl-msg_01XFDUDYJgAACzvnptvVoYEL","object":"chat.completion","model":"client-model","choices":[{"index":0,
				"message":{"role":"assistant","content":"x","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],
				"usage":{"prompt_tokens":3210,"completion_tokens":5,"total_tokens":3215,"prompt_tokens_details":{"cached_tokens":3000}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateResponse(http.StatusOK, []byte(tt.in), "client-model")
			if err != nil {
				t.Fatalf("TranslateResponse: %v", err)
			}
			jsonEqual(t, completion(t, out), tt.want)
		})
	}
}

func TestTranslateResponseStopReasons(t *testing.T) {
	for stop, want := range map[string]string{
		"end_turn":                      "stop",
		"stop_sequence":                 "stop",
		"pause_turn":                    "stop",
		"max_tokens":                    "length",
		"model_context_window_exceeded": "length",
		"tool_use":                      "tool_calls",
		"refusal":                       "content_filter",
		"something_new":                 "stop",
	} {
		t.Run(stop, func(t *testing.T) {
			in := msgPrefix + `"content":[{"type":"text","text":"x"}],"stop_reason":"` + stop + `","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`
			out, err := TranslateResponse(http.StatusOK, []byte(in), "m")
			if err != nil {
				t.Fatal(err)
			}
			completion(t, out)
			var got struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal(out, &got); err != nil || len(got.Choices) != 1 {
				t.Fatalf("decode %s: %v", out, err)
			}
			if got.Choices[0].FinishReason != want {
				t.Errorf("finish_reason = %q, want %q", got.Choices[0].FinishReason, want)
			}
		})
	}
}

func TestTranslateResponseErrors(t *testing.T) {
	tests := []struct {
		status  int
		typ     string // Anthropic error type
		wantTyp string
		code    string // "" for null
	}{
		{400, "invalid_request_error", "invalid_request_error", ""},
		{401, "authentication_error", "invalid_request_error", "invalid_api_key"},
		{402, "billing_error", "invalid_request_error", "insufficient_quota"},
		{403, "permission_error", "invalid_request_error", "permission_denied"},
		{404, "not_found_error", "invalid_request_error", "not_found"},
		{413, "request_too_large", "invalid_request_error", "request_too_large"},
		{429, "rate_limit_error", "requests", "rate_limit_exceeded"},
		{500, "api_error", "server_error", "server_error"},
		{504, "timeout_error", "server_error", "timeout"},
		{529, "overloaded_error", "server_error", "server_error"},
		{503, "brand_new_error", "server_error", "server_error"},
		{429, "", "requests", "rate_limit_exceeded"},
		{409, "conflict_error", "invalid_request_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			in := `{"type":"error","error":{"type":"` + tt.typ + `","message":"Something \"bad\" happened."},"request_id":"req_011"}`
			out, err := TranslateResponse(tt.status, []byte(in), "m")
			if err != nil {
				t.Fatal(err)
			}
			wantErrorBody(t, out, tt.wantTyp, tt.code, `Something "bad" happened.`)
		})
	}
	t.Run("not JSON", func(t *testing.T) {
		out, err := TranslateResponse(http.StatusBadGateway, []byte(`<html>Bad Gateway</html>`), "m")
		if err != nil {
			t.Fatal(err)
		}
		wantErrorBody(t, out, "server_error", "server_error", "The upstream provider answered 502 Bad Gateway.")
	})
	t.Run("empty body", func(t *testing.T) {
		out, err := TranslateResponse(http.StatusTooManyRequests, nil, "m")
		if err != nil {
			t.Fatal(err)
		}
		wantErrorBody(t, out, "requests", "rate_limit_exceeded", "The upstream provider answered 429 Too Many Requests.")
	})
}

// wantErrorBody checks an OpenAI error body.
func wantErrorBody(t *testing.T, out []byte, typ, code, msg string) {
	t.Helper()
	conforms(t, "ErrorResponse", out)
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(out, &e); err != nil || e.Error == nil {
		t.Fatalf("error body %s: %v", out, err)
	}
	gotCode := ""
	if e.Error.Code != nil {
		gotCode = *e.Error.Code
	}
	if e.Error.Type != typ || gotCode != code || e.Error.Message != msg || e.Error.Param != nil {
		t.Errorf("error %s, want type %q code %q message %q", out, typ, code, msg)
	}
}

func TestTranslateResponseInvalid(t *testing.T) {
	for name, in := range map[string]string{
		"not JSON":      `{"id":"msg_1","type":"message"`,
		"not a message": `{"object":"chat.completion"}`,
		"error in 200":  `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			out, err := TranslateResponse(http.StatusOK, []byte(in), "m")
			if out != nil {
				t.Errorf("output %s, want none", out)
			}
			code := "bad_upstream_response"
			if name == "error in 200" {
				code = "server_error"
			}
			wantAPIError(t, err, http.StatusBadGateway, code, "")
		})
	}
}
