package envoy

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// Config is everything one Envoy loads: the bootstrap it starts with and the
// xDS resources the control plane serves it.
type Config struct {
	Bootstrap *bootstrapv3.Bootstrap
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	Secrets   []*tlsv3.Secret
	// Other holds the remaining xDS resources (the RTDS catalog, the rate
	// limit service's RateLimitConfig): validated, not cross-referenced.
	Other []types.Resource
}

// FromSnapshot collects a snapshot's resources, in name order, with the
// bootstrap b (which may be nil).
func FromSnapshot(b *bootstrapv3.Bootstrap, snap *cachev3.Snapshot) *Config {
	c := &Config{Bootstrap: b}
	for _, typ := range SnapshotTypes(snap) {
		res := snap.GetResources(typ)
		names := make([]string, 0, len(res))
		for n := range res {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			switch r := res[n].(type) {
			case *listenerv3.Listener:
				c.Listeners = append(c.Listeners, r)
			case *routev3.RouteConfiguration:
				c.Routes = append(c.Routes, r)
			case *clusterv3.Cluster:
				c.Clusters = append(c.Clusters, r)
			case *endpointv3.ClusterLoadAssignment:
				c.Endpoints = append(c.Endpoints, r)
			case *tlsv3.Secret:
				c.Secrets = append(c.Secrets, r)
			default:
				c.Other = append(c.Other, r)
			}
		}
	}
	return c
}

// SnapshotTypes lists the resource types a snapshot holds: Envoy's in the
// order Envoy warms them, then any others by type URL.
func SnapshotTypes(snap *cachev3.Snapshot) []resourcev3.Type {
	order := []resourcev3.Type{resourcev3.ListenerType, resourcev3.RouteType, resourcev3.ClusterType,
		resourcev3.EndpointType, resourcev3.SecretType, resourcev3.RuntimeType}
	var rest []resourcev3.Type
	for i := range types.UnknownType {
		typ, err := cachev3.GetResponseTypeURL(i)
		if err == nil && !slices.Contains(order, typ) {
			rest = append(rest, typ)
		}
	}
	sort.Strings(rest)
	var out []resourcev3.Type
	for _, typ := range append(order, rest...) {
		if len(snap.GetResources(typ)) > 0 {
			out = append(out, typ)
		}
	}
	return out
}

// Options tune Validate.
type Options struct {
	// ExtProcNamespaces are the dynamic metadata namespaces the external
	// processor writes; every ext_proc filter must receive all of them, or
	// Envoy drops the metadata. Default: catalog.MetadataNamespace.
	ExtProcNamespaces []string
}

// Validate checks c as Envoy would when loading it, offline:
//
//   - every message against its protoc-gen-validate rules, including the
//     contents of every Any, to any depth (ValidateAll stops at Anys);
//   - the xDS resources with snapshot.Consistent();
//   - the load-time checks Envoy makes that PGV cannot express: the router
//     is the last HTTP filter; every referenced cluster exists among the
//     bootstrap's static clusters and CDS; clusters reached over gRPC speak
//     HTTP/2; the ADS cluster is static; ext_proc has exactly one of
//     grpc_service and http_service, FULL_DUPLEX_STREAMED bodies come with
//     trailers SEND and fail-closed, and receiving_namespaces lists every
//     namespace the processor writes; xDS and RLS transports are V3;
//     referenced SDS secrets are served and hold the right kind of secret;
//     listener names and addresses are unique; json_format holds only
//     strings, numbers, lists and structs; a LOGICAL_DNS cluster has one
//     endpoint; per-route filter configs name a filter of the connection
//     manager that uses the route; aggregate clusters use CLUSTER_PROVIDED
//     and name existing, non-aggregate clusters other than themselves;
//     upstream HTTP filter chains end with the upstream codec; retry
//     policies name known retry_on conditions, list retriable_status_codes
//     only with "retriable-status-codes", and give their host predicates
//     and retry priority the configs of the extensions they name.
//
// The error joins one error per problem, each naming the resource and field.
func Validate(c *Config, opts ...Options) error {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.ExtProcNamespaces == nil {
		o.ExtProcNamespaces = []string{catalog.MetadataNamespace}
	}
	k := &checker{c: c, opts: o,
		clusters:       map[string]*clusterv3.Cluster{},
		staticClusters: map[string]bool{},
		staticSecrets:  map[string]*tlsv3.Secret{},
		sdsSecrets:     map[string]*tlsv3.Secret{},
		routes:         map[string]*routev3.RouteConfiguration{},
	}
	k.run()
	return errors.Join(k.errs...)
}

