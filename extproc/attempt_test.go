package extproc

import (
	"bytes"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// This file drives both ext_proc phases as Envoy does for one request: the
// listener's filter (downstream) on the client's request and the final
// response, and the provider cluster's filter (upstream, opened with the
// gRPC initial metadata the control plane configures) on one attempt,
// against the real fake vendors.

// Provider credentials of the routing tests.
const (
	oaKey        = "sk-oa-test-secret-0123"
	oa2Key       = "sk-oa-second-secret-4567"
	anthropicKey = "sk-ant-test-secret-0123"
	geminiKey    = "gem-test-secret-0123"
)

func routingEnv(name string) string {
	switch name {
	case "OA_KEY":
		return oaKey
	case "OA2_KEY":
		return oa2Key
	case "ANTHROPIC_KEY":
		return anthropicKey
	case "GEMINI_KEY":
		return geminiKey
	}
	return ""
}

// parseCatalog builds a catalog from the models and providers of a config
// file, with the config's defaults applied. A bad file is a bug in the test.
func parseCatalog(yaml string) *catalog.Catalog {
	cfg, err := config.Parse("t.yaml", []byte("listeners: [{name: public, address: \"127.0.0.1:8080\"}]\n"+yaml))
	if err != nil {
		panic(err)
	}
	return catalog.FromConfig(cfg)
}

// routingCatalog has providers of every kind in two regions; its base URLs
// are never dialled.
func routingCatalog() *catalog.Catalog {
	return parseCatalog(`
region: us
providers:
  - {name: oa-us, kind: openai, base_url: "https://oa.example/v1", api_key_env: OA_KEY}
  - {name: oa-asia, kind: openai, base_url: "https://oa-asia.example/v1", region: asia}
  - {name: claude, kind: anthropic, base_url: "https://api.anthropic.example", api_key_env: ANTHROPIC_KEY}
  - {name: gem, kind: gemini, base_url: "https://gemini.example/", api_key_env: GEMINI_KEY}
  - {name: local, kind: openai, base_url: "http://127.0.0.1:8091/v1"}
models:
  - id: acme/chat
    providers:
      - {provider: oa-us, upstream_model: gpt-x, priority: 1}
      - {provider: oa-asia, upstream_model: gpt-x-asia}
      - {provider: claude, upstream_model: claude-x}
      - {provider: gem, upstream_model: gemini-x, priority: 2}
  - id: acme/weighted
    routing: weighted
    providers:
      - {provider: oa-us, upstream_model: gpt-x, weight: 3}
      - {provider: claude, upstream_model: claude-x, weight: 1}
      - {provider: gem, upstream_model: gemini-x}
  - id: acme/fast
    routing: latency
    first_byte_timeout: 20s
    providers:
      - {provider: oa-us, upstream_model: gpt-x}
      - {provider: claude, upstream_model: claude-x}
      - {provider: gem, upstream_model: gemini-x}
  - id: acme/strict
    providers: [{provider: claude, upstream_model: claude-x}]
  - id: acme/lenient
    drop_unsupported: true
    providers: [{provider: claude, upstream_model: claude-x}]
  - id: acme/embed
    capabilities: [embeddings]
    tokenizer: cl100k_base
    context_window: 16
    dimensions: true
    providers:
      - {provider: local, upstream_model: text-embedding-x}
      - {provider: claude, upstream_model: claude-x}
      - {provider: gem, upstream_model: text-embedding-004}
  - id: acme/embed-small
    capabilities: [embeddings]
    context_window: 8
    providers: [{provider: local, upstream_model: small-embed}]
`)
}

// newCatalogHarness is a harness whose server has cat and the routing
// tests' credentials.
func newCatalogHarness(t *testing.T, cat *catalog.Catalog) *harness {
	t.Helper()
	h := newHarness(t, false)
	h.srv.getenv = routingEnv
	if err := h.srv.SetCatalog(cat); err != nil {
		t.Fatal(err)
	}
	return h
}

// openUpstream opens the Process stream of one attempt on provider's cluster.
func (h *harness) openUpstream(t *testing.T, provider string) *envoy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	ctx = grpcmd.AppendToOutgoingContext(ctx, catalog.PhaseMetadata, catalog.PhaseUpstream, catalog.ProviderMetadata, provider)
	s, err := h.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.CloseSend() })
	return &envoy{t: t, stream: s}
}

