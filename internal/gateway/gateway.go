// Package gateway owns assembling Switchyard's components into one process:
// the control plane, extproc, the rate limit service and the single-node
// data plane, each talking to the others over real gRPC on loopback exactly
// as separate processes would, plus the admin API and the demo upstreams
// the configuration asks for.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/backends/admin"
	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/extproc"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/inprocgrpc"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/metrics"
	"github.com/switchyard-ai/switchyard/internal/tracing"
	// extproc's and the rate limit service's replies marshal into pooled buffers.
	_ "github.com/switchyard-ai/switchyard/internal/protocodec"
	"github.com/switchyard-ai/switchyard/internal/usage"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// DemoUpstreamFunc starts a fake vendor of kind (openai, anthropic, gemini,
// brave) on listen, requiring apiKey when it is not empty. The fakes are
// test doubles (internal/testing/fake): the binary passes one in for
// make run's demo, so no product package imports them.
type DemoUpstreamFunc func(ctx context.Context, listen, kind, apiKey string) (io.Closer, error)

// Options configure an in-process gateway.
type Options struct {
	// DemoUpstream starts the config's demo_upstreams; nil refuses a config
	// that has any.
	DemoUpstream DemoUpstreamFunc

	Config  *config.Config
	DataDir string
	Logger  *slog.Logger
	// Insecure allows plain HTTP on non-loopback listener addresses.
	Insecure bool
	// ListenOverride, when set, replaces the address of the first listener
	// ("127.0.0.1:0" picks a free port).
	ListenOverride string
	// Usage, when set, is told every request's token usage, besides the
	// usage store (Gateway.Usage).
	Usage extproc.UsageRecorder
	// UsageFlushInterval is how often counted usage is written to the
	// usage store; usage.DefaultFlushInterval if 0.
	UsageFlushInterval time.Duration
	// SyncTimeout bounds the wait for the first xDS configuration.
	SyncTimeout time.Duration

	// RateLimitAddr, when set, is the RLS (envoy.service.ratelimit.v3)
	// address of an external rate limit service (envoyproxy/ratelimit on
	// Redis, for a fleet) that extproc and the data plane use instead of the
	// embedded one. It must be configured from this control plane
	// (XDSListen) to share the tiers.
	RateLimitAddr string
	// XDSListen, when set, is the address the control plane serves xDS on
	// (default: a free loopback port), so processes outside this one, such
	// as a fleet's ratelimit service, can subscribe.
	XDSListen string
	// AdminListen, when set, is the admin API's address ("127.0.0.1:0"
	// picks a free port); AdminToken is its bearer token. The admin API is
	// never served on a public listener.
	AdminListen string
	AdminToken  string
	// KeyWatchInterval is how often the key database is polled for changes
	// made by other processes (revocations); keys.DefaultWatchInterval if 0.
	KeyWatchInterval time.Duration
	// RateLimitClock is the embedded rate limit service's clock (tests fix
	// it so no run straddles a window boundary); nil: the system clock.
	RateLimitClock ratelimit.Clock
	// BatchPaceAfter times the batch runner's pauses while a key's tokens
	// per minute are spent (default time.After); tests pass one that moves
	// RateLimitClock instead of waiting.
	BatchPaceAfter func(time.Duration) <-chan time.Time

	// ConfigPath, when set, is the file Config was loaded from: the control
	// plane reloads it whenever its content changes (polled every
	// ReloadInterval, controlplane.DefaultReloadInterval if 0). A file that
	// does not validate is logged and ignored.
	ConfigPath     string
	ReloadInterval time.Duration
	// InternalToken is the token extproc and the backends share
	// (docs/backends-design.md); a random one when empty.
	InternalToken string

	// LoopbackGRPC makes the data plane reach ext_proc and the embedded
	// rate limit service over loopback gRPC, as Envoy reaches them in a
	// deployment, instead of in process (ext_proc by direct calls of its
	// handler, localExtProc; the rate limit service on an inprocgrpc
	// channel). Both are always served on loopback gRPC too, for other
	// clients.
	LoopbackGRPC bool

	// Region is this gateway's home region, announced in the xDS node
	// locality of its data plane and extproc (default: the config's
	// region): the control plane serves it the snapshot whose failover
	// order starts there.
	Region string
}

