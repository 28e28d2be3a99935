package gemini

import (
	"strings"
	"testing"
)

func TestTranslateRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		drop bool
		want string
	}{
		{
			name: "system and user",
			body: `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello \"you\"\n"}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Hello \"you\"\n"}]}],"systemInstruction":{"parts":[{"text":"Be brief."}]}}`,
		},
		{
			name: "developer and several system messages join the instruction",
			body: `{"model":"m","messages":[{"role":"developer","content":[{"type":"text","text":"A"},{"type":"text","text":"B"}]},{"role":"user","content":"hi"},{"role":"system","content":"C"}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"systemInstruction":{"parts":[{"text":"A"},{"text":"B"},{"text":"C"}]}}`,
		},
		{
			name: "system only becomes a user turn",
			body: `{"model":"m","messages":[{"role":"system","content":"Say hi."}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"Say hi."}]}]}`,
		},
		{
			name: "assistant is model and same roles merge",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","name":"bob","content":"b"},{"role":"assistant","content":"c"},{"role":"assistant","content":[{"type":"text","text":"d"},{"type":"refusal","refusal":"e"}]},{"role":"user","content":"f"}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"a"},{"text":"b"}]},{"role":"model","parts":[{"text":"c"},{"text":"d"},{"text":"e"}]},{"role":"user","parts":[{"text":"f"}]}]}`,
		},
		{
			name: "empty text and empty assistant messages are skipped",
			body: `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"user","content":[{"type":"text","text":""},{"type":"text","text":"b"}]}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"a"},{"text":"b"}]}]}`,
		},
		{
			name: "multi-part with images audio and files",
			body: `{"model":"m","messages":[{"role":"user","content":[
				{"type":"text","text":"look"},
				{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"high"}},
				{"type":"image_url","image_url":{"url":"data:image\/jpeg;base64,\/9j\/4AAQ"}},
				{"type":"image_url","image_url":{"url":"https://example.com/cat.PNG?size=large"}},
				{"type":"image_url","image_url":{"url":"https://example.com/photo"}},
				{"type":"image_url","image_url":{"url":"gs://bucket/doc.pdf"}},
				{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}},
				{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERi0=","filename":"a.pdf"}},
				{"type":"file","file":{"file_data":"aGVsbG8=","filename":"notes.txt"}}]}]}`,
			want: `{"contents":[{"role":"user","parts":[
				{"text":"look"},
				{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}},
				{"inlineData":{"mimeType":"image/jpeg","data":"/9j/4AAQ"}},
				{"fileData":{"mimeType":"image/png","fileUri":"https://example.com/cat.PNG?size=large"}},
				{"fileData":{"mimeType":"image/jpeg","fileUri":"https://example.com/photo"}},
				{"fileData":{"mimeType":"application/pdf","fileUri":"gs://bucket/doc.pdf"}},
				{"inlineData":{"mimeType":"audio/wav","data":"UklGRg=="}},
				{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}},
				{"inlineData":{"mimeType":"text/plain","data":"aGVsbG8="}}]}]}`,
		},
		{
			name: "tool calls and grouped tool results",
			body: `{"model":"m","messages":[
				{"role":"user","content":"weather?"},
				{"role":"assistant","content":"Checking.","tool_calls":[
					{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},
					{"id":"call_b","type":"function","function":{"name":"get_time","arguments":""}}]},
				{"role":"tool","tool_call_id":"call_a","content":"{\"temp\":22}"},
				{"role":"tool","tool_call_id":"call_b","content":[{"type":"text","text":"noon"}]},
				{"role":"user","content":"thanks"}]}`,
			want: `{"contents":[
				{"role":"user","parts":[{"text":"weather?"}]},
				{"role":"model","parts":[{"text":"Checking."},
					{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},
					{"functionCall":{"name":"get_time","args":{}}}]},
				{"role":"user","parts":[
					{"functionResponse":{"name":"get_weather","response":{"content":{"temp":22}}}},
					{"functionResponse":{"name":"get_time","response":{"content":"noon"}}}]},
				{"role":"user","parts":[{"text":"thanks"}]}]}`,
		},
		{
			name: "legacy function message",
			body: `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"function","name":"f","content":"[1,2]"}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"content":[1,2]}}}]}]}`,
		},
		{
			name: "tools and tool_choice auto",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"auto","tools":[
				{"type":"function","function":{"name":"get_weather","description":"Weather.","strict":true,"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City"},"unit":{"type":["string","null"],"enum":["c","f"]},"days":{"type":"integer","minimum":1},"tags":{"type":"array","items":{"type":"string","format":"uri"}}},"required":["city","unit","days","tags"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}}},
				{"type":"function","function":{"name":"now","parameters":{"type":"object","properties":{}}}},
				{"type":"function","function":{"name":"ping"}}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],
				"tools":[{"functionDeclarations":[
					{"name":"get_weather","description":"Weather.","parameters":{"type":"OBJECT","properties":{"city":{"type":"STRING","description":"City"},"unit":{"type":"STRING","nullable":true,"enum":["c","f"]},"days":{"type":"INTEGER","minimum":1},"tags":{"type":"ARRAY","items":{"type":"STRING"}}},"required":["city","unit","days","tags"]}},
					{"name":"now"},{"name":"ping"}]}],
				"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}}`,
		},
		{
			name: "tool_choice required",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"f"}}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`,
		},
		{
			name: "tool_choice none",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"none","tools":[{"type":"function","function":{"name":"f"}}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"NONE"}}}`,
		},
		{
			name: "tool_choice named",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"function","function":{"name":"g"}},"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"g"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["g"]}}}`,
		},
		{
			name: "tool_choice allowed_tools required",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}}]}},"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"g"}},{"type":"function","function":{"name":"h"}}]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f"},{"name":"g"},{"name":"h"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["f","g"]}}}`,
		},
		{
			name: "tool_choice without tools is moot",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"auto","tools":[]}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		},
		{
			name: "generation config",
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"user":"u","messages":[{"role":"user","content":"x"}],
				"temperature":0.7,"top_p":0.9,"max_tokens":100,"max_completion_tokens":50,"stop":"END","n":3,"presence_penalty":0.5,"frequency_penalty":-0.5,"seed":42,"logprobs":false,"parallel_tool_calls":true,"store":false,"reasoning_effort":"low"}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"temperature":0.7,"topP":0.9,"candidateCount":3,"presencePenalty":0.5,"frequencyPenalty":-0.5,"seed":42,"maxOutputTokens":50,"stopSequences":["END"],"thinkingConfig":{"thinkingBudget":1024}}}`,
		},
		{
			name: "stop array drops empty strings",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["a","","b","c","d"],"max_tokens":7}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"maxOutputTokens":7,"stopSequences":["a","b","c","d"]}}`,
		},
		{
			name: "nulls are absent",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"stop":null,"temperature":null,"tools":null,"tool_choice":null,"response_format":null,"logit_bias":null,"seed":null}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		},
		{
			name: "response_format text",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"}}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}]}`,
		},
		{
			name: "response_format json_object",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json"}}`,
		},
		{
			name: "response_format json_schema",
			body: `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,"schema":{
				"type":"object","additionalProperties":false,
				"properties":{"name":{"type":"string"},"age":{"type":"integer","format":"int32"},"kind":{"const":"human"},
					"born":{"type":"string","format":"date-time"},"email":{"type":"string","format":"email"},
					"pet":{"$ref":"#/$defs/Pet","description":"Their pet"},"friends":{"type":"array","items":{"$ref":"#/definitions/Friend"},"minItems":1},
					"nick":{"anyOf":[{"type":"string"},{"type":"null"}]}},
				"required":["name","age"],
				"$defs":{"Pet":{"type":"object","description":"A pet","properties":{"species":{"type":"string","enum":["cat","dog"]}},"required":["species"]}},
				"definitions":{"Friend":{"type":"object","properties":{"name":{"type":"string"}}}}}}}}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json","responseSchema":{
				"type":"OBJECT",
				"properties":{"name":{"type":"STRING"},"age":{"type":"INTEGER","format":"int32"},"kind":{"enum":["human"]},
					"born":{"type":"STRING","format":"date-time"},"email":{"type":"STRING"},
					"pet":{"type":"OBJECT","properties":{"species":{"type":"STRING","enum":["cat","dog"]}},"required":["species"],"description":"Their pet","propertyOrdering":["species"]},
					"friends":{"type":"ARRAY","items":{"type":"OBJECT","properties":{"name":{"type":"STRING"}},"propertyOrdering":["name"]},"minItems":1},
					"nick":{"type":"STRING","nullable":true}},
				"required":["name","age"],
				"propertyOrdering":["name","age","kind","born","email","pet","friends","nick"]}}}`,
		},
		{
			name: "unsupported parameters dropped",
			drop: true,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x"},{"type":"file","file":{"file_id":"file-1"}},{"type":"video","video":{}}]}],
				"logprobs":true,"top_logprobs":3,"logit_bias":{"1":2},"parallel_tool_calls":false,"audio":{},"prediction":{},"service_tier":"flex","store":true,"modalities":["text","audio"],
				"tools":[{"type":"custom","custom":{"name":"c"}},{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","not":{"const":"b"}},"m":{"type":"object","additionalProperties":true,"properties":{"k":{"type":"string"}}}}}}}],
				"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`,
			want: `{"contents":[{"role":"user","parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a":{"type":"STRING"},"m":{"type":"OBJECT","properties":{"k":{"type":"STRING"}}}}}}]}],"toolConfig":{"functionCallingConfig":{"mode":"AUTO"}}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateRequest([]byte(tt.body), Options{DropUnsupported: tt.drop})
			if err != nil {
				t.Fatalf("TranslateRequest: %v", err)
			}
			jsonEqual(t, out, tt.want)
		})
	}
}

func TestTranslateRequestErrors(t *testing.T) {
	const user = `"messages":[{"role":"user","content":"x"}]`
	tests := []struct {
		name   string
		body   string
		status int
		code   string
		param  string
	}{
		{"logprobs", `{"model":"m",` + user + `,"logprobs":true}`, 400, "unsupported_parameter", "logprobs"},
		{"top_logprobs", `{"model":"m",` + user + `,"top_logprobs":2}`, 400, "unsupported_parameter", "top_logprobs"},
		{"logit_bias", `{"model":"m",` + user + `,"logit_bias":{"50256":-100}}`, 400, "unsupported_parameter", "logit_bias"},
		{"audio", `{"model":"m",` + user + `,"audio":{"voice":"alloy","format":"mp3"}}`, 400, "unsupported_parameter", "audio"},
		{"unknown parameter", `{"model":"m",` + user + `,"frobnicate":1}`, 400, "unsupported_parameter", "frobnicate"},
		{"store true", `{"model":"m",` + user + `,"store":true}`, 400, "unsupported_parameter", "store"},
		{"parallel_tool_calls false", `{"model":"m",` + user + `,"parallel_tool_calls":false}`, 400, "unsupported_value", "parallel_tool_calls"},
		{"service tier", `{"model":"m",` + user + `,"service_tier":"priority"}`, 400, "unsupported_value", "service_tier"},
		{"audio output", `{"model":"m",` + user + `,"modalities":["text","audio"]}`, 400, "unsupported_value", "modalities"},
		{"file id", `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, 400, "unsupported_value", "messages[0].content[0].file.file_id"},
		{"unknown part", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"video_url","video_url":{}}]}]}`, 400, "unsupported_value", "messages[0].content[1].type"},
		{"image in system", `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]},{"role":"user","content":"x"}]}`, 400, "unsupported_value", "messages[0].content[0].type"},
		{"non-base64 data URL", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain,hello"}}]}]}`, 400, "invalid_value", "messages[0].content[0].image_url.url"},
		{"ftp URL", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, 400, "invalid_value", "messages[0].content[0].image_url.url"},
		{"audio format", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AA==","format":"flac"}}]}]}`, 400, "invalid_value", "messages[0].content[0].input_audio.format"},
		{"unknown tool_call_id", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","tool_call_id":"nope","content":"r"}]}`, 400, "invalid_value", "messages[1].tool_call_id"},
		{"tool without id", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]}`, 400, "missing_required_parameter", "messages[1].tool_call_id"},
		{"bad arguments", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, 400, "invalid_value", "messages[1].tool_calls[0].function.arguments"},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"x"}]}`, 400, "invalid_value", "messages[0].role"},
		{"custom tool", `{"model":"m",` + user + `,"tools":[{"type":"custom","custom":{"name":"c"}}]}`, 400, "unsupported_value", "tools[0].type"},
		{"schema keyword", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","not":{"const":"x"}}}}}}]}`, 400, "unsupported_value", "tools[0].function.parameters.properties.a.not"},
		{"open object", `{"model":"m",` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"string"}}}}}`, 400, "unsupported_value", "response_format.json_schema.schema.additionalProperties"},
		{"multi-type", `{"model":"m",` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":["string","integer"]}}}}}}`, 400, "unsupported_value", "response_format.json_schema.schema.properties.a.type"},
		{"recursive schema", `{"model":"m",` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"$ref":"#/$defs/N","$defs":{"N":{"type":"object","properties":{"next":{"$ref":"#/$defs/N"}}}}}}}}`, 400, "unsupported_value", "response_format.json_schema.schema.$ref.properties.next.$ref"},
		{"dangling ref", `{"model":"m",` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"$ref":"#/$defs/Missing"}}}}}}`, 400, "invalid_value", "response_format.json_schema.schema.properties.a.$ref"},
		{"non-string enum", `{"model":"m",` + user + `,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object","properties":{"a":{"type":"integer","enum":[1,2]}}}}}}`, 400, "unsupported_value", "response_format.json_schema.schema.properties.a.enum"},
		{"allowed_tools auto", `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[]}}}`, 400, "unsupported_value", "tool_choice.allowed_tools.mode"},
		{"too many stops", `{"model":"m",` + user + `,"stop":["a","b","c","d","e","f"]}`, 400, "invalid_value", "stop"},
		{"reasoning effort", `{"model":"m",` + user + `,"reasoning_effort":"extreme"}`, 400, "invalid_value", "reasoning_effort"},
		{"response_format type", `{"model":"m",` + user + `,"response_format":{"type":"xml"}}`, 400, "invalid_value", "response_format.type"},
		{"no messages", `{"model":"m"}`, 400, "missing_required_parameter", "messages"},
		{"empty messages", `{"model":"m","messages":[]}`, 400, "invalid_value", "messages"},
		// Of two members Gemini cannot honour, the one written first is named.
		{"first refused: logprobs", `{"model":"m",` + user + `,"logprobs":true,"frobnicate":1}`, 400, "unsupported_parameter", "logprobs"},
		{"first refused: unknown", `{"model":"m","frobnicate":1,` + user + `,"logprobs":true}`, 400, "unsupported_parameter", "frobnicate"},
		{"first refused: functions", `{"functions":null,"model":"m",` + user + `,"parallel_tool_calls":false}`, 400, "unsupported_parameter", "functions"},
		{"not JSON", `{"model":`, 400, "invalid_json", ""},
		{"not an object", `[1]`, 400, "invalid_type", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TranslateRequest([]byte(tt.body), Options{})
			if err == nil {
				t.Fatalf("no error; output %s", out)
			}
			e := asAPIError(t, err)
			if e.Status != tt.status || e.Code != tt.code || e.Param != tt.param {
				t.Errorf("got %d %q param %q (%s), want %d %q param %q", e.Status, e.Code, e.Param, e.Message, tt.status, tt.code, tt.param)
			}
			if !strings.Contains(e.Message, "'") && tt.param != "" && !strings.Contains(e.Message, tt.param) {
				t.Logf("message does not name the parameter: %s", e.Message)
			}
			conforms(t, "ErrorResponse", e.JSON())
		})
	}
}

