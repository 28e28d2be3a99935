package gemini

import (
	"net/http"
	"strings"
	"testing"
)

const usageJSON = `"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15}`
const usageOut = `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`

// completion builds the expected chat.completion around choices and usage.
func completion(id, choices, usage string) string {
	return `{"id":"chatcmpl-` + id + `","object":"chat.completion","created":1700000000,"model":"client-model","choices":[` + choices + `],"usage":` + usage + `}`
}

func textChoice(index, content, finish string) string {
	return `{"index":` + index + `,"message":{"role":"assistant","content":` + content + `,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"` + finish + `"}`
}

func TestTranslateResponse(t *testing.T) {
	weatherID := string(appendCallID(nil, "r1", 0, 0, "get_weather", `{"city": "Paris"}`))
	timeID := string(appendCallID(nil, "r1", 0, 1, "get_time", `{}`))
	tests := []struct {
		name string
		body string
		want string
	}{
		{
			name: "text",
			body: `{"candidates":[{"content":{"parts":[{"text":"Hello"},{"text":", \"world\"\n"}],"role":"model"},"finishReason":"STOP","avgLogprobs":-0.1}],` + usageJSON + `,"modelVersion":"gemini-2.5-flash","responseId":"r1"}`,
			want: completion("r1", textChoice("0", `"Hello, \"world\"\n"`, "stop"), usageOut),
		},
		{
			name: "pretty-printed with thoughts left out",
			body: "{\n  \"candidates\": [\n    {\n      \"content\": {\n        \"parts\": [\n          {\n            \"text\": \"thinking...\",\n            \"thought\": true\n          },\n          {\n            \"text\": \"Answer\"\n          }\n        ],\n        \"role\": \"model\"\n      },\n      \"finishReason\": \"STOP\",\n      \"index\": 0\n    }\n  ],\n  \"usageMetadata\": {\n    \"promptTokenCount\": 10,\n    \"candidatesTokenCount\": 5,\n    \"totalTokenCount\": 35,\n    \"thoughtsTokenCount\": 20,\n    \"cachedContentTokenCount\": 4\n  },\n  \"responseId\": \"r2\"\n}\n",
			want: completion("r2", textChoice("0", `"Answer"`, "stop"),
				`{"prompt_tokens":10,"completion_tokens":25,"total_tokens":35,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":20}}`),
		},
		{
			name: "function calls",
			body: `{"candidates":[{"content":{"parts":[{"text":"Let me check."},{"functionCall":{"name":"get_weather","args":{"city": "Paris"}}},{"functionCall":{"name":"get_time"}}],"role":"model"},"finishReason":"STOP"}],` + usageJSON + `,"responseId":"r1"}`,
			want: completion("r1", `{"index":0,"message":{"role":"assistant","content":"Let me check.","refusal":null,"tool_calls":[`+
				`{"id":"`+weatherID+`","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},`+
				`{"id":"`+timeID+`","type":"function","function":{"name":"get_time","arguments":"{}"}}],"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}`, usageOut),
		},
		{
			name: "several candidates",
			body: `{"candidates":[{"content":{"parts":[{"text":"A"}],"role":"model"},"finishReason":"STOP"},{"content":{"parts":[{"text":"B"}],"role":"model"},"finishReason":"MAX_TOKENS","index":1}],` + usageJSON + `,"responseId":"r3"}`,
			want: completion("r3", textChoice("0", `"A"`, "stop")+","+textChoice("1", `"B"`, "length"), usageOut),
		},
		{
			name: "blocked prompt",
			body: `{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[]},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7},"responseId":"r4"}`,
			want: completion("r4", textChoice("0", "null", "content_filter"),
				`{"prompt_tokens":7,"completion_tokens":0,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`),
		},
		{
			name: "tool use prompt tokens",
			body: `{"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":10,"toolUsePromptTokenCount":3,"candidatesTokenCount":2,"totalTokenCount":15},"responseId":"r5"}`,
			want: completion("r5", textChoice("0", `"x"`, "stop"),
				`{"prompt_tokens":13,"completion_tokens":2,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateResponse(http.StatusOK, []byte(tt.body), "client-model")
			if err != nil {
				t.Fatalf("TranslateResponse: %v", err)
			}
			jsonEqual(t, out, tt.want)
			conforms(t, "CreateChatCompletionResponse", out)
		})
	}
}

func TestTranslateResponseFinishReasons(t *testing.T) {
	for reason, want := range map[string]string{
		"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
		"PROHIBITED_CONTENT": "content_filter", "BLOCKLIST": "content_filter", "SPII": "content_filter",
		"IMAGE_SAFETY": "content_filter", "OTHER": "stop", "LANGUAGE": "stop", "MALFORMED_FUNCTION_CALL": "stop",
		"FINISH_REASON_UNSPECIFIED": "stop", "": "stop",
	} {
		t.Run(reason, func(t *testing.T) {
			body := `{"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"},"finishReason":"` + reason + `"}],"responseId":"r"}`
			if reason == "" {
				body = `{"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"}}],"responseId":"r"}`
			}
			out, err := TranslateResponse(200, []byte(body), "client-model")
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, out, completion("r", textChoice("0", `"x"`, want),
				`{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`))
			conforms(t, "CreateChatCompletionResponse", out)
		})
	}
	// A safety stop wins over the function calls made before it.
	body := `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}}],"role":"model"},"finishReason":"SAFETY"}]}`
	out, err := TranslateResponse(200, []byte(body), "m")
	if err != nil || !strings.Contains(string(out), `"finish_reason":"content_filter"`) {
		t.Errorf("got %s, %v", out, err)
	}
}

// Without a responseId the id is derived from the body: stable, and
// different for different answers.
func TestTranslateResponseID(t *testing.T) {
	a := []byte(`{"candidates":[{"content":{"parts":[{"text":"a"}],"role":"model"},"finishReason":"STOP"}]}`)
	b := []byte(`{"candidates":[{"content":{"parts":[{"text":"b"}],"role":"model"},"finishReason":"STOP"}]}`)
	id := func(body []byte) string {
		out, err := TranslateResponse(200, body, "m")
		if err != nil {
			t.Fatal(err)
		}
		conforms(t, "CreateChatCompletionResponse", out)
		s := string(out)
		return s[:strings.Index(s, `","object"`)]
	}
	// The same reply translated twice gets the same id; another reply another.
	first, again, other := id(a), id(a), id(b)
	if first != again || first == other || !strings.HasPrefix(first, `{"id":"chatcmpl-`) {
		t.Errorf("ids %s, %s, %s", first, again, other)
	}
}

