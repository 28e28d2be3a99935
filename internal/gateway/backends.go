package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/backends"
	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/backends/responses"
	"github.com/switchyard-ai/switchyard/backends/sandbox"
	"github.com/switchyard-ai/switchyard/backends/vectorstores"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/tracing"
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
	// Storage chooses the stores (config.Config.Storage); the zero value is
	// the embedded SQLite and disk.
	Storage config.Storage
	// Models are the configured models, whose tokenizers the Responses
	// API's truncation counts with (read at start).
	Models []config.Model
	// BatchLease: see backends.Options.BatchLease.
	BatchLease time.Duration
	// BackgroundLease and BackgroundPerKey: see
	// responses.BackgroundOptions.Lease and MaxPerOwner (0: defaults).
	BackgroundLease  time.Duration
	BackgroundPerKey int
	// BatchPaceAfter: see Options.BatchPaceAfter.
	BatchPaceAfter func(time.Duration) <-chan time.Time
	Logger         *slog.Logger
	// Tracer, if not nil, traces the backends' requests (a server span
	// each, continuing the data plane's trace) and their calls through the
	// gateway (a client span each, whose traceparent the data plane
	// continues): a Responses run and its model calls in one trace.
	Tracer trace.TracerProvider
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
	// Only the backends' own calls to the gateway are traced (and carry a
	// traceparent); web search and the sandbox are not.
	gw.HTTP.Transport = tracing.Transport(opts.Tracer, gw.HTTP.Transport)
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
	if bo.Files, err = openFleetFiles(ctx, opts.Storage, opts.DataDir, log); err != nil {
		return nil, err
	}
	// The stores opened here are the service's once New succeeds.
	closeStores := func() {
		if bo.Files != nil {
			_ = bo.Files.Close()
		}
		if bo.BatchStore != nil {
			_ = bo.BatchStore.Close()
		}
		if bo.Background.Store != nil {
			_ = bo.Background.Store.Close()
		}
	}
	bo.BatchLease = opts.BatchLease
	bo.Background = responses.BackgroundOptions{Lease: opts.BackgroundLease, MaxPerOwner: opts.BackgroundPerKey}
	if err := openFleetBatches(ctx, opts.Storage, &bo); err != nil {
		closeStores()
		return nil, err
	}
	if bo.Background.Store, err = fleetResponsesBackground(ctx, opts.Storage); err != nil {
		closeStores()
		return nil, err
	}
	if bo.ResponsesStore, bo.VectorStore, err = fleetResponsesStores(ctx, opts.Storage, bo.EmbeddingModel != "", log); err != nil {
		closeStores()
		return nil, err
	}
	if bo.ConversationStore, err = fleetConversationStore(ctx, opts.Storage); err != nil {
		closeStores()
		if bo.ResponsesStore != nil {
			_ = bo.ResponsesStore.Close()
		}
		if bo.VectorStore != nil {
			_ = bo.VectorStore.Close()
		}
		return nil, err
	}
	bo.Tokenizers = modelTokenizers(opts.Models)
	svc, err := backends.New(ctx, bo)
	if err != nil {
		closeStores()
		return nil, err
	}
	c.closers = append(c.closers, svc.Close)
	c.metrics = func(w io.Writer) error {
		// A scrape reads the batch store; bound it like a scrape timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return svc.WritePrometheus(ctx, w)
	}
	lis := opts.Listener
	if lis == nil {
		if lis, err = net.Listen("tcp", opts.Listen); err != nil {
			return nil, fmt.Errorf("gateway: backends: %w", err)
		}
	}
	srv := &http.Server{Handler: tracing.Handler(opts.Tracer, backendsRoute, svc.Handler()), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
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

// backendsRoute names a backends request's span: its API path family
// (/v1/responses, /v1/files), never an object's id.
func backendsRoute(r *http.Request) string {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 3)
	if len(parts) >= 2 && parts[0] == "v1" {
		return "/v1/" + parts[1]
	}
	return "other"
}

// fleetResponsesStores opens the Postgres stores of the responses and (with
// vector stores on) the vector stores when storage.metadata.kind is
// postgres; nil stores (SQLite under the data directory) otherwise. Each
// store has its own pool, sized by storage.metadata.max_conns.
func fleetResponsesStores(ctx context.Context, st config.Storage, vectors bool, log *slog.Logger) (responses.Store, vectorstores.Store, error) {
	if st.Metadata.Kind != config.MetadataPostgres {
		return nil, nil, nil
	}
	dsn := os.Getenv(st.Metadata.DSNEnv)
	if dsn == "" {
		return nil, nil, fmt.Errorf("gateway: backends: storage.metadata.dsn_env names %s, which is not set", st.Metadata.DSNEnv)
	}
	pool := pgdb.Pool{MaxConns: st.Metadata.MaxConns}
	rs, err := responses.OpenPostgresStore(ctx, dsn, pool)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: backends: %w", err)
	}
	if !vectors {
		return rs, nil, nil
	}
	vs, err := vectorstores.OpenPostgresStore(ctx, dsn, vectorstores.PostgresOptions{Pool: pool, Logger: log.With("service", "vectorstores")})
	if err != nil {
		rs.Close()
		return nil, nil, fmt.Errorf("gateway: backends: %w", err)
	}
	return rs, vs, nil
}

// fleetConversationStore opens the Postgres store of the conversations when
// storage.metadata.kind is postgres; nil (SQLite under the data
// directory) otherwise.
func fleetConversationStore(ctx context.Context, st config.Storage) (conversations.Store, error) {
	if st.Metadata.Kind != config.MetadataPostgres {
		return nil, nil
	}
	dsn := os.Getenv(st.Metadata.DSNEnv)
	if dsn == "" {
		return nil, fmt.Errorf("gateway: backends: storage.metadata.dsn_env names %s, which is not set", st.Metadata.DSNEnv)
	}
	cs, err := conversations.OpenPostgresStore(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns})
	if err != nil {
		return nil, fmt.Errorf("gateway: backends: %w", err)
	}
	return cs, nil
}

// modelTokenizers maps each model with a configured tokenizer to its name.
func modelTokenizers(models []config.Model) map[string]string {
	m := map[string]string{}
	for _, md := range models {
		if md.Tokenizer != "" {
			m[md.ID] = md.Tokenizer
		}
	}
	return m
}

// fleetResponsesBackground opens the Postgres store of the background
// responses' runs when storage.metadata.kind is postgres (every replica
// claims from it); nil (SQLite under the data directory) otherwise.
func fleetResponsesBackground(ctx context.Context, st config.Storage) (responses.BackgroundStore, error) {
	if st.Metadata.Kind != config.MetadataPostgres {
		return nil, nil
	}
	dsn := os.Getenv(st.Metadata.DSNEnv)
	if dsn == "" {
		return nil, fmt.Errorf("gateway: backends: storage.metadata.dsn_env names %s, which is not set", st.Metadata.DSNEnv)
	}
	bs, err := responses.OpenPostgresBackgroundStore(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns})
	if err != nil {
		return nil, fmt.Errorf("gateway: backends: %w", err)
	}
	return bs, nil
}
