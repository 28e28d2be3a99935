package controlplane

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// Every cluster the control plane serves (CDS) and its endpoints (EDS) are
// generated here: one cluster per provider (its endpoint, TLS, outlier
// detection and the upstream ext_proc filter that adapts each attempt to the
// provider), and the aggregate clusters that order a model's providers for
// failover (docs/routing-design.md).

// Circuit breaker thresholds of provider and backend clusters. Envoy's
// defaults (1024 connections, pending and concurrent requests, 3 concurrent
// retries) are sized for short RPCs: an LLM stream holds its request for
// minutes, so a busy gateway would hit 1024 in-flight streams per provider
// and answer 503 (UO) while the provider is fine.
const (
	MaxUpstreamConnections = 10000
	MaxUpstreamPending     = 10000
	MaxUpstreamRequests    = 10000
	// MaxUpstreamRetries bounds concurrent retries per cluster; failover
	// retries across providers, so Envoy's 3 would turn it off under load.
	MaxUpstreamRetries = 1000
)

// Outlier detection of provider clusters (docs/routing-design.md): a provider
// that keeps failing is ejected for a while and probed back in. 429s are not
// 5xx, so a provider that is only rate limiting stays in. These are the
// defaults; the configuration's outlier_detection sets them.
const (
	OutlierConsecutive5xx     = config.DefaultConsecutiveFailures
	OutlierConsecutiveGateway = config.DefaultConsecutiveFailures
	OutlierInterval           = config.DefaultOutlierInterval
	OutlierBaseEjectionTime   = config.DefaultBaseEjectionTime
)

// Priorities of a provider's endpoints: the gateway's home region first, so
// traffic leaves it only when its endpoints are unhealthy.
const (
	PriorityHomeRegion  = 0
	PriorityOtherRegion = 1
)