type checker struct {
	c    *Config
	opts Options
	errs []error

	clusters       map[string]*clusterv3.Cluster // static and CDS
	staticClusters map[string]bool
	staticSecrets  map[string]*tlsv3.Secret
	sdsSecrets     map[string]*tlsv3.Secret
	routes         map[string]*routev3.RouteConfiguration
	// routeUsers maps a route configuration to the HTTP filter names of the
	// connection managers that use it.
	routeUsers []routeUse
}

type routeUse struct {
	user    string // "listener \"public\""
	rc      *routev3.RouteConfiguration
	filters []string
}

func (k *checker) fail(resource, field, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if field != "" {
		msg = field + ": " + msg
	}
	k.errs = append(k.errs, fmt.Errorf("%s: %s", resource, msg))
}

// resource is one top-level message and the label errors name it by.
type resource struct {
	label string
	msg   proto.Message
}

func (k *checker) resources() []resource {
	var out []resource
	if b := k.c.Bootstrap; b != nil {
		out = append(out, resource{"bootstrap", b})
	}
	for _, l := range k.c.Listeners {
		out = append(out, resource{fmt.Sprintf("listener %q", l.GetName()), l})
	}
	for _, r := range k.c.Routes {
		out = append(out, resource{fmt.Sprintf("route config %q", r.GetName()), r})
	}
	for _, cl := range k.c.Clusters {
		out = append(out, resource{fmt.Sprintf("cluster %q", cl.GetName()), cl})
	}
	for _, e := range k.c.Endpoints {
		out = append(out, resource{fmt.Sprintf("endpoints %q", e.GetClusterName()), e})
	}
	for _, s := range k.c.Secrets {
		out = append(out, resource{fmt.Sprintf("secret %q", s.GetName()), s})
	}
	for _, r := range k.c.Other {
		out = append(out, resource{fmt.Sprintf("%s %q", r.ProtoReflect().Descriptor().Name(), cachev3.GetResourceName(r)), r})
	}
	return out
}

func (k *checker) run() {
	for _, r := range k.resources() {
		if err := controlplane.Validate(r.msg); err != nil {
			k.fail(r.label, "", "%v", err)
		}
	}
	k.consistent()
	k.index()
	k.checkListeners()
	for _, r := range k.resources() {
		walk(r.msg.ProtoReflect(), "", func(path string, m proto.Message) { k.visit(r.label, path, m) })
	}
	k.checkPerFilterConfigs()
	for _, cl := range k.allClusters() {
		k.checkCluster(cl.label, cl.c)
	}
}

func (k *checker) consistent() {
	c := k.c
	if len(c.Listeners)+len(c.Routes)+len(c.Clusters)+len(c.Endpoints)+len(c.Secrets) == 0 {
		return
	}
	var ls, rs, cs, es, ss []types.Resource
	for _, r := range c.Listeners {
		ls = append(ls, r)
	}
	for _, r := range c.Routes {
		rs = append(rs, r)
	}
	for _, r := range c.Clusters {
		cs = append(cs, r)
	}
	for _, r := range c.Endpoints {
		es = append(es, r)
	}
	for _, r := range c.Secrets {
		ss = append(ss, r)
	}
	snap, err := cachev3.NewSnapshot("validate", map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: ls, resourcev3.RouteType: rs, resourcev3.ClusterType: cs,
		resourcev3.EndpointType: es, resourcev3.SecretType: ss,
	})
	if err != nil {
		k.fail("snapshot", "", "%v", err)
		return
	}
	if err := snap.Consistent(); err != nil {
		k.fail("snapshot", "", "not consistent: %v", err)
	}
}