// Gateway is a running in-process stack.
type Gateway struct {
	Keys     KeyStore
	KeyCache *keys.Cache
	// Usage counts every key's usage and spend (the usage store in the
	// data directory) and reads it back.
	Usage   *usage.Recorder
	Control *controlplane.Server
	ExtProc *extproc.Server
	Data    *dataplane.DataPlane
	// RateLimit is the embedded rate limit service; nil with RateLimitAddr.
	RateLimit *ratelimit.Server
	Metrics   *ratelimit.Metrics
	// Requests are the data plane's request metrics (admin /metrics).
	Requests  *metrics.Requests
	listener  config.Listener
	xdsAddr   string
	rlsAddr   string
	adminAddr net.Addr
	// Backends is the in-process backends service; nil when the
	// configuration names its own.
	Backends *Component
	closers  []func()
	// stop ends the background loops (xDS streams, key polls) before Close
	// closes what they use, so shutting down logs no spurious failures.
	stop context.CancelFunc
}

// Key cache bounds: a key lookup on the hot path is an LRU hit; a miss costs one
// SQLite read. Misses are cached too, so a flood of bad keys stays off the database.
// Changes (revocations above all) are pushed by keys.Cache.Watch; the TTL is only
// a backstop for a watch that cannot read the database.
const (
	keyCacheSize = 100_000
	keyCacheTTL  = time.Minute
)

