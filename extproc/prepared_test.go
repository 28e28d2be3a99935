package extproc

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// The prepared first attempt (request.go, route; upstream.go,
// preparedAttempt), driven through both phases as Envoy drives them.

func TestPreparedFirstAttempt(t *testing.T) {
	up := startFakes(t, map[string]string{"openai": "openai", "anthropic": "anthropic", "gemini": "gemini"})
	h := newCatalogHarness(t, fakeCatalog(up))

	for _, tc := range []struct {
		name, path, body, upstreamPath, upstreamModel string
	}{
		{"chat", chatPath, chatBody("acme/gpt", `"max_tokens":100`), "/v1/chat/completions", "fake-chat-1"},
		{"chat stream", chatPath, chatBody("acme/gpt", `"stream":true`), "/v1/chat/completions", "fake-chat-1"},
		{"chat with a query string", chatPath + "?api-version=1", chatBody("acme/gpt"), "/v1/chat/completions", "fake-chat-1"},
		{"embeddings", embeddingsPath, `{"input":"one text","model":"acme/embed"}`, "/v1/embeddings", "text-embedding-fake"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, before := h.srv.healthOf("openai").estimate()
			x := h.roundTrip(t, up, "", tc.path, tc.body)
			if x.status != 200 {
				t.Fatalf("status %d: %s", x.status, x.body)
			}
			// One upstream ext_proc message for the request: the headers.
			if x.bodyMessage {
				t.Error("the prepared attempt's upstream phase was sent the request body")
			}
			got := x.upstream
			if got.path != tc.upstreamPath || got.header.Get("authorization") != "Bearer "+oaKey ||
				gjson.GetBytes(got.body, "model").String() != tc.upstreamModel {
				t.Errorf("provider got %s, authorization %q, body %s", got.path, got.header.Get("authorization"), got.body)
			}
			// Only the model differs from what the client sent.
			if want := prepared(tc.body, gjson.Get(tc.body, "model").String(), tc.upstreamModel); tc.name != "chat stream" && string(got.body) != want {
				t.Errorf("provider got %s, want %s", got.body, want)
			}
			if strings.Contains(string(got.body), "acme/") {
				t.Errorf("the canonical model reached the provider: %s", got.body)
			}
			// The response headers still reach the upstream phase.
			if _, n := h.srv.healthOf("openai").estimate(); n != before+1 {
				t.Errorf("latency samples %d, want %d", n, before+1)
			}
		})
	}

	t.Run("translated first choice is not prepared", func(t *testing.T) {
		x := h.roundTrip(t, up, "", chatPath, chatBody("acme/claude"))
		if x.status != 200 || !x.bodyMessage {
			t.Fatalf("status %d, body message %v: %s", x.status, x.bodyMessage, x.body)
		}
		if _, ok := x.routed[preparedHeader]; ok {
			t.Errorf("%s set for an Anthropic first choice", preparedHeader)
		}
		if x.upstream.header.Get("x-api-key") != anthropicKey || gjson.GetBytes(x.upstream.body, "model").String() != "claude-fake" {
			t.Errorf("anthropic got %s with x-api-key %q", x.upstream.body, x.upstream.header.Get("x-api-key"))
		}
	})
}

