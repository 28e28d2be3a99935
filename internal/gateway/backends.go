package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/switchyard-ai/switchyard/backends"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/sandbox"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// InternalTokenEnv names the environment variable holding the internal
// token extproc and the backends share (docs/backends-design.md).
const InternalTokenEnv = "SWITCHYARD_INTERNAL_TOKEN"

// BackendsOptions configure the backends service (files, batches,
// responses) on its own: `switchyard backends`, or Start's in-process one.
type BackendsOptions struct {
	// Listen is the backends' address; the data plane's backends cluster
	// points at it. It must not be reachable by clients except through
	// the data plane.
	Listen string
	// Listener, when set, is used instead of Listen (Start listens first
	// so the control plane can name the address).
	Listener net.Listener
	// DataDir holds the files, batches and responses databases and blobs.
	DataDir string
	// GatewayURL is the gateway's OpenAI base URL (ending in /v1), which
	// batch lines and responses are sent through.
	GatewayURL string
	// GatewayCAFile, when set, is the CA bundle that verifies GatewayURL's
	// certificate (the listener's own certificate, for a self-signed one).
	GatewayCAFile string
	// Token is the internal token; required.
	Token string
	// Tools configures the Responses API's built-in tools.
	Tools config.Tools
	// Tiers give each caller's tier its daily batch line allowance
	// (config.Tier.BatchLinesPerDay). A tier not in it has none: its
	// batches are refused. Nil: no allowance is checked.
	Tiers map[string]config.Tier
	// BatchPaceAfter: see Options.BatchPaceAfter.
	BatchPaceAfter func(time.Duration) <-chan time.Time
	// FileStorage is where the files service keeps its rows and blobs
	// (the config's storage section; zero: SQLite and the data directory).
	FileStorage config.Storage
	Logger      *slog.Logger
}

// StartBackends serves the backends until the Component is closed.
func StartBackends(ctx context.Context, opts BackendsOptions) (_ *Component, err error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.Token == "" {
		return nil, fmt.Errorf("gateway: backends: the internal token (%s) is not set", InternalTokenEnv)
	}
	if u, err := url.Parse(opts.GatewayURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gateway: backends: the gateway URL %q must be an http or https URL ending in /v1", opts.GatewayURL)
	}
	c := &Component{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	gw := onbehalf.New(opts.GatewayURL, opts.Token)
	if opts.GatewayCAFile != "" {
		pem, err := os.ReadFile(opts.GatewayCAFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: backends: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("gateway: backends: %s holds no PEM certificate", opts.GatewayCAFile)
		}
		gw.HTTP.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	bo := backends.Options{DataDir: opts.DataDir, Token: opts.Token, Gateway: gw, Logger: log, BatchPaceAfter: opts.BatchPaceAfter}
	if tiers := opts.Tiers; tiers != nil {
		bo.BatchLinesPerDay = func(tier string) (int64, bool) {
			t, ok := tiers[tier]
			if !ok {
				return 0, true
			}
			return t.BatchLineAllowance()
		}
	}
	if ws := opts.Tools.WebSearch; ws != nil {
		// Brave is the one kind config accepts.
		bo.Search = responses.NewBrave(ws.BaseURL, os.Getenv(ws.APIKeyEnv))
	}
	if fs := opts.Tools.FileSearch; fs != nil {
		bo.EmbeddingModel = fs.EmbeddingModel
	}
	if ci := opts.Tools.CodeInterpreter; ci != nil {
		r, err := sandbox.New(sandbox.Options{Python: ci.Python, Timeout: ci.Timeout, MemoryBytes: ci.MemoryBytes,
			AllowUnsandboxed: ci.AllowUnsandboxed, Logger: log.With("service", "sandbox")})
		if err != nil {
			return nil, fmt.Errorf("gateway: backends: code_interpreter: %w", err)
		}
		// A host that cannot isolate code (no namespaces: not root, or a
		// container without the privileges) keeps serving everything else;
		// requests using the tool get a 400 saying it is not available.
		// sandbox.New has already logged why, once.
		if r.Available() == nil {
			bo.CodeInterpreter = r // never a nil *sandbox.Runner in the interface
		}
	}
	if bo.Files, err = openFleetFiles(ctx, opts.FileStorage, opts.DataDir, log); err != nil {
		return nil, err
	}
	svc, err := backends.New(ctx, bo)
	if err != nil {
		if bo.Files != nil {
			_ = bo.Files.Close()
		}
		return nil, err
	}
	c.closers = append(c.closers, svc.Close)
	lis := opts.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", opts.Listen); err != nil {
			return nil, fmt.Errorf("gateway: backends: %w", err)
		}
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("backends server stopped", "error", err)
		}
	}()
	c.Addr = lis.Addr()
	c.ready = func() bool { return true }
	// Close stops the server first, then the service (its runner and
	// stores), so no handler runs on a closed store.
	c.closers = append(c.closers, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			// Handlers still running (a slow upload) must end before the
			// stores close under them.
			_ = srv.Close()
		}
	})
	return c, nil
}

// inProcessBackends reports whether Start serves the backends itself: when
// the configuration names no backends service of its own.
func inProcessBackends(cfg *config.Config) bool { return cfg.Backends == nil }