type namedCluster struct {
	label string
	c     *clusterv3.Cluster
}

func (k *checker) allClusters() []namedCluster {
	var out []namedCluster
	for i, cl := range k.c.Bootstrap.GetStaticResources().GetClusters() {
		out = append(out, namedCluster{fmt.Sprintf("bootstrap static_resources.clusters[%d] %q", i, cl.GetName()), cl})
	}
	for _, cl := range k.c.Clusters {
		out = append(out, namedCluster{fmt.Sprintf("cluster %q", cl.GetName()), cl})
	}
	return out
}

// index records the clusters, secrets and route configurations that exist,
// and reports duplicate names among them.
func (k *checker) index() {
	for _, cl := range k.allClusters() {
		if _, dup := k.clusters[cl.c.GetName()]; dup {
			k.fail(cl.label, "name", "duplicate cluster name %q", cl.c.GetName())
		}
		k.clusters[cl.c.GetName()] = cl.c
	}
	for _, cl := range k.c.Bootstrap.GetStaticResources().GetClusters() {
		k.staticClusters[cl.GetName()] = true
	}
	for i, s := range k.c.Bootstrap.GetStaticResources().GetSecrets() {
		if _, dup := k.staticSecrets[s.GetName()]; dup {
			k.fail("bootstrap", fmt.Sprintf("static_resources.secrets[%d].name", i), "duplicate secret name %q", s.GetName())
		}
		k.staticSecrets[s.GetName()] = s
	}
	for _, s := range k.c.Secrets {
		if _, dup := k.sdsSecrets[s.GetName()]; dup {
			k.fail(fmt.Sprintf("secret %q", s.GetName()), "name", "duplicate secret name")
		}
		k.sdsSecrets[s.GetName()] = s
	}
	for _, r := range k.c.Routes {
		if _, dup := k.routes[r.GetName()]; dup {
			k.fail(fmt.Sprintf("route config %q", r.GetName()), "name", "duplicate route configuration name")
		}
		k.routes[r.GetName()] = r
	}
}

// checkListeners: names and addresses unique across the bootstrap's static
// listeners and LDS. Two listeners on one port where either binds the
// wildcard address also collide: the second bind fails.
func (k *checker) checkListeners() {
	type bound struct {
		label      string
		host, port string
	}
	names := map[string]string{}
	var addrs []bound
	add := func(label string, l *listenerv3.Listener) {
		if prev, dup := names[l.GetName()]; dup {
			k.fail(label, "name", "listener name %q is also %s's", l.GetName(), prev)
		}
		names[l.GetName()] = label
		var b bound
		switch a := l.GetAddress().GetAddress().(type) {
		case *corev3.Address_SocketAddress:
			b = bound{label, a.SocketAddress.GetAddress(), strconv.Itoa(int(a.SocketAddress.GetPortValue()))}
			if a.SocketAddress.GetNamedPort() != "" {
				b.port = a.SocketAddress.GetNamedPort()
			}
		case *corev3.Address_Pipe:
			b = bound{label, "unix:" + a.Pipe.GetPath(), ""}
		default:
			return
		}
		for _, o := range addrs {
			wildcard := isWildcard(o.host) || isWildcard(b.host)
			if o.port == b.port && (o.host == b.host || (wildcard && b.port != "" && b.port != "0")) {
				k.fail(label, "address", "%s collides with %s's %s", net.JoinHostPort(b.host, b.port), o.label, net.JoinHostPort(o.host, o.port))
			}
		}
		addrs = append(addrs, b)
	}
	for i, l := range k.c.Bootstrap.GetStaticResources().GetListeners() {
		add(fmt.Sprintf("bootstrap static_resources.listeners[%d] %q", i, l.GetName()), l)
	}
	for _, l := range k.c.Listeners {
		add(fmt.Sprintf("listener %q", l.GetName()), l)
	}
}

