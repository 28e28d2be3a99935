package envoy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	overloadv3 "github.com/envoyproxy/go-control-plane/envoy/config/overload/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	downstreamconnectionsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	fixedheapv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// Defaults of BootstrapOptions. The ports are the ones `switchyard
// controlplane`, `switchyard extproc` and envoyproxy/ratelimit listen on.
const (
	DefaultNodeID                   = "switchyard-envoy"
	DefaultNodeCluster              = "switchyard"
	DefaultXDS                      = "127.0.0.1:18000"
	DefaultExtProc                  = "127.0.0.1:18001"
	DefaultRateLimit                = "127.0.0.1:8081"
	DefaultAdmin                    = "127.0.0.1:9901"
	DefaultMaxHeapBytes             = 2 << 30
	DefaultMaxDownstreamConnections = 50000
)

// Names in the bootstrap.
const (
	// AdminCluster reaches Envoy's own admin interface, for the readiness
	// listener.
	AdminCluster = "envoy_admin"
	// ReadinessListener exposes only the admin interface's /ready.
	ReadinessListener = "readiness"
	// ReadyPath is the admin path that answers 200 once Envoy has its
	// listeners and clusters from the control plane.
	ReadyPath = "/ready"

	monitorHeap        = "envoy.resource_monitors.fixed_heap"
	monitorConnections = "envoy.resource_monitors.global_downstream_max_connections"
)

// BootstrapOptions say where Envoy finds the other components.
type BootstrapOptions struct {
	NodeID      string // default DefaultNodeID; `envoy --service-node` overrides it
	NodeCluster string // default DefaultNodeCluster
	// Region is node.locality.region, the gateway instance's home region.
	Region string
	// XDS is the control plane's ADS address, host:port.
	XDS string
	// ExtProc is extproc's address: host:port, or unix:/path for a sidecar.
	ExtProc string
	// RateLimit is the rate limit service's gRPC address, host:port.
	RateLimit string
	// Admin is the admin interface's address; it must be loopback, because
	// the admin interface can stop Envoy and dump its configuration.
	Admin string
	// Readiness, when set, is the address of a listener that exposes only
	// the admin interface's /ready, for orchestrators' probes.
	Readiness string
	// MaxHeapBytes is the heap size at which the overload manager starts
	// shedding load: 32 MiB request bodies are buffered, so memory, not
	// CPU, is what runs out first.
	MaxHeapBytes uint64
	// MaxDownstreamConnections bounds client connections process-wide.
	MaxDownstreamConnections int64
}

func (o BootstrapOptions) withDefaults() BootstrapOptions {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&o.NodeID, DefaultNodeID)
	def(&o.NodeCluster, DefaultNodeCluster)
	def(&o.XDS, DefaultXDS)
	def(&o.ExtProc, DefaultExtProc)
	def(&o.RateLimit, DefaultRateLimit)
	def(&o.Admin, DefaultAdmin)
	if o.MaxHeapBytes == 0 {
		o.MaxHeapBytes = DefaultMaxHeapBytes
	}
	if o.MaxDownstreamConnections == 0 {
		o.MaxDownstreamConnections = DefaultMaxDownstreamConnections
	}
	return o
}

// Args are the `switchyard envoy bootstrap` flags that render these options,
// recorded in the rendered file so it can be regenerated.
func (o BootstrapOptions) Args() []string {
	var args []string
	add := func(flag, v, def string) {
		if v != "" && v != def {
			args = append(args, "--"+flag, v)
		}
	}
	add("node-id", o.NodeID, DefaultNodeID)
	add("node-cluster", o.NodeCluster, DefaultNodeCluster)
	add("region", o.Region, "")
	add("xds", o.XDS, DefaultXDS)
	add("extproc", o.ExtProc, DefaultExtProc)
	add("ratelimit", o.RateLimit, DefaultRateLimit)
	add("admin", o.Admin, DefaultAdmin)
	add("readiness", o.Readiness, "")
	if o.MaxHeapBytes != 0 && o.MaxHeapBytes != DefaultMaxHeapBytes {
		args = append(args, "--max-heap-bytes", strconv.FormatUint(o.MaxHeapBytes, 10))
	}
	if o.MaxDownstreamConnections != 0 && o.MaxDownstreamConnections != DefaultMaxDownstreamConnections {
		args = append(args, "--max-connections", strconv.FormatInt(o.MaxDownstreamConnections, 10))
	}
	return args
}

