package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/ratelimit"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// TestFreeKeyBurst sends 100 concurrent requests on a fresh free key (10
// RPM): exactly 10 succeed and 90 get the OpenAI 429 with its headers.
func TestFreeKeyBurst(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, _ := s.issue(t, keys.Spec{Name: "burst", Tier: "free"})
	results := burst(t, s, key, 100)

	ok, limited := 0, 0
	for _, r := range results {
		switch r.status {
		case http.StatusOK:
			ok++
			for _, h := range []string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
				"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"} {
				if r.header.Get(h) == "" {
					t.Errorf("200 lacks %s", h)
				}
			}
		case http.StatusTooManyRequests:
			limited++
			want := map[string]string{
				"retry-after":                    "42",
				"x-ratelimit-limit-requests":     "10",
				"x-ratelimit-remaining-requests": "0",
				"x-ratelimit-reset-requests":     "42s",
				"x-ratelimit-limit-tokens":       "40000",
				"x-ratelimit-reset-tokens":       "42s",
				"content-type":                   "application/json",
			}
			for h, v := range want {
				if got := r.header.Get(h); got != v {
					t.Errorf("429 %s = %q, want %q", h, got, v)
				}
			}
			var e struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal(r.body, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "requests" ||
				!strings.Contains(e.Error.Message, "Limit 10") || !strings.Contains(e.Error.Message, "42s") {
				t.Errorf("429 body = %s", r.body)
			}
			validateSchema(t, "ErrorResponse", r.body)
		default:
			t.Errorf("status %d: %s", r.status, r.body)
		}
	}
	if ok != 10 || limited != 90 {
		t.Fatalf("%d succeeded and %d got 429; want exactly 10 and 90", ok, limited)
	}
	// The remaining-requests headers of the ten successes are 9..0, each once.
	seen := map[string]bool{}
	for _, r := range results {
		if r.status == http.StatusOK {
			seen[r.header.Get("x-ratelimit-remaining-requests")] = true
		}
	}
	if len(seen) != 10 || !seen["0"] || !seen["9"] {
		t.Errorf("remaining-requests of the successes = %v, want 0..9", seen)
	}

	// The SDK surfaces the same 429 as a typed error.
	_, err := s.clientWith(key).Chat.Completions.New(context.Background(), chatParams("once more"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "requests" {
		t.Errorf("SDK error = %v", err)
	}
}

// TestFleetMode runs the gateway against the fleet's limiter:
// envoyproxy/ratelimit on a real redis-server, configured from the
// gateway's control plane over xDS. The same burst gives the same answer,
// and usage is charged into Redis at stream end.
func TestFleetMode(t *testing.T) {
	sock := ratelimittest.Redis(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) { o.RateLimitAddr = lis.Addr().String() }})
	if s.gw.RateLimit != nil {
		t.Fatal("the embedded limiter runs although an external one is configured")
	}
	ratelimittest.EnvoyRateLimit(t, lis, s.gw.XDSAddr(), sock, fixedClock{})

	key, k := s.issue(t, keys.Spec{Name: "fleet", Tier: "free"})
	counts := map[int]int{}
	for _, r := range burst(t, s, key, 30) {
		counts[r.status]++
	}
	if counts[200] != 10 || counts[429] != 20 {
		t.Fatalf("statuses = %v, want 10 × 200 and 20 × 429", counts)
	}
	// Ten responses of the same size were charged at stream end.
	res, err := s.clientWith(s.key).Chat.Completions.New(context.Background(), chatParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	s.rls(t).waitUsed(t, "free", k.LimitID(), 10*res.Usage.TotalTokens)
}

type burstResult struct {
	status int
	header http.Header
	body   []byte
}

// burst sends n chat requests with key at once and returns their answers.
func burst(t *testing.T, s *stack, key string, n int) []burstResult {
	t.Helper()
	body := []byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`)
	results := make([]burstResult, n)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest(http.MethodPost, s.gw.BaseURL()+"/chat/completions", bytes.NewReader(body))
			req.Header.Set("authorization", "Bearer "+key)
			req.Header.Set("content-type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results[i] = burstResult{resp.StatusCode, resp.Header, b}
		}()
	}
	close(start)
	wg.Wait()
	return results
}

// TestTokensCharged checks that non-streaming and streaming usage (with and
// without the client asking for it) is charged to the key's tokens per
// minute when each response ends, and that a key near its budget gets 429
// tokens.
func TestTokensCharged(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, k := s.issue(t, keys.Spec{Name: "tokens", Tier: "free"})
	c := s.clientWith(key)
	ctx := context.Background()
	rls := s.rls(t)
	defer func() {
		if t.Failed() { // the access log lines show what each response published
			for _, l := range strings.Split(s.logs.String(), "\n") {
				if strings.Contains(l, `"access"`) || strings.Contains(l, "ratelimit filter") {
					t.Log(l)
				}
			}
		}
	}()

	var want int64
	res, err := c.Chat.Completions.New(ctx, chatParams("count these five words"))
	if err != nil {
		t.Fatal(err)
	}
	want += res.Usage.TotalTokens
	rls.waitUsed(t, "free", k.LimitID(), want)

	p := chatParams("stream these words please")
	p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	streamed := streamUsage(t, c.Chat.Completions.NewStreaming(ctx, p))
	want += streamed
	rls.waitUsed(t, "free", k.LimitID(), want)

	// Without include_usage the client sees no usage, but the gateway asked
	// for it and charges it. The fake upstream's usage depends only on the
	// prompt, so it is the same as the stream's above.
	stream := c.Chat.Completions.NewStreaming(ctx, chatParams("stream these words please"))
	for stream.Next() {
		if stream.Current().Usage.TotalTokens != 0 {
			t.Error("client got usage it did not ask for")
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	want += streamed
	rls.waitUsed(t, "free", k.LimitID(), want)

	// Near the budget: the remaining tokens no longer cover the prompt.
	rls.charge(t, "free", k.LimitID(), uint64(40000-want-2))
	_, err = c.Chat.Completions.New(ctx, chatParams("this prompt needs more than two tokens"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type != "tokens" || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("want 429 tokens, got %v", err)
	}
	resp := apiErr.Response
	if resp.Header.Get("x-ratelimit-remaining-tokens") != "2" || resp.Header.Get("retry-after") != "42" {
		t.Errorf("headers: remaining-tokens %q retry-after %q", resp.Header.Get("x-ratelimit-remaining-tokens"), resp.Header.Get("retry-after"))
	}
	if !strings.Contains(apiErr.Message, "tokens per minute (TPM)") || !strings.Contains(apiErr.Message, "Limit 40000") {
		t.Errorf("message = %q", apiErr.Message)
	}
}

// TestEnterpriseCustomLimitsCharged runs an enterprise key with its own
// small TPM until its own usage, charged under its own limit at stream
// end, refuses it.
func TestEnterpriseCustomLimitsCharged(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, k := s.issue(t, keys.Spec{Name: "ent", Tier: "enterprise", RPM: 100, TPM: 30})
	c := s.clientWith(key)
	rls := s.rls(t)
	res, err := c.Chat.Completions.New(context.Background(), chatParams("one two three four five six seven eight nine ten"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.TotalTokens < 20 {
		t.Fatalf("usage %d too small for this test", res.Usage.TotalTokens)
	}
	// The charge happened under the key's own limit (30), not a tier's.
	lim := ratelimit.Limits{RPM: 100, TPM: 30, CustomRPM: true, CustomTPM: true}
	rls.waitUsedWith(t, "enterprise", k.LimitID(), lim, res.Usage.TotalTokens)
	_, err = c.Chat.Completions.New(context.Background(), chatParams("one two three four five six seven eight nine ten eleven twelve"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Type != "tokens" {
		t.Fatalf("want 429 tokens, got %v", err)
	}
	if got := apiErr.Response.Header.Get("x-ratelimit-limit-tokens"); got != "30" {
		t.Errorf("limit-tokens = %q, want 30", got)
	}
}

// TestRevocationUnderLoad revokes a key through another Store on the same
// data directory (what `switchyard keys revoke` does) while clients keep
// using it: no request with it succeeds later than 2 s after.
func TestRevocationUnderLoad(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, k := s.issue(t, keys.Spec{Name: "doomed", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	body := []byte(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`)

	type outcome struct {
		status     int
		sent, done time.Time
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sent := time.Now()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.gw.BaseURL()+"/chat/completions", bytes.NewReader(body))
				req.Header.Set("authorization", "Bearer "+key)
				req.Header.Set("content-type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				outcomes = append(outcomes, outcome{resp.StatusCode, sent, time.Now()})
				mu.Unlock()
			}
		}()
	}
	// Under load, and the key cached: every client has had a success.
	count := func(ok func(outcome) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if ok(o) {
				n++
			}
		}
		return n
	}
	waitFor(t, 10*time.Second, "successes under load", func() bool {
		return count(func(o outcome) bool { return o.status == http.StatusOK }) >= 16
	})

	cli, err := keys.OpenSQLite(context.Background(), s.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Revoke(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	revoked := time.Now()

	// Wait for the first refusal, then keep the load on until every client
	// has sent more requests after it, to see that nothing succeeds any
	// more.
	var firstRefusal time.Time
	waitFor(t, 3*time.Second, "a refusal after the revocation", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range outcomes {
			if o.status == http.StatusUnauthorized && o.done.After(revoked) {
				firstRefusal = o.done
				return true
			}
		}
		return false
	})
	waitFor(t, 10*time.Second, "requests sent after the first refusal", func() bool {
		return count(func(o outcome) bool { return o.sent.After(firstRefusal) }) >= 16
	})
	cancel()
	wg.Wait()
	var before, after int
	var last time.Time // the last success
	for _, o := range outcomes {
		if o.status == http.StatusOK && o.done.After(last) {
			last = o.done
		}
		if o.done.Before(revoked) {
			before++
		} else {
			after++
		}
	}
	t.Logf("%d requests before the revocation, %d after; refused after %v; last success %v after the revocation",
		before, after, firstRefusal.Sub(revoked), last.Sub(revoked))
	if before == 0 {
		t.Error("no load before the revocation")
	}
	if d := last.Sub(revoked); d > 2*time.Second {
		t.Errorf("a request succeeded %v after the revocation", d)
	}
	for _, o := range outcomes {
		// Requests in flight when the cache dropped the key may still
		// finish; none sent after a refusal may succeed.
		if o.sent.After(firstRefusal) && o.status == http.StatusOK {
			t.Errorf("a request sent %v after the first refusal succeeded", o.sent.Sub(firstRefusal))
			break
		}
		if o.done.After(revoked) && o.status != http.StatusOK && o.status != http.StatusUnauthorized {
			t.Errorf("unexpected status %d", o.status)
			break
		}
	}
}

