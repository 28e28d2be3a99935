package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/admin"
	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// defaultShutdownGrace is how long a draining gateway lets requests in
// flight finish: long enough for a typical streamed completion, within
// Kubernetes' default 30 s termination grace (set terminationGracePeriodSeconds
// above it when raising this).
const defaultShutdownGrace = 25 * time.Second

// Admin API defaults.
const (
	// defaultAdminListen is a free loopback port: two gateways with
	// different configurations never collide on a fixed default.
	defaultAdminListen = "127.0.0.1:0"
	adminTokenEnv      = "SWITCHYARD_ADMIN_TOKEN"
	adminTokenFileName = "admin.token"
)

// adminAddress is where the admin API listens: --admin-listen when given
// ("" or "off" turn the API off), else the first listener's admin_address,
// else a free loopback port.
func adminAddress(flagValue string, flagSet bool, cfg *config.Config) string {
	switch {
	case flagSet && flagValue == "off":
		return ""
	case flagSet:
		return flagValue
	case len(cfg.Listeners) > 0 && cfg.Listeners[0].AdminAddress != "":
		return cfg.Listeners[0].AdminAddress
	}
	return defaultAdminListen
}

// checkAdminAddr refuses a non-loopback admin address without --insecure:
// the admin API is plain HTTP, and its token would cross the network in
// the clear.
func checkAdminAddr(addr string, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--admin-listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) && !insecure {
		return fmt.Errorf("--admin-listen %s is not a loopback address; the admin API is plain HTTP, so this needs --insecure", addr)
	}
	return nil
}

// adminToken finds the admin token: $SWITCHYARD_ADMIN_TOKEN, else the
// --admin-token-file, else DATA_DIR/admin.token, which is created (mode
// 0600, 256 random bits) when missing. The token file lives beside the key
// database, which already demands the same protection. source says where
// the token came from, for the start-up message; never the token itself.
func adminToken(file, dataDir string) (token, source string, err error) {
	if t := strings.TrimSpace(os.Getenv(adminTokenEnv)); t != "" {
		return t, "$" + adminTokenEnv, nil
	}
	explicit := file != ""
	if !explicit {
		file = filepath.Join(dataDir, adminTokenFileName)
	}
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		t := strings.TrimSpace(string(b))
		if len(t) < admin.MinTokenLen {
			return "", "", fmt.Errorf("admin token file %s: the token must be at least %d characters", file, admin.MinTokenLen)
		}
		return t, file, nil
	case !errors.Is(err, fs.ErrNotExist) || explicit:
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	t := "sy-admin-" + base64.RawURLEncoding.EncodeToString(raw)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	// O_EXCL: two gateways starting on one data directory agree on one token.
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return adminToken(file, dataDir)
	}
	if err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	if _, err := f.WriteString(t + "\n"); err != nil {
		f.Close()
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", "", fmt.Errorf("admin token: %w", err)
	}
	return t, file + " (new)", nil
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default()
	}
	return config.Load(path)
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded demo configuration)")
	dataDir := fs.String("data-dir", ".data", "directory for the key database and other state")
	listen := fs.String("listen", "", "address of the public listener (overrides the config's first listener)")
	insecure := fs.Bool("insecure", false, "allow plain HTTP on a non-loopback address")
	demoKey := fs.Bool("demo-key", false, "create a demo API key (tier standard) and print it")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	adminListen := fs.String("admin-listen", "", `address of the admin API, overriding the first listener's admin_address (default: a free loopback port; "" or off disables it); loopback unless --insecure`)
	adminTokenFile := fs.String("admin-token-file", "", "file holding the admin API token (default: $"+adminTokenEnv+", else DATA_DIR/"+adminTokenFileName+", created if missing)")
	rateLimitAddr := fs.String("ratelimit-addr", "", "RLS address of an external rate limit service (envoyproxy/ratelimit); default: the embedded one")
	region := fs.String("region", "", "this gateway's home region, us or asia (default: the config's region)")
	loopbackGRPC := fs.Bool("loopback-grpc", false, "the data plane reaches ext_proc and the rate limit service over loopback gRPC, as Envoy does (default: in process, without sockets)")
	grace := fs.Duration("shutdown-grace", defaultShutdownGrace, "on SIGTERM or Ctrl-C, how long requests and streams in flight may run on before they are ended with an error (readiness is false meanwhile)")
	xdsListen := fs.String("xds-listen", "", "address the control plane serves xDS on, for an external ratelimit service or Envoy (default: a free loopback port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	adminFlagSet := false
	fs.Visit(func(f *flag.Flag) { adminFlagSet = adminFlagSet || f.Name == "admin-listen" })
	*adminListen = adminAddress(*adminListen, adminFlagSet, cfg)
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(jsonlog.NewHandler(stderr, &slog.HandlerOptions{Level: level}))

	opts := gateway.Options{
		DemoUpstream:   startDemoUpstream,
		Config:         cfg,
		DataDir:        *dataDir,
		Logger:         logger,
		Insecure:       *insecure,
		ListenOverride: *listen,
		RateLimitAddr:  *rateLimitAddr,
		XDSListen:      *xdsListen,
		AdminListen:    *adminListen,
		// The file is reloaded when it changes; the embedded default never does.
		ConfigPath:   *cfgPath,
		Region:       *region,
		LoopbackGRPC: *loopbackGRPC,
		// Shared with a separate `switchyard backends` when the config
		// names one; otherwise the in-process backends get a random one.
		InternalToken: os.Getenv(gateway.InternalTokenEnv),
	}
	var tokenSource string
	if *adminListen != "" {
		if err := checkAdminAddr(*adminListen, *insecure); err != nil {
			return err
		}
		if opts.AdminToken, tokenSource, err = adminToken(*adminTokenFile, *dataDir); err != nil {
			return err
		}
	}
	g, err := gateway.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer g.Close()

	fmt.Fprintf(stdout, "Switchyard is serving the OpenAI API at %s\n", g.BaseURL())
	if u := g.AdminURL(); u != "" {
		fmt.Fprintf(stdout, "Admin API at %s/admin/v1/keys (token: %s)\n", u, tokenSource)
	}
	if *demoKey {
		secret, _, err := g.Keys.Issue(ctx, keys.Spec{Name: "demo", Tier: "standard"})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Demo API key (tier standard): %s\n", secret)
		fmt.Fprintf(stdout, "Try it:\n  curl -s %s/chat/completions -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello!\"}]}'\n",
			g.BaseURL(), secret, cfg.Models[0].ID)
	}
	fmt.Fprintln(stdout, "Press Ctrl-C to stop.")
	<-ctx.Done()
	fmt.Fprintf(stdout, "Shutting down: draining requests in flight for up to %v.\n", *grace)
	// ctx is done; the drain gets its own deadline.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	if err := g.Shutdown(dctx); err != nil {
		logger.Warn("shutdown: the grace period ended requests still in flight", "grace", *grace, "error", err)
	}
	fmt.Fprintln(stdout, "Stopped.")
	return nil
}

func cmdValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (default: the embedded configuration)")
	skipCreds := fs.Bool("skip-credentials", false, "do not check that the credential environment variables the config names are set (for checking a file away from where it runs)")
	checkConns := fs.Bool("check-connections", false, "also connect to the configured storage (PostgreSQL: SELECT 1 and the schema versions; S3: HeadBucket) and say which setting is wrong when that fails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	if _, err := controlplane.Build(cfg, "validate"); err != nil {
		return err
	}
	name := *cfgPath
	if name == "" {
		name = config.DefaultName
	}
	if missing := cfg.MissingStorageEnv(os.Getenv); len(missing) > 0 && !*skipCreds {
		return fmt.Errorf("%s: storage settings missing (the gateway cannot reach its storage without them):\n  %s",
			name, strings.Join(missing, "\n  "))
	}
	if *checkConns {
		if err := checkConnections(context.Background(), cfg, os.Getenv, stdout); err != nil {
			return fmt.Errorf("%s: storage connection check failed:\n%w", name, err)
		}
	}
	if missing := cfg.MissingCredentials(os.Getenv); len(missing) > 0 && !*skipCreds {
		// The gateway would start and serve the rest; validate says what
		// would not work, and fails so a deploy script notices.
		return fmt.Errorf("%s: %d credential(s) missing (the gateway would serve without them; their providers' models fail over or answer 503):\n  %s",
			name, len(missing), strings.Join(missing, "\n  "))
	}
	fmt.Fprintf(stdout, "%s: ok (%d listeners, %d providers, %d models)\n", name, len(cfg.Listeners), len(cfg.Providers), len(cfg.Models))
	return nil
}
