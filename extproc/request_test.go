package extproc

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/tidwall/gjson"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

func TestAuthentication(t *testing.T) {
	h := newHarness(t, true)
	base := []string{":method", "POST", ":path", chatPath}
	tests := []struct {
		name    string
		headers []string
		status  int
		code    string
		msg     string // substring of the message
	}{
		{"missing", nil, 401, "invalid_api_key", "didn't provide an API key"},
		{"empty", []string{"authorization", ""}, 401, "invalid_api_key", "didn't provide an API key"},
		{"basic scheme", []string{"authorization", "Basic dXNlcjpwYXNz"}, 401, "invalid_api_key", "Bearer"},
		{"bearer without key", []string{"authorization", "Bearer "}, 401, "invalid_api_key", "Bearer"},
		{"unknown key", []string{"authorization", "Bearer " + unknownKey}, 401, "invalid_api_key", "Incorrect API key provided: sk-sy-****."},
		{"malformed key", []string{"authorization", "Bearer nope"}, 401, "invalid_api_key", "Incorrect API key provided: ****."},
		{"revoked key", []string{"authorization", "Bearer " + revokedKey}, 401, "invalid_api_key", "Incorrect API key"},
		{"revoked key returned by store", []string{"authorization", "Bearer " + tombKey}, 401, "invalid_api_key", "Incorrect API key"},
		{"two authorization headers", []string{"authorization", "Bearer " + goodKey, "authorization", "Bearer " + goodKey}, 401, "invalid_api_key", "Bearer"},
		{"key store down", []string{"authorization", "Bearer " + storeErrKey}, 503, "service_unavailable", "retry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.open(t).do(reqHeaders(false, append(slices.Clone(base), tt.headers...)...))
			msg := wantImmediate(t, resp, tt.status, tt.code, "")
			if !strings.Contains(msg, tt.msg) {
				t.Errorf("message %q does not contain %q", msg, tt.msg)
			}
			body := string(resp.GetImmediateResponse().GetBody())
			for _, k := range []string{unknownKey, revokedKey, tombKey, storeErrKey, goodKey} {
				if strings.Contains(body, k[6:12]) {
					t.Errorf("body echoes more than the key's public prefix: %s", body)
				}
			}
		})
	}

	t.Run("scheme is case-insensitive", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(false, append(slices.Clone(base), "authorization", "bearer   "+goodKey)...))
		if resp.GetRequestHeaders() == nil {
			t.Fatalf("want request_headers reply, got %v", resp)
		}
	})
	if strings.Contains(h.logs.String(), storeErrKey) {
		t.Error("log contains the key")
	}
}

func TestNotReady(t *testing.T) {
	h := newHarness(t, false)
	if h.srv.Ready() {
		t.Fatal("Ready before a catalog")
	}
	wantImmediate(t, h.open(t).do(chatHeaders(goodKey)), 503, "service_unavailable", "")
}

