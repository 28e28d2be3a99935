package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// providerKeyEnv names the provider credential variable the test stacks use.
const providerKeyEnv = "SWITCHYARD_E2E_PROVIDER_KEY"

// stack is one running gateway in front of one recording fake upstream.
type stack struct {
	gw          *gateway.Gateway
	dataDir     string
	key         string // the client's API key: enterprise, with limits no test reaches
	providerKey string
	upstream    *recorder
	logs        *syncBuffer
}

type stackOptions struct {
	maxBody int64
	// serviceTime is the fake upstream's delay before every answer.
	serviceTime time.Duration
	// extraYAML is appended to the stack's configuration (top-level keys).
	extraYAML string
	// gateway, if not nil, adjusts the gateway's options.
	gateway func(*gateway.Options)
	// wrapUpstream, if not nil, wraps the fake upstream's handler.
	wrapUpstream func(http.Handler) http.Handler
	// promptCache is the fake upstream's prompt cache.
	promptCache fake.CacheOptions
}

// newStack starts a gateway whose only provider is a fake OpenAI upstream that
// records what reaches it.
func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	providerKey := "prov-" + strings.Repeat("z", 20) + fmt.Sprint(time.Now().UnixNano())
	t.Setenv(providerKeyEnv, providerKey)
	rec := &recorder{next: fake.NewOpenAI(fake.Options{APIKey: providerKey, ServiceTime: o.serviceTime, PromptCache: o.promptCache})}
	if o.wrapUpstream != nil {
		rec.next = o.wrapUpstream(rec.next)
	}
	up := httptest.NewServer(rec)
	t.Cleanup(up.Close)

	if o.maxBody == 0 {
		o.maxBody = config.DefaultMaxRequestBodyBytes
	}
	yaml := fmt.Sprintf(`listeners:
  - name: public
    address: 127.0.0.1:18080 # replaced by ListenOverride
limits:
  max_request_body_bytes: %d
providers:
  - name: fake-openai
    kind: openai
    base_url: %s/v1
    api_key_env: %s
    # The tests inject faults into the fake through the gateway.
    forward_headers: [x-fake-status, x-fake-retry-after, x-fake-delay-ms, x-fake-cut-after, x-fake-chunks]
models:
  - id: demo/chat
    # Large enough for the 6 MiB prompt (about 1.6M tokens by the gateway's
    # estimate of 4 bytes a token).
    context_window: 2000000
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
`, o.maxBody, up.URL, providerKeyEnv) + o.extraYAML
	cfg, err := config.Parse("e2e.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dataDir := t.TempDir()
	gopts := gateway.Options{
		Config:         cfg,
		DataDir:        dataDir,
		Logger:         slog.New(jsonlog.NewHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ListenOverride: "127.0.0.1:0",
		// Fixed: rate limit windows never roll over during a test.
		RateLimitClock: fixedClock{},
	}
	if o.gateway != nil {
		o.gateway(&gopts)
	}
	gw, err := gateway.Start(ctx, gopts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	// Rate limits have their own tests (ratelimit_test.go); the others must
	// not run into them, 6 MiB prompts included.
	key, _, err := gw.Keys.Issue(ctx, keys.Spec{Name: "e2e", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	return &stack{gw: gw, dataDir: dataDir, key: key, providerKey: providerKey, upstream: rec, logs: logs}
}

// client is an official SDK client pointed at the gateway, with retries off so
// every assertion sees the first answer.
func (s *stack) client(opts ...option.RequestOption) openai.Client {
	base := []option.RequestOption{
		option.WithBaseURL(s.gw.BaseURL()),
		option.WithAPIKey(s.key),
		option.WithMaxRetries(0),
	}
	return openai.NewClient(append(base, opts...)...)
}

// post sends a raw request (for bodies the SDK would never produce).
func (s *stack) post(t *testing.T, path, auth string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.gw.BaseURL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	if auth != "" {
		req.Header.Set("authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// recorder remembers the headers and bodies of requests reaching the upstream.
type recorder struct {
	next http.Handler
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	header http.Header
	host   string // the Host the request arrived with
	body   []byte
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.reqs = append(r.reqs, recorded{header: req.Header.Clone(), host: req.Host, body: body})
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(body))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) all() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// validateSchema checks a body Switchyard produced against the official
// OpenAI schema (a no-op, logged once, when the spec is absent).
func validateSchema(t *testing.T, name string, doc []byte) {
	t.Helper()
	schematest.Conforms(t, name, doc)
}

// fixedClock is 18 s into a minute, forever: every rate limit window of a
// test resets in 42 s and none ends while it runs.
type fixedClock struct{}

func (fixedClock) UnixNow() int64 { return 1_800_000_000 - 1_800_000_000%60 + 18 }
