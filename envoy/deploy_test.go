package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"gopkg.in/yaml.v3"

	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/controlplane"
)

// The deploy manifests mount an Envoy bootstrap and a Switchyard
// configuration. These tests find both the way the manifests do, validate
// them together, keep the bootstraps what the renderer produces for the
// options in their headers, and check that the addresses in the manifests and
// in the bootstrap agree.

// Bootstrap options of the deploy layouts; the rendered files record them.
var (
	composeBootstrap = BootstrapOptions{NodeID: "envoy-compose", Region: "us",
		XDS: "controlplane:18000", ExtProc: "extproc:18001", RateLimit: "ratelimit:8081"}
	kubernetesBootstrap = BootstrapOptions{Region: "us",
		XDS: "switchyard-controlplane:18000", ExtProc: "unix:/var/run/switchyard/extproc.sock",
		RateLimit: "switchyard-ratelimit:8081", Readiness: "0.0.0.0:9902"}
)

// doc is a decoded YAML node: maps, lists and scalars.
type doc = map[string]any

func readYAMLDocs(t *testing.T, file string) []doc {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []doc
	for {
		var d doc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if d != nil {
			out = append(out, d)
		}
	}
}

// get follows keys (string) and indexes (int) through a decoded document.
func get(v any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(doc)
			if !ok {
				return nil
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				return nil
			}
			v = l[p]
		}
	}
	return v
}

func str(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

func strs(v any) []string {
	var out []string
	for _, e := range asList(v) {
		out = append(out, str(e))
	}
	return out
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// flagValue returns the value after flag in args.
func flagValue(args []string, flag string) string {
	if i := slices.Index(args, flag); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

// checkDeployBootstrap validates a mounted bootstrap with the configuration
// mounted beside it and keeps it equal to what the renderer produces.
func checkDeployBootstrap(t *testing.T, bootstrapFile, configFile string, opts BootstrapOptions) (*bootstrapv3.Bootstrap, *config.Config) {
	t.Helper()
	want, err := RenderBootstrap(opts)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, bootstrapFile, want)
	data, err := os.ReadFile(bootstrapFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseBootstrap(data)
	if err != nil {
		t.Fatalf("%s: %v", bootstrapFile, err)
	}
	cfg, err := config.Load(configFile)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := controlplane.Build(cfg, "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(b, snap); err != nil {
		t.Errorf("%s with %s:\n%v", bootstrapFile, configFile, err)
	}
	return b, cfg
}

// staticAddress is a bootstrap static cluster's one endpoint: host:port or
// unix:/path.
func staticAddress(t *testing.T, b *bootstrapv3.Bootstrap, cluster string) string {
	t.Helper()
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		a := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
		if p := a.GetPipe(); p != nil {
			return "unix:" + p.GetPath()
		}
		sa := a.GetSocketAddress()
		return net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))
	}
	t.Fatalf("bootstrap has no static cluster %q", cluster)
	return ""
}

func port(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}