// TestPreparedAttemptAlone: a provider no model chooses between it and
// another has no use for the response headers (its health is never read),
// so its prepared attempts skip that message; a provider that some model
// compares with others still gets it, for its latency samples and
// cooldowns, even on the attempts of a model it serves alone.
func TestPreparedAttemptAlone(t *testing.T) {
	up := startFakes(t, map[string]string{"solo": "openai", "oa1": "openai", "oa2": "openai"})
	h := newCatalogHarness(t, parseCatalog(`
providers:
  - {name: solo, kind: openai, base_url: "`+up.url("solo")+`/v1", api_key_env: OA_KEY}
  - {name: oa1, kind: openai, base_url: "`+up.url("oa1")+`/v1", api_key_env: OA_KEY}
  - {name: oa2, kind: openai, base_url: "`+up.url("oa2")+`/v1", api_key_env: OA2_KEY}
models:
  - {id: acme/solo, providers: [{provider: solo, upstream_model: fake-chat-1}]}
  - {id: acme/one, providers: [{provider: oa1, upstream_model: fake-chat-1}]}
  - id: acme/pair
    providers:
      - {provider: oa1, upstream_model: fake-chat-1, priority: 1}
      - {provider: oa2, upstream_model: fake-chat-1, priority: 2}
`))
	for _, tc := range []struct {
		model, provider string
		response        bool
	}{
		{"acme/solo", "solo", false},
		{"acme/one", "oa1", true},
		{"acme/pair", "oa1", true},
	} {
		t.Run(tc.model, func(t *testing.T) {
			_, before := h.srv.healthOf(tc.provider).estimate()
			x := h.roundTrip(t, up, "", chatPath, chatBody(tc.model))
			if x.status != 200 || x.bodyMessage {
				t.Fatalf("status %d, body message %v: %s", x.status, x.bodyMessage, x.body)
			}
			if x.upstream == nil || x.routed[catalog.FirstHeader] != tc.provider {
				t.Fatalf("first choice %q, want %s", x.routed[catalog.FirstHeader], tc.provider)
			}
			if x.upstreamResponse != tc.response {
				t.Errorf("upstream response headers message %v, want %v", x.upstreamResponse, tc.response)
			}
			want := before
			if tc.response {
				want++
			}
			if _, n := h.srv.healthOf(tc.provider).estimate(); n != want {
				t.Errorf("latency samples %d, want %d", n, want)
			}
		})
	}
	// The stream ends after the request headers reply: no failure sample
	// for an attempt whose answer the filter was never going to see.
	if _, n := h.srv.healthOf("solo").estimate(); n != 0 {
		t.Errorf("solo has %d samples, want none", n)
	}
}

// failoverCatalog has two OpenAI-kind providers with different credentials
// (the second under a base path), an Anthropic and a Gemini one.
func failoverCatalog(up *fakeUpstreams) *catalog.Catalog {
	return parseCatalog(`
providers:
  - {name: oa1, kind: openai, base_url: "` + up.url("oa1") + `/v1", api_key_env: OA_KEY}
  - {name: oa2, kind: openai, base_url: "` + up.url("oa2") + `/alt/v1", api_key_env: OA2_KEY}
  - {name: anthropic, kind: anthropic, base_url: "` + up.url("anthropic") + `", api_key_env: ANTHROPIC_KEY}
  - {name: gemini, kind: gemini, base_url: "` + up.url("gemini") + `", api_key_env: GEMINI_KEY}
models:
  - id: acme/multi
    providers:
      - {provider: oa1, upstream_model: model-one, priority: 1}
      - {provider: oa2, upstream_model: model-two-longer-name, priority: 2}
      - {provider: anthropic, upstream_model: claude-fake, priority: 3}
      - {provider: gemini, upstream_model: gemini-fake, priority: 4}
`)
}

