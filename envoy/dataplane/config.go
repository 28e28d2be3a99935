package dataplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Envoy's connection manager and listener defaults.
const (
	defaultBufferLimit       = 1 << 20
	defaultStreamIdleTimeout = 5 * time.Minute
	defaultConnIdleTimeout   = time.Hour
	defaultMaxHeaderBytes    = 60 << 10
	// Envoy has no default request_headers_timeout; one is set here so a
	// client cannot hold a connection open by never finishing its headers.
	defaultHeadersTimeout = time.Minute
	defaultServerName     = "envoy"
)

// snapshot is one applied configuration. It is immutable once stored: each
// request uses the snapshot it started with.
type snapshot struct {
	listeners map[string]*listenerConfig
	routes    map[string]*routeTable
	clusters  map[string]*cluster
	// invalidRoutes names route configurations that failed on their own,
	// so a listener naming one is not reported as waiting for it.
	invalidRoutes map[string]bool
}

type listenerConfig struct {
	name        string
	network     string // "tcp" or "unix"
	address     string
	tls         *tls.Config
	bufferLimit int64
	hcm         *hcmConfig
}

// bindKey identifies the socket: a listener whose key changes is restarted.
func (l *listenerConfig) bindKey() string { return l.network + " " + l.address }

type serverTransform int

const (
	serverOverwrite serverTransform = iota
	serverAppendIfAbsent
	serverPassThrough
)

type hcmConfig struct {
	routes             *routeTable
	extProc            *extProcFilter
	rateLimit          *rateLimitFilter
	localReply         *localReplyConfig
	codec              hcmv3.HttpConnectionManager_CodecType
	streamIdleTimeout  time.Duration
	headersTimeout     time.Duration
	connIdleTimeout    time.Duration
	maxHeaderBytes     int
	generateRequestID  bool
	useRemoteAddress   bool
	skipXFFAppend      bool
	alwaysSetRequestID bool
	serverName         string
	serverTransform    serverTransform
}

// missingError reports a reference to a resource the update lacks. Apply
// refuses such updates; the Watch glue waits for the missing resource
// instead, as Envoy warms listeners and clusters, unless static says it
// can never arrive over xDS.
type missingError struct {
	kind, name, from string
	static           bool
}

func (e *missingError) Error() string {
	return fmt.Sprintf("%s references %s %q, which does not exist", e.from, e.kind, e.name)
}

