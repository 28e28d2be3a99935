package dataplane

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Envoy's cluster defaults.
const (
	defaultConnectTimeout    = 5 * time.Second
	defaultUpstreamIdle      = time.Hour
	upstreamHandshakeTimeout = 10 * time.Second
	httpProtocolOptionsKey   = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

type upstreamProto int

const (
	protoHTTP1 upstreamProto = iota
	protoHTTP2
	protoAuto // ALPN over TLS, HTTP/1.1 in clear text
)

// Clock tells the time (Options.Clock).
type Clock func() time.Time

// cluster is a compiled Cluster with its endpoints.
type cluster struct {
	name           string
	now            Clock // outlier detection's clock (Options.Clock)
	connectTimeout time.Duration
	idleTimeout    time.Duration
	tls            *tls.Config
	proto          upstreamProto
	dns            bool // STRICT_DNS / LOGICAL_DNS: the address is a host name
	levels         []*priorityLevel
	random         bool
	fingerprint    string
	transport      upstreamTransport
	// panic is a healthy_panic_threshold above 0: with no healthy host,
	// balance over all of them rather than fail.
	panic   bool
	outlier *outlierConfig // nil: no outlier detection
	// upstreamExtProc is the ext_proc filter of the upstream HTTP filter
	// chain (HttpProtocolOptions.http_filters), run once per attempt.
	upstreamExtProc *extProcFilter
	// aggregate lists the members of an envoy.clusters.aggregate cluster,
	// in order; members are the compiled ones. Aggregates have no
	// endpoints and no transport of their own.
	aggregate []string
	members   []*cluster
}

type endpoint struct {
	addr     string // host:port to dial
	hostname string // for auto_host_rewrite; empty: no rewrite
	// health is outlier detection's state, shared by every configuration
	// in which the cluster has this host; nil until Apply attaches it.
	health *hostHealth
}

// priorityLevel holds the endpoints of one priority. sched is a weighted
// round-robin schedule of indexes into healthy.
type priorityLevel struct {
	priority uint32
	healthy  []*endpoint
	all      []*endpoint
	sched    []int
	next     atomic.Uint64
}

// pick chooses an endpoint for a request without retry state: round robin
// within the lowest priority that has healthy endpoints (see choose).
func (c *cluster) pick() *endpoint {
	_, ep, _ := c.choose(nil, c.clock())
	return ep
}

// hostAddrs are the addresses of the cluster's endpoints, at every
// priority and health.
func (c *cluster) hostAddrs() map[string]bool {
	out := map[string]bool{}
	for _, l := range c.levels {
		for _, e := range l.all {
			out[e.addr] = true
		}
	}
	return out
}

// clock is the time for outlier detection.
func (c *cluster) clock() time.Time {
	if c.now != nil {
		return c.now()
	}
	return time.Now()
}

// connectError marks a failure to establish the upstream connection (TCP or
// TLS), which Envoy answers with 503.
type connectError struct{ err error }

func (e *connectError) Error() string { return "upstream connect error: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func (d *DataPlane) compileCluster(c *clusterv3.Cluster, assignments map[string]*endpointv3.ClusterLoadAssignment, secrets map[string]*tlsv3.Secret) (*cluster, error) {
	from := fmt.Sprintf("cluster %q", c.GetName())
	out := &cluster{
		name:           c.GetName(),
		now:            d.opts.Clock,
		connectTimeout: defaultConnectTimeout,
		idleTimeout:    defaultUpstreamIdle,
		panic:          true,
	}
	if t := c.GetCommonLbConfig().GetHealthyPanicThreshold(); t != nil {
		// Envoy truncates the percentage; any threshold above 0 allows
		// panic mode, which is entered here only with no healthy host.
		out.panic = t.GetValue() >= 1
	}
	if c.GetConnectTimeout() != nil {
		out.connectTimeout = c.GetConnectTimeout().AsDuration()
	}
	var cla *endpointv3.ClusterLoadAssignment
	if c.GetClusterType() != nil {
		if err := compileAggregate(c, out, from); err != nil {
			return nil, err
		}
		out.fingerprint = "aggregate"
		return out, nil
	}
	out.outlier = compileOutlier(c.GetOutlierDetection())
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		name := c.GetEdsClusterConfig().GetServiceName()
		if name == "" {
			name = c.GetName()
		}
		var ok bool
		if cla, ok = assignments[name]; !ok {
			return nil, &missingError{kind: "endpoints", name: name, from: from}
		}
	case clusterv3.Cluster_STATIC:
		cla = c.GetLoadAssignment()
	case clusterv3.Cluster_STRICT_DNS, clusterv3.Cluster_LOGICAL_DNS:
		cla = c.GetLoadAssignment()
		out.dns = true
	default:
		return nil, fmt.Errorf("%s: cluster type %s is not supported", from, c.GetType())
	}
	switch c.GetLbPolicy() {
	case clusterv3.Cluster_ROUND_ROBIN, clusterv3.Cluster_LEAST_REQUEST:
		// Least request is approximated by round robin.
	case clusterv3.Cluster_RANDOM:
		out.random = true
	default:
		return nil, fmt.Errorf("%s: lb_policy %s is not supported", from, c.GetLbPolicy())
	}
	if len(c.GetTransportSocketMatches()) > 0 {
		return nil, fmt.Errorf("%s: transport_socket_matches is not supported", from)
	}
	var secretRefs []proto.Message
	if ts := c.GetTransportSocket(); ts != nil {
		switch ts.GetName() {
		case transportSocketRaw:
		case transportSocketTLS:
			utc := &tlsv3.UpstreamTlsContext{}
			if err := ts.GetTypedConfig().UnmarshalTo(utc); err != nil {
				return nil, fmt.Errorf("%s: transport socket: %w", from, err)
			}
			cfg, err := upstreamTLS(utc, secrets, from)
			if err != nil {
				return nil, err
			}
			out.tls = cfg
			for _, sc := range utc.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				secretRefs = append(secretRefs, secrets[sc.GetName()])
			}
		default:
			return nil, fmt.Errorf("%s: transport socket %q is not supported", from, ts.GetName())
		}
	}
	//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
	if c.GetHttp2ProtocolOptions() != nil {
		out.proto = protoHTTP2
	}
	if a, ok := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey]; ok {
		po := &upstreamhttpv3.HttpProtocolOptions{}
		if err := a.UnmarshalTo(po); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", from, httpProtocolOptionsKey, err)
		}
		switch p := po.GetUpstreamProtocolOptions().(type) {
		case *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_:
			switch p.ExplicitHttpConfig.GetProtocolConfig().(type) {
			case *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions:
				out.proto = protoHTTP2
			case *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions:
				out.proto = protoHTTP1
			default:
				return nil, fmt.Errorf("%s: HTTP/3 upstreams are not supported", from)
			}
		case *upstreamhttpv3.HttpProtocolOptions_AutoConfig, *upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig:
			// Downstream-protocol matching is approximated by ALPN.
			out.proto = protoAuto
		}
		if d := po.GetCommonHttpProtocolOptions().GetIdleTimeout(); d != nil {
			out.idleTimeout = d.AsDuration()
		}
		if err := d.compileUpstreamFilters(po, out, from); err != nil {
			return nil, err
		}
	}
	//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
	if d := c.GetCommonHttpProtocolOptions().GetIdleTimeout(); d != nil {
		out.idleTimeout = d.AsDuration()
	}
	if err := out.addEndpoints(cla, from); err != nil {
		return nil, err
	}

	// The fingerprint decides whether the connection pool survives an update:
	// everything but the endpoints, plus the secrets the cluster reads.
	fp := proto.Clone(c).(*clusterv3.Cluster)
	fp.LoadAssignment = nil
	h := sha256.New()
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(fp)
	h.Write(b)
	for _, s := range secretRefs {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(s)
		h.Write(b)
	}
	out.fingerprint = hex.EncodeToString(h.Sum(nil))
	return out, nil
}