// Bootstrap returns Envoy's bootstrap: the node, the admin interface on
// loopback, ADS over HTTP/2 to the control plane for every listener and
// cluster, static clusters for the control plane, extproc and the rate limit
// service, and the overload manager's memory and connection limits.
func Bootstrap(opts BootstrapOptions) (*bootstrapv3.Bootstrap, error) {
	o := opts.withDefaults()
	admin, err := tcpAddress(o.Admin)
	if err != nil {
		return nil, fmt.Errorf("envoy: admin: %w", err)
	}
	if ip := net.ParseIP(admin.GetSocketAddress().GetAddress()); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("envoy: admin address %s must be a loopback IP: the admin interface can stop Envoy", o.Admin)
	}
	var clusters []*clusterv3.Cluster
	for _, c := range []struct{ name, addr string }{
		{catalog.XDSCluster, o.XDS},
		{catalog.ExtProcCluster, o.ExtProc},
		{controlplane.RateLimitCluster, o.RateLimit},
	} {
		gc, err := grpcCluster(c.name, c.addr)
		if err != nil {
			return nil, fmt.Errorf("envoy: %s: %w", c.name, err)
		}
		clusters = append(clusters, gc)
	}
	var listeners []*listenerv3.Listener
	if o.Readiness != "" {
		addr, err := tcpAddress(o.Readiness)
		if err != nil {
			return nil, fmt.Errorf("envoy: readiness: %w", err)
		}
		clusters = append(clusters, staticCluster(AdminCluster, admin))
		listeners = append(listeners, readinessListener(addr))
	}
	ads := &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
	b := &bootstrapv3.Bootstrap{
		Node: &corev3.Node{Id: o.NodeID, Cluster: o.NodeCluster},
		Admin: &bootstrapv3.Admin{
			Address: admin,
		},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{Listeners: listeners, Clusters: clusters},
		DynamicResources: &bootstrapv3.Bootstrap_DynamicResources{
			AdsConfig: &corev3.ApiConfigSource{
				ApiType:             corev3.ApiConfigSource_GRPC,
				TransportApiVersion: corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: catalog.XDSCluster},
				}}},
				SetNodeOnFirstMessageOnly: true,
			},
			LdsConfig: ads,
			CdsConfig: proto.Clone(ads).(*corev3.ConfigSource),
		},
		OverloadManager: overloadManager(o),
	}
	if o.Region != "" {
		b.Node.Locality = &corev3.Locality{Region: o.Region}
	}
	return b, nil
}

// overloadManager sheds load before Envoy runs out of memory: it resets the
// streams holding the most buffered memory (large request bodies) as the
// heap fills, shrinks the heap, and finally stops accepting requests; and it
// bounds client connections.
func overloadManager(o BootstrapOptions) *overloadv3.OverloadManager {
	threshold := func(v float64) *overloadv3.Trigger {
		return &overloadv3.Trigger{Name: monitorHeap, TriggerOneof: &overloadv3.Trigger_Threshold{
			Threshold: &overloadv3.ThresholdTrigger{Value: v},
		}}
	}
	return &overloadv3.OverloadManager{
		RefreshInterval: durationpb.New(250 * time.Millisecond),
		ResourceMonitors: []*overloadv3.ResourceMonitor{
			{Name: monitorHeap, ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: mustAny(
				&fixedheapv3.FixedHeapConfig{MaxHeapSizeBytes: o.MaxHeapBytes})}},
			{Name: monitorConnections, ConfigType: &overloadv3.ResourceMonitor_TypedConfig{TypedConfig: mustAny(
				&downstreamconnectionsv3.DownstreamConnectionsConfig{MaxActiveDownstreamConnections: o.MaxDownstreamConnections})}},
		},
		Actions: []*overloadv3.OverloadAction{
			{Name: "envoy.overload_actions.reset_high_memory_stream", Triggers: []*overloadv3.Trigger{{
				Name: monitorHeap,
				TriggerOneof: &overloadv3.Trigger_Scaled{Scaled: &overloadv3.ScaledTrigger{
					ScalingThreshold: 0.85, SaturationThreshold: 0.95,
				}},
			}}},
			{Name: "envoy.overload_actions.shrink_heap", Triggers: []*overloadv3.Trigger{threshold(0.95)}},
			{Name: "envoy.overload_actions.stop_accepting_requests", Triggers: []*overloadv3.Trigger{threshold(0.98)}},
		},
		// reset_high_memory_stream needs per-stream buffer accounting; track
		// streams from 1 MiB (2^20) up, where large request bodies are.
		BufferFactoryConfig: &overloadv3.BufferFactoryConfig{MinimumAccountToTrackPowerOfTwo: 20},
	}
}