// buildClusters returns every CDS cluster and the EDS assignments of those
// discovered over EDS, for a gateway whose home region is cfg.Region.
func buildClusters(cfg *config.Config) (clusters, endpoints []types.Resource, err error) {
	add := func(c *clusterv3.Cluster, cla *endpointv3.ClusterLoadAssignment) {
		clusters = append(clusters, c)
		if cla != nil {
			endpoints = append(endpoints, cla)
		}
	}
	for i := range cfg.Providers {
		c, cla, err := buildProviderCluster(cfg, &cfg.Providers[i])
		if err != nil {
			return nil, nil, err
		}
		add(c, cla)
	}
	aggregates, err := buildRouteClusters(cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range aggregates {
		add(c, nil)
	}
	if cfg.Backends != nil {
		c, cla, err := buildBackendsCluster(cfg.Backends)
		if err != nil {
			return nil, nil, err
		}
		add(c, cla)
	}
	return clusters, endpoints, nil
}

// buildProviderCluster returns the provider's cluster and, when the cluster
// is EDS, the ClusterLoadAssignment served separately under its name.
func buildProviderCluster(cfg *config.Config, p *config.Provider) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment, error) {
	fail := func(err error) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment, error) {
		return nil, nil, fmt.Errorf("controlplane: provider %q: %w", p.Name, err)
	}
	u, err := url.Parse(p.BaseURL)
	if err != nil {
		return fail(fmt.Errorf("base_url: %w", err))
	}
	host := u.Hostname()
	if host == "" {
		return fail(fmt.Errorf("base_url %q has no host", p.BaseURL))
	}
	var port uint32
	switch {
	case u.Port() != "":
		if port, err = parsePort(u.Port()); err != nil {
			return fail(fmt.Errorf("base_url: %w", err))
		}
	case u.Scheme == "https":
		port = 443
	case u.Scheme == "http":
		port = 80
	default:
		return fail(fmt.Errorf("base_url %q: scheme must be http or https", p.BaseURL))
	}
	priority := uint32(PriorityHomeRegion)
	if p.Region != cfg.Region {
		priority = PriorityOtherRegion
	}
	// LOGICAL_DNS re-resolves the name and connects to the first answer,
	// which suits vendor endpoints behind DNS load balancers.
	c, cla := addressedCluster(catalog.ClusterName(p.Name), host, port, clusterv3.Cluster_LOGICAL_DNS,
		&corev3.Locality{Region: p.Region}, priority)
	// The Host a vendor sees is its own (auto_host_rewrite uses the
	// endpoint's hostname), never the one the client sent the gateway,
	// also for a base_url that names an address.
	assignment := cla
	if assignment == nil {
		assignment = c.GetLoadAssignment()
	}
	assignment.GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().Hostname = u.Host
	c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		catalog.MetadataNamespace: {Fields: map[string]*structpb.Value{
			"provider": structpb.NewStringValue(p.Name),
			"kind":     structpb.NewStringValue(p.Kind),
			"region":   structpb.NewStringValue(p.Region),
		}},
	}}
	c.CircuitBreakers = circuitBreakers()
	od := cfg.OutlierDetection
	// A configuration built in code rather than parsed has no defaults.
	if od.ConsecutiveFailures <= 0 {
		od.ConsecutiveFailures = OutlierConsecutive5xx
	}
	if od.Interval <= 0 {
		od.Interval = OutlierInterval
	}
	if od.BaseEjectionTime <= 0 {
		od.BaseEjectionTime = OutlierBaseEjectionTime
	}
	if od.FailurePercentageThreshold <= 0 {
		od.FailurePercentageThreshold = config.DefaultFailurePercentageThreshold
	}
	if od.FailurePercentageRequestVolume <= 0 {
		od.FailurePercentageRequestVolume = config.DefaultFailurePercentageVolume
	}
	c.OutlierDetection = &clusterv3.OutlierDetection{
		// A connection failure, reset or timeout is a gateway failure (503,
		// 504) and a 5xx: both detectors count it.
		Consecutive_5Xx:                    wrapperspb.UInt32(uint32(od.ConsecutiveFailures)),
		ConsecutiveGatewayFailure:          wrapperspb.UInt32(uint32(od.ConsecutiveFailures)),
		EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100), // Envoy's default enforces 0 %
		Interval:                           durationpb.New(od.Interval),
		BaseEjectionTime:                   durationpb.New(od.BaseEjectionTime),
		// A provider cluster has one endpoint: with Envoy's default 10 % it
		// could never be ejected.
		MaxEjectionPercent: wrapperspb.UInt32(100),
		// A provider that answers and then cuts its streams never fails
		// twice in a row (each head's 200 resets the consecutive counts);
		// the share of failures in an interval catches it. Envoy's
		// defaults need 5 hosts and enforce 0 %.
		FailurePercentageThreshold:     wrapperspb.UInt32(uint32(od.FailurePercentageThreshold)),
		FailurePercentageMinimumHosts:  wrapperspb.UInt32(1),
		FailurePercentageRequestVolume: wrapperspb.UInt32(uint32(od.FailurePercentageRequestVolume)),
		EnforcingFailurePercentage:     wrapperspb.UInt32(100),
	}
	// Panic mode (Envoy's default threshold is 50 %) would keep sending an
	// ejected provider traffic; failover needs it to get none.
	c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}}
	po := providerProtocolOptions(p)
	po.HttpFilters = upstreamFilters(cfg, p)
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
		HTTPProtocolOptionsKey: mustAny(po),
	}
	if u.Scheme == "https" {
		c.TransportSocket = &corev3.TransportSocket{
			Name:       TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(providerTLS(cfg, p, host))},
		}
	}
	return c, cla, nil
}

// providerProtocolOptions pins the upstream protocol: HTTP/2 where the
// provider supports it (many streams share one connection, with keepalive
// pings to notice a dead one), HTTP/1.1 otherwise.
func providerProtocolOptions(p *config.Provider) *upstreamhttpv3.HttpProtocolOptions {
	explicit := &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{
			HttpProtocolOptions: &corev3.Http1ProtocolOptions{},
		},
	}
	if p.HTTP2 {
		explicit.ProtocolConfig = &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
			Http2ProtocolOptions: &corev3.Http2ProtocolOptions{ConnectionKeepalive: &corev3.KeepaliveSettings{
				Interval: durationpb.New(30 * time.Second),
				Timeout:  durationpb.New(5 * time.Second),
			}},
		}
	}
	return &upstreamhttpv3.HttpProtocolOptions{
		UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: explicit},
	}
}

