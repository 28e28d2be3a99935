package responses

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
)

func TestSpecAvailable(t *testing.T) { schematest.RequireSpec(t) }

// outputText joins the output_text parts of every message item, as the
// SDKs' output_text does.
func outputText(r gjson.Result) string {
	var sb strings.Builder
	for _, it := range r.Get("output").Array() {
		if it.Get("type").Str != "message" {
			continue
		}
		for _, p := range it.Get("content").Array() {
			if p.Get("type").Str == "output_text" {
				sb.WriteString(p.Get("text").Str)
			}
		}
	}
	return sb.String()
}

func TestCreateText(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name, body, want string
	}{
		{"string input", `{"model":"m1","input":"hello there"}`, "Echo: hello there"},
		{"message list", `{"model":"m1","input":[{"role":"user","content":"one"},{"role":"assistant","content":"Echo: one"},{"role":"user","content":"two"}]}`, "Echo: two"},
		{"typed parts", `{"model":"m1","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"with parts"}]}]}`, "Echo: with parts"},
		{"image part", `{"model":"m1","input":[{"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]}]}`, "Echo: look"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := e.create("alice", tc.body)
			if got := outputText(r); got != tc.want {
				t.Errorf("output text %q, want %q", got, tc.want)
			}
			if !strings.HasPrefix(r.Get("id").Str, "resp_") || r.Get("object").Str != "response" {
				t.Errorf("id %s object %s", r.Get("id").Raw, r.Get("object").Raw)
			}
			if r.Get("status").Str != "completed" || r.Get("completed_at").Type != gjson.Number {
				t.Errorf("status %s completed_at %s", r.Get("status").Raw, r.Get("completed_at").Raw)
			}
			if r.Get("created_at").Int() != e.clock.Now().Unix() {
				t.Errorf("created_at %d", r.Get("created_at").Int())
			}
			msg := r.Get("output.0")
			if msg.Get("type").Str != "message" || msg.Get("role").Str != "assistant" || msg.Get("status").Str != "completed" ||
				!strings.HasPrefix(msg.Get("id").Str, "msg_") || msg.Get("content.0.annotations").Raw != "[]" {
				t.Errorf("message item %s", msg.Raw)
			}
			u := r.Get("usage")
			if u.Get("input_tokens").Int() < 1 || u.Get("output_tokens").Int() != int64(len(strings.Fields(tc.want))) ||
				u.Get("total_tokens").Int() != u.Get("input_tokens").Int()+u.Get("output_tokens").Int() {
				t.Errorf("usage %s", u.Raw)
			}
			for field, want := range map[string]string{
				"model": `"m1"`, "store": "true", "tool_choice": `"auto"`, "tools": "[]", "metadata": "{}",
				"temperature": "1", "top_p": "1", "parallel_tool_calls": "true", "error": "null",
				"incomplete_details": "null", "instructions": "null", "previous_response_id": "null",
				"truncation": `"disabled"`, "text": `{"format":{"type":"text"}}`,
			} {
				if got := r.Get(field).Raw; got != want {
					t.Errorf("%s = %s, want %s", field, got, want)
				}
			}
		})
	}
	// Every call went through the gateway as the caller's owner, with the
	// responses origin.
	for i, o := range e.rec.owners {
		if o != "alice" || e.rec.origin[i] != caller.OriginResponses {
			t.Errorf("call %d: owner %q origin %q", i, o, e.rec.origin[i])
		}
	}
}