// headers is a header map as Envoy holds one: lower-case names, one value.
type headers map[string]string

func (hs headers) apply(m *extprocv3.HeaderMutation) {
	for _, h := range m.GetSetHeaders() {
		hs[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	for _, n := range m.GetRemoveHeaders() {
		delete(hs, n)
	}
}

func (hs headers) message(eos bool) *extprocv3.HttpHeaders {
	m := &corev3.HeaderMap{}
	for k, v := range hs {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return &extprocv3.HttpHeaders{Headers: m, EndOfStream: eos}
}

// request is the request headers message, with end_of_stream for a
// request without a body.
func (hs headers) request(eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hs.message(eos)}}
}

func reqHeadersMsg(hs headers) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hs.message(false)}}
}

func respHeadersMsg(hs headers, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hs.message(eos)}}
}

// common returns the CommonResponse of any reply kind.
func common(r *extprocv3.ProcessingResponse) *extprocv3.CommonResponse {
	switch {
	case r.GetRequestHeaders() != nil:
		return r.GetRequestHeaders().GetResponse()
	case r.GetRequestBody() != nil:
		return r.GetRequestBody().GetResponse()
	case r.GetResponseHeaders() != nil:
		return r.GetResponseHeaders().GetResponse()
	case r.GetResponseBody() != nil:
		return r.GetResponseBody().GetResponse()
	}
	return nil
}

// exchange is what one request through the mini data plane produced.
type exchange struct {
	status int
	header headers
	body   string
	// chunks are the pieces the client received of a STREAMED body.
	chunks []string
	// What reached the provider.
	upstream *upstreamCall
	// routed are the request headers as the downstream phase left them.
	routed headers
	// sent is what the upstream phase returned for the attempt's request.
	sentHeaders headers
	sentBody    []byte
	// bodyMessage: the attempt's upstream phase was sent the request body
	// (false for a prepared attempt, which skips it).
	bodyMessage bool
	// upstreamResponse: the attempt's upstream phase was sent the response
	// headers (a prepared attempt on a provider alone skips them).
	upstreamResponse bool
}

// attemptResult is one attempt's request side through the upstream filter.
type attemptResult struct {
	stream      *envoy
	body        []byte // what goes to the provider
	bodyMessage bool   // the request body message was sent to the filter
	// noResponse: the mode_override skips the response headers (and the
	// response body was NONE already), so the filter sees no more messages.
	noResponse bool
	immediate  *extprocv3.ProcessingResponse
}

// attempt runs the request side of one attempt on provider as Envoy's
// upstream ext_proc filter does: the request headers message, whose reply's
// header mutation applies to hs (Envoy's header map, which every attempt of
// a request shares) and whose mode_override may skip the body; then, unless
// skipped, the body message (body is the buffered request as the
// downstream filter left it: each attempt starts from it afresh).
// md is the dynamic metadata the downstream filter set, which Envoy
// forwards to the upstream filter (forwarding_namespaces).
func (h *harness) attempt(t *testing.T, provider string, hs headers, md *structpb.Struct, body []byte) attemptResult {
	t.Helper()
	u := h.openUpstream(t, provider)
	msg := reqHeadersMsg(hs)
	if md != nil {
		msg.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
		for ns, v := range md.GetFields() {
			msg.MetadataContext.FilterMetadata[ns] = v.GetStructValue()
		}
	}
	r := u.do(msg)
	if r.GetImmediateResponse() != nil {
		return attemptResult{stream: u, immediate: r}
	}
	if r.GetRequestHeaders() == nil {
		t.Fatalf("upstream request_headers: %v", r)
	}
	hs.apply(common(r).GetHeaderMutation())
	mo := r.GetModeOverride()
	if mo != nil && mo.GetRequestBodyMode() == filterv3.ProcessingMode_NONE {
		skip := mo.GetResponseHeaderMode() == filterv3.ProcessingMode_SKIP
		if skip && mo.GetResponseBodyMode() != filterv3.ProcessingMode_NONE {
			t.Errorf("mode_override %v asks for a response body without its headers", mo)
		}
		if cl, ok := hs["content-length"]; ok && cl != strconv.Itoa(len(body)) {
			t.Errorf("prepared attempt: content-length %q, body %d bytes", cl, len(body))
		}
		return attemptResult{stream: u, body: body, noResponse: skip}
	}
	r = u.do(reqBody(string(body)))
	if r.GetImmediateResponse() != nil {
		return attemptResult{stream: u, immediate: r, bodyMessage: true}
	}
	hs.apply(common(r).GetHeaderMutation())
	if bm := common(r).GetBodyMutation(); bm != nil {
		body = bm.GetBody()
	}
	if cl := hs["content-length"]; cl != strconv.Itoa(len(body)) {
		t.Errorf("upstream content-length %q, body %d bytes", cl, len(body))
	}
	return attemptResult{stream: u, body: body, bodyMessage: true}
}

