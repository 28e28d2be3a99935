package adsclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

const nodeID = "test-node"

// recorder is server callbacks that keep every request the server received
// and the nonce of the last response it sent per type.
type recorder struct {
	serverv3.CallbackFuncs
	mu        sync.Mutex
	reqs      []*discoveryv3.DiscoveryRequest
	lastNonce map[string]string
}

func newRecorder() *recorder {
	r := &recorder{lastNonce: map[string]string{}}
	r.StreamRequestFunc = func(_ int64, req *discoveryv3.DiscoveryRequest) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reqs = append(r.reqs, proto.Clone(req).(*discoveryv3.DiscoveryRequest))
		return nil
	}
	r.StreamResponseFunc = func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.lastNonce[resp.GetTypeUrl()] = resp.GetNonce()
	}
	return r
}

// acked reports whether the last request of typeURL ACKs the last response
// of that type at version.
func (r *recorder) acked(typeURL, version string) bool {
	reqs := r.requests(typeURL)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(reqs) == 0 {
		return false
	}
	last := reqs[len(reqs)-1]
	return last.GetResponseNonce() == r.lastNonce[typeURL] && last.GetVersionInfo() == version && last.GetErrorDetail() == nil
}

func (r *recorder) requests(typeURL string) []*discoveryv3.DiscoveryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*discoveryv3.DiscoveryRequest
	for _, q := range r.reqs {
		if q.GetTypeUrl() == typeURL {
			out = append(out, q)
		}
	}
	return out
}

// xdsServer is a go-control-plane server on a real gRPC listener.
type xdsServer struct {
	addr  string
	cache cachev3.SnapshotCache
	rec   *recorder
	grpc  *grpc.Server
}

// startServer serves a fresh snapshot cache on addr ("127.0.0.1:0" for any port).
func startServer(t *testing.T, addr string) *xdsServer {
	t.Helper()
	var lis net.Listener
	var err error
	// A restarted server reuses the old port, which the kernel may hold briefly.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &xdsServer{
		addr:  lis.Addr().String(),
		cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil),
		rec:   newRecorder(),
		grpc:  grpc.NewServer(),
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(context.Background(), s.cache, s.rec))
	go func() { _ = s.grpc.Serve(lis) }()
	t.Cleanup(s.grpc.Stop)
	return s
}

func (s *xdsServer) set(t *testing.T, version string, resources map[resourcev3.Type][]types.Resource) {
	t.Helper()
	snap, err := cachev3.NewSnapshot(version, resources)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		t.Fatal(err)
	}
}

func runtimeRes(name, value string) *runtimev3.Runtime {
	return &runtimev3.Runtime{Name: name, Layer: &structpb.Struct{Fields: map[string]*structpb.Value{
		"value": structpb.NewStringValue(value),
	}}}
}

func clusterRes(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ConnectTimeout: durationpb.New(time.Second)}
}

// newClient dials addr with fast reconnects and returns a Client on it.
func newClient(t *testing.T, addr string) *Client {
	t.Helper()
	cc, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	c := New(cc, &corev3.Node{Id: nodeID}, nil)
	c.minBackoff, c.maxBackoff = 10*time.Millisecond, 100*time.Millisecond
	return c
}

// run starts c.Run and stops it when the test ends.
func run(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
}

// update is one handler call.
type update struct {
	version string
	names   []string
	values  map[string]string // runtime name -> layer value, for runtimes
}

// sink collects handler calls.
type sink struct {
	mu      sync.Mutex
	updates []update
	changed chan struct{}
	// reject, when set, decides whether to NACK a call.
	reject func(n int, u update) error
}

func newSink() *sink { return &sink{changed: make(chan struct{}, 1)} }

func (s *sink) handler(_ context.Context, version string, resources map[string]proto.Message) error {
	u := update{version: version, values: map[string]string{}}
	for name, m := range resources {
		u.names = append(u.names, name)
		if rt, ok := m.(*runtimev3.Runtime); ok {
			u.values[name] = rt.GetLayer().GetFields()["value"].GetStringValue()
		}
	}
	sort.Strings(u.names)
	s.mu.Lock()
	s.updates = append(s.updates, u)
	n, reject := len(s.updates), s.reject
	s.mu.Unlock()
	select {
	case s.changed <- struct{}{}:
	default:
	}
	if reject != nil {
		return reject(n, u)
	}
	return nil
}

