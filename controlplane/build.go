// Package controlplane owns turning configuration into xDS resources and
// serving them over ADS.
//
// The control plane is the single source of truth: Build turns a
// *config.Config into one go-control-plane snapshot per home region
// (BuildRegion), and Server serves them to Envoy, to Switchyard's own Go
// data plane and to every extproc (which subscribes to the RTDS resource
// catalog.RuntimeName), each node the snapshot of its locality's region.
// Every consumer reads the same resources, so the names produced here are a
// contract; they are exported as constants and functions where a consumer
// needs them.
//
// Routing across providers (docs/routing-design.md) is Envoy's: per model,
// routes on the model and extproc's first choice to aggregate clusters
// that order the providers for failover, a retry policy that moves each
// retry to the next provider, outlier detection on provider clusters, and
// an upstream ext_proc filter that adapts every attempt to its provider.
// Server also owns the configuration in force and its live changes: file
// reloads (WatchFile), routing edits (Modify), drains, each a new snapshot
// version, rolled out catalog first so that extprocs and data planes a
// version apart never disagree on a route.
package controlplane

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// Names of the Envoy extensions the generated resources use. The data plane
// recognises filters and transport sockets by these names, as Envoy does.
const (
	FilterHTTPConnectionManager = "envoy.filters.network.http_connection_manager"
	FilterExtProc               = "envoy.filters.http.ext_proc"
	FilterRateLimit             = "envoy.filters.http.ratelimit"
	FilterRouter                = "envoy.filters.http.router"
	// FilterUpstreamCodec ends every upstream HTTP filter chain.
	FilterUpstreamCodec = "envoy.filters.http.upstream_codec"
	// ClusterTypeAggregate is the custom cluster type of failover clusters.
	ClusterTypeAggregate     = "envoy.clusters.aggregate"
	TransportSocketTLS       = "envoy.transport_sockets.tls"
	AccessLoggerStdout       = "envoy.access_loggers.stdout"
	FormatterReqWithoutQuery = "envoy.formatter.req_without_query"
	// HTTPProtocolOptionsKey is the typed_extension_protocol_options key of
	// a cluster's upstream HTTP settings.
	HTTPProtocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
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
	// ConnectTimeout is every generated cluster's connect timeout.
	ConnectTimeout = 5 * time.Second
	// BackendsCluster is the CDS cluster of the Go backends service.
	BackendsCluster = "switchyard_backends"
	// RateLimitCluster is the bootstrap cluster that reaches the rate limit
	// service (envoyproxy/ratelimit), named in the ratelimit filter.
	RateLimitCluster = "switchyard_ratelimit"
)

// BackendPaths are the paths the Go backends service answers. Their routes
// come before the model routes: first match wins.
var BackendPaths = []string{"/v1/files", "/v1/batches", "/v1/responses", "/v1/conversations", "/v1/vector_stores", "/v1/models"}

// ModelRouteName is the name of a model's default route, which sends it to
// its providers in failover order.
func ModelRouteName(modelID string) string { return "model:" + modelID }

// ModelProviderRouteName is the name of the route taken when extproc's
// first choice for a model is provider.
func ModelProviderRouteName(modelID, provider string) string {
	return "model:" + modelID + "@" + provider
}

// BackendRouteName is the name of the route that sends path to the backends.
func BackendRouteName(path string) string { return "backend:" + path }

// SecretName is the SDS secret holding a TLS listener's certificate.
func SecretName(listener string) string { return "listener_" + listener }

// Build returns a consistent snapshot of every resource cfg implies, with all
// resource types at version. cfg must have passed config validation; Build
// still rejects what Envoy would reject (for example a listener host that is
// not an IP address), and it checks the result with snap.Consistent() and the
// protoc-gen-validate rules of every message, including the typed configs
// packed in Anys, so a snapshot it returns is one Envoy accepts. The Envoy
// load-time checks PGV cannot express live in package envoy, which runs on
// every snapshot of every example configuration in the tests.
//
// The snapshot is for a gateway in cfg.Region; BuildRegion builds it for
// another home region.
func Build(cfg *config.Config, version string) (*cachev3.Snapshot, error) {
	if cfg == nil {
		return nil, errors.New("controlplane: nil config")
	}
	return BuildRegion(cfg, cfg.Region, version)
}

// BuildRegion is Build for a gateway whose home region is region: its
// providers' endpoints are priority 0 (the others 1), they come first in
// every failover order, and the catalog names region as the home region.
func BuildRegion(cfg *config.Config, region, version string) (*cachev3.Snapshot, error) {
	return buildRegion(cfg, cfg, region, version)
}

// buildRegion is BuildRegion with the catalog built from cat, which may
// route more than cfg (routes being retired, see Server).
func buildRegion(cfg, cat *config.Config, region, version string) (*cachev3.Snapshot, error) {
	if cfg == nil || cat == nil {
		return nil, errors.New("controlplane: nil config")
	}
	if region != cfg.Region {
		c := *cfg
		c.Region = region
		cfg = &c
	}
	if region != cat.Region {
		c := *cat
		c.Region = region
		cat = &c
	}
	var (
		listeners []types.Resource
		secrets   []types.Resource
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
	clusters, endpoints, err := buildClusters(cfg)
	if err != nil {
		return nil, err
	}
	rt, err := catalog.FromConfig(cat).Runtime()
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}

	// Every type is present, even when empty, so each has a version: a
	// subscriber's first request is then always answered (an empty answer
	// included), and a client waiting for its first response of every type,
	// like adsclient's Synced, does not wait forever for SDS without TLS
	// listeners or EDS without IP-literal providers.
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType:        listeners,
		resourcev3.RouteType:           {routes},
		resourcev3.ClusterType:         clusters,
		resourcev3.EndpointType:        endpoints,
		resourcev3.SecretType:          secrets,
		resourcev3.RuntimeType:         {rt},
		resourcev3.RateLimitConfigType: {RateLimitConfig(cfg)},
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
