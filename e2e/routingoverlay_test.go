package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// routingFleet is a split deployment whose control plane runs as several
// replicas (or restarts) on one store: PostgreSQL (storage.metadata.kind
// postgres) or the key database in a shared data directory. Two providers
// serve both models; prov-a is first.
type routingFleet struct {
	cfg        *config.Config
	dataDir    string // extproc's key database; the SQLite overlay's too
	listen     string // the data plane's public listener
	adminToken string
	key        string
	atA, atB   atomic.Int64 // requests reaching each provider
}

func newRoutingFleet(t *testing.T, postgres bool) *routingFleet {
	t.Helper()
	f := &routingFleet{dataDir: t.TempDir(), listen: freeLoopback(t), adminToken: "routing-admin-token-0123456789abcdef"}
	providerKey := fmt.Sprint("prov-routing-", time.Now().UnixNano())
	t.Setenv(providerKeyEnv, providerKey)
	counted := func(n *atomic.Int64) string {
		next := fake.NewOpenAI(fake.Options{APIKey: providerKey})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			next.ServeHTTP(w, r)
		}))
		t.Cleanup(up.Close)
		return up.URL
	}
	storage := ""
	if postgres {
		t.Setenv("SY_E2E_ROUTING_PG_DSN", pgtest.DSN(t))
		storage = "storage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_E2E_ROUTING_PG_DSN\n"
	}
	var err error
	f.cfg, err = config.Parse("routing.yaml", []byte(fmt.Sprintf(`listeners:
  - name: public
    address: %s
limits:
  max_request_body_bytes: %d
providers:
  - {name: prov-a, kind: openai, base_url: %s/v1, api_key_env: %s}
  - {name: prov-b, kind: openai, base_url: %s/v1, api_key_env: %s}
models:
  - id: demo/chat
    providers:
      - {provider: prov-a, upstream_model: fake-chat-1}
      - {provider: prov-b, upstream_model: fake-chat-2, priority: 1}
  - id: demo/other
    providers:
      - {provider: prov-a, upstream_model: fake-chat-1}
      - {provider: prov-b, upstream_model: fake-chat-2, priority: 1}
%s`, f.listen, conformanceMaxBody, counted(&f.atA), providerKeyEnv, counted(&f.atB), providerKeyEnv, storage)))
	if err != nil {
		t.Fatal(err)
	}
	store, err := keys.OpenSQLite(context.Background(), f.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	f.key, _, err = store.Create(context.Background(), "routing", "standard")
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// controlPlane starts a control-plane replica with its admin API; Close
// stops it (it is also stopped at the end of the test).
func (f *routingFleet) controlPlane(t *testing.T) (cp *gateway.Component, adminURL string) {
	t.Helper()
	cp, err := gateway.StartControlPlane(context.Background(), gateway.ControlPlaneOptions{Config: f.cfg, Listen: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), AdminListen: "127.0.0.1:0", AdminToken: f.adminToken, DataDir: f.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Close)
	return cp, "http://" + cp.AdminAddr.String()
}

// attach runs an extproc and the Go data plane (Envoy's stand-in) that
// follow cp, until the test ends.
func (f *routingFleet) attach(t *testing.T, ctx context.Context, cp *gateway.Component) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	ep, err := gateway.StartExtProc(ctx, gateway.ExtProcOptions{XDS: cp.Addr.String(), Listen: "127.0.0.1:0",
		DataDir: f.dataDir, MaxRequestBodyBytes: conformanceMaxBody, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ep.Close)
	dp := dataplane.New(dataplane.Options{Logger: logger, StaticClusters: map[string]string{catalog.ExtProcCluster: ep.Addr.String()}})
	t.Cleanup(func() { _ = dp.Close() })
	cc, err := grpc.NewClient(cp.Addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ads := adsclient.New(cc, &corev3.Node{Id: "routing-dataplane"}, nil)
	dp.Watch(ads)
	go func() { _ = ads.Run(ctx) }()
	waitFor(t, 10*time.Second, "data plane listening and extproc ready", func() bool { return dp.Addr("public") != nil && ep.Ready() })
}

// chat sends one chat completion through the data plane with openai-go and
// says which provider served it.
func (f *routingFleet) chat(t *testing.T, model string) string {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL("http://"+f.listen+"/v1"), option.WithAPIKey(f.key), option.WithMaxRetries(0))
	a, b := f.atA.Load(), f.atB.Load()
	if _, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	}); err != nil {
		t.Fatalf("chat %s: %v", model, err)
	}
	switch {
	case f.atA.Load() == a+1 && f.atB.Load() == b:
		return "prov-a"
	case f.atB.Load() == b+1 && f.atA.Load() == a:
		return "prov-b"
	}
	return fmt.Sprintf("unclear (a %d→%d, b %d→%d)", a, f.atA.Load(), b, f.atB.Load())
}