func TestEchoedParameters(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m1","input":"hi","instructions":"Be brief.","temperature":0.5,"top_p":0.9,
		"max_output_tokens":100,"metadata":{"k":"v"},"user":"u-1","store":true,"parallel_tool_calls":false,
		"text":{"format":{"type":"json_object"}},
		"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}],
		"tool_choice":"none"}`)
	for field, want := range map[string]string{
		"instructions": `"Be brief."`, "temperature": "0.5", "top_p": "0.9", "max_output_tokens": "100",
		"metadata": `{"k":"v"}`, "user": `"u-1"`, "parallel_tool_calls": "false", "tool_choice": `"none"`,
		"text":    `{"format":{"type":"json_object"}}`,
		"tools.0": `{"type":"function","name":"get_weather","description":null,"parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":null}`,
	} {
		if got := r.Get(field).Raw; got != want {
			t.Errorf("%s = %s, want %s", field, got, want)
		}
	}
	// And the translated chat request carried them.
	body := e.rec.last(t)
	for path, want := range map[string]string{
		"messages.0":                       `{"role":"system","content":"Be brief."}`,
		"messages.1":                       `{"role":"user","content":"hi"}`,
		"temperature":                      "0.5",
		"top_p":                            "0.9",
		"max_tokens":                       "100",
		"user":                             `"u-1"`,
		"response_format":                  `{"type":"json_object"}`,
		"tool_choice":                      `"none"`,
		"parallel_tool_calls":              "false",
		"tools.0.function.name":            `"get_weather"`,
		"tools.0.type":                     `"function"`,
		"tools.0.function.parameters.type": `"object"`,
	} {
		if got := body.Get(path).Raw; got != want {
			t.Errorf("chat %s = %s, want %s", path, got, want)
		}
	}
	if body.Get("stream").Exists() || body.Get("metadata").Exists() || body.Get("store").Exists() {
		t.Errorf("chat body carries Responses-only fields: %s", body.Raw)
	}
}

// TestTranslation checks the chat messages built from Responses items,
// the part of the translation the fake cannot show (it echoes only the last
// user message).
func TestTranslation(t *testing.T) {
	n := 0
	ids := func(p string) string { n++; return fmt.Sprintf("%s%d", p, n) }
	tests := []struct {
		name, body, want string
	}{
		{
			"instructions and roles",
			`{"model":"m","instructions":"sys","input":[{"role":"developer","content":"dev"},{"role":"system","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},{"role":"user","content":"u"}]}`,
			`[{"role":"system","content":"sys"},{"role":"system","content":"dev"},{"role":"system","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},{"role":"user","content":"u"}]`,
		},
		{
			"image and file parts",
			`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"see"},{"type":"input_image","image_url":"https://x/y.png","detail":"low"},{"type":"input_file","file_data":"data:application/pdf;base64,AA","filename":"a.pdf"}]}]}`,
			`[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}},{"type":"file","file":{"file_data":"data:application/pdf;base64,AA","filename":"a.pdf"}}]}]`,
		},
		{
			"assistant text then calls then outputs",
			`{"model":"m","input":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"output_text","text":"let me check"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"one"},{"type":"function_call_output","call_id":"c2","output":[{"type":"input_text","text":"two"}]}]}`,
			`[{"role":"user","content":"q"},{"role":"assistant","content":"let me check","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"one"},{"role":"tool","tool_call_id":"c2","content":"two"}]`,
		},
		{
			"bare call, reasoning skipped",
			`{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"r"}]}`,
			`[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}]`,
		},
		{
			"escapes survive",
			`{"model":"m","input":"quote \" backslash \\ newline \n unicode \u00e9 <tag>"}`,
			`[{"role":"user","content":"quote \" backslash \\ newline \n unicode \u00e9 <tag>"}]`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, aerr := parseCreate([]byte(tc.body), ids, false)
			if aerr != nil {
				t.Fatal(aerr)
			}
			var c conversation
			if req.hasInstr {
				c.addInstructions(req.instructions)
			}
			for _, it := range req.input {
				c.addItem(gjson.ParseBytes(it))
			}
			got := c.appendMessages(nil)
			if !jsonEqual(got, []byte(tc.want)) {
				t.Errorf("messages\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func jsonEqual(a, b []byte) bool {
	return gjson.ParseBytes(a).String() == gjson.ParseBytes(b).String() &&
		string(compact(a)) == string(compact(b))
}

func compact(b []byte) []byte {
	var out []byte
	inStr, esc := false, false
	for _, c := range b {
		switch {
		case esc:
			esc = false
		case c == '\\' && inStr:
			esc = true
		case c == '"':
			inStr = !inStr
		case !inStr && (c == ' ' || c == '\n' || c == '\t'):
			continue
		}
		out = append(out, c)
	}
	return out
}

func TestValidation(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name, body string
		status     int
		param      string
	}{
		{"not json", `{"model":`, 400, ""},
		{"missing model", `{"input":"x"}`, 400, "model"},
		{"duplicate model", `{"model":"m","input":"x","model":"other"}`, 400, "model"},
		{"duplicate input", `{"model":"m","input":"x","input":"y"}`, 400, "input"},
		{"model not string", `{"model":3,"input":"x"}`, 400, "model"},
		{"missing input", `{"model":"m"}`, 400, "input"},
		{"empty input", `{"model":"m","input":[]}`, 400, "input"},
		{"input number", `{"model":"m","input":5}`, 400, "input"},
		{"bad role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "input[0].role"},
		{"missing content", `{"model":"m","input":[{"role":"user"}]}`, 400, "input[0].content"},
		{"bad part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_audio"}]}]}`, 400, "input[0].content[0].type"},
		{"call without id", `{"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]}`, 400, "input[0].call_id"},
		{"unknown item", `{"model":"m","input":[{"type":"teleport"}]}`, 400, "input[0].type"},
		{"item reference", `{"model":"m","input":[{"type":"item_reference","id":"msg_1"}]}`, 400, "input[0].type"},
		{"temperature range", `{"model":"m","input":"x","temperature":3}`, 400, "temperature"},
		{"top_p type", `{"model":"m","input":"x","top_p":"high"}`, 400, "top_p"},
		{"max_output_tokens small", `{"model":"m","input":"x","max_output_tokens":5}`, 400, "max_output_tokens"},
		{"max_output_tokens float", `{"model":"m","input":"x","max_output_tokens":20.5}`, 400, "max_output_tokens"},
		{"store type", `{"model":"m","input":"x","store":"yes"}`, 400, "store"},
		{"metadata value", `{"model":"m","input":"x","metadata":{"a":1}}`, 400, "metadata.a"},
		{"metadata too many", `{"model":"m","input":"x","metadata":{` + manyPairs(17) + `}}`, 400, "metadata"},
		{"tools not array", `{"model":"m","input":"x","tools":{}}`, 400, "tools"},
		{"function without name", `{"model":"m","input":"x","tools":[{"type":"function"}]}`, 400, "tools[0].name"},
		{"duplicate function", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}`, 400, "tools[1].name"},
		{"file_search", `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`, 400, "tools"},
		{"code_interpreter", `{"model":"m","input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, 400, "tools"},
		{"web_search unconfigured", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`, 400, "tools"},
		{"web_search_preview unconfigured", `{"model":"m","input":"x","tools":[{"type":"web_search_preview"}]}`, 400, "tools"},
		{"tool_choice unknown function", `{"model":"m","input":"x","tools":[{"type":"function","name":"f"}],"tool_choice":{"type":"function","name":"g"}}`, 400, "tool_choice"},
		{"tool_choice bad string", `{"model":"m","input":"x","tool_choice":"always"}`, 400, "tool_choice"},
		{"text format", `{"model":"m","input":"x","text":{"format":{"type":"yaml"}}}`, 400, "text.format.type"},
		{"text format without type", `{"model":"m","input":"x","text":{"format":{}}}`, 400, "text.format.type"},
		{"json_schema without schema", `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s"}}}`, 400, "text.format.schema"},
		{"background without store", `{"model":"m","input":"x","background":true,"store":false}`, 400, "background"},
		{"background not a boolean", `{"model":"m","input":"x","background":"yes"}`, 400, "background"},
		{"conversation", `{"model":"m","input":"x","conversation":"conv_1"}`, 400, "conversation"},
		{"unknown previous", `{"model":"m","input":"x","previous_response_id":"resp_nope"}`, 400, "previous_response_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.do("alice", http.MethodPost, "/v1/responses", tc.body)
			wantError(t, status, body, tc.status, tc.param)
		})
	}
	if n := e.rec.count(); n != 0 {
		t.Errorf("%d invalid requests reached the gateway", n)
	}
	t.Run("web search message", func(t *testing.T) {
		_, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","tools":[{"type":"web_search"}]}`)
		if msg := gjson.GetBytes(body, "error.message").Str; !strings.Contains(msg, "not configured on this gateway") {
			t.Errorf("message %q", msg)
		}
		_, body = e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","tools":[{"type":"file_search"}]}`)
		if msg := gjson.GetBytes(body, "error.message").Str; !strings.Contains(msg, "'file_search' is not available on this gateway") {
			t.Errorf("message %q", msg)
		}
	})
}

func manyPairs(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, fmt.Sprintf(`"k%d":"v"`, i))
	}
	return strings.Join(parts, ",")
}

