// Command switchyard is the Switchyard gateway: one binary whose subcommands
// run the whole stack, manage API keys and check configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/switchyard-ai/switchyard/internal/metrics"
)

const usage = `switchyard: an OpenAI-compatible inference gateway

Usage:
  switchyard --version
  switchyard run [--config FILE] [--data-dir DIR] [--listen ADDR] [--region us|asia] [--insecure] [--demo-key]
                 [--admin-listen ADDR] [--admin-token-file FILE] [--ratelimit-addr ADDR] [--xds-listen ADDR]
  switchyard validate [--config FILE] [--skip-credentials] [--check-connections]
  switchyard keys create --data-dir DIR --name NAME [--tier TIER] [--rpm N] [--tpm N] [--models IDS] [--monthly-budget USD] [--budget-alert R] [--config FILE]
  switchyard keys list --data-dir DIR [--config FILE]
  switchyard keys show --data-dir DIR [--config FILE] KEY_OR_ID
  switchyard keys revoke --data-dir DIR [--config FILE] KEY_OR_ID
  switchyard keys rotate --data-dir DIR [--grace 24h] [--config FILE] KEY_OR_ID
  switchyard keys set-tier --data-dir DIR [--rpm N] [--tpm N] [--models IDS] [--monthly-budget USD] [--budget-alert R] [--config FILE] KEY_OR_ID TIER
  switchyard usage --data-dir DIR [--key KEY_OR_ID] [--since YYYY-MM-DD] [--until YYYY-MM-DD] [--format json|csv]
  switchyard datakey status|rotate|rewrap|retire [--config FILE] --data-dir DIR
  switchyard fake [--listen ADDR] [--api-key-env VAR] [--service-time D] [--chunk-delay D]
  switchyard envoy bootstrap [--config FILE] [--node-id ID] [--xds ADDR] [--extproc ADDR|unix:PATH] [--ratelimit ADDR]
  switchyard envoy snapshot [--config FILE]
  switchyard envoy validate [--bootstrap FILE] [--config FILE]
  switchyard controlplane [--config FILE] [--listen ADDR] [--health ADDR]
  switchyard extproc [--config FILE] [--xds ADDR] [--listen ADDR|unix:PATH] [--data-dir DIR] [--ratelimit ADDR] [--health ADDR]
  switchyard dataplane [--config FILE] [--xds ADDR] [--extproc ADDR|unix:PATH] [--ratelimit ADDR] [--listen ADDR] [--listener NAME]
                       [--region us|asia] [--health ADDR] [--shutdown-grace D]
  switchyard backends --gateway-url URL [--config FILE] [--listen ADDR] [--data-dir DIR] [--gateway-ca-file FILE] [--health ADDR]

dataplane is the Go data plane alone, in Envoy's place beside an extproc, configured by
a controlplane over xDS (it keeps serving the last configuration while the control plane
is away). extproc and backends share the internal token in SWITCHYARD_INTERNAL_TOKEN
(run generates one when it is unset).

Without --config, the embedded default configuration is used (demo models on
in-process fake upstreams, no internet needed).
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "switchyard:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "run", "extproc", "backends", "dataplane":
		tuneGC()
	}
	switch args[0] {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, metrics.ReadBuild())
		return nil
	case "run":
		return cmdRun(ctx, args[1:], stdout, stderr)
	case "validate":
		return cmdValidate(args[1:], stdout, stderr)
	case "keys":
		return cmdKeys(ctx, args[1:], stdout, stderr)
	case "usage":
		return cmdUsage(ctx, args[1:], stdout, stderr)
	case "datakey":
		return cmdDatakey(ctx, args[1:], stdout, stderr)
	case "fake":
		return cmdFake(ctx, args[1:], stdout, stderr)
	case "envoy":
		return cmdEnvoy(args[1:], stdout, stderr)
	case "controlplane":
		return cmdControlPlane(ctx, args[1:], stdout, stderr)
	case "extproc":
		return cmdExtProc(ctx, args[1:], stdout, stderr)
	case "dataplane":
		return cmdDataPlane(ctx, args[1:], stdout, stderr)
	case "backends":
		return cmdBackends(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