// routingState is GET /admin/v1/routing as the tests read it.
type routingState struct {
	Drained []string `json:"drained"`
	Models  []struct {
		ID               string `json:"id"`
		Routing          string `json:"routing"`
		FirstByteTimeout string `json:"first_byte_timeout"`
	} `json:"models"`
	Overrides []string `json:"overrides"`
}

func (f *routingFleet) routing(t *testing.T, adminURL string) routingState {
	t.Helper()
	code, body := adminDo(t, adminURL, f.adminToken, http.MethodGet, "/admin/v1/routing", nil)
	var st routingState
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		t.Fatalf("GET routing: %d %s", code, body)
	}
	return st
}

// adminCall is an admin API call that a goroutine may make (no t.Fatal).
func (f *routingFleet) adminCall(ctx context.Context, method, url string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("authorization", "Bearer "+f.adminToken)
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, out)
	}
	return nil
}

// TestRoutingDrainAcrossControlPlaneReplicas: two control-plane replicas on
// one PostgreSQL; a drain through one reaches a data plane attached to the
// other within 2 s, and so does the undrain.
func TestRoutingDrainAcrossControlPlaneReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newRoutingFleet(t, true)
	_, adminA := f.controlPlane(t)
	cpB, adminB := f.controlPlane(t)
	f.attach(t, ctx, cpB)
	if got := f.chat(t, "demo/chat"); got != "prov-a" {
		t.Fatalf("before the drain demo/chat went to %s, want prov-a", got)
	}
	if code, body := adminDo(t, adminA, f.adminToken, http.MethodPost, "/admin/v1/providers/prov-a/drain", nil); code != http.StatusOK {
		t.Fatalf("drain through replica A: %d %s", code, body)
	}
	drained := time.Now()
	waitFor(t, 2*time.Second, "the drain made through replica A to reach the data plane of replica B", func() bool {
		return f.chat(t, "demo/chat") == "prov-b"
	})
	t.Logf("the drain reached replica B's data plane %v after replica A answered", time.Since(drained).Round(time.Millisecond))
	if st := f.routing(t, adminB); strings.Join(st.Drained, ",") != "prov-a" {
		t.Errorf("replica B's admin API shows drained %v", st.Drained)
	}
	if code, body := adminDo(t, adminA, f.adminToken, http.MethodPost, "/admin/v1/providers/prov-a/undrain", nil); code != http.StatusOK {
		t.Fatalf("undrain through replica A: %d %s", code, body)
	}
	waitFor(t, 2*time.Second, "the undrain made through replica A to reach the data plane of replica B", func() bool {
		return f.chat(t, "demo/chat") == "prov-a"
	})
}

