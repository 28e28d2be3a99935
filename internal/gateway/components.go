package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/backends/admin"
	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/extproc"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/metrics"
	"github.com/switchyard-ai/switchyard/internal/tracing"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// When Envoy is the data plane, the control plane and extproc run as their
// own processes (`switchyard controlplane`, `switchyard extproc`), as in
// deploy/. They are built from the same parts as Start's in-process stack.

// Component is one component running on its own.
type Component struct {
	// Addr is the address it serves gRPC on (TCP or Unix socket).
	Addr net.Addr
	// AdminAddr is the admin API's address, nil when not served.
	AdminAddr net.Addr
	ready     func() bool
	closers   []func()
	// metrics, when set, writes the component's metrics in the Prometheus
	// text format (WriteMetrics).
	metrics func(io.Writer) error
}

// WriteMetrics writes the component's metrics (on every component the build
// info and the Go runtime and process metrics; the control plane:
// configuration reloads; extproc: rate-limiting outcomes; the backends: the
// batch backlog) in the Prometheus text format.
func (c *Component) WriteMetrics(w io.Writer) error {
	if err := metrics.ReadBuild().WritePrometheus(w); err != nil {
		return err
	}
	if err := metrics.WriteProcess(w); err != nil {
		return err
	}
	if c.metrics == nil {
		return nil
	}
	return c.metrics(w)
}

// Ready reports whether the component can serve: the control plane once it
// has a snapshot, extproc once it has the catalog.
func (c *Component) Ready() bool { return c.ready() }

// Close stops the component, most recently started part first.
func (c *Component) Close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
	c.closers = nil
}

// ControlPlaneOptions configure `switchyard controlplane`.
type ControlPlaneOptions struct {
	Config *config.Config
	// Listen is the xDS address (ADS and the per-type services), host:port.
	Listen string
	// ConfigPath, when set, is the file Config came from, reloaded when it
	// changes (see Options.ConfigPath).
	ConfigPath     string
	ReloadInterval time.Duration
	Logger         *slog.Logger

	// AdminListen, when set, serves the admin API (keys, tiers, routing
	// changes, drain/undrain, metrics) and the /healthz and /readyz probes
	// there, with the bearer AdminToken: the fleet's one place to manage
	// keys and routes without exec'ing into pods or rolling them. Keys are
	// kept in the key database under DataDir, which every extproc reads.
	AdminListen string
	AdminToken  string
	DataDir     string
	// RoutingPoll is how often the routing overlay's store is read for
	// other replicas' changes (controlplane.DefaultRoutingPoll if 0); on
	// PostgreSQL a notification usually comes first. The overlay is kept in
	// PostgreSQL with storage.metadata.kind postgres, else in the key
	// database under DataDir, else (no DataDir) in memory.
	RoutingPoll time.Duration
}

