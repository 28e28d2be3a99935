package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/switchyard-ai/switchyard/internal/h2grpc"
	"github.com/switchyard-ai/switchyard/internal/metrics"
	// The hot path's gRPC messages marshal into pooled buffers.
	_ "github.com/switchyard-ai/switchyard/internal/protocodec"
)

// Options configure a DataPlane.
type Options struct {
	Logger *slog.Logger
	// StaticClusters are the bootstrap clusters, not from xDS: name ->
	// "host:port" or "unix:/path" (for example catalog.ExtProcCluster).
	StaticClusters map[string]string
	// Channels are static clusters served in this process, by name (the
	// embedded gateway's ext_proc and rate limit services on an
	// inprocgrpc channel): the filters call them without a socket. A
	// name here needs no StaticClusters entry and takes precedence.
	Channels map[string]grpc.ClientConnInterface
	// LocalProcessors are static clusters whose ext_proc server runs in
	// this process and is called directly by the ext_proc filters, on the
	// request's goroutine, without a gRPC stream (the embedded gateway's
	// extproc). A name here needs no StaticClusters or Channels entry and
	// takes precedence for ext_proc filters; other filters (the rate
	// limit filter) still use Channels or StaticClusters.
	LocalProcessors map[string]LocalProcessor
	// Insecure allows plain HTTP on non-loopback addresses.
	Insecure bool
	// ListenOverride maps a listener name to the address to bind instead of
	// the listener's own, for tests ("127.0.0.1:0") or "unix:/path".
	ListenOverride map[string]string
	// OnRateLimitError, if not nil, is told about every ratelimit filter
	// call that failed (ratelimit.go), for metrics.
	OnRateLimitError func(error)
	// Metrics, if not nil, records every finished request (the Go data
	// plane's performance monitoring; Envoy exports its own statistics).
	Metrics *metrics.Requests
	// RequestBodyTimeout bounds the time a client may take to send a whole
	// request body, from the request's start (Envoy's request_timeout):
	// past it the request gets 408. Zero: DefaultRequestBodyTimeout;
	// negative: no bound (the stream idle timeout still applies).
	RequestBodyTimeout time.Duration
	// MaxRequestsPerKey caps the requests one API key has in flight at
	// once (counted from its authentication in the request headers phase):
	// past it a request gets 429 with retry-after. Zero:
	// DefaultMaxRequestsPerKey; negative: no cap.
	MaxRequestsPerKey int
	// MaxBodyBytesInFlight caps the bytes of request bodies the data plane
	// holds at once across all requests (bodies buffered for ext_proc and
	// for retries): past it a request gets 503 with retry-after before its
	// body is read. Zero: DefaultMaxBodyBytesInFlight; negative: no cap.
	MaxBodyBytesInFlight int64
	// Region is the data plane's home region, which it announces in its
	// xDS node's locality (Node): the control plane serves each region the
	// snapshot whose failover order starts in that region. Empty: no
	// locality, and the control plane's configured region applies.
	Region string
	// Clock is outlier detection's clock (ejections and their ends); nil:
	// time.Now. Tests move it instead of waiting out an ejection.
	Clock Clock
	// Tracer, if not nil, traces every request (tracing.go); nil: no
	// tracing work at all.
	Tracer trace.TracerProvider
	// TraceClusters are the clusters whose upstream requests carry the
	// trace context (traceparent): the gateway's own services, never a
	// provider.
	TraceClusters map[string]bool
}

// Resources is one complete, consistent configuration.
type Resources struct {
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	Secrets   []*tlsv3.Secret
}

// DataPlane serves the listeners of the last applied configuration.
type DataPlane struct {
	opts Options
	log  *slog.Logger
	// tracer is nil when tracing is off.
	tracer trace.Tracer
	cfg    atomic.Pointer[snapshot]

	mu         sync.Mutex // serialises Apply and Close
	closed     bool
	transports map[string]*transportEntry
	hosts      map[string]*hostHealth // cluster name + "\x00" + address

	lmu       sync.RWMutex // guards listeners, read by Addr
	listeners map[string]*listenerRuntime

	grpcMu    sync.Mutex
	grpcConns map[string]*h2grpc.ClientConn

	// framingToken marks the stand-ins of requests refused for their
	// framing (framing.go).
	framingToken string
	adm          *admission

	// streamDone counts finished requests whose stream-done work (the
	// ratelimit call, the access log) is still running (stream.go, finish).
	streamDone sync.WaitGroup
	doneQ      *streamDoneQueue
	// The ext_proc filters' counters (extprocstats.go).
	extProcDown, extProcUp extProcCounters

	// draining is set when Shutdown starts (readiness turns false);
	// stopping is cancelled when its grace period is over, ending every
	// request still in flight (attempt.go).
	draining     atomic.Bool
	stopping     context.Context
	stopInFlight context.CancelFunc
}