func TestRouting(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name, owner, method, path string
		status                    int
	}{
		{"no caller", "", http.MethodPost, "/v1/responses", 401},
		{"get collection", "alice", http.MethodGet, "/v1/responses", 405},
		{"put one", "alice", http.MethodPut, "/v1/responses/resp_1", 405},
		{"unknown subpath", "alice", http.MethodGet, "/v1/responses/resp_1/other", 404},
		{"prefix only", "alice", http.MethodGet, "/v1/responsesx", 404},
		{"cancel missing", "alice", http.MethodPost, "/v1/responses/resp_1/cancel", 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.do(tc.owner, tc.method, tc.path, `{"model":"m","input":"x"}`)
			wantError(t, status, body, tc.status, "")
		})
	}
}

func TestFunctionToolRoundTrip(t *testing.T) {
	e := newEnv(t, envOptions{})
	tools := `[{"type":"function","name":"get_weather","description":"Weather for a city.","parameters":{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]}}]`
	first := e.create("alice", `{"model":"m","input":"Weather in Paris?","tools":`+tools+`}`)
	call := first.Get("output.0")
	if call.Get("type").Str != "function_call" || call.Get("name").Str != "get_weather" ||
		call.Get("arguments").Str != `{"city":"sample","days":1}` || call.Get("status").Str != "completed" ||
		!strings.HasPrefix(call.Get("id").Str, "fc_") || call.Get("call_id").Str == "" {
		t.Fatalf("function call item %s", call.Raw)
	}
	if first.Get("output.#").Int() != 1 {
		t.Errorf("output %s", first.Get("output").Raw)
	}

	second := e.create("alice", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"tools":%s,
		"input":[{"type":"function_call_output","call_id":%q,"output":"22C and sunny"}]}`,
		first.Get("id").Str, tools, call.Get("call_id").Str))
	if got := outputText(second); got != "The tool returned: 22C and sunny" {
		t.Errorf("after the tool: %q", got)
	}
	// Resending the call item along with previous_response_id (as clients
	// that keep their own history do) does not duplicate it.
	again := e.create("alice", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"tools":%s,
		"input":[%s,{"type":"function_call_output","call_id":%q,"output":"22C and sunny"}]}`,
		first.Get("id").Str, tools, call.Raw, call.Get("call_id").Str))
	if got := e.rec.last(t).Get("messages.#").Int(); got != 3 || outputText(again) != outputText(second) {
		t.Errorf("resent call: %d messages, %q", got, outputText(again))
	}
	if second.Get("previous_response_id").Str != first.Get("id").Str {
		t.Errorf("previous_response_id %s", second.Get("previous_response_id").Raw)
	}
	// The gateway saw the whole exchange as chat completions expects it.
	msgs := e.rec.last(t).Get("messages")
	want := fmt.Sprintf(`[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":%q,"type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"sample\",\"days\":1}"}}]},{"role":"tool","tool_call_id":%q,"content":"22C and sunny"}]`,
		call.Get("call_id").Str, call.Get("call_id").Str)
	if !jsonEqual([]byte(msgs.Raw), []byte(want)) {
		t.Errorf("messages\n got %s\nwant %s", msgs.Raw, want)
	}

	// tool_choice naming the function, and required, both reach the model.
	for _, choice := range []string{`{"type":"function","name":"get_weather"}`, `"required"`} {
		r := e.create("alice", `{"model":"m","input":"x","tools":`+tools+`,"tool_choice":`+choice+`}`)
		if r.Get("output.0.type").Str != "function_call" || r.Get("tool_choice").Raw != choice {
			t.Errorf("tool_choice %s: %s", choice, r.Raw)
		}
	}
	if got := e.rec.last(t).Get("tool_choice").Raw; got != `"required"` {
		t.Errorf("chat tool_choice %s", got)
	}
}

