// Package controlplane owns turning configuration into xDS resources and
// serving them over ADS.
//
// The control plane is the single source of truth: Build turns a
// *config.Config into one go-control-plane snapshot, and Server serves that
// snapshot to Envoy, to Switchyard's own Go data plane and to every extproc
// (which subscribes to the RTDS resource catalog.RuntimeName). Every consumer
// reads the same resources, so the names produced here are a contract; they
// are exported as constants and functions where a consumer needs them.
package controlplane

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/apierror"
	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/config"
)

// Names of the Envoy extensions the generated resources use. The data plane
// recognises filters and transport sockets by these names, as Envoy does.
const (
	FilterHTTPConnectionManager = "envoy.filters.network.http_connection_manager"
	FilterExtProc               = "envoy.filters.http.ext_proc"
	FilterRouter                = "envoy.filters.http.router"
	TransportSocketTLS          = "envoy.transport_sockets.tls"
)

// Other names in the generated resources.
const (
	// VirtualHostName is the single virtual host of catalog.ListenerRouteConfig.
	VirtualHostName = "switchyard"
	// NotFoundRouteName is the catch-all route, always last.
	NotFoundRouteName = "not_found"
	// ModelRoutePrefix is the path prefix model routes match; it is the path
	// of OpenAI's base URL, so it is what prefix_rewrite replaces.
	ModelRoutePrefix = "/v1/"
	// ConnectTimeout is every provider cluster's connect timeout.
	ConnectTimeout = 5 * time.Second
)

// ModelRouteName is the name of the route that sends a model to its provider.
func ModelRouteName(modelID string) string { return "model:" + modelID }

// SecretName is the SDS secret holding a TLS listener's certificate.
func SecretName(listener string) string { return "listener_" + listener }

// Build returns a consistent snapshot of every resource cfg implies, with all
// resource types at version. cfg must have passed config validation; Build
// still rejects what Envoy would reject (for example a listener host that is
// not an IP address), and it checks the result with snap.Consistent() and the
// protoc-gen-validate rules of every message, including the typed configs
// packed in Anys, so a snapshot it returns is one Envoy accepts.
func Build(cfg *config.Config, version string) (*cachev3.Snapshot, error) {
	if cfg == nil {
		return nil, errors.New("controlplane: nil config")
	}
	var (
		listeners []types.Resource
		secrets   []types.Resource
		clusters  []types.Resource
		endpoints []types.Resource
	)
	for _, l := range cfg.Listeners {
		lis, secret, err := buildListener(cfg, l)
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, lis)
		if secret != nil {
			secrets = append(secrets, secret)
		}
	}
	routes, err := buildRoutes(cfg)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Providers {
		c, cla, err := buildCluster(p)
		if err != nil {
			return nil, err
		}
		clusters = append(clusters, c)
		if cla != nil {
			endpoints = append(endpoints, cla)
		}
	}
	rt, err := catalog.FromConfig(cfg).Runtime()
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	// Every type is present, even when empty, so each has a version: a
	// subscriber's first request is then always answered (an empty answer
	// included), and a client waiting for its first response of every type,
	// like adsclient's Synced, does not wait forever for SDS without TLS
	// listeners or EDS without IP-literal providers.
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: listeners,
		resourcev3.RouteType:    {routes},
		resourcev3.ClusterType:  clusters,
		resourcev3.EndpointType: endpoints,
		resourcev3.SecretType:   secrets,
		resourcev3.RuntimeType:  {rt},
	})
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	if err := snap.Consistent(); err != nil {
		return nil, fmt.Errorf("controlplane: inconsistent snapshot: %w", err)
	}
	for _, typ := range []resourcev3.Type{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType,
		resourcev3.EndpointType, resourcev3.SecretType, resourcev3.RuntimeType} {
		for name, r := range snap.GetResources(typ) {
			if err := Validate(r); err != nil {
				return nil, fmt.Errorf("controlplane: %s %q: %w", typ, name, err)
			}
		}
	}
	return snap, nil
}

// adsConfigSource points a dynamic resource at the ADS stream it came from.
func adsConfigSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil { // only fails for messages without a registered type, which ours all have
		panic(fmt.Sprintf("controlplane: pack %T: %v", m, err))
	}
	return a
}

func socketAddress(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
	}}}
}

func parsePort(s string) (uint32, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("invalid port %q", s)
	}
	return uint32(p), nil
}