// Start builds and starts the whole stack and returns once the data plane is
// serving the configuration it received over xDS.
func Start(ctx context.Context, opts Options) (_ *Gateway, err error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SyncTimeout == 0 {
		opts.SyncTimeout = 10 * time.Second
	}
	cfg := opts.Config
	g := &Gateway{listener: cfg.Listeners[0]}
	defer func() {
		if err != nil {
			g.Close()
		}
	}()
	if err := checkPlainListeners(cfg, opts); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	s := &startup{g: g, opts: opts, cfg: cfg, log: opts.Logger, runCtx: runCtx}

	// Traces (observability.tracing), off by default. The provider is
	// closed last, flushing the spans of the requests the drain finished.
	tp, err := tracing.NewProvider(ctx, cfg.Observability.Tracing, "switchyard")
	if err != nil {
		return nil, err
	}
	if tp != nil { // s.tracer stays a nil interface when off
		s.tracer = tp
		g.closers = append(g.closers, func() { tracing.Shutdown(tp) })
	}

	if err := startDemoUpstreams(runCtx, cfg, g, opts.DemoUpstream); err != nil {
		return nil, err
	}
	s.logMissingToolCredentials()
	// Each step starts one component; later ones use what earlier ones
	// serve (the keys, the control plane's xDS address, the rate limit
	// service, extproc).
	for _, step := range []func(context.Context) error{
		s.startKeys,
		s.startControlPlane,
		s.startRateLimit,
		s.startExtProc,
		s.startDataPlane,
		s.waitServing,
		s.startBackends,
	} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	if opts.AdminListen != "" {
		if err := startAdmin(g, opts); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// startup is what Start's steps hand on to each other.
type startup struct {
	g      *Gateway
	opts   Options
	cfg    *config.Config
	log    *slog.Logger
	runCtx context.Context // ends with the gateway: background loops

	token       string       // shared by extproc and the backends
	region      string       // this gateway's home region
	backendsLis net.Listener // the in-process backends', nil when the config names its own
	limiter     extproc.Limiter
	extprocAddr string
	maxRecv     int // ext_proc's largest gRPC message
	// channels are the data plane's in-process gRPC channels, by cluster.
	channels map[string]grpc.ClientConnInterface
	// processors are the data plane's ext_proc servers called directly.
	processors map[string]dataplane.LocalProcessor
	adsClients []*adsclient.Client
	// tracer traces requests across the components; nil when tracing is
	// off (observability.tracing).
	tracer trace.TracerProvider
}

// logMissingToolCredentials reports tools whose credential is missing. A
// missing credential takes down only what needs it: extproc leaves the
// provider out of its models' routes (and logs it); web_search answers its
// vendor's refusal as a tool error.
func (s *startup) logMissingToolCredentials() {
	for _, m := range s.cfg.MissingCredentials(os.Getenv) {
		if strings.HasPrefix(m, "tools.") {
			s.log.Error("credential missing; the tool will fail", "problem", m)
		}
	}
}

// startKeys opens the key store, its hot-path cache and the cache's watch
// of changes made by other processes, and the metrics.
func (s *startup) startKeys(ctx context.Context) error {
	g := s.g
	store, err := OpenKeyStore(ctx, s.cfg.Storage, s.opts.DataDir)
	if err != nil {
		return err
	}
	g.Keys = store
	g.closers = append(g.closers, func() { _ = store.Close() })
	g.KeyCache = newKeyCache(store)
	keyLog := s.log.With("component", "keys")
	go g.KeyCache.Watch(s.runCtx, s.opts.KeyWatchInterval, func(err error) {
		keyLog.Warn("key store poll failed (the key cache is dropped, or on PostgreSQL kept for the outage grace)", "error", err)
	})
	// The usage store closes after extproc stops (closers run in reverse),
	// so the usage of the last requests is written.
	rec, usageClosers, err := startUsage(ctx, s.cfg.Storage, s.opts.DataDir, s.opts.UsageFlushInterval, s.log.With("component", "usage"))
	if err != nil {
		return err
	}
	g.Usage = rec
	g.closers = append(g.closers, usageClosers...)
	g.Metrics = ratelimit.NewMetrics()
	g.Requests = metrics.NewRequests()
	return nil
}

// startControlPlane starts the control plane with the configuration and
// serves xDS. The in-process backends' listener is bound first, so the first
// snapshot already routes to it.
func (s *startup) startControlPlane(ctx context.Context) (err error) {
	g, cfg, opts := s.g, s.cfg, s.opts
	s.token = opts.InternalToken
	if s.token == "" {
		s.token = randomSecret()
	}
	g.Control = controlplane.New(s.log.With("component", "controlplane"))
	if inProcessBackends(cfg) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fmt.Errorf("gateway: backends: %w", err)
		}
		s.backendsLis = lis
		g.closers = append(g.closers, func() { _ = lis.Close() })
		g.Control.DefaultBackends = &config.Backends{Address: lis.Addr().String()}
	}
	closeRouting, err := useRoutingStore(ctx, g.Control, cfg.Storage, opts.DataDir)
	if err != nil {
		return err
	}
	g.closers = append(g.closers, closeRouting)
	if _, err := g.Control.Update(ctx, cfg); err != nil {
		return err
	}
	if opts.ConfigPath != "" {
		go g.Control.WatchFile(s.runCtx, opts.ConfigPath, opts.ReloadInterval)
	}
	go g.Control.WatchRoutingStore(s.runCtx, 0)
	s.region = opts.Region
	if s.region == "" {
		s.region = cfg.Region
	}
	if !slices.Contains(config.Regions, s.region) {
		return fmt.Errorf("gateway: region %q: must be one of %v", s.region, config.Regions)
	}
	if g.xdsAddr, err = serveGRPCOn(g, opts.XDSListen, g.Control.Register); err != nil {
		return fmt.Errorf("gateway: control plane: %w", err)
	}
	return nil
}

