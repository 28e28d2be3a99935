package dataplane

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// The data plane must accept and interpret every resource the control plane
// generates: these tests feed it the snapshots of the repository's example
// configurations.

// exampleConfigs loads the embedded default, examples/ and the deploy
// configurations, with every file they name (listener certificates, CA
// bundles) pointed at test files, so they can be applied here.
func exampleConfigs(t *testing.T) map[string]*config.Config {
	t.Helper()
	cert := newTestCert(t, "localhost")
	certFile, keyFile := cert.files(t)
	out := map[string]*config.Config{}
	def, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	out["default"] = def
	files, _ := filepath.Glob("../../examples/*.yaml")
	files = append(files, "../../deploy/compose/switchyard.yaml", "../../deploy/compose/switchyard.fleet.yaml",
		"../../deploy/kubernetes/overlays/single-node/switchyard.yaml", "../../deploy/kubernetes/overlays/fleet/switchyard.yaml")
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cfg, err := config.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = cfg
	}
	for _, cfg := range out {
		for i := range cfg.Listeners {
			if cfg.Listeners[i].TLS != nil {
				cfg.Listeners[i].TLS = &config.TLS{CertFile: certFile, KeyFile: keyFile}
			}
		}
		cfg.UpstreamCAFile = certFile
		for i := range cfg.Providers {
			if p := &cfg.Providers[i]; p.TLS != nil && p.TLS.CAFile != "" {
				p.TLS = &config.ProviderTLS{CAFile: certFile, SNI: p.TLS.SNI}
			}
		}
	}
	return out
}

func resourcesOf(snap *cachev3.Snapshot) Resources {
	var res Resources
	for _, r := range snap.GetResources(resourcev3.ListenerType) {
		res.Listeners = append(res.Listeners, r.(*listenerv3.Listener))
	}
	for _, r := range snap.GetResources(resourcev3.RouteType) {
		res.Routes = append(res.Routes, r.(*routev3.RouteConfiguration))
	}
	for _, r := range snap.GetResources(resourcev3.ClusterType) {
		res.Clusters = append(res.Clusters, r.(*clusterv3.Cluster))
	}
	for _, r := range snap.GetResources(resourcev3.EndpointType) {
		res.Endpoints = append(res.Endpoints, r.(*endpointv3.ClusterLoadAssignment))
	}
	for _, r := range snap.GetResources(resourcev3.SecretType) {
		res.Secrets = append(res.Secrets, r.(*tlsv3.Secret))
	}
	return res
}

