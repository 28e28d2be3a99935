package dataplane

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// fakeRLS records the ratelimit calls it gets.
type fakeRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
	mu   sync.Mutex
	reqs []*rlsv3.RateLimitRequest
}

func (f *fakeRLS) ShouldRateLimit(_ context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
}

func (f *fakeRLS) all() []*rlsv3.RateLimitRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*rlsv3.RateLimitRequest(nil), f.reqs...)
}

func startRLS(t *testing.T) (*fakeRLS, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRLS{}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, f)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return f, lis.Addr().String()
}

// withRateLimitFilter inserts the ratelimit filter the control plane
// generates between ext_proc and the router, and puts the stream-done
// token charge on the model route.
func withRateLimitFilter(t *testing.T, res Resources) Resources {
	t.Helper()
	l := res.Listeners[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	rl := &ratelimitfilterv3.RateLimit{
		Domain:  "switchyard",
		Timeout: durationpb.New(time.Second),
		RateLimitService: &ratelimitconfv3.RateLimitServiceConfig{
			GrpcService: &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
				EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: controlplane.RateLimitCluster}}},
			TransportApiVersion: corev3.ApiVersion_V3,
		},
	}
	n := len(hcm.HttpFilters)
	hcm.HttpFilters = append(hcm.HttpFilters[:n-1:n-1], &hcmv3.HttpFilter{Name: controlplane.FilterRateLimit,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, rl)}}, hcm.HttpFilters[n-1])
	l.FilterChains[0].Filters[0].ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(t, hcm)}
	for _, r := range res.Routes[0].VirtualHosts[0].Routes {
		if r.GetName() == "model:"+testModel {
			r.TypedPerFilterConfig = map[string]*anypb.Any{controlplane.FilterRateLimit: mustAny(t,
				&ratelimitfilterv3.RateLimitPerRoute{RateLimits: []*routev3.RateLimit{controlplane.TokenUsageRateLimit()}})}
		}
	}
	return res
}

// metadataScript routes to the model and publishes the metadata extproc
// does: key_id and tier on the request, tpm_limit for custom keys, and
// charge_tokens when the response is known.
func metadataScript(tpmLimit *structpb.Value, totalTokens *structpb.Value) procScript {
	md := func(fields map[string]*structpb.Value) *structpb.Struct {
		return &structpb.Struct{Fields: map[string]*structpb.Value{
			catalog.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: fields})}}
	}
	return func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		switch {
		case req.GetRequestHeaders() != nil:
			r := reply(req, &extprocv3.CommonResponse{})
			r.DynamicMetadata = md(map[string]*structpb.Value{
				"key_id": structpb.NewStringValue("key_abc"), "tier": structpb.NewStringValue("free")})
			return r, nil
		case req.GetRequestBody() != nil:
			r, _ := routeToModel(testModel)(req)
			if tpmLimit != nil {
				r.DynamicMetadata = md(map[string]*structpb.Value{"tpm_limit": tpmLimit})
			}
			return r, nil
		case req.GetResponseHeaders() != nil && totalTokens != nil:
			r := reply(req, &extprocv3.CommonResponse{})
			r.DynamicMetadata = md(map[string]*structpb.Value{"charge_tokens": totalTokens})
			return r, nil
		}
		return continueAll(req)
	}
}