func (s *sink) last() (update, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.updates) == 0 {
		return update{}, false
	}
	return s.updates[len(s.updates)-1], true
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// waitFor polls cond until it holds or the test times out.
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

func (s *sink) waitFor(t *testing.T, version string, names ...string) update {
	t.Helper()
	var got update
	waitFor(t, "update "+version+" "+strings.Join(names, ","), func() bool {
		u, ok := s.last()
		got = u
		return ok && u.version == version && slices.Equal(u.names, names)
	})
	return got
}

func waitSynced(t *testing.T, c *Client) {
	t.Helper()
	select {
	case <-c.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for Synced")
	}
}

func TestACK(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.set(t, "v1", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("c1"), clusterRes("c2")},
		resourcev3.RuntimeType: {runtimeRes("r1", "a"), runtimeRes("r2", "b")},
	})
	c := newClient(t, srv.addr)
	clusters, runtimes := newSink(), newSink()
	c.Watch(resourcev3.ClusterType, nil, clusters.handler)
	c.Watch(resourcev3.RuntimeType, []string{"r1"}, runtimes.handler)
	run(t, c)
	waitSynced(t, c)

	clusters.waitFor(t, "v1", "c1", "c2")
	if u := runtimes.waitFor(t, "v1", "r1"); u.values["r1"] != "a" {
		t.Errorf("r1 = %q", u.values["r1"])
	}

	// The server saw: the node on the stream's first request, then an ACK per
	// type naming the version and the nonce it sent.
	waitFor(t, "ACKs", func() bool {
		return srv.rec.acked(resourcev3.ClusterType, "v1") && srv.rec.acked(resourcev3.RuntimeType, "v1")
	})
	all := append(srv.rec.requests(resourcev3.ClusterType), srv.rec.requests(resourcev3.RuntimeType)...)
	var withNode int
	for _, q := range all {
		if q.GetNode() != nil && q.GetNode().GetId() == nodeID && q.GetResponseNonce() == "" {
			withNode++
		}
	}
	if withNode == 0 {
		t.Error("no initial request carried the node")
	}
	for _, typ := range []string{resourcev3.ClusterType, resourcev3.RuntimeType} {
		reqs := srv.rec.requests(typ)
		first, ack := reqs[0], reqs[len(reqs)-1]
		if first.GetVersionInfo() != "" || first.GetResponseNonce() != "" {
			t.Errorf("%s initial request = %v", typ, first)
		}
		if ack.GetVersionInfo() != "v1" || ack.GetResponseNonce() == "" || ack.GetErrorDetail() != nil {
			t.Errorf("%s ACK = %v", typ, ack)
		}
	}
	if names := srv.rec.requests(resourcev3.ClusterType)[0].GetResourceNames(); len(names) != 0 {
		t.Errorf("wildcard request names = %v", names)
	}
	if names := srv.rec.requests(resourcev3.RuntimeType)[0].GetResourceNames(); !slices.Equal(names, []string{"r1"}) {
		t.Errorf("runtime request names = %v", names)
	}

	// A new snapshot arrives and is ACKed; state of the world drops c2.
	srv.set(t, "v2", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("c1"), clusterRes("c3")},
		resourcev3.RuntimeType: {runtimeRes("r1", "changed"), runtimeRes("r2", "b")},
	})
	clusters.waitFor(t, "v2", "c1", "c3")
	if u := runtimes.waitFor(t, "v2", "r1"); u.values["r1"] != "changed" {
		t.Errorf("r1 = %q", u.values["r1"])
	}
	waitFor(t, "ACK of v2", func() bool { return srv.rec.acked(resourcev3.ClusterType, "v2") })
}