// immediateExchange turns an immediate response into an exchange.
func immediateExchange(r *extprocv3.ProcessingResponse) exchange {
	ir := r.GetImmediateResponse()
	hs := headers{}
	hs.apply(ir.GetHeaders())
	return exchange{status: int(ir.GetStatus().GetCode()), header: hs, body: string(ir.GetBody())}
}

// roundTrip sends one request through the downstream phase, one attempt on
// provider (the first choice when "") through the upstream phase to the
// fake behind up, and the answer back through both phases, as Envoy would.
// Response bodies are read in chunks of chunkSize, so events straddle
// chunks.
// extra are more client request headers, as name/value pairs.
func (h *harness) roundTrip(t *testing.T, up *fakeUpstreams, provider, path, body string, extra ...string) exchange {
	t.Helper()
	req := headers{":method": "POST", ":path": path, ":authority": "gateway.local", ":scheme": "https",
		"authorization": "Bearer " + goodKey, "content-type": "application/json", "x-request-id": "req-rt",
		"accept-encoding": "gzip"}
	for i := 0; i+1 < len(extra); i += 2 {
		req[extra[i]] = extra[i+1]
	}
	e := h.open(t)
	r := e.do(reqHeadersMsg(req))
	if r.GetImmediateResponse() != nil {
		return immediateExchange(r)
	}
	req.apply(common(r).GetHeaderMutation())
	r = e.do(reqBody(body))
	if r.GetImmediateResponse() != nil {
		return immediateExchange(r)
	}
	req.apply(common(r).GetHeaderMutation())
	sent := []byte(body)
	if bm := common(r).GetBodyMutation(); bm != nil {
		sent = bm.GetBody()
	}
	if provider == "" {
		provider = req[catalog.FirstHeader]
	}

	routed := maps.Clone(req)

	// The attempt.
	a := h.attempt(t, provider, req, r.GetDynamicMetadata(), sent)
	if a.immediate != nil {
		return immediateExchange(a.immediate)
	}
	u, sent := a.stream, a.body
	x := exchange{routed: routed, sentHeaders: headers{}, sentBody: sent, bodyMessage: a.bodyMessage}
	for k, v := range req {
		x.sentHeaders[k] = v
	}

	hreq, err := http.NewRequest(http.MethodPost, up.url(provider)+req[":path"], bytes.NewReader(sent))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range req {
		if !strings.HasPrefix(k, ":") && k != "content-length" {
			hreq.Header.Set(k, v)
		}
	}
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer hresp.Body.Close()
	x.upstream = up.last(provider)
	resp := headers{":status": strconv.Itoa(hresp.StatusCode)}
	for k := range hresp.Header {
		resp[strings.ToLower(k)] = hresp.Header.Get(k)
	}
	raw, err := io.ReadAll(hresp.Body)
	if err != nil {
		t.Fatal(err)
	}

	// The response through the upstream filter, then the downstream one.
	var chunks []string
	pieces := func(s string) []string {
		const chunkSize = 61
		var out []string
		for len(s) > chunkSize {
			out = append(out, s[:chunkSize])
			s = s[chunkSize:]
		}
		return append(out, s)
	}
	through := func(f *envoy, in []string) []string {
		r := f.do(respHeadersMsg(resp, false))
		if r.GetResponseHeaders() == nil {
			t.Fatalf("response_headers reply: %v", r)
		}
		resp.apply(common(r).GetHeaderMutation())
		switch r.GetModeOverride().GetResponseBodyMode() {
		case filterv3.ProcessingMode_BUFFERED:
			r := f.do(respBody(strings.Join(in, ""), true))
			resp.apply(common(r).GetHeaderMutation())
			if bm := common(r).GetBodyMutation(); bm != nil {
				return []string{string(bm.GetBody())}
			}
			return []string{strings.Join(in, "")}
		case filterv3.ProcessingMode_STREAMED:
			var out []string
			for i, c := range in {
				r := f.do(respBody(c, i == len(in)-1))
				if bm := common(r).GetBodyMutation(); bm != nil {
					c = string(bm.GetBody())
				}
				out = append(out, c)
			}
			return out
		}
		return in
	}
	chunks = append(pieces(string(raw)), "")
	x.upstreamResponse = !a.noResponse
	if !a.noResponse {
		chunks = through(u, chunks)
	}
	chunks = through(e, chunks)
	x.status, _ = strconv.Atoi(resp[":status"])
	x.header = resp
	x.chunks = chunks
	x.body = strings.Join(chunks, "")
	return x
}