func TestPreviousResponseChain(t *testing.T) {
	e := newEnv(t, envOptions{})
	r1 := e.create("alice", `{"model":"m","instructions":"first instructions","input":"one"}`)
	r2 := e.create("alice", `{"model":"m","previous_response_id":"`+r1.Get("id").Str+`","input":"two"}`)
	r3 := e.create("alice", `{"model":"m","instructions":"third instructions","previous_response_id":"`+r2.Get("id").Str+`","input":[{"role":"user","content":"three"}]}`)

	if got := outputText(r3); got != "Echo: three" {
		t.Errorf("r3 text %q", got)
	}
	// Instructions are not carried over: r3 has only its own.
	want := `[{"role":"system","content":"third instructions"},{"role":"user","content":"one"},{"role":"assistant","content":"Echo: one"},{"role":"user","content":"two"},{"role":"assistant","content":"Echo: two"},{"role":"user","content":"three"}]`
	if got := e.rec.last(t).Get("messages").Raw; !jsonEqual([]byte(got), []byte(want)) {
		t.Errorf("r3 messages\n got %s\nwant %s", got, want)
	}
	// The fake counts a prompt token per word: the history is in the prompt.
	if a, b := r2.Get("usage.input_tokens").Int(), r3.Get("usage.input_tokens").Int(); b <= a {
		t.Errorf("input tokens did not grow along the chain: %d then %d", a, b)
	}

	// Input items of r3: the whole conversation before its output, newest
	// first by default.
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+r3.Get("id").Str+"/input_items?order=asc", "")
	if status != 200 {
		t.Fatalf("input_items: %d %s", status, body)
	}
	conforms(t, "ResponseItemList", body)
	var texts []string
	for _, it := range gjson.GetBytes(body, "data").Array() {
		texts = append(texts, it.Get("role").Str+":"+messageText(it.Get("content")))
	}
	if got := strings.Join(texts, "|"); got != "user:one|assistant:Echo: one|user:two|assistant:Echo: two|user:three" {
		t.Errorf("input items %s", got)
	}

	// A deleted link ends the history there.
	if status, body := e.do("alice", http.MethodDelete, "/v1/responses/"+r1.Get("id").Str, ""); status != 200 {
		t.Fatalf("delete: %d %s", status, body)
	}
	e.create("alice", `{"model":"m","previous_response_id":"`+r3.Get("id").Str+`","input":"four"}`)
	want = `[{"role":"user","content":"two"},{"role":"assistant","content":"Echo: two"},{"role":"user","content":"three"},{"role":"assistant","content":"Echo: three"},{"role":"user","content":"four"}]`
	if got := e.rec.last(t).Get("messages").Raw; !jsonEqual([]byte(got), []byte(want)) {
		t.Errorf("after deleting r1\n got %s\nwant %s", got, want)
	}
}