type transportEntry struct {
	fingerprint string
	cluster     *cluster
}

// New returns a DataPlane with no configuration; Apply or Watch feed it.
func New(opts Options) *DataPlane {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	d := &DataPlane{
		opts:       opts,
		log:        log,
		transports: map[string]*transportEntry{},
		hosts:      map[string]*hostHealth{},
		listeners:  map[string]*listenerRuntime{},
		grpcConns:  map[string]*h2grpc.ClientConn{},

		framingToken: newFramingToken(),
		adm:          newAdmission(opts),
	}
	if opts.Tracer != nil {
		d.tracer = opts.Tracer.Tracer(tracerName)
	}
	d.stopping, d.stopInFlight = context.WithCancel(context.Background())
	d.cfg.Store(&snapshot{})
	d.doneQ = newStreamDoneQueue(d)
	return d
}

// Apply validates res and swaps it in atomically: requests in flight keep
// the configuration they started with. Listeners that are new are started,
// those whose address changed are restarted, removed ones are drained and
// stopped; a changed certificate applies to new connections without a
// restart. An invalid update (a dangling reference to a route
// configuration, cluster, endpoint assignment, secret or the ext_proc
// cluster, an undecodable or unsupported filter, a router that is not last,
// plain HTTP on a non-loopback address, an address that cannot be bound)
// returns an error and changes nothing.
func (d *DataPlane) Apply(ctx context.Context, res Resources) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errors.New("dataplane: closed")
	}
	snap, err := d.compile(res)
	if err != nil {
		return fmt.Errorf("dataplane: invalid configuration: %w", err)
	}

	// Bind every new socket before changing anything, so a failure leaves
	// the running configuration untouched.
	d.lmu.RLock()
	current := d.listeners
	d.lmu.RUnlock()
	next := make(map[string]*listenerRuntime, len(snap.listeners))
	var started, stopped []*listenerRuntime
	for name, lc := range snap.listeners {
		if cur := current[name]; cur != nil && cur.key == lc.bindKey() {
			next[name] = cur
			continue
		}
		lr, err := listen(lc)
		if err != nil {
			for _, s := range started {
				_ = s.ln.Close()
			}
			return fmt.Errorf("dataplane: listener %q: %w", name, err)
		}
		started = append(started, lr)
		next[name] = lr
	}
	for name, cur := range current {
		if next[name] != cur {
			stopped = append(stopped, cur)
		}
	}

	d.reconcileTransports(snap)
	d.reconcileHosts(snap)
	for name, lr := range next {
		lr.setTLS(snap.listeners[name].tls)
	}
	d.cfg.Store(snap)
	for _, lr := range started {
		lr.serve(d, snap.listeners[lr.name])
	}
	d.lmu.Lock()
	d.listeners = next
	d.lmu.Unlock()
	for _, lr := range stopped {
		d.log.Info("listener stopping", "listener", lr.name, "address", lr.ln.Addr().String())
		go lr.shutdown(drainTimeout)
	}
	return nil
}

// reconcileHosts gives every host outlier detection's state, keeping the
// state of a host that the same cluster had before, so a configuration
// change neither forgets an ejection nor lets an ejected provider back in.
func (d *DataPlane) reconcileHosts(snap *snapshot) {
	next := map[string]*hostHealth{}
	for name, c := range snap.clusters {
		for _, l := range c.levels {
			for _, e := range l.all {
				key := name + "\x00" + e.addr
				h := next[key]
				if h == nil {
					if h = d.hosts[key]; h == nil {
						h = &hostHealth{}
					}
					next[key] = h
				}
				e.health = h
			}
		}
	}
	d.hosts = next
}

// reconcileTransports gives each cluster a connection pool, keeping the
// pool of a cluster whose connection settings did not change.
func (d *DataPlane) reconcileTransports(snap *snapshot) {
	next := make(map[string]*transportEntry, len(snap.clusters))
	for name, c := range snap.clusters {
		if c.aggregate != nil {
			continue // it connects through its members
		}
		if e := d.transports[name]; e != nil && e.fingerprint == c.fingerprint {
			c.transport = e.cluster.transport
			if p, ok := c.transport.(*http1Pool); ok {
				// Envoy drains the connections of hosts gone from the
				// endpoints; here their idle ones are closed.
				p.retainHosts(c.hostAddrs())
			}
		} else {
			c.transport = newTransport(c)
		}
		next[name] = &transportEntry{fingerprint: c.fingerprint, cluster: c}
	}
	for name, e := range d.transports {
		if n := next[name]; n == nil || n.cluster.transport != e.cluster.transport {
			// Requests in flight keep their connections; idle ones go.
			e.cluster.transport.CloseIdleConnections()
		}
	}
	d.transports = next
}