func (c *cluster) addEndpoints(cla *endpointv3.ClusterLoadAssignment, from string) error {
	byPriority := map[uint32]*priorityLevel{}
	var weights = map[*priorityLevel][]uint32{}
	for _, lle := range cla.GetEndpoints() {
		l := byPriority[lle.GetPriority()]
		if l == nil {
			l = &priorityLevel{priority: lle.GetPriority()}
			byPriority[lle.GetPriority()] = l
			c.levels = append(c.levels, l)
		}
		for _, lb := range lle.GetLbEndpoints() {
			var ep *endpointv3.Endpoint
			switch hi := lb.GetHostIdentifier().(type) {
			case *endpointv3.LbEndpoint_Endpoint:
				ep = hi.Endpoint
			case *endpointv3.LbEndpoint_EndpointName:
				ep = cla.GetNamedEndpoints()[hi.EndpointName]
			}
			sa := ep.GetAddress().GetSocketAddress()
			if sa == nil || sa.GetNamedPort() != "" {
				return fmt.Errorf("%s: endpoint without a socket address and port", from)
			}
			e := &endpoint{addr: net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))), hostname: ep.GetHostname()}
			if e.hostname == "" && c.dns {
				e.hostname = sa.GetAddress()
			}
			l.all = append(l.all, e)
			switch lb.GetHealthStatus() {
			case corev3.HealthStatus_UNHEALTHY, corev3.HealthStatus_DRAINING, corev3.HealthStatus_TIMEOUT:
				continue
			}
			w := lb.GetLoadBalancingWeight().GetValue()
			if w == 0 {
				w = 1
			}
			l.healthy = append(l.healthy, e)
			weights[l] = append(weights[l], w)
		}
	}
	sortLevels(c.levels)
	for _, l := range c.levels {
		l.sched = schedule(weights[l])
	}
	return nil
}