func TestNACK(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.set(t, "v1", map[resourcev3.Type][]types.Resource{
		resourcev3.RuntimeType: {runtimeRes("r1", "a")},
	})
	c := newClient(t, srv.addr)
	rts := newSink()
	rts.reject = func(n int, _ update) error {
		if n == 1 {
			return errors.New("bad runtime")
		}
		return nil
	}
	c.Watch(resourcev3.RuntimeType, []string{"r1"}, rts.handler)
	run(t, c)
	waitSynced(t, c)

	// The first response was NACKed: version not advanced, nonce echoed,
	// error_detail set. go-control-plane resends and the second is ACKed.
	waitFor(t, "initial request, NACK and ACK", func() bool { return len(srv.rec.requests(resourcev3.RuntimeType)) >= 3 })
	reqs := srv.rec.requests(resourcev3.RuntimeType)
	nack, ack := reqs[1], reqs[2]
	if nack.GetErrorDetail() == nil || !strings.Contains(nack.GetErrorDetail().GetMessage(), "bad runtime") {
		t.Errorf("NACK error_detail = %v", nack.GetErrorDetail())
	}
	if nack.GetVersionInfo() != "" || nack.GetResponseNonce() == "" {
		t.Errorf("NACK version %q nonce %q", nack.GetVersionInfo(), nack.GetResponseNonce())
	}
	if ack.GetErrorDetail() != nil || ack.GetVersionInfo() != "v1" || ack.GetResponseNonce() == nack.GetResponseNonce() {
		t.Errorf("ACK = %v (NACK nonce %q)", ack, nack.GetResponseNonce())
	}
	if rts.count() != 2 {
		t.Errorf("handler calls = %d, want 2", rts.count())
	}

	// A later bad version is NACKed with the last good version.
	rts.mu.Lock()
	rts.reject = func(_ int, u update) error {
		if u.version == "v2" {
			return errors.New("bad v2")
		}
		return nil
	}
	rts.mu.Unlock()
	srv.set(t, "v2", map[resourcev3.Type][]types.Resource{
		resourcev3.RuntimeType: {runtimeRes("r1", "b")},
	})
	waitFor(t, "NACK of v2", func() bool {
		for _, q := range srv.rec.requests(resourcev3.RuntimeType) {
			if strings.Contains(q.GetErrorDetail().GetMessage(), "bad v2") {
				if q.GetVersionInfo() != "v1" {
					t.Errorf("NACK of v2 carries version %q, want v1", q.GetVersionInfo())
				}
				return true
			}
		}
		return false
	})
}

