package extproc

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// KeyLookup resolves a client's bearer token. keys.Cache satisfies it.
type KeyLookup interface {
	Lookup(ctx context.Context, secret string) (keys.Key, error)
	// LookupOwner is the newest active key of a rotation chain, for
	// backends' calls made on an owner's behalf.
	LookupOwner(ctx context.Context, owner string) (keys.Key, error)
}

// Usage is the token usage of one request.
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens, CachedTokens int64
	// CostMicros is the cost in micro-dollars at the model's pricing (0
	// for a model without one).
	CostMicros int64
	// Error: the request was answered with a 4xx or 5xx status.
	Error bool
}

// UsageRecorder is told the usage of every request of a key that produced
// one or was answered with an error (for usage reports and budgets). model
// is the canonical model id, "" when the request was refused before its
// model was known.
type UsageRecorder interface {
	RecordUsage(ctx context.Context, key *keys.Key, model string, u Usage)
}

// Budgets reads the month-to-date spend that keys' monthly budgets are
// checked against.
type Budgets interface {
	// MonthSpend is the spend in micro-dollars of the keys sharing
	// limitID (keys.Key.LimitID) in now's calendar month, UTC.
	MonthSpend(limitID string, now time.Time) int64
}

// Options configure a Server.
type Options struct {
	// Keys authenticates clients. Required.
	Keys KeyLookup
	// Usage, if not nil, is told the usage of every request that reports one.
	Usage UsageRecorder
	// Budgets, if not nil, enforces keys' monthly spend budgets (budget.go).
	Budgets Budgets
	// Limiter, if not nil, enforces the keys' rate limits (limits.go):
	// admission of chat completions and the x-ratelimit-* headers.
	Limiter Limiter
	// LimiterTimeout bounds each limiter call; DefaultLimiterTimeout if 0.
	LimiterTimeout time.Duration
	// LocalLimiterClock is the clock of the local fallback limiter
	// (on_limiter_error local); nil: the system clock. Tests fix it so no
	// run straddles a window boundary.
	LocalLimiterClock ratelimit.Clock
	// Metrics, if not nil, counts rate-limiting outcomes.
	Metrics *ratelimit.Metrics
	// InternalToken, when set, is the token the backends present to act on
	// an owner's behalf, and that extproc passes to them on their routes
	// (docs/backends-design.md). Empty: no internal calls are accepted.
	InternalToken string
	// Getenv resolves providers' api_key_env; it defaults to os.Getenv.
	Getenv func(string) string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Tracer, if not nil, makes a span per Process stream that carries
	// the data plane's trace context (tracing.go).
	Tracer trace.TracerProvider
}

// Server is the ext_proc server. It is safe for concurrent use: each Process
// stream keeps its own state, and the routing state is swapped atomically.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	keys          KeyLookup
	internalToken string
	usage         UsageRecorder
	budgets       Budgets
	// alerted holds the month of the last budget alert logged
	// (budgetAlert) by limit id.
	alerted sync.Map
	getenv  func(string) string
	log     *slog.Logger
	tracer  trace.Tracer // nil: no tracing

	routes atomic.Pointer[routeTable]
	limits limiter

	// keyMeta caches keys' dynamic metadata (*keyMeta by key id, one map per
	// origin: originSlot, request.go), keyMetaN counts their entries.
	keyMeta  [3]sync.Map
	keyMetaN atomic.Int64

	// mu guards the state kept across catalogs, by provider and model.
	mu      sync.Mutex
	health  map[string]*providerHealth
	created map[string]int64
}

// New returns a Server that answers 503 to every request until SetCatalog
// (or CatalogHandler) has been given a catalog.
func New(opts Options) *Server {
	if opts.Keys == nil {
		panic("extproc: Options.Keys is required")
	}
	s := &Server{keys: opts.Keys, internalToken: opts.InternalToken, usage: opts.Usage, budgets: opts.Budgets, getenv: opts.Getenv, log: opts.Logger,
		health: map[string]*providerHealth{}, created: map[string]int64{}}
	if s.getenv == nil {
		s.getenv = os.Getenv
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if opts.Tracer != nil {
		s.tracer = opts.Tracer.Tracer("github.com/switchyard-ai/switchyard/extproc")
	}
	s.limits = limiter{rls: opts.Limiter, timeout: opts.LimiterTimeout, metrics: opts.Metrics, probeEvery: DefaultLimiterProbeInterval}
	if opts.Limiter != nil {
		s.limits.local = ratelimit.NewServer(ratelimit.Options{Clock: opts.LocalLimiterClock, Logger: s.log.With("component", "ratelimit-local")})
	}
	if s.limits.metrics == nil {
		s.limits.metrics = ratelimit.NewMetrics()
	}
	if s.limits.timeout <= 0 {
		s.limits.timeout = DefaultLimiterTimeout
	}
	return s
}

// Register registers the server as the envoy.service.ext_proc.v3
// ExternalProcessor on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	extprocv3.RegisterExternalProcessorServer(g, s)
}

// Ready reports whether a catalog has been set. Until then every request is
// answered with 503.
func (s *Server) Ready() bool { return s.routes.Load() != nil }