// compile validates res and builds a snapshot. It has no side effects on
// the running data plane.
func (d *DataPlane) compile(res Resources) (*snapshot, error) {
	snap := &snapshot{
		listeners:     map[string]*listenerConfig{},
		routes:        map[string]*routeTable{},
		clusters:      map[string]*cluster{},
		invalidRoutes: map[string]bool{},
	}
	var errs []error
	fail := func(err error) { errs = append(errs, err) }

	secrets := map[string]*tlsv3.Secret{}
	for _, s := range res.Secrets {
		if err := s.ValidateAll(); err != nil {
			fail(fmt.Errorf("secret %q: %w", s.GetName(), err))
			continue
		}
		if _, dup := secrets[s.GetName()]; dup {
			fail(fmt.Errorf("secret %q: duplicate name", s.GetName()))
		}
		secrets[s.GetName()] = s
	}
	assignments := map[string]*endpointv3.ClusterLoadAssignment{}
	for _, a := range res.Endpoints {
		if err := a.ValidateAll(); err != nil {
			fail(fmt.Errorf("endpoints %q: %w", a.GetClusterName(), err))
			continue
		}
		if _, dup := assignments[a.GetClusterName()]; dup {
			fail(fmt.Errorf("endpoints %q: duplicate name", a.GetClusterName()))
		}
		assignments[a.GetClusterName()] = a
	}
	for _, c := range res.Clusters {
		if err := c.ValidateAll(); err != nil {
			fail(fmt.Errorf("cluster %q: %w", c.GetName(), err))
			continue
		}
		if _, dup := snap.clusters[c.GetName()]; dup {
			fail(fmt.Errorf("cluster %q: duplicate name", c.GetName()))
			continue
		}
		cc, err := d.compileCluster(c, assignments, secrets)
		if err != nil {
			fail(err)
			continue
		}
		snap.clusters[c.GetName()] = cc
	}
	if err := resolveAggregates(snap.clusters, res.Clusters); err != nil {
		fail(err)
	}
	for _, rc := range res.Routes {
		if err := rc.ValidateAll(); err != nil {
			fail(fmt.Errorf("route config %q: %w", rc.GetName(), err))
			snap.invalidRoutes[rc.GetName()] = true
			continue
		}
		if _, dup := snap.routes[rc.GetName()]; dup {
			fail(fmt.Errorf("route config %q: duplicate name", rc.GetName()))
			continue
		}
		t, err := compileRouteTable(rc)
		if err != nil {
			fail(err)
			snap.invalidRoutes[rc.GetName()] = true
			continue
		}
		snap.routes[rc.GetName()] = t
		if err := checkClusterRefs(t, snap.clusters, res.Clusters); err != nil {
			fail(err)
		}
	}
	addrs := map[string]string{}
	for _, l := range res.Listeners {
		if err := l.ValidateAll(); err != nil {
			fail(fmt.Errorf("listener %q: %w", l.GetName(), err))
			continue
		}
		if _, dup := snap.listeners[l.GetName()]; dup {
			fail(fmt.Errorf("listener %q: duplicate name", l.GetName()))
			continue
		}
		lc, err := d.compileListener(l, snap, secrets)
		if err != nil {
			fail(err)
			continue
		}
		if other, dup := addrs[lc.bindKey()]; dup && !strings.HasSuffix(lc.address, ":0") {
			fail(fmt.Errorf("listener %q: address %s is also listener %q's", l.GetName(), lc.address, other))
			continue
		}
		addrs[lc.bindKey()] = l.GetName()
		snap.listeners[l.GetName()] = lc
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, w := range ignoredFeatures(res) {
		// Debug: the control plane generates these for Envoy (health
		// checks, circuit breakers), so every healthy start has a dozen,
		// and a start's WARN or ERROR lines must always mean something.
		d.log.Debug("xDS setting not implemented by the data plane; ignored", "setting", w)
	}
	return snap, nil
}

// ignoredFeatures lists settings Envoy acts on that this data plane accepts
// but does not implement, so the difference shows up in the logs. Retry
// policies, outlier detection's consecutive-error and failure-percentage
// detectors and the panic threshold are implemented (failover.go); circuit breakers and active
// health checks are not.
func ignoredFeatures(res Resources) []string {
	var out []string
	for _, rc := range res.Routes {
		for _, vh := range rc.GetVirtualHosts() {
			if len(vh.GetRateLimits()) > 0 {
				out = append(out, fmt.Sprintf("route config %q virtual host %q: rate_limits", rc.GetName(), vh.GetName()))
			}
			for _, r := range vh.GetRoutes() {
				a := r.GetRoute()
				if len(a.GetRateLimits()) > 0 || len(a.GetRequestMirrorPolicies()) > 0 || a.GetHedgePolicy() != nil {
					out = append(out, fmt.Sprintf("route config %q route %q: rate_limits/request_mirror_policies/hedge_policy", rc.GetName(), r.GetName()))
				}
			}
		}
	}
	for _, c := range res.Clusters {
		if len(c.GetHealthChecks()) > 0 || c.GetCircuitBreakers() != nil {
			out = append(out, fmt.Sprintf("cluster %q: health_checks/circuit_breakers", c.GetName()))
		}
		od := c.GetOutlierDetection()
		// Success-rate detection (a host against the cluster's mean) and
		// the split of local-origin errors are not implemented; the
		// control plane sets neither (success rate needs
		// success_rate_minimum_hosts, 5, hosts: it cannot act on one-host
		// provider clusters).
		if od != nil && (od.GetSplitExternalLocalOriginErrors() || od.GetSuccessRateMinimumHosts() != nil ||
			od.GetSuccessRateRequestVolume() != nil || od.GetSuccessRateStdevFactor() != nil || len(od.GetMonitors()) > 0) {
			out = append(out, fmt.Sprintf("cluster %q: outlier_detection success rate/split local origin errors/monitors", c.GetName()))
		}
	}
	return out
}

// checkClusterRefs fails for a route to a cluster the update does not
// define; a cluster that exists but failed to compile is reported on its own.
func checkClusterRefs(t *routeTable, compiled map[string]*cluster, defined []*clusterv3.Cluster) error {
	var errs []error
	for _, name := range t.clusterRefs() {
		if _, ok := compiled[name]; ok {
			continue
		}
		found := false
		for _, c := range defined {
			if c.GetName() == name {
				found = true
				break
			}
		}
		if !found {
			errs = append(errs, &missingError{kind: "cluster", name: name, from: fmt.Sprintf("route config %q", t.name)})
		}
	}
	return errors.Join(errs...)
}

func (d *DataPlane) compileListener(l *listenerv3.Listener, snap *snapshot, secrets map[string]*tlsv3.Secret) (*listenerConfig, error) {
	from := fmt.Sprintf("listener %q", l.GetName())
	lc := &listenerConfig{name: l.GetName(), bufferLimit: defaultBufferLimit}
	if v := l.GetPerConnectionBufferLimitBytes(); v != nil {
		lc.bufferLimit = int64(v.GetValue())
	}
	var host string
	switch a := l.GetAddress().GetAddress().(type) {
	case *corev3.Address_SocketAddress:
		sa := a.SocketAddress
		if sa.GetProtocol() != corev3.SocketAddress_TCP || sa.GetNamedPort() != "" {
			return nil, fmt.Errorf("%s: only TCP socket addresses with a port value are supported", from)
		}
		host = sa.GetAddress()
		lc.network, lc.address = "tcp", net.JoinHostPort(host, strconv.Itoa(int(sa.GetPortValue())))
	case *corev3.Address_Pipe:
		lc.network, lc.address = "unix", a.Pipe.GetPath()
	default:
		return nil, fmt.Errorf("%s: unsupported address %T", from, a)
	}
	if o, ok := d.opts.ListenOverride[l.GetName()]; ok {
		if path, ok := strings.CutPrefix(o, "unix:"); ok {
			lc.network, lc.address = "unix", path
		} else {
			h, _, err := net.SplitHostPort(o)
			if err != nil {
				return nil, fmt.Errorf("%s: listen override %q: %w", from, o, err)
			}
			lc.network, lc.address, host = "tcp", o, h
		}
	}
	for _, lf := range l.GetListenerFilters() {
		switch lf.GetName() {
		case "envoy.filters.listener.tls_inspector", "envoy.filters.listener.http_inspector":
			// Protocol detection is built into the Go server.
		default:
			return nil, fmt.Errorf("%s: listener filter %q is not supported", from, lf.GetName())
		}
	}
	chains := l.GetFilterChains()
	if len(chains) == 0 && l.GetDefaultFilterChain() != nil {
		chains = []*listenerv3.FilterChain{l.GetDefaultFilterChain()}
	}
	if len(chains) != 1 || (l.GetDefaultFilterChain() != nil && len(l.GetFilterChains()) > 0) {
		return nil, fmt.Errorf("%s: exactly one filter chain is supported, got %d", from, len(chains))
	}
	chain := chains[0]
	if m := chain.GetFilterChainMatch(); m != nil && len(m.GetServerNames()) > 0 {
		return nil, fmt.Errorf("%s: filter_chain_match is not supported", from)
	}
	if ts := chain.GetTransportSocket(); ts != nil {
		switch ts.GetName() {
		case transportSocketRaw:
		case transportSocketTLS:
			dtc := &tlsv3.DownstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(dtc); err != nil {
				return nil, fmt.Errorf("%s: transport socket: %w", from, err)
			}
			cfg, err := downstreamTLS(dtc, secrets, from, d.log)
			if err != nil {
				return nil, err
			}
			lc.tls = cfg
		default:
			return nil, fmt.Errorf("%s: transport socket %q is not supported", from, ts.GetName())
		}
	}
	if lc.tls == nil && lc.network == "tcp" && !d.opts.Insecure {
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("%s: refusing plain HTTP on non-loopback address %s: configure TLS or allow insecure listeners", from, lc.address)
		}
	}
	if len(chain.GetFilters()) != 1 {
		return nil, fmt.Errorf("%s: the filter chain must hold exactly one http_connection_manager", from)
	}
	hcm := &hcmv3.HttpConnectionManager{}
	if err := unmarshalTyped(chain.GetFilters()[0].GetTypedConfig(), hcm); err != nil {
		return nil, fmt.Errorf("%s: network filter %q: %w", from, chain.GetFilters()[0].GetName(), err)
	}
	if err := hcm.ValidateAll(); err != nil {
		return nil, fmt.Errorf("%s: http_connection_manager: %w", from, err)
	}
	hc, err := d.compileHCM(hcm, snap, from)
	if err != nil {
		return nil, err
	}
	lc.hcm = hc
	return lc, nil
}

