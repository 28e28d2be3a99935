package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
	"github.com/switchyard-ai/switchyard/internal/tracing"
)

// cmdControlPlane is `switchyard controlplane`: the control plane alone,
// serving xDS to Envoy, extproc and the rate limit service.
func cmdControlPlane(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded configuration)")
	listen := fs.String("listen", "127.0.0.1:18000", "xDS (ADS) address")
	health := fs.String("health", "", "address of the HTTP health endpoint GET /healthz (default: none)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	adminListen := fs.String("admin-listen", "", `address of the admin API (keys, tiers, routing changes, drain) and its probes; "" disables it; loopback unless --insecure (reach it with kubectl port-forward)`)
	adminTokenFile := fs.String("admin-token-file", "", "file holding the admin API token (default: $"+adminTokenEnv+", else DATA_DIR/"+adminTokenFileName+", created if missing)")
	dataDir := fs.String("data-dir", ".data", "directory of the key database the admin API manages (the one every extproc reads)")
	insecureAdmin := fs.Bool("insecure", false, "allow the admin API on a non-loopback address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	o := gateway.ControlPlaneOptions{Config: cfg, ConfigPath: *cfgPath, Listen: *listen, Logger: logger}
	var tokenSource string
	if *adminListen != "" {
		if err := checkAdminAddr(*adminListen, *insecureAdmin); err != nil {
			return err
		}
		if o.AdminToken, tokenSource, err = adminToken(*adminTokenFile, *dataDir); err != nil {
			return err
		}
		o.AdminListen, o.DataDir = *adminListen, *dataDir
	}
	c, err := gateway.StartControlPlane(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.AdminAddr != nil {
		fmt.Fprintf(stdout, "Admin API at http://%s/admin/v1/keys (token: %s)\n", c.AdminAddr, tokenSource)
	}
	return serveUntilDone(ctx, c, "control plane", *health, stdout)
}

// cmdExtProc is `switchyard extproc`: the external processor alone, for
// Envoy to call over TCP or, as a sidecar, a Unix socket.
func cmdExtProc(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("extproc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o gateway.ExtProcOptions
	fs.StringVar(&o.XDS, "xds", "127.0.0.1:18000", "control plane address")
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:18001", "ext_proc address, host:port or unix:/path")
	fs.StringVar(&o.DataDir, "data-dir", ".data", "directory of the key database")
	fs.StringVar(&o.RateLimit, "ratelimit", "", "rate limit service (RLS) address (default: no rate limits)")
	fs.Int64Var(&o.MaxRequestBodyBytes, "max-request-body-bytes", 0, "largest request body Envoy buffers (default: the configuration default, 32 MiB)")
	fs.StringVar(&o.NodeID, "node-id", "switchyard-extproc", "node id announced to the control plane")
	fs.StringVar(&o.Region, "region", "", "home region announced to the control plane, as the Envoy beside it does (default: the config's region)")
	cfgPath := fs.String("config", "", "configuration file, for its storage section (where the keys are; default: the embedded configuration, SQLite in --data-dir)")
	health := fs.String("health", "", "address of the HTTP health endpoint GET /healthz (default: none)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	otlp := fs.String("otlp-endpoint", "", "OTLP/gRPC collector URL traces are exported to, http://host:4317 or https://… (default: no tracing; as the configuration's observability.tracing.otlp_endpoint)")
	ratio := fs.Float64("trace-sample-ratio", 1, "share of new traces recorded, 0 to 1 (a request's traceparent keeps its own decision)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *otlp != "" {
		if *ratio < 0 || *ratio > 1 {
			return errors.New("--trace-sample-ratio must be between 0 and 1")
		}
		o.Tracing = &config.Tracing{OTLPEndpoint: *otlp, SampleRatio: ratio}
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	o.KeyStorage = cfg.Storage
	o.Logger = logger
	o.InternalToken = os.Getenv(gateway.InternalTokenEnv)
	if o.InternalToken == "" {
		logger.Warn("the internal token is not set: files, batches and responses will refuse every request", "env", gateway.InternalTokenEnv)
	}
	c, err := gateway.StartExtProc(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	return serveUntilDone(ctx, c, "extproc", *health, stdout)
}

// cmdBackends is `switchyard backends`: the files, batches and responses
// services alone, behind Envoy's backends cluster.
func cmdBackends(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("backends", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o gateway.BackendsOptions
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:18090", "address of the backends (the config's backends.address); never expose it to clients")
	fs.StringVar(&o.DataDir, "data-dir", ".data", "directory of the files, batches and responses databases and file blobs")
	fs.StringVar(&o.GatewayURL, "gateway-url", "", "the gateway's OpenAI base URL ending in /v1, which batch lines and responses are sent through (required)")
	fs.StringVar(&o.GatewayCAFile, "gateway-ca-file", "", "CA bundle verifying the gateway's certificate (default: the system roots)")
	cfgPath := fs.String("config", "", "configuration file, for its tools, tiers and storage sections (default: the embedded configuration)")
	fs.DurationVar(&o.BatchLease, "batch-lease", 30*time.Second, "how long this replica's claim on a running batch lasts unless renewed (renewed every third of it); another replica takes a dead one's batches over after it")
	fs.DurationVar(&o.BackgroundLease, "background-lease", 30*time.Second, "the same for a running background response (background: true)")
	fs.IntVar(&o.BackgroundPerKey, "background-per-key", 16, "how many background responses a key may have queued or in progress at once (more: 429)")
	health := fs.String("health", "", "address of the HTTP health endpoint GET /healthz (default: none)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.BatchLease < time.Second {
		return errors.New("--batch-lease must be at least 1s")
	}
	if o.BackgroundLease < time.Second {
		return errors.New("--background-lease must be at least 1s")
	}
	if o.BackgroundPerKey < 1 {
		return errors.New("--background-per-key must be at least 1")
	}
	if o.GatewayURL == "" {
		return errors.New("--gateway-url is required")
	}
	logger, err := newLogger(stderr, *logLevel)
	if err != nil {
		return err
	}
	o.Logger = logger
	o.Token = os.Getenv(gateway.InternalTokenEnv)
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	o.Tools = cfg.Tools
	o.Tiers = cfg.Tiers
	o.Models = cfg.Models
	tp, err := tracing.NewProvider(ctx, cfg.Observability.Tracing, "switchyard-backends")
	if err != nil {
		return err
	}
	if tp != nil {
		o.Tracer = tp
		defer tracing.Shutdown(tp)
	}
	o.Storage = cfg.Storage
	c, err := gateway.StartBackends(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	return serveUntilDone(ctx, c, "backends", *health, stdout)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(jsonlog.NewHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// serveUntilDone serves the health endpoint, if asked, until ctx ends:
// GET /healthz answers 200 once the component is ready and 503 before, so
// orchestrators send traffic only to a component that can serve it, and
// GET /metrics the component's metrics (Prometheus text; extproc's
// rate-limiting outcomes; with Envoy, request metrics are Envoy's own).
func serveUntilDone(ctx context.Context, c *gateway.Component, what, health string, stdout io.Writer) error {
	stop, err := serveHealth(c, what, health, stdout)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(stdout, "%s serving on %s\n", what, c.Addr)
	<-ctx.Done()
	return nil
}

// serveHealth serves the health endpoint (see serveUntilDone) on health,
// if not empty, until stop is called.
func serveHealth(c *gateway.Component, what, health string, stdout io.Writer) (stop func(), err error) {
	if health != "" {
		lis, err := net.Listen("tcp", health)
		if err != nil {
			return nil, fmt.Errorf("--health: %w", err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			if !c.Ready() {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("content-type", "text/plain; version=0.0.4")
			_ = c.WriteMetrics(w)
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				fmt.Fprintf(stdout, "health endpoint stopped: %v\n", err)
			}
		}()
		fmt.Fprintf(stdout, "%s health at http://%s/healthz\n", what, lis.Addr())
		return func() { _ = srv.Close() }, nil
	}
	return func() {}, nil
}
