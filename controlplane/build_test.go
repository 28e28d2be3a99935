package controlplane

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

var allTypes = []resourcev3.Type{
	resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType,
	resourcev3.EndpointType, resourcev3.SecretType, resourcev3.RuntimeType,
}

// unpack unpacks a into a new T, failing the test on a type mismatch.
func unpack[T proto.Message](t *testing.T, a *anypb.Any) T {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatalf("unpack %s: %v", a.GetTypeUrl(), err)
	}
	v, ok := m.(T)
	if !ok {
		var zero T
		t.Fatalf("Any holds %T, want %T", m, zero)
	}
	return v
}

func resource[T types.Resource](t *testing.T, snap *cachev3.Snapshot, typ resourcev3.Type, name string) T {
	t.Helper()
	r, ok := snap.GetResources(typ)[name]
	if !ok {
		t.Fatalf("%s %q missing; have %v", typ, name, names(snap, typ))
	}
	return r.(T)
}

func names(snap *cachev3.Snapshot, typ resourcev3.Type) []string {
	var out []string
	for n := range snap.GetResources(typ) {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// checkSnapshot asserts what every snapshot must satisfy: a version on every
// type, consistency, and valid resources down to the typed configs in Anys.
func checkSnapshot(t *testing.T, snap *cachev3.Snapshot, version string) {
	t.Helper()
	if err := snap.Consistent(); err != nil {
		t.Errorf("Consistent: %v", err)
	}
	for _, typ := range allTypes {
		if got := snap.GetVersion(typ); got != version {
			t.Errorf("%s version = %q, want %q", typ, got, version)
		}
		for name, r := range snap.GetResources(typ) {
			if got := cachev3.GetResourceName(r); got != name {
				t.Errorf("%s %q: resource name %q", typ, name, got)
			}
			if err := r.(interface{ ValidateAll() error }).ValidateAll(); err != nil {
				t.Errorf("%s %q: ValidateAll: %v", typ, name, err)
			}
			if err := Validate(r); err != nil {
				t.Errorf("%s %q: Validate (with Anys): %v", typ, name, err)
			}
		}
	}
}

func hcmOf(t *testing.T, l *listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	if len(l.GetFilterChains()) != 1 || len(l.GetFilterChains()[0].GetFilters()) != 1 {
		t.Fatalf("listener %q: want one filter chain with one filter, got %v", l.GetName(), l.GetFilterChains())
	}
	f := l.GetFilterChains()[0].GetFilters()[0]
	if f.GetName() != FilterHTTPConnectionManager {
		t.Fatalf("filter name = %q", f.GetName())
	}
	return unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
}

func TestBuildDefault(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Build(cfg, "7")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkSnapshot(t, snap, "7")

	// One cluster (over EDS: the demo upstreams are on loopback IPs) per
	// provider, and the aggregate clusters of the models' routes.
	var providerClusters, clusters, wantRoutes []string
	for _, p := range cfg.Providers {
		providerClusters = append(providerClusters, catalog.ClusterName(p.Name))
	}
	rcn := RouteClusterNames(cfg)
	clusters = append(clusters, providerClusters...)
	for _, m := range cfg.Models {
		clusters = append(clusters, rcn.Model[m.ID])
		for _, mp := range m.Providers {
			clusters = append(clusters, rcn.First[m.ID][mp.Provider])
			wantRoutes = append(wantRoutes, ModelProviderRouteName(m.ID, mp.Provider))
		}
		wantRoutes = append(wantRoutes, ModelRouteName(m.ID))
	}
	wantRoutes = append(wantRoutes, NotFoundRouteName)
	slices.Sort(providerClusters)
	slices.Sort(clusters)
	want := map[resourcev3.Type][]string{
		resourcev3.ListenerType: {"public"},
		resourcev3.RouteType:    {catalog.ListenerRouteConfig},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: providerClusters,
		resourcev3.SecretType:   nil,
		resourcev3.RuntimeType:  {catalog.RuntimeName},
	}
	for typ, w := range want {
		if got := names(snap, typ); !slices.Equal(got, w) {
			t.Errorf("%s names = %v, want %v", typ, got, w)
		}
	}

	// Listener and connection manager.
	l := resource[*listenerv3.Listener](t, snap, resourcev3.ListenerType, "public")
	sa := l.GetAddress().GetSocketAddress()
	if sa.GetAddress() != "127.0.0.1" || sa.GetPortValue() != 8080 || sa.GetProtocol() != corev3.SocketAddress_TCP {
		t.Errorf("address = %v", sa)
	}
	if got := l.GetPerConnectionBufferLimitBytes().GetValue(); int64(got) != cfg.Limits.MaxRequestBodyBytes {
		t.Errorf("per_connection_buffer_limit_bytes = %d, want %d", got, cfg.Limits.MaxRequestBodyBytes)
	}
	if ts := l.GetFilterChains()[0].GetTransportSocket(); ts != nil {
		t.Errorf("plain listener has transport socket %v", ts)
	}
	hcm := hcmOf(t, l)
	if hcm.GetStatPrefix() != "public" || hcm.GetCodecType() != hcmv3.HttpConnectionManager_AUTO {
		t.Errorf("stat_prefix/codec = %q/%v", hcm.GetStatPrefix(), hcm.GetCodecType())
	}
	if rds := hcm.GetRds(); rds.GetRouteConfigName() != catalog.ListenerRouteConfig ||
		rds.GetConfigSource().GetAds() == nil || rds.GetConfigSource().GetResourceApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("rds = %v", rds)
	}
	if got := hcm.GetStreamIdleTimeout().AsDuration(); got != cfg.Limits.StreamIdleTimeout {
		t.Errorf("stream_idle_timeout = %v", got)
	}
	if !hcm.GetGenerateRequestId().GetValue() {
		t.Error("generate_request_id is not true")
	}

	if !hcm.GetUseRemoteAddress().GetValue() || !hcm.GetAlwaysSetRequestIdInResponse() {
		t.Error("use_remote_address / always_set_request_id_in_response not set")
	}
	if n := len(hcm.GetLocalReplyConfig().GetMappers()); n != len(LocalReplies(cfg)) || n == 0 {
		t.Errorf("local reply mappers = %d, want %d", n, len(LocalReplies(cfg)))
	}
	if len(hcm.GetAccessLog()) != 1 || hcm.GetAccessLog()[0].GetName() != AccessLoggerStdout {
		t.Errorf("access log = %v", hcm.GetAccessLog())
	}

	// Filters: exactly [ext_proc, ratelimit, router].
	var filterNames []string
	for _, f := range hcm.GetHttpFilters() {
		filterNames = append(filterNames, f.GetName())
	}
	if !slices.Equal(filterNames, []string{FilterExtProc, FilterRateLimit, FilterRouter}) {
		t.Fatalf("http filters = %v", filterNames)
	}
	unpack[*routerv3.Router](t, hcm.GetHttpFilters()[2].GetTypedConfig())
	rl := unpack[*ratelimitv3.RateLimit](t, hcm.GetHttpFilters()[1].GetTypedConfig())
	if rl.GetDomain() != "switchyard" || rl.GetFailureModeDeny() ||
		rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName() != RateLimitCluster {
		t.Errorf("ratelimit filter = %v", rl)
	}
	ep := unpack[*extprocv3.ExternalProcessor](t, hcm.GetHttpFilters()[0].GetTypedConfig())
	if got := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(); got != catalog.ExtProcCluster {
		t.Errorf("ext_proc cluster = %q", got)
	}
	if ep.GetGrpcService().GetTimeout() == nil {
		t.Error("ext_proc grpc_service has no timeout")
	}
	if ep.GetHttpService() != nil || ep.GetFailureModeAllow() {
		t.Errorf("ext_proc: http_service %v, failure_mode_allow %v", ep.GetHttpService(), ep.GetFailureModeAllow())
	}
	if got := ep.GetMessageTimeout().AsDuration(); got != cfg.Limits.ExtProcMessageTimeout || got != 10*time.Second {
		t.Errorf("message_timeout = %v", got)
	}
	if !ep.GetAllowModeOverride() {
		t.Error("allow_mode_override is false")
	}
	if ep.GetRouteCacheAction() != extprocv3.ExternalProcessor_CLEAR {
		t.Errorf("route_cache_action = %v, want CLEAR", ep.GetRouteCacheAction())
	}
	if got := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(); !slices.Equal(got, []string{catalog.MetadataNamespace}) {
		t.Errorf("receiving namespaces = %v", got)
	}
	wantMode := &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
		ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
	if !proto.Equal(ep.GetProcessingMode(), wantMode) {
		t.Errorf("processing_mode = %v, want %v", ep.GetProcessingMode(), wantMode)
	}

	// Routes: per model, one per provider and the default, then the
	// catch-all.
	rc := resource[*routev3.RouteConfiguration](t, snap, resourcev3.RouteType, catalog.ListenerRouteConfig)
	if len(rc.GetVirtualHosts()) != 1 {
		t.Fatalf("virtual hosts = %d", len(rc.GetVirtualHosts()))
	}
	vh := rc.GetVirtualHosts()[0]
	if vh.GetName() != VirtualHostName || !slices.Equal(vh.GetDomains(), []string{"*"}) {
		t.Errorf("virtual host %q domains %v", vh.GetName(), vh.GetDomains())
	}
	var routeNames []string
	for _, r := range vh.GetRoutes() {
		routeNames = append(routeNames, r.GetName())
	}
	if !slices.Equal(routeNames, wantRoutes) {
		t.Fatalf("routes = %v, want %v", routeNames, wantRoutes)
	}
	byName := func(name string) *routev3.Route {
		i := slices.Index(routeNames, name)
		if i < 0 {
			t.Fatalf("no route %q", name)
		}
		return vh.GetRoutes()[i]
	}
	first := byName("model:demo/chat@fake-openai")
	if hs := first.GetMatch().GetHeaders(); first.GetMatch().GetPrefix() != "/v1/" || len(hs) != 2 ||
		hs[0].GetName() != catalog.RouteHeader || hs[0].GetStringMatch().GetExact() != "demo/chat" ||
		hs[1].GetName() != catalog.FirstHeader || hs[1].GetStringMatch().GetExact() != "fake-openai" {
		t.Errorf("first-choice route match = %v", first.GetMatch())
	}
	if got := first.GetRoute().GetCluster(); got != "route_demo_chat_fake-openai" {
		t.Errorf("first-choice route cluster = %q", got)
	}
	model := byName("model:demo/chat")
	if model.GetMatch().GetPrefix() != "/v1/" || len(model.GetMatch().GetHeaders()) != 1 {
		t.Errorf("model match = %v", model.GetMatch())
	}
	hm := model.GetMatch().GetHeaders()[0]
	if hm.GetName() != catalog.RouteHeader || hm.GetStringMatch().GetExact() != "demo/chat" {
		t.Errorf("model header match = %v", hm)
	}
	ra := model.GetRoute()
	if ra.GetCluster() != "route_demo_chat" {
		t.Errorf("model cluster = %q", ra.GetCluster())
	}
	rp := ra.GetRetryPolicy()
	if rp.GetRetryOn() != "connect-failure,reset,5xx,retriable-status-codes" || !slices.Equal(rp.GetRetriableStatusCodes(), []uint32{429}) ||
		rp.GetNumRetries().GetValue() != 1 || rp.GetPerTryTimeout().AsDuration() != config.DefaultFirstByteTimeout ||
		rp.GetHostSelectionRetryMaxAttempts() != 5 || len(rp.GetRetryHostPredicate()) != 1 ||
		rp.GetRetryHostPredicate()[0].GetName() != RetryHostPredicate || rp.GetRetryPriority().GetName() != RetryPriority {
		t.Errorf("retry policy = %v", rp)
	}
	if !proto.Equal(first.GetRoute().GetRetryPolicy(), rp) {
		t.Errorf("first-choice retry policy %v differs from the default route's %v", first.GetRoute().GetRetryPolicy(), rp)
	}
	if ra.GetTimeout() == nil || ra.GetTimeout().AsDuration() != 0 {
		t.Errorf("route timeout = %v, want explicit 0s", ra.GetTimeout())
	}
	if ra.GetIdleTimeout().AsDuration() != config.DefaultModelIdleTimeout {
		t.Errorf("route idle_timeout = %v, want the model's idle_timeout %v", ra.GetIdleTimeout(), config.DefaultModelIdleTimeout)
	}
	if !ra.GetAutoHostRewrite().GetValue() {
		t.Error("auto_host_rewrite is not true")
	}
	if ra.GetPrefixRewrite() != "" {
		t.Errorf("base path /v1 got prefix_rewrite %q", ra.GetPrefixRewrite())
	}
	perRoute := unpack[*ratelimitv3.RateLimitPerRoute](t, model.GetTypedPerFilterConfig()[FilterRateLimit])
	if len(perRoute.GetRateLimits()) != 1 || !perRoute.GetRateLimits()[0].GetApplyOnStreamDone() ||
		perRoute.GetRateLimits()[0].GetHitsAddend().GetFormat() != "%DYNAMIC_METADATA(switchyard:charge_tokens)%" {
		t.Errorf("model route rate limits = %v", perRoute)
	}
	nf := byName(NotFoundRouteName)
	if nf.GetMatch().GetPrefix() != "/" || nf.GetDirectResponse().GetStatus() != 404 {
		t.Errorf("not_found route = %v", nf)
	}
	if got, want := nf.GetDirectResponse().GetBody().GetInlineString(), string(apierror.NotFound("this path").JSON()); got != want {
		t.Errorf("not_found body = %s, want %s", got, want)
	}
	if h := nf.GetResponseHeadersToAdd(); len(h) != 1 || h[0].GetHeader().GetKey() != "content-type" ||
		h[0].GetHeader().GetValue() != "application/json" {
		t.Errorf("not_found headers = %v", h)
	}

	// Cluster: an IP literal goes to EDS.
	c := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, "provider_fake-openai")
	if c.GetType() != clusterv3.Cluster_EDS {
		t.Errorf("cluster type = %v, want EDS", c.GetType())
	}
	if c.GetEdsClusterConfig().GetServiceName() != c.GetName() || c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
		t.Errorf("eds_cluster_config = %v", c.GetEdsClusterConfig())
	}
	if c.GetLoadAssignment() != nil || c.GetTransportSocket() != nil {
		t.Errorf("EDS http cluster has load_assignment %v / transport_socket %v", c.GetLoadAssignment(), c.GetTransportSocket())
	}
	if c.GetConnectTimeout().AsDuration() != 5*time.Second || c.GetLbPolicy() != clusterv3.Cluster_ROUND_ROBIN {
		t.Errorf("connect_timeout %v lb %v", c.GetConnectTimeout(), c.GetLbPolicy())
	}
	cmd := c.GetMetadata().GetFilterMetadata()[catalog.MetadataNamespace].GetFields()
	if cmd["provider"].GetStringValue() != "fake-openai" || cmd["kind"].GetStringValue() != "openai" || cmd["region"].GetStringValue() != "us" {
		t.Errorf("cluster metadata = %v", cmd)
	}
	cla := resource[*endpointv3.ClusterLoadAssignment](t, snap, resourcev3.EndpointType, "provider_fake-openai")
	checkEndpoint(t, cla, "127.0.0.1", 8091, "us", PriorityHomeRegion)
	if c.GetOutlierDetection() == nil || len(c.GetCircuitBreakers().GetThresholds()) != 1 {
		t.Errorf("outlier_detection %v circuit_breakers %v", c.GetOutlierDetection(), c.GetCircuitBreakers())
	}
	if pt := c.GetCommonLbConfig().GetHealthyPanicThreshold(); pt == nil || pt.GetValue() != 0 {
		t.Errorf("healthy_panic_threshold = %v, want 0", pt)
	}
	// The upstream filter chain: ext_proc for the attempt's provider, then
	// the codec.
	po := unpack[*upstreamhttpv3.HttpProtocolOptions](t, c.GetTypedExtensionProtocolOptions()[HTTPProtocolOptionsKey])
	if fs := po.GetHttpFilters(); len(fs) != 2 || fs[0].GetName() != FilterExtProc || fs[1].GetName() != FilterUpstreamCodec {
		t.Fatalf("upstream http filters = %v", fs)
	}
	uep := unpack[*extprocv3.ExternalProcessor](t, po.GetHttpFilters()[0].GetTypedConfig())
	md := map[string]string{}
	for _, hv := range uep.GetGrpcService().GetInitialMetadata() {
		md[hv.GetKey()] = hv.GetValue()
	}
	if uep.GetGrpcService().GetEnvoyGrpc().GetClusterName() != catalog.ExtProcCluster || md[catalog.PhaseMetadata] != catalog.PhaseUpstream ||
		md[catalog.ProviderMetadata] != "fake-openai" || uep.GetFailureModeAllow() || !uep.GetAllowModeOverride() ||
		!proto.Equal(uep.GetProcessingMode(), UpstreamExtProcProcessingMode()) {
		t.Errorf("upstream ext_proc = %v", uep)
	}
	agg := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, "route_demo_chat")
	if agg.GetClusterType().GetName() != ClusterTypeAggregate || agg.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED ||
		!slices.Equal(unpack[*aggregatev3.ClusterConfig](t, agg.GetClusterType().GetTypedConfig()).GetClusters(), []string{"provider_fake-openai"}) {
		t.Errorf("aggregate cluster = %v", agg)
	}

	// RTDS: the catalog, decodable by extproc.
	rt := resource[*runtimev3.Runtime](t, snap, resourcev3.RuntimeType, catalog.RuntimeName)
	cat, err := catalog.Decode(rt)
	if err != nil {
		t.Fatalf("catalog.Decode: %v", err)
	}
	if _, ok := cat.Model("demo/chat"); !ok {
		t.Error("catalog lacks demo/chat")
	}
}