// TestLimiterUnreachable points the gateway at a rate limit service that is
// not there: free keys are refused (fail closed), standard keys served on
// the replica's local fallback limits (local_replicas 1: the whole limit),
// and both counted on the admin metrics.
func TestLimiterUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) {
		o.RateLimitAddr = dead
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = adminToken
	}})
	free, _ := s.issue(t, keys.Spec{Name: "f", Tier: "free"})
	std, _ := s.issue(t, keys.Spec{Name: "s", Tier: "standard"})

	_, err = s.clientWith(free).Chat.Completions.New(context.Background(), chatParams("hi"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Code != "rate_limiter_unavailable" {
		t.Errorf("free key: want 503 rate_limiter_unavailable, got %v", err)
	}
	var hdr *http.Response
	if _, err := s.clientWith(std).Chat.Completions.New(context.Background(), chatParams("hi"), option.WithResponseInto(&hdr)); err != nil {
		t.Errorf("standard key refused: %v", err)
	} else if hdr.Header.Get("x-ratelimit-limit-requests") != "60" || hdr.Header.Get("x-ratelimit-remaining-requests") != "59" {
		t.Errorf("local fallback limit headers = %q, %q remaining", hdr.Header.Get("x-ratelimit-limit-requests"), hdr.Header.Get("x-ratelimit-remaining-requests"))
	}
	// The failed charge at the end of the standard key's response is made
	// after the client has its answer: poll.
	var m string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m = s.adminGet(t, "/metrics", adminToken); strings.Contains(m, "charge_errors_total{") {
			break
		}
	}
	for _, line := range []string{
		`switchyard_ratelimit_limiter_errors_total{tier="free",action="denied"} 1`,
		`switchyard_ratelimit_limiter_errors_total{tier="standard",action="local"} 1`,
		`switchyard_ratelimit_charge_errors_total{source="dataplane"} 1`,
	} {
		if !strings.Contains(m, line) {
			t.Errorf("metrics lack %q:\n%s", line, m)
		}
	}
}

