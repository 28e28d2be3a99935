package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"gopkg.in/yaml.v3"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/gateway"
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

// gatewayURL parses the backends' --gateway-url: the gateway's OpenAI base
// URL, over https exactly when the listener it reaches has TLS.
func gatewayURL(t *testing.T, raw string) (host, port string, tls bool) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.Path != "/v1" {
		t.Fatalf("backends --gateway-url %q, want http(s)://HOST[:PORT]/v1", raw)
	}
	port = u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	return u.Hostname(), port, u.Scheme == "https"
}

// listenerOnPort is the configuration's listener on port.
func listenerOnPort(t *testing.T, cfg *config.Config, p string) config.Listener {
	t.Helper()
	for _, l := range cfg.Listeners {
		if port(l.Address) == p {
			return l
		}
	}
	t.Fatalf("no listener on port %s", p)
	return config.Listener{}
}

// TestComposeLayout checks each compose file of deploy/compose against its
// Envoy bootstrap and configuration.
func TestComposeLayout(t *testing.T) {
	for _, file := range []string{"docker-compose.yaml", "compose.fleet.yaml"} {
		t.Run(file, func(t *testing.T) { checkComposeLayout(t, file) })
	}
}

func checkComposeLayout(t *testing.T, file string) {
	const dir = "../deploy/compose"
	docs := readYAMLDocs(t, filepath.Join(dir, file))
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

	// The backends: the config routes to them by compose name on the port
	// they listen on, and nothing publishes that port.
	bkSvc := svc("backends")
	bkArgs := strs(bkSvc["command"])
	if len(bkArgs) == 0 || bkArgs[0] != "backends" {
		t.Fatalf("backends command: %v", bkArgs)
	}
	if str(bkSvc["image"]) != str(epSvc["image"]) || str(bkSvc["image"]) == "" {
		t.Errorf("backends image %q, want extproc's %q", bkSvc["image"], epSvc["image"])
	}
	if cfg.Backends == nil {
		t.Fatal("switchyard.yaml has no backends section: their paths would answer 404")
	}
	if got, want := cfg.Backends.Address, "backends:"+port(flagValue(bkArgs, "--listen")); got != want {
		t.Errorf("backends.address %s, want %s (the backends service's --listen)", got, want)
	}
	if bkSvc["ports"] != nil {
		t.Errorf("backends publishes %v: clients must reach them only through Envoy", bkSvc["ports"])
	}
	// One token, from the operator: extproc and the backends interpolate the
	// same variable, and compose refuses to start without it (no default).
	tok := gateway.InternalTokenEnv
	if got, want := env(bkSvc, tok), env(epSvc, tok); got != want || got == "" {
		t.Errorf("%s: backends %q, extproc %q, want the same source", tok, got, want)
	} else if !strings.HasPrefix(got, "${"+tok+":?") {
		t.Errorf("%s is %q, want ${%s:?...}: required, with no default", tok, got, tok)
	}
	// They call the gateway back at Envoy's published TLS listener and verify
	// it with the CA that gen-certs.sh makes, whose certificate names Envoy.
	gwHost, gwPort, gwTLS := gatewayURL(t, flagValue(bkArgs, "--gateway-url"))
	if gwHost != "envoy" {
		t.Errorf("backends --gateway-url host %s, want the envoy service", gwHost)
	}
	l := listenerOnPort(t, cfg, gwPort) // published: checked above
	if gwTLS != (l.TLS != nil) {
		t.Errorf("backends --gateway-url %s, but listener %s has TLS %v", flagValue(bkArgs, "--gateway-url"), l.Name, l.TLS != nil)
	}
	if gwTLS {
		ca := hostFile(bkSvc, flagValue(bkArgs, "--gateway-ca-file"))
		if filepath.Dir(ca) != filepath.Dir(hostFile(envoySvc, l.TLS.CertFile)) {
			t.Errorf("backends CA %s is not beside Envoy's certificate %s", ca, l.TLS.CertFile)
		}
		script, err := os.ReadFile(filepath.Join(dir, "gen-certs.sh"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(script), "DNS:"+gwHost) {
			t.Errorf("gen-certs.sh: the certificate does not name %s, so the backends cannot verify it", gwHost)
		}
	}
	// The backends read the control plane's configuration (the tools), and
	// keep their data on a named volume of their own.
	if got, want := hostFile(bkSvc, flagValue(bkArgs, "--config")), cfgFile; got != want {
		t.Errorf("backends --config is %s, the control plane's %s", got, want)
	}
	dataVol := mounts(bkSvc)[flagValue(bkArgs, "--data-dir")]
	if cfg.Storage.Metadata.Kind == config.MetadataPostgres {
		checkComposeFleet(t, docs[0], cfg, cfgFile, hostFile)
	} else if _, ok := get(docs[0], "volumes", dataVol).(doc); !ok || slices.Contains(strs(epSvc["volumes"]), dataVol+":"+flagValue(epArgs, "--data-dir")) {
		t.Errorf("backends --data-dir %s is on %q, want a named volume of their own", flagValue(bkArgs, "--data-dir"), dataVol)
	}
	// Every image is pinned; every named volume is declared; every
	// dependency is a service.
	for name, s := range services {
		if img := str(get(s, "image")); img == "" || strings.HasSuffix(img, ":latest") || strings.HasSuffix(img, "-latest") || (!strings.Contains(img, ":") && get(s, "build") == nil) {
			t.Errorf("service %s image %q: want a version tag", name, img)
		}
		for _, v := range strs(get(s, "volumes")) {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") && get(docs[0], "volumes", src) == nil {
				t.Errorf("service %s mounts volume %q, which is not declared", name, src)
			}
		}
		deps := strs(get(s, "depends_on"))
		for k := range asDoc(get(s, "depends_on")) {
			deps = append(deps, k)
		}
		for _, d := range deps {
			if services[d] == nil {
				t.Errorf("service %s depends on %q, which is not a service", name, d)
			}
		}
	}
	// The web_search vendor is a compose service listening on the base URL's
	// port, and the backends hold the key it checks.
	if ws := cfg.Tools.WebSearch; ws != nil {
		u, err := url.Parse(ws.BaseURL)
		if err != nil {
			t.Fatal(err)
		}
		vendor := svc(u.Hostname())
		vArgs := strs(vendor["command"])
		if got := port(flagValue(vArgs, "--listen")); got != u.Port() {
			t.Errorf("tools.web_search.base_url %s, but %s listens on port %s", ws.BaseURL, u.Hostname(), got)
		}
		if ws.APIKeyEnv != "" {
			if env(bkSvc, ws.APIKeyEnv) == "" {
				t.Errorf("tools.web_search: backends lack %s", ws.APIKeyEnv)
			}
			if k := flagValue(vArgs, "--api-key-env"); k != "" && env(vendor, k) != env(bkSvc, ws.APIKeyEnv) {
				t.Errorf("tools.web_search: %s checks %s, the backends send %s", u.Hostname(), env(vendor, k), env(bkSvc, ws.APIKeyEnv))
			}
		}
	}
}