func isWildcard(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// visit runs the checks of one message found anywhere in a resource.
func (k *checker) visit(res, path string, m proto.Message) {
	switch v := m.(type) {
	case *hcmv3.HttpConnectionManager:
		k.checkHCM(res, path, v)
	case *extprocv3.ExternalProcessor:
		k.checkExtProc(res, path, v)
	case *extprocv3.ExtProcPerRoute:
		if pm := v.GetOverrides().GetProcessingMode(); pm != nil {
			// A per-route override cannot change failure_mode_allow's
			// effect here; a FULL_DUPLEX override still needs trailers.
			k.checkFullDuplex(res, join(path, "overrides.processing_mode"), pm, false)
		}
	case *corev3.GrpcService_EnvoyGrpc:
		k.checkGrpcCluster(res, join(path, "cluster_name"), v.GetClusterName())
	case *corev3.ApiConfigSource:
		if v.GetTransportApiVersion() != corev3.ApiVersion_V3 {
			k.fail(res, join(path, "transport_api_version"), "must be V3 (Envoy rejects %s)", v.GetTransportApiVersion())
		}
	case *ratelimitconfv3.RateLimitServiceConfig:
		if v.GetTransportApiVersion() != corev3.ApiVersion_V3 {
			k.fail(res, join(path, "transport_api_version"), "must be V3 (Envoy rejects %s)", v.GetTransportApiVersion())
		}
	case *routev3.RetryPolicy:
		k.checkRetryPolicy(res, path, v)
	case *routev3.RouteAction:
		switch cs := v.GetClusterSpecifier().(type) {
		case *routev3.RouteAction_Cluster:
			k.checkClusterRef(res, join(path, "cluster"), cs.Cluster)
		case *routev3.RouteAction_WeightedClusters:
			for i, w := range cs.WeightedClusters.GetClusters() {
				if w.GetName() != "" {
					k.checkClusterRef(res, join(path, fmt.Sprintf("weighted_clusters.clusters[%d].name", i)), w.GetName())
				}
			}
		}
	case *tlsv3.CommonTlsContext:
		for i, sc := range v.GetTlsCertificateSdsSecretConfigs() {
			k.checkSecretRef(res, join(path, fmt.Sprintf("tls_certificate_sds_secret_configs[%d]", i)), sc, "tls_certificate")
		}
		if sc := v.GetValidationContextSdsSecretConfig(); sc != nil {
			k.checkSecretRef(res, join(path, "validation_context_sds_secret_config"), sc, "validation_context")
		}
		if sc := v.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); sc != nil {
			k.checkSecretRef(res, join(path, "combined_validation_context.validation_context_sds_secret_config"), sc, "validation_context")
		}
	case *corev3.SubstitutionFormatString:
		if jf := v.GetJsonFormat(); jf != nil {
			checkJSONFormat(jf, join(path, "json_format"), func(field, msg string) { k.fail(res, field, "%s", msg) })
		}
	case *bootstrapv3.Bootstrap:
		for i, g := range v.GetDynamicResources().GetAdsConfig().GetGrpcServices() {
			name := g.GetEnvoyGrpc().GetClusterName()
			if name != "" && k.clusters[name] != nil && !k.staticClusters[name] {
				k.fail(res, fmt.Sprintf("dynamic_resources.ads_config.grpc_services[%d].envoy_grpc.cluster_name", i),
					"cluster %q must be a static cluster: Envoy needs it to fetch CDS", name)
			}
		}
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// checkHCM: the router is the last HTTP filter and nowhere else; the route
// configuration it names is served.
func (k *checker) checkHCM(res, path string, hcm *hcmv3.HttpConnectionManager) {
	filters := hcm.GetHttpFilters()
	var names []string
	for i, f := range filters {
		names = append(names, f.GetName())
		isRouter := f.GetTypedConfig().MessageIs(&routerv3.Router{})
		last := i == len(filters)-1
		switch {
		case isRouter && !last:
			k.fail(res, join(path, fmt.Sprintf("http_filters[%d]", i)), "the router %q must be the last http filter, not %d of %d", f.GetName(), i+1, len(filters))
		case !isRouter && last && f.GetConfigDiscovery() == nil:
			k.fail(res, join(path, fmt.Sprintf("http_filters[%d]", i)), "the last http filter is %q (%s), not the router", f.GetName(), f.GetTypedConfig().GetTypeUrl())
		}
	}
	if len(filters) == 0 {
		k.fail(res, join(path, "http_filters"), "no http filters: the router must be last")
	}
	switch rs := hcm.GetRouteSpecifier().(type) {
	case *hcmv3.HttpConnectionManager_Rds:
		name := rs.Rds.GetRouteConfigName()
		rc, ok := k.routes[name]
		if !ok {
			k.fail(res, join(path, "rds.route_config_name"), "route configuration %q is not served", name)
			return
		}
		k.routeUsers = append(k.routeUsers, routeUse{res, rc, names})
	case *hcmv3.HttpConnectionManager_RouteConfig:
		k.routeUsers = append(k.routeUsers, routeUse{res, rs.RouteConfig, names})
	}
}

// checkExtProc: the combinations of ext_proc settings Envoy refuses, and the
// receiving namespaces without which extproc's metadata is dropped.
func (k *checker) checkExtProc(res, path string, ep *extprocv3.ExternalProcessor) {
	if (ep.GetGrpcService() == nil) == (ep.GetHttpService() == nil) {
		k.fail(res, path, "exactly one of grpc_service and http_service must be set")
	}
	k.checkFullDuplex(res, join(path, "processing_mode"), ep.GetProcessingMode(), ep.GetFailureModeAllow())
	got := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
	for _, ns := range k.opts.ExtProcNamespaces {
		if !slices.Contains(got, ns) {
			k.fail(res, join(path, "metadata_options.receiving_namespaces.untyped"),
				"lacks %q, which the external processor writes: Envoy would drop that metadata (have %v)", ns, got)
		}
	}
}

func (k *checker) checkFullDuplex(res, path string, pm *extprocv3.ProcessingMode, failureModeAllow bool) {
	fd := extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED
	if pm.GetRequestBodyMode() == fd && pm.GetRequestTrailerMode() != extprocv3.ProcessingMode_SEND {
		k.fail(res, join(path, "request_trailer_mode"), "request_body_mode FULL_DUPLEX_STREAMED needs request_trailer_mode SEND")
	}
	if pm.GetResponseBodyMode() == fd && pm.GetResponseTrailerMode() != extprocv3.ProcessingMode_SEND {
		k.fail(res, join(path, "response_trailer_mode"), "response_body_mode FULL_DUPLEX_STREAMED needs response_trailer_mode SEND")
	}
	if (pm.GetRequestBodyMode() == fd || pm.GetResponseBodyMode() == fd) && failureModeAllow {
		k.fail(res, path, "FULL_DUPLEX_STREAMED needs failure_mode_allow false")
	}
}

func (k *checker) checkClusterRef(res, field, name string) {
	if _, ok := k.clusters[name]; !ok {
		k.fail(res, field, "cluster %q does not exist (not a static cluster, not in CDS)", name)
	}
}

// checkGrpcCluster: the cluster exists and speaks HTTP/2, as gRPC needs.
func (k *checker) checkGrpcCluster(res, field, name string) {
	cl, ok := k.clusters[name]
	if !ok {
		k.fail(res, field, "gRPC cluster %q does not exist (not a static cluster, not in CDS)", name)
		return
	}
	if !speaksHTTP2(cl) {
		k.fail(res, field, "cluster %q is reached over gRPC but does not enable HTTP/2 "+
			"(typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", name, controlplane.HTTPProtocolOptionsKey)
	}
}

func speaksHTTP2(cl *clusterv3.Cluster) bool {
	//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
	if cl.GetHttp2ProtocolOptions() != nil {
		return true
	}
	a, ok := cl.GetTypedExtensionProtocolOptions()[controlplane.HTTPProtocolOptionsKey]
	if !ok {
		return false
	}
	po := &upstreamhttpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(po); err != nil {
		return false
	}
	return po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
}

// checkSecretRef: an SDS reference names a secret that is served (by the
// bootstrap when the reference has no sds_config, over SDS otherwise) and
// holds the kind of secret the reference is for.
func (k *checker) checkSecretRef(res, field string, sc *tlsv3.SdsSecretConfig, kind string) {
	name := sc.GetName()
	var s *tlsv3.Secret
	if sc.GetSdsConfig() == nil {
		s = k.staticSecrets[name]
		if s == nil {
			k.fail(res, field, "secret %q is not among the bootstrap's static secrets", name)
			return
		}
	} else {
		s = k.sdsSecrets[name]
		if s == nil {
			k.fail(res, field, "secret %q is not served over SDS: the listener or cluster would never warm", name)
			return
		}
	}
	var has bool
	switch kind {
	case "tls_certificate":
		has = s.GetTlsCertificate() != nil
	case "validation_context":
		has = s.GetValidationContext() != nil
	}
	if !has {
		k.fail(res, field, "secret %q holds no %s", name, kind)
	}
}

// checkPerFilterConfigs: a typed_per_filter_config entry applies to the HTTP
// filter of that name; one that names no filter of a connection manager
// using the route configuration is silently ignored by Envoy.
func (k *checker) checkPerFilterConfigs() {
	for _, u := range k.routeUsers {
		check := func(field string, m map[string]*anypb.Any) {
			keys := make([]string, 0, len(m))
			for name := range m {
				keys = append(keys, name)
			}
			sort.Strings(keys)
			for _, name := range keys {
				if !slices.Contains(u.filters, name) {
					k.fail(fmt.Sprintf("route config %q", u.rc.GetName()), fmt.Sprintf("%s.typed_per_filter_config[%q]", field, name),
						"no http filter %q in %s's connection manager (filters %v): the override would be ignored", name, u.user, u.filters)
				}
			}
		}
		check("(route configuration)", u.rc.GetTypedPerFilterConfig())
		for i, vh := range u.rc.GetVirtualHosts() {
			check(fmt.Sprintf("virtual_hosts[%d]", i), vh.GetTypedPerFilterConfig())
			for j, r := range vh.GetRoutes() {
				check(fmt.Sprintf("virtual_hosts[%d].routes[%d]", i, j), r.GetTypedPerFilterConfig())
			}
		}
	}
}

// checkCluster: Envoy's LOGICAL_DNS clusters take exactly one endpoint;
// aggregate clusters and upstream HTTP filter chains are checked on their
// own.
func (k *checker) checkCluster(label string, cl *clusterv3.Cluster) {
	k.checkUpstreamFilters(label, cl)
	if ct := cl.GetClusterType(); ct != nil {
		k.checkAggregate(label, cl, ct)
		return
	}
	if cl.GetType() != clusterv3.Cluster_LOGICAL_DNS {
		return
	}
	eps := cl.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		k.fail(label, "load_assignment", "a LOGICAL_DNS cluster must have exactly one locality with exactly one endpoint")
	}
}

// checkAggregate: an envoy.clusters.aggregate cluster holds a ClusterConfig,
// has lb_policy CLUSTER_PROVIDED (Envoy refuses any other), no endpoints of
// its own, and members that exist, are not itself and are not aggregates
// (whose priorities Envoy's aggregate load balancer cannot flatten).
func (k *checker) checkAggregate(label string, cl *clusterv3.Cluster, ct *clusterv3.Cluster_CustomClusterType) {
	agg := &aggregatev3.ClusterConfig{}
	if !ct.GetTypedConfig().MessageIs(agg) {
		if ct.GetName() == controlplane.ClusterTypeAggregate {
			k.fail(label, "cluster_type.typed_config", "%s needs an %s, not %s", ct.GetName(),
				agg.ProtoReflect().Descriptor().FullName(), ct.GetTypedConfig().GetTypeUrl())
		}
		return
	}
	if ct.GetName() != controlplane.ClusterTypeAggregate {
		k.fail(label, "cluster_type.name", "an aggregate ClusterConfig needs the cluster type %q, not %q", controlplane.ClusterTypeAggregate, ct.GetName())
	}
	if err := ct.GetTypedConfig().UnmarshalTo(agg); err != nil {
		return // reported by PGV validation
	}
	if cl.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		k.fail(label, "lb_policy", "an aggregate cluster must use CLUSTER_PROVIDED, not %s", cl.GetLbPolicy())
	}
	if cl.GetLoadAssignment() != nil || cl.GetEdsClusterConfig() != nil {
		k.fail(label, "load_assignment", "an aggregate cluster has no endpoints of its own")
	}
	seen := map[string]bool{}
	for i, name := range agg.GetClusters() {
		field := fmt.Sprintf("cluster_type.typed_config.clusters[%d]", i)
		member, ok := k.clusters[name]
		switch {
		case name == cl.GetName():
			k.fail(label, field, "an aggregate cluster cannot include itself")
		case seen[name]:
			k.fail(label, field, "cluster %q is listed twice", name)
		case !ok:
			k.fail(label, field, "cluster %q does not exist (not a static cluster, not in CDS)", name)
		case member.GetClusterType().GetName() == controlplane.ClusterTypeAggregate:
			k.fail(label, field, "cluster %q is an aggregate cluster: aggregates cannot be nested", name)
		}
		seen[name] = true
	}
}