// startRateLimit starts the embedded rate limit service (envoyproxy/ratelimit's
// service on the in-process store, configured over xDS like a fleet's), or
// connects to the external one, and picks extproc's limiter.
func (s *startup) startRateLimit(context.Context) (err error) {
	g := s.g
	rlsAddr := s.opts.RateLimitAddr
	if rlsAddr == "" {
		g.RateLimit = ratelimit.NewServer(ratelimit.Options{Clock: s.opts.RateLimitClock, Logger: s.log.With("component", "ratelimit")})
		if rlsAddr, err = serveGRPC(g, g.RateLimit.Register); err != nil {
			return fmt.Errorf("gateway: ratelimit: %w", err)
		}
		rlsADS, err := dialADS(g, g.xdsAddr, &corev3.Node{Id: "switchyard-ratelimit", Cluster: "switchyard"}, s.log)
		if err != nil {
			return err
		}
		rlsADS.Watch(resourcev3.RateLimitConfigType, nil, g.RateLimit.ConfigHandler)
		s.adsClients = append(s.adsClients, rlsADS)
	}
	rlsConn, err := grpc.NewClient("passthrough:///"+rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("gateway: dial ratelimit: %w", err)
	}
	g.closers = append(g.closers, func() { _ = rlsConn.Close() })
	g.rlsAddr = rlsAddr

	// Admission sits on every request's critical path. With the service
	// embedded, extproc calls it directly: the same service logic and store
	// the data plane reaches over gRPC, minus a loopback round trip.
	s.limiter = rlsv3.NewRateLimitServiceClient(rlsConn)
	if g.RateLimit != nil {
		s.limiter = embeddedLimiter{g.RateLimit}
	}
	return nil
}

// startExtProc starts extproc, configured by the control plane over RTDS,
// serving on loopback gRPC and, unless LoopbackGRPC, on the data plane's
// in-process channels.
func (s *startup) startExtProc(context.Context) (err error) {
	g := s.g
	g.ExtProc = extproc.New(extproc.Options{
		Keys:    g.KeyCache,
		Usage:   usageSink{rec: g.Usage, also: s.opts.Usage},
		Budgets: usageSink{rec: g.Usage},
		Limiter: s.limiter,
		// The local fallback's windows follow the embedded limiter's clock.
		LocalLimiterClock: s.opts.RateLimitClock,
		Metrics:           g.Metrics,
		InternalToken:     s.token,
		Logger:            s.log.With("component", "extproc"),
		Tracer:            s.tracer,
	})
	// A buffered request body arrives in one gRPC message: allow the
	// configured body limit plus room for headers.
	s.maxRecv = int(s.cfg.Limits.MaxRequestBodyBytes) + 1<<20
	if s.extprocAddr, err = serveGRPC(g, g.ExtProc.Register, grpc.MaxRecvMsgSize(s.maxRecv)); err != nil {
		return fmt.Errorf("gateway: extproc: %w", err)
	}
	// The data plane's own calls: every request makes five ext_proc
	// exchanges and one rate limit call, which in process skip the
	// sockets, HTTP/2 and serialization: the ext_proc filters call
	// extproc's handler directly, on the request's goroutine
	// (localExtProc), and the rate limit calls go over an inprocgrpc
	// channel.
	if !s.opts.LoopbackGRPC {
		s.processors = map[string]dataplane.LocalProcessor{catalog.ExtProcCluster: localExtProc{g.ExtProc}}
		if g.RateLimit != nil {
			rch := inprocgrpc.New(inprocgrpc.Options{})
			g.RateLimit.Register(rch)
			s.channels = map[string]grpc.ClientConnInterface{controlplane.RateLimitCluster: rch}
		}
	}
	extprocADS, err := dialADS(g, g.xdsAddr, &corev3.Node{Id: "switchyard-extproc", Cluster: "switchyard",
		Locality: &corev3.Locality{Region: s.region}}, s.log)
	if err != nil {
		return err
	}
	extprocADS.Watch(resourcev3.RuntimeType, []string{catalog.RuntimeName}, g.ExtProc.CatalogHandler)
	s.adsClients = append(s.adsClients, extprocADS)
	return nil
}