// TestKubernetesLayout renders each overlay of deploy/kubernetes and checks
// it against its Envoy bootstrap and configuration.
func TestKubernetesLayout(t *testing.T) {
	for _, overlay := range kubernetesOverlays {
		t.Run(overlay, func(t *testing.T) { checkKubernetesLayout(t, overlay) })
	}
}

func checkKubernetesLayout(t *testing.T, overlay string) {
	objects := renderOverlay(t, overlay).docs
	// The rendered ConfigMaps: name -> key -> the source file under
	// deploy/kubernetes holding exactly that data.
	configMaps := map[string]map[string]string{}
	for _, o := range objects {
		if str(o["kind"]) != "ConfigMap" {
			continue
		}
		files := map[string]string{}
		for key, v := range asDoc(o["data"]) {
			files[key] = sourceFile(t, str(v))
		}
		configMaps[str(get(o, "metadata", "name"))] = files
	}
	ops := operatorObjects(t, overlay)
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
	for _, name := range []string{"switchyard-envoy", "switchyard-controlplane", "switchyard-ratelimit", "switchyard-redis", "switchyard-backends"} {
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
	// volumeIn is the volume of pod that container c mounts containerPath
	// from, and the path inside it.
	volumeIn := func(pod any, c doc, containerPath string) (doc, string) {
		t.Helper()
		for _, m := range asList(c["volumeMounts"]) {
			mp := str(get(m, "mountPath"))
			if containerPath == mp || strings.HasPrefix(containerPath, mp+"/") {
				for _, v := range asList(get(pod, "volumes")) {
					if str(get(v, "name")) == str(get(m, "name")) {
						return v.(doc), strings.TrimPrefix(strings.TrimPrefix(containerPath, mp), "/")
					}
				}
			}
		}
		t.Fatalf("container %s does not mount %s", str(c["name"]), containerPath)
		return nil, ""
	}
	volumeOf := func(c doc, containerPath string) (doc, string) {
		t.Helper()
		return volumeIn(gw, c, containerPath)
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
	opts := kubernetesBootstrap
	if overlay == "fleet-asia" {
		opts.Region = "asia"
	}
	b, cfg := checkDeployBootstrap(t, bootFile, cfgFile, opts)

	epArgs := strs(extprocC["args"])
	// extproc announces the home region of the Envoy beside it: the control
	// plane gives both that region's routes.
	epRegion := flagValue(epArgs, "--region")
	if epRegion == "" {
		epRegion = cfg.Region
	}
	if want := b.GetNode().GetLocality().GetRegion(); epRegion != want {
		t.Errorf("extproc's home region is %s, Envoy's bootstrap says %s", epRegion, want)
	}
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
	// The rate limit service reaches Redis, with the password Redis requires.
	rlC := get(deployments["switchyard-ratelimit"], "spec", "template", "spec", "containers", 0).(doc)
	rdC := get(deployments["switchyard-redis"], "spec", "template", "spec", "containers", 0).(doc)
	envRef := func(c doc, name string) (value string, ref any) {
		for _, e := range asList(c["env"]) {
			if str(get(e, "name")) == name {
				if r := get(e, "valueFrom", "configMapKeyRef"); r != nil {
					for _, o := range objects {
						if str(o["kind"]) == "ConfigMap" && str(get(o, "metadata", "name")) == str(get(r, "name")) {
							return str(get(o, "data", str(get(r, "key")))), r
						}
					}
				}
				return str(get(e, "value")), get(e, "valueFrom", "secretKeyRef")
			}
		}
		return "", nil
	}
	if got, _ := envRef(rlC, "REDIS_URL"); got != "switchyard-redis:"+svcPort("switchyard-redis") {
		t.Errorf("ratelimit REDIS_URL %q, want the switchyard-redis Service", got)
	}
	_, rlAuth := envRef(rlC, "REDIS_AUTH")
	_, rdPass := envRef(rdC, "REDIS_PASSWORD")
	if rlAuth == nil || !mapsEqual(rlAuth, rdPass) || !slices.Contains(strs(rdC["args"]), "$(REDIS_PASSWORD)") || flagValue(strs(rdC["args"]), "--requirepass") != "$(REDIS_PASSWORD)" {
		t.Errorf("Redis auth: ratelimit REDIS_AUTH from %v, redis REDIS_PASSWORD from %v with args %v: want --requirepass $(REDIS_PASSWORD), both from one Secret key", rlAuth, rdPass, rdC["args"])
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

	// The backends: the config routes to their Service, which forwards to the
	// port they listen on and is not reachable from outside the cluster.
	bkD := deployments["switchyard-backends"]
	bk := get(bkD, "spec", "template", "spec")
	bkC := get(bk, "containers", 0).(doc)
	bkArgs := strs(bkC["args"])
	if len(bkArgs) == 0 || bkArgs[0] != "backends" || str(bkC["image"]) != str(extprocC["image"]) {
		t.Fatalf("backends container: image %v args %v, want extproc's image running backends", bkC["image"], bkArgs)
	}
	containerPort := func(c doc, nameOrNumber string) string {
		for _, p := range asList(c["ports"]) {
			if str(get(p, "name")) == nameOrNumber || str(get(p, "containerPort")) == nameOrNumber {
				return str(get(p, "containerPort"))
			}
		}
		return ""
	}
	bkSvc := find("Service", "switchyard-backends")
	if cfg.Backends == nil {
		t.Fatal("switchyard.yaml has no backends section: their paths would answer 404")
	}
	if got, want := cfg.Backends.Address, "switchyard-backends:"+svcPort("switchyard-backends"); got != want {
		t.Errorf("backends.address %s, want %s (the Service)", got, want)
	}
	if got, want := containerPort(bkC, str(get(bkSvc, "spec", "ports", 0, "targetPort"))), port(flagValue(bkArgs, "--listen")); got != want {
		t.Errorf("the backends Service forwards to port %s, the backends listen on %s", got, want)
	}
	if !mapsEqual(get(bkSvc, "spec", "selector"), get(bkD, "spec", "template", "metadata", "labels")) {
		t.Error("the backends Service does not select the backends pods")
	}
	if typ := str(get(bkSvc, "spec", "type")); (typ != "" && typ != "ClusterIP") || get(bkSvc, "spec", "externalIPs") != nil {
		t.Errorf("the backends Service is %s (externalIPs %v): it must stay inside the cluster", typ, get(bkSvc, "spec", "externalIPs"))
	}
	// Their data: with SQLite, a volume claim which one pod at a time opens;
	// with PostgreSQL and S3, nothing but scratch, and the secrets the
	// storage: section names.
	dataVol, _ := volumeIn(bk, bkC, flagValue(bkArgs, "--data-dir"))
	fleet := cfg.Storage.Metadata.Kind == config.MetadataPostgres
	if fleet != strings.HasPrefix(overlay, "fleet") {
		t.Errorf("overlay %s: storage.metadata.kind %q", overlay, cfg.Storage.Metadata.Kind)
	}
	if fleet {
		if cfg.Storage.Blobs.Kind != config.BlobsS3 {
			t.Errorf("metadata on PostgreSQL with blobs %q: the files' content would stay on one pod", cfg.Storage.Blobs.Kind)
		}
		if get(dataVol, "emptyDir") == nil {
			t.Errorf("backends --data-dir is on %v, want scratch (emptyDir): state is in PostgreSQL and S3", dataVol)
		}
		for _, v := range []string{cfg.Storage.Metadata.DSNEnv, cfg.Storage.Blobs.AccessKeyEnv, cfg.Storage.Blobs.SecretKeyEnv, envelope.EnvKey} {
			if v != "" && !secretEnv(bkC, ops, v) {
				t.Errorf("backends: %s is not set from a Secret the operator creates", v)
			}
		}
		if r, _ := get(bkD, "spec", "replicas").(int); r < 3 {
			t.Errorf("backends: %d replicas, want 3 or more on shared storage", r)
		}
	} else {
		claim := str(get(dataVol, "persistentVolumeClaim", "claimName"))
		if claim == "" {
			t.Fatalf("backends --data-dir is not on a PersistentVolumeClaim: %v", dataVol)
		}
		find("PersistentVolumeClaim", claim)
		if r, ok := get(bkD, "spec", "replicas").(int); !ok || r != 1 || str(get(bkD, "spec", "strategy", "type")) != "Recreate" {
			t.Errorf("backends: replicas %v, strategy %v; the SQLite stores want exactly one pod, recreated", get(bkD, "spec", "replicas"), get(bkD, "spec", "strategy", "type"))
		}
	}
	// The keys: extproc reads them from its --data-dir (SQLite, on a claim
	// with one gateway pod) or, given the configuration, from PostgreSQL.
	keysVol, _ := volumeOf(extprocC, flagValue(epArgs, "--data-dir"))
	if fleet {
		if f := flagValue(epArgs, "--config"); f == "" {
			t.Error("extproc has no --config: it would keep keys in its scratch --data-dir, one set per pod")
		} else if v, key := volumeOf(extprocC, f); configMaps[str(get(v, "configMap", "name"))][key] != cfgFile {
			t.Errorf("extproc --config %s is not the control plane's %s", f, cfgFile)
		}
		if !secretEnv(extprocC, ops, cfg.Storage.Metadata.DSNEnv) {
			t.Errorf("extproc: %s is not set from a Secret the operator creates", cfg.Storage.Metadata.DSNEnv)
		}
		if get(keysVol, "emptyDir") == nil {
			t.Errorf("extproc --data-dir is on %v, want scratch", keysVol)
		}
	} else {
		claim := str(get(keysVol, "persistentVolumeClaim", "claimName"))
		if claim == "" {
			t.Fatalf("extproc --data-dir (the key database) is not on a PersistentVolumeClaim: %v", keysVol)
		}
		find("PersistentVolumeClaim", claim)
		if r, _ := get(deployments["switchyard-envoy"], "spec", "replicas").(int); r != 1 {
			t.Errorf("gateway: %d replicas on one SQLite key database", r)
		}
	}
	// Every Secret and ConfigMap a pod refers to is rendered or created by
	// the commands in the overlay's header.
	for name, d := range deployments {
		checkReferences(t, name, get(d, "spec", "template", "spec"), objects, ops)
	}
	probe = get(bkC, "readinessProbe", "httpGet")
	if str(get(probe, "path")) != "/healthz" || containerPort(bkC, str(get(probe, "port"))) != port(flagValue(bkArgs, "--health")) {
		t.Errorf("backends readiness probe %v, want /healthz on --health %s", probe, flagValue(bkArgs, "--health"))
	}
	// The backends read the control plane's configuration (the tools).
	cv, key := volumeIn(bk, bkC, flagValue(bkArgs, "--config"))
	if got := configMaps[str(get(cv, "configMap", "name"))][key]; got != cfgFile {
		t.Errorf("backends --config is %q, the control plane's %q", got, cfgFile)
	}
	// One token, from one Secret, in extproc and the backends.
	tokenRef := func(c doc) any {
		for _, e := range asList(c["env"]) {
			if str(get(e, "name")) == gateway.InternalTokenEnv {
				return get(e, "valueFrom", "secretKeyRef")
			}
		}
		return nil
	}
	if a, b := tokenRef(extprocC), tokenRef(bkC); a == nil || !mapsEqual(a, b) {
		t.Errorf("%s: extproc %v, backends %v, want the same Secret key", gateway.InternalTokenEnv, a, b)
	}
	// They call the gateway back through the Envoy Service, on a port that
	// reaches a listener, and verify its certificate with a mounted CA.
	gwHost, gwPort, gwTLS := gatewayURL(t, flagValue(bkArgs, "--gateway-url"))
	envoySvc := find("Service", gwHost)
	if !mapsEqual(get(envoySvc, "spec", "selector"), get(deployments["switchyard-envoy"], "spec", "template", "metadata", "labels")) {
		t.Errorf("backends --gateway-url host %s is not the Envoy Service", gwHost)
	}
	var target string
	for _, p := range asList(get(envoySvc, "spec", "ports")) {
		if str(get(p, "port")) == gwPort {
			target = containerPort(envoyC, str(get(p, "targetPort")))
		}
	}
	if target == "" {
		t.Fatalf("backends --gateway-url port %s is not a port of Service %s", gwPort, gwHost)
	}
	l := listenerOnPort(t, cfg, target)
	if gwTLS != (l.TLS != nil) {
		t.Errorf("backends --gateway-url %s, but listener %s has TLS %v", flagValue(bkArgs, "--gateway-url"), l.Name, l.TLS != nil)
	}
	if gwTLS {
		if ca := flagValue(bkArgs, "--gateway-ca-file"); ca == "" {
			t.Error("backends have no --gateway-ca-file: the system roots rarely vouch for an in-cluster name")
		} else if v, _ := volumeIn(bk, bkC, ca); get(v, "configMap") == nil && get(v, "secret") == nil {
			t.Errorf("backends CA %s is not from a ConfigMap or Secret: %v", ca, v)
		}
	}
	// Ingress to the backends' port only from the gateway pods.
	for _, o := range objects {
		if str(o["kind"]) != "NetworkPolicy" || !mapsEqual(get(o, "spec", "podSelector", "matchLabels"), get(bkD, "spec", "template", "metadata", "labels")) {
			continue
		}
		for _, rule := range asList(get(o, "spec", "ingress")) {
			ports := asList(get(rule, "ports"))
			apiPort := len(ports) == 0
			for _, p := range ports {
				apiPort = apiPort || containerPort(bkC, str(get(p, "port"))) == port(flagValue(bkArgs, "--listen"))
			}
			from := asList(get(rule, "from"))
			if apiPort && len(from) == 0 {
				t.Errorf("NetworkPolicy %s admits anyone to the backends' port", str(get(o, "metadata", "name")))
			}
			for _, f := range from {
				if apiPort && (len(f.(doc)) != 1 || !mapsEqual(get(f, "podSelector", "matchLabels"), get(deployments["switchyard-envoy"], "spec", "template", "metadata", "labels"))) {
					t.Errorf("NetworkPolicy %s admits %v to the backends' port, want only the gateway pods", str(get(o, "metadata", "name")), f)
				}
			}
		}
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

func asDoc(v any) doc {
	d, _ := v.(doc)
	return d
}

// sourceFile is the file under deploy/kubernetes whose content is data (a
// ConfigMap generated from a file of the layout holds it verbatim), or ""
// for a literal.
func sourceFile(t *testing.T, data string) string {
	t.Helper()
	var found string
	err := filepath.WalkDir(kubernetesDir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || found != "" {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && string(b) == data {
			found = p
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// operatorObjects reads the commands in an overlay's kustomization header
// that create the Secrets and ConfigMaps it does not render: "Kind/name"
// -> the keys created.
func operatorObjects(t *testing.T, overlay string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(kubernetesDir, "overlays", overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text, cont := strings.CutSuffix(strings.TrimSpace(text), "\\")
		cur.WriteString(text + " ")
		if !cont {
			cmds = append(cmds, cur.String())
			cur.Reset()
		}
	}
	out := map[string][]string{}
	for _, c := range cmds {
		f := strings.Fields(c)
		i := slices.Index(f, "create")
		if len(f) == 0 || f[0] != "kubectl" || i < 0 || i+2 >= len(f) {
			continue
		}
		var kind, name string
		var keys []string
		switch {
		case f[i+1] == "secret" && f[i+2] == "tls" && i+3 < len(f):
			kind, name, keys = "Secret", f[i+3], []string{"tls.crt", "tls.key"}
		case f[i+1] == "secret" && f[i+2] == "generic" && i+3 < len(f):
			kind, name = "Secret", f[i+3]
		case f[i+1] == "configmap":
			kind, name = "ConfigMap", f[i+2]
		default:
			continue
		}
		for _, a := range f {
			for _, p := range []string{"--from-literal=", "--from-file="} {
				if rest, ok := strings.CutPrefix(a, p); ok {
					k, _, _ := strings.Cut(rest, "=")
					keys = append(keys, k)
				}
			}
		}
		out[kind+"/"+name] = keys
	}
	if len(out) == 0 {
		t.Fatalf("overlays/%s/kustomization.yaml: no kubectl create commands in its header", overlay)
	}
	return out
}

// secretEnv reports whether container c gets variable v from a Secret the
// operator creates with that key.
func secretEnv(c doc, ops map[string][]string, v string) bool {
	for _, e := range asList(c["env"]) {
		if str(get(e, "name")) != v {
			continue
		}
		ref := get(e, "valueFrom", "secretKeyRef")
		return ref != nil && slices.Contains(ops["Secret/"+str(get(ref, "name"))], str(get(ref, "key")))
	}
	for _, e := range asList(c["envFrom"]) {
		if ref := get(e, "secretRef"); ref != nil && str(get(e, "prefix")) == "" && slices.Contains(ops["Secret/"+str(get(ref, "name"))], v) {
			return true
		}
	}
	return false
}

// checkReferences: every Secret and ConfigMap (and key) pod refers to is
// rendered or created by the operator's commands.
func checkReferences(t *testing.T, owner string, pod any, objects []doc, ops map[string][]string) {
	t.Helper()
	exists := func(kind, name, key string) bool {
		if keys, ok := ops[kind+"/"+name]; ok {
			return key == "" || slices.Contains(keys, key)
		}
		for _, o := range objects {
			if str(o["kind"]) == kind && str(get(o, "metadata", "name")) == name {
				return key == "" || get(o, "data", key) != nil || get(o, "stringData", key) != nil
			}
		}
		return false
	}
	check := func(kind, name, key string) {
		if !exists(kind, name, key) {
			t.Errorf("%s refers to %s %s (key %q), which is neither rendered nor created by the header's commands", owner, kind, name, key)
		}
	}
	for _, list := range []string{"containers", "initContainers"} {
		for _, c := range asList(get(pod, list)) {
			for _, e := range asList(get(c, "env")) {
				if r := get(e, "valueFrom", "secretKeyRef"); r != nil {
					check("Secret", str(get(r, "name")), str(get(r, "key")))
				}
				if r := get(e, "valueFrom", "configMapKeyRef"); r != nil {
					check("ConfigMap", str(get(r, "name")), str(get(r, "key")))
				}
			}
			for _, e := range asList(get(c, "envFrom")) {
				if r := get(e, "secretRef"); r != nil {
					check("Secret", str(get(r, "name")), "")
				}
				if r := get(e, "configMapRef"); r != nil {
					check("ConfigMap", str(get(r, "name")), "")
				}
			}
		}
	}
	for _, v := range asList(get(pod, "volumes")) {
		if n := get(v, "secret", "secretName"); n != nil {
			check("Secret", str(n), "")
		}
		if n := get(v, "configMap", "name"); n != nil {
			check("ConfigMap", str(n), "")
		}
	}
}

// checkComposeFleet checks a compose file whose configuration keeps state
// in PostgreSQL and S3: the services it names exist and agree with it, the
// secrets are interpolated from the same variables on both sides, and the
// stateless services run several replicas without volumes for state.
func checkComposeFleet(t *testing.T, top doc, cfg *config.Config, cfgFile string, hostFile func(doc, string) string) {
	services := asDoc(top["services"])
	svc := func(name string) doc {
		t.Helper()
		s := asDoc(services[name])
		if s == nil {
			t.Fatalf("no service %q", name)
		}
		return s
	}
	env := func(s doc, k string) string { return str(get(s, "environment", k)) }
	m, b := cfg.Storage.Metadata, cfg.Storage.Blobs
	if b.Kind != config.BlobsS3 {
		t.Fatalf("metadata on PostgreSQL with blobs %q: the files' content would stay in one replica", b.Kind)
	}
	for _, name := range []string{"extproc", "backends"} {
		s := svc(name)
		args := strs(s["command"])
		if r, _ := get(s, "deploy", "replicas").(int); r < 3 {
			t.Errorf("%s: %v replicas, want 3 or more on shared storage", name, get(s, "deploy", "replicas"))
		}
		if got := hostFile(s, flagValue(args, "--config")); got != cfgFile {
			t.Errorf("%s --config is %s, the control plane's %s", name, got, cfgFile)
		}
		if env(s, m.DSNEnv) == "" {
			t.Errorf("%s lacks %s", name, m.DSNEnv)
		}
		for _, v := range strs(s["volumes"]) {
			if src, _, _ := strings.Cut(v, ":"); get(top, "volumes", src) != nil {
				t.Errorf("%s mounts named volume %s: state belongs in PostgreSQL and S3", name, src)
			}
		}
	}
	bk := svc("backends")
	for _, v := range []string{b.AccessKeyEnv, b.SecretKeyEnv, envelope.EnvKey} {
		if got := env(bk, v); !strings.HasPrefix(got, "${") || !strings.Contains(got, ":?") {
			t.Errorf("backends %s is %q, want a required variable (${VAR:?...})", v, got)
		}
	}
	// The DSN names the postgres service, its user, database and password.
	dsn := env(bk, m.DSNEnv)
	if env(svc("extproc"), m.DSNEnv) != dsn {
		t.Errorf("extproc and backends have different %s", m.DSNEnv)
	}
	pg := svc("postgres")
	if img := str(pg["image"]); !strings.HasPrefix(img, "postgres:15") {
		t.Errorf("postgres image %q, want PostgreSQL 15 (what the tests run against)", img)
	}
	pass := env(pg, "POSTGRES_PASSWORD")
	varName := func(v string) string {
		v = strings.TrimPrefix(v, "${")
		name, _, _ := strings.Cut(v, ":")
		return strings.TrimSuffix(name, "}")
	}
	want := fmt.Sprintf("postgres://%s:${%s", env(pg, "POSTGRES_USER"), varName(pass))
	if !strings.HasPrefix(dsn, want) || !strings.Contains(dsn, "}@postgres:5432/"+env(pg, "POSTGRES_DB")+"?") {
		t.Errorf("%s %q does not name the postgres service's user %s, password ${%s} and database %s", m.DSNEnv, dsn, env(pg, "POSTGRES_USER"), varName(pass), env(pg, "POSTGRES_DB"))
	}
	// The bucket endpoint is the S3 service, with the keys it is started
	// with, and the bucket is made before it serves.
	u, err := url.Parse(b.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s3 := svc(u.Hostname())
	s3Args := strs(s3["command"])
	if got := port(flagValue(s3Args, "--port")); got != u.Port() {
		t.Errorf("storage.blobs.endpoint %s, but %s listens on port %s", b.Endpoint, u.Hostname(), got)
	}
	if varName(flagValue(s3Args, "--access")) != varName(env(bk, b.AccessKeyEnv)) || varName(flagValue(s3Args, "--secret")) != varName(env(bk, b.SecretKeyEnv)) {
		t.Errorf("the S3 service's keys %s/%s are not the backends' %s/%s", flagValue(s3Args, "--access"), flagValue(s3Args, "--secret"), env(bk, b.AccessKeyEnv), env(bk, b.SecretKeyEnv))
	}
	root := s3Args[len(s3Args)-1]
	var made bool
	for name := range asDoc(get(s3, "depends_on")) {
		init := svc(name)
		made = made || (slices.Contains(strs(init["command"]), path.Join(root, b.Bucket)) && str(get(s3, "depends_on", name, "condition")) == "service_completed_successfully")
	}
	if !made {
		t.Errorf("nothing creates the bucket %s (%s/%s) before %s starts", b.Bucket, root, b.Bucket, u.Hostname())
	}
	// Redis requires the password the rate limit service sends.
	rd, rl := strs(svc("redis")["command"]), svc("ratelimit")
	if p := flagValue(rd, "--requirepass"); p == "" || varName(p) != varName(env(rl, "REDIS_AUTH")) {
		t.Errorf("redis --requirepass %q, ratelimit REDIS_AUTH %q: want the same variable", p, env(rl, "REDIS_AUTH"))
	}
	// gen-certs.sh writes every variable the fleet requires.
	script, err := os.ReadFile("../deploy/compose/gen-certs.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{varName(pass), varName(env(bk, b.AccessKeyEnv)), varName(env(bk, b.SecretKeyEnv)), varName(env(rl, "REDIS_AUTH")), varName(env(bk, envelope.EnvKey))} {
		if !strings.Contains(string(script), "secret "+v+" ") {
			t.Errorf("gen-certs.sh does not write %s to .env", v)
		}
	}
}