// TestRoutingDrainSurvivesControlPlaneRestart: a control plane restarted
// after a drain (and a routing change) serves them from its first
// snapshot: a data plane attached to it never routes to the drained
// provider, and the restarted replica served one snapshot version only.
func TestRoutingDrainSurvivesControlPlaneRestart(t *testing.T) {
	for _, tt := range []struct {
		name     string
		postgres bool
	}{{"sqlite", false}, {"postgres", true}} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := newRoutingFleet(t, tt.postgres)
			cp1, admin1 := f.controlPlane(t)
			if code, body := adminDo(t, admin1, f.adminToken, http.MethodPost, "/admin/v1/providers/prov-a/drain", nil); code != http.StatusOK {
				t.Fatalf("drain: %d %s", code, body)
			}
			if code, body := adminDo(t, admin1, f.adminToken, http.MethodPatch, "/admin/v1/models/demo/other",
				map[string]any{"first_byte_timeout": "17s"}); code != http.StatusOK {
				t.Fatalf("set demo/other: %d %s", code, body)
			}
			cp1.Close()

			cp2, admin2 := f.controlPlane(t)
			f.attach(t, ctx, cp2)
			for range 3 {
				if got := f.chat(t, "demo/chat"); got != "prov-b" {
					t.Fatalf("after the restart demo/chat went to %s, want prov-b (prov-a drained)", got)
				}
			}
			if f.atA.Load() != 0 {
				t.Fatalf("the drained provider served %d requests after the restart", f.atA.Load())
			}
			st := f.routing(t, admin2)
			if strings.Join(st.Drained, ",") != "prov-a" {
				t.Errorf("restarted replica shows drained %v", st.Drained)
			}
			for _, m := range st.Models {
				if m.ID == "demo/other" && m.FirstByteTimeout != "17s" {
					t.Errorf("restarted replica: demo/other first_byte_timeout %s, want 17s", m.FirstByteTimeout)
				}
			}
			code, body := adminDo(t, admin2, f.adminToken, http.MethodGet, "/metrics", nil)
			if code != http.StatusOK || !strings.Contains(string(body), "\nswitchyard_config_version 1\n") {
				t.Errorf("the restarted control plane should have served only its first snapshot (version 1): %d\n%s", code, body)
			}
		})
	}
}

// TestRoutingConcurrentChangesThroughTwoReplicas: changes made at the same
// time through two control-plane replicas on one PostgreSQL all land, and
// both replicas end up serving all of them.
func TestRoutingConcurrentChangesThroughTwoReplicas(t *testing.T) {
	ctx := context.Background()
	f := newRoutingFleet(t, true)
	_, adminA := f.controlPlane(t)
	_, adminB := f.controlPlane(t)
	const rounds = 5
	for r := 1; r <= rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for _, call := range []struct {
			method, url string
			body        any
		}{
			{http.MethodPatch, adminA + "/admin/v1/models/demo/chat", map[string]any{"first_byte_timeout": fmt.Sprintf("%ds", 10+r)}},
			{http.MethodPatch, adminB + "/admin/v1/models/demo/other", map[string]any{"first_byte_timeout": fmt.Sprintf("%ds", 20+r)}},
		} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- f.adminCall(ctx, call.method, call.url, call.body)
			}()
		}
		if r == rounds {
			// A drain through B races a routing change through A.
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- f.adminCall(ctx, http.MethodPost, adminB+"/admin/v1/providers/prov-a/drain", nil)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	want := fmt.Sprintf("drained [prov-a] demo/chat %ds demo/other %ds", 10+rounds, 20+rounds)
	state := func(adminURL string) string {
		st := f.routing(t, adminURL)
		out := fmt.Sprintf("drained %v", st.Drained)
		for _, m := range st.Models {
			out += " " + m.ID + " " + m.FirstByteTimeout
		}
		return out
	}
	for name, url := range map[string]string{"A": adminA, "B": adminB} {
		deadline := time.Now().Add(2 * time.Second)
		for got := state(url); got != want; got = state(url) {
			if time.Now().After(deadline) {
				t.Fatalf("replica %s within 2s: %s\nwant %s", name, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
