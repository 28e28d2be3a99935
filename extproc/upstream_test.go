package extproc

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// upstreamAttempt sends the request headers and body of one attempt on
// provider and returns the body reply.
func upstreamAttempt(t *testing.T, h *harness, provider string, hs headers, body string) (*envoy, headers, []byte, bool) {
	t.Helper()
	u := h.openUpstream(t, provider)
	r := u.do(reqHeadersMsg(hs))
	if r.GetRequestHeaders() == nil || len(common(r).GetHeaderMutation().GetSetHeaders()) != 0 {
		t.Fatalf("upstream request_headers reply: %v", r)
	}
	// Only removals: what the provider's API does not need.
	hs.apply(common(r).GetHeaderMutation())
	r = u.do(reqBody(body))
	if r.GetImmediateResponse() != nil {
		x := immediateExchange(r)
		return u, x.header, []byte(x.body), false
	}
	cr := common(r)
	if cr.GetClearRouteCache() {
		t.Error("clear_route_cache in the upstream phase")
	}
	hs.apply(cr.GetHeaderMutation())
	out := []byte(body)
	if bm := cr.GetBodyMutation(); bm != nil {
		out = bm.GetBody()
	}
	return u, hs, out, true
}

func TestUpstreamOpenAIKind(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())

	t.Run("chat: model, path and credential; a previous attempt's headers removed", func(t *testing.T) {
		// Envoy hands every attempt the same header map: this is what an
		// Anthropic attempt before this one left behind.
		hs := headers{":method": "POST", ":path": "/v1/messages", catalog.RouteHeader: "acme/chat", catalog.FirstHeader: "claude",
			"x-api-key": anthropicKey, "anthropic-version": "2023-06-01", "x-goog-api-key": geminiKey, "content-type": "application/json"}
		body := chatBody("acme/chat", `"stream":true`, `"stream_options":{"include_usage":true}`, `"metadata":{"model":"keep"}`)
		u, got, out, ok := upstreamAttempt(t, h, "oa-us", hs, body)
		if !ok {
			t.Fatalf("refused: %s", out)
		}
		for k, want := range map[string]string{":path": "/v1/chat/completions", "authorization": "Bearer " + oaKey,
			"content-length": strconv.Itoa(len(out))} {
			if got[k] != want {
				t.Errorf("%s = %q, want %q", k, got[k], want)
			}
		}
		for _, k := range []string{"x-api-key", "anthropic-version", "x-goog-api-key", catalog.RouteHeader, catalog.FirstHeader} {
			if _, ok := got[k]; ok {
				t.Errorf("%s left from the previous attempt", k)
			}
		}
		want := strings.Replace(body, `"model":"acme/chat"`, `"model":"gpt-x"`, 1)
		if string(out) != want {
			t.Errorf("body = %s\nwant   %s", out, want)
		}
		// OpenAI-kind answers need nothing: no mode override, no mutation.
		r := u.do(respHeaders("200", "text/event-stream"))
		if r.GetModeOverride() != nil || common(r) != nil {
			t.Errorf("response_headers reply = %v, want an empty one", r)
		}
		if _, n := h.srv.healthOf("oa-us").estimate(); n != 1 {
			t.Errorf("%d latency samples, want 1", n)
		}
	})

	t.Run("provider without a credential", func(t *testing.T) {
		hs := headers{":path": "/v1/chat/completions", "authorization": "Bearer left-over"}
		_, got, out, ok := upstreamAttempt(t, h, "local", hs, `{"model":"acme/embed","input":"hi"}`)
		if !ok {
			t.Fatalf("refused: %s", out)
		}
		if _, ok := got["authorization"]; ok {
			t.Error("authorization sent to a provider that takes none")
		}
		if got[":path"] != "/v1/embeddings" {
			t.Errorf(":path = %q", got[":path"])
		}
		if string(out) != `{"model":"text-embedding-x","input":"hi"}` {
			t.Errorf("body = %s", out)
		}
	})

	t.Run("version skew", func(t *testing.T) {
		for _, tc := range []struct{ name, provider, body string }{
			{"unknown provider", "gone", chatBody("acme/chat")},
			{"provider not serving the model", "local", chatBody("acme/chat")},
			{"unknown model", "oa-us", chatBody("acme/gone")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				u := h.openUpstream(t, tc.provider)
				u.do(reqHeadersMsg(headers{":path": chatPath}))
				wantImmediate(t, u.do(reqBody(tc.body)), 503, "provider_unavailable", "")
			})
		}
	})
}