func TestTranslateResponseErrors(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		wantStatus int
		typ        string
		code       string
		param      string
		message    string // substring
		retryAfter int
	}{
		{
			name: "invalid argument", status: 400,
			body:       `{"error":{"code":400,"message":"* GenerateContentRequest.contents: contents is not specified","status":"INVALID_ARGUMENT"}}`,
			wantStatus: 400, typ: "invalid_request_error", code: "invalid_argument", message: "contents is not specified",
		},
		{
			name: "failed precondition", status: 400,
			body:       `{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`,
			wantStatus: 400, typ: "invalid_request_error", code: "failed_precondition", message: "User location",
		},
		{
			name: "bad key", status: 400,
			body:       `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`,
			wantStatus: 502, typ: "server_error", code: "upstream_authentication_failed", message: "gateway's credentials",
		},
		{
			name: "permission denied", status: 403,
			body:       `{"error":{"code":403,"message":"Permission denied: Consumer 'api_key:AIzaSECRET' has been suspended.","status":"PERMISSION_DENIED"}}`,
			wantStatus: 502, typ: "server_error", code: "upstream_authentication_failed", message: "gateway's credentials",
		},
		{
			name: "unauthenticated", status: 401,
			body:       `{"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}`,
			wantStatus: 502, typ: "server_error", code: "upstream_authentication_failed", message: "gateway's credentials",
		},
		{
			name: "rate limit with retry info", status: 429,
			body: `{"error":{"code":429,"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED","details":[` +
				`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},` +
				`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"36.5s"}]}}`,
			wantStatus: 429, typ: "requests", code: "rate_limit_exceeded", message: "exceeded", retryAfter: 37,
		},
		{
			name: "token quota", status: 429,
			body: `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED","details":[` +
				`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"x"}]}]}}`,
			wantStatus: 429, typ: "tokens", code: "rate_limit_exceeded", message: "quota",
		},
		{
			name: "model not found", status: 404,
			body:       `{"error":{"code":404,"message":"models/gemini-9 is not found for API version v1beta, or is not supported for generateContent.","status":"NOT_FOUND"}}`,
			wantStatus: 404, typ: "invalid_request_error", code: "model_not_found", param: "model", message: "`client-model`",
		},
		{
			name: "other not found", status: 404,
			body:       `{"error":{"code":404,"message":"File abc is not found.","status":"NOT_FOUND"}}`,
			wantStatus: 404, typ: "invalid_request_error", code: "not_found", message: "File abc",
		},
		{
			name: "overloaded", status: 503,
			body:       `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`,
			wantStatus: 503, typ: "server_error", code: "unavailable", message: "overloaded",
		},
		{
			name: "internal", status: 500,
			body:       `{"error":{"code":500,"message":"An internal error has occurred.","status":"INTERNAL"}}`,
			wantStatus: 500, typ: "server_error", code: "internal", message: "internal error",
		},
		{
			name: "deadline", status: 504,
			body:       `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`,
			wantStatus: 504, typ: "server_error", code: "deadline_exceeded", message: "Deadline",
		},
		{
			name: "no status name", status: 500,
			body:       `{"error":{"code":500,"message":"boom"}}`,
			wantStatus: 500, typ: "server_error", code: "internal", message: "boom",
		},
		{
			name: "not Gemini's shape", status: 502,
			body:       `<html>Bad Gateway</html>`,
			wantStatus: 502, typ: "server_error", code: "upstream_error", message: "HTTP status 502",
		},
		{
			name: "malformed success", status: 200,
			body:       `{"candidates":`,
			wantStatus: 502, typ: "server_error", code: "upstream_invalid_response", message: "malformed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateResponse(tt.status, []byte(tt.body), "client-model")
			if err == nil {
				t.Fatalf("no error; output %s", out)
			}
			e := asAPIError(t, err)
			if string(out) != string(e.JSON()) {
				t.Errorf("body %s is not the error's JSON %s", out, e.JSON())
			}
			conforms(t, "ErrorResponse", out)
			var b struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    *string `json:"code"`
				} `json:"error"`
			}
			decode(t, out, &b)
			if e.Status != tt.wantStatus || b.Error.Type != tt.typ || deref(b.Error.Code) != tt.code || deref(b.Error.Param) != tt.param {
				t.Errorf("got %d type %q code %q param %q, want %d %q %q %q; body %s",
					e.Status, b.Error.Type, deref(b.Error.Code), deref(b.Error.Param), tt.wantStatus, tt.typ, tt.code, tt.param, out)
			}
			if !strings.Contains(b.Error.Message, tt.message) {
				t.Errorf("message %q lacks %q", b.Error.Message, tt.message)
			}
			if strings.Contains(string(out), "SECRET") {
				t.Errorf("upstream message leaked: %s", out)
			}
			if e.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %d, want %d", e.RetryAfter, tt.retryAfter)
			}
			if tt.retryAfter > 0 && e.Headers()["retry-after"] == "" {
				t.Errorf("no retry-after header: %v", e.Headers())
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Candidates with more parts than the translation keeps at hand are walked
// again, with the same result.
func TestTranslateResponseManyParts(t *testing.T) {
	var parts []string
	var want strings.Builder
	for i := range 12 {
		w := "w" + strings.Repeat("x", i)
		parts = append(parts, `{"text":"`+w+`"}`, `{"text":"hidden","thought":true}`)
		want.WriteString(w)
	}
	var calls []string
	for i := range 6 {
		calls = append(calls, `{"functionCall":{"name":"f`+string(rune('a'+i))+`","args":{"i":`+string(rune('0'+i))+`}}}`)
	}
	body := `{"candidates":[{"content":{"parts":[` + strings.Join(parts, ",") + `,` + strings.Join(calls, ",") + `],"role":"model"},"finishReason":"STOP"}],"responseId":"many"}`

	out, err := TranslateResponse(200, []byte(body), "client-model")
	if err != nil {
		t.Fatal(err)
	}
	conforms(t, "CreateChatCompletionResponse", out)
	s := summarize(t, out)
	c := s.Choices[0]
	if *c.Message.Content != want.String() || len(c.Message.ToolCalls) != 6 || c.FinishReason != "tool_calls" {
		t.Fatalf("got %s", out)
	}
	for i, tc := range c.Message.ToolCalls {
		if tc.Function.Name != "f"+string(rune('a'+i)) || tc.Function.Arguments != `{"i":`+string(rune('0'+i))+`}` {
			t.Errorf("call %d: %+v", i, tc)
		}
	}

	stream := translateAll(t, "data: "+body+"\n\n", "")
	checkChunks(t, stream)
	acc := accumulate(t, stream)
	ac := acc.Choices[0]
	if ac.Message.Content != want.String() || len(ac.Message.ToolCalls) != 6 || ac.FinishReason != "tool_calls" {
		t.Fatalf("stream got %+v", ac)
	}
	var ids struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID string `json:"id"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	decode(t, out, &ids)
	for i, tc := range ac.Message.ToolCalls {
		if tc.ID != ids.Choices[0].Message.ToolCalls[i].ID || tc.Function.Name != c.Message.ToolCalls[i].Function.Name {
			t.Errorf("stream call %d: %+v", i, tc)
		}
	}
}