func sortLevels(ls []*priorityLevel) {
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].priority < ls[j-1].priority; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
}

// schedule returns a smooth weighted round-robin order of indexes. Equal
// weights (the usual case) give plain round robin; very large weight sums
// fall back to it rather than allocate a huge schedule.
func schedule(weights []uint32) []int {
	var total uint64
	equal := true
	for i, w := range weights {
		total += uint64(w)
		if i > 0 && w != weights[0] {
			equal = false
		}
	}
	if equal || total > 4096 {
		out := make([]int, len(weights))
		for i := range out {
			out[i] = i
		}
		return out
	}
	cur := make([]int64, len(weights))
	out := make([]int, 0, total)
	for range total {
		best := 0
		for i, w := range weights {
			cur[i] += int64(w)
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= int64(total)
		out = append(out, best)
	}
	return out
}

// upstreamTransport is a cluster's connection pool: net/http's Transport,
// or the HTTP/1.1 pool (http1Pool).
type upstreamTransport interface {
	RoundTrip(*http.Request) (*http.Response, error)
	CloseIdleConnections()
}

// newTransport builds the connection pool of a cluster. Compression is off
// so bodies pass through byte for byte. A cluster that speaks HTTP/1.1
// only gets the pool whose round trip runs on the caller's goroutine
// (http1Pool); HTTP/2, and ALPN's choice between the two, stay with
// net/http's Transport.
func newTransport(c *cluster) upstreamTransport {
	dial, dialTLS := upstreamDialers(c)
	if c.proto == protoHTTP1 || (c.proto == protoAuto && c.tls == nil) {
		switch {
		case c.tls == nil:
			return newHTTP1Pool(dial, c.idleTimeout)
		case !slices.Contains(c.tls.NextProtos, "h2"):
			// ALPN offering h2 would let the upstream pick it: net/http
			// follows that choice, so such a cluster stays with it.
			return newHTTP1Pool(dialTLS, c.idleTimeout)
		}
	}
	t := &http.Transport{
		DialContext:         func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		DisableCompression:  true,
		MaxIdleConnsPerHost: http1MaxIdlePerHost,
		IdleConnTimeout:     c.idleTimeout,
		Protocols:           new(http.Protocols),
	}
	switch {
	case c.proto == protoHTTP2 && c.tls != nil:
		t.Protocols.SetHTTP2(true)
	case c.proto == protoHTTP2:
		t.Protocols.SetUnencryptedHTTP2(true)
	case c.proto == protoAuto && c.tls != nil:
		t.Protocols.SetHTTP1(true)
		t.Protocols.SetHTTP2(true)
	default:
		t.Protocols.SetHTTP1(true)
	}
	if c.tls != nil {
		t.ForceAttemptHTTP2 = c.proto != protoHTTP1
		t.DialTLSContext = func(ctx context.Context, _, addr string) (net.Conn, error) { return dialTLS(ctx, addr) }
	}
	return t
}

// upstreamDialers return how a cluster connects to a host, in clear text
// and, for a cluster with TLS, over TLS; their errors are *connectError.
func upstreamDialers(c *cluster) (dial, dialTLS func(ctx context.Context, addr string) (net.Conn, error)) {
	dialer := &net.Dialer{Timeout: c.connectTimeout, KeepAlive: 30 * time.Second}
	dial = func(ctx context.Context, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, &connectError{err}
		}
		return conn, nil
	}
	if c.tls == nil {
		return dial, nil
	}
	base := c.tls.Clone()
	if len(base.NextProtos) == 0 {
		switch c.proto {
		case protoHTTP2:
			base.NextProtos = []string{"h2"}
		case protoAuto:
			base.NextProtos = []string{"h2", "http/1.1"}
		}
	}
	dialTLS = func(ctx context.Context, addr string) (net.Conn, error) {
		raw, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		if cfg.ServerName == "" {
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, upstreamHandshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, &connectError{err}
		}
		return tc, nil
	}
	return dial, dialTLS
}

