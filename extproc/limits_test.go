package extproc

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// Keys of the rate limit tests.
const (
	freeKey       = "sk-sy-FREEfreeFREEfreeFREEfreeFREEfreeFREEfree123"
	standardKey   = "sk-sy-STANDARDstandardSTANDARDstandardSTANDAR123"
	enterpriseKey = "sk-sy-ENTERPRISEenterpriseENTERPRISEenterpri123"
	bareEntKey    = "sk-sy-BAREENTbareentBAREENTbareentBAREENTbare123"
	allowListKey  = "sk-sy-ALLOWLISTallowlistALLOWLISTallowlistAL123"
	rotatedKey    = "sk-sy-ROTATEDrotatedROTATEDrotatedROTATEDrota123"
	openKey       = "sk-sy-OPENopenOPENopenOPENopenOPENopenOPENope123"
)

// limitClock is 18 s into a minute: every window the tests touch resets in
// 42 s, and no test runs long enough to see a boundary, because the clock
// does not move.
type limitClock struct{}

func (limitClock) UnixNow() int64 { return 1_800_000_000 - 1_800_000_000%60 + 18 }

type limitHarness struct {
	*harness
	rls     rlsv3.RateLimitServiceClient
	metrics *ratelimit.Metrics
}

// newLimitHarness is a Server whose limiter is envoyproxy/ratelimit's
// service with the in-process store, over real gRPC, configured with the
// default tiers. lim, when not nil, replaces that limiter.
func newLimitHarness(t *testing.T, lim Limiter) *limitHarness {
	t.Helper()
	cfg, err := config.Parse("t.yaml", []byte(`
listeners: [{name: public, address: "127.0.0.1:8080"}]
providers: [{name: local, kind: openai, base_url: "http://127.0.0.1:8091/v1"}]
models:
  - {id: local/llama, providers: [{provider: local, upstream_model: llama}]}
  - {id: local/other, providers: [{provider: local, upstream_model: other}]}
tiers:
  # While the limiter is down: standard falls back to a third of its
  # limits on this replica, open is served unmetered, free is refused.
  standard: {rpm: 60, tpm: 200000, local_replicas: 3}
  open: {rpm: 60, tpm: 200000, on_limiter_error: allow}
`))
	if err != nil {
		t.Fatal(err)
	}
	rs := ratelimit.NewServer(ratelimit.Options{Clock: limitClock{}, Logger: slog.New(slog.DiscardHandler)})
	if err := rs.SetConfig(ratelimit.BuildConfig(cfg.Tiers)); err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rs.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	rls := rlsv3.NewRateLimitServiceClient(cc)
	if lim == nil {
		lim = rls
	}

	metrics := ratelimit.NewMetrics()
	logs := &syncBuffer{}
	srv := New(Options{
		Keys: fakeKeys{
			freeKey:       {ID: "key_free", Tier: "free"},
			standardKey:   {ID: "key_standard", Tier: "standard"},
			enterpriseKey: {ID: "key_ent", Tier: "enterprise", RPM: 2, TPM: 100},
			bareEntKey:    {ID: "key_bare", Tier: "enterprise"},
			allowListKey:  {ID: "key_allow", Tier: "standard", Models: []string{"local/llama"}},
			rotatedKey:    {ID: "key_new", Lineage: "key_first", Tier: "free"},
			openKey:       {ID: "key_open", Tier: "open"},
		},
		Limiter:           lim,
		LocalLimiterClock: limitClock{},
		Metrics:           metrics,
		Logger:            slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err := srv.SetCatalog(catalog.FromConfig(cfg)); err != nil {
		t.Fatal(err)
	}
	egl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eg := grpc.NewServer()
	srv.Register(eg)
	go func() { _ = eg.Serve(egl) }()
	t.Cleanup(eg.Stop)
	ecc, err := grpc.NewClient(egl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ecc.Close() })
	return &limitHarness{
		harness: &harness{srv: srv, logs: logs, client: extprocv3.NewExternalProcessorClient(ecc)},
		rls:     rls, metrics: metrics,
	}
}

// chat runs one request to the body phase and returns the body reply.
func (h *limitHarness) chat(t *testing.T, key, body string) (*envoy, *extprocv3.ProcessingResponse) {
	t.Helper()
	e := h.open(t)
	if r := e.do(chatHeaders(key)); r.GetImmediateResponse() != nil {
		t.Fatalf("headers refused: %v", r)
	}
	return e, e.do(reqBody(body))
}

// charge adds tokens to a key's tokens counter, as the data plane does at
// the end of a response.
func (h *limitHarness) charge(t *testing.T, tier, keyID string, tokens uint64) {
	t.Helper()
	_, err := h.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain:      ratelimit.Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{ratelimit.TokensDescriptor(tier, keyID, ratelimit.Limits{}, tokens)},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAdmissionRequestsPerMinute(t *testing.T) {
	h := newLimitHarness(t, nil)
	for i := range 10 {
		_, resp := h.chat(t, freeKey, chatBody("local/llama"))
		if resp.GetRequestBody() == nil {
			t.Fatalf("request %d refused: %v", i+1, resp)
		}
	}
	_, resp := h.chat(t, freeKey, chatBody("local/llama"))
	msg := wantImmediate(t, resp, 429, "rate_limit_exceeded", "")
	hdr := setHeaders(resp.GetImmediateResponse().GetHeaders())
	want := map[string]string{
		"retry-after":                    "42",
		"x-ratelimit-limit-requests":     "10",
		"x-ratelimit-remaining-requests": "0",
		"x-ratelimit-reset-requests":     "42s",
		"x-ratelimit-limit-tokens":       "40000",
		"x-ratelimit-reset-tokens":       "42s",
	}
	for k, v := range want {
		if hdr[k] != v {
			t.Errorf("%s = %q, want %q", k, hdr[k], v)
		}
	}
	if !strings.Contains(msg, "requests per minute (RPM)") || !strings.Contains(msg, "Limit 10") || !strings.Contains(msg, "42s") {
		t.Errorf("message %q does not name the limit and its reset", msg)
	}
	if !strings.Contains(string(resp.GetImmediateResponse().GetBody()), `"type":"requests"`) {
		t.Errorf("body %s lacks type requests", resp.GetImmediateResponse().GetBody())
	}
	if got := h.metrics.Limited.Value("requests", "free"); got != 1 {
		t.Errorf("limited counter = %d, want 1", got)
	}
	// Other keys have their own counters.
	if _, resp := h.chat(t, standardKey, chatBody("local/llama")); resp.GetRequestBody() == nil {
		t.Errorf("another key refused: %v", resp)
	}
}

func TestAdmissionHeadersOnResponse(t *testing.T) {
	h := newLimitHarness(t, nil)
	h.charge(t, "standard", "key_standard", 1000)
	e, resp := h.chat(t, standardKey, chatBody("local/llama"))
	if resp.GetRequestBody() == nil {
		t.Fatalf("refused: %v", resp)
	}
	est := estimatePromptTokens([]byte(chatBody("local/llama")), mustParse(t, chatBody("local/llama")))
	rh := e.do(respHeaders("200", "application/json", "x-ratelimit-limit-requests", "999"))
	got := setHeaders(rh.GetResponseHeaders().GetResponse().GetHeaderMutation())
	want := map[string]string{
		"x-ratelimit-limit-requests":     "60",
		"x-ratelimit-remaining-requests": "59",
		"x-ratelimit-reset-requests":     "42s",
		"x-ratelimit-limit-tokens":       "200000",
		"x-ratelimit-remaining-tokens":   strconv.FormatInt(200000-1000-est, 10),
		"x-ratelimit-reset-tokens":       "42s",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestAdmissionTokens(t *testing.T) {
	h := newLimitHarness(t, nil)
	body := chatBody("local/llama")
	est := estimatePromptTokens([]byte(body), mustParse(t, body))

	// Exactly enough left for the estimate: admitted.
	h.charge(t, "free", "key_free", uint64(40000-est))
	if _, resp := h.chat(t, freeKey, body); resp.GetRequestBody() == nil {
		t.Fatalf("refused with exactly the estimate left: %v", resp)
	}
	// One token short: refused with type tokens.
	h.charge(t, "free", "key_free", 1)
	_, resp := h.chat(t, freeKey, body)
	msg := wantImmediate(t, resp, 429, "rate_limit_exceeded", "")
	if !strings.Contains(string(resp.GetImmediateResponse().GetBody()), `"type":"tokens"`) ||
		!strings.Contains(msg, "tokens per minute (TPM)") || !strings.Contains(msg, "Limit 40000") {
		t.Errorf("429 is not about tokens: %s", resp.GetImmediateResponse().GetBody())
	}
	hdr := setHeaders(resp.GetImmediateResponse().GetHeaders())
	if hdr["x-ratelimit-remaining-tokens"] != strconv.FormatInt(est-1, 10) || hdr["retry-after"] != "42" {
		t.Errorf("headers = %v", hdr)
	}
	// Overshoot (a charge larger than what was left) reads as nothing left.
	h.charge(t, "free", "key_free", 10_000)
	_, resp = h.chat(t, freeKey, body)
	wantImmediate(t, resp, 429, "rate_limit_exceeded", "")
	if hdr := setHeaders(resp.GetImmediateResponse().GetHeaders()); hdr["x-ratelimit-remaining-tokens"] != "0" {
		t.Errorf("remaining tokens after overshoot = %q, want 0", hdr["x-ratelimit-remaining-tokens"])
	}
}

func TestAdmissionCustomLimits(t *testing.T) {
	h := newLimitHarness(t, nil)
	for i := range 2 {
		_, resp := h.chat(t, enterpriseKey, chatBody("local/llama"))
		if resp.GetRequestBody() == nil {
			t.Fatalf("request %d refused: %v", i+1, resp)
		}
		md := metaFields(t, resp)
		tl, ok := md[ratelimit.MetaTPMLimit].(map[string]any)
		if !ok || tl["requests_per_unit"] != float64(100) || tl["unit"] != "MINUTE" {
			t.Errorf("tpm_limit metadata = %v", md[ratelimit.MetaTPMLimit])
		}
	}
	_, resp := h.chat(t, enterpriseKey, chatBody("local/llama"))
	wantImmediate(t, resp, 429, "rate_limit_exceeded", "")
	if hdr := setHeaders(resp.GetImmediateResponse().GetHeaders()); hdr["x-ratelimit-limit-requests"] != "2" || hdr["x-ratelimit-limit-tokens"] != "100" {
		t.Errorf("custom limits not in headers: %v", hdr)
	}

	// An enterprise key without its own limits has none at all: refused
	// rather than unlimited.
	_, resp = h.chat(t, bareEntKey, chatBody("local/llama"))
	wantImmediate(t, resp, 403, "rate_limits_not_configured", "")
}

func TestModelAllowList(t *testing.T) {
	h := newLimitHarness(t, nil)
	if _, resp := h.chat(t, allowListKey, chatBody("local/llama")); resp.GetRequestBody() == nil {
		t.Fatalf("allowed model refused: %v", resp)
	}
	// A model the key may not use looks exactly like one that does not
	// exist, as OpenAI answers.
	_, resp := h.chat(t, allowListKey, chatBody("local/other"))
	msg := wantImmediate(t, resp, 404, "model_not_found", "model")
	if !strings.Contains(msg, "does not exist or you do not have access to it") {
		t.Errorf("message = %q", msg)
	}
	// No requests-per-minute was spent on it.
	e, resp := h.chat(t, allowListKey, chatBody("local/llama"))
	if resp.GetRequestBody() == nil {
		t.Fatalf("refused: %v", resp)
	}
	rh := setHeaders(e.do(respHeaders("200", "application/json")).GetResponseHeaders().GetResponse().GetHeaderMutation())
	if rh["x-ratelimit-remaining-requests"] != "58" {
		t.Errorf("remaining requests = %q, want 58 (two allowed requests)", rh["x-ratelimit-remaining-requests"])
	}
}

func TestRotatedKeyCountsOnItsChain(t *testing.T) {
	h := newLimitHarness(t, nil)
	_, resp := h.chat(t, rotatedKey, chatBody("local/llama"))
	if resp.GetRequestBody() == nil {
		t.Fatalf("refused: %v", resp)
	}
	md := metaFields(t, resp)
	if md["key_id"] != "key_first" || md["api_key_id"] != "key_new" {
		t.Errorf("metadata key_id = %v, api_key_id = %v; want the chain's first key and the key used", md["key_id"], md["api_key_id"])
	}
}

type downLimiter struct{}

func (downLimiter) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest, ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	return nil, errors.New("connection refused")
}

// unconfiguredLimiter answers without limits, as a ratelimit service does
// for a tier its configuration does not have yet.
type unconfiguredLimiter struct{}

func (unconfiguredLimiter) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest, _ ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	for range req.GetDescriptors() {
		resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
	}
	return resp, nil
}

func TestLimiterUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name string
		lim  Limiter
	}{
		{"unreachable", downLimiter{}},
		{"no limit configured", unconfiguredLimiter{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newLimitHarness(t, tt.lim)
			// Free fails closed by default.
			_, resp := h.chat(t, freeKey, chatBody("local/llama"))
			wantImmediate(t, resp, 503, "rate_limiter_unavailable", "")
			if hdr := setHeaders(resp.GetImmediateResponse().GetHeaders()); hdr["retry-after"] != "1" {
				t.Errorf("retry-after = %q", hdr["retry-after"])
			}
			// on_limiter_error allow fails open, with only the limits it knows.
			e, resp := h.chat(t, openKey, chatBody("local/llama"))
			if resp.GetRequestBody() == nil {
				t.Fatalf("open refused: %v", resp)
			}
			rh := setHeaders(e.do(respHeaders("200", "application/json")).GetResponseHeaders().GetResponse().GetHeaderMutation())
			if rh["x-ratelimit-limit-requests"] != "60" || rh["x-ratelimit-limit-tokens"] != "200000" {
				t.Errorf("fail-open headers = %v", rh)
			}
			if _, ok := rh["x-ratelimit-remaining-requests"]; ok {
				t.Errorf("fail-open response claims to know the remaining requests: %v", rh)
			}
			// Standard (local, local_replicas 3) falls back to this
			// replica's counters: exactly 20 of its 60 requests a minute,
			// then OpenAI's 429, decided in the body phase every time (a
			// local refusal is not remembered past the fleet limiter's
			// return).
			for i := range 20 {
				e, resp := h.chat(t, standardKey, chatBody("local/llama"))
				if resp.GetRequestBody() == nil {
					t.Fatalf("standard request %d refused: %v", i+1, resp)
				}
				if i == 0 {
					rh := setHeaders(e.do(respHeaders("200", "application/json")).GetResponseHeaders().GetResponse().GetHeaderMutation())
					if rh["x-ratelimit-limit-requests"] != "20" || rh["x-ratelimit-remaining-requests"] != "19" || rh["x-ratelimit-limit-tokens"] != "66667" {
						t.Errorf("local fallback headers = %v, want the local limits (20 requests, 66667 tokens) and 19 remaining", rh)
					}
				}
			}
			for range 2 {
				_, resp = h.chat(t, standardKey, chatBody("local/llama"))
				if msg := wantImmediate(t, resp, 429, "rate_limit_exceeded", ""); !strings.Contains(msg, "requests per minute (RPM)") || !strings.Contains(msg, "Limit 20") {
					t.Errorf("local refusal message %q", msg)
				}
			}
			if h.metrics.LimiterErrors.Value("free", "denied") != 1 || h.metrics.LimiterErrors.Value("open", "allowed") != 1 ||
				h.metrics.LimiterErrors.Value("standard", "local") != 22 {
				t.Errorf("limiter error counters wrong: free denied %v, open allowed %v, standard local %v",
					h.metrics.LimiterErrors.Value("free", "denied"), h.metrics.LimiterErrors.Value("open", "allowed"),
					h.metrics.LimiterErrors.Value("standard", "local"))
			}
			if !strings.Contains(h.logs.String(), "rate limiter unavailable") {
				t.Errorf("not logged:\n%s", h.logs.String())
			}
		})
	}
}

