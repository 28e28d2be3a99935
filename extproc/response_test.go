package extproc

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// routed opens a stream and takes it through the request phases.
func routed(t *testing.T, h *harness, body string) *envoy {
	t.Helper()
	e := h.open(t)
	if r := e.do(chatHeaders(goodKey)); r.GetRequestHeaders() == nil {
		t.Fatalf("headers rejected: %v", r)
	}
	if r := e.do(reqBody(body)); r.GetRequestBody() == nil {
		t.Fatalf("body rejected: %v", r)
	}
	return e
}

func TestResponseHeadersMode(t *testing.T) {
	h := newHarness(t, true)
	tests := []struct {
		status, ctype string
		extra         []string
		want          filterv3.ProcessingMode_BodySendMode
		override      bool
	}{
		{"200", "text/event-stream", nil, filterv3.ProcessingMode_STREAMED, true},
		{"200", "text/event-stream; charset=utf-8", nil, filterv3.ProcessingMode_STREAMED, true},
		{"200", "application/json", nil, filterv3.ProcessingMode_BUFFERED, true},
		{"200", "Application/JSON; charset=utf-8", nil, filterv3.ProcessingMode_BUFFERED, true},
		{"200", "text/plain", nil, 0, false},
		{"200", "application/json", []string{"content-encoding", "gzip"}, 0, false},
		{"500", "text/html", nil, filterv3.ProcessingMode_BUFFERED, true},
		{"503", "text/event-stream", nil, filterv3.ProcessingMode_BUFFERED, true},
	}
	for _, tt := range tests {
		t.Run(tt.status+" "+tt.ctype+" "+strings.Join(tt.extra, ":"), func(t *testing.T) {
			e := routed(t, h, chatBody("openai/gpt-4o", `"stream":true`))
			resp := e.do(respHeaders(tt.status, tt.ctype, tt.extra...))
			if resp.GetResponseHeaders() == nil {
				t.Fatalf("want response_headers reply, got %v", resp)
			}
			mo := resp.GetModeOverride()
			if (mo != nil) != tt.override {
				t.Fatalf("mode override = %v, want one: %v", mo, tt.override)
			}
			if mo == nil {
				return
			}
			if mo.GetResponseBodyMode() != tt.want {
				t.Errorf("response_body_mode = %v, want %v", mo.GetResponseBodyMode(), tt.want)
			}
			// The override replaces the whole mode: the rest must be restated.
			if mo.GetResponseTrailerMode() != filterv3.ProcessingMode_SKIP || mo.GetRequestBodyMode() != filterv3.ProcessingMode_BUFFERED {
				t.Errorf("override does not restate the filter mode: %v", mo)
			}
		})
	}

	t.Run("request not routed", func(t *testing.T) {
		e := h.open(t)
		e.do(reqHeaders(true, ":method", "GET", ":path", "/v1/models", "authorization", "Bearer "+goodKey))
		resp := e.do(respHeaders("200", "application/json"))
		if resp.GetResponseHeaders() == nil || resp.GetModeOverride() != nil {
			t.Errorf("want empty response_headers reply, got %v", resp)
		}
	})
}