func TestRateLimitStreamDone(t *testing.T) {
	limit := structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"requests_per_unit": structpb.NewNumberValue(5000), "unit": structpb.NewStringValue("MINUTE")}})
	for _, tt := range []struct {
		name      string
		tpmLimit  *structpb.Value
		total     *structpb.Value
		path      string
		wantCall  bool
		wantHits  uint64
		wantLimit uint32
	}{
		{"charges total_tokens", nil, structpb.NewNumberValue(42), "/v1/chat/completions", true, 42, 0},
		{"with the key's own limit", limit, structpb.NewNumberValue(7), "/v1/chat/completions", true, 7, 5000},
		{"a string count", nil, structpb.NewStringValue("9"), "/v1/chat/completions", true, 9, 0},
		{"no usage, no call", nil, nil, "/v1/chat/completions", false, 0, 0},
		{"zero usage, no call", nil, structpb.NewNumberValue(0), "/v1/chat/completions", false, 0, 0},
		{"a route without limits", nil, structpb.NewNumberValue(42), "/v2/other", false, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rls, addr := startRLS(t)
			e := newEnv(t)
			e.opts.StaticClusters[controlplane.RateLimitCluster] = addr
			e.dp = New(e.opts)
			t.Cleanup(func() { _ = e.dp.Close() })
			if err := e.dp.Apply(context.Background(), withRateLimitFilter(t, buildResources(t, e.up.URL, resOpts{}))); err != nil {
				t.Fatal(err)
			}
			e.proc.setScript(metadataScript(tt.tpmLimit, tt.total))
			resp, body := e.post(tt.path, `{"model":"m1"}`)
			if tt.path == "/v1/chat/completions" && resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			// The call is made as the request finishes, after the client
			// has its response.
			if !tt.wantCall {
				// Close returns once every finished request's stream-done
				// work (where the call would be made) is over.
				if err := e.dp.Close(); err != nil {
					t.Fatal(err)
				}
				if got := rls.all(); len(got) != 0 {
					t.Fatalf("unexpected call: %v", got)
				}
				return
			}
			var got []*rlsv3.RateLimitRequest
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if got = rls.all(); len(got) > 0 {
					break
				}
			}
			if len(got) != 1 {
				t.Fatalf("%d calls, want 1", len(got))
			}
			r := got[0]
			if r.GetDomain() != "switchyard" || len(r.GetDescriptors()) != 1 {
				t.Fatalf("request = %v", r)
			}
			d := r.GetDescriptors()[0]
			var entries []string
			for _, en := range d.GetEntries() {
				entries = append(entries, en.GetKey()+"="+en.GetValue())
			}
			if want := []string{"usage=tokens", "tier=free", "key_id=key_abc"}; !slices.Equal(entries, want) {
				t.Errorf("entries = %v, want %v", entries, want)
			}
			if d.GetHitsAddend().GetValue() != tt.wantHits {
				t.Errorf("hits = %d, want %d", d.GetHitsAddend().GetValue(), tt.wantHits)
			}
			if tt.wantLimit == 0 && d.GetLimit() != nil || tt.wantLimit != 0 &&
				(d.GetLimit().GetRequestsPerUnit() != tt.wantLimit || d.GetLimit().GetUnit() != typev3.RateLimitUnit_MINUTE) {
				t.Errorf("limit override = %v, want %d/MINUTE", d.GetLimit(), tt.wantLimit)
			}
		})
	}
}

func TestRateLimitStreamDoneFailureIsCounted(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := lis.Addr().String()
	lis.Close()
	e := newEnv(t)
	failures := make(chan error, 1)
	e.opts.StaticClusters[controlplane.RateLimitCluster] = dead
	e.opts.OnRateLimitError = func(err error) { failures <- err }
	e.dp = New(e.opts)
	t.Cleanup(func() { _ = e.dp.Close() })
	if err := e.dp.Apply(context.Background(), withRateLimitFilter(t, buildResources(t, e.up.URL, resOpts{}))); err != nil {
		t.Fatal(err)
	}
	e.proc.setScript(metadataScript(nil, structpb.NewNumberValue(3)))
	if resp, body := e.post("/v1/chat/completions", `{}`); resp.StatusCode != 200 {
		t.Fatalf("a limiter that is down failed the request: %d %s", resp.StatusCode, body)
	}
	select {
	case err := <-failures:
		if err == nil {
			t.Error("nil error reported")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("failure not reported")
	}
}

func TestLimitOverride(t *testing.T) {
	st := func(n float64, unit string) *structpb.Value {
		return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"requests_per_unit": structpb.NewNumberValue(n), "unit": structpb.NewStringValue(unit)}})
	}
	for _, tt := range []struct {
		v  *structpb.Value
		ok bool
	}{
		{st(10, "MINUTE"), true},
		{st(10, "minute"), true},
		{st(10, "HOUR"), true},
		{st(0, "MINUTE"), false},
		{st(1.5, "MINUTE"), false},
		{st(10, "FORTNIGHT"), false},
		{st(10, "UNKNOWN"), false},
		{structpb.NewNumberValue(10), false},
		{nil, false},
	} {
		if _, ok := limitOverride(tt.v); ok != tt.ok {
			t.Errorf("limitOverride(%v) ok = %v, want %v", tt.v, ok, tt.ok)
		}
	}
}