// Node returns the xDS node this data plane identifies itself with: id and
// cluster as given, and Options.Region as its locality's region.
func (d *DataPlane) Node(id, cluster string) *corev3.Node {
	n := &corev3.Node{Id: id, Cluster: cluster}
	if d.opts.Region != "" {
		n.Locality = &corev3.Locality{Region: d.opts.Region}
	}
	return n
}

// Addr returns the bound address of a listener, nil if it is not listening.
func (d *DataPlane) Addr(listener string) net.Addr {
	d.lmu.RLock()
	defer d.lmu.RUnlock()
	if lr := d.listeners[listener]; lr != nil {
		return lr.ln.Addr()
	}
	return nil
}

// Draining reports whether Shutdown has started: a draining data plane is
// not ready for new traffic.
func (d *DataPlane) Draining() bool { return d.draining.Load() }

// Shutdown drains the data plane, as Envoy's drain does, then closes it:
// listeners stop accepting at once and idle connections close, while the
// requests in flight, streams included, run on until ctx ends. Those still
// running then are ended: an event stream with an OpenAI error event the
// SDKs raise (logged as cut, not as a whole 200), a response not yet started
// with a 503, anything else reset. It returns ctx's error when the grace
// period cut requests short.
func (d *DataPlane) Shutdown(ctx context.Context) error {
	d.draining.Store(true)
	d.lmu.RLock()
	listeners := make([]*listenerRuntime, 0, len(d.listeners))
	for _, lr := range d.listeners {
		listeners = append(listeners, lr)
	}
	d.lmu.RUnlock()
	var wg sync.WaitGroup
	var cut atomic.Bool
	for _, lr := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !lr.drain(ctx, d.stopInFlight) {
				cut.Store(true)
			}
		}()
	}
	wg.Wait()
	err := d.Close()
	if cut.Load() {
		return errors.Join(fmt.Errorf("dataplane: drain: requests still in flight were ended: %w", ctx.Err()), err)
	}
	return err
}

// Close gracefully shuts every listener down and releases connections.
func (d *DataPlane) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	d.lmu.Lock()
	listeners := d.listeners
	d.listeners = map[string]*listenerRuntime{}
	d.lmu.Unlock()
	var wg sync.WaitGroup
	for _, lr := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lr.shutdown(drainTimeout)
		}()
	}
	wg.Wait()
	// The stream-done calls of the last requests still need their gRPC
	// channels.
	d.doneQ.close(d.streamDone.Wait)
	for _, e := range d.transports {
		e.cluster.transport.CloseIdleConnections()
	}
	d.grpcMu.Lock()
	defer d.grpcMu.Unlock()
	var errs []error
	for _, cc := range d.grpcConns {
		errs = append(errs, cc.Close())
	}
	d.grpcConns = map[string]*h2grpc.ClientConn{}
	return errors.Join(errs...)
}

// staticCluster reports whether name is a bootstrap cluster.
func (d *DataPlane) staticCluster(name string) bool {
	if _, ok := d.opts.LocalProcessors[name]; ok {
		return true
	}
	if _, ok := d.opts.Channels[name]; ok {
		return true
	}
	_, ok := d.opts.StaticClusters[name]
	return ok
}

// localProcessor returns the static cluster's ext_proc server in this
// process, or nil.
func (d *DataPlane) localProcessor(name string) LocalProcessor {
	return d.opts.LocalProcessors[name]
}

// grpcConn returns the gRPC channel to a static cluster: an in-process one,
// or a lazily connecting one that lives as long as the DataPlane. The
// latter is Envoy's kind of gRPC client (internal/h2grpc), which writes a
// message's frames on the calling goroutine instead of handing them to a
// writer goroutine as grpc-go's does: every request makes several small
// exchanges on it, so per-message overhead is the gateway's latency.
func (d *DataPlane) grpcConn(name string) (grpc.ClientConnInterface, error) {
	if ch := d.opts.Channels[name]; ch != nil {
		return ch, nil
	}
	d.grpcMu.Lock()
	defer d.grpcMu.Unlock()
	if cc := d.grpcConns[name]; cc != nil {
		return cc, nil
	}
	addr, ok := d.opts.StaticClusters[name]
	if !ok {
		return nil, &missingError{kind: "cluster", name: name, from: "ext_proc", static: true}
	}
	cc := h2grpc.New(addr, processorConnOptions())
	d.grpcConns[name] = cc
	return cc, nil
}

// processorConnOptions tune the connections to ext_proc and the rate limit
// service: static flow-control windows large enough for a whole buffered
// body (as the server's, internal/gateway), so a body needs no round trip
// for window.
func processorConnOptions() h2grpc.Options {
	return h2grpc.Options{
		InitialWindowSize:     4 << 20,
		InitialConnWindowSize: 16 << 20,
	}
}