func TestRequestHeaders(t *testing.T) {
	h := newHarness(t, true)

	t.Run("chat strips forged and credential headers", func(t *testing.T) {
		resp := h.open(t).do(chatHeaders(goodKey,
			catalog.RouteHeader, "local/llama", "x-switchyard-key-id", "key_forged", "X-Switchyard-Tier", "enterprise"))
		hr := resp.GetRequestHeaders()
		if hr == nil {
			t.Fatalf("want request_headers reply, got %v", resp)
		}
		rm := hr.GetResponse().GetHeaderMutation().GetRemoveHeaders()
		for _, want := range []string{catalog.RouteHeader, "x-switchyard-key-id", "x-switchyard-tier", "authorization", "accept-encoding"} {
			if !slices.Contains(rm, want) {
				t.Errorf("remove_headers %v lacks %q", rm, want)
			}
		}
		if n := len(hr.GetResponse().GetHeaderMutation().GetSetHeaders()); n != 0 {
			t.Errorf("set %d headers in request_headers reply", n)
		}
		if resp.GetModeOverride() != nil {
			t.Errorf("unexpected mode override %v", resp.GetModeOverride())
		}
		md := metaFields(t, resp)
		if md["key_id"] != "key_0123456789abcdef" || md["tier"] != "standard" {
			t.Errorf("metadata = %v", md)
		}
	})

	t.Run("other paths pass with header clean-up only", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(true, ":method", "GET", ":path", "/v1/files",
			"authorization", "Bearer "+goodKey, "x-switchyard-model", "forged"))
		hr := resp.GetRequestHeaders()
		if hr == nil {
			t.Fatalf("want request_headers reply, got %v", resp)
		}
		rm := hr.GetResponse().GetHeaderMutation().GetRemoveHeaders()
		if !slices.Contains(rm, "authorization") || !slices.Contains(rm, "x-switchyard-model") {
			t.Errorf("remove_headers = %v", rm)
		}
		mo := resp.GetModeOverride()
		if mo.GetRequestBodyMode() != filterv3.ProcessingMode_NONE || mo.GetResponseHeaderMode() != filterv3.ProcessingMode_SKIP {
			t.Errorf("mode override = %v", mo)
		}
	})

	t.Run("other paths still need a key", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(true, ":method", "GET", ":path", "/v1/files"))
		wantImmediate(t, resp, 401, "invalid_api_key", "")
	})

	t.Run("wrong method", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(true, ":method", "GET", ":path", chatPath, "authorization", "Bearer "+goodKey))
		wantImmediate(t, resp, 405, "", "")
		if got := setHeaders(resp.GetImmediateResponse().GetHeaders())["allow"]; got != "POST" {
			t.Errorf("allow = %q", got)
		}
	})

	t.Run("missing body", func(t *testing.T) {
		resp := h.open(t).do(reqHeaders(true, ":method", "POST", ":path", chatPath, "authorization", "Bearer "+goodKey))
		wantImmediate(t, resp, 400, "invalid_json", "")
	})

	t.Run("query string", func(t *testing.T) {
		e := h.open(t)
		e.do(reqHeaders(false, ":method", "POST", ":path", chatPath+"?api-version=1", "authorization", "Bearer "+goodKey))
		if resp := e.do(reqBody(chatBody("local/llama"))); resp.GetRequestBody() == nil {
			t.Fatalf("want request_body reply, got %v", resp)
		}
	})
}