func TestUpstreamTranslatedRequest(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	body := chatBody("acme/strict", `"stream":true`, `"max_tokens":50`, `"stop":["x"]`)

	t.Run("anthropic", func(t *testing.T) {
		hs := headers{":path": chatPath, "authorization": "Bearer left-over", "x-goog-api-key": "left-over"}
		_, got, out, ok := upstreamAttempt(t, h, "claude", hs, body)
		if !ok {
			t.Fatalf("refused: %s", out)
		}
		for k, want := range map[string]string{":path": "/v1/messages", "x-api-key": anthropicKey,
			"anthropic-version": "2023-06-01", "content-type": "application/json", "content-length": strconv.Itoa(len(out))} {
			if got[k] != want {
				t.Errorf("%s = %q, want %q", k, got[k], want)
			}
		}
		for _, k := range []string{"authorization", "x-goog-api-key"} {
			if _, ok := got[k]; ok {
				t.Errorf("%s not removed", k)
			}
		}
		if m := gjson.GetBytes(out, "model").String(); m != "claude-x" || gjson.GetBytes(out, "max_tokens").Int() != 50 ||
			!gjson.GetBytes(out, "stream").Bool() || gjson.GetBytes(out, "messages.0.content.0.text").String() != secretPrompt {
			t.Errorf("anthropic body = %s", out)
		}
	})

	t.Run("gemini", func(t *testing.T) {
		_, got, out, ok := upstreamAttempt(t, h, "gem", headers{":path": chatPath}, chatBody("acme/chat", `"stream":true`))
		if !ok {
			t.Fatalf("refused: %s", out)
		}
		if want := "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"; got[":path"] != want {
			t.Errorf(":path = %q, want %q (base URL path is /)", got[":path"], want)
		}
		if got["x-goog-api-key"] != geminiKey {
			t.Errorf("x-goog-api-key = %q", got["x-goog-api-key"])
		}
		if !gjson.GetBytes(out, "contents").IsArray() || gjson.GetBytes(out, "model").Exists() {
			t.Errorf("gemini body = %s", out)
		}
	})

	t.Run("unsupported parameter", func(t *testing.T) {
		for _, tc := range []struct {
			model, param string
			refused      bool
		}{
			{"acme/strict", "n", true},
			{"acme/lenient", "n", false},
		} {
			u := h.openUpstream(t, "claude")
			u.do(reqHeadersMsg(headers{":path": chatPath}))
			r := u.do(reqBody(chatBody(tc.model, `"n":2`)))
			if tc.refused {
				wantImmediate(t, r, 400, "unsupported_value", tc.param)
			} else if r.GetRequestBody() == nil || gjson.GetBytes(common(r).GetBodyMutation().GetBody(), "n").Exists() {
				t.Errorf("%s: want n dropped, got %v", tc.model, r)
			}
		}
	})

	t.Run("anthropic cannot embed", func(t *testing.T) {
		u := h.openUpstream(t, "claude")
		u.do(reqHeadersMsg(headers{":path": embeddingsPath}))
		wantImmediate(t, u.do(reqBody(`{"model":"acme/embed","input":"hi"}`)), 502, "provider_unsupported_operation", "")
	})
}

func TestUpstreamResponseModes(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	for _, tc := range []struct {
		name, status, ctype string
		stream              bool
		want                filterv3.ProcessingMode_BodySendMode
		wantType            string
	}{
		{"stream", "200", "text/event-stream", true, filterv3.ProcessingMode_STREAMED, "text/event-stream"},
		{"json", "200", "application/json; charset=UTF-8", false, filterv3.ProcessingMode_BUFFERED, "application/json"},
		{"error of a stream", "429", "text/event-stream", true, filterv3.ProcessingMode_BUFFERED, "application/json"},
		{"html error", "502", "text/html", false, filterv3.ProcessingMode_BUFFERED, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := []string{}
			if tc.stream {
				extra = append(extra, `"stream":true`)
			}
			u, _, _, _ := upstreamAttempt(t, h, "claude", headers{":path": chatPath}, chatBody("acme/strict", extra...))
			r := u.do(respHeaders(tc.status, tc.ctype, "content-length", "123"))
			mo := r.GetModeOverride()
			if mo.GetResponseBodyMode() != tc.want || mo.GetRequestBodyMode() != filterv3.ProcessingMode_BUFFERED ||
				mo.GetResponseHeaderMode() != filterv3.ProcessingMode_SEND {
				t.Errorf("mode override = %v", mo)
			}
			hm := common(r).GetHeaderMutation()
			if setHeaders(hm)["content-type"] != tc.wantType || !slices.Contains(hm.GetRemoveHeaders(), "content-length") {
				t.Errorf("header mutation = %v", hm)
			}
		})
	}
}

