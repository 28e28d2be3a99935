package dataplane

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// ---- unit tests: retry policy, host selection, outlier detection ----

func TestCompileRetryPolicy(t *testing.T) {
	prevHosts := []*routev3.RetryPolicy_RetryHostPredicate{{Name: predicatePrevHosts,
		ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(t, &previoushostsv3.PreviousHostsPredicate{})}}}
	prevPriorities := func(n uint32) *routev3.RetryPolicy_RetryPriority {
		return &routev3.RetryPolicy_RetryPriority{Name: priorityPrevious,
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(t, &previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: int32(n)})}}
	}
	tests := []struct {
		name    string
		in      *routev3.RetryPolicy
		want    retryPolicy
		wantErr string
	}{
		{"the control plane's", controlplane.RetryPolicy(config.Model{FirstByteTimeout: 7 * time.Second,
			Providers: []config.ModelProvider{{Provider: "a"}, {Provider: "b"}, {Provider: "c"}}}),
			retryPolicy{onConnectFailure: true, onReset: true, on5xx: true, onStatusCodes: true, statusCodes: []int{429},
				numRetries: 2, perTry: 7 * time.Second, prevHosts: true, maxHostTries: 5, prevPriorities: true,
				backoffBase: 25 * time.Millisecond, backoffMax: 250 * time.Millisecond}, ""},
		{"defaults: one retry", &routev3.RetryPolicy{RetryOn: "gateway-error"},
			retryPolicy{onGatewayError: true, numRetries: 1, maxHostTries: 1, backoffBase: 25 * time.Millisecond, backoffMax: 250 * time.Millisecond}, ""},
		{"max attempts need the predicate", &routev3.RetryPolicy{RetryOn: "5xx", HostSelectionRetryMaxAttempts: 4},
			retryPolicy{on5xx: true, numRetries: 1, maxHostTries: 1, backoffBase: 25 * time.Millisecond, backoffMax: 250 * time.Millisecond}, ""},
		{"back-off", &routev3.RetryPolicy{RetryOn: "reset", NumRetries: wrapperspb.UInt32(0), RetryHostPredicate: prevHosts,
			RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(time.Millisecond), MaxInterval: durationpb.New(3 * time.Millisecond)}},
			retryPolicy{onReset: true, numRetries: 0, prevHosts: true, maxHostTries: 1, backoffBase: time.Millisecond, backoffMax: 3 * time.Millisecond}, ""},
		{"unknown condition", &routev3.RetryPolicy{RetryOn: "5xx,sometimes"}, retryPolicy{}, `retry_on "sometimes"`},
		{"gRPC conditions", &routev3.RetryPolicy{RetryOn: "unavailable"}, retryPolicy{}, `retry_on "unavailable"`},
		{"another host predicate", &routev3.RetryPolicy{RetryOn: "5xx", RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{Name: "envoy.retry_host_predicates.omit_canary_hosts"}}},
			retryPolicy{}, "omit_canary_hosts"},
		{"priority update frequency 2", &routev3.RetryPolicy{RetryOn: "5xx", RetryPriority: prevPriorities(2)}, retryPolicy{}, "update_frequency 2"},
		{"retriable headers", &routev3.RetryPolicy{RetryOn: "retriable-headers", RetriableHeaders: []*routev3.HeaderMatcher{{Name: "x"}}},
			retryPolicy{}, "retriable-headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := compileRetryPolicy(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprintf("%+v", *got) != fmt.Sprintf("%+v", tt.want) {
				t.Errorf("got  %+v\nwant %+v", *got, tt.want)
			}
		})
	}
}

func TestRetriable(t *testing.T) {
	cp, _ := compileRetryPolicy(controlplane.RetryPolicy(config.Model{Providers: []config.ModelProvider{{Provider: "a"}, {Provider: "b"}}}))
	gw, _ := compileRetryPolicy(&routev3.RetryPolicy{RetryOn: "gateway-error,retriable-4xx"})
	cf, _ := compileRetryPolicy(&routev3.RetryPolicy{RetryOn: "connect-failure"})
	tests := []struct {
		p      *retryPolicy
		kind   failKind
		status int
		want   bool
	}{
		{cp, failNone, 500, true},
		{cp, failNone, 503, true},
		{cp, failNone, 429, true}, // retriable_status_codes
		{cp, failNone, 400, false},
		{cp, failNone, 404, false},
		{cp, failNone, 200, false},
		{cp, failConnect, 0, true},
		{cp, failReset, 0, true},
		{cp, failPerTryTimeout, 0, true},
		{gw, failNone, 500, false},
		{gw, failNone, 502, true},
		{gw, failNone, 504, true},
		{gw, failNone, 409, true},
		{gw, failNone, 429, false},
		{gw, failPerTryTimeout, 0, true},
		{cf, failConnect, 0, true},
		{cf, failReset, 0, false},
		{cf, failPerTryTimeout, 0, false},
		{cf, failNone, 503, false},
	}
	for i, tt := range tests {
		if got := tt.p.retriable(tt.kind, tt.status); got != tt.want {
			t.Errorf("#%d: retriable(%v, %d) = %v, want %v", i, tt.kind, tt.status, got, tt.want)
		}
	}
	for n := 1; n <= 6; n++ {
		if d := cp.backoff(n); d < 0 || d >= 250*time.Millisecond || (n == 1 && d >= 25*time.Millisecond) {
			t.Errorf("backoff(%d) = %v", n, d)
		}
	}
}

