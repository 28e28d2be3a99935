package controlplane

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// syncBuffer is a goroutine-safe log sink.
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

// state is what a subscriber holds: the latest accepted version and
// resources per type.
type state struct {
	mu        sync.Mutex
	versions  map[string]string
	resources map[string]map[string]proto.Message
}

func (s *state) set(typeURL, version string, res map[string]proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[typeURL] = version
	s.resources[typeURL] = res
}

func (s *state) get(typeURL string) (string, map[string]proto.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[typeURL], s.resources[typeURL]
}

func keys(m map[string]proto.Message) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServe serves the default configuration to an adsclient that subscribes
// the way the data plane does (RDS and EDS names from LDS and CDS), then
// pushes a configuration whose model moved to another provider.
func TestServe(t *testing.T) {
	logs := &syncBuffer{}
	srv := New(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	cfg, err := config.Parse("v1.yaml", []byte(`
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: fake-openai, kind: openai, base_url: http://127.0.0.1:8091/v1}
models:
  - id: demo/chat
    providers: [{provider: fake-openai, upstream_model: fake-chat-1}]
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if v, err := srv.Update(ctx, cfg); err != nil || v != "1" {
		t.Fatalf("Update = %q, %v; want 1", v, err)
	}
	if snap, err := srv.Cache().GetSnapshot(defaultNodeKey); err != nil || snap.GetVersion(resourcev3.ListenerType) != "1" {
		t.Fatalf("cache snapshot: %v", err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	// Any node id works: every node maps to the same snapshot.
	ac := adsclient.New(cc, &corev3.Node{Id: "dataplane-test", Cluster: "switchyard"}, nil)

	st := &state{versions: map[string]string{}, resources: map[string]map[string]proto.Message{}}
	var rejectRuntime2 sync.Once
	handler := func(typeURL string) adsclient.Handler {
		return func(_ context.Context, version string, res map[string]proto.Message) error {
			switch typeURL {
			case resourcev3.ListenerType:
				var routes []string
				for _, m := range res {
					for _, fc := range m.(*listenerv3.Listener).GetFilterChains() {
						for _, f := range fc.GetFilters() {
							h := &hcmv3.HttpConnectionManager{}
							if err := f.GetTypedConfig().UnmarshalTo(h); err != nil {
								return err
							}
							routes = append(routes, h.GetRds().GetRouteConfigName())
						}
					}
				}
				ac.Watch(resourcev3.RouteType, slices.Compact(slices.Sorted(slices.Values(routes))), nil)
			case resourcev3.ClusterType:
				var eds []string
				for name, m := range res {
					if m.(*clusterv3.Cluster).GetType() == clusterv3.Cluster_EDS {
						eds = append(eds, name)
					}
				}
				ac.Watch(resourcev3.EndpointType, eds, nil)
			case resourcev3.RuntimeType:
				// The first delivery of version 2 is rejected, to see the
				// server log the NACK; the resend is accepted.
				var err error
				if version == "2" {
					rejectRuntime2.Do(func() { err = errors.New("test rejects runtime 2 once") })
				}
				if err != nil {
					return err
				}
			}
			st.set(typeURL, version, res)
			return nil
		}
	}
	// RDS and EDS get their handlers now and their names from LDS and CDS.
	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType} {
		ac.Watch(typ, nil, handler(typ))
	}
	ac.Watch(resourcev3.RouteType, []string{catalog.ListenerRouteConfig}, handler(resourcev3.RouteType))
	ac.Watch(resourcev3.EndpointType, []string{catalog.ClusterName("fake-openai")}, handler(resourcev3.EndpointType))
	ac.Watch(resourcev3.RuntimeType, []string{catalog.RuntimeName}, handler(resourcev3.RuntimeType))

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ac.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-ac.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("adsclient did not sync")
	}

	want := map[string][]string{
		resourcev3.ListenerType: {"public"},
		resourcev3.RouteType:    {catalog.ListenerRouteConfig},
		resourcev3.ClusterType:  {"provider_fake-openai", "route_demo_chat", "route_demo_chat_fake-openai"},
		resourcev3.EndpointType: {"provider_fake-openai"},
		resourcev3.RuntimeType:  {catalog.RuntimeName},
	}
	for typ, names := range want {
		v, res := st.get(typ)
		if v != "1" || !slices.Equal(keys(res), names) {
			t.Errorf("%s: version %q names %v, want 1 %v", typ, v, keys(res), names)
		}
	}
	_, rts := st.get(resourcev3.RuntimeType)
	if cat, err := catalog.Decode(rts[catalog.RuntimeName].(*runtimev3.Runtime)); err != nil || cat.Region != "us" {
		t.Errorf("catalog over RTDS: %v, %v", cat, err)
	}

	// Move demo/chat to a second provider: a new cluster, a new EDS
	// assignment, and the model's aggregate cluster now holds it.
	cfg2, err := config.Parse("v2.yaml", []byte(`
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: fake-openai, kind: openai, base_url: http://127.0.0.1:8091/v1}
  - {name: fake-two, kind: openai, base_url: http://127.0.0.1:8092/v1}
models:
  - id: demo/chat
    providers: [{provider: fake-two, upstream_model: fake-chat-2}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := srv.Update(ctx, cfg2); err != nil || v != "2" {
		t.Fatalf("Update = %q, %v; want 2", v, err)
	}
	waitFor(t, "version 2 of every type", func() bool {
		for typ := range want {
			if v, _ := st.get(typ); v != "2" {
				return false
			}
		}
		return true
	})
	_, eps := st.get(resourcev3.EndpointType)
	if got := keys(eps); !slices.Equal(got, []string{"provider_fake-openai", "provider_fake-two"}) {
		t.Errorf("EDS after update = %v", got)
	}
	_, routes := st.get(resourcev3.RouteType)
	rc := routes[catalog.ListenerRouteConfig].(*routev3.RouteConfiguration)
	if got := rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetCluster(); got != "route_demo_chat_fake-two" {
		t.Errorf("demo/chat routes to %q after update, want route_demo_chat_fake-two", got)
	}
	_, clusters := st.get(resourcev3.ClusterType)
	agg := &aggregatev3.ClusterConfig{}
	if err := clusters["route_demo_chat"].(*clusterv3.Cluster).GetClusterType().GetTypedConfig().UnmarshalTo(agg); err != nil ||
		!slices.Equal(agg.GetClusters(), []string{"provider_fake-two"}) {
		t.Errorf("route_demo_chat after update = %v, %v", agg, err)
	}
	if l := logs.String(); !strings.Contains(l, "xds NACK") || !strings.Contains(l, "test rejects runtime 2 once") {
		t.Errorf("NACK not logged at warn; logs:\n%s", l)
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"xds NACK\"") {
		t.Error("NACK not logged at warn level")
	}

	// A configuration Build rejects leaves the served snapshot and the
	// version counter alone.
	bad := *cfg2
	bad.Listeners = []config.Listener{{Name: "public", Address: "not-an-ip:80"}}
	if _, err := srv.Update(ctx, &bad); err == nil {
		t.Error("Update accepted a listener host name")
	}
	if v, err := srv.Update(ctx, cfg2); err != nil || v != "3" {
		t.Errorf("Update after a failed one = %q, %v; want 3", v, err)
	}
}