// upstreamBody is the request body the router forwards.
type upstreamBody struct {
	buf      []byte    // the whole body, when buffered or replaced
	r        io.Reader // the streaming body otherwise
	buffered bool
}

// finalizeResponseHeaders applies the route's response_headers_to_add and
// _to_remove, most specific first.
func (s *requestState) finalizeResponseHeaders(h *headerMap, rt *route) {
	for _, ops := range []headerOps{rt.hdrOps, rt.vh.headers, s.table.headers} {
		for _, k := range ops.respRemove {
			h.del(k)
		}
		applyHeaderOptions(h, ops.respAdd)
	}
}

// upstreamFailure maps a failed round trip to Envoy's local reply.
func (s *requestState) upstreamFailure(err error) *response {
	var ce *connectError
	if s.r.Context().Err() != nil {
		// On HTTP/1.1 a body cut short also ends the request's context,
		// possibly before the body's reader has recorded why.
		s.body.settle()
	}
	switch reason := s.abortReason(); {
	case s.badBody():
		return nil
	case s.bodyTimedOut.Load():
		// The client stalled: net/http has cancelled the request's context
		// (and the ext_proc stream), so the reply bypasses the filter.
		s.sendLocal(s.bodyTimeout())
		return nil
	case reason == "stream_idle_timeout" && !s.requestComplete.Load():
		// Envoy: 408 while the request is incomplete, 504 after.
		return s.localResponse(streamTimeout(), reason)
	case reason != "":
		return s.localResponse(apierror.Server(http.StatusGatewayTimeout, reason, "The upstream did not respond in time."), reason)
	case s.r.Context().Err() != nil:
		s.detail = "downstream_remote_disconnect"
		return nil
	case s.upCtx.Err() != nil:
		// Cancelled by a failure of the STREAMED request body, which the
		// request's goroutine answers.
		return nil
	case errors.As(err, &ce):
		s.log.Warn("upstream connect failed", "cluster", s.cluster, "error", err)
		return s.localResponse(apierror.Server(http.StatusServiceUnavailable, "upstream_connect_error", "The gateway could not connect to the upstream."), "upstream_connect_error")
	default:
		s.log.Warn("upstream request failed", "cluster", s.cluster, "error", err)
		return s.localResponse(apierror.Server(http.StatusServiceUnavailable, "upstream_reset_before_response_started", "The upstream closed the connection before responding."), "upstream_reset_before_response_started")
	}
}

// activityReader resets the idle timer on every read.
// With wait set (an upstream's response body), the time blocked in Read
// is added to it.
type activityReader struct {
	r    io.Reader
	idle *idleTimer
	wait *atomic.Int64
}

func (a *activityReader) Read(p []byte) (int, error) {
	var t time.Time
	if a.wait != nil {
		t = time.Now()
	}
	n, err := a.r.Read(p)
	if a.wait != nil {
		a.wait.Add(int64(time.Since(t)))
	}
	if n > 0 {
		a.idle.touch()
	}
	return n, err
}

// idleTimer fires when no activity happened for its duration. A nil
// idleTimer is disabled; a stopped one stays stopped, even if a late read
// touches it.
type idleTimer struct {
	mu      sync.Mutex
	d       time.Duration
	t       *time.Timer
	stopped bool
}

func newIdleTimer(d time.Duration, f func()) *idleTimer {
	if d <= 0 {
		return nil
	}
	return &idleTimer{d: d, t: time.AfterFunc(d, f)}
}

func (t *idleTimer) touch() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.t.Reset(t.d)
	}
}

func (t *idleTimer) stop() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	t.t.Stop()
}