// member is a one-endpoint cluster with outlier detection, as the control
// plane generates for a provider.
func member(name string, prio uint32, panic bool) *cluster {
	e := &endpoint{addr: name + ":80", health: &hostHealth{}}
	return &cluster{name: name, panic: panic, outlier: &outlierConfig{consecutive5xx: 3, enforce5xx: 100, consecutiveGateway: 3,
		enforceGateway: 100, interval: time.Second, baseEjection: 10 * time.Second, maxEjection: 300 * time.Second, maxEjectionPercent: 100},
		levels: []*priorityLevel{{priority: prio, healthy: []*endpoint{e}, all: []*endpoint{e}, sched: []int{0}}}}
}

func TestChooseAggregate(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name       string
		ejected    []string // members whose host is ejected
		unhealthy  []string // members whose host EDS marks unhealthy
		attempted  []string // members tried by earlier attempts
		prevPrio   bool
		panic      bool
		want       string // member chosen, "" for none
		wantPrio   int
		usePrevHst bool
	}{
		{name: "first member", want: "a", wantPrio: 0},
		{name: "first ejected: the next", ejected: []string{"a"}, want: "b", wantPrio: 1},
		{name: "EDS unhealthy too", unhealthy: []string{"a"}, ejected: []string{"b"}, want: "c", wantPrio: 2},
		{name: "retry goes to the next priority", attempted: []string{"a"}, prevPrio: true, want: "b", wantPrio: 1},
		{name: "and the one after", attempted: []string{"a", "b"}, prevPrio: true, want: "c", wantPrio: 2},
		{name: "all tried: exclusions dropped", attempted: []string{"a", "b", "c"}, prevPrio: true, want: "a", wantPrio: 0},
		{name: "tried and ejected", attempted: []string{"b"}, ejected: []string{"a"}, prevPrio: true, want: "c", wantPrio: 2},
		{name: "without previous_priorities the first again", attempted: []string{"a"}, want: "a", wantPrio: 0},
		{name: "all ejected, panic threshold 0: none", ejected: []string{"a", "b", "c"}},
		{name: "all ejected, panic mode: the first", ejected: []string{"a", "b", "c"}, panic: true, want: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := map[string]*cluster{}
			var members []*cluster
			for i, n := range []string{"a", "b", "c"} {
				// b's endpoint is priority 1 within its cluster: flattened
				// priorities count levels, not priority numbers.
				ms[n] = member(n, uint32(i%2), tt.panic)
				members = append(members, ms[n])
			}
			agg := &cluster{name: "agg", aggregate: []string{"a", "b", "c"}, members: members, panic: tt.panic}
			for _, n := range tt.ejected {
				ms[n].levels[0].healthy[0].health.ejectedUntil = now.Add(time.Minute)
			}
			for _, n := range tt.unhealthy {
				ms[n].levels[0].healthy = nil
			}
			sel := &selection{prevPriorities: tt.prevPrio, prevHosts: true, maxHostTries: 5}
			for _, n := range tt.attempted {
				sel.attempted(ms[n].levels[0].all[0], slices.Index([]string{"a", "b", "c"}, n))
			}
			c, ep, prio := agg.choose(sel, now)
			if tt.want == "" {
				if ep != nil {
					t.Fatalf("chose %s, want none", c.name)
				}
				return
			}
			if ep == nil || c.name != tt.want || ep != ms[tt.want].levels[0].all[0] || prio != tt.wantPrio {
				t.Fatalf("chose %v (priority %d), want %s (priority %d)", c, prio, tt.want, tt.wantPrio)
			}
		})
	}
}

func TestPreviousHostsWithinAPriority(t *testing.T) {
	e1, e2 := &endpoint{addr: "1:80"}, &endpoint{addr: "2:80"}
	c := &cluster{name: "c", levels: []*priorityLevel{{healthy: []*endpoint{e1, e2}, all: []*endpoint{e1, e2}, sched: []int{0, 1}}}}
	sel := &selection{prevHosts: true, maxHostTries: 5}
	for range 4 {
		_, first, _ := c.choose(sel, time.Now())
		sel.attempted(first, 0)
		_, second, _ := c.choose(sel, time.Now())
		if second == first {
			t.Fatalf("the retry went to the host tried already (%s)", first.addr)
		}
		sel.hosts = nil
	}
}