// TestAppliesEveryExampleSnapshot: the data plane applies the snapshot of
// every configuration in the repository and understands the production
// settings in it.
func TestAppliesEveryExampleSnapshot(t *testing.T) {
	_, procAddr := startProc(t)
	names := func(m map[string]*config.Config) []string {
		var out []string
		for k := range m {
			out = append(out, k)
		}
		sort.Strings(out)
		return out
	}
	cfgs := exampleConfigs(t)
	for _, name := range names(cfgs) {
		t.Run(strings.TrimPrefix(name, "../../"), func(t *testing.T) {
			cfg := cfgs[name]
			snap, err := controlplane.Build(cfg, "1")
			if err != nil {
				t.Fatal(err)
			}
			override := map[string]string{}
			for _, l := range cfg.Listeners {
				override[l.Name] = "127.0.0.1:0"
			}
			dp := New(Options{
				Logger:         discardLogger(),
				StaticClusters: map[string]string{catalog.ExtProcCluster: procAddr},
				ListenOverride: override,
			})
			defer dp.Close()
			if err := dp.Apply(context.Background(), resourcesOf(snap)); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			s := dp.cfg.Load()
			for _, l := range cfg.Listeners {
				hc := s.listeners[l.Name].hcm
				if hc.extProc == nil || hc.rateLimit == nil || hc.localReply == nil {
					t.Fatalf("listener %q: ext_proc %v ratelimit %v local reply %v", l.Name, hc.extProc, hc.rateLimit, hc.localReply)
				}
				if hc.rateLimit.cluster != controlplane.RateLimitCluster || hc.rateLimit.domain != ratelimit.Domain {
					t.Errorf("ratelimit filter = %+v", hc.rateLimit)
				}
				if hc.extProc.routeCache != extprocfilterv3.ExternalProcessor_CLEAR {
					t.Errorf("route cache action = %v", hc.extProc.routeCache)
				}
				if !hc.useRemoteAddress {
					t.Error("use_remote_address not applied")
				}
				for _, r := range hc.routes.any.routes {
					pf := r.perFilter[controlplane.FilterRateLimit]
					if strings.HasPrefix(r.name, "model:") && (pf == nil || pf.rateLimit == nil || !pf.rateLimit.GetRateLimits()[0].GetApplyOnStreamDone()) {
						t.Errorf("route %q: ratelimit per-route config not parsed: %+v", r.name, pf)
					}
					if strings.HasPrefix(r.name, "backend:") && r.perFilter[controlplane.FilterExtProc].extProc == nil {
						t.Errorf("route %q: ext_proc override not parsed", r.name)
					}
				}
			}
			for _, p := range cfg.Providers {
				c := s.clusters[catalog.ClusterName(p.Name)]
				if c == nil {
					t.Fatalf("cluster of %q missing", p.Name)
				}
				if strings.HasPrefix(p.BaseURL, "https") != (c.tls != nil) {
					t.Errorf("provider %q: tls %v", p.Name, c.tls != nil)
				}
				if wantH2 := p.HTTP2; (c.proto == protoHTTP2) != wantH2 {
					t.Errorf("provider %q: proto %v, http2 %v", p.Name, c.proto, wantH2)
				}
			}
		})
	}
}

// ---- replay: the route matcher against Envoy's first-match rules ----