// gatedRLS records every call as it arrives and answers only once gate is
// closed, so the stream-done workers stay busy and later requests queue up
// (or overflow the queue).
type gatedRLS struct {
	fakeRLS
	gate chan struct{}
}

func (g *gatedRLS) ShouldRateLimit(ctx context.Context, r *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := g.fakeRLS.ShouldRateLimit(ctx, r)
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return resp, err
}

// TestRateLimitStreamDoneQueueChargesEverything: with the stream-done
// workers held up by a slow limiter, the finished requests' charges queue
// up and overflow the queue; every one is still made, and Close returns
// only once they all are.
func TestRateLimitStreamDoneQueueChargesEverything(t *testing.T) {
	defer func(n int) { streamDoneQueuePerWorker = n }(streamDoneQueuePerWorker)
	streamDoneQueuePerWorker = 1
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rls := &gatedRLS{gate: make(chan struct{})}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, rls)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	e := newEnv(t)
	e.opts.StaticClusters[controlplane.RateLimitCluster] = lis.Addr().String()
	e.dp = New(e.opts)
	t.Cleanup(func() { _ = e.dp.Close() })
	if err := e.dp.Apply(context.Background(), withRateLimitFilter(t, buildResources(t, e.up.URL, resOpts{}))); err != nil {
		t.Fatal(err)
	}
	e.proc.setScript(metadataScript(nil, structpb.NewNumberValue(5)))
	// More requests than the workers and the queue hold together.
	n := 3*streamDoneWorkers() + 4
	for range n {
		if resp, body := e.post("/v1/chat/completions", `{}`); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	close(rls.gate)
	if err := e.dp.Close(); err != nil {
		t.Fatal(err)
	}
	var hits uint64
	got := rls.all()
	for _, r := range got {
		for _, d := range r.GetDescriptors() {
			hits += d.GetHitsAddend().GetValue()
		}
	}
	if len(got) != n || hits != uint64(5*n) {
		t.Fatalf("after Close: %d calls charging %d tokens, want %d charging %d", len(got), hits, n, 5*n)
	}
}

// TestMetadataValue: a metadata key's path is followed through the
// request's dynamic metadata, nested structs included.
func TestMetadataValue(t *testing.T) {
	s := &requestState{}
	inner := &structpb.Struct{Fields: map[string]*structpb.Value{"deep": structpb.NewStringValue("d")}}
	s.meta.merge("ns", &structpb.Struct{Fields: map[string]*structpb.Value{
		"key_id": structpb.NewStringValue("k"), "nested": structpb.NewStructValue(inner)}})
	key := func(ns string, path ...string) *metadatav3.MetadataKey {
		mk := &metadatav3.MetadataKey{Key: ns}
		for _, p := range path {
			mk.Path = append(mk.Path, &metadatav3.MetadataKey_PathSegment{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: p}})
		}
		return mk
	}
	for _, tt := range []struct {
		name string
		mk   *metadatav3.MetadataKey
		want string // the value's JSON; "" for none
	}{
		{"one segment", key("ns", "key_id"), `"k"`},
		{"nested", key("ns", "nested", "deep"), `"d"`},
		{"a nested struct", key("ns", "nested"), `{"deep":"d"}`},
		{"the namespace", key("ns"), `{"key_id":"k","nested":{"deep":"d"}}`},
		{"missing field", key("ns", "absent"), ""},
		{"through a string", key("ns", "key_id", "x"), ""},
		{"missing nested", key("ns", "nested", "absent"), ""},
		{"missing namespace", key("other", "key_id"), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := s.metadataValue(tt.mk)
			got := ""
			if v != nil {
				b, err := v.MarshalJSON()
				if err != nil {
					t.Fatal(err)
				}
				var c bytes.Buffer
				if err := json.Compact(&c, b); err != nil {
					t.Fatal(err)
				}
				got = c.String()
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}