func TestOutlierDetection(t *testing.T) {
	log := discardLogger()
	t0 := time.Now()
	type ev struct {
		at   time.Duration // after t0
		code int
	}
	tests := []struct {
		name        string
		events      []ev
		checkAt     time.Duration
		wantEjected bool
	}{
		{"two 5xx are not enough", []ev{{0, 500}, {1, 500}}, 2, false},
		{"three 5xx eject", []ev{{0, 500}, {1, 502}, {2, 500}}, 3, true},
		{"a success in between resets", []ev{{0, 500}, {1, 500}, {2, 200}, {3, 500}}, 4, false},
		{"429 is not a failure", []ev{{0, 500}, {1, 429}, {2, 500}, {3, 500}}, 4, false},
		{"gateway failures (connect, timeout)", []ev{{0, outcomeConnectFailure}, {1, outcomeTimeout}, {2, outcomeReset}}, 3, true},
		{"ejected for base_ejection_time", []ev{{0, 500}, {0, 500}, {0, 500}}, 9 * time.Second, true},
		{"then probed back in", []ev{{0, 500}, {0, 500}, {0, 500}}, 10*time.Second + 1, false},
		// Back after 10 s, failing again at once: twice as long.
		{"the second ejection in a row lasts twice as long", []ev{{0, 500}, {0, 500}, {0, 500},
			{10*time.Second + 1, 500}, {10*time.Second + 2, 500}, {10*time.Second + 3, 500}}, 29 * time.Second, true},
		// Back after 10 s, healthy for a minute (60 intervals): the
		// multiplier has decayed, so the next ejection is 10 s again.
		{"the multiplier decays while healthy", []ev{{0, 500}, {0, 500}, {0, 500},
			{70 * time.Second, 500}, {70 * time.Second, 500}, {70 * time.Second, 500}}, 81 * time.Second, false},
		{"answers while ejected do not count", []ev{{0, 500}, {0, 500}, {0, 500}, {time.Second, 500}, {time.Second, 500}},
			10*time.Second + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := member("a", 0, false)
			ep := c.levels[0].all[0]
			for _, e := range tt.events {
				c.report(ep, e.code, t0.Add(e.at), log)
			}
			if got := ep.health.isEjected(t0.Add(tt.checkAt)); got != tt.wantEjected {
				t.Errorf("ejected at %v = %v, want %v", tt.checkAt, got, tt.wantEjected)
			}
		})
	}

	// max_ejection_percent: with 50 % of two hosts, the second stays in.
	e1, e2 := &endpoint{addr: "1:80", health: &hostHealth{}}, &endpoint{addr: "2:80", health: &hostHealth{}}
	c := &cluster{name: "two", outlier: &outlierConfig{consecutive5xx: 1, enforce5xx: 100, baseEjection: time.Minute,
		maxEjection: time.Hour, interval: time.Second, maxEjectionPercent: 50},
		levels: []*priorityLevel{{healthy: []*endpoint{e1, e2}, all: []*endpoint{e1, e2}}}}
	c.report(e1, 500, t0, log)
	c.report(e2, 500, t0, log)
	if !e1.health.isEjected(t0) || e2.health.isEjected(t0) {
		t.Errorf("max_ejection_percent 50: ejected %v %v, want the first only", e1.health.isEjected(t0), e2.health.isEjected(t0))
	}
}

// TestFailurePercentage: Envoy's failure-percentage detector on a
// one-host provider cluster. Streams cut after their head count twice (the
// head's 200, then the reset's 503), so a provider cutting every stream
// fails half of its answers, and a success between failures does not save
// it, unlike the consecutive detectors.
func TestFailurePercentage(t *testing.T) {
	log := discardLogger()
	// Interval boundaries at whole seconds since the epoch.
	t0 := time.Unix(1_800_000_000, 0)
	stream := func(at time.Duration, cut bool) []ev2 {
		out := []ev2{{at, 200}}
		if cut {
			out = append(out, ev2{at, outcomeReset})
		}
		return out
	}
	many := func(n int, at time.Duration, cutEvery int) []ev2 {
		var out []ev2
		for i := range n {
			out = append(out, stream(at, cutEvery > 0 && i%cutEvery == 0)...)
		}
		return out
	}
	tests := []struct {
		name string
		cfg  func(*outlierConfig)
		// events, then the host is swept (as before a pick) at sweepAt
		events      []ev2
		sweepAt     time.Duration
		wantEjected bool
	}{
		{"every stream cut: 50% failures, ejected once the interval ends", nil, many(10, 0, 1), time.Second, true},
		{"not before the interval ends", nil, many(10, 0, 1), 999 * time.Millisecond, false},
		{"one stream in four cut: 20% of answers", nil, many(16, 0, 4), time.Second, true},
		{"one stream in five cut: under 20%", nil, many(20, 0, 5), time.Second, false},
		{"under the request volume", nil, many(4, 0, 1), time.Second, false},
		{"an interval later the counts are gone", nil, many(10, 0, 1), 2 * time.Second, false},
		{"enforcing 0 (Envoy's default): off", func(o *outlierConfig) { o.enforceFailPct = 0 }, many(10, 0, 1), time.Second, false},
		{"too few hosts", func(o *outlierConfig) { o.failPctMinHosts = 2 }, many(10, 0, 1), time.Second, false},
		// The next report after the interval trips it too, without a sweep.
		{"a report in the next interval", nil, append(many(10, 0, 1), ev2{time.Second, 200}), time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := member("a", 0, false)
			c.outlier.consecutive5xx, c.outlier.consecutiveGateway = 0, 0
			c.outlier.failPctThreshold, c.outlier.failPctVolume, c.outlier.failPctMinHosts, c.outlier.enforceFailPct = 20, 10, 1, 100
			if tt.cfg != nil {
				tt.cfg(c.outlier)
			}
			ep := c.levels[0].all[0]
			for _, e := range tt.events {
				c.report(ep, e.code, t0.Add(e.at), log)
			}
			c.sweepAll(t0.Add(tt.sweepAt), log)
			if got := ep.health.isEjected(t0.Add(tt.sweepAt)); got != tt.wantEjected {
				t.Errorf("ejected at %v = %v, want %v", tt.sweepAt, got, tt.wantEjected)
			}
		})
	}
}

type ev2 struct {
	at   time.Duration
	code int
}

