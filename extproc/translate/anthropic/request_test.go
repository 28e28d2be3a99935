package anthropic

import (
	"net/http"
	"strings"
	"testing"
)

const userHi = `"messages":[{"role":"user","content":"hi"}]`

// minimal is what every request below translates to when all its extra
// parameters are dropped.
const minimal = `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`

func TestTranslateRequest(t *testing.T) {
	tests := []struct {
		name string
		in   string
		opts Options
		want string
	}{
		{
			name: "minimal",
			in:   `{"model":"gpt-client",` + userHi + `}`,
			want: minimal,
		},
		{
			name: "default max tokens from options",
			in:   `{"model":"m",` + userHi + `}`,
			opts: Options{DefaultMaxTokens: 1000},
			want: `{"model":"claude-up","max_tokens":1000,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "max_tokens",
			in:   `{"model":"m","max_tokens":77,` + userHi + `}`,
			opts: Options{DefaultMaxTokens: 1000},
			want: `{"model":"claude-up","max_tokens":77,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "max_completion_tokens wins",
			in:   `{"model":"m","max_tokens":77,"max_completion_tokens":55,` + userHi + `}`,
			want: `{"model":"claude-up","max_tokens":55,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "system string",
			in:   `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "system and developer anywhere become text blocks",
			in: `{"model":"m","messages":[{"role":"system","content":"One."},{"role":"user","content":"hi"},
				{"role":"developer","content":[{"type":"text","text":"Two."},{"type":"text","text":""},{"type":"text","text":"Three."}]}]}`,
			want: `{"model":"claude-up","max_tokens":4096,
				"system":[{"type":"text","text":"One."},{"type":"text","text":"Two."},{"type":"text","text":"Three."}],
				"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "single system part is still a block",
			in:   `{"model":"m","messages":[{"role":"system","content":[{"type":"text","text":"Only."}]},{"role":"user","content":"hi"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"system":[{"type":"text","text":"Only."}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`,
		},
		{
			name: "escapes copied verbatim",
			in:   `{"model":"m","messages":[{"role":"user","content":"a\n\"b\" \u00e9 \ud83d\ude00 </x>"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"a\n\"b\" é 😀 </x>"}]}]}`,
		},
		{
			name: "multi-part with images",
			in: `{"model":"m","messages":[{"role":"user","content":[
				{"type":"text","text":"What is in these?"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}},
				{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg"}},
				{"type":"text","text":""}]}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[
				{"type":"text","text":"What is in these?"},
				{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
				{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"}}]}]}`,
		},
		{
			name: "escaped slashes in base64 data",
			in:   `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image\/jpeg;base64,ab\/cd+e=="}}]}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[
				{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"ab/cd+e=="}}]}]}`,
		},
		{
			name: "image/jpg normalised",
			in:   `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpg;base64,/9j/"}}]}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[
				{"type":"image","source":{"type":"base64","media_type":"image/jpeg","data":"/9j/"}}]}]}`,
		},
		{
			name: "pdf file",
			in:   `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,JVBERi0="}}]}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[
				{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]}`,
		},
		{
			name: "consecutive same-role messages merge",
			in: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","text":"b"}]},
				{"role":"assistant","content":"c"},{"role":"assistant","content":"d"},{"role":"user","content":""},{"role":"user","content":"e"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[
				{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
				{"role":"assistant","content":[{"type":"text","text":"c"},{"type":"text","text":"d"}]},
				{"role":"user","content":[{"type":"text","text":"e"}]}]}`,
		},
		{
			name: "tool calls and results",
			in: `{"model":"m","messages":[
				{"role":"user","content":"weather in Paris and Rome?"},
				{"role":"assistant","content":"Checking.","tool_calls":[
					{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
					{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":" {\"city\": \"Rome\"} "}},
					{"id":"call_3","type":"function","function":{"name":"get_time","arguments":""}}]},
				{"role":"tool","tool_call_id":"call_1","content":"sunny"},
				{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rain"},{"type":"text","text":""}]},
				{"role":"tool","tool_call_id":"call_3","content":""},
				{"role":"user","content":"and tomorrow?"},
				{"role":"assistant","content":null,"tool_calls":[{"id":"call_4","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},
				{"role":"tool","tool_call_id":"call_4","content":"snow"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[
				{"role":"user","content":[{"type":"text","text":"weather in Paris and Rome?"}]},
				{"role":"assistant","content":[{"type":"text","text":"Checking."},
					{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},
					{"type":"tool_use","id":"call_2","name":"get_weather","input":{"city":"Rome"}},
					{"type":"tool_use","id":"call_3","name":"get_time","input":{}}]},
				{"role":"user","content":[
					{"type":"tool_result","tool_use_id":"call_1","content":"sunny"},
					{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"rain"}]},
					{"type":"tool_result","tool_use_id":"call_3"},
					{"type":"text","text":"and tomorrow?"}]},
				{"role":"assistant","content":[{"type":"tool_use","id":"call_4","name":"get_weather","input":{}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_4","content":"snow"}]}]}`,
		},
		{
			name: "assistant refusal part",
			in:   `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"refusal","refusal":"No."}]},{"role":"user","content":"y"}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"x"}]},
				{"role":"assistant","content":[{"type":"text","text":"No."}]},{"role":"user","content":[{"type":"text","text":"y"}]}]}`,
		},
		{
			name: "tools",
			in: `{"model":"m",` + userHi + `,"tools":[
				{"type":"function","function":{"name":"get_weather","description":"Weather.","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
				{"type":"function","function":{"name":"ping"}},
				{"type":"function","function":{"name":"untyped","description":"","parameters":{"properties":{"a":{"type":"integer"}}}}}]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[
				{"name":"get_weather","description":"Weather.","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
				{"name":"ping","input_schema":{"type":"object","properties":{}}},
				{"name":"untyped","input_schema":{"type":"object","properties":{"a":{"type":"integer"}}}}]}`,
		},
		{
			name: "stop string",
			in:   `{"model":"m",` + userHi + `,"stop":"END"}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["END"]}`,
		},
		{
			name: "stop array",
			in:   `{"model":"m",` + userHi + `,"stop":["a","","\n\n"]}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stop_sequences":["a","\n\n"]}`,
		},
		{
			name: "stop null and empty",
			in:   `{"model":"m",` + userHi + `,"stop":[""]}`,
			want: minimal,
		},
		{
			name: "sampling, stream and user",
			in:   `{"model":"m",` + userHi + `,"temperature":0.7,"top_p":0.9,"stream":true,"stream_options":{"include_usage":true},"user":"u-42"}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
				"temperature":0.7,"top_p":0.9,"stream":true,"metadata":{"user_id":"u-42"}}`,
		},
		{
			name: "safety_identifier as user id",
			in:   `{"model":"m",` + userHi + `,"safety_identifier":"s-1","stream":false}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"metadata":{"user_id":"s-1"}}`,
		},
		{
			name: "temperature above 1 clamped when dropping",
			in:   `{"model":"m",` + userHi + `,"temperature":1.5}`,
			opts: Options{DropUnsupported: true},
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":1}`,
		},
		{
			name: "temperature 1 and 0 kept",
			in:   `{"model":"m",` + userHi + `,"temperature":1,"top_p":0}`,
			want: `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":1,"top_p":0}`,
		},
		{
			name: "best-effort and neutral parameters dropped silently",
			in: `{"model":"m",` + userHi + `,"seed":7,"service_tier":"auto","store":true,"metadata":{"k":"v"},
				"prediction":{"type":"content","content":"x"},"prompt_cache_key":"k","verbosity":"low",
				"n":1,"presence_penalty":0,"frequency_penalty":0,"logprobs":false,"top_logprobs":0,"logit_bias":{},
				"response_format":{"type":"text"},"modalities":["text"],"audio":null,"stop":null,"tools":[]}`,
			want: minimal,
		},
		{
			name: "unsupported parameters dropped",
			in: `{"model":"m",` + userHi + `,"n":3,"presence_penalty":0.5,"frequency_penalty":-1,"logprobs":true,"top_logprobs":3,
				"logit_bias":{"50256":-100},"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array"}}},"audio":{"voice":"alloy","format":"mp3"},
				"modalities":["text","audio"],"reasoning_effort":"high","web_search_options":{},
				"functions":[{"name":"f"}],"function_call":"auto"}`,
			opts: Options{DropUnsupported: true},
			want: minimal,
		},
		{
			name: "unsupported content dropped",
			in: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"},
				{"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},
				{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}},
				{"type":"file","file":{"file_id":"file-1"}}]}]}`,
			opts: Options{DropUnsupported: true},
			want: minimal,
		},
		{
			name: "custom tools dropped, leaving none",
			in:   `{"model":"m",` + userHi + `,"tools":[{"type":"custom","custom":{"name":"grammar"}}],"tool_choice":"auto"}`,
			opts: Options{DropUnsupported: true},
			want: minimal,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := TranslateRequest([]byte(tt.in), "claude-up", tt.opts)
			if err != nil {
				t.Fatalf("TranslateRequest: %v", err)
			}
			jsonEqual(t, got, tt.want)
		})
	}
}

func TestTranslateRequestToolChoice(t *testing.T) {
	const tools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}}]`
	const out = `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
		"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{}}}]`
	tests := []struct {
		name   string
		params string // after tools
		opts   Options
		want   string // after tools; "" for none
	}{
		{name: "absent"},
		{name: "auto", params: `"tool_choice":"auto"`, want: `"tool_choice":{"type":"auto"}`},
		{name: "required", params: `"tool_choice":"required"`, want: `"tool_choice":{"type":"any"}`},
		{name: "none", params: `"tool_choice":"none"`, want: `"tool_choice":{"type":"none"}`},
		{name: "named function", params: `"tool_choice":{"type":"function","function":{"name":"get_weather"}}`,
			want: `"tool_choice":{"type":"tool","name":"get_weather"}`},
		{name: "parallel false alone", params: `"parallel_tool_calls":false`,
			want: `"tool_choice":{"type":"auto","disable_parallel_tool_use":true}`},
		{name: "parallel true", params: `"parallel_tool_calls":true,"tool_choice":"auto"`, want: `"tool_choice":{"type":"auto"}`},
		{name: "required, parallel false", params: `"tool_choice":"required","parallel_tool_calls":false`,
			want: `"tool_choice":{"type":"any","disable_parallel_tool_use":true}`},
		{name: "named, parallel false", params: `"parallel_tool_calls":false,"tool_choice":{"type":"function","function":{"name":"get_weather"}}`,
			want: `"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true}`},
		{name: "none, parallel false", params: `"tool_choice":"none","parallel_tool_calls":false`, want: `"tool_choice":{"type":"none"}`},
		{name: "allowed_tools dropped to auto", params: `"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}`,
			opts: Options{DropUnsupported: true}, want: `"tool_choice":{"type":"auto"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"model":"m",` + userHi + `,` + tools
			if tt.params != "" {
				in += `,` + tt.params
			}
			want := out
			if tt.want != "" {
				want += `,` + tt.want
			}
			got, err := TranslateRequest([]byte(in+`}`), "claude-up", tt.opts)
			if err != nil {
				t.Fatalf("TranslateRequest: %v", err)
			}
			jsonEqual(t, got, want+`}`)
		})
	}
	t.Run("tool_choice without tools", func(t *testing.T) {
		got, err := TranslateRequest([]byte(`{"model":"m",`+userHi+`,"tool_choice":"required"}`), "claude-up", Options{})
		if err != nil {
			t.Fatal(err)
		}
		jsonEqual(t, got, minimal)
	})
}

func TestTranslateRequestErrors(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		code  string
		param string
	}{
		// Unsupported parameters: refused unless Options.DropUnsupported.
		{"n", `,"n":2`, "unsupported_value", "n"},
		{"presence_penalty", `,"presence_penalty":0.5`, "unsupported_parameter", "presence_penalty"},
		{"frequency_penalty", `,"frequency_penalty":-0.1`, "unsupported_parameter", "frequency_penalty"},
		{"logprobs", `,"logprobs":true`, "unsupported_parameter", "logprobs"},
		{"top_logprobs", `,"top_logprobs":5`, "unsupported_parameter", "top_logprobs"},
		{"logit_bias", `,"logit_bias":{"1":1}`, "unsupported_parameter", "logit_bias"},
		{"json_schema root not an object", `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"array","items":{}}}}`,
			"unsupported_value", "response_format.json_schema.schema"},
		{"audio", `,"audio":{"voice":"alloy","format":"wav"}`, "unsupported_parameter", "audio"},
		{"modalities", `,"modalities":["text","audio"]`, "unsupported_value", "modalities"},
		{"reasoning_effort", `,"reasoning_effort":"low"`, "unsupported_parameter", "reasoning_effort"},
		{"web_search_options", `,"web_search_options":{}`, "unsupported_parameter", "web_search_options"},
		{"functions", `,"functions":[{"name":"f"}]`, "unsupported_parameter", "functions"},
		{"function_call", `,"function_call":"none"`, "unsupported_parameter", "function_call"},
		{"temperature", `,"temperature":1.2`, "unsupported_value", "temperature"},
		{"custom tool", `,"tools":[{"type":"custom","custom":{"name":"g"}}]`, "unsupported_value", "tools[0].type"},
		{"allowed_tools", `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}`,
			"unsupported_value", "tool_choice"},
		// Content Anthropic cannot take.
		{"input_audio", `,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"input_audio","input_audio":{"data":"AA==","format":"wav"}}]}]`,
			"unsupported_value", "messages[0].content[1].type"},
		{"file id", `,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"file","file":{"file_id":"file-1"}}]}]`,
			"unsupported_value", "messages[0].content[1].file"},
		{"image type", `,"messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"data:image/bmp;base64,Qk0="}}]}]`,
			"unsupported_value", "messages[0].content[1].image_url.url"},
		{"function role", `,"messages":[{"role":"user","content":"x"},{"role":"function","name":"f","content":"y"}]`,
			"unsupported_value", "messages[1].role"},
		{"assistant function_call", `,"messages":[{"role":"assistant","content":"x","function_call":{"name":"f","arguments":"{}"}}]`,
			"unsupported_parameter", "messages[0].function_call"},
		// Invalid whatever the options.
		{"data URL not base64", `,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]`,
			"invalid_value", "messages[0].content[0].image_url.url"},
		{"image scheme", `,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]`,
			"invalid_value", "messages[0].content[0].image_url.url"},
		{"arguments not an object", `,"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]`,
			"invalid_value", "messages[0].tool_calls[0].function.arguments"},
		{"arguments not JSON", `,"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]`,
			"invalid_value", "messages[0].tool_calls[0].function.arguments"},
		{"tool without call id", `,"messages":[{"role":"tool","content":"x"}]`, "missing_required_parameter", "messages[0].tool_call_id"},
		{"unknown role", `,"messages":[{"role":"robot","content":"x"}]`, "invalid_value", "messages[0].role"},
		{"only system", `,"messages":[{"role":"system","content":"x"}]`, "invalid_value", "messages"},
		{"only empty content", `,"messages":[{"role":"user","content":""},{"role":"assistant","content":[]}]`, "invalid_value", "messages"},
		{"bad tool_choice", `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"sometimes"`, "invalid_value", "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := `{"model":"m"` + tt.in
			if !strings.Contains(tt.in, `"messages"`) {
				in += `,` + userHi
			}
			in += `}`
			_, err := TranslateRequest([]byte(in), "claude-up", Options{})
			wantAPIError(t, err, http.StatusBadRequest, tt.code, tt.param)

			// Refusals of unsupported things give way to dropping them.
			if strings.HasPrefix(tt.code, "unsupported_") {
				if _, err := TranslateRequest([]byte(in), "claude-up", Options{DropUnsupported: true}); err != nil {
					t.Errorf("with DropUnsupported: %v", err)
				}
			}
		})
	}
	t.Run("not an object", func(t *testing.T) {
		_, err := TranslateRequest([]byte(`[1]`), "claude-up", Options{})
		wantAPIError(t, err, http.StatusBadRequest, "invalid_json", "")
	})
}

func TestTranslateRequestModelEscaped(t *testing.T) {
	got, err := TranslateRequest([]byte(`{"model":"m",`+userHi+`}`), "we\"ird\x01", Options{})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, got, `{"model":"we\"ird\u0001","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`)
}

// TestTranslateRequestLargeImage checks a multi-megabyte image is carried
// through intact.
func TestTranslateRequestLargeImage(t *testing.T) {
	data := strings.Repeat("QUJD", 1<<20) // 4 MiB of base64
	in := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/webp;base64,` + data + `"}}]}]}`
	got, err := TranslateRequest([]byte(in), "claude-up", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"claude-up","max_tokens":4096,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/webp","data":"` + data + `"}}]}]}`
	if string(got) != want {
		t.Errorf("large image request differs (len %d, want %d)", len(got), len(want))
	}
}

func TestPathAndHeaders(t *testing.T) {
	if Path(false) != "/v1/messages" || Path(true) != "/v1/messages" {
		t.Errorf("Path = %q, %q", Path(false), Path(true))
	}
	got := Headers("sk-ant-1")
	want := []Header{{"x-api-key", "sk-ant-1"}, {"anthropic-version", "2023-06-01"}, {"content-type", "application/json"}}
	if len(got) != len(want) {
		t.Fatalf("Headers = %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Headers[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}