// grpcCluster is a static cluster speaking gRPC, hence HTTP/2 (Envoy rejects
// a gRPC service on an HTTP/1.1 cluster). Keepalive pings notice a dead
// connection on the long-lived ADS and ext_proc streams. The circuit
// breakers are raised because every request holds an ext_proc stream open:
// Envoy's default of 1024 concurrent requests per cluster would fail
// request 1025 with 500.
func grpcCluster(name, addr string) (*clusterv3.Cluster, error) {
	var (
		a   *corev3.Address
		typ = clusterv3.Cluster_STATIC
	)
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if path == "" {
			return nil, fmt.Errorf("empty unix socket path in %q", addr)
		}
		a = &corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: path}}}
	} else {
		var err error
		if a, err = tcpAddress(addr); err != nil {
			return nil, err
		}
		if net.ParseIP(a.GetSocketAddress().GetAddress()) == nil {
			// A service name (compose, Kubernetes): resolve it and follow
			// changes.
			typ = clusterv3.Cluster_STRICT_DNS
		}
	}
	c := staticCluster(name, a)
	c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: typ}
	if typ == clusterv3.Cluster_STRICT_DNS {
		c.DnsLookupFamily = clusterv3.Cluster_V4_PREFERRED
	}
	c.TypedExtensionProtocolOptions = map[string]*anypb.Any{
		controlplane.HTTPProtocolOptionsKey: mustAny(&upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{
				ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{
						Http2ProtocolOptions: &corev3.Http2ProtocolOptions{ConnectionKeepalive: &corev3.KeepaliveSettings{
							Interval: durationpb.New(30 * time.Second),
							Timeout:  durationpb.New(5 * time.Second),
						}},
					},
				},
			},
		}),
	}
	const many = 1 << 20
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
		MaxConnections:     wrapperspb.UInt32(many),
		MaxPendingRequests: wrapperspb.UInt32(many),
		MaxRequests:        wrapperspb.UInt32(many),
	}}}
	return c, nil
}

// staticCluster is a one-endpoint STATIC cluster.
func staticCluster(name string, a *corev3.Address) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout:       durationpb.New(controlplane.ConnectTimeout),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{
			ClusterName: name,
			Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: a}},
			}}}},
		},
	}
}

// readinessListener forwards GET /ready, and nothing else, to the admin
// interface, so a probe can reach it while the admin interface stays on
// loopback.
func readinessListener(addr *corev3.Address) *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: ReadinessListener,
		CodecType:  hcmv3.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: ReadinessListener,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    ReadinessListener,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: ReadyPath}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: AdminCluster},
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       controlplane.FilterRouter,
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{
		Name:    ReadinessListener,
		Address: addr,
		// A probe must still get an answer when the connection limit is hit.
		IgnoreGlobalConnLimit: true,
		FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name:       controlplane.FilterHTTPConnectionManager,
			ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(hcm)},
		}}}},
	}
}

// tcpAddress parses host:port.
func tcpAddress(hostport string) (*corev3.Address, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", hostport, err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 || host == "" {
		return nil, fmt.Errorf("address %q: want host:port", hostport)
	}
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       host,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}, nil
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil { // only fails for unregistered types, which ours are not
		panic(fmt.Sprintf("envoy: pack %T: %v", m, err))
	}
	return a
}
