package envoy

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// ExampleBootstrapOptions render envoy/bootstrap.yaml: Envoy on the same host
// as `switchyard controlplane` and `switchyard extproc`, with a readiness
// listener.
var ExampleBootstrapOptions = BootstrapOptions{Region: "us", Readiness: "0.0.0.0:9902"}

// TestBootstrapExample keeps envoy/bootstrap.yaml what the renderer produces
// and checks it the way `switchyard envoy validate` does.
func TestBootstrapExample(t *testing.T) {
	got, err := RenderBootstrap(ExampleBootstrapOptions)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "bootstrap.yaml", got)
	data, err := os.ReadFile("bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBootstrap(data)
	if err != nil {
		t.Fatalf("strict parse: %v", err)
	}
	if err := Validate(&Config{Bootstrap: b}); err != nil {
		t.Errorf("bootstrap alone:\n%v", err)
	}
	for _, e := range exampleConfigs(t) {
		if err := Check(b, e.snapshot(t)); err != nil {
			t.Errorf("with %s:\n%v", e.name, err)
		}
	}
}

func TestBootstrap(t *testing.T) {
	b, err := Bootstrap(BootstrapOptions{
		NodeID: "envoy-1", Region: "asia",
		XDS: "switchyard-controlplane:18000", ExtProc: "unix:/run/switchyard/extproc.sock", RateLimit: "10.0.0.5:8081",
	})
	if err != nil {
		t.Fatal(err)
	}
	if b.GetNode().GetId() != "envoy-1" || b.GetNode().GetCluster() != DefaultNodeCluster || b.GetNode().GetLocality().GetRegion() != "asia" {
		t.Errorf("node = %v", b.GetNode())
	}
	if a := b.GetAdmin().GetAddress().GetSocketAddress(); a.GetAddress() != "127.0.0.1" || a.GetPortValue() != 9901 {
		t.Errorf("admin = %v", a)
	}
	ads := b.GetDynamicResources().GetAdsConfig()
	if ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != catalog.XDSCluster ||
		b.GetDynamicResources().GetLdsConfig().GetAds() == nil || b.GetDynamicResources().GetCdsConfig().GetAds() == nil {
		t.Errorf("dynamic resources = %v", b.GetDynamicResources())
	}
	byName := map[string]*clusterv3.Cluster{}
	var names []string
	for _, c := range b.GetStaticResources().GetClusters() {
		byName[c.GetName()] = c
		names = append(names, c.GetName())
		if !speaksHTTP2(c) {
			t.Errorf("static cluster %q does not speak HTTP/2", c.GetName())
		}
	}
	if want := []string{catalog.XDSCluster, catalog.ExtProcCluster, controlplane.RateLimitCluster}; !slices.Equal(names, want) {
		t.Errorf("static clusters = %v, want %v", names, want)
	}
	// A service name is resolved, a socket is a pipe, an IP is static.
	if c := byName[catalog.XDSCluster]; c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("xds type = %v", c.GetType())
	}
	ep := byName[catalog.ExtProcCluster].GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint()
	if ep.GetAddress().GetPipe().GetPath() != "/run/switchyard/extproc.sock" || byName[catalog.ExtProcCluster].GetType() != clusterv3.Cluster_STATIC {
		t.Errorf("extproc endpoint = %v", ep)
	}
	if c := byName[controlplane.RateLimitCluster]; c.GetType() != clusterv3.Cluster_STATIC {
		t.Errorf("ratelimit type = %v", c.GetType())
	}
	om := b.GetOverloadManager()
	if len(om.GetResourceMonitors()) != 2 || len(om.GetActions()) != 3 || om.GetBufferFactoryConfig() == nil {
		t.Errorf("overload manager = %v", om)
	}
	if len(b.GetStaticResources().GetListeners()) != 0 {
		t.Error("readiness listener without --readiness")
	}
	if err := Validate(&Config{Bootstrap: b}); err != nil {
		t.Error(err)
	}
}

func TestBootstrapErrors(t *testing.T) {
	tests := []struct {
		name string
		opts BootstrapOptions
		want string
	}{
		{"admin not loopback", BootstrapOptions{Admin: "0.0.0.0:9901"}, "loopback"},
		{"admin host name", BootstrapOptions{Admin: "localhost:9901"}, "loopback"},
		{"xds without port", BootstrapOptions{XDS: "controlplane"}, "switchyard_xds"},
		{"extproc empty socket", BootstrapOptions{ExtProc: "unix:"}, "unix socket"},
		{"ratelimit port zero", BootstrapOptions{RateLimit: "ratelimit:0"}, "switchyard_ratelimit"},
		{"readiness garbage", BootstrapOptions{Readiness: "nine"}, "readiness"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Bootstrap(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestBootstrapArgs(t *testing.T) {
	if got := (BootstrapOptions{}).Args(); len(got) != 0 {
		t.Errorf("defaults render flags %v", got)
	}
	o := BootstrapOptions{NodeID: "n", XDS: "cp:1", ExtProc: "unix:/s", Readiness: "0.0.0.0:9902", MaxHeapBytes: 1 << 30}
	want := []string{"--node-id", "n", "--xds", "cp:1", "--extproc", "unix:/s", "--readiness", "0.0.0.0:9902", "--max-heap-bytes", "1073741824"}
	if got := o.Args(); !slices.Equal(got, want) {
		t.Errorf("Args = %v, want %v", got, want)
	}
}

// TestSnapshotGolden keeps a readable copy of the snapshot of every example
// configuration, so a change to what Envoy receives shows in review.
func TestSnapshotGolden(t *testing.T) {
	for _, e := range exampleConfigs(t) {
		t.Run(e.name, func(t *testing.T) {
			snap := e.snapshot(t)
			got, err := SnapshotYAML(snap)
			if err != nil {
				t.Fatal(err)
			}
			again, _ := SnapshotYAML(e.snapshot(t))
			if !bytes.Equal(got, again) {
				t.Fatal("two snapshots of the same configuration render differently")
			}
			checkGolden(t, "testdata/snapshots/"+e.name+".yaml", got)
		})
	}
}

// TestSnapshotJSONLines: one protojson Any per line, every resource once.
func TestSnapshotJSONLines(t *testing.T) {
	snap := exampleConfig{name: "production", path: "../examples/production.yaml"}.snapshot(t)
	out, err := SnapshotJSONLines(snap)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	total := 0
	for _, typ := range SnapshotTypes(snap) {
		total += len(snap.GetResources(typ))
	}
	if len(lines) != total {
		t.Fatalf("%d lines for %d resources", len(lines), total)
	}
	seen := map[string]bool{}
	for i, line := range lines {
		var head struct {
			Type string `json:"@type"`
		}
		if err := json.Unmarshal([]byte(line), &head); err != nil || head.Type == "" {
			t.Fatalf("line %d is not an Any with @type: %v %.80s", i+1, err, line)
		}
		a := &anypb.Any{}
		if err := protojson.Unmarshal([]byte(line), a); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		m, err := a.UnmarshalNew()
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		key := head.Type + " " + cacheName(m)
		if seen[key] {
			t.Errorf("%s twice", key)
		}
		seen[key] = true
	}
	if !strings.HasPrefix(lines[0], `{"@type":"type.googleapis.com/envoy.config.listener.v3.Listener"`) {
		t.Errorf("listeners are not first: %.100s", lines[0])
	}
}