func TestGetDeleteAndOwnerIsolation(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m","input":"mine","metadata":{"tag":"a"}}`)
	id := r.Get("id").Str

	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+id, "")
	if status != 200 || string(body) != r.Raw {
		t.Fatalf("get: %d\n got %s\nwant %s", status, body, r.Raw)
	}
	conforms(t, "Response", body)

	// Bob sees nothing of Alice's response, whatever he tries.
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/responses/" + id, ""},
		{http.MethodDelete, "/v1/responses/" + id, ""},
		{http.MethodGet, "/v1/responses/" + id + "/input_items", ""},
		{http.MethodPost, "/v1/responses/" + id + "/cancel", ""},
	} {
		status, body := e.do("bob", tc.method, tc.path, tc.body)
		wantError(t, status, body, 404, "")
		if !strings.Contains(gjson.GetBytes(body, "error.message").Str, id) {
			t.Errorf("%s %s: message does not name the id: %s", tc.method, tc.path, body)
		}
	}
	status, body = e.do("bob", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+id+`"}`)
	wantError(t, status, body, 400, "previous_response_id")
	if msg := gjson.GetBytes(body, "error.message").Str; msg != "Previous response with id '"+id+"' not found." {
		t.Errorf("message %q", msg)
	}

	// Cancel: found, but not a background response.
	status, body = e.do("alice", http.MethodPost, "/v1/responses/"+id+"/cancel", "")
	wantError(t, status, body, 400, "")

	status, body = e.do("alice", http.MethodDelete, "/v1/responses/"+id, "")
	if status != 200 || string(body) != `{"id":"`+id+`","object":"response","deleted":true}` {
		t.Fatalf("delete: %d %s", status, body)
	}
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/responses/" + id}, {http.MethodDelete, "/v1/responses/" + id},
		{http.MethodGet, "/v1/responses/" + id + "/input_items"},
	} {
		status, body := e.do("alice", tc.method, tc.path, "")
		wantError(t, status, body, 404, "")
	}
}

