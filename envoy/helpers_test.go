package envoy

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files from the current output")

// exampleConfig is a configuration the control plane must turn into a
// snapshot Envoy accepts.
type exampleConfig struct {
	name string // golden file stem
	path string // "" for the embedded default
}

// exampleConfigs lists every configuration of the repository: the embedded
// default, examples/, and the ones the deploy manifests mount.
func exampleConfigs(t *testing.T) []exampleConfig {
	t.Helper()
	out := []exampleConfig{{name: "default"}}
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	for _, f := range files {
		out = append(out, exampleConfig{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), path: f})
	}
	out = append(out,
		exampleConfig{name: "deploy-compose", path: "../deploy/compose/switchyard.yaml"},
		exampleConfig{name: "deploy-compose-fleet", path: "../deploy/compose/switchyard.fleet.yaml"},
		exampleConfig{name: "deploy-kubernetes", path: "../deploy/kubernetes/overlays/single-node/switchyard.yaml"},
		exampleConfig{name: "deploy-kubernetes-fleet", path: "../deploy/kubernetes/overlays/fleet/switchyard.yaml"},
	)
	if len(out) < 5 {
		t.Fatalf("found only %d example configurations: %v", len(out), out)
	}
	return out
}

func (e exampleConfig) load(t *testing.T) *config.Config {
	t.Helper()
	var (
		cfg *config.Config
		err error
	)
	if e.path == "" {
		cfg, err = config.Default()
	} else {
		cfg, err = config.Load(e.path)
	}
	if err != nil {
		t.Fatalf("%s: %v", e.name, err)
	}
	return cfg
}

func (e exampleConfig) snapshot(t *testing.T) *cachev3.Snapshot {
	t.Helper()
	snap, err := controlplane.Build(e.load(t), "1")
	if err != nil {
		t.Fatalf("%s: Build: %v", e.name, err)
	}
	return snap
}

// checkGolden compares got with the golden file, or rewrites it with -update.
func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./envoy -update` to create it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s is out of date; the first difference is at line %d:\n%s\nRun `go test ./envoy -update` and review the diff.",
			path, firstDiffLine(string(want), string(got)), diffContext(string(want), string(got)))
	}
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(al), len(bl)) {
		if al[i] != bl[i] {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

func diffContext(a, b string) string {
	n := firstDiffLine(a, b) - 1
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	line := func(l []string) string {
		if n < len(l) {
			return l[n]
		}
		return "<end of file>"
	}
	return "  golden: " + line(al) + "\n  now:    " + line(bl)
}

// cloneConfig deep-copies c so a test can break one resource.
func cloneConfig(c *Config) *Config {
	out := &Config{}
	if c.Bootstrap != nil {
		out.Bootstrap = proto.Clone(c.Bootstrap).(*bootstrapv3.Bootstrap)
	}
	for _, r := range c.Listeners {
		out.Listeners = append(out.Listeners, proto.Clone(r).(*listenerv3.Listener))
	}
	for _, r := range c.Routes {
		out.Routes = append(out.Routes, proto.Clone(r).(*routev3.RouteConfiguration))
	}
	for _, r := range c.Clusters {
		out.Clusters = append(out.Clusters, proto.Clone(r).(*clusterv3.Cluster))
	}
	for _, r := range c.Endpoints {
		out.Endpoints = append(out.Endpoints, proto.Clone(r).(*endpointv3.ClusterLoadAssignment))
	}
	for _, r := range c.Secrets {
		out.Secrets = append(out.Secrets, proto.Clone(r).(*tlsv3.Secret))
	}
	for _, r := range c.Other {
		out.Other = append(out.Other, proto.Clone(r).(types.Resource))
	}
	return out
}

func (c *Config) listener(t *testing.T, name string) *listenerv3.Listener {
	t.Helper()
	for _, l := range c.Listeners {
		if l.GetName() == name {
			return l
		}
	}
	t.Fatalf("no listener %q", name)
	return nil
}

func (c *Config) cluster(t *testing.T, name string) *clusterv3.Cluster {
	t.Helper()
	for _, cl := range append(c.Bootstrap.GetStaticResources().GetClusters(), c.Clusters...) {
		if cl.GetName() == name {
			return cl
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

// removeStaticCluster drops a bootstrap static cluster.
func (c *Config) removeStaticCluster(name string) {
	sr := c.Bootstrap.GetStaticResources()
	var keep []*clusterv3.Cluster
	for _, cl := range sr.GetClusters() {
		if cl.GetName() != name {
			keep = append(keep, cl)
		}
	}
	sr.Clusters = keep
}

// mutateHCM rewrites the connection manager of listener l in place.
func mutateHCM(t *testing.T, l *listenerv3.Listener, f func(*hcmv3.HttpConnectionManager)) {
	t.Helper()
	fl := l.GetFilterChains()[0].GetFilters()[0]
	h := &hcmv3.HttpConnectionManager{}
	if err := fl.GetTypedConfig().UnmarshalTo(h); err != nil {
		t.Fatal(err)
	}
	f(h)
	fl.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(h)}
}

// mutateExtProc rewrites the ext_proc filter of listener l in place.
func mutateExtProc(t *testing.T, l *listenerv3.Listener, f func(*extprocv3.ExternalProcessor)) {
	t.Helper()
	mutateHCM(t, l, func(h *hcmv3.HttpConnectionManager) {
		for _, hf := range h.GetHttpFilters() {
			if hf.GetName() != controlplane.FilterExtProc {
				continue
			}
			ep := &extprocv3.ExternalProcessor{}
			if err := hf.GetTypedConfig().UnmarshalTo(ep); err != nil {
				t.Fatal(err)
			}
			f(ep)
			hf.ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ep)}
			return
		}
		t.Fatal("no ext_proc filter")
	})
}

func cacheName(m proto.Message) string {
	r, ok := m.(types.Resource)
	if !ok {
		return ""
	}
	return cachev3.GetResourceName(r)
}