// TestMaxEjectionPercent: Envoy's rule, one more ejection may not take the
// ejected share over max_ejection_percent; always_eject_one_host lets the
// first go regardless.
func TestMaxEjectionPercent(t *testing.T) {
	tests := []struct {
		name        string
		pct         uint32
		always      bool
		hosts       int
		wantEjected int
	}{
		{"one host, 10%", 10, false, 1, 0},
		{"one host, 10%, always_eject_one_host", 10, true, 1, 1},
		{"one host, 100%", 100, false, 1, 1},
		{"two hosts, 50%", 50, false, 2, 1},
		{"ten hosts, 10%", 10, false, 10, 1},
		{"ten hosts, 20%", 20, false, 10, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var eps []*endpoint
			for i := range tt.hosts {
				eps = append(eps, &endpoint{addr: fmt.Sprintf("%d:80", i), health: &hostHealth{}})
			}
			c := &cluster{name: "c", outlier: &outlierConfig{consecutive5xx: 1, enforce5xx: 100, baseEjection: time.Minute,
				maxEjection: time.Hour, interval: time.Second, maxEjectionPercent: tt.pct, alwaysEjectOne: tt.always},
				levels: []*priorityLevel{{healthy: eps, all: eps}}}
			now := time.Now()
			got := 0
			for _, e := range eps {
				c.report(e, 500, now, discardLogger())
				if e.health.isEjected(now) {
					got++
				}
			}
			if got != tt.wantEjected {
				t.Errorf("ejected %d of %d, want %d", got, tt.hosts, tt.wantEjected)
			}
		})
	}
}

// ---- integration: the data plane's router with aggregate clusters ----

// upProc is an upstream ext_proc server: it records each stream's gRPC
// metadata and messages, and answers per provider with script.
type upProc struct {
	extprocv3.UnimplementedExternalProcessorServer
	mu      sync.Mutex
	streams []*upStream
	script  func(provider string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse
}

type upStream struct {
	phase, provider string
	msgs            []*extprocv3.ProcessingRequest
}

func (u *upProc) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	md, _ := metadata.FromIncomingContext(ps.Context())
	st := &upStream{}
	if v := md.Get(catalog.PhaseMetadata); len(v) > 0 {
		st.phase = v[0]
	}
	if v := md.Get(catalog.ProviderMetadata); len(v) > 0 {
		st.provider = v[0]
	}
	u.mu.Lock()
	u.streams = append(u.streams, st)
	u.mu.Unlock()
	for {
		req, err := ps.Recv()
		if err != nil {
			return nil
		}
		u.mu.Lock()
		st.msgs = append(st.msgs, req)
		script := u.script
		u.mu.Unlock()
		var resp *extprocv3.ProcessingResponse
		if script != nil {
			resp = script(st.provider, req)
		}
		if resp == nil {
			resp = reply(req, &extprocv3.CommonResponse{})
		}
		if err := ps.Send(resp); err != nil {
			return nil
		}
	}
}

func (u *upProc) all() []*upStream {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.streams)
}

// foEnv is a data plane routing everything to an aggregate cluster of the
// providers a and b (each a one-endpoint EDS cluster), with a retry policy.
type foEnv struct {
	t    *testing.T
	dp   *DataPlane
	logs *logCapture
	up   map[string]*upstream
	proc *upProc
}

type foOpts struct {
	addrs        map[string]string // provider -> host:port instead of its upstream's
	retry        *routev3.RetryPolicy
	outlier      *clusterv3.OutlierDetection
	upstreamProc bool
	bufferLimit  uint32
	clock        func() time.Time // Options.Clock
}

const upstreamProcCluster = "upstream_proc"

func newFoEnv(t *testing.T, handlers map[string]http.HandlerFunc, o foOpts) *foEnv {
	t.Helper()
	e := &foEnv{t: t, logs: &logCapture{}, up: map[string]*upstream{}, proc: &upProc{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, e.proc)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	_, downstreamProc := startProc(t)
	e.dp = New(Options{Logger: slog.New(e.logs), StaticClusters: map[string]string{
		catalog.ExtProcCluster: downstreamProc, upstreamProcCluster: lis.Addr().String()}, Clock: o.clock})
	t.Cleanup(func() { _ = e.dp.Close() })

	var clusters []*clusterv3.Cluster
	var endpoints []*endpointv3.ClusterLoadAssignment
	for _, name := range []string{"a", "b"} {
		addr := o.addrs[name]
		if addr == "" {
			e.up[name] = newUpstream(t, handlers[name])
			addr = strings.TrimPrefix(e.up[name].URL, "http://")
		}
		host, port, _ := net.SplitHostPort(addr)
		p, _ := strconv.Atoi(port)
		c, cla := edsCluster(t, "provider_"+name, "http://"+net.JoinHostPort(host, strconv.Itoa(p)))
		c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
		c.OutlierDetection = o.outlier
		if o.upstreamProc {
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{controlplane.HTTPProtocolOptionsKey: mustAny(t, upstreamOptions(t, name))}
		}
		clusters, endpoints = append(clusters, c), append(endpoints, cla)
	}
	clusters = append(clusters, &clusterv3.Cluster{
		Name: "agg",
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name: clusterTypeAggregate, TypedConfig: mustAny(t, &aggregatev3.ClusterConfig{Clusters: []string{"provider_a", "provider_b"}})}},
		LbPolicy:       clusterv3.Cluster_CLUSTER_PROVIDED,
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
	})
	rp := o.retry
	if rp == nil {
		rp = controlplane.RetryPolicy(config.Model{FirstByteTimeout: 300 * time.Millisecond,
			Providers: []config.ModelProvider{{Provider: "a"}, {Provider: "b"}}})
	}
	rt := &routev3.Route{
		Name:  "all",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "agg"},
			Timeout:          durationpb.New(0),
			RetryPolicy:      rp,
		}},
	}
	res := buildResources(t, "", resOpts{noExtProc: true, bufferLimit: o.bufferLimit, clusters: clusters, endpoints: endpoints,
		routes: &routev3.RouteConfiguration{Name: catalog.ListenerRouteConfig, VirtualHosts: []*routev3.VirtualHost{{
			Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{rt}}}}})
	if err := e.dp.Apply(context.Background(), res); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return e
}