// upstreamCall is a request a fake received.
type upstreamCall struct {
	path   string
	header http.Header
	body   []byte
}

// fakeUpstreams are one fake vendor per provider, recording requests.
type fakeUpstreams struct {
	mu    sync.Mutex
	urls  map[string]string
	calls map[string][]*upstreamCall
}

func (f *fakeUpstreams) url(provider string) string { return f.urls[provider] }

func (f *fakeUpstreams) last(provider string) *upstreamCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls[provider]
	if len(c) == 0 {
		return nil
	}
	return c[len(c)-1]
}

// startFakes starts a fake vendor for each provider name → kind, with the
// routing tests' credentials.
func startFakes(t *testing.T, kinds map[string]string) *fakeUpstreams {
	return startFakesKeyed(t, kinds, nil)
}

// startFakesKeyed is startFakes with the credentials of some providers, by
// name, instead of their kind's.
func startFakesKeyed(t *testing.T, kinds, keys map[string]string) *fakeUpstreams {
	t.Helper()
	f := &fakeUpstreams{urls: map[string]string{}, calls: map[string][]*upstreamCall{}}
	creds := map[string]string{"openai": oaKey, "anthropic": anthropicKey, "gemini": geminiKey}
	for name, kind := range kinds {
		key := creds[kind]
		if k, ok := keys[name]; ok {
			key = k
		}
		h, err := fake.Handler(kind, fake.Options{APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			f.mu.Lock()
			f.calls[name] = append(f.calls[name], &upstreamCall{path: r.URL.RequestURI(), header: r.Header.Clone(), body: body})
			f.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
			h.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		f.urls[name] = srv.URL
	}
	return f
}

// fakeCatalog routes one model to each kind of fake.
func fakeCatalog(up *fakeUpstreams) *catalog.Catalog {
	return parseCatalog(`
providers:
  - {name: openai, kind: openai, base_url: "` + up.url("openai") + `/v1", api_key_env: OA_KEY, forward_headers: [x-fake-status, x-fake-retry-after]}
  - {name: anthropic, kind: anthropic, base_url: "` + up.url("anthropic") + `", api_key_env: ANTHROPIC_KEY, forward_headers: [x-fake-status, x-fake-retry-after]}
  - {name: gemini, kind: gemini, base_url: "` + up.url("gemini") + `", api_key_env: GEMINI_KEY, forward_headers: [x-fake-status, x-fake-retry-after]}
models:
  - {id: acme/gpt, providers: [{provider: openai, upstream_model: fake-chat-1}]}
  - {id: acme/claude, providers: [{provider: anthropic, upstream_model: claude-fake}]}
  - {id: acme/claude-lenient, drop_unsupported: true, providers: [{provider: anthropic, upstream_model: claude-fake}]}
  - {id: acme/gemini, providers: [{provider: gemini, upstream_model: gemini-fake}]}
  - id: acme/any
    providers:
      - {provider: anthropic, upstream_model: claude-fake}
      - {provider: openai, upstream_model: fake-chat-1}
      - {provider: gemini, upstream_model: gemini-fake}
  - id: acme/embed
    capabilities: [embeddings]
    tokenizer: cl100k_base
    context_window: 8191
    dimensions: true
    providers:
      - {provider: openai, upstream_model: text-embedding-fake}
      - {provider: gemini, upstream_model: text-embedding-004}
`)
}