// checkUpstreamFilters: a cluster's upstream HTTP filter chain
// (HttpProtocolOptions.http_filters) must end with the upstream codec, and
// have it nowhere else. The filters' own settings (an upstream ext_proc's
// gRPC cluster, HTTP/2 on it, its namespaces) are checked where walk finds
// them.
func (k *checker) checkUpstreamFilters(label string, cl *clusterv3.Cluster) {
	a, ok := cl.GetTypedExtensionProtocolOptions()[controlplane.HTTPProtocolOptionsKey]
	if !ok {
		return
	}
	po := &upstreamhttpv3.HttpProtocolOptions{}
	if err := a.UnmarshalTo(po); err != nil {
		return // reported by PGV validation
	}
	filters := po.GetHttpFilters()
	for i, f := range filters {
		field := fmt.Sprintf("typed_extension_protocol_options[%q].http_filters[%d]", controlplane.HTTPProtocolOptionsKey, i)
		isCodec := f.GetTypedConfig().MessageIs(&upstreamcodecv3.UpstreamCodec{})
		last := i == len(filters)-1
		switch {
		case isCodec && !last:
			k.fail(label, field, "the upstream codec %q must be the last upstream http filter, not %d of %d", f.GetName(), i+1, len(filters))
		case !isCodec && last:
			k.fail(label, field, "the last upstream http filter is %q (%s), not %s", f.GetName(), f.GetTypedConfig().GetTypeUrl(), controlplane.FilterUpstreamCodec)
		}
		if f.GetTypedConfig().MessageIs(&routerv3.Router{}) {
			k.fail(label, field, "the router is a downstream filter; upstream chains end with %s", controlplane.FilterUpstreamCodec)
		}
	}
}