// listenHost maps the configured listener host to the IP Envoy binds: Envoy
// does not resolve names in listener addresses.
func listenHost(host string) (string, error) {
	switch {
	case host == "":
		return "0.0.0.0", nil
	case host == "localhost":
		return "127.0.0.1", nil
	case net.ParseIP(host) != nil:
		return host, nil
	}
	return "", fmt.Errorf("host %q is not an IP address", host)
}

func buildListener(cfg *config.Config, l config.Listener) (*listenerv3.Listener, *tlsv3.Secret, error) {
	fail := func(err error) (*listenerv3.Listener, *tlsv3.Secret, error) {
		return nil, nil, fmt.Errorf("controlplane: listener %q: %w", l.Name, err)
	}
	h, p, err := net.SplitHostPort(l.Address)
	if err != nil {
		return fail(err)
	}
	host, err := listenHost(h)
	if err != nil {
		return fail(err)
	}
	port, err := parsePort(p)
	if err != nil {
		return fail(err)
	}
	// The buffer limit is what lets ext_proc see whole request bodies in
	// BUFFERED mode: a body over it gets 413 instead of Envoy's 1 MiB default.
	limit := cfg.Limits.MaxRequestBodyBytes
	if limit <= 0 || limit > math.MaxUint32 {
		return fail(fmt.Errorf("max_request_body_bytes %d does not fit per_connection_buffer_limit_bytes", limit))
	}

	extProc := &extprocv3.ExternalProcessor{
		GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{
				ClusterName: catalog.ExtProcCluster,
			}},
			// Envoy bounds each ext_proc message with message_timeout and puts
			// no deadline on the stream from this field; it mirrors the message
			// timeout so a consumer that does read it cannot cut a request short
			// of what message_timeout allows.
			Timeout: durationpb.New(cfg.Limits.ExtProcMessageTimeout),
		},
		// Fail closed: extproc authenticates and meters requests, so letting
		// them through unprocessed would serve unauthenticated traffic.
		FailureModeAllow: false,
		// Headers are sent so extproc can authenticate before the body
		// arrives; the request body is BUFFERED so extproc can route on the
		// model in it (body reply sets catalog.RouteHeader + clear_route_cache).
		// The response body mode is switched per response with mode_override.
		ProcessingMode: &extprocv3.ProcessingMode{
			RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
			ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
			RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
			ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
			RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
			ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
		},
		// The default of 200 ms is too short for a 32 MiB body.
		MessageTimeout:    durationpb.New(cfg.Limits.ExtProcMessageTimeout),
		AllowModeOverride: true,
		// Dynamic metadata in any namespace not listed here is dropped.
		MetadataOptions: &extprocv3.MetadataOptions{
			ReceivingNamespaces: &extprocv3.MetadataOptions_MetadataNamespaces{
				Untyped: []string{catalog.MetadataNamespace},
			},
		},
	}
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: l.Name,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsConfigSource(),
			RouteConfigName: catalog.ListenerRouteConfig,
		}},
		StreamIdleTimeout: durationpb.New(cfg.Limits.StreamIdleTimeout),
		GenerateRequestId: wrapperspb.Bool(true),
		// OpenAI clients read x-request-id from every response.
		AlwaysSetRequestIdInResponse: true,
		// Order matters: ext_proc must run before the router picks a route,
		// and the router must be last.
		HttpFilters: []*hcmv3.HttpFilter{
			{Name: FilterExtProc, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(extProc)}},
			{Name: FilterRouter, ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})}},
		},
	}
	chain := &listenerv3.FilterChain{
		Filters: []*listenerv3.Filter{{
			Name:       FilterHTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}},
	}
	var secret *tlsv3.Secret
	if l.TLS != nil {
		secret = &tlsv3.Secret{
			Name: SecretName(l.Name),
			Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
				CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: l.TLS.CertFile}},
				PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: l.TLS.KeyFile}},
			}},
		}
		// The certificate travels over SDS rather than inline so a rotated
		// certificate is a secret update, not a listener drain.
		downstream := &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{
				Name:      secret.Name,
				SdsConfig: adsConfigSource(),
			}},
			TlsParams: &tlsv3.TlsParameters{
				TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
			},
			AlpnProtocols: []string{"h2", "http/1.1"},
		}}
		chain.TransportSocket = &corev3.TransportSocket{
			Name:       TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(downstream)},
		}
	}
	lis := &listenerv3.Listener{
		Name:                          l.Name,
		Address:                       socketAddress(host, port),
		PerConnectionBufferLimitBytes: wrapperspb.UInt32(uint32(limit)),
		FilterChains:                  []*listenerv3.FilterChain{chain},
	}
	return lis, secret, nil
}