func (d *DataPlane) compileHCM(hcm *hcmv3.HttpConnectionManager, snap *snapshot, from string) (*hcmConfig, error) {
	hc := &hcmConfig{
		codec:              hcm.GetCodecType(),
		streamIdleTimeout:  defaultStreamIdleTimeout,
		headersTimeout:     defaultHeadersTimeout,
		connIdleTimeout:    defaultConnIdleTimeout,
		maxHeaderBytes:     defaultMaxHeaderBytes,
		generateRequestID:  true,
		useRemoteAddress:   hcm.GetUseRemoteAddress().GetValue(),
		skipXFFAppend:      hcm.GetSkipXffAppend(),
		alwaysSetRequestID: hcm.GetAlwaysSetRequestIdInResponse(),
		serverName:         defaultServerName,
	}
	if hcm.GetStreamIdleTimeout() != nil {
		hc.streamIdleTimeout = hcm.GetStreamIdleTimeout().AsDuration()
	}
	if hcm.GetRequestHeadersTimeout() != nil && hcm.GetRequestHeadersTimeout().AsDuration() > 0 {
		hc.headersTimeout = hcm.GetRequestHeadersTimeout().AsDuration()
	}
	if t := hcm.GetCommonHttpProtocolOptions().GetIdleTimeout(); t != nil {
		hc.connIdleTimeout = t.AsDuration()
	}
	if kb := hcm.GetMaxRequestHeadersKb(); kb != nil {
		hc.maxHeaderBytes = int(kb.GetValue()) << 10
	}
	if g := hcm.GetGenerateRequestId(); g != nil {
		hc.generateRequestID = g.GetValue()
	}
	if hcm.GetServerName() != "" {
		hc.serverName = hcm.GetServerName()
	}
	switch hcm.GetServerHeaderTransformation() {
	case hcmv3.HttpConnectionManager_APPEND_IF_ABSENT:
		hc.serverTransform = serverAppendIfAbsent
	case hcmv3.HttpConnectionManager_PASS_THROUGH:
		hc.serverTransform = serverPassThrough
	}
	if hcm.GetCodecType() == hcmv3.HttpConnectionManager_HTTP3 {
		return nil, fmt.Errorf("%s: HTTP/3 is not supported", from)
	}
	if lrc := hcm.GetLocalReplyConfig(); lrc != nil {
		lr, err := compileLocalReplyConfig(lrc)
		if err != nil {
			return nil, fmt.Errorf("%s: local_reply_config: %w", from, err)
		}
		hc.localReply = lr
	}
	switch rs := hcm.GetRouteSpecifier().(type) {
	case *hcmv3.HttpConnectionManager_Rds:
		name := rs.Rds.GetRouteConfigName()
		t, ok := snap.routes[name]
		switch {
		case !ok && snap.invalidRoutes[name]:
			return nil, fmt.Errorf("%s: route config %q is invalid", from, name)
		case !ok:
			return nil, &missingError{kind: "route config", name: name, from: from}
		}
		hc.routes = t
	case *hcmv3.HttpConnectionManager_RouteConfig:
		t, err := compileRouteTable(rs.RouteConfig)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		if err := checkClusterRefs(t, snap.clusters, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		hc.routes = t
	default:
		return nil, fmt.Errorf("%s: scoped routes are not supported", from)
	}

	filters := hcm.GetHttpFilters()
	if len(filters) == 0 {
		return nil, fmt.Errorf("%s: no http filters: the router must be last", from)
	}
	for i, f := range filters {
		last := i == len(filters)-1
		if f.GetConfigDiscovery() != nil {
			return nil, fmt.Errorf("%s: http filter %q: config discovery is not supported", from, f.GetName())
		}
		a := f.GetTypedConfig()
		switch {
		case a.MessageIs(&routerv3.Router{}):
			r := &routerv3.Router{}
			if err := a.UnmarshalTo(r); err != nil {
				return nil, fmt.Errorf("%s: http filter %q: %w", from, f.GetName(), err)
			}
			if !last {
				return nil, fmt.Errorf("%s: the router must be the last http filter", from)
			}
		case last:
			return nil, fmt.Errorf("%s: the last http filter is %q, not the router", from, f.GetName())
		case a.MessageIs(&extprocfilterv3.ExternalProcessor{}):
			if hc.extProc != nil {
				return nil, fmt.Errorf("%s: more than one ext_proc filter is not supported", from)
			}
			ep := &extprocfilterv3.ExternalProcessor{}
			if err := a.UnmarshalTo(ep); err != nil {
				return nil, fmt.Errorf("%s: http filter %q: %w", from, f.GetName(), err)
			}
			pf, err := compileExtProc(f.GetName(), f.GetDisabled(), ep, d.staticCluster, d.grpcConn, d.localProcessor)
			if err != nil {
				var me *missingError
				if errors.As(err, &me) {
					return nil, err
				}
				return nil, fmt.Errorf("%s: http filter %q: %w", from, f.GetName(), err)
			}
			pf.counters = &d.extProcDown
			hc.extProc = pf
		case a.MessageIs(&ratelimitfilterv3.RateLimit{}):
			if hc.rateLimit != nil {
				return nil, fmt.Errorf("%s: more than one ratelimit filter is not supported", from)
			}
			rl := &ratelimitfilterv3.RateLimit{}
			if err := a.UnmarshalTo(rl); err != nil {
				return nil, fmt.Errorf("%s: http filter %q: %w", from, f.GetName(), err)
			}
			rf, err := compileRateLimit(f.GetName(), f.GetDisabled(), rl)
			if err != nil {
				return nil, fmt.Errorf("%s: http filter %q: %w", from, f.GetName(), err)
			}
			hc.rateLimit = rf
		case f.GetIsOptional():
			d.log.Warn("optional http filter not supported by the data plane; skipped", "listener", from, "filter", f.GetName())
		default:
			return nil, fmt.Errorf("%s: http filter %q (%s) is not supported by the data plane", from, f.GetName(), a.GetTypeUrl())
		}
	}
	return hc, nil
}

// unmarshalTyped unpacks an Any into m, naming the type on mismatch.
func unmarshalTyped(a *anypb.Any, m proto.Message) error {
	if a == nil {
		return errors.New("no typed_config")
	}
	if !a.MessageIs(m) {
		return fmt.Errorf("typed_config is %s, want %s", a.GetTypeUrl(), m.ProtoReflect().Descriptor().FullName())
	}
	return a.UnmarshalTo(m)
}

func newCoreMetadata() *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
}