// TestNACKBackoff: a handler that rejects every resend of the same version
// must not turn go-control-plane's immediate resends into a busy loop.
func TestNACKBackoff(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.set(t, "v1", map[resourcev3.Type][]types.Resource{
		resourcev3.RuntimeType: {runtimeRes("r1", "a")},
	})
	c := newClient(t, srv.addr)
	c.minNackBackoff, c.maxNackBackoff = 200*time.Millisecond, 400*time.Millisecond
	// The backoff runs on a clock the test moves; the sender says when it
	// holds the NACK back.
	var clockMu sync.Mutex
	clock := time.Now()
	c.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock(); c.signal() }
	deferred := make(chan time.Duration, 64)
	c.deferred = func(wait time.Duration) {
		select {
		case deferred <- wait:
		default: // the test checks the first few only
		}
	}
	rts := newSink()
	rts.reject = func(int, update) error { return errors.New("always bad") }
	c.Watch(resourcev3.RuntimeType, nil, rts.handler)
	run(t, c)

	// The first NACK goes out at once, and the server resends at once; each
	// repeat after that waits a backoff doubling up to the maximum, and
	// nothing is sent (so the handler is not called again) until the clock
	// has moved that far.
	var prev time.Duration
	for i, want := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond} {
		select {
		case wait := <-deferred:
			for wait == prev && wait != want {
				wait = <-deferred // the sender's timer ran out before the clock moved: held back again
			}
			prev = want
			if wait != want {
				t.Fatalf("repeat NACK %d held back %v, want %v", i+2, wait, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("repeat NACK %d was not held back", i+2)
		}
		if n := rts.count(); n != i+2 {
			t.Fatalf("handler calls while NACK %d is held back = %d, want %d", i+2, n, i+2)
		}
		advance(want)
	}
	select {
	case <-c.Synced():
		t.Error("Synced closed without an ACK")
	default:
	}

	// A fixed version is answered immediately... once the delayed NACK lets
	// the server send it.
	advance(time.Hour)
	rts.mu.Lock()
	rts.reject = nil
	rts.mu.Unlock()
	srv.set(t, "v2", map[resourcev3.Type][]types.Resource{
		resourcev3.RuntimeType: {runtimeRes("r1", "fixed")},
	})
	rts.waitFor(t, "v2", "r1")
	waitSynced(t, c)
}

// TestWatchChangesNames changes a subscription from outside and from inside a
// handler; the new names go out on the live stream.
func TestWatchChangesNames(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.set(t, "v1", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("a"), clusterRes("b")},
		resourcev3.RuntimeType: {runtimeRes("a", "1"), runtimeRes("b", "2"), runtimeRes("c", "3")},
	})
	c := newClient(t, srv.addr)
	rts := newSink()
	c.Watch(resourcev3.RuntimeType, []string{"a"}, rts.handler)
	// Like the data plane's CDS handler watching EDS: subscribe to the
	// runtimes named like the clusters, from inside the handler.
	clusters := newSink()
	c.Watch(resourcev3.ClusterType, nil, func(ctx context.Context, version string, res map[string]proto.Message) error {
		var names []string
		for n := range res {
			names = append(names, n)
		}
		c.Watch(resourcev3.RuntimeType, names, nil) // nil keeps rts.handler
		return clusters.handler(ctx, version, res)
	})
	run(t, c)
	waitSynced(t, c)
	rts.waitFor(t, "v1", "a", "b")

	// From outside: same version, more names; the server answers the new set.
	c.Watch(resourcev3.RuntimeType, []string{"c", "a", "b", "c"}, nil)
	u := rts.waitFor(t, "v1", "a", "b", "c")
	if u.values["c"] != "3" {
		t.Errorf("c = %q", u.values["c"])
	}
	waitFor(t, "request with new names", func() bool {
		for _, q := range srv.rec.requests(resourcev3.RuntimeType) {
			if slices.Equal(q.GetResourceNames(), []string{"a", "b", "c"}) {
				return true
			}
		}
		return false
	})

	// From inside the CDS handler: a new cluster subscribes its runtime.
	srv.set(t, "v2", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("a"), clusterRes("d")},
		resourcev3.RuntimeType: {runtimeRes("a", "1"), runtimeRes("d", "4")},
	})
	clusters.waitFor(t, "v2", "a", "d")
	if u := rts.waitFor(t, "v2", "a", "d"); u.values["d"] != "4" {
		t.Errorf("d = %q", u.values["d"])
	}

	// Watching the same names again sends nothing: it leaves no request
	// pending, and the next request on the stream (which keeps the order
	// they were sent in) is the one a changed Watch sends after it.
	waitFor(t, "ACK of v2", func() bool { return srv.rec.acked(resourcev3.RuntimeType, "v2") })
	before := len(srv.rec.requests(resourcev3.RuntimeType))
	c.Watch(resourcev3.RuntimeType, []string{"d", "a"}, nil)
	if reqs, _ := c.takePending(false); len(reqs) > 0 {
		t.Errorf("an unchanged Watch left %d requests to send", len(reqs))
	}
	c.Watch(resourcev3.RuntimeType, []string{"d", "a", "e"}, nil)
	waitFor(t, "the changed Watch's request", func() bool { return len(srv.rec.requests(resourcev3.RuntimeType)) > before })
	if next := srv.rec.requests(resourcev3.RuntimeType)[before]; !slices.Contains(next.GetResourceNames(), "e") {
		t.Errorf("an unchanged Watch sent a request: %v", next.GetResourceNames())
	}
}

