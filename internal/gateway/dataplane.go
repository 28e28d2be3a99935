package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/internal/adsclient"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/metrics"
)

// DataPlaneOptions configure `switchyard dataplane`: the Go data plane on
// its own, in Envoy's place, with the bootstrap Envoy would get from
// `switchyard envoy bootstrap` given as addresses.
type DataPlaneOptions struct {
	// XDS is the control plane's address; everything but the bootstrap
	// clusters (listeners, routes, providers, the backends) comes from it.
	XDS string
	// ExtProc is extproc's gRPC address, host:port or unix:/path.
	ExtProc string
	// RateLimit is the rate limit service's RLS address; "" leaves the
	// data plane's rate limit filter without a service (it fails as
	// configured for an unreachable limiter).
	RateLimit string
	// Listener names the listener Listen overrides (default "public").
	Listener string
	// Listen, when set, is the address that listener binds instead of the
	// configured one ("127.0.0.1:0" picks a free port).
	Listen string
	// Region is the home region announced in the node locality.
	Region string
	NodeID string
	// Insecure allows plain HTTP on a non-loopback address.
	Insecure bool
	// Limits are the request limits the data plane applies at start (the
	// configuration's limits section, as Envoy's bootstrap fixes them).
	Limits config.Limits
	Logger *slog.Logger
}

// DataPlane is a running `switchyard dataplane`.
type DataPlane struct {
	*Component
	Data     *dataplane.DataPlane
	listener string
}

// ListenAddr is the listener's bound address, "" until the first
// configuration has arrived.
func (d *DataPlane) ListenAddr() string {
	if a := d.Data.Addr(d.listener); a != nil {
		return a.String()
	}
	return ""
}

// Shutdown drains the data plane (see dataplane.DataPlane.Shutdown), then
// closes the rest.
func (d *DataPlane) Shutdown(ctx context.Context) error {
	err := d.Data.Shutdown(ctx)
	d.Close()
	return err
}

// StartDataPlane starts the data plane and its subscription to the control
// plane. It returns at once: the listener starts serving when the first
// configuration arrives (Ready), and keeps serving the last configuration
// it received while the control plane is unreachable, as Envoy does.
func StartDataPlane(_ context.Context, opts DataPlaneOptions) (*DataPlane, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Listener == "" {
		opts.Listener = "public"
	}
	if opts.NodeID == "" {
		opts.NodeID = "switchyard-dataplane"
	}
	if opts.XDS == "" || opts.ExtProc == "" {
		return nil, fmt.Errorf("gateway: data plane: the control plane and extproc addresses are required")
	}
	static := map[string]string{catalog.ExtProcCluster: opts.ExtProc, catalog.XDSCluster: opts.XDS}
	if opts.RateLimit != "" {
		static[controlplane.RateLimitCluster] = opts.RateLimit
	}
	requests := metrics.NewRequests()
	dpOpts := dataplane.Options{
		Logger:               log.With("component", "dataplane"),
		StaticClusters:       static,
		Insecure:             opts.Insecure,
		Metrics:              requests,
		Region:               opts.Region,
		TraceClusters:        map[string]bool{controlplane.BackendsCluster: true},
		RequestBodyTimeout:   opts.Limits.RequestBodyTimeout,
		MaxRequestsPerKey:    opts.Limits.MaxConcurrentRequestsPerKey,
		MaxBodyBytesInFlight: opts.Limits.MaxRequestBytesInFlight,
	}
	if opts.Listen != "" {
		dpOpts.ListenOverride = map[string]string{opts.Listener: opts.Listen}
	}
	data := dataplane.New(dpOpts)
	d := &DataPlane{Component: &Component{metrics: requests.WritePrometheus}, Data: data, listener: opts.Listener}
	d.ready = func() bool { return !data.Draining() && data.Addr(opts.Listener) != nil }
	runCtx, cancel := context.WithCancel(context.Background())
	cc, err := grpc.NewClient(opts.XDS, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gateway: dial control plane: %w", err)
	}
	// Closed last to first: the subscription ends before the data plane
	// closes, so no update lands on a closed one.
	d.closers = append(d.closers, func() { _ = data.Close() }, func() { _ = cc.Close() }, cancel)
	ads := adsclient.New(cc, data.Node(opts.NodeID, "switchyard"), log.With("component", "ads", "node", opts.NodeID))
	data.Watch(ads)
	go func() { _ = ads.Run(runCtx) }()
	return d, nil
}

// WaitReady waits until the listener serves, within timeout.
func (d *DataPlane) WaitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !d.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("gateway: data plane: listener %q not serving within %s (no configuration from the control plane?)", d.listener, timeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