// Process serves one HTTP request, or one attempt of it: the listener's
// (downstream) ext_proc filter opens one stream per request; the upstream
// filter on a provider's cluster opens one per attempt, and says so in its
// gRPC initial metadata (catalog.PhaseMetadata, catalog.ProviderMetadata).
// Envoy sends one message per phase and expects exactly one matching reply
// to each.
func (s *Server) Process(ps extprocv3.ExternalProcessor_ProcessServer) error {
	ctx := ps.Context()
	// The two keys alone, not FromIncomingContext's copy of the whole
	// metadata (a real gRPC server's carries its own keys too).
	upstream := firstValue(grpcmd.ValueFromIncomingContext(ctx, catalog.PhaseMetadata)) == catalog.PhaseUpstream
	provider := ""
	if upstream {
		provider = firstValue(grpcmd.ValueFromIncomingContext(ctx, catalog.ProviderMetadata))
	}
	var md grpcmd.MD
	if s.tracer != nil {
		md, _ = grpcmd.FromIncomingContext(ctx)
	}
	ss := s.openSession(ctx, upstream, provider, md)
	// A client that goes away after the usage chunk still used the tokens:
	// record them even if the end of the response never reaches us.
	defer ss.Close(ctx)
	// One message, received into again and again: the handlers keep parts
	// of a message (its body), never the message itself, and each receive
	// gives it fresh parts (proto.Unmarshal, or the in-process channel's
	// copy), so a streamed body's chunks cost no allocation here. It is
	// allocated with the stream's state.
	req := ss.in
	for {
		err := ps.RecvMsg(req)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			return err
		}
		resp, err := ss.Handle(ctx, req)
		if err != nil {
			return err
		}
		if req.GetObservabilityMode() {
			// Envoy ignores replies in observability mode.
			continue
		}
		if err := ps.Send(resp); err != nil {
			return err
		}
	}
}

// Session is one Process stream's state, driven by direct calls instead of
// a gRPC stream: the embedded gateway's data plane calls Handle for each
// message on the request's own goroutine (no hand-off to a stream's
// goroutine and back) and Close when the stream would end. Process is the
// same loop around a Session.
//
// A Session owns the messages it is given: the handlers keep parts of
// them (bodies) and may edit request bodies in place, so a caller that
// reuses its messages hands over copies. A reply is the Session's own too,
// and may be reused by the next Handle (a streamed body's chunk replies
// are): the caller reads it, or copies it, before calling Handle again.
// Handle and Close must not be called concurrently.
type Session struct {
	h  handler
	tr *streamTrace
	// in is the message Process receives into, allocated with the state.
	in     *extprocv3.ProcessingRequest
	closed bool
}

// OpenSession starts a stream's session, as Process does for a stream whose
// gRPC metadata is md: catalog.PhaseMetadata and catalog.ProviderMetadata
// say which phase it serves, and the trace context (traceparent) the span
// it joins. md is read, never kept or changed.
func (s *Server) OpenSession(ctx context.Context, md grpcmd.MD) *Session {
	upstream := firstValue(md.Get(catalog.PhaseMetadata)) == catalog.PhaseUpstream
	provider := ""
	if upstream {
		provider = firstValue(md.Get(catalog.ProviderMetadata))
	}
	return s.openSession(ctx, upstream, provider, md)
}

func (s *Server) openSession(ctx context.Context, upstream bool, provider string, md grpcmd.MD) *Session {
	// The session and its phase's state are allocated together (two
	// sessions a request); the session points at the state, never copied.
	// Messages are the session's own (unmarshalled afresh, copied by the
	// in-process channel, or handed over by OpenSession's caller), so the
	// handlers may edit request bodies in place.
	var ss *Session
	if upstream {
		b := &struct {
			ss Session
			u  upstreamStream
		}{u: upstreamStream{srv: s, providerName: provider}}
		u := &b.u
		u.ownsBody = true
		ss = &b.ss
		ss.h, ss.in = u, &u.in
	} else {
		b := &struct {
			ss Session
			st stream
		}{st: stream{srv: s}}
		st := &b.st
		st.ownsBody = true
		ss = &b.ss
		ss.h, ss.in = st, &st.in
	}
	ss.tr = s.startTrace(ctx, md, upstream)
	return ss
}

// Handle answers one message. An error ends the stream: a data plane
// treats it as the stream's failure (its status_on_error, or
// failure_mode_allow), and the caller calls only Close afterwards.
func (ss *Session) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	resp, err := ss.h.handle(ctx, req)
	if err != nil {
		return nil, err
	}
	ss.tr.observe(req, resp)
	return resp, nil
}

// Close ends the session, however the stream ended: it records and charges
// the usage seen (also when the client went away before the end of the
// response), and ends the span. ctx may be cancelled already: what is
// charged is charged regardless. Close is idempotent.
func (ss *Session) Close(ctx context.Context) {
	if ss.closed {
		return
	}
	ss.closed = true
	defer ss.tr.end()
	ss.h.finish(ctx)
}

// handler is the state of one Process stream.
type handler interface {
	handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
	finish(ctx context.Context)
}

func firstValue(v []string) string {
	if len(v) > 0 {
		return v[0]
	}
	return ""
}

// errInternal is what Envoy sees when a phase fails unexpectedly. Closing the
// stream with an error makes a fail-closed filter answer the client with its
// status_on_error instead of forwarding an unchecked request.
var errInternal = status.Error(codes.Internal, "extproc: internal error")