// upstreamOptions is a provider cluster's upstream filter chain as the
// control plane generates it, on the test's upstream ext_proc server.
func upstreamOptions(t *testing.T, provider string) *upstreamhttpv3.HttpProtocolOptions {
	ep := &extprocfilterv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: upstreamProcCluster}},
			InitialMetadata: []*corev3.HeaderValue{{Key: catalog.PhaseMetadata, Value: catalog.PhaseUpstream}, {Key: catalog.ProviderMetadata, Value: provider}},
		},
		ProcessingMode:    controlplane.UpstreamExtProcProcessingMode(),
		MessageTimeout:    durationpb.New(2 * time.Second),
		AllowModeOverride: true,
	}
	return &upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}},
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: "envoy.filters.http.ext_proc", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ep)}},
			{Name: "envoy.filters.http.upstream_codec", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &upstreamcodecv3.UpstreamCodec{})}},
		},
	}
}

func (e *foEnv) post(body string) (*http.Response, []byte, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.dp.Addr(testListener).String()+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (e *foEnv) seen(name string) int {
	if u := e.up[name]; u != nil {
		return len(u.requests())
	}
	return 0
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

// reset drops the connection without answering.
func reset(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestFailover: provider a fails in each of the ways the retry policy
// covers, and the client gets b's answer; what it does not cover reaches the
// client as a's.
func TestFailover(t *testing.T) {
	okB := answer(200, `{"from":"b"}`)
	tests := []struct {
		name       string
		a, b       http.HandlerFunc
		aRefuses   bool
		bRefuses   bool
		body       string
		bufLimit   uint32
		wantStatus int
		wantBody   string // substring
		wantA      int
		wantB      int
		wantFlags  string
		maxTime    time.Duration
	}{
		{name: "a answers 500", a: answer(500, `{"from":"a"}`), b: okB, wantStatus: 200, wantBody: `"b"`, wantA: 1, wantB: 1},
		{name: "a answers 503", a: answer(503, `{"from":"a"}`), b: okB, wantStatus: 200, wantBody: `"b"`, wantA: 1, wantB: 1},
		{name: "a answers 429", a: answer(429, `{"from":"a"}`), b: okB, wantStatus: 200, wantBody: `"b"`, wantA: 1, wantB: 1},
		{name: "a refuses connections", aRefuses: true, b: okB, wantStatus: 200, wantBody: `"b"`, wantB: 1},
		{name: "a resets", a: reset, b: okB, wantStatus: 200, wantBody: `"b"`, wantA: 1, wantB: 1},
		{name: "a hangs past per_try_timeout", a: hang, b: okB, wantStatus: 200, wantBody: `"b"`, wantA: 1, wantB: 1, maxTime: 2 * time.Second},
		{name: "a answers 400: not retried", a: answer(400, `{"from":"a"}`), b: okB, wantStatus: 400, wantBody: `"a"`, wantA: 1},
		{name: "both 500: the last answer, URX", a: answer(500, `{"from":"a"}`), b: answer(500, `{"from":"b"}`),
			wantStatus: 500, wantBody: `"b"`, wantA: 1, wantB: 1, wantFlags: "URX"},
		{name: "both refuse: 503 connect error", aRefuses: true, bRefuses: true, wantStatus: 503, wantBody: "upstream_connect_error", wantFlags: "UF,URX"},
		{name: "both hang: 504", a: hang, b: hang, wantStatus: 504, wantBody: "upstream_per_try_timeout", wantA: 1, wantB: 1, wantFlags: "UT,URX"},
		{name: "a body over the buffer limit: no retry", a: answer(500, `{"from":"a"}`), b: okB, body: strings.Repeat("x", 4096), bufLimit: 1024,
			wantStatus: 500, wantBody: `"a"`, wantA: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := foOpts{addrs: map[string]string{}, bufferLimit: tt.bufLimit}
			if tt.aRefuses {
				o.addrs["a"] = closedAddr(t)
			}
			if tt.bRefuses {
				o.addrs["b"] = closedAddr(t)
			}
			e := newFoEnv(t, map[string]http.HandlerFunc{"a": tt.a, "b": tt.b}, o)
			body := tt.body
			if body == "" {
				body = `{"model":"m"}`
			}
			start := time.Now()
			resp, got, err := e.post(body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus || !bytes.Contains(got, []byte(tt.wantBody)) {
				t.Errorf("answer %d %s, want %d with %s", resp.StatusCode, got, tt.wantStatus, tt.wantBody)
			}
			if a, b := e.seen("a"), e.seen("b"); a != tt.wantA || b != tt.wantB {
				t.Errorf("attempts a=%d b=%d, want a=%d b=%d", a, b, tt.wantA, tt.wantB)
			}
			if tt.maxTime > 0 && time.Since(start) > tt.maxTime {
				t.Errorf("took %v", time.Since(start))
			}
			line := e.logs.access(t, 1)
			if f, _ := line["response_flags"].(string); f != tt.wantFlags {
				t.Errorf("response flags %q, want %q", f, tt.wantFlags)
			}
			if tt.wantB > 0 || tt.bRefuses {
				if n, _ := line["attempts"].(int64); n != 2 {
					t.Errorf("access log attempts = %v", line["attempts"])
				}
			}
			// b saw the same body a was sent: every attempt gets the request.
			if tt.wantA > 0 && tt.wantB > 0 && !bytes.Equal(e.up["a"].last(t).body, e.up["b"].last(t).body) {
				t.Errorf("bodies differ: %q / %q", e.up["a"].last(t).body, e.up["b"].last(t).body)
			}
		})
	}
}

// TestNoRetryAfterResponseStarted: once response bytes went downstream, a
// failing upstream ends the client's event stream with an error event
// (cutEventStream); nothing is retried.
func TestNoRetryAfterResponseStarted(t *testing.T) {
	// a fails once the client has read its first event: the response has
	// started, however long the way there took.
	firstRead := make(chan struct{})
	e := newFoEnv(t, map[string]http.HandlerFunc{
		"a": oneEventThenReset(func() {
			select {
			case <-firstRead:
			case <-time.After(10 * time.Second): // the event never arrived: the checks below say so
			}
		}),
		"b": answer(200, `{"from":"b"}`),
	}, foOpts{})
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.dp.Addr(testListener).String()+"/v1/chat/completions", strings.NewReader(`{}`))
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var body []byte
	for !bytes.HasSuffix(body, []byte("\n\n")) && err == nil {
		var line []byte
		line, err = br.ReadBytes('\n')
		body = append(body, line...)
	}
	close(firstRead)
	if err == nil {
		var rest []byte
		rest, err = io.ReadAll(br)
		body = append(body, rest...)
	}
	if err != nil || !strings.HasPrefix(string(body), "data: {\"n\":1}\n\nevent: error\ndata: {\"error\":") ||
		!strings.Contains(string(body), "upstream_reset_after_response_started") {
		t.Fatalf("the truncated stream: %v %s, want the first event then an error event", err, body)
	}
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	if e.seen("b") != 0 {
		t.Error("retried after the response started")
	}
}

// testClock is a clock for Options.Clock that only the test moves.
func testClock(start time.Time) (now func() time.Time, advance func(time.Duration)) {
	var mu sync.Mutex
	t := start
	now = func() time.Time { mu.Lock(); defer mu.Unlock(); return t }
	advance = func(d time.Duration) { mu.Lock(); t = t.Add(d); mu.Unlock() }
	return now, advance
}

// TestOutlierEjectionAndProbe: a failing provider is ejected after three
// failures (no more attempts reach it; requests go straight to b), probed
// back in after base_ejection_time, and serves again once healthy.
func TestOutlierEjectionAndProbe(t *testing.T) {
	var healthy atomic.Bool
	// Outlier detection runs on a clock the test moves: the ejection lasts
	// however long the requests take on a loaded machine.
	now, advance := testClock(time.Now())
	e := newFoEnv(t, map[string]http.HandlerFunc{
		"a": func(w http.ResponseWriter, r *http.Request) {
			if healthy.Load() {
				answer(200, `{"from":"a"}`)(w, r)
				return
			}
			answer(500, `{"from":"a"}`)(w, r)
		},
		"b": answer(200, `{"from":"b"}`),
	}, foOpts{outlier: &clusterv3.OutlierDetection{
		Consecutive_5Xx:                    wrapperspb.UInt32(3),
		ConsecutiveGatewayFailure:          wrapperspb.UInt32(3),
		EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100),
		Interval:                           durationpb.New(20 * time.Millisecond),
		BaseEjectionTime:                   durationpb.New(300 * time.Millisecond),
		MaxEjectionPercent:                 wrapperspb.UInt32(100),
	}, clock: now})
	ask := func() string {
		t.Helper()
		resp, body, err := e.post(`{}`)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer %v %s %v", resp, body, err)
		}
		return string(body)
	}
	for i := range 3 {
		if got := ask(); !strings.Contains(got, `"b"`) {
			t.Fatalf("request %d: %s", i, got)
		}
	}
	if e.seen("a") != 3 {
		t.Fatalf("a saw %d attempts, want 3", e.seen("a"))
	}
	for range 5 {
		ask()
	}
	advance(299 * time.Millisecond)
	ask()
	if e.seen("a") != 3 {
		t.Fatalf("a saw %d attempts while ejected", e.seen("a"))
	}
	// Probed back in after the ejection time; still failing, the request
	// still gets b's answer.
	advance(51 * time.Millisecond)
	ask()
	if e.seen("a") != 4 {
		t.Fatalf("a saw %d attempts after the ejection time, want 4 (probed)", e.seen("a"))
	}
	healthy.Store(true)
	if got := ask(); !strings.Contains(got, `"a"`) {
		t.Errorf("healthy a not back in rotation: %s", got)
	}
}