// retryOn are the retry_on conditions Envoy knows; it refuses a policy
// naming any other.
var retryOn = []string{"5xx", "gateway-error", "reset", "reset-before-request", "connect-failure", "envoy-ratelimited",
	"retriable-4xx", "refused-stream", "retriable-status-codes", "retriable-headers", "http3-post-connect-failure",
	"cancelled", "deadline-exceeded", "internal", "resource-exhausted", "unavailable"}

// checkRetryPolicy: every retry_on condition is one Envoy knows;
// retriable_status_codes only act with "retriable-status-codes" (Envoy
// ignores them otherwise); host predicates and the retry priority hold the
// configs of the extensions they name.
func (k *checker) checkRetryPolicy(res, path string, p *routev3.RetryPolicy) {
	conds := map[string]bool{}
	for _, c := range strings.Split(p.GetRetryOn(), ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !slices.Contains(retryOn, c) {
			k.fail(res, join(path, "retry_on"), "unknown retry condition %q (Envoy refuses the policy)", c)
		}
		conds[c] = true
	}
	if len(p.GetRetriableStatusCodes()) > 0 && !conds["retriable-status-codes"] {
		k.fail(res, join(path, "retriable_status_codes"), "%v would be ignored: retry_on lacks \"retriable-status-codes\"", p.GetRetriableStatusCodes())
	}
	named := map[string]proto.Message{
		controlplane.RetryHostPredicate: &previoushostsv3.PreviousHostsPredicate{},
		controlplane.RetryPriority:      &previousprioritiesv3.PreviousPrioritiesConfig{},
	}
	check := func(field, name string, a *anypb.Any) {
		if want, ok := named[name]; ok && !a.MessageIs(want) {
			k.fail(res, join(path, field), "%q needs a %s, not %s", name, want.ProtoReflect().Descriptor().FullName(), a.GetTypeUrl())
		}
	}
	for i, hp := range p.GetRetryHostPredicate() {
		check(fmt.Sprintf("retry_host_predicate[%d].typed_config", i), hp.GetName(), hp.GetTypedConfig())
	}
	if pr := p.GetRetryPriority(); pr != nil {
		check("retry_priority.typed_config", pr.GetName(), pr.GetTypedConfig())
	}
}

