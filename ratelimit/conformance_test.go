package ratelimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// testClock is a settable Unix-seconds clock. Every backend's windows are
// computed from it, so no test can straddle a real minute boundary.
type testClock struct{ now atomic.Int64 }

func (c *testClock) UnixNow() int64 { return c.now.Load() }

// start is 18 s into a minute: windows reset in 42 s.
const start = 1_800_000_000 - 1_800_000_000%60 + 18

func newClock() *testClock {
	c := &testClock{}
	c.now.Store(start)
	return c
}

// testConfig is a configuration whose tiers are the defaults, except that
// free's RPM is rpm.
func testConfig(t *testing.T, rpm int) *config.Config {
	t.Helper()
	cfg, err := config.Parse("conformance.yaml", fmt.Appendf(nil, `
listeners: [{name: public, address: "127.0.0.1:8080"}]
providers: [{name: local, kind: openai, base_url: "http://127.0.0.1:8091/v1"}]
models: [{id: local/llama, providers: [{provider: local, upstream_model: llama}]}]
tiers:
  free: {rpm: %d, tpm: 40000}
`, rpm))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// controlPlane serves cfg over ADS on loopback, as the gateway's does.
func controlPlane(t *testing.T, cfg *config.Config) (*controlplane.Server, string) {
	t.Helper()
	cp := controlplane.New(nil)
	if _, err := cp.Update(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	return cp, serve(t, cp.Register)
}

func serve(t *testing.T, register func(grpc.ServiceRegistrar)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// backend starts a rate limit service configured from the control plane at
// xdsAddr and returns its RLS address.
type backend struct {
	name  string
	start func(t *testing.T, clock ratelimit.Clock, xdsAddr string) string
}

// memoryBackend is `switchyard run`'s limiter: envoyproxy/ratelimit's
// service on the in-process store, configured over xDS by an ADS client.
func memoryBackend(t *testing.T, clock ratelimit.Clock, xdsAddr string) string {
	srv := ratelimit.NewServer(ratelimit.Options{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	ads := adsclient.New(dial(t, xdsAddr), &corev3.Node{Id: "conformance-ratelimit", Cluster: "switchyard"}, slog.New(slog.DiscardHandler))
	ads.Watch(resourcev3.RateLimitConfigType, nil, srv.ConfigHandler)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = ads.Run(ctx) }()
	select {
	case <-ads.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("no RateLimitConfig over xDS")
	}
	return serve(t, srv.Register)
}

// TestConformance runs one table of RLS semantics against both stores:
// the in-process one, and envoyproxy/ratelimit's Redis store on a real
// redis-server with its own xDS config provider (CONFIG_TYPE=GRPC_XDS_SOTW)
// reading our control plane.
func TestConformance(t *testing.T) {
	for _, b := range []backend{
		{"memory", memoryBackend},
		{"redis", redisBackend},
	} {
		t.Run(b.name, func(t *testing.T) {
			clock := newClock()
			cp, xdsAddr := controlPlane(t, testConfig(t, 10))
			rls := rlsv3.NewRateLimitServiceClient(dial(t, b.start(t, clock, xdsAddr)))
			for _, c := range conformanceCases {
				t.Run(c.name, func(t *testing.T) {
					if raceEnabled && b.name == "redis" && c.name == "a tier change in the configuration is live" {
						// envoyproxy/ratelimit's own service writes a settings
						// field in SetConfig (ratelimit.go:92) that
						// ShouldRateLimit reads unlocked (:265), so a request
						// during a configuration push is a data race in the
						// library, not here. make test runs this case in its
						// non-race pass too.
						t.Skip("upstream data race in envoyproxy/ratelimit's SetConfig; checked in make test's non-race pass")
					}
					c.run(t, &env{rls: rls, clock: clock, cp: cp, key: fmt.Sprintf("key_%s_%d", b.name, time.Now().UnixNano())})
				})
			}
		})
	}
}

type env struct {
	rls   rlsv3.RateLimitServiceClient
	clock *testClock
	cp    *controlplane.Server
	key   string // a key id no other case uses
}

func (e *env) call(t *testing.T, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := e.rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: ratelimit.Domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.GetStatuses()) != len(ds) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(ds))
	}
	return resp
}

func requests(tier, key string, hits uint64) *ratelimitv3.RateLimitDescriptor {
	return ratelimit.RequestsDescriptor(tier, key, ratelimit.Limits{}, hits)
}

func tokens(tier, key string, hits uint64) *ratelimitv3.RateLimitDescriptor {
	return ratelimit.TokensDescriptor(tier, key, ratelimit.Limits{}, hits)
}

// want checks one descriptor status.
func want(t *testing.T, s *rlsv3.RateLimitResponse_DescriptorStatus, code rlsv3.RateLimitResponse_Code, limit, remaining uint32, resetSecs int64) {
	t.Helper()
	if s.GetCode() != code {
		t.Errorf("code = %v, want %v", s.GetCode(), code)
	}
	if got := s.GetCurrentLimit().GetRequestsPerUnit(); got != limit {
		t.Errorf("limit = %d, want %d", got, limit)
	}
	if limit > 0 && s.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE {
		t.Errorf("unit = %v, want MINUTE", s.GetCurrentLimit().GetUnit())
	}
	if s.GetLimitRemaining() != remaining {
		t.Errorf("remaining = %d, want %d", s.GetLimitRemaining(), remaining)
	}
	if resetSecs > 0 && s.GetDurationUntilReset().GetSeconds() != resetSecs {
		t.Errorf("reset = %v, want %ds", s.GetDurationUntilReset().AsDuration(), resetSecs)
	}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

var conformanceCases = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"requests count up to the limit, then over", func(t *testing.T, e *env) {
		for i := range 10 {
			r := e.call(t, requests("free", e.key, 1))
			want(t, r.Statuses[0], ok, 10, uint32(9-i), 42)
		}
		r := e.call(t, requests("free", e.key, 1))
		want(t, r.Statuses[0], over, 10, 0, 42)
		if r.GetOverallCode() != over {
			t.Errorf("overall = %v", r.GetOverallCode())
		}
	}},
	{"tokens: check only consumes nothing", func(t *testing.T, e *env) {
		for range 3 {
			want(t, e.call(t, tokens("free", e.key, 0)).Statuses[0], ok, 40000, 40000, 42)
		}
	}},
	{"tokens: charges accumulate; over once past the limit", func(t *testing.T, e *env) {
		want(t, e.call(t, tokens("free", e.key, 39000)).Statuses[0], ok, 40000, 1000, 42)
		want(t, e.call(t, tokens("free", e.key, 0)).Statuses[0], ok, 40000, 1000, 42)
		want(t, e.call(t, tokens("free", e.key, 1000)).Statuses[0], ok, 40000, 0, 42) // exactly at the limit
		want(t, e.call(t, tokens("free", e.key, 1)).Statuses[0], over, 40000, 0, 42)
		want(t, e.call(t, tokens("free", e.key, 0)).Statuses[0], over, 40000, 0, 42)
	}},
	{"admission: requests counted, tokens only read, in one call", func(t *testing.T, e *env) {
		e.call(t, tokens("standard", e.key, 150_000))
		r := e.call(t, requests("standard", e.key, 1), tokens("standard", e.key, 0))
		want(t, r.Statuses[0], ok, 60, 59, 42)
		want(t, r.Statuses[1], ok, 200_000, 50_000, 42)
		if r.GetOverallCode() != ok {
			t.Errorf("overall = %v", r.GetOverallCode())
		}
	}},
	{"descriptor limit override (enterprise)", func(t *testing.T, e *env) {
		lim := ratelimit.Limits{RPM: 3, TPM: 500, CustomRPM: true, CustomTPM: true}
		for i := range 3 {
			r := e.call(t, ratelimit.RequestsDescriptor("enterprise", e.key, lim, 1), ratelimit.TokensDescriptor("enterprise", e.key, lim, 100))
			want(t, r.Statuses[0], ok, 3, uint32(2-i), 42)
			want(t, r.Statuses[1], ok, 500, uint32(400-100*i), 42)
		}
		r := e.call(t, ratelimit.RequestsDescriptor("enterprise", e.key, lim, 1))
		want(t, r.Statuses[0], over, 3, 0, 42)
	}},
	{"unknown tier has no limit", func(t *testing.T, e *env) {
		r := e.call(t, requests("nope", e.key, 1))
		want(t, r.Statuses[0], ok, 0, 0, 0)
		if r.Statuses[0].GetCurrentLimit() != nil {
			t.Errorf("limit = %v, want none", r.Statuses[0].GetCurrentLimit())
		}
	}},
	{"enterprise tier without override has no limit", func(t *testing.T, e *env) {
		if r := e.call(t, requests("enterprise", e.key, 1)); r.Statuses[0].GetCurrentLimit() != nil {
			t.Errorf("limit = %v, want none", r.Statuses[0].GetCurrentLimit())
		}
	}},
	{"keys and tiers count separately", func(t *testing.T, e *env) {
		for range 11 {
			e.call(t, requests("free", e.key, 1))
		}
		want(t, e.call(t, requests("free", e.key+"_other", 1)).Statuses[0], ok, 10, 9, 42)
		want(t, e.call(t, requests("standard", e.key, 1)).Statuses[0], ok, 60, 59, 42)
	}},
	{"a new window starts from zero", func(t *testing.T, e *env) {
		for range 11 {
			e.call(t, requests("free", e.key, 1))
		}
		e.clock.now.Add(41) // one second before the boundary
		want(t, e.call(t, requests("free", e.key, 1)).Statuses[0], over, 10, 0, 1)
		e.clock.now.Add(1) // the boundary
		defer e.clock.now.Store(start)
		want(t, e.call(t, requests("free", e.key, 1)).Statuses[0], ok, 10, 9, 60)
	}},
	{"a tier change in the configuration is live", func(t *testing.T, e *env) {
		if _, err := e.cp.Update(context.Background(), testConfig(t, 20)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := e.call(t, requests("free", fmt.Sprintf("%s_%d", e.key, time.Now().UnixNano()), 1))
			if r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == 20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("free RPM still %d, want 20", r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}},
}