// TestStreamCutterEjected: a provider that answers 200 and then cuts
// every stream is never ejected by the consecutive detectors (each head's
// 200 resets them), but the failure-percentage detector takes it out once
// an interval of such answers has passed: the next request goes to b.
func TestStreamCutterEjected(t *testing.T) {
	now, advance := testClock(time.Unix(1_800_000_000, 0))
	e := newFoEnv(t, map[string]http.HandlerFunc{
		"a": oneEventThenReset(func() {}),
		"b": answer(200, `{"from":"b"}`),
	}, foOpts{outlier: &clusterv3.OutlierDetection{
		Consecutive_5Xx:                wrapperspb.UInt32(3),
		ConsecutiveGatewayFailure:      wrapperspb.UInt32(3),
		Interval:                       durationpb.New(time.Second),
		BaseEjectionTime:               durationpb.New(time.Minute),
		MaxEjectionPercent:             wrapperspb.UInt32(100),
		FailurePercentageThreshold:     wrapperspb.UInt32(20),
		FailurePercentageMinimumHosts:  wrapperspb.UInt32(1),
		FailurePercentageRequestVolume: wrapperspb.UInt32(8),
		EnforcingFailurePercentage:     wrapperspb.UInt32(100),
	}, clock: now})
	for i := range 4 {
		resp, body, err := e.post(`{}`)
		if err == nil && resp.StatusCode == 200 && !strings.Contains(string(body), "upstream_reset_after_response_started") {
			t.Fatalf("request %d: %s, want a's cut stream", i, body)
		}
	}
	if e.seen("a") != 4 || e.seen("b") != 0 {
		t.Fatalf("a saw %d, b %d; want 4 and 0 (a cut stream is not retried)", e.seen("a"), e.seen("b"))
	}
	advance(time.Second)
	resp, body, err := e.post(`{}`)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"b"`) {
		t.Fatalf("after the interval: %v %s %v, want b's answer", resp, body, err)
	}
	if e.seen("a") != 4 {
		t.Errorf("a saw %d requests, want 4: ejected before the pick", e.seen("a"))
	}
}

// TestAllEjected: with the panic threshold at 0, a model whose providers
// are all ejected gets no traffic: 503 no_healthy_upstream.
func TestAllEjected(t *testing.T) {
	e := newFoEnv(t, map[string]http.HandlerFunc{"a": answer(500, "{}"), "b": answer(500, "{}")}, foOpts{outlier: &clusterv3.OutlierDetection{
		Consecutive_5Xx: wrapperspb.UInt32(1), BaseEjectionTime: durationpb.New(time.Minute), MaxEjectionPercent: wrapperspb.UInt32(100)}})
	if resp, _, _ := e.post(`{}`); resp.StatusCode != 500 {
		t.Fatalf("first request %d", resp.StatusCode)
	}
	resp, body, err := e.post(`{}`)
	if err != nil || resp.StatusCode != 503 || !strings.Contains(string(body), "no_healthy_upstream") {
		t.Fatalf("answer %v %s %v", resp.StatusCode, body, err)
	}
	if e.seen("a")+e.seen("b") != 2 {
		t.Errorf("ejected providers got traffic: a=%d b=%d", e.seen("a"), e.seen("b"))
	}
}

// TestUpstreamExtProcPerAttempt: each attempt runs its cluster's upstream
// ext_proc filter on its own stream, with the provider in the gRPC
// metadata, on a fresh copy of the body; its :path and body mutations are
// what the provider gets. The header map is shared between attempts, as in
// Envoy.
func TestUpstreamExtProcPerAttempt(t *testing.T) {
	e := newFoEnv(t, map[string]http.HandlerFunc{"a": answer(500, `{"from":"a"}`), "b": answer(200, `{"from":"b"}`)}, foOpts{upstreamProc: true})
	e.proc.script = func(provider string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		switch {
		case req.GetRequestHeaders() != nil:
			return reply(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
				setHeader(":path", "/"+provider+"/chat"), setHeader("x-by-"+provider, "1")}}})
		case req.GetRequestBody() != nil:
			if !bytes.Equal(req.GetRequestBody().GetBody(), []byte(`{"model":"m"}`)) {
				t.Errorf("%s: body to translate %q, want the client's", provider, req.GetRequestBody().GetBody())
			}
			nb := `{"provider":"` + provider + `"}`
			return reply(req, &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-length", strconv.Itoa(len(nb)))}},
				BodyMutation:   &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(nb)}},
			})
		}
		return nil
	}
	resp, body, err := e.post(`{"model":"m"}`)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"b"`) {
		t.Fatalf("answer %v %s %v", resp, body, err)
	}
	a, b := e.up["a"].last(t), e.up["b"].last(t)
	if a.path != "/a/chat" || string(a.body) != `{"provider":"a"}` || b.path != "/b/chat" || string(b.body) != `{"provider":"b"}` {
		t.Errorf("a got %s %s, b got %s %s", a.path, a.body, b.path, b.body)
	}
	if b.header.Get("x-by-a") != "1" || b.header.Get("x-by-b") != "1" {
		t.Errorf("b's headers %v: the header map is shared between attempts", b.header)
	}
	streams := e.proc.all()
	if len(streams) != 2 {
		t.Fatalf("%d upstream ext_proc streams, want one per attempt", len(streams))
	}
	for i, want := range []string{"a", "b"} {
		st := streams[i]
		var kinds []string
		for _, m := range st.msgs {
			kinds = append(kinds, kindName(m))
		}
		if st.phase != catalog.PhaseUpstream || st.provider != want ||
			!slices.Equal(kinds, []string{"request_headers", "request_body", "response_headers"}) {
			t.Errorf("stream %d: phase %q provider %q messages %v", i, st.phase, st.provider, kinds)
		}
	}
	// The router saw a's 500 through the filter: its status is in the
	// response_headers message of a's stream.
	if hv, _ := headerValue(streams[0].msgs[2].GetResponseHeaders().GetHeaders(), ":status"); hv != "500" {
		t.Errorf("a's response status to the filter = %q", hv)
	}
}