func checkEndpoint(t *testing.T, cla *endpointv3.ClusterLoadAssignment, host string, port uint32, region string, priority uint32) {
	t.Helper()
	if len(cla.GetEndpoints()) != 1 || len(cla.GetEndpoints()[0].GetLbEndpoints()) != 1 {
		t.Fatalf("load assignment %q = %v", cla.GetClusterName(), cla)
	}
	le := cla.GetEndpoints()[0]
	if le.GetLocality().GetRegion() != region || le.GetPriority() != priority {
		t.Errorf("%s: locality %v priority %d", cla.GetClusterName(), le.GetLocality(), le.GetPriority())
	}
	sa := le.GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	if sa.GetAddress() != host || sa.GetPortValue() != port {
		t.Errorf("%s: endpoint %s:%d, want %s:%d", cla.GetClusterName(), sa.GetAddress(), sa.GetPortValue(), host, port)
	}
}

// tlsConfig is a configuration with a TLS listener, a DNS https provider in
// another region, and an IP http provider.
func tlsConfig(t *testing.T) *config.Config {
	t.Helper()
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("not read by Build"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	yaml := `
region: us
listeners:
  - name: public
    address: 127.0.0.1:8443
    tls: {cert_file: ` + cert + `, key_file: ` + key + `}
  - name: internal
    address: :8080
providers:
  - name: groq
    kind: openai
    base_url: https://api.groq.com/openai/v1
    region: asia
  - name: local
    kind: openai
    base_url: http://10.0.0.7:9000/v1
models:
  - id: groq/llama
    providers: [{provider: groq, upstream_model: llama-3.3-70b}]
  - id: local/chat
    providers: [{provider: local, upstream_model: chat}, {provider: groq, upstream_model: x}]
`
	cfg, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestBuildTLSAndHTTPS(t *testing.T) {
	cfg := tlsConfig(t)
	snap, err := Build(cfg, "1")
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	checkSnapshot(t, snap, "1")

	for typ, w := range map[resourcev3.Type][]string{
		resourcev3.ListenerType: {"internal", "public"},
		resourcev3.ClusterType: {"provider_groq", "provider_local", "route_groq_llama", "route_groq_llama_groq",
			"route_local_chat", "route_local_chat_groq", "route_local_chat_local"},
		resourcev3.EndpointType: {"provider_local"},
		resourcev3.SecretType:   {"listener_public"},
	} {
		if got := names(snap, typ); !slices.Equal(got, w) {
			t.Errorf("%s names = %v, want %v", typ, got, w)
		}
	}

	// TLS listener: SDS certificate, TLS 1.2+, h2 and http/1.1.
	pub := resource[*listenerv3.Listener](t, snap, resourcev3.ListenerType, "public")
	ts := pub.GetFilterChains()[0].GetTransportSocket()
	if ts.GetName() != TransportSocketTLS {
		t.Fatalf("transport socket = %v", ts)
	}
	dtc := unpack[*tlsv3.DownstreamTlsContext](t, ts.GetTypedConfig())
	ctc := dtc.GetCommonTlsContext()
	if sds := ctc.GetTlsCertificateSdsSecretConfigs(); len(sds) != 1 || sds[0].GetName() != "listener_public" ||
		sds[0].GetSdsConfig().GetAds() == nil {
		t.Errorf("sds configs = %v", sds)
	}
	if ctc.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2 ||
		!slices.Equal(ctc.GetTlsParams().GetCipherSuites(), ListenerCipherSuites) {
		t.Errorf("tls params = %v", ctc.GetTlsParams())
	}
	if !slices.Equal(ctc.GetAlpnProtocols(), []string{"h2", "http/1.1"}) {
		t.Errorf("alpn = %v", ctc.GetAlpnProtocols())
	}
	secret := resource[*tlsv3.Secret](t, snap, resourcev3.SecretType, "listener_public")
	tc := secret.GetTlsCertificate()
	if tc.GetCertificateChain().GetFilename() != cfg.Listeners[0].TLS.CertFile ||
		tc.GetPrivateKey().GetFilename() != cfg.Listeners[0].TLS.KeyFile {
		t.Errorf("secret = %v", tc)
	}
	internal := resource[*listenerv3.Listener](t, snap, resourcev3.ListenerType, "internal")
	if a := internal.GetAddress().GetSocketAddress(); a.GetAddress() != "0.0.0.0" || a.GetPortValue() != 8080 {
		t.Errorf("internal address = %v", a)
	}
	if hcmOf(t, internal).GetStatPrefix() != "internal" {
		t.Error("stat_prefix is not the listener name")
	}

	// DNS https provider: LOGICAL_DNS with an inline assignment and SNI.
	groq := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, "provider_groq")
	if groq.GetType() != clusterv3.Cluster_LOGICAL_DNS || groq.GetEdsClusterConfig() != nil {
		t.Errorf("groq type = %v eds = %v", groq.GetType(), groq.GetEdsClusterConfig())
	}
	// Another region than the gateway's: the next priority.
	checkEndpoint(t, groq.GetLoadAssignment(), "api.groq.com", 443, "asia", PriorityOtherRegion)
	if groq.GetLoadAssignment().GetClusterName() != "provider_groq" {
		t.Errorf("load_assignment name = %q", groq.GetLoadAssignment().GetClusterName())
	}
	if groq.GetTransportSocket().GetName() != TransportSocketTLS {
		t.Fatalf("groq transport socket = %v", groq.GetTransportSocket())
	}
	utc := unpack[*tlsv3.UpstreamTlsContext](t, groq.GetTransportSocket().GetTypedConfig())
	if utc.GetSni() != "api.groq.com" {
		t.Errorf("sni = %q", utc.GetSni())
	}
	vc := utc.GetCommonTlsContext().GetValidationContext()
	if vc.GetTrustedCa().GetFilename() != config.DefaultUpstreamCAFile {
		t.Errorf("trusted_ca = %v", vc.GetTrustedCa())
	}
	if san := vc.GetMatchTypedSubjectAltNames(); len(san) != 1 || san[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS ||
		san[0].GetMatcher().GetExact() != "api.groq.com" {
		t.Errorf("subject alt names = %v", san)
	}
	if r := groq.GetMetadata().GetFilterMetadata()[catalog.MetadataNamespace].GetFields()["region"].GetStringValue(); r != "asia" {
		t.Errorf("groq region metadata = %q", r)
	}

	// IP http provider: EDS, no TLS; its region defaulted to the gateway's.
	local := resource[*clusterv3.Cluster](t, snap, resourcev3.ClusterType, "provider_local")
	if local.GetType() != clusterv3.Cluster_EDS || local.GetTransportSocket() != nil {
		t.Errorf("local type = %v transport = %v", local.GetType(), local.GetTransportSocket())
	}
	checkEndpoint(t, resource[*endpointv3.ClusterLoadAssignment](t, snap, resourcev3.EndpointType, "provider_local"),
		"10.0.0.7", 9000, "us", PriorityHomeRegion)

	// Routes in model order: per provider, then the model's default, then
	// the catch-all. No path rewrite: the upstream ext_proc filter sets the
	// provider's path on each attempt.
	vh := resource[*routev3.RouteConfiguration](t, snap, resourcev3.RouteType, catalog.ListenerRouteConfig).GetVirtualHosts()[0]
	type route struct{ name, cluster, rewrite string }
	var got []route
	for _, r := range vh.GetRoutes() {
		got = append(got, route{r.GetName(), r.GetRoute().GetCluster(), r.GetRoute().GetPrefixRewrite()})
	}
	want := []route{
		{"model:groq/llama@groq", "route_groq_llama_groq", ""},
		{"model:groq/llama", "route_groq_llama", ""},
		{"model:local/chat@local", "route_local_chat_local", ""},
		{"model:local/chat@groq", "route_local_chat_groq", ""},
		{"model:local/chat", "route_local_chat", ""},
		{NotFoundRouteName, "", ""},
	}
	if !slices.Equal(got, want) {
		t.Errorf("routes = %v, want %v", got, want)
	}
	// Two providers, so one retry.
	if n := vh.GetRoutes()[4].GetRoute().GetRetryPolicy().GetNumRetries().GetValue(); n != 1 {
		t.Errorf("local/chat num_retries = %d", n)
	}
}

func TestClusterPorts(t *testing.T) {
	tests := []struct {
		base     string
		host     string
		port     uint32
		typ      clusterv3.Cluster_DiscoveryType
		tls, eds bool
	}{
		{"https://api.example.com/v1", "api.example.com", 443, clusterv3.Cluster_LOGICAL_DNS, true, false},
		{"http://api.example.com/v1", "api.example.com", 80, clusterv3.Cluster_LOGICAL_DNS, false, false},
		{"https://api.example.com:8443/v1", "api.example.com", 8443, clusterv3.Cluster_LOGICAL_DNS, true, false},
		{"http://127.0.0.1/v1", "127.0.0.1", 80, clusterv3.Cluster_EDS, false, true},
		{"https://[::1]:9443/v1", "::1", 9443, clusterv3.Cluster_EDS, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			c, cla, err := buildProviderCluster(&config.Config{Region: "us", UpstreamCAFile: config.DefaultUpstreamCAFile},
				&config.Provider{Name: "p", Kind: "openai", BaseURL: tt.base, Region: "us"})
			if err != nil {
				t.Fatal(err)
			}
			if c.GetType() != tt.typ {
				t.Errorf("type = %v, want %v", c.GetType(), tt.typ)
			}
			if (cla != nil) != tt.eds {
				t.Errorf("separate assignment = %v, want %v", cla != nil, tt.eds)
			}
			if cla == nil {
				cla = c.GetLoadAssignment()
			}
			checkEndpoint(t, cla, tt.host, tt.port, "us", PriorityHomeRegion)
			if (c.GetTransportSocket() != nil) != tt.tls {
				t.Errorf("tls = %v, want %v", c.GetTransportSocket() != nil, tt.tls)
			}
			if err := Validate(c); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	base, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		mutate func(*config.Config)
		want   string
	}{
		{"nil config", nil, "nil config"},
		{"listener host name", func(c *config.Config) { c.Listeners[0].Address = "gateway.example.com:8080" }, "not an IP address"},
		{"buffer limit too large", func(c *config.Config) { c.Limits.MaxRequestBodyBytes = 1 << 33 }, "max_request_body_bytes"},
		{"unknown provider", func(c *config.Config) { c.Models[0].Providers[0].Provider = "nope" }, "unknown provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cfg *config.Config
			if tt.mutate != nil {
				c := *base
				c.Listeners = slices.Clone(base.Listeners)
				c.Models = slices.Clone(base.Models)
				c.Models[0].Providers = slices.Clone(base.Models[0].Providers)
				tt.mutate(&c)
				cfg = &c
			}
			_, err := Build(cfg, "1")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestValidateDescendsIntoAny shows why Validate exists: ValidateAll accepts
// a listener whose packed connection manager is invalid, Validate does not.
func TestValidateDescendsIntoAny(t *testing.T) {
	bad := &listenerv3.Listener{
		Name: "l",
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: FilterHTTPConnectionManager,
			// stat_prefix is required (min_len 1).
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&hcmv3.HttpConnectionManager{})},
		}}}},
	}
	if err := bad.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll already rejects the listener (%v); the test needs an error only inside the Any", err)
	}
	err := Validate(bad)
	if err == nil || !strings.Contains(err.Error(), "StatPrefix") {
		t.Errorf("Validate = %v, want a StatPrefix error", err)
	}
	unlinked := &listenerv3.Listener{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
		Name:       "x",
		ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/not.Linked"}},
	}}}}}
	if err := Validate(unlinked); err == nil {
		t.Error("Validate accepted an Any of an unknown type")
	}
}
