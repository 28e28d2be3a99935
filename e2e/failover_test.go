package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// Routing e2e (docs/routing-design.md): failover between providers, regions
// and live route changes, through the whole in-process stack (control
// plane, extproc with its downstream and upstream phases, the Go data
// plane) with the official SDK, in front of fake OpenAI upstreams whose
// behaviour the tests switch.

// upstreamMode is what a switchable upstream does with a request.
type upstreamMode int32

const (
	modeServe upstreamMode = iota // answer like OpenAI (providers/fake)
	mode500                       // answer 500 server_error
	modeHang                      // never answer (until the gateway gives up)
)

// switchable is a fake OpenAI upstream that a test can make fail: answer
// 500, hang, or refuse connections (its listener closed, and opened again
// on the same port to recover). Every response says which upstream sent it
// (header x-upstream), so a test knows who answered the client.
type switchable struct {
	name string
	addr string
	next http.Handler
	mode atomic.Int32

	hits     atomic.Int64 // requests that reached it
	inFlight atomic.Int64

	mu  sync.Mutex
	srv *http.Server
}

// upstreamHeader names the upstream that answered.
const upstreamHeader = "x-upstream"

func newSwitchable(t *testing.T, name, apiKey string, opts fake.Options) *switchable {
	t.Helper()
	opts.APIKey = apiKey
	u := &switchable{name: name, next: fake.NewOpenAI(opts)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = ln.Addr().String()
	u.serve(ln)
	t.Cleanup(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.srv != nil {
			_ = u.srv.Close()
		}
	})
	return u
}

