package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/envoy"
	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// The data plane conformance table: requests a client sends and what any
// Switchyard data plane answers. It runs against the Go data plane always,
// and against real Envoy when ENVOY_BIN names an Envoy binary, with the
// bootstrap `switchyard envoy bootstrap` renders and the control plane and
// extproc as their own components, as deploy/ runs them.

const conformanceMaxBody = 64 << 10

type conformanceCase struct {
	name    string
	method  string
	path    string
	headers map[string]string // "authorization": "" sends none; absent: the test key
	body    string
	status  int
	code    string // the OpenAI error code, for errors
	check   func(t *testing.T, resp *http.Response, body []byte)
}

func conformanceCases() []conformanceCase {
	chat := `{"model":"demo/chat","messages":[{"role":"user","content":"Hello!"}]}`
	return []conformanceCase{
		{name: "chat completion", method: "POST", path: "/chat/completions", body: chat, status: 200,
			check: func(t *testing.T, _ *http.Response, body []byte) {
				if !bytes.Contains(body, []byte(`"chat.completion"`)) {
					t.Errorf("not a chat completion: %.200s", body)
				}
			}},
		{name: "streamed chat completion", method: "POST", path: "/chat/completions",
			body: `{"model":"demo/chat","stream":true,"messages":[{"role":"user","content":"Hello!"}]}`, status: 200,
			check: func(t *testing.T, resp *http.Response, body []byte) {
				if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
					t.Errorf("content-type %q", ct)
				}
				if !bytes.HasSuffix(bytes.TrimSpace(body), []byte("data: [DONE]")) {
					t.Errorf("stream does not end with [DONE]: %.300s", body)
				}
			}},
		{name: "no API key", method: "POST", path: "/chat/completions", body: chat,
			headers: map[string]string{"authorization": ""}, status: 401, code: "invalid_api_key"},
		{name: "unknown model", method: "POST", path: "/chat/completions",
			body: `{"model":"nobody/nothing","messages":[{"role":"user","content":"x"}]}`, status: 404, code: "model_not_found"},
		{name: "unknown path", method: "GET", path: "/nope", status: 404, code: "unknown_url"},
		{name: "models answered by extproc", method: "GET", path: "/models", status: 200,
			check: func(t *testing.T, _ *http.Response, body []byte) {
				if !bytes.HasPrefix(body, []byte(`{"object":"list","data":[{"id":"demo/chat",`)) {
					t.Errorf("not the model list: %.200s", body)
				}
			}},
		{name: "forged routing header", method: "POST", path: "/completions", body: `{"model":"demo/chat","prompt":"x"}`,
			headers: map[string]string{catalog.RouteHeader: "demo/chat", catalog.FirstHeader: "fake-openai"}, status: 404, code: "unknown_url"},
		{name: "body over the buffer limit", method: "POST", path: "/chat/completions",
			body:   `{"model":"demo/chat","messages":[{"role":"user","content":"` + strings.Repeat("x", conformanceMaxBody) + `"}]}`,
			status: 413, code: "request_too_large"},
	}
}

func runConformance(t *testing.T, baseURL, key string) {
	for _, tc := range conformanceCases() {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, baseURL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != "" {
				req.Header.Set("content-type", "application/json")
			}
			req.Header.Set("authorization", "Bearer "+key)
			for k, v := range tc.headers {
				if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tc.status, body)
			}
			if resp.Header.Get("x-request-id") == "" {
				t.Error("no x-request-id")
			}
			if tc.code != "" {
				var e struct {
					Error map[string]any `json:"error"`
				}
				if err := json.Unmarshal(body, &e); err != nil {
					t.Fatalf("error body is not JSON: %v: %.300s", err, body)
				}
				if e.Error["code"] != tc.code {
					t.Errorf("code %v, want %s: %s", e.Error["code"], tc.code, body)
				}
				for _, k := range []string{"message", "type", "param", "code"} {
					if _, ok := e.Error[k]; !ok {
						t.Errorf("error body lacks %q: %s", k, body)
					}
				}
				if ct := resp.Header.Get("content-type"); ct != "application/json" {
					t.Errorf("content-type %q", ct)
				}
			}
			if tc.check != nil {
				tc.check(t, resp, body)
			}
		})
	}
}

// TestConformanceGoDataPlane runs the table against the Go data plane.
func TestConformanceGoDataPlane(t *testing.T) {
	s := newStack(t, stackOptions{maxBody: conformanceMaxBody})
	runConformance(t, s.gw.BaseURL(), s.key)
}

// TestConformanceLoopbackGRPC runs the table with the embedded data plane
// reaching ext_proc and the rate limit service over loopback gRPC, as Envoy
// does, instead of the in-process channel the other stacks use.
func TestConformanceLoopbackGRPC(t *testing.T) {
	s := newStack(t, stackOptions{maxBody: conformanceMaxBody, gateway: func(o *gateway.Options) { o.LoopbackGRPC = true }})
	runConformance(t, s.gw.BaseURL(), s.key)
}

// splitStack is the control plane and extproc as separate components, as
// deploy/ runs them, in front of a fake provider; the data plane is up to the
// test.
type splitStack struct {
	cp, ep *gateway.Component
	key    string
	listen string // the public listener's address
	// adminURL is the control plane's admin API (keys and routing for the
	// whole deployment); adminToken its bearer token.
	adminURL, adminToken string
}