// failover sends a request through the downstream phase, then attempts on
// each of providers in turn, as Envoy's router fails over: every attempt
// shares the request's header map and starts from the body the downstream
// phase left. All but the last attempt fail before the provider answers
// (the provider is not called); the last is sent to its fake, and its
// request, with what each attempt's upstream phase did, is returned.
func (h *harness) failover(t *testing.T, up *fakeUpstreams, body string, providers ...string) (*upstreamCall, []attemptResult, headers) {
	t.Helper()
	req := headers{":method": "POST", ":path": chatPath, ":authority": "gateway.local", ":scheme": "https",
		"authorization": "Bearer " + goodKey, "content-type": "application/json", "x-request-id": "req-fo"}
	e := h.open(t)
	req.apply(common(e.do(reqHeadersMsg(req))).GetHeaderMutation())
	r := e.do(reqBody(body))
	if r.GetRequestBody() == nil {
		t.Fatalf("downstream refused: %v", r)
	}
	req.apply(common(r).GetHeaderMutation())
	buffered := []byte(body)
	if bm := common(r).GetBodyMutation(); bm != nil {
		buffered = bm.GetBody()
	}
	var results []attemptResult
	for i, p := range providers {
		a := h.attempt(t, p, req, r.GetDynamicMetadata(), bytes.Clone(buffered))
		if a.immediate != nil {
			t.Fatalf("attempt %d on %s refused: %v", i+1, p, a.immediate)
		}
		results = append(results, a)
		if i < len(providers)-1 {
			_ = a.stream.stream.CloseSend() // failed: connect failure, reset
			continue
		}
		// The fakes serve /v1 at their root; oa2's base path is only in
		// :path.
		hreq, err := http.NewRequest(http.MethodPost, up.url(p)+strings.TrimPrefix(req[":path"], "/alt"), bytes.NewReader(a.body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range req {
			if !strings.HasPrefix(k, ":") && k != "content-length" {
				hreq.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s answered %d: %s", p, resp.StatusCode, out)
		}
	}
	return up.last(providers[len(providers)-1]), results, req
}

func TestPreparedFailover(t *testing.T) {
	up := startFakesKeyed(t, map[string]string{"oa1": "openai", "oa2": "openai", "anthropic": "anthropic", "gemini": "gemini"},
		map[string]string{"oa2": oa2Key})
	h := newCatalogHarness(t, failoverCatalog(up))
	body := chatBody("acme/multi", `"stream":true`, `"max_tokens":50`)

	// noSecretOf fails if a provider credential other than want's reached
	// the provider.
	noOtherSecret := func(t *testing.T, got *upstreamCall, want string) {
		t.Helper()
		var all strings.Builder
		for k, vs := range got.header {
			all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		all.Write(got.body)
		for _, secret := range []string{oaKey, oa2Key, anthropicKey, geminiKey, goodKey} {
			if secret != want && strings.Contains(all.String(), secret) {
				t.Errorf("a credential that is not the provider's reached it:\n%s", all.String())
			}
		}
	}

	t.Run("first attempt prepared", func(t *testing.T) {
		got, as, _ := h.failover(t, up, body, "oa1")
		if as[0].bodyMessage {
			t.Error("the prepared attempt's upstream phase was sent the body")
		}
		if got.path != "/v1/chat/completions" || got.header.Get("authorization") != "Bearer "+oaKey ||
			gjson.GetBytes(got.body, "model").String() != "model-one" || !gjson.GetBytes(got.body, "stream_options.include_usage").Bool() {
			t.Errorf("oa1 got %s %q %s", got.path, got.header.Get("authorization"), got.body)
		}
		noOtherSecret(t, got, oaKey)
	})

	t.Run("to another OpenAI-kind provider", func(t *testing.T) {
		got, as, _ := h.failover(t, up, body, "oa1", "oa2")
		if as[0].bodyMessage || !as[1].bodyMessage {
			t.Errorf("body messages: prepared attempt %v, failover attempt %v", as[0].bodyMessage, as[1].bodyMessage)
		}
		// The model comes from the canonical id, not the prepared body.
		if as[1].stream == nil || got.path != "/v1/chat/completions" || got.header.Get("authorization") != "Bearer "+oa2Key ||
			gjson.GetBytes(got.body, "model").String() != "model-two-longer-name" {
			t.Errorf("oa2 got %s %q %s", got.path, got.header.Get("authorization"), got.body)
		}
		if want := strings.Replace(string(as[0].body), `"model":"model-one"`, `"model":"model-two-longer-name"`, 1); string(got.body) != want {
			t.Errorf("oa2 got %s, want %s", got.body, want)
		}
		noOtherSecret(t, got, oa2Key)
	})

	for _, tc := range []struct{ provider, key, keyHeader, model string }{
		{"anthropic", anthropicKey, "x-api-key", "claude-fake"},
		{"gemini", geminiKey, "x-goog-api-key", ""},
	} {
		t.Run("to "+tc.provider, func(t *testing.T) {
			got, as, _ := h.failover(t, up, body, "oa1", tc.provider)
			if !as[1].bodyMessage {
				t.Error("the translated attempt's upstream phase was not sent the body")
			}
			if got.header.Get(tc.keyHeader) != tc.key || got.header.Get("authorization") != "" {
				t.Errorf("%s got %s %q, authorization %q", tc.provider, tc.keyHeader, got.header.Get(tc.keyHeader), got.header.Get("authorization"))
			}
			// The translators take the upstream model from the catalog;
			// the prepared body's model-one goes nowhere.
			if m := gjson.GetBytes(got.body, "model").String(); m != tc.model || strings.Contains(string(got.body), "model-one") {
				t.Errorf("%s got %s", tc.provider, got.body)
			}
			if tc.provider == "gemini" && !strings.Contains(got.path, "/models/gemini-fake:") {
				t.Errorf("gemini path %s", got.path)
			}
			noOtherSecret(t, got, tc.key)
		})
	}

	// Attempts on other providers before the prepared one (its cluster
	// ejected, or a data plane that routes by priority): they rewrote the
	// shared header map (content-length above all), so they withdraw the
	// prepared header, and the prepared provider's attempt reads the body
	// like any other.
	for _, before := range [][]string{{"anthropic"}, {"oa2"}, {"gemini", "oa2"}} {
		t.Run("to the prepared provider after "+strings.Join(before, ", "), func(t *testing.T) {
			got, as, hs := h.failover(t, up, body, append(slices.Clone(before), "oa1")...)
			if last := as[len(as)-1]; !last.bodyMessage {
				t.Error("the prepared provider's attempt skipped the body after another attempt")
			}
			if _, ok := hs[preparedHeader]; ok {
				t.Errorf("%s still set after another provider's attempt", preparedHeader)
			}
			if got.path != "/v1/chat/completions" || got.header.Get("authorization") != "Bearer "+oaKey ||
				gjson.GetBytes(got.body, "model").String() != "model-one" {
				t.Errorf("oa1 got %s %q %s", got.path, got.header.Get("authorization"), got.body)
			}
			for _, k := range []string{"x-api-key", "anthropic-version", "x-goog-api-key"} {
				if _, ok := hs[k]; ok {
					t.Errorf("%s left from an earlier attempt", k)
				}
			}
			noOtherSecret(t, got, oaKey)
		})
	}

	// The prepared attempt removed the prepared mark with the other
	// internal headers (no vendor sees them): a retry on the same provider
	// reads the body, like any attempt after the first.
	t.Run("retry on the prepared provider", func(t *testing.T) {
		got, as, hs := h.failover(t, up, body, "oa1", "oa1")
		if as[0].bodyMessage || !as[1].bodyMessage {
			t.Errorf("body messages: prepared attempt %v, retry %v", as[0].bodyMessage, as[1].bodyMessage)
		}
		for k := range hs {
			if catalog.IsInternalHeader(k) {
				t.Errorf("%s reached the provider", k)
			}
		}
		if gjson.GetBytes(got.body, "model").String() != "model-one" || got.header.Get("authorization") != "Bearer "+oaKey {
			t.Errorf("oa1 got %q %s", got.header.Get("authorization"), got.body)
		}
	})
}

func TestPreparedHeaderForged(t *testing.T) {
	up := startFakes(t, map[string]string{"openai": "openai", "anthropic": "anthropic", "gemini": "gemini"})
	h := newCatalogHarness(t, fakeCatalog(up))

	// acme/any's first choice is Anthropic: nothing is prepared. A client
	// that claims the body is prepared for openai would, if believed, have
	// the canonical id reach openai on a failover. The claim is removed in
	// the request headers phase.
	e := h.open(t)
	r := e.do(chatHeaders(goodKey, preparedHeader, "openai"))
	if !slices.Contains(common(r).GetHeaderMutation().GetRemoveHeaders(), preparedHeader) {
		t.Fatalf("forged %s not removed: %v", preparedHeader, r)
	}
	x := h.roundTrip(t, up, "openai", chatPath, chatBody("acme/any"), preparedHeader, "openai")
	if x.status != 200 || !x.bodyMessage {
		t.Fatalf("status %d, body message %v: %s", x.status, x.bodyMessage, x.body)
	}
	if m := gjson.GetBytes(x.upstream.body, "model").String(); m != "fake-chat-1" {
		t.Errorf("openai got model %q", m)
	}
}

func TestPreparedFallsBack(t *testing.T) {
	cat := routingCatalog()
	both := cat.Models[0]
	both.ID, both.Capabilities = "acme/both", []string{"chat", "embeddings"}
	cat.Models = append(cat.Models, both)
	h := newCatalogHarness(t, cat)
	body := prepared(chatBody("acme/chat"), "acme/chat", "gpt-x")
	for _, tc := range []struct {
		name, provider string
		hs             headers
	}{
		// A model with both operations, and an earlier attempt set another
		// provider's path: the body tells which.
		{"path of an earlier attempt", "oa-us", headers{":path": "/v1/messages", catalog.RouteHeader: "acme/both", preparedHeader: "oa-us"}},
		// Version skew: this catalog does not route the model there.
		{"model not routed there", "local", headers{":path": chatPath, catalog.RouteHeader: "acme/chat", preparedHeader: "local"}},
		// Prepared for another provider.
		{"another provider's", "oa-asia", headers{":path": chatPath, catalog.RouteHeader: "acme/chat", preparedHeader: "oa-us"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := h.openUpstream(t, tc.provider)
			// Not prepared, and later attempts are told so: the internal
			// headers are removed, as on every attempt.
			r := u.do(reqHeadersMsg(tc.hs))
			if hm := common(r).GetHeaderMutation(); r.GetModeOverride() != nil || len(hm.GetSetHeaders()) != 0 ||
				!slices.Equal(sorted(hm.GetRemoveHeaders()), []string{catalog.RouteHeader, preparedHeader}) {
				t.Fatalf("request headers reply %v, want only %s and %s removed", r, catalog.RouteHeader, preparedHeader)
			}
			r = u.do(reqBody(body))
			if tc.provider == "local" {
				wantImmediate(t, r, 503, "provider_unavailable", "")
				return
			}
			// Unchanged (the model was prepared for this provider), the
			// body does not travel back.
			out := []byte(body)
			if bm := common(r).GetBodyMutation(); bm != nil {
				out = bm.GetBody()
			}
			if want := map[string]string{"oa-us": "gpt-x", "oa-asia": "gpt-x-asia"}[tc.provider]; gjson.GetBytes(out, "model").String() != want {
				t.Errorf("body %s, want model %s", out, want)
			}
		})
	}

	t.Run("prepared reply", func(t *testing.T) {
		u := h.openUpstream(t, "oa-us")
		hs := headers{":path": chatPath + "?x=1", catalog.RouteHeader: "acme/chat", preparedHeader: "oa-us",
			"x-api-key": "left-over", "anthropic-version": "2023-06-01", "x-goog-api-key": "left-over"}
		r := u.do(reqHeadersMsg(hs))
		mo := r.GetModeOverride()
		if mo.GetRequestBodyMode() != filterv3.ProcessingMode_NONE || mo.GetResponseHeaderMode() != filterv3.ProcessingMode_SEND ||
			mo.GetResponseBodyMode() != filterv3.ProcessingMode_NONE {
			t.Fatalf("mode_override = %v", mo)
		}
		hs.apply(common(r).GetHeaderMutation())
		if hs[":path"] != "/v1/chat/completions" || hs["authorization"] != "Bearer "+oaKey || hs["content-type"] != "application/json" {
			t.Errorf("headers = %v", hs)
		}
		for _, k := range []string{"x-api-key", "anthropic-version", "x-goog-api-key"} {
			if _, ok := hs[k]; ok {
				t.Errorf("%s not removed", k)
			}
		}
		// An OpenAI-kind answer needs nothing.
		if r := u.do(respHeaders("200", "application/json")); r.GetModeOverride() != nil || common(r) != nil {
			t.Errorf("response headers reply %v", r)
		}
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