// TestUpstreamExtProcReplies: the upstream filter's immediate responses
// and failures become the attempt's response (a 4xx answers the client, a
// 5xx is retried), and its response-body modes translate the answer.
func TestUpstreamExtProcReplies(t *testing.T) {
	immediate := func(code int, body string) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
			Body:    []byte(body),
		}}}
	}
	overrideBody := func(mode extprocfilterv3.ProcessingMode_BodySendMode) func(string, *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		return func(_ string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			switch {
			case req.GetResponseHeaders() != nil:
				r := reply(req, &extprocv3.CommonResponse{})
				r.ModeOverride = &extprocfilterv3.ProcessingMode{ResponseHeaderMode: extprocfilterv3.ProcessingMode_SEND, ResponseBodyMode: mode}
				return r
			case req.GetResponseBody() != nil:
				b := bytes.ToUpper(req.GetResponseBody().GetBody())
				return reply(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: b}}})
			}
			return nil
		}
	}
	tests := []struct {
		name       string
		a          http.HandlerFunc
		script     func(string, *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse
		wantStatus int
		wantBody   string
		wantA      int
		wantB      int
	}{
		{"400 from the upstream phase answers the client", answer(200, "{}"), func(p string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			if req.GetRequestBody() != nil {
				return immediate(400, `{"error":{"param":"logit_bias"}}`)
			}
			return nil
		}, 400, "logit_bias", 0, 0},
		{"503 from a's upstream phase fails over", answer(200, `{"from":"a"}`), func(p string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			if p == "a" && req.GetRequestHeaders() != nil {
				return immediate(503, `{}`)
			}
			return nil
		}, 200, `"b"`, 0, 1},
		{"BUFFERED response body translated", answer(200, `{"from":"a"}`), overrideBody(extprocfilterv3.ProcessingMode_BUFFERED), 200, `{"FROM":"A"}`, 1, 0},
		{"STREAMED response body translated", answer(200, `{"from":"a"}`), overrideBody(extprocfilterv3.ProcessingMode_STREAMED), 200, `{"FROM":"A"}`, 1, 0},
		{"a reply of the wrong kind: 500, retried", answer(200, `{"from":"a"}`), func(p string, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			if p == "a" && req.GetRequestBody() != nil {
				return reply(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{}}, &extprocv3.CommonResponse{})
			}
			return nil
		}, 200, `"b"`, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newFoEnv(t, map[string]http.HandlerFunc{"a": tt.a, "b": answer(200, `{"from":"b"}`)}, foOpts{upstreamProc: true})
			e.proc.script = tt.script
			resp, body, err := e.post(`{"model":"m"}`)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantStatus || !strings.Contains(string(body), tt.wantBody) {
				t.Errorf("answer %d %s, want %d with %s", resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if resp.ContentLength >= 0 && int(resp.ContentLength) != len(body) {
				t.Errorf("content-length %d for %d bytes", resp.ContentLength, len(body))
			}
			if e.seen("a") != tt.wantA || e.seen("b") != tt.wantB {
				t.Errorf("attempts a=%d b=%d, want %d %d", e.seen("a"), e.seen("b"), tt.wantA, tt.wantB)
			}
		})
	}
}