// UpstreamExtProcProcessingMode is the mode of the upstream (per attempt)
// ext_proc filter: headers are sent so extproc learns the attempt; the
// request body is BUFFERED so it can translate the whole body for the
// attempt's provider; the response body is off unless extproc switches it
// on per response (mode_override: BUFFERED for JSON, STREAMED for SSE) for
// the providers whose replies it translates, so OpenAI-format providers
// cost nothing there.
func UpstreamExtProcProcessingMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
		ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
}

// upstreamFilters is a provider cluster's upstream HTTP filter chain: the
// upstream ext_proc filter, which Envoy runs once per attempt (a retry to
// another provider runs the other provider's), then the codec filter
// upstream chains must end with. The gRPC initial metadata tells extproc
// the stream is an attempt's, and for which provider.
func upstreamFilters(cfg *config.Config, p *config.Provider) []*hcmv3.HttpFilter {
	ep := &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: catalog.ExtProcCluster,
			}},
			Timeout: durationpb.New(cfg.Limits.ExtProcMessageTimeout),
			InitialMetadata: []*corev3.HeaderValue{
				{Key: catalog.PhaseMetadata, Value: catalog.PhaseUpstream},
				{Key: catalog.ProviderMetadata, Value: p.Name},
			},
		},
		// Fail closed: the upstream phase adds the provider's credential and
		// translates the body; unprocessed, the request would be wrong.
		FailureModeAllow:  false,
		ProcessingMode:    UpstreamExtProcProcessingMode(),
		MessageTimeout:    durationpb.New(cfg.Limits.ExtProcMessageTimeout),
		AllowModeOverride: true,
		MetadataOptions: &extprocv3.MetadataOptions{
			ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{catalog.MetadataNamespace},
			},
			// The downstream phase's routing decision (model, first
			// provider) reaches every attempt this way: upstream filters
			// share the downstream stream's metadata, whereas the headers
			// that carried it for route matching are removed before the
			// request reaches a vendor.
			ForwardingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{catalog.MetadataNamespace},
			},
		},
	}
	return []*hcmv3.HttpFilter{
		{Name: FilterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(ep)}},
		{Name: FilterUpstreamCodec, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&upstreamcodecv3.UpstreamCodec{})}},
	}
}

// FailoverOrder is a model's providers in failover order for a gateway in
// region home: the home region's providers first, then by priority (lower
// first), then in the configuration's order; a provider listed twice counts
// once. With first set, that provider leads.
func FailoverOrder(cfg *config.Config, m config.Model, home, first string) []string {
	type entry struct {
		name     string
		away     bool
		priority int
	}
	var entries []entry
	seen := map[string]bool{}
	for _, mp := range m.Providers {
		if seen[mp.Provider] {
			continue
		}
		seen[mp.Provider] = true
		e := entry{name: mp.Provider, priority: mp.Priority}
		if p, ok := cfg.Provider(mp.Provider); ok {
			e.away = p.Region != home
		}
		entries = append(entries, e)
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		switch {
		case a.name == first && b.name != first:
			return -1
		case b.name == first && a.name != first:
			return 1
		case a.away != b.away:
			if a.away {
				return 1
			}
			return -1
		}
		return cmp.Compare(a.priority, b.priority)
	})
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = catalog.ClusterName(e.name)
	}
	return out
}

// buildRouteClusters returns the aggregate clusters the model routes use:
// route_<m> in failover order and route_<m>_<p> with p first. Envoy's
// aggregate load balancer tries the members' priorities in order, skipping
// those without healthy hosts, and previous_priorities moves each retry to
// the next member.
func buildRouteClusters(cfg *config.Config) ([]*clusterv3.Cluster, error) {
	names := RouteClusterNames(cfg)
	var out []*clusterv3.Cluster
	for _, m := range cfg.Models {
		for _, mp := range m.Providers {
			if _, ok := cfg.Provider(mp.Provider); !ok {
				return nil, fmt.Errorf("controlplane: model %q: unknown provider %q", m.ID, mp.Provider)
			}
		}
		out = append(out, aggregateCluster(names.Model[m.ID], FailoverOrder(cfg, m, cfg.Region, "")))
		done := map[string]bool{}
		for _, mp := range m.Providers {
			if done[mp.Provider] {
				continue
			}
			done[mp.Provider] = true
			out = append(out, aggregateCluster(names.First[m.ID][mp.Provider], FailoverOrder(cfg, m, cfg.Region, mp.Provider)))
		}
	}
	return out, nil
}

