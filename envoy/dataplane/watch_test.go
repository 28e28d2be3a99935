package dataplane

import (
	"context"
	"slices"
	"sync"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

type handler = func(ctx context.Context, version string, resources map[string]proto.Message) error

// fakeWatcher records subscriptions, as adsclient keeps them: a second
// Watch of a type replaces its names and handler.
type fakeWatcher struct {
	mu       sync.Mutex
	names    map[string][]string
	handlers map[string]handler
}

func (f *fakeWatcher) Watch(typeURL string, names []string, h func(context.Context, string, map[string]proto.Message) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.names == nil {
		f.names, f.handlers = map[string][]string{}, map[string]handler{}
	}
	f.names[typeURL] = names
	f.handlers[typeURL] = h
}

func (f *fakeWatcher) subscribed(typeURL string) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.names[typeURL]
	return n, ok
}

// push delivers a state-of-the-world response and returns the handler's
// verdict (nil: ACK).
func (f *fakeWatcher) push(t *testing.T, typeURL string, msgs ...proto.Message) error {
	t.Helper()
	f.mu.Lock()
	h := f.handlers[typeURL]
	f.mu.Unlock()
	if h == nil {
		t.Fatalf("no subscription to %s", typeURL)
	}
	res := map[string]proto.Message{}
	for _, m := range msgs {
		res[resourceName(m)] = m
	}
	return h(context.Background(), "v", res)
}

func resourceName(m proto.Message) string {
	type named interface{ GetName() string }
	type clusterNamed interface{ GetClusterName() string }
	if n, ok := m.(clusterNamed); ok {
		return n.GetClusterName()
	}
	return m.(named).GetName()
}

func TestWatch(t *testing.T) {
	e := newEnv(t)
	fw := &fakeWatcher{}
	e.dp.Watch(fw)
	res := buildResources(t, e.up.URL, resOpts{})

	for _, typ := range []string{resourcev3.ListenerType, resourcev3.ClusterType} {
		if names, ok := fw.subscribed(typ); !ok || names != nil {
			t.Fatalf("%s subscription = %v, %v; want wildcard", typ, names, ok)
		}
	}
	steps := []struct {
		name      string
		typeURL   string
		msgs      []proto.Message
		listening bool
	}{
		{"LDS", resourcev3.ListenerType, []proto.Message{res.Listeners[0]}, false},
		{"CDS", resourcev3.ClusterType, []proto.Message{res.Clusters[0]}, false},
		{"RDS", resourcev3.RouteType, []proto.Message{res.Routes[0]}, false},
		{"EDS completes the configuration", resourcev3.EndpointType, []proto.Message{res.Endpoints[0]}, true},
	}
	for _, s := range steps {
		if err := fw.push(t, s.typeURL, s.msgs...); err != nil {
			t.Fatalf("%s: NACK %v", s.name, err)
		}
		if got := e.dp.Addr(testListener) != nil; got != s.listening {
			t.Fatalf("after %s listening = %v, want %v", s.name, got, s.listening)
		}
	}
	if names, _ := fw.subscribed(resourcev3.RouteType); !slices.Equal(names, []string{catalog.ListenerRouteConfig}) {
		t.Errorf("RDS names %v", names)
	}
	if names, _ := fw.subscribed(resourcev3.EndpointType); !slices.Equal(names, []string{testCluster}) {
		t.Errorf("EDS names %v", names)
	}
	if _, ok := fw.subscribed(resourcev3.SecretType); ok {
		t.Error("SDS subscribed without a TLS listener")
	}
	e.proc.setScript(routeToModel(testModel))
	if resp, body := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}

	// An invalid update is NACKed and changes nothing.
	bad := proto.Clone(res.Routes[0]).(*routev3.RouteConfiguration)
	bad.VirtualHosts[0].Routes[0].Action = &routev3.Route_Redirect{Redirect: &routev3.RedirectAction{}}
	if err := fw.push(t, resourcev3.RouteType, bad); err == nil {
		t.Fatal("an invalid route configuration was ACKed")
	}
	if resp, _ := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 200 {
		t.Fatalf("after the NACK: status %d", resp.StatusCode)
	}

	// A new cluster referenced before it exists waits (ACK) rather than NACKs.
	r2 := proto.Clone(res.Routes[0]).(*routev3.RouteConfiguration)
	r2.VirtualHosts[0].Routes = append([]*routev3.Route{modelRoute("m2", "provider_b")}, r2.VirtualHosts[0].Routes...)
	if err := fw.push(t, resourcev3.RouteType, r2); err != nil {
		t.Fatalf("a route to a cluster not received yet was NACKed: %v", err)
	}
	cb, clab := edsCluster(t, "provider_b", e.up.URL)
	if err := fw.push(t, resourcev3.ClusterType, res.Clusters[0], cb); err != nil {
		t.Fatalf("CDS: %v", err)
	}
	if names, _ := fw.subscribed(resourcev3.EndpointType); !slices.Equal(names, []string{testCluster, "provider_b"}) {
		t.Errorf("EDS names %v", names)
	}
	if err := fw.push(t, resourcev3.EndpointType, res.Endpoints[0], clab); err != nil {
		t.Fatalf("EDS: %v", err)
	}
	e.proc.setScript(routeToModel("m2"))
	// Access lines are written after the response, by stream-done work of
	// their own: wait for the earlier two so the next line is this request's.
	e.logs.access(t, 2)
	if resp, _ := e.post("/v1/chat/completions", "{}"); resp.StatusCode != 200 {
		t.Fatalf("model m2: status %d", resp.StatusCode)
	}
	if line := e.logs.access(t, 3); line["upstream_cluster"] != "provider_b" {
		t.Errorf("routed to %v", line["upstream_cluster"])
	}

	// A resource of the wrong type is NACKed.
	if err := fw.push(t, resourcev3.ListenerType, res.Clusters[0]); err == nil {
		t.Error("a cluster in an LDS response was ACKed")
	}
}