// TestUpstreamFilterChainRefused: what the data plane cannot run is
// refused at Apply, not ignored.
func TestUpstreamFilterChainRefused(t *testing.T) {
	for _, tt := range []struct {
		name    string
		filters func(po *upstreamhttpv3.HttpProtocolOptions)
		want    string
	}{
		{"codec not last", func(po *upstreamhttpv3.HttpProtocolOptions) {
			po.HttpFilters[0], po.HttpFilters[1] = po.HttpFilters[1], po.HttpFilters[0]
		}, "must be the last upstream http filter"},
		{"no codec", func(po *upstreamhttpv3.HttpProtocolOptions) { po.HttpFilters = po.HttpFilters[:1] }, "not envoy.filters.http.upstream_codec"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			c, cla := edsCluster(t, testCluster, e.up.URL)
			po := upstreamOptions(t, "a")
			// The upstream ext_proc's cluster must be static: reuse the
			// downstream one.
			ep := &extprocfilterv3.ExternalProcessor{}
			_ = po.HttpFilters[0].GetTypedConfig().UnmarshalTo(ep)
			ep.GrpcService.GetEnvoyGrpc().ClusterName = catalog.ExtProcCluster
			po.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, ep)}
			tt.filters(po)
			c.TypedExtensionProtocolOptions = map[string]*anypb.Any{controlplane.HTTPProtocolOptionsKey: mustAny(t, po)}
			err := e.dp.Apply(context.Background(), buildResources(t, e.up.URL, resOpts{clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla}}))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Apply = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// oneEventThenReset answers 200 with one SSE event, waits as wait does,
// then resets the stream: a response cut after it started.
func oneEventThenReset(wait func()) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("content-type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		http.NewResponseController(w).Flush()
		wait()
		reset(w, nil)
	}
}
