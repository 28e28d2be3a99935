package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/switchyard-ai/switchyard/internal/gateway"
)

// cmdDataPlane is `switchyard dataplane`: the Go data plane alone, in
// Envoy's place beside a `switchyard extproc`, configured by an external
// `switchyard controlplane` over xDS. It keeps serving the last
// configuration it received while the control plane is away.
func cmdDataPlane(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataplane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o gateway.DataPlaneOptions
	fs.StringVar(&o.XDS, "xds", "127.0.0.1:18000", "control plane address")
	fs.StringVar(&o.ExtProc, "extproc", "127.0.0.1:18001", "extproc address, host:port or unix:/path")
	fs.StringVar(&o.RateLimit, "ratelimit", "", "rate limit service (RLS) address, for the charge of each request's tokens (default: none)")
	fs.StringVar(&o.Listen, "listen", "", "address the listener named by --listener binds instead of its configured one (127.0.0.1:0: a free port)")
	fs.StringVar(&o.Listener, "listener", "public", "the listener --listen overrides")
	fs.StringVar(&o.Region, "region", "", "home region announced to the control plane (default: the config's region)")
	fs.StringVar(&o.NodeID, "node-id", "switchyard-dataplane", "node id announced to the control plane")
	fs.BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP on a non-loopback address")
	cfgPath := fs.String("config", "", "configuration file, for its limits section, read at start (default: the embedded configuration)")
	health := fs.String("health", "", "address of the HTTP health endpoint GET /healthz: 200 once the listener serves a configuration and until a drain starts, else 503 (default: none)")
	grace := fs.Duration("shutdown-grace", defaultShutdownGrace, "on SIGTERM or Ctrl-C, how long requests and streams in flight may run on before they are ended with an error")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
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
	o.Limits, o.Logger = cfg.Limits, logger
	d, err := gateway.StartDataPlane(ctx, o)
	if err != nil {
		return err
	}
	defer d.Close()
	stop, err := serveHealth(d.Component, "dataplane", *health, stdout)
	if err != nil {
		return err
	}
	defer stop()
	// Without a control plane there is nothing to serve yet: wait for it,
	// as Envoy does, rather than give up.
	for !d.Ready() {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Fprintf(stdout, "dataplane serving on %s\n", d.ListenAddr())
	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	if err := d.Shutdown(dctx); err != nil {
		logger.Warn("shutdown: the grace period ended requests still in flight", "grace", *grace, "error", err)
	}
	return nil
}