// TestComposeLayout checks deploy/compose against its Envoy bootstrap and
// configuration.
func TestComposeLayout(t *testing.T) {
	const dir = "../deploy/compose"
	docs := readYAMLDocs(t, filepath.Join(dir, "docker-compose.yaml"))
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	services, _ := docs[0]["services"].(doc)
	svc := func(name string) doc {
		s, ok := services[name].(doc)
		if !ok {
			t.Fatalf("no service %q", name)
		}
		return s
	}
	// Mounts maps a container path to the host path (relative to dir).
	mounts := func(s doc) map[string]string {
		out := map[string]string{}
		for _, v := range strs(s["volumes"]) {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 {
				out[parts[1]] = parts[0]
			}
		}
		return out
	}
	hostFile := func(s doc, containerPath string) string {
		t.Helper()
		for c, h := range mounts(s) {
			if c == containerPath || strings.HasPrefix(containerPath, c+"/") {
				return filepath.Join(dir, h, strings.TrimPrefix(containerPath, c))
			}
		}
		t.Fatalf("%s is not mounted (volumes %v)", containerPath, s["volumes"])
		return ""
	}

	for name, prefix := range map[string]string{"envoy": "envoyproxy/envoy:", "ratelimit": "envoyproxy/ratelimit:", "redis": "redis:"} {
		if img := str(svc(name)["image"]); !strings.HasPrefix(img, prefix) {
			t.Errorf("service %s image %q, want the official %s image", name, img, prefix)
		}
	}
	envoySvc, cpSvc, epSvc, rlSvc := svc("envoy"), svc("controlplane"), svc("extproc"), svc("ratelimit")
	cpArgs, epArgs := strs(cpSvc["command"]), strs(epSvc["command"])
	if cpArgs[0] != "controlplane" || epArgs[0] != "extproc" {
		t.Fatalf("controlplane/extproc commands: %v / %v", cpArgs, epArgs)
	}
	bootFile := hostFile(envoySvc, flagValue(strs(envoySvc["command"]), "-c"))
	cfgFile := hostFile(cpSvc, flagValue(cpArgs, "--config"))
	b, cfg := checkDeployBootstrap(t, bootFile, cfgFile, composeBootstrap)

	// Addresses: the bootstrap reaches each service by its compose name, on
	// the port the service listens on.
	env := func(s doc, k string) string { return str(get(s, "environment", k)) }
	for cluster, want := range map[string]string{
		catalog.XDSCluster:            "controlplane:" + port(flagValue(cpArgs, "--listen")),
		catalog.ExtProcCluster:        "extproc:" + port(flagValue(epArgs, "--listen")),
		controlplane.RateLimitCluster: "ratelimit:" + env(rlSvc, "GRPC_PORT"),
	} {
		if got := staticAddress(t, b, cluster); got != want {
			t.Errorf("bootstrap cluster %s at %s, want %s", cluster, got, want)
		}
	}
	if got, want := flagValue(epArgs, "--xds"), "controlplane:"+port(flagValue(cpArgs, "--listen")); got != want {
		t.Errorf("extproc --xds %s, want %s", got, want)
	}
	if got, want := flagValue(epArgs, "--ratelimit"), "ratelimit:"+env(rlSvc, "GRPC_PORT"); got != want {
		t.Errorf("extproc --ratelimit %s, want %s", got, want)
	}
	if got, want := env(rlSvc, "CONFIG_GRPC_XDS_SERVER_URL"), "controlplane:"+port(flagValue(cpArgs, "--listen")); got != want || env(rlSvc, "CONFIG_TYPE") != "GRPC_XDS_SOTW" {
		t.Errorf("ratelimit xDS server %s (type %s), want %s over GRPC_XDS_SOTW", got, env(rlSvc, "CONFIG_TYPE"), want)
	}
	if got := env(rlSvc, "REDIS_URL"); got != "redis:6379" {
		t.Errorf("ratelimit REDIS_URL %s", got)
	}
	// Every listener is published, and its certificate is mounted into Envoy.
	published := strings.Join(strs(envoySvc["ports"]), " ")
	for _, l := range cfg.Listeners {
		if !strings.Contains(published, ":"+port(l.Address)+":"+port(l.Address)) {
			t.Errorf("listener %s (%s) is not published (ports %s)", l.Name, l.Address, published)
		}
		if l.TLS != nil {
			for _, f := range []string{l.TLS.CertFile, l.TLS.KeyFile} {
				hostFile(envoySvc, f) // fails the test when not mounted
			}
		}
	}
	// Every credential the configuration names is in extproc's environment.
	for _, p := range cfg.Providers {
		if p.APIKeyEnv != "" && env(epSvc, p.APIKeyEnv) == "" {
			t.Errorf("provider %s: extproc lacks %s", p.Name, p.APIKeyEnv)
		}
	}
}