func TestValidation(t *testing.T) {
	h := newHarness(t, true)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	m := `"model":"openai/gpt-4o"`
	obj := func(members ...string) string { return "{" + strings.Join(members, ",") + "}" }
	tests := []struct {
		name, body  string
		status      int
		code, param string
	}{
		{"invalid json", `{"model":`, 400, "invalid_json", ""},
		{"not json", `model=gpt`, 400, "invalid_json", ""},
		{"not an object", `[1,2]`, 400, "invalid_type", ""},
		{"missing model", obj(msgs), 400, "missing_required_parameter", "model"},
		{"null model", obj(`"model":null`, msgs), 400, "missing_required_parameter", "model"},
		{"empty model", obj(`"model":""`, msgs), 400, "missing_required_parameter", "model"},
		{"model not a string", obj(`"model":4`, msgs), 400, "invalid_type", "model"},
		{"duplicate model", obj(m, `"model":"local/llama"`, msgs), 400, "invalid_value", "model"},
		{"duplicate model, escaped key", obj(m, `"mod\u0065l":"local/llama"`, msgs), 400, "invalid_value", "model"},
		{"response_format type", obj(m, msgs, `"response_format":{"type":"yaml"}`), 400, "invalid_value", "response_format.type"},
		{"response_format null type", obj(m, msgs, `"response_format":{"type":null}`), 400, "invalid_type", "response_format.type"},
		{"response_format duplicate type", obj(m, msgs, `"response_format":{"type":"text","type":"yaml"}`), 400, "invalid_value", "response_format.type"},
		{"duplicate response_format", obj(m, msgs, `"response_format":{"type":"text"}`, `"response_format":{"type":"yaml"}`), 400, "invalid_value", "response_format"},
		{"unknown model", obj(`"model":"acme/nope"`, msgs), 404, "model_not_found", "model"},
		{"missing messages", obj(m), 400, "missing_required_parameter", "messages"},
		{"messages not an array", obj(m, `"messages":"hi"`), 400, "invalid_type", "messages"},
		{"empty messages", obj(m, `"messages":[]`), 400, "empty_array", "messages"},
		{"message not an object", obj(m, `"messages":["hi"]`), 400, "invalid_type", "messages[0]"},
		{"missing role", obj(m, `"messages":[{"content":"hi"}]`), 400, "missing_required_parameter", "messages[0].role"},
		{"role not a string", obj(m, `"messages":[{"role":1,"content":"hi"}]`), 400, "invalid_type", "messages[0].role"},
		{"bad role", obj(m, `"messages":[{"role":"user","content":"a"},{"role":"wizard","content":"b"}]`), 400, "invalid_value", "messages[1].role"},
		{"missing content", obj(m, `"messages":[{"role":"user"}]`), 400, "missing_required_parameter", "messages[0].content"},
		{"null content", obj(m, `"messages":[{"role":"system","content":null}]`), 400, "missing_required_parameter", "messages[0].content"},
		{"content wrong type", obj(m, `"messages":[{"role":"user","content":5}]`), 400, "invalid_type", "messages[0].content"},
		{"assistant without content or tool calls", obj(m, `"messages":[{"role":"assistant"}]`), 400, "missing_required_parameter", "messages[0].content"},
		{"tool_calls not an array", obj(m, `"messages":[{"role":"assistant","tool_calls":{}}]`), 400, "invalid_type", "messages[0].tool_calls"},
		{"tool message without id", obj(m, `"messages":[{"role":"tool","content":"42"}]`), 400, "missing_required_parameter", "messages[0].tool_call_id"},
		{"temperature high", obj(m, msgs, `"temperature":3`), 400, "decimal_above_max_value", "temperature"},
		{"temperature low", obj(m, msgs, `"temperature":-0.5`), 400, "decimal_below_min_value", "temperature"},
		{"temperature huge", obj(m, msgs, `"temperature":1e999`), 400, "decimal_above_max_value", "temperature"},
		{"temperature string", obj(m, msgs, `"temperature":"hot"`), 400, "invalid_type", "temperature"},
		{"top_p high", obj(m, msgs, `"top_p":1.5`), 400, "decimal_above_max_value", "top_p"},
		{"top_p bool", obj(m, msgs, `"top_p":true`), 400, "invalid_type", "top_p"},
		{"presence_penalty high", obj(m, msgs, `"presence_penalty":3`), 400, "decimal_above_max_value", "presence_penalty"},
		{"presence_penalty low", obj(m, msgs, `"presence_penalty":-3`), 400, "decimal_below_min_value", "presence_penalty"},
		{"frequency_penalty high", obj(m, msgs, `"frequency_penalty":3`), 400, "decimal_above_max_value", "frequency_penalty"},
		{"frequency_penalty low", obj(m, msgs, `"frequency_penalty":-3`), 400, "decimal_below_min_value", "frequency_penalty"},
		{"five stop sequences", obj(m, msgs, `"stop":["a","b","c","d","e"]`), 400, "array_above_max_length", "stop"},
		{"stop not strings", obj(m, msgs, `"stop":["a",1]`), 400, "invalid_type", "stop[1]"},
		{"stop number", obj(m, msgs, `"stop":5`), 400, "invalid_type", "stop"},
		{"n zero", obj(m, msgs, `"n":0`), 400, "integer_below_min_value", "n"},
		{"n too big", obj(m, msgs, `"n":129`), 400, "integer_above_max_value", "n"},
		{"n fractional", obj(m, msgs, `"n":1.5`), 400, "invalid_type", "n"},
		{"max_tokens zero", obj(m, msgs, `"max_tokens":0`), 400, "integer_below_min_value", "max_tokens"},
		{"max_tokens string", obj(m, msgs, `"max_tokens":"100"`), 400, "invalid_type", "max_tokens"},
		{"max_completion_tokens zero", obj(m, msgs, `"max_completion_tokens":0`), 400, "integer_below_min_value", "max_completion_tokens"},
		{"stream string", obj(m, msgs, `"stream":"yes"`), 400, "invalid_type", "stream"},
		{"stream_options without stream", obj(m, msgs, `"stream_options":{"include_usage":true}`), 400, "invalid_value", "stream_options"},
		{"stream_options with stream false", obj(m, msgs, `"stream":false`, `"stream_options":{}`), 400, "invalid_value", "stream_options"},
		{"stream_options wrong type", obj(m, msgs, `"stream":true`, `"stream_options":true`), 400, "invalid_type", "stream_options"},
		{"include_usage wrong type", obj(m, msgs, `"stream":true`, `"stream_options":{"include_usage":"yes"}`), 400, "invalid_type", "stream_options.include_usage"},
		{"include_usage duplicate", obj(m, msgs, `"stream":true`, `"stream_options":{"include_usage":true,"include_usage":false}`), 400, "invalid_value", "stream_options.include_usage"},
		{"tools not an array", obj(m, msgs, `"tools":{}`), 400, "invalid_type", "tools"},
		{"tool not an object", obj(m, msgs, `"tools":["f"]`), 400, "invalid_type", "tools[0]"},
		{"tool without type", obj(m, msgs, `"tools":[{"function":{"name":"f"}}]`), 400, "missing_required_parameter", "tools[0].type"},
		{"tool bad type", obj(m, msgs, `"tools":[{"type":"retrieval"}]`), 400, "invalid_value", "tools[0].type"},
		{"tool without function", obj(m, msgs, `"tools":[{"type":"function"}]`), 400, "missing_required_parameter", "tools[0].function"},
		{"tool without name", obj(m, msgs, `"tools":[{"type":"function","function":{"parameters":{}}}]`), 400, "missing_required_parameter", "tools[0].function.name"},
		{"tool name not a string", obj(m, msgs, `"tools":[{"type":"function","function":{"name":7}}]`), 400, "invalid_type", "tools[0].function.name"},
		{"tool_choice bad string", obj(m, msgs, `"tool_choice":"sometimes"`), 400, "invalid_value", "tool_choice"},
		{"tool_choice number", obj(m, msgs, `"tool_choice":1`), 400, "invalid_type", "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			if r := e.do(chatHeaders(goodKey)); r.GetRequestHeaders() == nil {
				t.Fatalf("headers rejected: %v", r)
			}
			wantImmediate(t, e.do(reqBody(tt.body)), tt.status, tt.code, tt.param)
		})
	}

	valid := []struct{ name, body string }{
		{"nulls for optional parameters", obj(m, msgs, `"temperature":null`, `"top_p":null`, `"stop":null`, `"n":null`,
			`"max_tokens":null`, `"stream":null`, `"stream_options":null`, `"tools":null`, `"tool_choice":null`)},
		{"bounds inclusive", obj(m, msgs, `"temperature":2`, `"top_p":0`, `"presence_penalty":-2`, `"frequency_penalty":2`,
			`"n":128`, `"max_tokens":1`, `"max_completion_tokens":1e3`, `"stop":["a","b","c","d"]`)},
		{"stop string", obj(m, msgs, `"stop":"\n"`)},
		{"assistant tool call without content", obj(m, `"messages":[{"role":"user","content":"hi"},`+
			`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},`+
			`{"role":"tool","tool_call_id":"c1","content":"42"},{"role":"developer","content":[{"type":"text","text":"x"}]}]`)},
		{"tools and tool_choice", obj(m, msgs, `"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`,
			`"tool_choice":{"type":"function","function":{"name":"f"}}`)},
		{"whitespace everywhere", " {\n\t\"model\" : \"openai/gpt-4o\" ,\r\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"a \\\"quoted\\\" \\\\ text\" } ] }\n"},
		{"unknown members pass", obj(m, msgs, `"user":"u1"`, `"metadata":{"model":"not this one"}`, `"logit_bias":{"50256":-100}`)},
	}
	for _, tt := range valid {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			e.do(chatHeaders(goodKey))
			resp := e.do(reqBody(tt.body))
			if resp.GetRequestBody() == nil {
				t.Fatalf("rejected: %v", resp)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	h := newHarness(t, true)
	body := chatBody("openai/gpt-4o", `"temperature":0.5`, `"user":"u1"`, `"metadata":{"model":"keep me"}`)

	e := h.open(t)
	hdrResp := e.do(chatHeaders(goodKey))
	resp := e.do(reqBody(body))
	br := resp.GetRequestBody()
	if br == nil {
		t.Fatalf("want request_body reply, got %v", resp)
	}
	cr := br.GetResponse()
	if !cr.GetClearRouteCache() {
		t.Error("clear_route_cache not set")
	}
	hm := cr.GetHeaderMutation()
	if hm == nil {
		t.Fatal("no header_mutation: Envoy would ignore clear_route_cache")
	}
	set := setHeaders(hm)
	if set[catalog.RouteHeader] != "openai/gpt-4o" {
		t.Errorf("%s = %q", catalog.RouteHeader, set[catalog.RouteHeader])
	}
	if set[catalog.FirstHeader] != "openai" {
		t.Errorf("%s = %q, want the first provider", catalog.FirstHeader, set[catalog.FirstHeader])
	}
	// The first choice is OpenAI-kind: the body is prepared for it (its
	// upstream model, and nothing else), and the upstream phase of that
	// attempt is told so. Credentials are the upstream phase's, per
	// attempt.
	if _, ok := set["authorization"]; ok {
		t.Error("authorization set in the downstream phase")
	}
	if set[preparedHeader] != "openai" {
		t.Errorf("%s = %q, want the first provider", preparedHeader, set[preparedHeader])
	}
	want := prepared(body, "openai/gpt-4o", "gpt-4o-2024-08-06")
	if got := string(cr.GetBodyMutation().GetBody()); got != want {
		t.Errorf("body = %s, want %s", got, want)
	}
	if set["content-length"] != strconv.Itoa(len(want)) {
		t.Errorf("content-length = %q for %d bytes", set["content-length"], len(want))
	}
	md := metaFields(t, resp)
	for k, v := range map[string]string{"key_id": "key_0123456789abcdef", "tier": "standard", "model": "openai/gpt-4o", "provider": "openai"} {
		if md[k] != v {
			t.Errorf("metadata %s = %v, want %s", k, md[k], v)
		}
	}
	// The client's key appears in no reply at all.
	for _, r := range []proto.Message{hdrResp, resp} {
		b, _ := proto.Marshal(r)
		if strings.Contains(string(b), goodKey) {
			t.Errorf("reply contains the client key: %v", r)
		}
	}
	if !slices.Contains(hdrResp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(), "authorization") {
		t.Error("the client's authorization is not removed")
	}

	t.Run("model that is not a chat model", func(t *testing.T) {
		h := newCatalogHarness(t, routingCatalog())
		e := h.open(t)
		e.do(chatHeaders(goodKey))
		wantImmediate(t, e.do(reqBody(chatBody("acme/embed"))), 404, "model_not_supported", "model")
	})
}

func TestStreamOptionsRewrite(t *testing.T) {
	h := newHarness(t, true)
	tests := []struct {
		name       string
		extra      []string
		wantOpts   string // stream_options in the rewritten body
		dropsUsage bool
	}{
		{"absent", []string{`"stream":true`}, `{"include_usage":true}`, true},
		{"null", []string{`"stream":true`, `"stream_options":null`}, `{"include_usage":true}`, true},
		{"false", []string{`"stream_options":{"include_usage":false}`, `"stream":true`}, `{"include_usage":true}`, true},
		{"other options kept", []string{`"stream":true`, `"stream_options":{"include_obfuscation":false}`}, `{"include_obfuscation":false,"include_usage":true}`, true},
		{"client asked", []string{`"stream":true`, `"stream_options":{"include_usage":true}`}, `{"include_usage":true}`, false},
		{"not streaming", []string{`"stream":false`}, ``, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			e.do(chatHeaders(goodKey))
			sent := chatBody("openai/gpt-4o", tt.extra...)
			cr := e.do(reqBody(sent)).GetRequestBody().GetResponse()
			// The model is rewritten in any case, for the prepared first
			// attempt (TestRouting).
			body := cr.GetBodyMutation().GetBody()
			if !tt.dropsUsage && string(body) != prepared(sent, "openai/gpt-4o", "gpt-4o-2024-08-06") {
				t.Errorf("body changed beyond the model: %s", body)
			}
			if setHeaders(cr.GetHeaderMutation())["content-length"] != strconv.Itoa(len(body)) {
				t.Error("content-length does not match the body")
			}
			if !json.Valid(body) {
				t.Fatalf("not JSON: %s", body)
			}
			if got := gjson.GetBytes(body, "stream_options").Raw; got != tt.wantOpts {
				t.Errorf("stream_options = %s, want %s", got, tt.wantOpts)
			}
			if got := gjson.GetBytes(body, "model").String(); got != "gpt-4o-2024-08-06" {
				t.Errorf("model = %q, want the first provider's upstream model", got)
			}
		})
	}
}

func TestMaskKey(t *testing.T) {
	for in, want := range map[string]string{
		goodKey:                        "sk-sy-****",
		"short":                        "****",
		"abc\"defghijklmnopqrstuvwxyz": "****",
	} {
		if got := maskKey(in); got != want {
			t.Errorf("maskKey(%q) = %q, want %q", in, got, want)
		}
	}
}