func newSplitStack(t *testing.T, ctx context.Context) *splitStack {
	return newSplitStackWith(t, ctx, nil)
}

// newSplitStackWith is newSplitStack with, when second is not nil, a second
// provider (fake-openai-b, served by second(its credential)) behind
// demo/chat's first.
func newSplitStackWith(t *testing.T, ctx context.Context, second func(apiKey string) http.Handler) *splitStack {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	providerKey := "prov-split-" + fmt.Sprint(time.Now().UnixNano())
	t.Setenv(providerKeyEnv, providerKey)
	up := httptest.NewServer(fake.NewOpenAI(fake.Options{APIKey: providerKey}))
	t.Cleanup(up.Close)
	s := &splitStack{listen: freeLoopback(t)}
	var extraProvider, extraRoute string
	if second != nil {
		up2 := httptest.NewServer(second(providerKey))
		t.Cleanup(up2.Close)
		extraProvider = fmt.Sprintf("  - {name: fake-openai-b, kind: openai, base_url: %s/v1, api_key_env: %s}\n", up2.URL, providerKeyEnv)
		extraRoute = "      - {provider: fake-openai-b, upstream_model: fake-chat-2, priority: 1}\n"
	}
	cfg, err := config.Parse("split.yaml", []byte(fmt.Sprintf(`listeners:
  - name: public
    address: %s
limits:
  max_request_body_bytes: %d
providers:
  - name: fake-openai
    kind: openai
    base_url: %s/v1
    api_key_env: %s
%smodels:
  - id: demo/chat
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
%s`, s.listen, conformanceMaxBody, up.URL, providerKeyEnv, extraProvider, extraRoute)))
	if err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	s.adminToken = "split-admin-token-0123456789abcdef"
	if s.cp, err = gateway.StartControlPlane(ctx, gateway.ControlPlaneOptions{Config: cfg, Listen: "127.0.0.1:0", Logger: logger,
		AdminListen: "127.0.0.1:0", AdminToken: s.adminToken, DataDir: dataDir}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cp.Close)
	s.adminURL = "http://" + s.cp.AdminAddr.String()
	store, err := keys.OpenSQLite(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	s.key, _, err = store.Create(ctx, "split", "standard")
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.ep, err = gateway.StartExtProc(ctx, gateway.ExtProcOptions{
		XDS: s.cp.Addr.String(), Listen: "127.0.0.1:0", DataDir: dataDir,
		MaxRequestBodyBytes: conformanceMaxBody, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.ep.Close)
	return s
}

// waitFor polls ok for up to d.
func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestConformanceSplitComponents runs the table through the components
// deploy/ runs separately (`switchyard controlplane`, `switchyard extproc`),
// with the Go data plane subscribing to the control plane in Envoy's place.
func TestConformanceSplitComponents(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSplitStack(t, ctx)
	s.startDataPlane(t, ctx)
	runConformance(t, "http://"+s.listen+"/v1", s.key)
}

// startDataPlane runs the Go data plane against the split control plane
// and extproc, in Envoy's place, until ctx ends.
func (s *splitStack) startDataPlane(t *testing.T, ctx context.Context) {
	t.Helper()
	dp := dataplane.New(dataplane.Options{
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		StaticClusters: map[string]string{catalog.ExtProcCluster: s.ep.Addr.String()},
	})
	t.Cleanup(func() { _ = dp.Close() })
	cc, err := grpc.NewClient(s.cp.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ads := adsclient.New(cc, &corev3.Node{Id: "split-dataplane"}, nil)
	dp.Watch(ads)
	go func() { _ = ads.Run(ctx) }()
	waitFor(t, 10*time.Second, "data plane listening and extproc ready", func() bool { return dp.Addr("public") != nil && s.ep.Ready() })
}

// TestConformanceEnvoy runs the table against real Envoy when ENVOY_BIN is
// set, and says so when it is not.
func TestConformanceEnvoy(t *testing.T) {
	bin := os.Getenv("ENVOY_BIN")
	if bin == "" {
		t.Skip("ENVOY_BIN is not set: the data plane conformance table ran against the Go data plane only " +
			"(TestConformanceGoDataPlane, TestConformanceSplitComponents); set ENVOY_BIN=/path/to/envoy to run it against real Envoy")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSplitStack(t, ctx)
	admin := freeLoopback(t)
	boot, err := envoy.RenderBootstrap(envoy.BootstrapOptions{
		NodeID: "envoy-e2e", XDS: s.cp.Addr.String(), ExtProc: s.ep.Addr.String(),
		// Nothing listens there: the ratelimit filter only charges usage at
		// stream end and fails open.
		RateLimit: freeLoopback(t), Admin: admin,
	})
	if err != nil {
		t.Fatal(err)
	}
	bootFile := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(bootFile, boot, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, "-c", bootFile, "--disable-hot-restart", "--log-level", "warn")
	out := &lineLog{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	waitFor(t, 30*time.Second, "Envoy ready", func() bool {
		resp, err := http.Get("http://" + admin + envoy.ReadyPath)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && s.ep.Ready()
	})
	runConformance(t, "http://"+s.listen+"/v1", s.key)
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lineLog sends a process's output to the test log, line by line.
type lineLog struct {
	t   *testing.T
	mu  sync.Mutex
	buf []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log("envoy: " + string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}