// TestKubernetesLayout checks deploy/kubernetes against its Envoy bootstrap
// and configuration.
func TestKubernetesLayout(t *testing.T) {
	const dir = "../deploy/kubernetes"
	kust := readYAMLDocs(t, filepath.Join(dir, "kustomization.yaml"))[0]
	var objects []doc
	for _, r := range strs(kust["resources"]) {
		objects = append(objects, readYAMLDocs(t, filepath.Join(dir, r))...)
	}
	// configMapGenerator: ConfigMap name -> key -> file.
	configMaps := map[string]map[string]string{}
	for _, g := range asList(kust["configMapGenerator"]) {
		files := map[string]string{}
		for _, f := range strs(get(g, "files")) {
			key, file, ok := strings.Cut(f, "=")
			if !ok {
				key, file = filepath.Base(f), f
			}
			if _, err := os.Stat(filepath.Join(dir, file)); err != nil {
				t.Error(err)
			}
			files[key] = filepath.Join(dir, file)
		}
		configMaps[str(get(g, "name"))] = files
	}
	find := func(kind, name string) doc {
		t.Helper()
		for _, o := range objects {
			if str(o["kind"]) == kind && str(get(o, "metadata", "name")) == name {
				return o
			}
		}
		t.Fatalf("no %s %q", kind, name)
		return nil
	}
	deployments := map[string]doc{}
	for _, o := range objects {
		if str(o["kind"]) == "Deployment" {
			deployments[str(get(o, "metadata", "name"))] = o
		}
	}
	for _, name := range []string{"switchyard-envoy", "switchyard-controlplane", "switchyard-ratelimit", "switchyard-redis"} {
		if deployments[name] == nil {
			t.Fatalf("no Deployment %q", name)
		}
		find("Service", name)
	}
	// Every container is probed for readiness; every Deployment with more
	// than one replica has a PodDisruptionBudget selecting its pods.
	for name, d := range deployments {
		spec := get(d, "spec", "template", "spec")
		for _, list := range []string{"containers", "initContainers"} {
			for _, c := range asList(get(spec, list)) {
				if get(c, "readinessProbe") == nil {
					t.Errorf("%s: container %s has no readinessProbe", name, str(get(c, "name")))
				}
			}
		}
		if r, _ := get(d, "spec", "replicas").(int); r > 1 {
			pdb := find("PodDisruptionBudget", name)
			if !mapsEqual(get(pdb, "spec", "selector", "matchLabels"), get(d, "spec", "selector", "matchLabels")) {
				t.Errorf("PodDisruptionBudget %s does not select Deployment %s's pods", name, name)
			}
		}
	}

	// The gateway pod: Envoy with the bootstrap from the ConfigMap, extproc
	// as a sidecar on the Unix socket the bootstrap names.
	gw := get(deployments["switchyard-envoy"], "spec", "template", "spec")
	container := func(list, name string) doc {
		t.Helper()
		for _, c := range asList(get(gw, list)) {
			if str(get(c, "name")) == name {
				return c.(doc)
			}
		}
		t.Fatalf("gateway pod has no %s %q", list, name)
		return nil
	}
	volumeOf := func(c doc, containerPath string) (doc, string) {
		t.Helper()
		for _, m := range asList(c["volumeMounts"]) {
			mp := str(get(m, "mountPath"))
			if containerPath == mp || strings.HasPrefix(containerPath, mp+"/") {
				for _, v := range asList(get(gw, "volumes")) {
					if str(get(v, "name")) == str(get(m, "name")) {
						return v.(doc), strings.TrimPrefix(strings.TrimPrefix(containerPath, mp), "/")
					}
				}
			}
		}
		t.Fatalf("container %s does not mount %s", str(c["name"]), containerPath)
		return nil, ""
	}
	envoyC, extprocC := container("containers", "envoy"), container("initContainers", "extproc")
	if img := str(envoyC["image"]); !strings.HasPrefix(img, "envoyproxy/envoy:") {
		t.Errorf("envoy image %q", img)
	}
	if str(extprocC["restartPolicy"]) != "Always" {
		t.Error("extproc is not a native sidecar (restartPolicy Always)")
	}
	bootVol, bootKey := volumeOf(envoyC, flagValue(strs(envoyC["args"]), "-c"))
	bootFile := configMaps[str(get(bootVol, "configMap", "name"))][bootKey]

	cp := get(deployments["switchyard-controlplane"], "spec", "template", "spec")
	cpC := get(cp, "containers", 0).(doc)
	cpArgs := strs(cpC["args"])
	var cfgFile string
	for _, m := range asList(cpC["volumeMounts"]) {
		mp := str(get(m, "mountPath"))
		if rest, ok := strings.CutPrefix(flagValue(cpArgs, "--config"), mp+"/"); ok {
			for _, v := range asList(get(cp, "volumes")) {
				if str(get(v, "name")) == str(get(m, "name")) {
					cfgFile = configMaps[str(get(v, "configMap", "name"))][rest]
				}
			}
		}
	}
	if bootFile == "" || cfgFile == "" {
		t.Fatalf("bootstrap %q or configuration %q not found through the manifests", bootFile, cfgFile)
	}
	b, cfg := checkDeployBootstrap(t, bootFile, cfgFile, kubernetesBootstrap)

	epArgs := strs(extprocC["args"])
	if got := staticAddress(t, b, catalog.ExtProcCluster); got != flagValue(epArgs, "--listen") {
		t.Errorf("bootstrap reaches extproc at %s, the sidecar listens on %s", got, flagValue(epArgs, "--listen"))
	}
	sock := strings.TrimPrefix(flagValue(epArgs, "--listen"), "unix:")
	sv1, _ := volumeOf(envoyC, sock)
	sv2, _ := volumeOf(extprocC, sock)
	if str(sv1["name"]) != str(sv2["name"]) || get(sv1, "emptyDir") == nil {
		t.Errorf("the socket directory is not one shared emptyDir: %v / %v", sv1, sv2)
	}
	if get(gw, "securityContext", "fsGroup") == nil {
		t.Error("no fsGroup: Envoy could not connect to extproc's group-writable socket")
	}
	svcPort := func(name string) string { return str(get(find("Service", name), "spec", "ports", 0, "port")) }
	for cluster, want := range map[string]string{
		catalog.XDSCluster:            "switchyard-controlplane:" + svcPort("switchyard-controlplane"),
		controlplane.RateLimitCluster: "switchyard-ratelimit:" + svcPort("switchyard-ratelimit"),
	} {
		if got := staticAddress(t, b, cluster); got != want {
			t.Errorf("bootstrap cluster %s at %s, want %s", cluster, got, want)
		}
	}
	if got, want := flagValue(epArgs, "--xds"), staticAddress(t, b, catalog.XDSCluster); got != want {
		t.Errorf("extproc --xds %s, want %s", got, want)
	}
	if got, want := flagValue(epArgs, "--ratelimit"), staticAddress(t, b, controlplane.RateLimitCluster); got != want {
		t.Errorf("extproc --ratelimit %s, want %s", got, want)
	}
	// Envoy's readiness probe hits the bootstrap's readiness listener.
	probe := get(envoyC, "readinessProbe", "httpGet")
	var probePort string
	for _, p := range asList(envoyC["ports"]) {
		if str(get(p, "name")) == str(get(probe, "port")) {
			probePort = str(get(p, "containerPort"))
		}
	}
	if str(get(probe, "path")) != ReadyPath || probePort != port(kubernetesBootstrap.Readiness) {
		t.Errorf("envoy readiness probe %v on port %s, want %s on %s", probe, probePort, ReadyPath, port(kubernetesBootstrap.Readiness))
	}
	// Listener certificates are mounted into Envoy.
	for _, l := range cfg.Listeners {
		if l.TLS != nil {
			v, _ := volumeOf(envoyC, l.TLS.CertFile)
			if get(v, "secret") == nil {
				t.Errorf("listener %s certificate is not from a Secret", l.Name)
			}
		}
	}
	if got := path.Dir(flagValue(strs(envoyC["args"]), "-c")); got != "/etc/envoy" {
		t.Errorf("bootstrap directory %s", got)
	}
}

func mapsEqual(a, b any) bool {
	am, aok := a.(doc)
	bm, bok := b.(doc)
	if !aok || !bok || len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if str(bm[k]) != str(v) {
			return false
		}
	}
	return true
}