// startDataPlane starts the data plane, configured by the control plane over
// LDS/RDS/CDS/EDS/SDS.
func (s *startup) startDataPlane(context.Context) error {
	g := s.g
	dpOpts := dataplane.Options{
		Logger: s.log.With("component", "dataplane"),
		StaticClusters: map[string]string{catalog.ExtProcCluster: s.extprocAddr, catalog.XDSCluster: g.xdsAddr,
			controlplane.RateLimitCluster: g.rlsAddr},
		Channels:        s.channels,
		LocalProcessors: s.processors,
		Insecure:        s.opts.Insecure,
		OnRateLimitError: func(error) {
			g.Metrics.ChargeErrors.Inc("dataplane")
		},
		Metrics: g.Requests,
		Region:  s.region,
		Tracer:  s.tracer,
		// The backends continue the trace; providers never see it.
		TraceClusters: map[string]bool{controlplane.BackendsCluster: true},
		// Read at start: a reload does not change them.
		RequestBodyTimeout:   s.cfg.Limits.RequestBodyTimeout,
		MaxRequestsPerKey:    s.cfg.Limits.MaxConcurrentRequestsPerKey,
		MaxBodyBytesInFlight: s.cfg.Limits.MaxRequestBytesInFlight,
	}
	if s.opts.ListenOverride != "" {
		dpOpts.ListenOverride = map[string]string{g.listener.Name: s.opts.ListenOverride}
	}
	g.Data = dataplane.New(dpOpts)
	g.closers = append(g.closers, func() { _ = g.Data.Close() })
	dpADS, err := dialADS(g, g.xdsAddr, g.Data.Node("switchyard-dataplane", "switchyard"), s.log)
	if err != nil {
		return err
	}
	g.Data.Watch(dpADS)
	s.adsClients = append(s.adsClients, dpADS)
	return nil
}

