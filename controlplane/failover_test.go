package controlplane

import (
	"context"
	"crypto/sha256"
	"errors"
	"net"
	"os"
	"path/filepath"
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
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// twoRegions: a (us, priority 1), b (asia), c (us, priority 0); m1 served by
// all three, m2 by b alone.
const twoRegions = `
region: us
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: a, kind: openai, base_url: http://127.0.0.1:9001/v1, region: us}
  - {name: b, kind: openai, base_url: http://127.0.0.1:9002/v1, region: asia}
  - {name: c, kind: openai, base_url: http://127.0.0.1:9003/v1, region: us}
models:
  - id: v/m1
    first_byte_timeout: 5s
    providers:
      - {provider: a, upstream_model: x, priority: 1}
      - {provider: b, upstream_model: x, priority: 0}
      - {provider: c, upstream_model: x, priority: 0}
  - id: v/m2
    providers: [{provider: b, upstream_model: y}]
`

func parse(t *testing.T, src string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestFailoverOrder(t *testing.T) {
	cfg := parse(t, twoRegions)
	m1 := cfg.Models[0]
	tests := []struct {
		home, first string
		want        []string
	}{
		// Home region first, then priority, then list order.
		{"us", "", []string{"provider_c", "provider_a", "provider_b"}},
		{"asia", "", []string{"provider_b", "provider_c", "provider_a"}},
		// The first choice leads; the rest keep their order.
		{"us", "b", []string{"provider_b", "provider_c", "provider_a"}},
		{"us", "a", []string{"provider_a", "provider_c", "provider_b"}},
		{"asia", "a", []string{"provider_a", "provider_b", "provider_c"}},
		// A first choice the model does not have changes nothing.
		{"us", "zz", []string{"provider_c", "provider_a", "provider_b"}},
	}
	for _, tt := range tests {
		t.Run(tt.home+"/"+tt.first, func(t *testing.T) {
			if got := FailoverOrder(cfg, m1, tt.home, tt.first); !slices.Equal(got, tt.want) {
				t.Errorf("FailoverOrder = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRouteClusterNames(t *testing.T) {
	tests := []struct {
		name   string
		models string
		model  map[string]string
		first  map[[2]string]string
	}{
		{"plain", `[{id: demo/chat, providers: [{provider: p-1, upstream_model: x}]}]`,
			map[string]string{"demo/chat": "route_demo_chat"},
			map[[2]string]string{{"demo/chat", "p-1"}: "route_demo_chat_p-1"}},
		{"dots colons and upper case", `[{id: qwen/Qwen2.5:7B, providers: [{provider: p_2, upstream_model: x}]}]`,
			map[string]string{"qwen/Qwen2.5:7B": "route_qwen_qwen2_5_7b"},
			map[[2]string]string{{"qwen/Qwen2.5:7B", "p_2"}: "route_qwen_qwen2_5_7b_p_2"}},
		// a_b/c and a/b_c both sanitize to a_b_c: both get a hash.
		{"collision", `[{id: a_b/c, providers: [{provider: p-1, upstream_model: x}]}, {id: a/b_c, providers: [{provider: p-1, upstream_model: x}]}]`,
			map[string]string{"a_b/c": "route_a_b_c_", "a/b_c": "route_a_b_c_"},
			map[[2]string]string{{"a_b/c", "p-1"}: "route_a_b_c_p-1_", {"a/b_c", "p-1"}: "route_a_b_c_p-1_"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := parse(t, `
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: p-1, kind: openai, base_url: http://127.0.0.1:9001/v1}
  - {name: p_2, kind: openai, base_url: http://127.0.0.1:9002/v1}
models: `+tt.models)
			got := RouteClusterNames(cfg)
			seen := map[string]bool{}
			check := func(name, want string) {
				t.Helper()
				if strings.HasSuffix(want, "_") {
					if !strings.HasPrefix(name, want) || len(name) != len(want)+8 {
						t.Errorf("name %q, want %q plus an 8-digit hash", name, want)
					}
				} else if name != want {
					t.Errorf("name %q, want %q", name, want)
				}
				if seen[name] {
					t.Errorf("name %q used twice", name)
				}
				seen[name] = true
			}
			for id, want := range tt.model {
				check(got.Model[id], want)
			}
			for k, want := range tt.first {
				check(got.First[k[0]][k[1]], want)
			}
			if _, err := Build(cfg, "1"); err != nil {
				t.Errorf("Build: %v", err)
			}
		})
	}
}

func aggregateMembers(t *testing.T, snap *cachev3.Snapshot, name string) []string {
	t.Helper()
	c := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, name)
	return unpack[*aggregatev3.ClusterConfig](t, c.GetClusterType().GetTypedConfig()).GetClusters()
}

// TestBuildRegion: one configuration, two home regions: each gateway's
// failover order starts in its own region, its providers' endpoints are
// priority 0, and its catalog names its region.
func TestBuildRegion(t *testing.T) {
	cfg := parse(t, twoRegions)
	for _, tt := range []struct {
		region        string
		m1            []string
		m1FirstA      []string
		priorityOfB   uint32
		priorityOfA   uint32
		catalogRegion string
	}{
		{"us", []string{"provider_c", "provider_a", "provider_b"}, []string{"provider_a", "provider_c", "provider_b"}, PriorityOtherRegion, PriorityHomeRegion, "us"},
		{"asia", []string{"provider_b", "provider_c", "provider_a"}, []string{"provider_a", "provider_b", "provider_c"}, PriorityHomeRegion, PriorityOtherRegion, "asia"},
	} {
		t.Run(tt.region, func(t *testing.T) {
			snap, err := BuildRegion(cfg, tt.region, "3")
			if err != nil {
				t.Fatal(err)
			}
			checkSnapshot(t, snap, "3")
			if got := aggregateMembers(t, snap, "route_v_m1"); !slices.Equal(got, tt.m1) {
				t.Errorf("route_v_m1 = %v, want %v", got, tt.m1)
			}
			if got := aggregateMembers(t, snap, "route_v_m1_a"); !slices.Equal(got, tt.m1FirstA) {
				t.Errorf("route_v_m1_a = %v, want %v", got, tt.m1FirstA)
			}
			if got := aggregateMembers(t, snap, "route_v_m2"); !slices.Equal(got, []string{"provider_b"}) {
				t.Errorf("route_v_m2 = %v", got)
			}
			for name, want := range map[string]uint32{"provider_a": tt.priorityOfA, "provider_b": tt.priorityOfB} {
				cla := resource[*endpointv3.ClusterLoadAssignment](t, snap, resourcev3.EndpointType, name)
				if got := cla.GetEndpoints()[0].GetPriority(); got != want {
					t.Errorf("%s priority = %d, want %d", name, got, want)
				}
			}
			cat, err := catalog.Decode(resource[*runtimev3.Runtime](t, snap, resourcev3.RuntimeType, catalog.RuntimeName))
			if err != nil || cat.Region != tt.catalogRegion {
				t.Errorf("catalog region = %v, %v", cat, err)
			}
			// Three providers: two retries, each attempt bounded by the
			// model's first_byte_timeout.
			vh := resource[*routev3.RouteConfiguration](t, snap, resourcev3.RouteType, catalog.ListenerRouteConfig).GetVirtualHosts()[0]
			for _, r := range vh.GetRoutes() {
				if !strings.HasPrefix(r.GetName(), "model:v/m1") {
					continue
				}
				rp := r.GetRoute().GetRetryPolicy()
				if rp.GetNumRetries().GetValue() != 2 || rp.GetPerTryTimeout().AsDuration() != 5*time.Second {
					t.Errorf("%s retry policy = %v", r.GetName(), rp)
				}
			}
		})
	}
	// The configuration's own region is Build's.
	a, _ := Build(cfg, "1")
	b, _ := BuildRegion(cfg, "us", "1")
	if !slices.Equal(aggregateMembers(t, a, "route_v_m1"), aggregateMembers(t, b, "route_v_m1")) {
		t.Error("Build differs from BuildRegion of the configuration's region")
	}
}

func TestNodeHash(t *testing.T) {
	for _, tt := range []struct {
		node *corev3.Node
		want string
	}{
		{&corev3.Node{Id: "x"}, defaultNodeKey},
		{nil, defaultNodeKey},
		{&corev3.Node{Id: "x", Locality: &corev3.Locality{Region: "asia"}}, RegionNodeKey("asia")},
		{&corev3.Node{Id: "y", Locality: &corev3.Locality{Region: "us", Zone: "us-east-1a"}}, RegionNodeKey("us")},
		{&corev3.Node{Id: "x", Locality: &corev3.Locality{Region: "eu"}}, defaultNodeKey},
	} {
		if got := (NodeHash{}).ID(tt.node); got != tt.want {
			t.Errorf("ID(%v) = %q, want %q", tt.node, got, tt.want)
		}
	}
}

// TestServerChanges: every accepted change is the next version for every
// region; a refused change keeps the snapshot and the version.
func TestServerChanges(t *testing.T) {
	ctx := context.Background()
	srv := New(nil)
	if _, err := srv.Modify(ctx, "early", func(*config.Config) error { return nil }); err == nil {
		t.Error("Modify before the first Update succeeded")
	}
	if v, err := srv.Update(ctx, parse(t, twoRegions)); err != nil || v != "1" {
		t.Fatalf("Update = %q, %v", v, err)
	}
	members := func(key, cluster string) []string {
		t.Helper()
		snap, err := srv.Cache().GetSnapshot(key)
		if err != nil {
			t.Fatal(err)
		}
		s := snap.(*cachev3.Snapshot)
		return aggregateMembers(t, s, cluster)
	}
	version := func(key string) string {
		snap, err := srv.Cache().GetSnapshot(key)
		if err != nil {
			t.Fatal(err)
		}
		return snap.GetVersion(resourcev3.ClusterType)
	}
	if got := members(RegionNodeKey("asia"), "route_v_m1"); got[0] != "provider_b" {
		t.Errorf("asia order %v", got)
	}
	if got := members(defaultNodeKey, "route_v_m1"); got[0] != "provider_c" {
		t.Errorf("default (us) order %v", got)
	}

	steps := []struct {
		name    string
		do      func() (string, error)
		wantErr error
		check   func(t *testing.T)
	}{
		{"move m1 to a alone", func() (string, error) {
			return srv.Modify(ctx, "m1 to a", func(c *config.Config) error {
				c.Models[0].Providers = []config.ModelProvider{{Provider: "a", UpstreamModel: "x2"}}
				return nil
			})
		}, nil, func(t *testing.T) {
			if got := members(RegionNodeKey("us"), "route_v_m1"); !slices.Equal(got, []string{"provider_a"}) {
				t.Errorf("m1 = %v", got)
			}
			if w := srv.Config().Models[0].Providers[0].Weight; w != 1 {
				t.Errorf("new entry's weight = %d, want the default 1", w)
			}
		}},
		{"unknown provider", func() (string, error) {
			return srv.Modify(ctx, "bad", func(c *config.Config) error {
				c.Models[0].Providers[0].Provider = "nobody"
				return nil
			})
		}, ErrInvalid, nil},
		{"bad policy", func() (string, error) {
			return srv.Modify(ctx, "bad", func(c *config.Config) error {
				c.Models[0].Routing = "fastest"
				return nil
			})
		}, ErrInvalid, nil},
		{"the change function's own error", func() (string, error) {
			return srv.Modify(ctx, "bad", func(c *config.Config) error { return errBoom })
		}, errBoom, nil},
		{"back to three providers", func() (string, error) {
			return srv.Modify(ctx, "m1 to a, b, c", func(c *config.Config) error {
				c.Models[0].Providers = []config.ModelProvider{
					{Provider: "a", UpstreamModel: "x", Weight: 3},
					{Provider: "b", UpstreamModel: "x"},
					{Provider: "c", UpstreamModel: "x", Priority: 5},
				}
				return nil
			})
		}, nil, func(t *testing.T) {
			if got := members(RegionNodeKey("us"), "route_v_m1"); !slices.Equal(got, []string{"provider_a", "provider_c", "provider_b"}) {
				t.Errorf("m1 = %v", got)
			}
		}},
		{"drain the last provider of m2", func() (string, error) { return srv.Drain(ctx, "b") }, ErrConflict, nil},
		{"drain an unknown provider", func() (string, error) { return srv.Drain(ctx, "zz") }, ErrNotFound, nil},
		{"drain a", func() (string, error) { return srv.Drain(ctx, "a") }, nil, func(t *testing.T) {
			if got := members(RegionNodeKey("us"), "route_v_m1"); !slices.Equal(got, []string{"provider_c", "provider_b"}) {
				t.Errorf("m1 with a drained = %v", got)
			}
			if _, drained := srv.BaseConfig(); !slices.Equal(drained, []string{"a"}) {
				t.Errorf("drained = %v", drained)
			}
			// The provider's own cluster stays, for requests in flight.
			snap, _ := srv.Cache().GetSnapshot(defaultNodeKey)
			if _, ok := snap.GetResources(resourcev3.ClusterType)["provider_a"]; !ok {
				t.Error("drained provider's cluster removed")
			}
		}},
		{"a file update keeps a drained", func() (string, error) { return srv.Update(ctx, parse(t, twoRegions)) }, nil, func(t *testing.T) {
			if got := members(RegionNodeKey("us"), "route_v_m1"); slices.Contains(got, "provider_a") {
				t.Errorf("m1 after update = %v", got)
			}
		}},
		{"undrain a", func() (string, error) { return srv.Undrain(ctx, "a") }, nil, func(t *testing.T) {
			if got := members(RegionNodeKey("us"), "route_v_m1"); !slices.Contains(got, "provider_a") {
				t.Errorf("m1 after undrain = %v", got)
			}
		}},
		{"undrain an unknown provider", func() (string, error) { return srv.Undrain(ctx, "zz") }, ErrNotFound, nil},
	}
	want := 1
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			v, err := st.do()
			if st.wantErr != nil {
				if !errors.Is(err, st.wantErr) {
					t.Fatalf("err = %v, want %v", err, st.wantErr)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				want++
			}
			if srv.Version() != itoa(want) || (st.wantErr == nil && v != itoa(want)) {
				t.Errorf("version %q (returned %q), want %d", srv.Version(), v, want)
			}
			for _, key := range []string{defaultNodeKey, RegionNodeKey("us"), RegionNodeKey("asia")} {
				if got := version(key); got != itoa(want) {
					t.Errorf("%s at version %s, want %d", key, got, want)
				}
			}
			if st.check != nil {
				st.check(t)
			}
		})
	}
}

var errBoom = errors.New("boom")

func itoa(n int) string { return strconv.Itoa(n) }

// TestWatchFile: a changed file is applied; a bad one is ignored and the
// configuration in force stays; a touch without a change does nothing.
func TestWatchFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "switchyard.yaml")
	write := func(s string) {
		t.Helper()
		// Write under another name and rename, as editors and config
		// management do; the modification time moves with the content.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(twoRegions)
	srv := New(nil)
	if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	polled := make(chan [sha256.Size]byte)
	srv.filePolled = func(seen [sha256.Size]byte) {
		select {
		case polled <- seen:
		case <-wctx.Done():
		}
	}
	go srv.WatchFile(wctx, path, 10*time.Millisecond)
	// waitSeen waits for the watcher to have looked at content.
	waitSeen := func(content string) {
		t.Helper()
		want := sha256.Sum256([]byte(content))
		timeout := time.After(5 * time.Second)
		for {
			select {
			case seen := <-polled:
				if seen == want {
					return
				}
			case <-timeout:
				t.Fatalf("the watcher did not read the file within 5s")
			}
		}
	}
	// Every wait takes the watcher's looks as they come: the watcher waits
	// for each to be taken, so none is missed.
	waitVersion := func(want string) {
		t.Helper()
		timeout := time.After(5 * time.Second)
		for srv.Version() != want {
			select {
			case <-polled:
			case <-timeout:
				t.Fatalf("version %q, want %q", srv.Version(), want)
			}
		}
	}
	// The watcher records the file it starts with, and a look at it
	// applies nothing.
	waitSeen(twoRegions)
	if v := srv.Version(); v != "1" {
		t.Fatalf("the starting file was applied again: version %s", v)
	}

	moved := strings.Replace(twoRegions, "{provider: a, upstream_model: x, priority: 1}", "{provider: a, upstream_model: x, priority: -1}", 1)
	write(moved)
	waitVersion("2")
	if got := srv.Config().Models[0].Providers[0].Priority; got != -1 {
		t.Errorf("priority after reload = %d", got)
	}

	// Invalid YAML, then a valid file that references an unknown provider:
	// both ignored, nothing half-applied.
	write(moved + "\n  - this is: [not valid\n")
	waitSeen(moved + "\n  - this is: [not valid\n")
	unknown := strings.Replace(moved, "{provider: b, upstream_model: y}", "{provider: nobody, upstream_model: y}", 1)
	write(unknown)
	waitSeen(unknown)
	if v := srv.Version(); v != "2" {
		t.Fatalf("a bad file was applied: version %s", v)
	}
	if got := srv.Config().Models[1].Providers[0].Provider; got != "b" {
		t.Errorf("model 2 provider = %q", got)
	}

	// The content in force, written again: nothing to do.
	write(moved)
	waitSeen(moved)
	if v := srv.Version(); v != "2" {
		t.Fatalf("unchanged content applied again: version %s", v)
	}

	write(twoRegions)
	waitVersion("3")
	if got := srv.Config().Models[0].Providers[0].Priority; got != 1 {
		t.Errorf("priority after the second reload = %d", got)
	}
}

func TestUnionRoutes(t *testing.T) {
	prev := parse(t, twoRegions)
	next := parse(t, `
region: us
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: b, kind: openai, base_url: http://127.0.0.1:9002/v1, region: asia}
  - {name: d, kind: openai, base_url: http://127.0.0.1:9004/v1}
models:
  - id: v/m1
    providers: [{provider: d, upstream_model: z}, {provider: b, upstream_model: x2}]
`)
	if got := unionRoutes(next, nil, true); got != next {
		t.Error("without retired routes the catalog is the configuration")
	}
	if u := unionRoutes(next, []retiredRoutes{{cfg: prev}}, false); len(u.Models) != 1 {
		t.Errorf("a removed model kept past the switch: %d models", len(u.Models))
	}
	u := unionRoutes(next, []retiredRoutes{{cfg: prev}}, true)
	var providers []string
	for _, p := range u.Providers {
		providers = append(providers, p.Name)
	}
	if !slices.Equal(providers, []string{"b", "d", "a", "c"}) {
		t.Errorf("providers = %v", providers)
	}
	var models []string
	for _, m := range u.Models {
		models = append(models, m.ID)
	}
	if !slices.Equal(models, []string{"v/m1", "v/m2"}) {
		t.Fatalf("models = %v", models)
	}
	m1 := u.Models[0].Providers
	type entry struct {
		p, model string
		w, prio  int
	}
	var got []entry
	for _, mp := range m1 {
		got = append(got, entry{mp.Provider, mp.UpstreamModel, mp.Weight, mp.Priority})
	}
	// The new entries as they are (b with its new upstream model), then the
	// retired ones, never preferred.
	want := []entry{{"d", "z", 1, 0}, {"b", "x2", 1, 0}, {"a", "x", 0, 1<<31 - 1}, {"c", "x", 0, 1<<31 - 1}}
	if !slices.Equal(got, want) {
		t.Errorf("v/m1 providers = %v, want %v", got, want)
	}
	if len(next.Models[0].Providers) != 2 || len(next.Providers) != 2 {
		t.Error("unionRoutes changed its input")
	}
}

// catalogOf decodes the catalog of an RTDS answer.
func catalogOf(t *testing.T, res map[string]proto.Message) *catalog.Catalog {
	t.Helper()
	c, err := catalog.Decode(res[catalog.RuntimeName].(*runtimev3.Runtime))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func providersOf(c *catalog.Catalog, model string) []string {
	m, _ := c.Model(model)
	var out []string
	for _, mp := range m.Providers {
		out = append(out, mp.Provider)
	}
	return out
}

// TestRouteChangeCatalogFirst: a change of routes reaches extprocs (RTDS)
// before data planes (CDS), with a catalog that still routes the old pairs
// for requests in flight; those retire after RetireAfter.
func TestRouteChangeCatalogFirst(t *testing.T) {
	ctx := context.Background()
	srv := New(nil)
	srv.RetireAfter = 300 * time.Millisecond
	if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)

	// An extproc and a data plane, each on its own stream, logging what
	// arrives in one sequence.
	var (
		mu     sync.Mutex
		events []string
		cats   = map[string]*catalog.Catalog{}
	)
	record := func(typ string) adsclient.Handler {
		return func(_ context.Context, version string, res map[string]proto.Message) error {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, typ+" "+version)
			if typ == "rtds" {
				cats[version] = catalogOf(t, res)
			}
			return nil
		}
	}
	run := func(node string, typ, typeURL string, names []string) {
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		ac := adsclient.New(cc, &corev3.Node{Id: node, Locality: &corev3.Locality{Region: "us"}}, nil)
		ac.Watch(typeURL, names, record(typ))
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- ac.Run(rctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-ac.Synced():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not sync", node)
		}
	}
	run("extproc", "rtds", resourcev3.RuntimeType, []string{catalog.RuntimeName})
	run("dataplane", "cds", resourcev3.ClusterType, nil)

	// v/m1 leaves a and c for b alone.
	v, err := srv.Modify(ctx, "m1 to b", func(c *config.Config) error {
		c.Models[0].Providers = []config.ModelProvider{{Provider: "b", UpstreamModel: "x"}}
		return nil
	})
	if err != nil || v != "2" {
		t.Fatalf("Modify = %q, %v", v, err)
	}
	waitFor(t, "both at version 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(events, "rtds 2") && slices.Contains(events, "cds 2")
	})
	mu.Lock()
	ev := slices.Clone(events)
	mu.Unlock()
	if i, j := slices.Index(ev, "rtds 2-catalog"), slices.Index(ev, "cds 2"); i < 0 || j < 0 || i > j {
		t.Fatalf("events %v: the catalog must reach extproc before the routes reach the data plane", ev)
	}
	for _, version := range []string{"2-catalog", "2"} {
		mu.Lock()
		c := cats[version]
		mu.Unlock()
		if got := providersOf(c, "v/m1"); !slices.Equal(got, []string{"b", "c", "a"}) && !slices.Equal(got, []string{"b", "a", "c"}) {
			t.Errorf("catalog %s routes v/m1 to %v, want b then the retired a and c", version, got)
		}
	}
	// The retired pairs expire: a new version, without them.
	waitFor(t, "retired routes trimmed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		c := cats["3"]
		return c != nil && slices.Equal(providersOf(c, "v/m1"), []string{"b"})
	})
	if got := srv.Version(); got != "3" {
		t.Errorf("version after retirement = %s", got)
	}

	// An extproc that refuses the catalog holds a change back only for
	// PhaseTimeout.
	srv.PhaseTimeout = 100 * time.Millisecond
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	bad := adsclient.New(cc, &corev3.Node{Id: "stubborn"}, nil)
	var refused atomic.Bool
	bad.Watch(resourcev3.RuntimeType, []string{catalog.RuntimeName}, func(_ context.Context, version string, _ map[string]proto.Message) error {
		if version != "3" {
			refused.Store(true)
			return errBoom
		}
		return nil
	})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- bad.Run(rctx) }()
	t.Cleanup(func() { cancel(); <-done })
	<-bad.Synced()
	start := time.Now()
	if _, err := srv.Modify(ctx, "m1 to a", func(c *config.Config) error {
		c.Models[0].Providers = []config.ModelProvider{{Provider: "a", UpstreamModel: "x"}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second || !refused.Load() {
		t.Errorf("the change took %v (refused %v), want PhaseTimeout", d, refused.Load())
	}
}