// The events of a stream as the client sees it: the model is the id it
// asked for (TestStreamModelRenamed has a provider's own name).
const (
	roleEvent    = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"openai/gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}` + "\n\n"
	contentEvent = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"openai/gpt-4o","choices":[{"index":0,"delta":{"content":"Hello \"usage\" world"},"finish_reason":null}],"usage":null}` + "\n\n"
	finishEvent  = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"openai/gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n"
	usageEvent   = `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"openai/gpt-4o","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":3}}}` + "\n\n"
	doneEvent    = "data: [DONE]\n\n"
)

var wantUsage = Usage{PromptTokens: 11, CompletionTokens: 7, TotalTokens: 18, CachedTokens: 3}

// forwarded is what Envoy passes on for a chunk given the reply.
func forwarded(t *testing.T, chunk string, resp *extprocv3.ProcessingResponse) (string, bool) {
	t.Helper()
	br := resp.GetResponseBody()
	if br == nil {
		t.Fatalf("want response_body reply, got %v", resp)
	}
	if bm := br.GetResponse().GetBodyMutation(); bm != nil {
		return string(bm.GetBody()), true
	}
	return chunk, false
}

func TestStreamUsageDropped(t *testing.T) {
	h := newHarness(t, true)
	e := routed(t, h, chatBody("openai/gpt-4o", `"stream":true`))
	hr := e.do(respHeaders("200", "text/event-stream"))
	if hr.GetModeOverride().GetResponseBodyMode() != filterv3.ProcessingMode_STREAMED {
		t.Fatalf("not switched to STREAMED: %v", hr)
	}
	if rm := hr.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Contains(rm, "content-length") {
		t.Errorf("content-length not removed: %v", rm)
	}

	// Chunk 1 is whole events and must pass untouched. The content event
	// is then split across chunks 2 and 3, the usage event across 3 and 4.
	split1 := len(contentEvent) / 2
	split2 := len(usageEvent) / 3
	chunks := []string{
		roleEvent,
		contentEvent[:split1],
		contentEvent[split1:] + finishEvent + usageEvent[:split2],
		usageEvent[split2:] + doneEvent,
	}
	var out strings.Builder
	for i, c := range chunks {
		resp := e.do(respBody(c, false))
		fwd, mutated := forwarded(t, c, resp)
		if i == 0 && mutated {
			t.Errorf("chunk of whole content events was mutated")
		}
		// The usage goes out with the chunk that completes its event, not
		// only at the end: clients often close the stream at [DONE].
		if md := resp.GetDynamicMetadata(); (md != nil) != (i == 3) {
			t.Errorf("chunk %d: metadata %v; want it exactly with the chunk that completes the usage event", i, md)
		} else if md != nil {
			if f := metaFields(t, resp); f["total_tokens"] != 18.0 {
				t.Errorf("early metadata = %v", f)
			}
		}
		out.WriteString(fwd)
	}
	last := e.do(respBody("", true))
	fwd, _ := forwarded(t, "", last)
	out.WriteString(fwd)

	if want := roleEvent + contentEvent + finishEvent + doneEvent; out.String() != want {
		t.Errorf("client got:\n%q\nwant:\n%q", out.String(), want)
	}
	md := metaFields(t, last)
	if md["prompt_tokens"] != 11.0 || md["completion_tokens"] != 7.0 || md["total_tokens"] != 18.0 {
		t.Errorf("metadata = %v", md)
	}
	if got := h.rec.all(); len(got) != 1 || got[0] != (recorded{"key_0123456789abcdef", "openai/gpt-4o", wantUsage}) {
		t.Errorf("recorded %+v", got)
	}
}

func TestStreamUsageKept(t *testing.T) {
	h := newHarness(t, true)
	e := routed(t, h, chatBody("openai/gpt-4o", `"stream":true`, `"stream_options":{"include_usage":true}`))
	e.do(respHeaders("200", "text/event-stream"))
	all := roleEvent + contentEvent + finishEvent + usageEvent + doneEvent
	// Chunks end inside events: the unfinished one is withheld until it
	// is whole (its model might need renaming), and nothing else changes.
	chunks := []string{all[:100], all[100 : len(all)-40], all[len(all)-40:]}
	var out strings.Builder
	for i, c := range chunks {
		resp := e.do(respBody(c, i == len(chunks)-1))
		fwd, _ := forwarded(t, c, resp)
		out.WriteString(fwd)
		if i == len(chunks)-1 {
			if md := metaFields(t, resp); md["total_tokens"] != 18.0 {
				t.Errorf("metadata = %v", md)
			}
		}
	}
	if out.String() != all {
		t.Errorf("client got:\n%q\nwant:\n%q", out.String(), all)
	}
	if got := h.rec.all(); len(got) != 1 || got[0].u != wantUsage {
		t.Errorf("recorded %+v", got)
	}
}

func TestStreamUsageRecordedWhenClientLeaves(t *testing.T) {
	h := newHarness(t, true)
	e := routed(t, h, chatBody("openai/gpt-4o", `"stream":true`))
	e.do(respHeaders("200", "text/event-stream"))
	e.do(respBody(roleEvent+usageEvent, false))
	_ = e.stream.CloseSend() // Envoy resets the stream before end_of_stream
	if _, err := e.stream.Recv(); err == nil {
		t.Fatal("stream still open")
	}
	waitFor(t, func() bool { return len(h.rec.all()) == 1 })
	if got := h.rec.all(); got[0].u != wantUsage {
		t.Errorf("recorded %+v", got)
	}
}

func TestJSONResponseUsage(t *testing.T) {
	h := newHarness(t, true)
	e := routed(t, h, chatBody("openai/gpt-4o"))
	if hr := e.do(respHeaders("200", "application/json")); hr.GetModeOverride().GetResponseBodyMode() != filterv3.ProcessingMode_BUFFERED {
		t.Fatalf("not switched to BUFFERED: %v", hr)
	}
	body := `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18,"prompt_tokens_details":{"cached_tokens":3}}}`
	resp := e.do(respBody(body, true))
	if _, mutated := forwarded(t, body, resp); mutated {
		t.Error("successful response mutated")
	}
	if md := metaFields(t, resp); md["prompt_tokens"] != 11.0 || md["total_tokens"] != 18.0 || md["cached_tokens"] != 3.0 {
		t.Errorf("metadata = %v", md)
	}
	if got := h.rec.all(); len(got) != 1 || got[0] != (recorded{"key_0123456789abcdef", "openai/gpt-4o", wantUsage}) {
		t.Errorf("recorded %+v", got)
	}
}

func TestProviderErrors(t *testing.T) {
	h := newHarness(t, true)
	openAIErr := `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`
	tests := []struct {
		name, status, ctype, body string
		replaced                  bool
		wantStatus                string // new :status, "" if unchanged
		wantType                  string
	}{
		{"500 html", "500", "text/html", "<html><body>Internal Server Error</body></html>", true, "", "server_error"},
		{"502 other json", "502", "application/json", `{"detail":"bad gateway"}`, true, "", "server_error"},
		{"400 other json", "400", "application/json", `{"detail":"bad"}`, true, "", "invalid_request_error"},
		{"429 openai error", "429", "application/json", openAIErr, false, "", ""},
		{"500 openai error", "500", "application/json", `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, false, "", ""},
		{"401 from provider", "401", "application/json", `{"error":{"message":"Incorrect API key provided: sk-prov*****4f1d","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, true, "502", "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := routed(t, h, chatBody("openai/gpt-4o"))
			if hr := e.do(respHeaders(tt.status, tt.ctype)); hr.GetModeOverride().GetResponseBodyMode() != filterv3.ProcessingMode_BUFFERED {
				t.Fatalf("error response not buffered: %v", hr)
			}
			resp := e.do(respBody(tt.body, true))
			cr := resp.GetResponseBody().GetResponse()
			if !tt.replaced {
				if cr.GetBodyMutation() != nil {
					t.Errorf("OpenAI-shaped error replaced")
				}
				return
			}
			body := cr.GetBodyMutation().GetBody()
			var e2 apiError
			if err := json.Unmarshal(body, &e2); err != nil || e2.Error.Message == nil || e2.Error.Type == nil {
				t.Fatalf("replacement is not an OpenAI error: %s", body)
			}
			if *e2.Error.Type != tt.wantType {
				t.Errorf("type = %q, want %q", *e2.Error.Type, tt.wantType)
			}
			set := setHeaders(cr.GetHeaderMutation())
			if set["content-length"] != strconv.Itoa(len(body)) || set["content-type"] != "application/json" {
				t.Errorf("headers = %v for a %d-byte body", set, len(body))
			}
			if set[":status"] != tt.wantStatus {
				t.Errorf(":status = %q, want %q", set[":status"], tt.wantStatus)
			}
			if strings.Contains(string(body), "sk-prov") {
				t.Errorf("provider credential hint reached the client: %s", body)
			}
		})
	}
	// Each error counts as the key's error, with no tokens or cost, when
	// its stream ends.
	waitFor(t, func() bool { return len(h.rec.all()) >= len(tests) })
	rec := h.rec.all()
	if len(rec) != len(tests) {
		t.Errorf("recorded %d requests for %d errors: %v", len(rec), len(tests), rec)
	}
	for _, r := range rec {
		if r.u != (Usage{Error: true}) || r.model != "openai/gpt-4o" {
			t.Errorf("recorded %+v for an error, want only Error", r)
		}
	}
}

func TestPanicEndsOnlyThatStream(t *testing.T) {
	h := newHarness(t, true)
	e := h.open(t)
	_, err := e.try(chatHeaders(panicKey))
	if status.Code(err) != codes.Internal {
		t.Fatalf("err = %v, want Internal", err)
	}
	// The server is still serving.
	e2 := routed(t, h, chatBody("openai/gpt-4o"))
	if r := e2.do(respHeaders("200", "application/json")); r.GetResponseHeaders() == nil {
		t.Fatalf("server not serving after a panic: %v", r)
	}
	if !strings.Contains(h.logs.String(), "panic") {
		t.Error("panic not logged")
	}
}

func TestTrailersAnswered(t *testing.T) {
	h := newHarness(t, true)
	e := routed(t, h, chatBody("openai/gpt-4o"))
	resp := e.do(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
		ResponseTrailers: &extprocv3.HttpTrailers{}}})
	if resp.GetResponseTrailers() == nil {
		t.Errorf("want response_trailers reply, got %v", resp)
	}
}

// TestNoSecretsInLogs drives every kind of request with debug logging on
// and checks that no key, credential or content reached the log.
func TestNoSecretsInLogs(t *testing.T) {
	h := newHarness(t, true)
	wantImmediate(t, h.open(t).do(chatHeaders(unknownKey)), 401, "invalid_api_key", "")
	wantImmediate(t, h.open(t).do(chatHeaders(storeErrKey)), 503, "service_unavailable", "")
	e := routed(t, h, chatBody("openai/gpt-4o", `"stream":true`))
	e.do(respHeaders("200", "text/event-stream"))
	e.do(respBody(contentEvent+usageEvent+doneEvent, true))
	e = routed(t, h, chatBody("openai/gpt-4o"))
	e.do(respHeaders("500", "text/html"))
	e.do(respBody("<html>"+secretPrompt+"</html>", true))
	_, _ = h.open(t).try(chatHeaders(panicKey))

	logs := h.logs.String()
	if !strings.Contains(logs, "req-test") {
		t.Errorf("request id not logged; logs:\n%s", logs)
	}
	for _, s := range []string{goodKey, unknownKey, storeErrKey, panicKey, providerKey, secretPrompt, "Hello"} {
		if strings.Contains(logs, s) {
			t.Errorf("log contains %q:\n%s", s, logs)
		}
	}
}

func TestCatalog(t *testing.T) {
	t.Run("empty credential takes down only its provider", func(t *testing.T) {
		s := New(Options{Keys: testKeys(), Getenv: func(string) string { return "" }})
		c := testCatalog()
		c.Models = append(c.Models, config.Model{ID: "openai/only", Providers: []config.ModelProvider{{Provider: "openai", UpstreamModel: "gpt-4o"}}})
		if err := s.SetCatalog(c); err != nil {
			t.Fatalf("a missing credential rejected the whole catalog: %v", err)
		}
		if !s.Ready() {
			t.Fatal("not Ready")
		}
		rt := s.routes.Load()
		if got := rt.models["openai/only"].unavailable; got == nil || got.Status != 503 {
			t.Errorf("model whose only provider lacks its credential: unavailable = %v, want a 503", got)
		}
		if ts := rt.models["openai/gpt-4o"].targets; len(ts) != 1 || ts[0].provider.name != "local" {
			t.Errorf("model with a fallback: targets %v, want only the provider with a credential", ts)
		}
		if rt.models["local/llama"].unavailable != nil || len(rt.models["local/llama"].targets) != 1 {
			t.Error("a model whose provider needs no credential was affected")
		}
	})
	t.Run("missing credential answers 503 through the stream", func(t *testing.T) {
		h := newHarness(t, false)
		h.srv.getenv = func(string) string { return "" }
		c := testCatalog()
		c.Models = append(c.Models, config.Model{ID: "openai/only", Providers: []config.ModelProvider{{Provider: "openai", UpstreamModel: "gpt-4o"}}})
		if err := h.srv.SetCatalog(c); err != nil {
			t.Fatal(err)
		}
		e := h.open(t)
		if r := e.do(chatHeaders(goodKey)); r.GetRequestHeaders() == nil {
			t.Fatalf("headers rejected: %v", r)
		}
		msg := wantImmediate(t, e.do(reqBody(chatBody("openai/only"))), 503, "provider_unavailable", "")
		if strings.Contains(msg, providerEnv) {
			t.Errorf("the 503 names the server's environment variable to the client: %s", msg)
		}
		routed(t, h, chatBody("local/llama"))
		if !strings.Contains(h.logs.String(), providerEnv) {
			t.Errorf("the operator's log does not name the missing variable:\n%s", h.logs.String())
		}
	})
	t.Run("bad credential is not used", func(t *testing.T) {
		env := providerKey
		s := New(Options{Keys: testKeys(), Getenv: func(string) string { return env }})
		if err := s.SetCatalog(testCatalog()); err != nil {
			t.Fatal(err)
		}
		if got := s.routes.Load().models["openai/gpt-4o"].targets[0].provider.authorization; got != "Bearer "+providerKey {
			t.Errorf("authorization = %q", got)
		}
		env = "bad\nvalue"
		if err := s.SetCatalog(testCatalog()); err != nil {
			t.Fatal(err)
		}
		for _, tg := range s.routes.Load().models["openai/gpt-4o"].targets {
			if tg.provider.name == "openai" {
				t.Error("a provider whose credential has a newline is still routed to")
			}
		}
	})
	t.Run("RTDS handler", func(t *testing.T) {
		s, _, _ := newTestServer(t, false)
		rt, err := testCatalog().Runtime()
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := s.CatalogHandler(ctx, "v1", map[string]proto.Message{catalog.RuntimeName: rt}); err != nil {
			t.Fatal(err)
		}
		if !s.Ready() || s.routes.Load().models["local/llama"] == nil {
			t.Fatal("catalog not applied")
		}
		if err := s.CatalogHandler(ctx, "v2", map[string]proto.Message{}); err == nil {
			t.Error("update without the catalog accepted")
		}
		if err := s.CatalogHandler(ctx, "v3", map[string]proto.Message{catalog.RuntimeName: rt.GetLayer()}); err == nil {
			t.Error("resource of the wrong type accepted")
		}
	})
}

// TestStreamModelRenamed: an OpenAI-kind provider names the model its own
// way; every event reaches the client with the id the client asked for,
// also when a chunk ends in the middle of the model value, and the usage
// is still read.
func TestStreamModelRenamed(t *testing.T) {
	upstream := func(ev string) string {
		return strings.ReplaceAll(ev, `"model":"openai/gpt-4o"`, `"model":"gpt-4o-2024-08-06"`)
	}
	all := upstream(roleEvent + contentEvent + finishEvent + usageEvent + doneEvent)
	cut := strings.Index(all, "gpt-4o-2024") + 4 // inside the first model value
	for _, tc := range []struct {
		name   string
		body   string
		chunks []string
		want   string
	}{
		{"usage kept", chatBody("openai/gpt-4o", `"stream":true`, `"stream_options":{"include_usage":true}`),
			[]string{all[:cut], all[cut : len(all)-40], all[len(all)-40:]},
			roleEvent + contentEvent + finishEvent + usageEvent + doneEvent},
		{"usage dropped", chatBody("openai/gpt-4o", `"stream":true`),
			[]string{all[:cut], all[cut:]},
			roleEvent + contentEvent + finishEvent + doneEvent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, true)
			e := routed(t, h, tc.body)
			hr := e.do(respHeaders("200", "text/event-stream"))
			if rm := hr.GetResponseHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders(); !slices.Contains(rm, "content-length") {
				t.Errorf("content-length not removed: %v", rm)
			}
			var out strings.Builder
			for _, c := range tc.chunks {
				fwd, _ := forwarded(t, c, e.do(respBody(c, false)))
				out.WriteString(fwd)
			}
			last := e.do(respBody("", true))
			fwd, _ := forwarded(t, "", last)
			out.WriteString(fwd)
			if out.String() != tc.want {
				t.Errorf("client got:\n%q\nwant:\n%q", out.String(), tc.want)
			}
			if got := h.rec.all(); len(got) != 1 || got[0].u != wantUsage {
				t.Errorf("recorded %+v", got)
			}
		})
	}
}