const adminToken = "test-admin-token-0123456789"

// TestAdminAPI checks the admin listener's authentication and that the
// admin API is not reachable through the public listener.
func TestAdminAPI(t *testing.T) {
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = adminToken
	}})
	admin := s.gw.AdminURL()
	for _, tt := range []struct{ name, method, path, auth string }{
		{"no token", "GET", "/admin/v1/keys", ""},
		{"wrong token", "GET", "/admin/v1/keys", "Bearer nope-nope-nope-nope-nope"},
		{"a client API key", "GET", "/admin/v1/keys", "Bearer " + s.key},
		{"metrics", "GET", "/metrics", ""},
		{"unknown path", "GET", "/anything", ""},
		{"create", "POST", "/admin/v1/keys", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, admin+tt.path, strings.NewReader(`{"name":"x","tier":"free"}`))
			if tt.auth != "" {
				req.Header.Set("authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401: %s", resp.StatusCode, b)
			}
			validateSchema(t, "ErrorResponse", b)
		})
	}

	// With the token it works...
	if got := s.adminGet(t, "/admin/v1/keys", adminToken); !strings.Contains(got, `"object":"list"`) {
		t.Errorf("admin list = %s", got)
	}
	// ...but never through the public listener, token or not.
	public := strings.TrimSuffix(s.gw.BaseURL(), "/v1")
	for _, path := range []string{"/admin/v1/keys", "/metrics", "/v1/admin/v1/keys"} {
		req, _ := http.NewRequest("GET", public+path, nil)
		req.Header.Set("authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(b), `"object":"list"`) || strings.Contains(string(b), "switchyard_ratelimit") {
			t.Errorf("public %s answered %d: %s", path, resp.StatusCode, b)
		}
	}
	// A key created over the admin API works on the public listener.
	req, _ := http.NewRequest("POST", admin+"/admin/v1/keys", strings.NewReader(`{"name":"via admin","tier":"free"}`))
	req.Header.Set("authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID, Secret string }
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || created.Secret == "" {
		t.Fatalf("create: %d %+v", resp.StatusCode, created)
	}
	if _, err := s.clientWith(created.Secret).Chat.Completions.New(context.Background(), chatParams("hi")); err != nil {
		t.Errorf("admin-created key: %v", err)
	}
	// Revoked over the admin API: refused at once in this process.
	req, _ = http.NewRequest("POST", admin+"/admin/v1/keys/"+created.ID+"/revoke", nil)
	req.Header.Set("authorization", "Bearer "+adminToken)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	_, err = s.clientWith(created.Secret).Chat.Completions.New(context.Background(), chatParams("hi"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Errorf("revoked key: %v", err)
	}
}

// issue creates a key in the gateway's database.
func (s *stack) issue(t *testing.T, sp keys.Spec) (string, keys.Key) {
	t.Helper()
	secret, k, err := s.gw.Keys.Issue(context.Background(), sp)
	if err != nil {
		t.Fatal(err)
	}
	return secret, k
}

func (s *stack) clientWith(key string) *openai.Client {
	c := openai.NewClient(option.WithBaseURL(s.gw.BaseURL()), option.WithAPIKey(key), option.WithMaxRetries(0))
	return &c
}

func (s *stack) adminGet(t *testing.T, path, token string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", s.gw.AdminURL()+path, nil)
	req.Header.Set("authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

func streamUsage(t *testing.T, stream interface {
	Next() bool
	Current() openai.ChatCompletionChunk
	Err() error
}) int64 {
	t.Helper()
	var total int64
	for stream.Next() {
		if u := stream.Current().Usage; u.TotalTokens > 0 {
			total = u.TotalTokens
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if total == 0 {
		t.Fatal("stream reported no usage")
	}
	return total
}

// rlsClient reads and charges a gateway's rate limit counters directly.
type rlsClient struct{ c rlsv3.RateLimitServiceClient }

func (s *stack) rls(t *testing.T) *rlsClient {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+s.gw.RateLimitAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return &rlsClient{rlsv3.NewRateLimitServiceClient(cc)}
}

func (r *rlsClient) call(t *testing.T, d *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp, err := r.c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
		Domain: ratelimit.Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0]
}

func (r *rlsClient) charge(t *testing.T, tier, keyID string, n uint64) {
	t.Helper()
	r.call(t, ratelimit.TokensDescriptor(tier, keyID, ratelimit.Limits{}, n))
}

// used reads a key's tokens counter without changing it.
func (r *rlsClient) used(t *testing.T, tier, keyID string, lim ratelimit.Limits) int64 {
	t.Helper()
	st := r.call(t, ratelimit.TokensDescriptor(tier, keyID, lim, 0))
	return int64(st.GetCurrentLimit().GetRequestsPerUnit()) - int64(st.GetLimitRemaining())
}

// waitUsed waits for the charges of responses that have ended: the data
// plane makes them as each stream finishes, which the client cannot
// observe directly.
func (r *rlsClient) waitUsed(t *testing.T, tier, keyID string, want int64) {
	t.Helper()
	r.waitUsedWith(t, tier, keyID, ratelimit.Limits{}, want)
}

func (r *rlsClient) waitUsedWith(t *testing.T, tier, keyID string, lim ratelimit.Limits, want int64) {
	t.Helper()
	var got int64
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = r.used(t, tier, keyID, lim); got == want {
			return
		}
	}
	t.Fatalf("tokens used = %d, want %d", got, want)
}
