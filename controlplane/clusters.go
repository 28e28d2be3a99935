package controlplane

import (
	"fmt"
	"net"
	"net/url"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/config"
)

// Every cluster the control plane serves (CDS) and its endpoints (EDS) are
// generated here, in one place, so failover (priorities across providers,
// aggregate clusters, upstream filters) can grow from it.

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
// 5xx, so a provider that is only rate limiting stays in.
const (
	OutlierConsecutive5xx     = 3
	OutlierConsecutiveGateway = 3
	OutlierInterval           = time.Second
	OutlierBaseEjectionTime   = 10 * time.Second
)

// Priorities of a provider's endpoints: the gateway's home region first, so
// traffic leaves it only when its endpoints are unhealthy.
const (
	PriorityHomeRegion  = 0
	PriorityOtherRegion = 1
)

// buildClusters returns every CDS cluster and the EDS assignments of those
// discovered over EDS.
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
	c.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		catalog.MetadataNamespace: {Fields: map[string]*structpb.Value{
			"provider": structpb.NewStringValue(p.Name),
			"kind":     structpb.NewStringValue(p.Kind),
			"region":   structpb.NewStringValue(p.Region),
		}},
	}}
	c.CircuitBreakers = circuitBreakers()
	c.OutlierDetection = &clusterv3.OutlierDetection{
		Consecutive_5Xx:                    wrapperspb.UInt32(OutlierConsecutive5xx),
		ConsecutiveGatewayFailure:          wrapperspb.UInt32(OutlierConsecutiveGateway),
		EnforcingConsecutiveGatewayFailure: wrapperspb.UInt32(100), // Envoy's default enforces 0 %
		Interval:                           durationpb.New(OutlierInterval),
		BaseEjectionTime:                   durationpb.New(OutlierBaseEjectionTime),
		// A provider cluster has one endpoint: Envoy's 10 % would still eject
		// it (at least one host may go), but say what is meant.
		MaxEjectionPercent: wrapperspb.UInt32(100),
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
		HTTPProtocolOptionsKey: mustAny(providerProtocolOptions(p)),
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