func TestUpstreamRoundTrips(t *testing.T) {
	up := startFakes(t, map[string]string{"openai": "openai", "anthropic": "anthropic", "gemini": "gemini"})
	h := newCatalogHarness(t, fakeCatalog(up))

	for _, tc := range []struct {
		model, provider, path, auth, authValue string
	}{
		{"acme/gpt", "openai", "/v1/chat/completions", "authorization", "Bearer " + oaKey},
		{"acme/claude", "anthropic", "/v1/messages", "x-api-key", anthropicKey},
		{"acme/gemini", "gemini", "/v1beta/models/gemini-fake:generateContent", "x-goog-api-key", geminiKey},
	} {
		t.Run(tc.model+" JSON", func(t *testing.T) {
			x := h.roundTrip(t, up, "", chatPath, chatBody(tc.model, `"max_tokens":100`))
			if x.status != 200 {
				t.Fatalf("status %d: %s", x.status, x.body)
			}
			if x.upstream.path != tc.path || x.upstream.header.Get(tc.auth) != tc.authValue {
				t.Errorf("upstream got %s with %s %q", x.upstream.path, tc.auth, x.upstream.header.Get(tc.auth))
			}
			if x.upstream.header.Get("authorization") != "" && tc.auth != "authorization" {
				t.Error("authorization reached a provider that does not use it")
			}
			var c struct {
				Object  string
				Model   string
				Choices []struct {
					Message      struct{ Role, Content string }
					FinishReason string `json:"finish_reason"`
				}
			}
			if err := json.Unmarshal([]byte(x.body), &c); err != nil {
				t.Fatalf("%v: %s", err, x.body)
			}
			if c.Object != "chat.completion" || len(c.Choices) != 1 || c.Choices[0].Message.Content != "Echo: "+secretPrompt ||
				c.Choices[0].FinishReason != "stop" {
				t.Errorf("completion = %s", x.body)
			}
			if gjson.Get(x.body, "usage.total_tokens").Int() == 0 {
				t.Errorf("no usage: %s", x.body)
			}
			if cl := x.header["content-length"]; cl != "" && cl != strconv.Itoa(len(x.body)) {
				t.Errorf("content-length %s for %d bytes", cl, len(x.body))
			}
			if ct := x.header["content-type"]; !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content-type %q", ct)
			}
			waitFor(t, func() bool { return len(h.rec.all()) > 0 })
			rec := h.rec.all()
			if got := rec[len(rec)-1]; got.model != tc.model || got.u.PromptTokens == 0 || got.u.CompletionTokens == 0 {
				t.Errorf("recorded %+v", got)
			}
		})

		t.Run(tc.model+" stream", func(t *testing.T) {
			for _, usage := range []bool{false, true} {
				extra := []string{`"stream":true`}
				if usage {
					extra = append(extra, `"stream_options":{"include_usage":true}`)
				}
				x := h.roundTrip(t, up, "", chatPath, chatBody(tc.model, extra...))
				if x.status != 200 || !strings.HasPrefix(x.header["content-type"], "text/event-stream") {
					t.Fatalf("status %d %q: %s", x.status, x.header["content-type"], x.body)
				}
				if _, ok := x.header["content-length"]; ok {
					t.Error("content-length on a translated stream")
				}
				var text strings.Builder
				var sawUsage, sawRole bool
				finish := ""
				events := strings.Split(strings.TrimSpace(x.body), "\n\n")
				if events[len(events)-1] != "data: [DONE]" {
					t.Fatalf("stream does not end with [DONE]: %q", x.body)
				}
				for _, ev := range events[:len(events)-1] {
					js := strings.TrimPrefix(ev, "data: ")
					if !gjson.Valid(js) {
						t.Fatalf("event %q", ev)
					}
					if gjson.Get(js, "usage").IsObject() {
						sawUsage = true
					}
					if m := gjson.Get(js, "model").String(); m != tc.model && tc.provider != "openai" {
						t.Errorf("chunk model %q", m)
					}
					sawRole = sawRole || gjson.Get(js, "choices.0.delta.role").String() == "assistant"
					text.WriteString(gjson.Get(js, "choices.0.delta.content").String())
					if f := gjson.Get(js, "choices.0.finish_reason").String(); f != "" {
						finish = f
					}
				}
				if !sawRole || text.String() != "Echo: "+secretPrompt || finish != "stop" {
					t.Errorf("usage %v: role %v text %q finish %q", usage, sawRole, text.String(), finish)
				}
				if sawUsage != usage {
					t.Errorf("include_usage %v but usage chunk seen %v", usage, sawUsage)
				}
			}
		})

		t.Run(tc.model+" tool call round trip", func(t *testing.T) {
			tools := `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
			x := h.roundTrip(t, up, "", chatPath, chatBody(tc.model, tools))
			call := gjson.Get(x.body, "choices.0.message.tool_calls.0")
			if x.status != 200 || call.Get("function.name").String() != "get_weather" ||
				gjson.Get(x.body, "choices.0.finish_reason").String() != "tool_calls" {
				t.Fatalf("status %d: %s", x.status, x.body)
			}
			follow := `{"model":"` + tc.model + `","messages":[{"role":"user","content":"weather?"},` +
				`{"role":"assistant","content":null,"tool_calls":[` + call.Raw + `]},` +
				`{"role":"tool","tool_call_id":` + strconv.Quote(call.Get("id").String()) + `,"content":"sunny"}],` + tools + `,"tool_choice":"none"}`
			x = h.roundTrip(t, up, "", chatPath, follow)
			if got := gjson.Get(x.body, "choices.0.message.content").String(); x.status != 200 || got != "The tool returned: sunny" {
				t.Errorf("status %d: %s", x.status, x.body)
			}
		})
	}

	t.Run("provider error translated and cooled down", func(t *testing.T) {
		x := h.roundTrip(t, up, "", chatPath, chatBody("acme/claude"), "x-fake-status", "429", "x-fake-retry-after", "30")
		if x.status != 429 || gjson.Get(x.body, "error.message").String() == "" || x.header["retry-after"] != "30" {
			t.Errorf("status %d retry-after %q: %s", x.status, x.header["retry-after"], x.body)
		}
		if !h.srv.healthOf("anthropic").cooling(time.Now().UnixNano()) {
			t.Error("provider not cooling down after 429 retry-after")
		}
		// The next request for a model with another provider starts there.
		x = h.roundTrip(t, up, "", chatPath, chatBody("acme/any"))
		if x.status != 200 || x.upstream == nil || x.upstream.path != "/v1/chat/completions" {
			t.Errorf("acme/any went to %+v", x.upstream)
		}
	})

	t.Run("gemini error translated", func(t *testing.T) {
		x := h.roundTrip(t, up, "", chatPath, chatBody("acme/gemini"), "x-fake-status", "503")
		if x.status != 503 || gjson.Get(x.body, "error.type").String() != "server_error" {
			t.Errorf("status %d: %s", x.status, x.body)
		}
	})

	t.Run("embeddings", func(t *testing.T) {
		body := `{"model":"acme/embed","input":["one text","another text"],"dimensions":8`
		var floats [][]float64
		for _, provider := range []string{"openai", "gemini"} {
			for _, format := range []string{"float", "base64"} {
				x := h.roundTrip(t, up, provider, embeddingsPath, body+`,"encoding_format":"`+format+`"}`)
				if x.status != 200 {
					t.Fatalf("%s %s: status %d: %s", provider, format, x.status, x.body)
				}
				data := gjson.Get(x.body, "data").Array()
				if len(data) != 2 || gjson.Get(x.body, "usage.prompt_tokens").Int() == 0 {
					t.Fatalf("%s %s: %s", provider, format, x.body)
				}
				var vs [][]float64
				for i, d := range data {
					if d.Get("index").Int() != int64(i) || d.Get("object").String() != "embedding" {
						t.Errorf("%s: datum %d = %s", provider, i, d.Raw)
					}
					vs = append(vs, vector(t, d.Get("embedding")))
				}
				if len(vs[0]) != 8 {
					t.Errorf("%s %s: %d dimensions, want 8", provider, format, len(vs[0]))
				}
				floats = append(floats, vs...)
			}
		}
		// Float and base64 agree, and both fakes embed a text alike.
		for i := 2; i < len(floats); i++ {
			for j := range floats[i] {
				if float32(floats[i][j]) != float32(floats[i%2][j]) {
					t.Fatalf("vector %d differs from vector %d at %d: %v vs %v", i, i%2, j, floats[i][j], floats[i%2][j])
				}
			}
		}
		rec := h.rec.all()
		if got := rec[len(rec)-1]; got.model != "acme/embed" || got.u.PromptTokens == 0 || got.u.TotalTokens != got.u.PromptTokens {
			t.Errorf("recorded %+v", got)
		}
	})
}

// vector reads an embedding given as floats or as base64 float32s.
func vector(t *testing.T, v gjson.Result) []float64 {
	t.Helper()
	if v.Type == gjson.String {
		b, err := base64.StdEncoding.DecodeString(v.Str)
		if err != nil || len(b)%4 != 0 {
			t.Fatalf("base64 embedding %q: %v", v.Str, err)
		}
		out := make([]float64, len(b)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return out
	}
	var out []float64
	for _, x := range v.Array() {
		out = append(out, x.Float())
	}
	return out
}

func TestUpstreamHealth(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	body := chatBody("acme/fast")

	t.Run("attempt without an answer is a first_byte_timeout sample", func(t *testing.T) {
		u, _, _, _ := upstreamAttempt(t, h, "gem", headers{":path": chatPath}, body)
		_ = u.stream.CloseSend() // Envoy gives up: per-try timeout, reset
		_, _ = u.stream.Recv()
		ph := h.srv.healthOf("gem")
		waitFor(t, func() bool { _, n := ph.estimate(); return n == 1 })
		if est, _ := ph.estimate(); est != 20*time.Second {
			t.Errorf("estimate %v, want the model's first_byte_timeout 20s", est)
		}
	})

	t.Run("5xx is a failure sample, 4xx a latency sample", func(t *testing.T) {
		u, _, _, _ := upstreamAttempt(t, h, "oa-us", headers{":path": chatPath}, body)
		u.do(respHeaders("500", "application/json"))
		if est, _ := h.srv.healthOf("oa-us").estimate(); est != 20*time.Second {
			t.Errorf("estimate after a 500: %v", est)
		}
		u, _, _, _ = upstreamAttempt(t, h, "claude", headers{":path": chatPath}, body)
		u.do(respHeaders("400", "application/json"))
		if est, _ := h.srv.healthOf("claude").estimate(); est <= 0 || est > 5*time.Second {
			t.Errorf("estimate after a quick 400: %v", est)
		}
	})

	t.Run("cooldowns", func(t *testing.T) {
		for _, tc := range []struct {
			name, status string
			hdrs         []string
			cools        bool
		}{
			{"429 retry-after seconds", "429", []string{"retry-after", "30"}, true},
			{"503 retry-after-ms", "503", []string{"retry-after-ms", "1500"}, true},
			{"503 retry-after date", "503", []string{"retry-after", time.Now().Add(time.Minute).UTC().Format(http.TimeFormat)}, true},
			{"429 without retry-after", "429", nil, false},
			{"500 with retry-after", "500", []string{"retry-after", "30"}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := newCatalogHarness(t, routingCatalog())
				u, _, _, _ := upstreamAttempt(t, h, "claude", headers{":path": chatPath}, chatBody("acme/chat"))
				u.do(respHeaders(tc.status, "application/json", tc.hdrs...))
				if got := h.srv.healthOf("claude").cooling(time.Now().UnixNano()); got != tc.cools {
					t.Fatalf("cooling = %v, want %v", got, tc.cools)
				}
				// The downstream phase's next first choice skips it.
				e := h.open(t)
				e.do(chatHeaders(goodKey))
				want := "claude"
				if tc.cools {
					want = "oa-us"
				}
				if got := setHeaders(common(e.do(reqBody(chatBody("acme/chat")))).GetHeaderMutation())[catalog.FirstHeader]; got != want {
					t.Errorf("first = %q, want %q", got, want)
				}
			})
		}
	})

	t.Run("health survives a catalog update", func(t *testing.T) {
		before := h.srv.healthOf("gem")
		if err := h.srv.SetCatalog(routingCatalog()); err != nil {
			t.Fatal(err)
		}
		if h.srv.routes.Load().providers["gem"].health != before {
			t.Error("a new catalog forgot the provider's health")
		}
	})
}
