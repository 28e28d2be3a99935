package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/envoy"
	"github.com/switchyard-ai/switchyard/internal/config"
)

const envoyUsage = `Usage:
  switchyard envoy bootstrap [--config FILE] [--node-id ID] [--xds ADDR] [--extproc ADDR|unix:PATH] [--ratelimit ADDR]
                             [--region R] [--admin ADDR] [--readiness ADDR] [--max-heap-bytes N] [--max-connections N]
  switchyard envoy snapshot [--config FILE]
  switchyard envoy validate [--bootstrap FILE] [--config FILE]
`

// cmdEnvoy is `switchyard envoy`: what Envoy, the production data plane,
// is given, and the offline proof that it would load.
func cmdEnvoy(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, envoyUsage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "bootstrap":
		return cmdEnvoyBootstrap(args[1:], stdout, stderr)
	case "snapshot":
		return cmdEnvoySnapshot(args[1:], stdout, stderr)
	case "validate":
		return cmdEnvoyValidate(args[1:], stdout, stderr)
	}
	fmt.Fprint(stderr, envoyUsage)
	return fmt.Errorf("unknown envoy command %q", args[0])
}

func cmdEnvoyBootstrap(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoy bootstrap", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file; its region becomes the node's (default: the embedded configuration)")
	var o envoy.BootstrapOptions
	fs.StringVar(&o.NodeID, "node-id", envoy.DefaultNodeID, "node id (envoy --service-node overrides it)")
	fs.StringVar(&o.NodeCluster, "node-cluster", envoy.DefaultNodeCluster, "node cluster")
	fs.StringVar(&o.Region, "region", "", "node locality region (default: the configuration's region)")
	fs.StringVar(&o.XDS, "xds", envoy.DefaultXDS, "control plane address, host:port")
	fs.StringVar(&o.ExtProc, "extproc", envoy.DefaultExtProc, "extproc address, host:port or unix:/path")
	fs.StringVar(&o.RateLimit, "ratelimit", envoy.DefaultRateLimit, "rate limit service (RLS) address, host:port")
	fs.StringVar(&o.Admin, "admin", envoy.DefaultAdmin, "admin interface address (loopback only)")
	fs.StringVar(&o.Readiness, "readiness", "", "address of a listener exposing only /ready, for probes (default: none)")
	fs.Uint64Var(&o.MaxHeapBytes, "max-heap-bytes", envoy.DefaultMaxHeapBytes, "heap size at which the overload manager sheds load")
	fs.Int64Var(&o.MaxDownstreamConnections, "max-connections", envoy.DefaultMaxDownstreamConnections, "client connections allowed process-wide")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.Region == "" {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		o.Region = cfg.Region
	}
	out, err := envoy.RenderBootstrap(o)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func cmdEnvoySnapshot(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoy snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	snap, err := controlplane.Build(cfg, "1")
	if err != nil {
		return err
	}
	out, err := envoy.SnapshotJSONLines(snap)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

func cmdEnvoyValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoy validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bootPath := fs.String("bootstrap", "", "Envoy bootstrap file (default: the one `envoy bootstrap` renders)")
	cfgPath := fs.String("config", "", "configuration file (default: the embedded configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	var b *bootstrapv3.Bootstrap
	bootName := "rendered default bootstrap"
	if *bootPath != "" {
		data, err := os.ReadFile(*bootPath)
		if err != nil {
			return err
		}
		if b, err = envoy.ParseBootstrap(data); err != nil {
			return fmt.Errorf("%s: %w", *bootPath, err)
		}
		bootName = *bootPath
	} else if b, err = envoy.Bootstrap(envoy.BootstrapOptions{Region: cfg.Region}); err != nil {
		return err
	}
	snap, err := controlplane.Build(cfg, "1")
	if err != nil {
		return err
	}
	c := envoy.FromSnapshot(b, snap)
	if err := envoy.Validate(c); err != nil {
		return fmt.Errorf("envoy configuration is invalid:\n%w", err)
	}
	name := *cfgPath
	if name == "" {
		name = config.DefaultName
	}
	fmt.Fprintf(stdout, "ok: %s with %s: %d listeners, %d route configurations, %d clusters, %d endpoint assignments, %d secrets\n",
		bootName, name, len(c.Listeners), len(c.Routes), len(c.Clusters), len(c.Endpoints), len(c.Secrets))
	return nil
}