// waitServing runs the xDS clients and waits, within SyncTimeout, for each
// to receive its configuration and for the first listener to serve.
func (s *startup) waitServing(ctx context.Context) error {
	g, timeout := s.g, s.opts.SyncTimeout
	for _, c := range s.adsClients {
		go func() { _ = c.Run(s.runCtx) }()
	}
	wait, cancelWait := context.WithTimeout(ctx, timeout)
	defer cancelWait()
	for _, c := range s.adsClients {
		select {
		case <-c.Synced():
		case <-wait.Done():
			return fmt.Errorf("gateway: no xDS configuration within %s", timeout)
		}
	}
	for g.Data.Addr(g.listener.Name) == nil {
		select {
		case <-wait.Done():
			return fmt.Errorf("gateway: listener %q did not start within %s", g.listener.Name, timeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// startBackends starts the in-process backends on the listener the control
// plane already routes to; nothing when the configuration names its own.
func (s *startup) startBackends(ctx context.Context) (err error) {
	if s.backendsLis == nil {
		return nil
	}
	g := s.g
	bo := BackendsOptions{Listener: s.backendsLis, DataDir: s.opts.DataDir, GatewayURL: g.BaseURL(), Token: s.token,
		Tools: s.cfg.Tools, Tiers: s.cfg.Tiers, Storage: s.cfg.Storage, Models: s.cfg.Models, BatchPaceAfter: s.opts.BatchPaceAfter, Logger: s.log.With("component", "backends"),
		Tracer: s.tracer}
	if t := g.listener.TLS; t != nil {
		bo.GatewayCAFile = t.CertFile
	}
	if g.Backends, err = StartBackends(ctx, bo); err != nil {
		return err
	}
	g.closers = append(g.closers, g.Backends.Close)
	return nil
}

// startAdmin serves the admin API on its own listener.
func startAdmin(g *Gateway, opts Options) error {
	h, err := admin.New(admin.Options{
		Keys:  g.Keys,
		Token: opts.AdminToken,
		// The configuration in force, which the routing endpoints change.
		Config:  g.Control.Config,
		Routing: g.Control,
		Usage:   g.Usage,
		Metrics: func(w io.Writer) error {
			for _, write := range []func(io.Writer) error{metrics.ReadBuild().WritePrometheus, metrics.WriteProcess,
				g.Requests.WritePrometheus, g.Metrics.WritePrometheus, g.Control.WritePrometheus} {
				if err := write(w); err != nil {
					return err
				}
			}
			if g.Backends != nil && g.Backends.metrics != nil {
				return g.Backends.metrics(w)
			}
			return nil
		},
		// This process sees its own changes at once; others at their next
		// poll of the key database.
		Changed: g.KeyCache.Invalidate,
		Logger:  opts.Logger.With("component", "admin"),
	})
	if err != nil {
		return fmt.Errorf("gateway: admin: %w", err)
	}
	addr, stop, err := serveAdmin(opts.AdminListen, h, g.Ready)
	if err != nil {
		return err
	}
	g.adminAddr = addr
	g.closers = append(g.closers, stop)
	return nil
}

// serveAdmin serves the admin handler and the probes (withHealth) on addr
// until stop is called.
func serveAdmin(addr string, h http.Handler, ready func() bool) (net.Addr, func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: admin listener: %w", err)
	}
	srv := &http.Server{Handler: withHealth(h, ready), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr(), func() { _ = srv.Close() }, nil
}

// AdminURL is the admin API's base URL, "" when it is not served.
func (g *Gateway) AdminURL() string {
	if g.adminAddr == nil {
		return ""
	}
	return "http://" + g.adminAddr.String()
}

// XDSAddr is the control plane's xDS (ADS) address.
func (g *Gateway) XDSAddr() string { return g.xdsAddr }

// RateLimitAddr is the RLS address extproc and the data plane use.
func (g *Gateway) RateLimitAddr() string { return g.rlsAddr }

// BaseURL is the OpenAI base URL of the first listener.
func (g *Gateway) BaseURL() string {
	scheme := "http"
	if g.listener.TLS != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s/v1", scheme, g.Data.Addr(g.listener.Name))
}

// Close stops every component, most recently started first.
// Ready reports whether the gateway should receive traffic: it has a
// configuration (extproc has its catalog; the data plane serves, which
// Start waited for) and it is not draining.
func (g *Gateway) Ready() bool {
	return g.Data != nil && !g.Data.Draining() && g.ExtProc != nil && g.ExtProc.Ready()
}

// Shutdown drains the data plane for up to ctx's deadline (see
// dataplane.DataPlane.Shutdown), then closes everything. Readiness is
// false from the start of the drain.
func (g *Gateway) Shutdown(ctx context.Context) error {
	var err error
	if g.Data != nil {
		err = g.Data.Shutdown(ctx)
	}
	g.Close()
	return err
}

func (g *Gateway) Close() {
	if g.stop != nil {
		g.stop()
	}
	for i := len(g.closers) - 1; i >= 0; i-- {
		g.closers[i]()
	}
	g.closers = nil
}

func serveGRPC(g *Gateway, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) (string, error) {
	return serveGRPCOn(g, "", register, opts...)
}

// serveGRPCOn serves on addr, or on a free loopback port when addr is "".
func serveGRPCOn(g *Gateway, addr string, register func(grpc.ServiceRegistrar), opts ...grpc.ServerOption) (string, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", err
	}
	srv := grpc.NewServer(append(hotPathServerOptions(), opts...)...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	g.closers = append(g.closers, srv.Stop)
	return lis.Addr().String(), nil
}

// embeddedLimiter lets extproc call the in-process rate limit service as the
// RLS client interface it consumes.
type embeddedLimiter struct{ s *ratelimit.Server }

func (l embeddedLimiter) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, _ ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	return l.s.ShouldRateLimit(ctx, in)
}

// InMemory lets extproc skip the limiter timeout for a service on its
// in-memory store, which answers without waiting.
func (l embeddedLimiter) InMemory() bool { return l.s.InMemory() }

// hotPathServerOptions tune the gRPC servers every request crosses (ext_proc,
// rate limits): each request opens short streams and exchanges small
// messages, so per-stream and per-message overhead is the gateway's added
// latency. Stream workers reuse goroutines whose stacks have already grown
// (a fresh goroutine per stream pays for stack growth every time; gRPC falls
// back to a new goroutine when all workers are busy, so long streams cannot
// starve others). Static flow-control windows, large enough for a buffered
// body, turn off the BDP estimator's PINGs.
func hotPathServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.NumStreamWorkers(uint32(4 * runtime.GOMAXPROCS(0))),
		grpc.InitialWindowSize(4 << 20),
		grpc.InitialConnWindowSize(16 << 20),
	}
}

func dialADS(g *Gateway, addr string, node *corev3.Node, log *slog.Logger) (*adsclient.Client, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway: dial control plane: %w", err)
	}
	g.closers = append(g.closers, func() { _ = cc.Close() })
	return adsclient.New(cc, node, log.With("component", "ads", "node", node.GetId())), nil
}