// StartControlPlane serves the snapshot of opts.Config over xDS to every
// Envoy, extproc and rate limit service that subscribes.
func StartControlPlane(ctx context.Context, opts ControlPlaneOptions) (*Component, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cp := controlplane.New(log.With("component", "controlplane"))
	// The routing overlay is read before the first snapshot: a restarted
	// control plane never serves a drained provider.
	closeRouting, err := useRoutingStore(ctx, cp, opts.Config.Storage, opts.DataDir)
	if err != nil {
		return nil, err
	}
	if _, err := cp.Update(ctx, opts.Config); err != nil {
		closeRouting()
		return nil, err
	}
	lis, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		closeRouting()
		return nil, fmt.Errorf("gateway: control plane: %w", err)
	}
	srv := grpc.NewServer()
	cp.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	watchCtx, cancel := context.WithCancel(context.Background())
	if opts.ConfigPath != "" {
		go cp.WatchFile(watchCtx, opts.ConfigPath, opts.ReloadInterval)
	}
	go cp.WatchRoutingStore(watchCtx, opts.RoutingPoll)
	c := &Component{
		Addr:  lis.Addr(),
		ready: func() bool { return true }, // Update succeeded: every node has a snapshot
		// Stop, not GracefulStop: xDS streams never end on their own, so a
		// graceful stop would wait for its subscribers forever (SIGTERM
		// hung while any data plane was connected). They reconnect.
		closers: []func(){closeRouting, srv.Stop, cancel},
		metrics: cp.WritePrometheus,
	}
	if opts.AdminListen != "" {
		if err := serveControlPlaneAdmin(ctx, c, cp, opts, log); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// serveControlPlaneAdmin starts the admin API beside the control plane.
// Routing changes apply to the configuration in force and reach every data
// plane and extproc over xDS; key changes reach every extproc at its next
// poll of the key database.
func serveControlPlaneAdmin(ctx context.Context, c *Component, cp *controlplane.Server, opts ControlPlaneOptions, log *slog.Logger) error {
	store, err := OpenKeyStore(ctx, opts.Config.Storage, opts.DataDir)
	if err != nil {
		return err
	}
	c.closers = append(c.closers, func() { _ = store.Close() })
	h, err := admin.New(admin.Options{
		Keys: store, Token: opts.AdminToken,
		Config: cp.Config, Routing: cp,
		Metrics: c.WriteMetrics,
		Logger:  log.With("component", "admin"),
	})
	if err != nil {
		return fmt.Errorf("gateway: admin: %w", err)
	}
	addr, stop, err := serveAdmin(opts.AdminListen, h, c.Ready)
	if err != nil {
		return err
	}
	c.AdminAddr = addr
	c.closers = append(c.closers, stop)
	return nil
}

// ExtProcOptions configure `switchyard extproc`.
type ExtProcOptions struct {
	// XDS is the control plane's address; extproc subscribes to the catalog.
	XDS string
	// Listen is host:port, or unix:/path for a sidecar beside Envoy.
	Listen string
	// DataDir holds the key database.
	DataDir string
	// RateLimit is the rate limit service's RLS address (envoyproxy/ratelimit);
	// "" admits requests without rate limits.
	RateLimit string
	// MaxRequestBodyBytes sizes the largest ext_proc message (a buffered
	// body); config.DefaultMaxRequestBodyBytes if 0. It must be at least the
	// configuration's limits.max_request_body_bytes.
	MaxRequestBodyBytes int64
	// NodeID names this extproc to the control plane.
	NodeID string
	// Region, when set, is the node locality's region: the control plane
	// serves the catalog of that home region (the one the Envoy beside
	// this extproc announces). Default: the configuration's region.
	Region string
	// InternalToken is the token shared with the backends
	// (docs/backends-design.md); empty: no backend calls are accepted and
	// backend routes get no token.
	InternalToken string
	// KeyStorage is where the keys are (the config's storage section;
	// zero: the SQLite database in DataDir).
	KeyStorage config.Storage
	Logger     *slog.Logger
	// Tracing, when it names a collector, exports extproc's spans
	// (service switchyard-extproc).
	Tracing *config.Tracing
}

// StartExtProc serves the ext_proc service, configured by the control
// plane's catalog over xDS, with keys from DataDir.
func StartExtProc(ctx context.Context, opts ExtProcOptions) (_ *Component, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.NodeID == "" {
		opts.NodeID = "switchyard-extproc"
	}
	if opts.MaxRequestBodyBytes == 0 {
		opts.MaxRequestBodyBytes = config.DefaultMaxRequestBodyBytes
	}
	c := &Component{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	c.closers = append(c.closers, cancel)

	store, err := OpenKeyStore(ctx, opts.KeyStorage, opts.DataDir)
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, func() { _ = store.Close() })
	cache := newKeyCache(store)
	go cache.Watch(runCtx, 0, func(err error) {
		log.Warn("key store poll failed (the key cache is dropped, or on PostgreSQL kept for the outage grace)", "component", "keys", "error", err)
	})
	rec, usageClosers, err := startUsage(ctx, opts.KeyStorage, opts.DataDir, 0, log.With("component", "usage"))
	if err != nil {
		return nil, err
	}
	c.closers = append(c.closers, usageClosers...)
	m := ratelimit.NewMetrics()
	c.metrics = m.WritePrometheus
	eo := extproc.Options{Keys: cache, Metrics: m, InternalToken: opts.InternalToken,
		Usage: usageSink{rec: rec}, Budgets: usageSink{rec: rec},
		Logger: log.With("component", "extproc")}
	tp, err := tracing.NewProvider(ctx, opts.Tracing, "switchyard-extproc")
	if err != nil {
		return nil, err
	}
	if tp != nil {
		eo.Tracer = tp
		c.closers = append(c.closers, func() { tracing.Shutdown(tp) })
	}
	if opts.RateLimit != "" {
		rls, err := grpc.NewClient("passthrough:///"+opts.RateLimit, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("gateway: dial ratelimit: %w", err)
		}
		c.closers = append(c.closers, func() { _ = rls.Close() })
		eo.Limiter = rlsv3.NewRateLimitServiceClient(rls)
	}
	srv := extproc.New(eo)
	c.ready = srv.Ready

	lis, err := listen(opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("gateway: extproc: %w", err)
	}
	// A buffered request body arrives in one gRPC message: allow the body
	// limit plus room for headers.
	gs := grpc.NewServer(append(hotPathServerOptions(), grpc.MaxRecvMsgSize(int(opts.MaxRequestBodyBytes)+1<<20))...)
	srv.Register(gs)
	go func() { _ = gs.Serve(lis) }()
	c.Addr = lis.Addr()
	c.closers = append(c.closers, gs.GracefulStop)

	cc, err := grpc.NewClient(opts.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("gateway: dial control plane: %w", err)
	}
	c.closers = append(c.closers, func() { _ = cc.Close() })
	node := &corev3.Node{Id: opts.NodeID, Cluster: "switchyard"}
	if opts.Region != "" {
		node.Locality = &corev3.Locality{Region: opts.Region}
	}
	ads := adsclient.New(cc, node, log.With("component", "ads", "node", opts.NodeID))
	ads.Watch(resourcev3.RuntimeType, []string{catalog.RuntimeName}, srv.CatalogHandler)
	go func() { _ = ads.Run(runCtx) }()
	return c, nil
}

// listen listens on host:port or unix:/path. A Unix socket is made
// group-writable: Envoy, in another container of the pod, connects to it as
// a member of the pod's fsGroup.
func listen(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if path == "" {
		return nil, errors.New("empty unix socket path")
	}
	// A stale socket file from an earlier run would make bind fail.
	if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o660); err != nil {
		_ = lis.Close()
		return nil, err
	}
	return lis, nil
}