// checkJSONFormat: Envoy's json_format accepts strings, numbers, nested
// structs and lists; it refuses booleans and nulls.
func checkJSONFormat(s *structpb.Struct, path string, fail func(field, msg string)) {
	keys := make([]string, 0, len(s.GetFields()))
	for key := range s.GetFields() {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var check func(v *structpb.Value, field string)
	check = func(v *structpb.Value, field string) {
		switch kind := v.GetKind().(type) {
		case *structpb.Value_StructValue:
			checkJSONFormat(kind.StructValue, field, fail)
		case *structpb.Value_ListValue:
			for i, e := range kind.ListValue.GetValues() {
				check(e, fmt.Sprintf("%s[%d]", field, i))
			}
		case *structpb.Value_StringValue, *structpb.Value_NumberValue:
		default:
			fail(field, fmt.Sprintf("json_format values must be strings, numbers, lists or structs, not %T", kind))
		}
	}
	for _, key := range keys {
		check(s.GetFields()[key], path+"."+key)
	}
}

// walk calls visit for m and every message inside it, unpacking Anys; path
// names each message's field from the resource's root. An Any that cannot
// be unpacked is skipped here (PGV validation reports it).
func walk(m protoreflect.Message, path string, visit func(path string, m proto.Message)) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return
		}
		walk(inner.ProtoReflect(), path, visit)
		return
	}
	visit(path, m.Interface())
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := join(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			var keys []protoreflect.MapKey
			v.Map().Range(func(mk protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, mk)
				return true
			})
			sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
			for _, mk := range keys {
				walk(v.Map().Get(mk).Message(), fmt.Sprintf("%s[%q]", name, mk.String()), visit)
			}
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			for i := 0; i < v.List().Len(); i++ {
				walk(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", name, i), visit)
			}
		case fd.Message() != nil:
			walk(v.Message(), name, visit)
		}
		return true
	})
}

// Check is `switchyard envoy validate`: it validates the bootstrap together
// with a snapshot built from a configuration.
func Check(b *bootstrapv3.Bootstrap, snap *cachev3.Snapshot) error {
	return Validate(FromSnapshot(b, snap))
}