// startDemoUpstreams starts the fake vendors the config asks for, each in
// its kind's wire format (openai, anthropic, gemini). A provider
// that points at a demo upstream and names an unset credential variable gets a
// random credential for this process, so credential injection is exercised
// end to end even in the demo.
func startDemoUpstreams(ctx context.Context, cfg *config.Config, g *Gateway, start DemoUpstreamFunc) error {
	// Everything that may point at a demo upstream, with its credential
	// variable: the providers and the web search vendor.
	type user struct{ baseURL, keyEnv string }
	var users []user
	for _, p := range cfg.Providers {
		users = append(users, user{p.BaseURL, p.APIKeyEnv})
	}
	if ws := cfg.Tools.WebSearch; ws != nil {
		users = append(users, user{ws.BaseURL, ws.APIKeyEnv})
	}
	for _, d := range cfg.DemoUpstreams {
		var apiKey string
		for _, p := range users {
			u, err := url.Parse(p.baseURL)
			if err != nil || u.Host != d.Listen || p.keyEnv == "" {
				continue
			}
			if os.Getenv(p.keyEnv) == "" {
				if err := os.Setenv(p.keyEnv, randomSecret()); err != nil {
					return err
				}
			}
			apiKey = os.Getenv(p.keyEnv)
		}
		if start == nil {
			return fmt.Errorf("gateway: demo upstream %q: this program cannot start demo upstreams (Options.DemoUpstream is nil)", d.Name)
		}
		srv, err := start(ctx, d.Listen, d.Kind, apiKey)
		if err != nil {
			return fmt.Errorf("gateway: demo upstream %q on %s: %w", d.Name, d.Listen, err)
		}
		g.closers = append(g.closers, func() { _ = srv.Close() })
	}
	return nil
}

// withHealth serves the probes beside the admin API, without its token (an
// orchestrator's probe has none): GET /healthz, liveness, answers 200 while
// the process serves HTTP at all; GET /readyz answers 200 only while ready
// (configured and not draining), else 503.
func withHealth(admin http.Handler, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.Handle("/", admin)
	return mux
}

// checkPlainListeners refuses, before anything starts, what the data plane
// would refuse on its first xDS update: plain HTTP on a non-loopback address
// without Insecure. Failing here says why at once instead of after the xDS
// wait.
func checkPlainListeners(cfg *config.Config, opts Options) error {
	for i, l := range cfg.Listeners {
		addr := l.Address
		if i == 0 && opts.ListenOverride != "" {
			addr = opts.ListenOverride
		}
		if l.TLS != nil || opts.Insecure || strings.HasPrefix(addr, "unix:") {
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("gateway: listener %q: address %q: %w", l.Name, addr, err)
		}
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			continue
		}
		return fmt.Errorf("gateway: listener %q on %s would serve plain HTTP on a non-loopback address, so API keys would cross the network in the clear: give the listener tls (cert_file, key_file) or pass --insecure", l.Name, addr)
	}
	return nil
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "demo-" + hex.EncodeToString(b)
}