// TestReconnect restarts the server on the same address with a new cache
// whose version counter restarted too: the client reconnects, asks again
// from scratch, and receives the new content under the old version string.
func TestReconnect(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	srv.set(t, "1", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("old")},
		resourcev3.RuntimeType: {runtimeRes("r", "old")},
	})
	c := newClient(t, srv.addr)
	clusters, rts := newSink(), newSink()
	c.Watch(resourcev3.ClusterType, nil, clusters.handler)
	c.Watch(resourcev3.RuntimeType, []string{"r"}, rts.handler)
	run(t, c)
	waitSynced(t, c)
	clusters.waitFor(t, "1", "old")

	srv.grpc.Stop()
	srv2 := startServer(t, srv.addr)
	srv2.set(t, "1", map[resourcev3.Type][]types.Resource{
		resourcev3.ClusterType: {clusterRes("new")},
		resourcev3.RuntimeType: {runtimeRes("r", "new")},
	})
	clusters.waitFor(t, "1", "new")
	waitFor(t, "runtime after reconnect", func() bool {
		u, _ := rts.last()
		return u.values["r"] == "new"
	})
	// The new stream announced the node again.
	waitFor(t, "node on new stream", func() bool {
		for _, q := range append(srv2.rec.requests(resourcev3.ClusterType), srv2.rec.requests(resourcev3.RuntimeType)...) {
			if q.GetNode().GetId() == nodeID {
				return true
			}
		}
		return false
	})
}

// TestRunBeforeServer: Run started before the server is up waits,
// then syncs.
func TestRunBeforeServer(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()

	c := newClient(t, addr)
	rts := newSink()
	c.Watch(resourcev3.RuntimeType, []string{"r"}, rts.handler)
	run(t, c)
	waitFor(t, "Run to start", c.running.Load)

	srv := startServer(t, addr)
	srv.set(t, "1", map[resourcev3.Type][]types.Resource{resourcev3.RuntimeType: {runtimeRes("r", "x")}})
	waitSynced(t, c)
	rts.waitFor(t, "1", "r")
}

func TestRunTwice(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0")
	c := newClient(t, srv.addr)
	run(t, c)
	waitFor(t, "Run to start", c.running.Load)
	if err := c.Run(context.Background()); err == nil {
		t.Error("second concurrent Run returned nil")
	}
}

func TestDecode(t *testing.T) {
	pack := func(m proto.Message) *anypb.Any {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	wrapped := func(name string, m proto.Message) *anypb.Any {
		r := &discoveryv3.Resource{Name: name, Ttl: durationpb.New(time.Minute)}
		if m != nil {
			r.Resource = pack(m)
		}
		return pack(r)
	}
	prev := map[string]proto.Message{"kept": runtimeRes("kept", "v")}
	tests := []struct {
		name      string
		resources []*anypb.Any
		want      []string
		err       string
	}{
		{"plain", []*anypb.Any{pack(runtimeRes("a", "")), pack(runtimeRes("b", ""))}, []string{"a", "b"}, ""},
		{"empty", nil, nil, ""},
		{"ttl wrapper", []*anypb.Any{wrapped("a", runtimeRes("a", ""))}, []string{"a"}, ""},
		{"heartbeat keeps previous", []*anypb.Any{wrapped("kept", nil)}, []string{"kept"}, ""},
		{"heartbeat for unknown", []*anypb.Any{wrapped("gone", nil)}, nil, "heartbeat"},
		{"wrong type", []*anypb.Any{pack(clusterRes("c"))}, nil, "in a"},
		{"duplicate", []*anypb.Any{pack(runtimeRes("a", "")), pack(runtimeRes("a", ""))}, nil, "duplicate"},
		{"no name", []*anypb.Any{pack(runtimeRes("", ""))}, nil, "no name"},
		{"unknown type", []*anypb.Any{{TypeUrl: resourcev3.RuntimeType + "X"}}, nil, "unpack"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decode(&discoveryv3.DiscoveryResponse{TypeUrl: resourcev3.RuntimeType, Resources: tt.resources}, prev)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			sort.Strings(names)
			if !slices.Equal(names, tt.want) {
				t.Errorf("names = %v, want %v", names, tt.want)
			}
		})
	}
}