func TestEstimatePromptTokens(t *testing.T) {
	for _, tt := range []struct {
		name     string
		messages string
		want     int64
	}{
		{"one short message", `[{"role":"user","content":"abcd"}]`, 1 + 3},
		{"rounded up", `[{"role":"user","content":"abcde"}]`, 2 + 3},
		{"two messages", `[{"role":"system","content":"12345678"},{"role":"user","content":"abcd"}]`, 3 + 6},
		{"text parts, image not counted", `[{"role":"user","content":[{"type":"text","text":"abcdefgh"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("A", 4000) + `"}}]}]`, 2 + 3},
		{"tool calls and names", `[{"role":"assistant","name":"abcd","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"abcd","arguments":"{\"a\":1}"}}]}]`, 5 + 3}, // 4+4+11 bytes, escapes counted
		{"a megabyte of text", `[{"role":"user","content":"` + strings.Repeat("x", 1<<20) + `"}]`, 1<<18 + 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"model":"m","messages":` + tt.messages + `}`
			if got := estimatePromptTokens([]byte(body), mustParse(t, body)); got != tt.want {
				t.Errorf("estimate = %d, want %d", got, tt.want)
			}
		})
	}
}

func mustParse(t *testing.T, body string) *chatRequest {
	t.Helper()
	r, e := parseChat([]byte(body))
	if e != nil {
		t.Fatalf("parseChat: %v", e)
	}
	return &r
}

// TestRateLimitHeadersBlock: the six headers, built in one block, are what
// setHeader would make of each, and none shares bytes with another.
func TestRateLimitHeadersBlock(t *testing.T) {
	status := func(limit uint32, reset *durationpb.Duration) *rlsv3.RateLimitResponse_DescriptorStatus {
		return &rlsv3.RateLimitResponse_DescriptorStatus{
			CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: limit},
			DurationUntilReset: reset}
	}
	for _, tc := range []struct {
		rq, tk                   *rlsv3.RateLimitResponse_DescriptorStatus
		requestsLeft, tokensLeft int64
	}{
		{status(60, durationpb.New(42e9)), status(90000, durationpb.New(59500e6)), 59, 89000},
		{status(4294967295, durationpb.New(3600e9)), status(1, nil), -3, 0},
		{status(0, durationpb.New(1)), status(1_000_000_000, durationpb.New(61e9)), 1 << 40, -(1 << 40)},
	} {
		got := rateLimitHeaders(tc.rq, tc.tk, tc.requestsLeft, tc.tokensLeft)
		want := []*corev3.HeaderValueOption{
			setHeader("x-ratelimit-limit-requests", strconv.FormatUint(uint64(tc.rq.GetCurrentLimit().GetRequestsPerUnit()), 10)),
			setHeader("x-ratelimit-remaining-requests", strconv.FormatInt(max(tc.requestsLeft, 0), 10)),
			setHeader("x-ratelimit-reset-requests", (time.Duration(resetSeconds(tc.rq)) * time.Second).String()),
			setHeader("x-ratelimit-limit-tokens", strconv.FormatUint(uint64(tc.tk.GetCurrentLimit().GetRequestsPerUnit()), 10)),
			setHeader("x-ratelimit-remaining-tokens", strconv.FormatInt(max(tc.tokensLeft, 0), 10)),
			setHeader("x-ratelimit-reset-tokens", (time.Duration(resetSeconds(tc.tk)) * time.Second).String()),
		}
		if len(got) != len(want) {
			t.Fatalf("%d headers, want %d", len(got), len(want))
		}
		for i := range want {
			if !proto.Equal(got[i], want[i]) {
				t.Errorf("header %d: %v, want %v", i, got[i], want[i])
			}
		}
		// Appending to one value must not write into the next.
		v0 := got[0].GetHeader()
		v0.RawValue = append(v0.RawValue, "xyz"...)
		if !proto.Equal(got[1], want[1]) {
			t.Errorf("appending to the first value changed the second: %v", got[1])
		}
	}
}

// TestLocalFallbackChargesTokens: a request the local fallback admitted is
// charged its tokens on this replica's counters when it ends (the data
// plane's charge goes to the fleet's limiter, which is down), so the key's
// next request whose estimate its remaining tokens do not cover is refused
// for tokens.
func TestLocalFallbackChargesTokens(t *testing.T) {
	h := newLimitHarness(t, downLimiter{}) // enterprise key: 2 requests, 100 tokens; local_replicas 1
	e, resp := h.chat(t, enterpriseKey, chatBody("local/llama"))
	if resp.GetRequestBody() == nil {
		t.Fatalf("refused: %v", resp)
	}
	e.do(respHeaders("200", "application/json"))
	e.do(respBody(`{"id":"c","object":"chat.completion","created":1,"model":"local/llama","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":80,"completion_tokens":10,"total_tokens":90}}`, true))
	_ = e.stream.CloseSend()
	// The charge is made when the Process stream ends, after the last reply.
	local := localRLS{h.srv.limits.local}
	lim := ratelimit.Limits{TPM: 100, CustomTPM: true}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r, err := local.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: ratelimit.Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{ratelimit.TokensDescriptor("enterprise", "key_ent", lim, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetStatuses()[0].GetLimitRemaining() == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("local tokens remaining %d, want 10 after the 90-token response", r.GetStatuses()[0].GetLimitRemaining())
		}
	}
	_, resp = h.chat(t, enterpriseKey, `{"model":"local/llama","messages":[{"role":"user","content":"`+strings.Repeat("word ", 20)+`"}]}`)
	if msg := wantImmediate(t, resp, 429, "rate_limit_exceeded", ""); !strings.Contains(msg, "tokens per minute (TPM)") {
		t.Errorf("refusal %q, want one for tokens", msg)
	}
}

// switchLimiter is a limiter that hangs until the caller gives up while
// down is set, and otherwise answers through next.
type switchLimiter struct {
	down  atomic.Bool
	calls atomic.Int32
	next  Limiter
}

func (l *switchLimiter) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	l.calls.Add(1)
	if l.down.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return l.next.ShouldRateLimit(ctx, in, opts...)
}

// TestLimiterDownIsProbed: once the limiter has failed three admissions in
// a row, the next ones go straight to their tier's fallback without asking
// it (not each waiting out the timeout), until a probe finds it back; then
// it decides again.
func TestLimiterDownIsProbed(t *testing.T) {
	sw := &switchLimiter{}
	h := newLimitHarness(t, sw)
	sw.next = h.rls
	l := &h.srv.limits
	l.timeout, l.probeEvery = 100*time.Millisecond, time.Hour // no probe until the test asks for one
	sw.down.Store(true)
	limitHeader := func(key string) string {
		t.Helper()
		e, resp := h.chat(t, key, chatBody("local/llama"))
		if resp.GetRequestBody() == nil {
			t.Fatalf("refused: %v", resp)
		}
		rh := setHeaders(e.do(respHeaders("200", "application/json")).GetResponseHeaders().GetResponse().GetHeaderMutation())
		return rh["x-ratelimit-limit-requests"]
	}
	for i := range 10 {
		if got := limitHeader(standardKey); got != "20" {
			t.Fatalf("request %d while the limiter is down: limit %q, want the local 20", i+1, got)
		}
	}
	if n := sw.calls.Load(); n != limiterDownAfter {
		t.Errorf("the limiter was asked %d times for 10 admissions while down, want %d", n, limiterDownAfter)
	}
	// The limiter is back; the next admission due to probe finds it.
	sw.down.Store(false)
	l.nextProbe.Store(0)
	for i := range 3 {
		if got := limitHeader(standardKey); got != "60" {
			t.Fatalf("request %d after the limiter came back: limit %q, want the limiter's 60", i+1, got)
		}
	}
}