// prefixRewrite returns the prefix_rewrite that maps ModelRoutePrefix onto a
// provider's base URL path, or "" when the path already is /v1. OpenAI-style
// base URLs end in the API version, so a request for /v1/chat/completions
// goes to <base path>/chat/completions.
func prefixRewrite(baseURL string) (string, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return "", fmt.Errorf("base_url: %w", err)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p+"/" == ModelRoutePrefix {
		return "", nil
	}
	return p + "/", nil
}

func buildRoutes(cfg *config.Config) (*routev3.RouteConfiguration, error) {
	vh := &routev3.VirtualHost{Name: VirtualHostName, Domains: []string{"*"}}
	// First match wins: model routes, each keyed on the header extproc sets,
	// come before the catch-all.
	for _, m := range cfg.Models {
		if len(m.Providers) == 0 {
			return nil, fmt.Errorf("controlplane: model %q has no provider", m.ID)
		}
		p, ok := cfg.Provider(m.Providers[0].Provider)
		if !ok {
			return nil, fmt.Errorf("controlplane: model %q: unknown provider %q", m.ID, m.Providers[0].Provider)
		}
		rewrite, err := prefixRewrite(p.BaseURL)
		if err != nil {
			return nil, fmt.Errorf("controlplane: provider %q: %w", p.Name, err)
		}
		vh.Routes = append(vh.Routes, &routev3.Route{
			Name: ModelRouteName(m.ID),
			Match: &routev3.RouteMatch{
				PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ModelRoutePrefix},
				Headers: []*routev3.HeaderMatcher{{
					Name: catalog.RouteHeader,
					HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
						MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.ID},
					}},
				}},
			},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{
				ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: catalog.ClusterName(p.Name)},
				// The default 15 s covers the whole response, which a long
				// completion or an SSE stream exceeds; 0 disables it and
				// idle_timeout catches stalled upstreams instead.
				Timeout:              durationpb.New(0),
				IdleTimeout:          durationpb.New(cfg.Limits.StreamIdleTimeout),
				HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
				PrefixRewrite:        rewrite,
			}},
		})
	}
	notFound := apierror.NotFound("this path")
	var headers []*corev3.HeaderValueOption
	for k, v := range notFound.Headers() {
		headers = append(headers, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: v},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	vh.Routes = append(vh.Routes, &routev3.Route{
		Name:  NotFoundRouteName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: uint32(notFound.Status),
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(notFound.JSON())}},
		}},
		ResponseHeadersToAdd: headers,
	})
	return &routev3.RouteConfiguration{
		Name:         catalog.ListenerRouteConfig,
		VirtualHosts: []*routev3.VirtualHost{vh},
	}, nil
}

// buildCluster returns the provider's cluster and, when the cluster is EDS,
// the ClusterLoadAssignment served separately under the cluster's name.
func buildCluster(p config.Provider) (*clusterv3.Cluster, *endpointv3.ClusterLoadAssignment, error) {
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

	name := catalog.ClusterName(p.Name)
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: name,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality: &corev3.Locality{Region: p.Region},
			Priority: 0,
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
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			catalog.MetadataNamespace: {Fields: map[string]*structpb.Value{
				"provider": structpb.NewStringValue(p.Name),
				"kind":     structpb.NewStringValue(p.Kind),
				"region":   structpb.NewStringValue(p.Region),
			}},
		}},
	}
	var eds *endpointv3.ClusterLoadAssignment
	if net.ParseIP(host) != nil {
		// EDS carries only IP addresses in Envoy, so only IP literals go there.
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS}
		c.EdsClusterConfig = &clusterv3.Cluster_EdsClusterConfig{EdsConfig: adsConfigSource(), ServiceName: name}
		eds = cla
	} else {
		// LOGICAL_DNS re-resolves the name and connects to the first answer,
		// which suits vendor endpoints behind DNS load balancers.
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS}
		c.LoadAssignment = cla
	}
	if u.Scheme == "https" {
		upstream := &tlsv3.UpstreamTlsContext{}
		if net.ParseIP(host) == nil { // SNI carries host names only (RFC 6066)
			upstream.Sni = host
		}
		c.TransportSocket = &corev3.TransportSocket{
			Name:       TransportSocketTLS,
			ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(upstream)},
		}
	}
	return c, eds, nil
}