func aggregateCluster(name string, members []string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name: name,
		ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{
			Name:        ClusterTypeAggregate,
			TypedConfig: mustAny(&aggregatev3.ClusterConfig{Clusters: members}),
		}},
		// Envoy refuses any other policy for an aggregate cluster: its load
		// balancer is the cluster's own.
		LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED,
		// The aggregate's priorities are its members'; without panic mode,
		// members whose hosts are all ejected get no traffic.
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
		// Envoy checks the retry circuit breaker of the route's cluster, the
		// aggregate: its default of 3 concurrent retries would turn
		// failover off under load.
		CircuitBreakers: circuitBreakers(),
	}
}

// providerTLS verifies the provider's certificate against the CA bundle and
// its name: Envoy checks the chain against trusted_ca but not the host name
// unless told to, and a gateway that forwards credentials must not talk to
// whoever answers.
func providerTLS(cfg *config.Config, p *config.Provider, host string) *tlsv3.UpstreamTlsContext {
	sni := ""
	if net.ParseIP(host) == nil { // SNI carries host names only (RFC 6066)
		sni = host
	}
	if p.TLS != nil && p.TLS.SNI != "" {
		sni = p.TLS.SNI
	}
	san := &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: exact(sni)}
	if sni == "" {
		san = &tlsv3.SubjectAltNameMatcher{SanType: tlsv3.SubjectAltNameMatcher_IP_ADDRESS, Matcher: exact(host)}
	}
	alpn := []string{"http/1.1"}
	if p.HTTP2 {
		alpn = []string{"h2"}
	}
	return &tlsv3.UpstreamTlsContext{
		Sni: sni,
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:     &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			AlpnProtocols: alpn,
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: p.CAFile(cfg)}},
				MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{san},
			}},
		},
	}
}

// buildBackendsCluster is the Go backends service: plain HTTP/1.1 inside the
// deployment (uploads stream through it), STRICT_DNS so a headless service
// spreads over every backend.
func buildBackendsCluster(b *config.Backends) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment, error) {
	h, p, err := net.SplitHostPort(b.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: backends address: %w", err)
	}
	port, err := parsePort(p)
	if err != nil {
		return nil, nil, fmt.Errorf("controlplane: backends address: %w", err)
	}
	c, cla := addressedCluster(BackendsCluster, h, port, clusterv3.Cluster_STRICT_DNS, nil, 0)
	c.CircuitBreakers = circuitBreakers()
	return c, cla, nil
}

// addressedCluster is a round-robin cluster with one endpoint at host:port.
// An IP literal is served over EDS (EDS carries only IP addresses in Envoy);
// a host name is resolved by the cluster itself, as dns says.
func addressedCluster(name, host string, port uint32, dns clusterv3.Cluster_DiscoveryType, locality *corev3.Locality, priority uint32) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment) {
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: locality,
			Priority: priority,
			LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: socketAddress(host, port),
				}},
			}},
		}},
	}
	c := &clusterv3.Cluster{
		Name:           name,
		ConnectTimeout: durationpb.New(ConnectTimeout),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
	if net.ParseIP(host) != nil {
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource(), ServiceName: name}
		return c, cla
	}
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: dns}
	// Envoy's AUTO tries IPv6 first; containers and many clusters have no
	// IPv6 route even when names have AAAA records.
	c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
	c.LoadAssignment = cla
	return c, nil
}

func circuitBreakers() *clusterv3.CircuitBreakers {
	return &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		Priority:           corev3.RoutingPriority_DEFAULT,
		MaxConnections:     wrapperspb.UInt32(MaxUpstreamConnections),
		MaxPendingRequests: wrapperspb.UInt32(MaxUpstreamPending),
		MaxRequests:        wrapperspb.UInt32(MaxUpstreamRequests),
		MaxRetries:         wrapperspb.UInt32(MaxUpstreamRetries),
	}}}
}

func exact(s string) *matcherv3.StringMatcher {
	return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s}}
}