// envoyFirstMatch is a reference implementation of Envoy's route selection
// for the match criteria the control plane uses, written from Envoy's
// documentation independently of the data plane's matcher: the virtual host
// "*", then the first route whose path specifier (prefix, path,
// path_separated_prefix, case-sensitive) and header matchers (exact string,
// present) all match.
func envoyFirstMatch(t *testing.T, rc *routev3.RouteConfiguration, path string, headers map[string]string) *routev3.Route {
	t.Helper()
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	vh := rc.GetVirtualHosts()[0]
	if len(rc.GetVirtualHosts()) != 1 || vh.GetDomains()[0] != "*" {
		t.Fatal("reference matcher handles one virtual host \"*\" only")
	}
	for _, r := range vh.GetRoutes() {
		m := r.GetMatch()
		ok := false
		switch p := m.GetPathSpecifier().(type) {
		case *routev3.RouteMatch_Prefix:
			ok = strings.HasPrefix(path, p.Prefix)
		case *routev3.RouteMatch_Path:
			ok = path == p.Path
		case *routev3.RouteMatch_PathSeparatedPrefix:
			ok = path == p.PathSeparatedPrefix || strings.HasPrefix(path, p.PathSeparatedPrefix+"/")
		default:
			t.Fatalf("reference matcher: unsupported path specifier %T", p)
		}
		for _, hm := range m.GetHeaders() {
			v, present := headers[strings.ToLower(hm.GetName())]
			switch s := hm.GetHeaderMatchSpecifier().(type) {
			case *routev3.HeaderMatcher_StringMatch:
				ok = ok && present && v == s.StringMatch.GetExact()
			case *routev3.HeaderMatcher_PresentMatch:
				ok = ok && present == s.PresentMatch
			default:
				t.Fatalf("reference matcher: unsupported header matcher %T", s)
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

func routeTarget(r *routev3.Route) string {
	switch {
	case r == nil:
		return "<no route>"
	case r.GetDirectResponse() != nil:
		return "direct:" + r.GetName()
	}
	return r.GetRoute().GetCluster()
}

func (r *route) target() string {
	switch {
	case r == nil:
		return "<no route>"
	case r.direct:
		return "direct:" + r.name
	}
	return r.cluster
}

// TestReplayRoutesLikeEnvoy replays requests through the production
// snapshot's listener and routes the way Envoy processes them: the route is
// matched on the client's headers (which decides the per-route ext_proc
// mode), extproc's request-headers reply strips x-switchyard-* headers (a
// header mutation, so route_cache_action CLEAR re-matches), and for chat
// completions its body reply sets the routing header with clear_route_cache.
// At every step the data plane's matcher must pick what Envoy's first-match
// rules pick, and the final cluster must be the expected one.
func TestReplayRoutesLikeEnvoy(t *testing.T) {
	cfg, err := config.Load("../../examples/production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := controlplane.Build(cfg, "1")
	if err != nil {
		t.Fatal(err)
	}
	rc := snap.GetResources(resourcev3.RouteType)[catalog.ListenerRouteConfig].(*routev3.RouteConfiguration)
	table, err := compileRouteTable(rc)
	if err != nil {
		t.Fatal(err)
	}
	l := snap.GetResources(resourcev3.ListenerType)["public"].(*listenerv3.Listener)
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	ep := &extprocfilterv3.ExternalProcessor{}
	if err := hcm.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(ep); err != nil {
		t.Fatal(err)
	}
	clearOnMutation := ep.GetRouteCacheAction() == extprocfilterv3.ExternalProcessor_CLEAR
	// The aggregate clusters of the model routes: route_<m> is a model's
	// failover order, route_<m>_<p> the same with extproc's first choice p
	// first.
	rcn := controlplane.RouteClusterNames(cfg)
	openai, groq := rcn.First["openai/gpt-4o-mini"]["openai"], rcn.First["meta/llama-3.3-70b"]["groq"]

	tests := []struct {
		name, method, path string
		headers            map[string]string // as the client sent them
		model              string            // the body's model, routed by extproc on /v1/chat/completions
		want               string            // the final target
		bodyToExtProc      bool              // whether extproc sees the request body
	}{
		{"chat to openai", "POST", "/v1/chat/completions", nil, "openai/gpt-4o-mini", openai, true},
		{"chat to groq", "POST", "/v1/chat/completions", nil, "meta/llama-3.3-70b", groq, true},
		{"chat to deepseek (asia)", "POST", "/v1/chat/completions", nil, "deepseek/deepseek-chat", rcn.First["deepseek/deepseek-chat"]["deepseek"], true},
		{"chat to vllm by IP", "POST", "/v1/chat/completions", nil, "qwen/qwen2.5-72b", rcn.First["qwen/qwen2.5-72b"]["vllm-asia"], true},
		{"chat, a first choice this route table does not know yet", "POST", "/v1/chat/completions", nil, "openai/gpt-4o-mini",
			rcn.Model["openai/gpt-4o-mini"], true},
		{"chat, unknown model: extproc answers, catch-all stays", "POST", "/v1/chat/completions", nil, "", "direct:not_found", true},
		{"file upload", "POST", "/v1/files", nil, "", controlplane.BackendsCluster, false},
		{"file content", "GET", "/v1/files/file-abc/content", nil, "", controlplane.BackendsCluster, false},
		{"files with a query", "GET", "/v1/files?purpose=batch&limit=2", nil, "", controlplane.BackendsCluster, false},
		{"not a separated prefix", "GET", "/v1/filesystem", nil, "", "direct:not_found", true},
		{"batches", "POST", "/v1/batches", nil, "", controlplane.BackendsCluster, false},
		{"batch by id", "GET", "/v1/batches/batch_1", nil, "", controlplane.BackendsCluster, false},
		{"responses", "POST", "/v1/responses", nil, "", controlplane.BackendsCluster, false},
		{"models", "GET", "/v1/models", nil, "", controlplane.BackendsCluster, false},
		{"model by id", "GET", "/v1/models/openai/gpt-4o-mini", nil, "", controlplane.BackendsCluster, false},
		{"paths are case-sensitive", "GET", "/V1/files", nil, "", "direct:not_found", true},
		{"embeddings: not routed", "POST", "/v1/embeddings", nil, "", "direct:not_found", true},
		{"root", "GET", "/", nil, "", "direct:not_found", true},
		{"forged routing header on embeddings", "POST", "/v1/embeddings",
			map[string]string{catalog.RouteHeader: "openai/gpt-4o-mini"}, "", "direct:not_found", true},
		{"forged routing header, upper case", "POST", "/v1/embeddings",
			map[string]string{"X-Switchyard-Model": "qwen/qwen2.5-72b"}, "", "direct:not_found", true},
		{"forged routing header on chat: the body decides", "POST", "/v1/chat/completions",
			map[string]string{catalog.RouteHeader: "qwen/qwen2.5-72b"}, "openai/gpt-4o-mini", openai, true},
		{"forged routing header on files: backends first", "POST", "/v1/files",
			map[string]string{catalog.RouteHeader: "openai/gpt-4o-mini"}, "", controlplane.BackendsCluster, false},
		{"forged first choice", "POST", "/v1/chat/completions",
			map[string]string{catalog.FirstHeader: "deepseek"}, "meta/llama-3.3-70b", groq, true},
		{"forged first choice with a forged model", "POST", "/v1/embeddings",
			map[string]string{catalog.FirstHeader: "openai", catalog.RouteHeader: "openai/gpt-4o-mini"}, "", "direct:not_found", true},
	}
	// extproc's first choice, set with the routing header in the body reply
	// (none: the model's default route).
	firstChoice := map[string]string{
		"chat to openai":          "openai",
		"chat to groq":            "groq",
		"chat to deepseek (asia)": "deepseek",
		"chat to vllm by IP":      "vllm-asia",
		"chat, a first choice this route table does not know yet": "provider-added-later",
		"forged routing header on chat: the body decides":         "openai",
		"forged first choice": "groq",
	}
	// Before extproc runs, a forged routing header does select a model route;
	// only the re-match after extproc strips it keeps the request away.
	forgedInitial := map[string]string{
		"forged routing header on embeddings":             rcn.Model["openai/gpt-4o-mini"],
		"forged routing header, upper case":               rcn.Model["qwen/qwen2.5-72b"],
		"forged routing header on chat: the body decides": rcn.Model["qwen/qwen2.5-72b"],
		"forged first choice with a forged model":         openai,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := headerMap{{hdrAuthority, "api.example.com"}, {hdrPath, tt.path}, {hdrMethod, tt.method}, {hdrScheme, "https"}}
			ref := map[string]string{}
			for k, v := range tt.headers {
				h.add(strings.ToLower(k), v)
				ref[strings.ToLower(k)] = v
			}
			step := func(when string) *route {
				t.Helper()
				got, want := table.match(h), envoyFirstMatch(t, rc, tt.path, ref)
				if got.target() != routeTarget(want) || (want != nil && got.name != want.GetName()) {
					t.Fatalf("%s: data plane matched %q (%s), Envoy's first match is %q (%s)", when, got.name, got.target(), want.GetName(), routeTarget(want))
				}
				return got
			}
			initial := step("request headers")
			if want, ok := forgedInitial[tt.name]; ok && initial.target() != want {
				t.Errorf("initial target = %s, want %s: the forged header should have mattered before extproc", initial.target(), want)
			}

			// The per-route override, read once at request headers, decides
			// whether extproc sees the body.
			mode := ep.GetProcessingMode()
			if pf := initial.perFilter[controlplane.FilterExtProc]; pf != nil && pf.extProc != nil {
				mode = pf.extProc.GetOverrides().GetProcessingMode()
			}
			if got := mode.GetRequestBodyMode() == extprocfilterv3.ProcessingMode_BUFFERED; got != tt.bodyToExtProc {
				t.Errorf("request body to extproc = %v, want %v (mode %v)", got, tt.bodyToExtProc, mode)
			}

			// Extproc's request-headers reply strips internal headers.
			for _, f := range append(headerMap(nil), h...) {
				if catalog.IsInternalHeader(f.key) {
					h.del(f.key)
					delete(ref, f.key)
				}
			}
			final := initial
			if clearOnMutation {
				final = step("after the request-headers reply")
			}
			if tt.path == "/v1/chat/completions" && tt.model != "" && tt.bodyToExtProc {
				h.set(catalog.RouteHeader, tt.model)
				ref[catalog.RouteHeader] = tt.model
				if first := firstChoice[tt.name]; first != "" {
					h.set(catalog.FirstHeader, first)
					ref[catalog.FirstHeader] = first
				}
				final = step("after the request-body reply")
			}
			if got := final.target(); got != tt.want {
				t.Errorf("final target = %s, want %s", got, tt.want)
			}
		})
	}
}

// ---- local replies: the data plane honours local_reply_config ----

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestLocalRepliesLikeEnvoy applies a snapshot the control plane built and
// checks each kind of local reply against what the local_reply_config in it
// makes Envoy send: Envoy's own failures in the OpenAI shape, extproc's
// immediate responses untouched unless a status-only mapper takes them.
func TestLocalRepliesLikeEnvoy(t *testing.T) {
	dead := freeAddr(t) // nothing listens here: connection refused
	cfg, err := config.Parse("local-reply.yaml", []byte(`
listeners:
  - name: public
    address: 127.0.0.1:8080
limits:
  max_request_body_bytes: 2048
providers:
  - name: dead
    kind: openai
    base_url: http://`+dead+`/v1
models:
  - id: acme/dead
    providers: [{provider: dead, upstream_model: m}]
`))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := controlplane.Build(cfg, "1")
	if err != nil {
		t.Fatal(err)
	}
	proc, procAddr := startProc(t)
	dp := New(Options{
		Logger:         discardLogger(),
		StaticClusters: map[string]string{catalog.ExtProcCluster: procAddr},
		ListenOverride: map[string]string{"public": "127.0.0.1:0"},
	})
	defer dp.Close()
	if err := dp.Apply(context.Background(), resourcesOf(snap)); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dp: dp, proc: proc}
	mapped := func(code string) string {
		for _, r := range controlplane.LocalReplies(cfg) {
			if r.Error.Code == code {
				return string(r.Error.JSON())
			}
		}
		t.Fatalf("no local reply with code %q", code)
		return ""
	}
	immediate := func(status int, e *apierror.Error) procScript {
		return func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
				ImmediateResponse: &extprocv3.ImmediateResponse{
					Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
					Body:    e.JSON(),
					Headers: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}},
				},
			}}, nil
		}
	}
	modelNotFound := apierror.ModelNotFound("acme/none")
	tests := []struct {
		name   string
		script procScript
		body   string
		status int
		want   string
	}{
		{"upstream connect failure (UF)", routeToModel("acme/dead"), `{"model":"acme/dead"}`, 503, mapped("upstream_connect_error")},
		{"body over the buffer limit", continueAll, `{"model":"` + strings.Repeat("x", 4096) + `"}`, 413, mapped("request_too_large")},
		{"extproc's own 404 is not Envoy's", immediate(404, modelNotFound), `{}`, 404, string(modelNotFound.JSON())},
		{"extproc's 500 is rewritten, as in Envoy", immediate(500, apierror.Server(500, "server_error", "x")), `{}`, 500, mapped("server_error")},
		{"catch-all direct response", continueAll, `{}`, 404, string(apierror.NotFound("this path").JSON())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc.setScript(tt.script)
			resp, body := e.post("/v1/chat/completions", tt.body)
			if resp.StatusCode != tt.status || string(body) != tt.want {
				t.Errorf("got %d %s\nwant %d %s", resp.StatusCode, body, tt.status, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type = %q", ct)
			}
		})
	}
	if !strings.Contains(mapped("request_too_large"), "2048 bytes") {
		t.Errorf("413 body does not state the limit: %s", mapped("request_too_large"))
	}
}