func (u *switchable) serve(ln net.Listener) {
	srv := &http.Server{Handler: u}
	u.mu.Lock()
	u.srv = srv
	u.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

func (u *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	w.Header().Set(upstreamHeader, u.name)
	switch upstreamMode(u.mode.Load()) {
	case mode500:
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":{"message":"upstream is broken","type":"server_error","param":null,"code":"broken"}}`)
	case modeHang:
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	default:
		u.next.ServeHTTP(w, r)
	}
}

func (u *switchable) set(m upstreamMode) { u.mode.Store(int32(m)) }

// refuse closes the listener and every connection: connections are refused.
func (u *switchable) refuse(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.srv != nil {
		_ = u.srv.Close()
		u.srv = nil
	}
}

// accept listens on the same address again.
func (u *switchable) accept(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port can take a moment to be free again
		if ln, err = net.Listen("tcp", u.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%s: listen again on %s: %v", u.name, u.addr, err)
	}
	u.serve(ln)
}

// routeStack is a gateway in front of switchable upstreams, configured
// from a file it watches, with the admin API on.
type routeStack struct {
	gw         *gateway.Gateway
	key        string
	up         map[string]*switchable
	cfgPath    string
	adminToken string
	logs       *syncBuffer
	client     openai.Client
}

type routeStackOptions struct {
	region      string        // the gateway's home region (default: the config's)
	serviceTime time.Duration // the fakes' latency
	// yaml renders the configuration from the upstreams' base URLs and
	// their credential variables, by upstream name.
	yaml func(base, keyEnv map[string]string) string
	// upstreams, when set, are reused (a second gateway in front of the
	// same providers); otherwise one is started per name.
	upstreams map[string]*switchable
	names     []string
}

func newRouteStack(t *testing.T, o routeStackOptions) *routeStack {
	t.Helper()
	s := &routeStack{up: o.upstreams, logs: &syncBuffer{}}
	base, keyEnv := map[string]string{}, map[string]string{}
	if s.up == nil {
		s.up = map[string]*switchable{}
		for _, name := range o.names {
			env := "SWITCHYARD_E2E_KEY_" + strings.ToUpper(name)
			cred := name + "-" + randomHex(12)
			t.Setenv(env, cred)
			s.up[name] = newSwitchable(t, name, cred, fake.Options{ServiceTime: o.serviceTime})
		}
	}
	for name, u := range s.up {
		base[name] = "http://" + u.addr + "/v1"
		keyEnv[name] = "SWITCHYARD_E2E_KEY_" + strings.ToUpper(name)
	}
	src := o.yaml(base, keyEnv)
	s.cfgPath = filepath.Join(t.TempDir(), "switchyard.yaml")
	if err := os.WriteFile(s.cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(s.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	s.adminToken = "admin-" + randomHex(16)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s.gw, err = gateway.Start(ctx, gateway.Options{
		Config:         cfg,
		ConfigPath:     s.cfgPath, // reloaded every 500 ms when it changes
		Region:         o.region,
		DataDir:        t.TempDir(),
		Logger:         slog.New(jsonlog.NewHandler(s.logs, &slog.HandlerOptions{Level: logLevel()})),
		ListenOverride: "127.0.0.1:0",
		AdminListen:    "127.0.0.1:0",
		AdminToken:     s.adminToken,
		RateLimitClock: fixedClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.gw.Close)
	s.key, _, err = s.gw.Keys.Issue(ctx, keys.Spec{Name: "e2e-routing", Tier: "enterprise", RPM: 1_000_000_000, TPM: 4_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}
	t.Cleanup(hc.CloseIdleConnections)
	s.client = openai.NewClient(option.WithBaseURL(s.gw.BaseURL()), option.WithAPIKey(s.key),
		option.WithMaxRetries(0), option.WithHTTPClient(hc), option.WithRequestTimeout(30*time.Second))
	return s
}

// logLevel is info, or debug when E2E_DUMP_LOGS asks for the log.
func logLevel() slog.Level {
	if os.Getenv("E2E_DUMP_LOGS") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ask sends one chat completion for model and returns the upstream that
// answered.
func (s *routeStack) ask(ctx context.Context, model, text string, opts ...option.RequestOption) (string, error) {
	var resp *http.Response
	res, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}, append(opts, option.WithResponseInto(&resp))...)
	if err != nil {
		return "", err
	}
	if len(res.Choices) != 1 || !strings.Contains(res.Choices[0].Message.Content, text) {
		return "", fmt.Errorf("unexpected completion %+v", res.Choices)
	}
	return resp.Header.Get(upstreamHeader), nil
}

// mustAsk is ask that fails the test on an error.
func (s *routeStack) mustAsk(t *testing.T, model, text string) string {
	t.Helper()
	from, err := s.ask(context.Background(), model, text)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return from
}

// admin calls the admin API.
func (s *routeStack) admin(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	return adminDo(t, s.gw.AdminURL(), s.adminToken, method, path, body)
}

// adminDo calls an admin API at base with token; body, when not nil, is
// sent as JSON.
func adminDo(t *testing.T, base, token, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("authorization", "Bearer "+token)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// ejections counts the data plane's outlier ejections of a provider.
func (s *routeStack) ejections(provider string) int {
	return strings.Count(s.logs.String(), `"msg":"outlier detection ejected host","component":"dataplane","cluster":"provider_`+provider+`"`)
}

// failoverYAML: provider a is first (priority 0), b the fallback; a fails
// over to b after first_byte_timeout, and two failures in a row eject a
// provider for a second.
func failoverYAML(base, keyEnv map[string]string) string {
	return fmt.Sprintf(`
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
outlier_detection: {consecutive_failures: 2, interval: 50ms, base_ejection_time: 1s}
providers:
  - {name: a, kind: openai, base_url: %q, api_key_env: %s, region: us}
  - {name: b, kind: openai, base_url: %q, api_key_env: %s, region: us}
models:
  - id: demo/failover
    first_byte_timeout: 300ms
    routing: priority
    providers:
      - {provider: a, upstream_model: model-a, priority: 0}
      - {provider: b, upstream_model: model-b, priority: 1}
`, base["a"], keyEnv["a"], base["b"], keyEnv["b"])
}

// TestFailover: provider a answers 500, hangs past first_byte_timeout, or
// refuses connections; every client request gets b's answer. After two
// failures a is ejected: no attempt reaches it while it is out, and once
// healthy it is probed back in and serves again.
func TestFailover(t *testing.T) {
	s := newRouteStack(t, routeStackOptions{names: []string{"a", "b"}, yaml: failoverYAML})
	a, b := s.up["a"], s.up["b"]
	const model = "demo/failover"

	if from := s.mustAsk(t, model, "warm up"); from != "a" {
		t.Fatalf("healthy: answered by %q, want a (priority 0)", from)
	}
	for i, tc := range []struct {
		name    string
		fail    func()
		recover func()
		reaches bool // whether failing attempts reach a's handler
	}{
		{"500", func() { a.set(mode500) }, func() { a.set(modeServe) }, true},
		{"hang past first_byte_timeout", func() { a.set(modeHang) }, func() { a.set(modeServe) }, true},
		{"connection refused", func() { a.refuse(t) }, func() { a.accept(t) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Back in rotation from the previous case (its ejection may
			// still be running): a answers.
			waitFor(t, 10*time.Second, "a serving", func() bool { return s.mustAsk(t, model, "ready?") == "a" })
			hitsBefore, ejBefore := a.hits.Load(), s.ejections("a")
			tc.fail()
			start := time.Now()
			for n := range 6 {
				text := fmt.Sprintf("case %d request %d", i, n)
				from, err := s.ask(context.Background(), model, text)
				if err != nil {
					t.Fatalf("%s: client saw an error: %v", text, err)
				}
				if from != "b" {
					t.Fatalf("%s: answered by %q, want b", text, from)
				}
			}
			// Stream, too: the failover happens before any byte went out.
			stream := s.client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
				Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("streamed during the outage")}})
			acc := openai.ChatCompletionAccumulator{}
			for stream.Next() {
				acc.AddChunk(stream.Current())
			}
			if err := stream.Err(); err != nil || !strings.Contains(acc.Choices[0].Message.Content, "streamed during the outage") {
				t.Fatalf("stream during the outage: %v %+v", err, acc.Choices)
			}
			elapsed := time.Since(start)
			if s.ejections("a") != ejBefore+1 {
				t.Errorf("a ejected %d times during the outage, want once", s.ejections("a")-ejBefore)
			}
			// Two failed attempts eject it; the other requests never tried
			// it (they all ran within the 1 s ejection).
			if got := a.hits.Load() - hitsBefore; tc.reaches && got != 2 {
				t.Errorf("a saw %d attempts during the outage, want 2 (then ejected); outage took %v", got, elapsed)
			}
			if elapsed > time.Second {
				t.Logf("the outage requests took %v: longer than the ejection, so a may have been probed", elapsed)
			}
			tc.recover()
			// Probed back in after the ejection time, then serving.
			waitFor(t, 10*time.Second, "a probed back in", func() bool { return s.mustAsk(t, model, "are you back?") == "a" })
		})
	}
	if n := b.hits.Load(); n < 18 {
		t.Errorf("b served %d requests, want at least 18", n)
	}
}