func TestStoreFalse(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m","input":"ephemeral","store":false}`)
	if r.Get("store").Raw != "false" || outputText(r) != "Echo: ephemeral" {
		t.Fatalf("response %s", r.Raw)
	}
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+r.Get("id").Str, "")
	wantError(t, status, body, 404, "")
	status, body = e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+r.Get("id").Str+`"}`)
	wantError(t, status, body, 400, "previous_response_id")

	// store:false may still continue a stored conversation.
	stored := e.create("alice", `{"model":"m","input":"kept"}`)
	e.create("alice", `{"model":"m","input":"next","store":false,"previous_response_id":"`+stored.Get("id").Str+`"}`)
	if got := e.rec.last(t).Get("messages.#").Int(); got != 3 {
		t.Errorf("messages %d, want 3", got)
	}
}

func TestInputItemsPaging(t *testing.T) {
	e := newEnv(t, envOptions{})
	var input []string
	for i := range 5 {
		input = append(input, fmt.Sprintf(`{"role":"user","content":"m%d"}`, i))
	}
	r := e.create("alice", `{"model":"m","input":[`+strings.Join(input, ",")+`]}`)
	path := "/v1/responses/" + r.Get("id").Str + "/input_items"

	list := func(query string) gjson.Result {
		t.Helper()
		status, body := e.do("alice", http.MethodGet, path+query, "")
		if status != 200 {
			t.Fatalf("%s: %d %s", query, status, body)
		}
		conforms(t, "ResponseItemList", body)
		return gjson.ParseBytes(body)
	}
	texts := func(l gjson.Result) string {
		var s []string
		for _, it := range l.Get("data").Array() {
			s = append(s, messageText(it.Get("content")))
		}
		return strings.Join(s, ",")
	}
	all := list("")
	if texts(all) != "m4,m3,m2,m1,m0" || all.Get("has_more").Bool() {
		t.Errorf("default (desc): %s has_more %v", texts(all), all.Get("has_more").Bool())
	}
	page := list("?order=asc&limit=2")
	if texts(page) != "m0,m1" || !page.Get("has_more").Bool() || page.Get("last_id").Str != page.Get("data.1.id").Str {
		t.Errorf("page 1: %s", page.Raw)
	}
	page = list("?order=asc&limit=2&after=" + page.Get("last_id").Str)
	if texts(page) != "m2,m3" || !page.Get("has_more").Bool() {
		t.Errorf("page 2: %s", page.Raw)
	}
	page = list("?order=asc&limit=2&after=" + page.Get("last_id").Str)
	if texts(page) != "m4" || page.Get("has_more").Bool() {
		t.Errorf("page 3: %s", page.Raw)
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?order=sideways", "?after=msg_nope"} {
		status, body := e.do("alice", http.MethodGet, path+q, "")
		wantError(t, status, body, 400, "")
	}
}