// A large image is copied through without being unescaped or re-encoded.
func TestTranslateRequestLargeImage(t *testing.T) {
	data := strings.Repeat("QUJD", 1<<20) // 4 MiB of base64
	body := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + data + `"}}]}]}`
	out, err := TranslateRequest([]byte(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"` + data + `"}}]}]}`
	if string(out) != want {
		t.Fatalf("output differs (len %d, want %d)", len(out), len(want))
	}
}

func TestPaths(t *testing.T) {
	for _, tt := range []struct{ got, want string }{
		{ChatPath("gemini-2.5-flash", false), "/v1beta/models/gemini-2.5-flash:generateContent"},
		{ChatPath("gemini-2.5-flash", true), "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"},
		{ChatPath("tunedModels/my-model", false), "/v1beta/tunedModels/my-model:generateContent"},
		{ChatPath("bad?model", false), "/v1beta/models/bad%3Fmodel:generateContent"},
		{EmbedPath("text-embedding-004"), "/v1beta/models/text-embedding-004:batchEmbedContents"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	h := Headers("k")
	if len(h) != 2 || h[0] != (Header{"x-goog-api-key", "k"}) || h[1] != (Header{"content-type", "application/json"}) {
		t.Errorf("Headers = %v", h)
	}
}

func BenchmarkTranslateRequest(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` +
		strings.Repeat("QUJD", 64<<10) + `"}}]}],"temperature":0.2,"max_tokens":100}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TranslateRequest(body, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