func TestIncomplete(t *testing.T) {
	e := newEnv(t, envOptions{})
	long := strings.Repeat("word ", 30)
	r := e.create("alice", `{"model":"m","input":"`+long+`","max_output_tokens":16}`)
	if r.Get("status").Str != "incomplete" || r.Get("incomplete_details.reason").Str != "max_output_tokens" {
		t.Fatalf("status %s details %s", r.Get("status").Raw, r.Get("incomplete_details").Raw)
	}
	if r.Get("output.0.status").Str != "incomplete" || r.Get("usage.output_tokens").Int() != 16 {
		t.Errorf("output %s usage %s", r.Get("output").Raw, r.Get("usage").Raw)
	}
	if r.Get("completed_at").Type != gjson.Null {
		t.Errorf("completed_at %s", r.Get("completed_at").Raw)
	}
}

func TestGatewayErrorPassthrough(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fault("x-fake-status", "429", "x-fake-retry-after", "7")
	resp := e.send("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x"}`)
	defer resp.Body.Close()
	body := readAll(t, resp)
	wantError(t, resp.StatusCode, body, 429, "")
	if resp.Header.Get("retry-after") != "7" || gjson.GetBytes(body, "error.code").Str != "fake_fault" {
		t.Errorf("retry-after %q body %s", resp.Header.Get("retry-after"), body)
	}
	// Streamed requests get the same HTTP error: nothing was streamed yet.
	e.fault("x-fake-status", "503")
	status, body := e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","stream":true}`)
	wantError(t, status, body, 503, "")
}

func TestRetention(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m","input":"old"}`)
	id := r.Get("id").Str
	e.clock.Add(Retention - time.Second)
	if status, _ := e.do("alice", http.MethodGet, "/v1/responses/"+id, ""); status != 200 {
		t.Fatalf("before expiry: %d", status)
	}
	e.clock.Add(2 * time.Second)
	status, body := e.do("alice", http.MethodGet, "/v1/responses/"+id, "")
	wantError(t, status, body, 404, "")
	status, body = e.do("alice", http.MethodPost, "/v1/responses", `{"model":"m","input":"x","previous_response_id":"`+id+`"}`)
	wantError(t, status, body, 400, "previous_response_id")
	n, err := e.svc.store.sweep(t.Context(), e.clock.Now())
	if err != nil || n != 1 {
		t.Errorf("sweep: %d %v", n, err)
	}
}

func TestStoreSurvivesRestart(t *testing.T) {
	e := newEnv(t, envOptions{})
	r := e.create("alice", `{"model":"m","input":"persist"}`)
	dir := t.TempDir()
	svc, err := New(t.Context(), Options{DataDir: dir, Gateway: e.rec, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.store.put(t.Context(), &stored{ID: r.Get("id").Str, Owner: "alice", CreatedAt: e.clock.Now(),
		ExpiresAt: e.clock.Now().Add(time.Hour), Body: []byte(r.Raw), Input: []byte("[]"), Output: []byte("[]")}); err != nil {
		t.Fatal(err)
	}
	svc.Close()
	svc, err = New(t.Context(), Options{DataDir: dir, Gateway: e.rec, Now: e.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	b, err := svc.store.body(t.Context(), "alice", r.Get("id").Str, e.clock.Now())
	if err != nil || string(b) != r.Raw {
		t.Errorf("after reopening: %v %s", err, b)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(sb.String())
}
