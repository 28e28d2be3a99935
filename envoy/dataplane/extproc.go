package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Envoy's ext_proc defaults.
const (
	defaultMessageTimeout = 200 * time.Millisecond
	defaultStatusOnError  = 500
)

// extProcFilter is a compiled envoy.filters.http.ext_proc filter.
type extProcFilter struct {
	name              string
	disabledByDefault bool // HttpFilter.disabled: runs only where a route enables it
	cluster           string
	conn              grpc.ClientConnInterface
	// client and callOpts open its Process streams, made once.
	client   extprocv3.ExternalProcessorClient
	callOpts []grpc.CallOption
	// local, when not nil, is the ext_proc server in this process, called
	// directly instead of through client (Options.LocalProcessors); md is
	// initialMetadata as the gRPC metadata its sessions are opened with.
	local             LocalProcessor
	md                metadata.MD
	initialMetadata   []string // key, value pairs
	maxRecv           int
	failureModeAllow  bool
	mode              procMode
	messageTimeout    time.Duration
	maxMessageTimeout time.Duration
	allowModeOverride bool
	allowedOverrides  []procMode
	receiving         map[string]bool
	forwarding        []string
	statusOnError     int
	checker           *mutationChecker
	disableImmediate  bool
	routeCache        extprocfilterv3.ExternalProcessor_RouteCacheAction
	keepContentLength bool
	forwardAllowed    []*stringMatcher
	forwardDisallowed []*stringMatcher
	// counters are the data plane's, for this filter's place (nil in
	// tests that compile a filter alone).
	counters *extProcCounters
}

// procMode is a ProcessingMode reduced to what the filter acts on. Trailer
// modes are always SKIP here: configurations asking for trailers are refused.
type procMode struct {
	reqHeaders, respHeaders bool
	reqBody, respBody       extprocfilterv3.ProcessingMode_BodySendMode
}

func modeOf(pm *extprocfilterv3.ProcessingMode) procMode {
	return procMode{
		reqHeaders:  pm.GetRequestHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		respHeaders: pm.GetResponseHeaderMode() != extprocfilterv3.ProcessingMode_SKIP,
		reqBody:     pm.GetRequestBodyMode(),
		respBody:    pm.GetResponseBodyMode(),
	}
}

// checkMode refuses what this data plane does not implement, so a
// configuration that needs it fails loudly instead of behaving differently.
func checkMode(pm *extprocfilterv3.ProcessingMode) error {
	for _, m := range []extprocfilterv3.ProcessingMode_BodySendMode{pm.GetRequestBodyMode(), pm.GetResponseBodyMode()} {
		if m == extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED || m == extprocfilterv3.ProcessingMode_GRPC {
			return fmt.Errorf("body send mode %s is not supported", m)
		}
	}
	if pm.GetRequestTrailerMode() == extprocfilterv3.ProcessingMode_SEND || pm.GetResponseTrailerMode() == extprocfilterv3.ProcessingMode_SEND {
		return errors.New("trailer mode SEND is not supported")
	}
	return nil
}

func compileExtProc(name string, disabled bool, c *extprocfilterv3.ExternalProcessor, static func(string) bool, conns func(string) (grpc.ClientConnInterface, error), local func(string) LocalProcessor) (*extProcFilter, error) {
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	f := &extProcFilter{
		name:              name,
		disabledByDefault: disabled,
		failureModeAllow:  c.GetFailureModeAllow(),
		mode:              modeOf(c.GetProcessingMode()),
		messageTimeout:    defaultMessageTimeout,
		maxMessageTimeout: c.GetMaxMessageTimeout().AsDuration(),
		allowModeOverride: c.GetAllowModeOverride(),
		statusOnError:     defaultStatusOnError,
		disableImmediate:  c.GetDisableImmediateResponse(),
		routeCache:        c.GetRouteCacheAction(),
		keepContentLength: c.GetAllowContentLengthHeader(),
		maxRecv:           math.MaxInt32,
	}
	if err := checkMode(c.GetProcessingMode()); err != nil {
		return nil, err
	}
	switch {
	case c.GetHttpService() != nil:
		return nil, errors.New("http_service is not supported; use grpc_service.envoy_grpc")
	case c.GetGrpcService().GetEnvoyGrpc() == nil:
		return nil, errors.New("grpc_service must use envoy_grpc")
	case c.GetObservabilityMode():
		return nil, errors.New("observability_mode is not supported")
	case len(c.GetRequestAttributes()) > 0 || len(c.GetResponseAttributes()) > 0:
		return nil, errors.New("request_attributes and response_attributes are not supported")
	case c.GetProcessingRequestModifier() != nil || c.GetOnProcessingResponse() != nil:
		return nil, errors.New("processing_request_modifier and on_processing_response are not supported")
	case c.GetSendBodyWithoutWaitingForHeaderResponse():
		return nil, errors.New("send_body_without_waiting_for_header_response is not supported")
	case c.GetDisableClearRouteCache() && c.GetRouteCacheAction() != extprocfilterv3.ExternalProcessor_DEFAULT:
		return nil, errors.New("disable_clear_route_cache and route_cache_action cannot both be set")
	}
	if c.GetDisableClearRouteCache() {
		f.routeCache = extprocfilterv3.ExternalProcessor_RETAIN
	}
	eg := c.GetGrpcService().GetEnvoyGrpc()
	f.cluster = eg.GetClusterName()
	if !static(f.cluster) {
		return nil, &missingError{kind: "cluster", name: f.cluster, from: "ext_proc filter " + name, static: true}
	}
	if n := eg.GetMaxReceiveMessageLength().GetValue(); n > 0 && n < math.MaxInt32 {
		f.maxRecv = int(n)
	}
	for _, hv := range c.GetGrpcService().GetInitialMetadata() {
		v := hv.GetValue()
		if v == "" {
			v = string(hv.GetRawValue())
		}
		f.initialMetadata = append(f.initialMetadata, strings.ToLower(hv.GetKey()), v)
	}
	if local != nil {
		f.local = local(f.cluster)
	}
	if f.local != nil {
		f.md = metadata.Pairs(f.initialMetadata...)
	} else {
		conn, err := conns(f.cluster)
		if err != nil {
			return nil, err
		}
		f.conn = conn
		f.client = extprocv3.NewExternalProcessorClient(conn)
		f.callOpts = []grpc.CallOption{grpc.MaxCallRecvMsgSize(f.maxRecv)}
	}
	if c.GetMessageTimeout() != nil {
		f.messageTimeout = c.GetMessageTimeout().AsDuration()
	}
	if s := c.GetStatusOnError(); s != nil && s.GetCode() != 0 {
		f.statusOnError = int(s.GetCode())
	}
	for _, m := range c.GetAllowedOverrideModes() {
		f.allowedOverrides = append(f.allowedOverrides, modeOf(m))
	}
	f.receiving = map[string]bool{}
	for _, ns := range c.GetMetadataOptions().GetReceivingNamespaces().GetUntyped() {
		f.receiving[ns] = true
	}
	f.forwarding = c.GetMetadataOptions().GetForwardingNamespaces().GetUntyped()
	var err error
	if f.checker, err = newMutationChecker(c.GetMutationRules()); err != nil {
		return nil, err
	}
	for _, sm := range c.GetForwardRules().GetAllowedHeaders().GetPatterns() {
		m, err := compileStringMatcher(sm)
		if err != nil {
			return nil, fmt.Errorf("forward_rules: %w", err)
		}
		f.forwardAllowed = append(f.forwardAllowed, m)
	}
	for _, sm := range c.GetForwardRules().GetDisallowedHeaders().GetPatterns() {
		m, err := compileStringMatcher(sm)
		if err != nil {
			return nil, fmt.Errorf("forward_rules: %w", err)
		}
		f.forwardDisallowed = append(f.forwardDisallowed, m)
	}
	return f, nil
}

// forwardable applies forward_rules to a header name.
func (f *extProcFilter) forwardable(name string) bool {
	for _, m := range f.forwardDisallowed {
		if m.match(name) {
			return false
		}
	}
	if len(f.forwardAllowed) == 0 {
		return true
	}
	for _, m := range f.forwardAllowed {
		if m.match(name) {
			return true
		}
	}
	return false
}

// failure is an ext_proc failure that ends the request with a local reply
// (or a reset when the response is already on the wire).
type failure struct {
	status int
	code   string // apierror code, also the access log's response detail
	msg    string
}

func (f *failure) Error() string { return fmt.Sprintf("%d %s: %s", f.status, f.code, f.msg) }

// errSkip means "continue without the processor": processing is complete (or
// the processor closed the stream, or failed with failure_mode_allow).
var errSkip = errors.New("ext_proc: processing complete")

type msgKind int

const (
	kindRequestHeaders msgKind = iota
	kindRequestBody
	kindResponseHeaders
	kindResponseBody
)

// processor is one request's side of the ext_proc filter: a lazily opened
// Process stream and the processing state Envoy keeps per request.
type processor struct {
	f    *extProcFilter
	log  *slog.Logger
	mode procMode
	meta *requestMetadata

	mu     sync.Mutex    // one message in flight at a time
	stream extProcStream // nil until the first message, and once closed
	// The two kinds of stream, kept here so that opening one allocates
	// nothing more.
	gs       grpcStream
	ls       localStream
	cancel   context.CancelFunc
	complete atomic.Bool // Envoy's processing_complete_
	// tracer, when tracing is on, makes a span per message, children of
	// parent's span (tracing.go).
	tracer trace.Tracer
	parent context.Context

	// Reused for every message of the stream, so that a streamed body's
	// chunks cost no allocation here: the message timer (timedOut says it
	// fired for the message in flight), the chunk message and the reply.
	// A sender may reuse a message once Send returns (gRPC has serialised
	// it; the in-process channel has copied it), and a reply is used only
	// until the next message is sent.
	// The two directions have a message each: their bodies may stream at
	// the same time (exchanges take turns under mu, building them does not).
	timer     *time.Timer
	timedOut  atomic.Bool
	reqChunk  *bodyChunk
	respChunk *bodyChunk
	hdrs      *headersMsg
}

// extProcStream is one Process stream as the filter drives it: send a
// message, then receive its replies (an override_message_timeout reply
// comes before the real one). It is the gRPC client stream, or a session
// of an ext_proc server in this process (LocalProcessor).
type extProcStream interface {
	send(req *extprocv3.ProcessingRequest)
	// recv returns the next reply, valid until the next send; io.EOF when
	// the server ended the stream cleanly.
	recv() (*extprocv3.ProcessingResponse, error)
	closeSend()
}

// grpcStream is a Process stream over gRPC (a network connection, or the
// in-process channel).
type grpcStream struct {
	c extprocv3.ExternalProcessor_ProcessClient
	// reply is received into for every reply of the stream.
	reply *extprocv3.ProcessingResponse
}

// send ignores the error: a failed Send carries no status; the next
// Recv reports the stream's real error.
func (g *grpcStream) send(req *extprocv3.ProcessingRequest) { _ = g.c.Send(req) }

func (g *grpcStream) recv() (*extprocv3.ProcessingResponse, error) {
	if g.reply == nil {
		g.reply = new(extprocv3.ProcessingResponse)
	}
	return g.reply, g.c.RecvMsg(g.reply)
}

// closeSend half-closes the stream; the processor cancels its context
// right after. A stream that can do both in one write (internal/h2grpc's,
// as Envoy's gRPC client closes and resets an ext_proc stream together)
// is abandoned instead.
func (g *grpcStream) closeSend() {
	if gs, ok := g.c.(*grpc.GenericClientStream[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]); ok {
		if a, ok := gs.ClientStream.(abandoner); ok {
			a.Abandon()
			return
		}
	}
	_ = g.c.CloseSend()
}

// abandoner is a client stream that half-closes and resets at once.
type abandoner interface{ Abandon() }

// LocalProcessor is an ext_proc server in the data plane's process that the
// filter calls directly, on the request's goroutine, instead of through a
// gRPC stream (Options.LocalProcessors): the embedded gateway's extproc.
type LocalProcessor interface {
	// OpenSession starts the server's side of one Process stream whose
	// gRPC metadata would be md (the filter's initial_metadata and the
	// trace context). md must not be kept or changed.
	OpenSession(ctx context.Context, md metadata.MD) ExtProcSession
}

// ExtProcSession is a LocalProcessor's side of one Process stream.
//
// Handle answers one message, as a gRPC server's reply to it would. ctx is
// cancelled when the message's message_timeout fires or the request ends:
// Handle must return promptly then (the request's goroutine is waiting in
// it). req is the data plane's and valid only until Handle returns (the
// data plane reuses its messages, as a gRPC sender may once Send has
// returned): a session keeps copies. The reply is read until the next
// Handle or Close and parts of it (a mutated body, dynamic metadata) kept
// for the rest of the request: the session must not change it afterwards. An error ends the stream as a gRPC error would
// (status_on_error, or failure_mode_allow), and no reply and no error as a
// server closing the stream cleanly would (the request continues without
// the processor); then only Close is called.
//
// Close ends the stream, as the end of a gRPC stream does, however the
// request ended (the server charges what it saw, also when the client went
// away). It is called once, not concurrently with Handle.
type ExtProcSession interface {
	Handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error)
	Close(ctx context.Context)
}

// localStream drives an ExtProcSession: send calls Handle on the calling
// goroutine, and recv returns what it answered.
type localStream struct {
	s   ExtProcSession
	ctx context.Context
	// maxRecv is the filter's max_receive_message_length, checked as a
	// gRPC client would (math.MaxInt32: no limit).
	maxRecv int
	resp    *extprocv3.ProcessingResponse
	err     error
	pending bool
}

// errNoReply is what recv returns when the session has answered the last
// message already: a reply asking for more time (override_message_timeout)
// cannot be followed by another from a direct call.
var errNoReply = errors.New("ext_proc session: no further reply to the message")

func (l *localStream) send(req *extprocv3.ProcessingRequest) {
	l.resp, l.err = l.s.Handle(l.ctx, req)
	l.pending = true
}

func (l *localStream) recv() (*extprocv3.ProcessingResponse, error) {
	if !l.pending {
		return nil, errNoReply
	}
	l.pending = false
	resp, err := l.resp, l.err
	l.resp, l.err = nil, nil
	if resp == nil && err == nil {
		return nil, io.EOF
	}
	if err == nil && l.maxRecv < math.MaxInt32 {
		if n := proto.Size(resp); n > l.maxRecv {
			err = fmt.Errorf("ext_proc reply larger than max_receive_message_length (%d vs. %d)", n, l.maxRecv)
		}
	}
	return resp, err
}

func (l *localStream) closeSend() {
	s := l.s
	l.s = nil
	if s != nil {
		s.Close(l.ctx)
	}
}

// bodyChunk is a body message and its parts, allocated together.
type bodyChunk struct {
	msg  extprocv3.ProcessingRequest
	req  extprocv3.ProcessingRequest_RequestBody
	resp extprocv3.ProcessingRequest_ResponseBody
	body extprocv3.HttpBody
}

// requestMetadata is a request's dynamic metadata, keyed by namespace. The
// first namespace written is kept apart from the others: a request nearly
// always has only the one, and then needs no map.
type requestMetadata struct {
	mu      sync.Mutex
	firstNS string
	first   *structpb.Struct
	ns      map[string]*structpb.Struct
}

// merge merges fields into a namespace, as Envoy's setDynamicMetadata does.
// s comes from a reply received for this request, which nothing else holds
// or modifies (a received message is unmarshalled, or copied by the
// in-process channel, afresh; the reply that carried it is reset, never
// edited, by the next receive; a local session's replies are never changed
// by the session, ExtProcSession), so a namespace's first Struct is kept as
// it is.
func (m *requestMetadata) merge(ns string, s *structpb.Struct) {
	m.mu.Lock()
	defer m.mu.Unlock()
	merged := s
	if cur := m.lookup(ns).GetFields(); cur != nil {
		// Copy on write: get hands the namespace out to readers that use
		// it without the lock (a message forwarding it to an upstream
		// filter's processor, while the downstream one merges more).
		fields := make(map[string]*structpb.Value, len(cur)+len(s.GetFields()))
		maps.Copy(fields, cur)
		maps.Copy(fields, s.GetFields())
		merged = &structpb.Struct{Fields: fields}
	}
	switch {
	case m.first == nil || m.firstNS == ns:
		m.firstNS, m.first = ns, merged
	default:
		if m.ns == nil {
			m.ns = map[string]*structpb.Struct{}
		}
		m.ns[ns] = merged
	}
}

func (m *requestMetadata) lookup(ns string) *structpb.Struct {
	if m.first != nil && m.firstNS == ns {
		return m.first
	}
	return m.ns[ns]
}

// get returns the namespace's metadata, never modified afterwards.
func (m *requestMetadata) get(ns string) *structpb.Struct {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lookup(ns)
}

func (p *processor) done() bool { return p.complete.Load() }

// close ends the Process stream, as Envoy does when the filter is destroyed.
func (p *processor) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.complete.Store(true)
	p.closeLocked()
}

func (p *processor) closeLocked() {
	if p.stream != nil {
		p.stream.closeSend()
		p.stream = nil
	}
	if p.cancel != nil {
		p.cancel()
		p.cancel = nil
	}
}

func (p *processor) open(ctx context.Context) error {
	// The stream lives as long as the request, not longer: a client that goes
	// away cancels it.
	sctx, cancel := context.WithCancel(ctx)
	if p.f.local != nil {
		md := p.f.md
		if p.tracer != nil {
			md = md.Copy()
			p.traceCarrier(md)
		}
		p.ls = localStream{s: p.f.local.OpenSession(sctx, md), ctx: sctx, maxRecv: p.f.maxRecv}
		p.stream, p.cancel = &p.ls, cancel
		return nil
	}
	if len(p.f.initialMetadata) > 0 {
		sctx = metadata.AppendToOutgoingContext(sctx, p.f.initialMetadata...)
	}
	sctx = p.traceMetadata(sctx)
	stream, err := p.f.client.Process(sctx, p.f.callOpts...)
	if err != nil {
		cancel()
		return err
	}
	p.gs.c = stream
	p.stream, p.cancel = &p.gs, cancel
	return nil
}

// call sends one message and returns the processor's reply to it: the
// CommonResponse of a reply of the expected kind (possibly nil), or an
// ImmediateResponse. It returns errSkip when processing is complete and
// *failure when the request must end with a local reply.
func (p *processor) call(ctx context.Context, req *extprocv3.ProcessingRequest, want msgKind) (*extprocv3.CommonResponse, *extprocv3.ImmediateResponse, error) {
	resp, err := p.exchange(ctx, req, want)
	if err != nil {
		return nil, nil, err
	}
	// Envoy applies mode_override before looking at the reply's kind, and only
	// while a header message is outstanding.
	if mo := resp.GetModeOverride(); mo != nil && p.f.allowModeOverride && (want == kindRequestHeaders || want == kindResponseHeaders) {
		p.overrideMode(mo)
	}
	var (
		common *extprocv3.CommonResponse
		kind   msgKind
	)
	switch r := resp.GetResponse().(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		if p.f.disableImmediate {
			return nil, nil, p.spurious("immediate_response is disabled")
		}
		p.setMetadata(resp)
		p.mu.Lock()
		p.complete.Store(true)
		p.closeLocked()
		p.mu.Unlock()
		return nil, r.ImmediateResponse, nil
	case *extprocv3.ProcessingResponse_RequestHeaders:
		common, kind = r.RequestHeaders.GetResponse(), kindRequestHeaders
	case *extprocv3.ProcessingResponse_RequestBody:
		common, kind = r.RequestBody.GetResponse(), kindRequestBody
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		common, kind = r.ResponseHeaders.GetResponse(), kindResponseHeaders
	case *extprocv3.ProcessingResponse_ResponseBody:
		common, kind = r.ResponseBody.GetResponse(), kindResponseBody
	default:
		return nil, nil, p.spurious(fmt.Sprintf("unexpected reply %T", r))
	}
	p.setMetadata(resp)
	if kind != want {
		return nil, nil, p.spurious(fmt.Sprintf("reply of the wrong kind %T", resp.GetResponse()))
	}
	return common, nil, nil
}

// exchange sends req and waits for its reply under message_timeout.
func (p *processor) exchange(ctx context.Context, req *extprocv3.ProcessingRequest, kind msgKind) (*extprocv3.ProcessingResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.complete.Load() {
		return nil, errSkip
	}
	if p.stream == nil {
		if err := p.open(ctx); err != nil {
			return nil, p.failLocked(p.grpcFailure(err))
		}
		if c := p.f.counters; c != nil {
			c.streams.Add(1)
		}
	}
	p.addForwardingMetadata(req)
	if span := p.traceExchange(req); span != nil {
		defer span.End()
	}
	stream := p.stream
	p.timedOut.Store(false)
	if p.timer == nil {
		// The stream is opened once per request, so its cancel is fixed.
		cancel := p.cancel
		p.timer = time.AfterFunc(p.f.messageTimeout, func() {
			p.timedOut.Store(true)
			cancel()
		})
	} else {
		p.timer.Reset(p.f.messageTimeout)
	}
	timer := p.timer
	defer timer.Stop()
	// A local stream answers within send, cut short by the timer's
	// cancellation of the stream's context.
	stream.send(req)
	if c := p.f.counters; c != nil {
		c.msgs[kind].Add(1)
	}
	extended := false
	for {
		resp, err := stream.recv()
		if p.timedOut.Load() {
			return nil, p.failLocked(&failure{status: 504, code: "ext_proc_message_timeout",
				msg: "The request timed out in the gateway."})
		}
		if err == io.EOF {
			// A clean close by the server: continue without the processor.
			p.complete.Store(true)
			p.closeLocked()
			return nil, errSkip
		}
		if err != nil {
			if ctx.Err() != nil {
				p.complete.Store(true)
				p.closeLocked()
				return nil, ctx.Err()
			}
			return nil, p.failLocked(p.grpcFailure(err))
		}
		if d := resp.GetOverrideMessageTimeout(); d != nil {
			// The server asks for more time: Envoy restarts the timer once per
			// message, within [1ms, max_message_timeout].
			nt := d.AsDuration()
			if !extended && nt >= time.Millisecond && nt <= p.f.maxMessageTimeout && timer.Stop() {
				timer.Reset(nt)
				extended = true
			}
			continue
		}
		return resp, nil
	}
}

func (p *processor) grpcFailure(err error) *failure {
	p.log.Warn("ext_proc stream failed", "cluster", p.f.cluster, "error", err)
	return &failure{status: p.f.statusOnError, code: "ext_proc_error", msg: "The gateway could not process the request."}
}

func (p *processor) spurious(why string) error {
	p.log.Warn("ext_proc spurious message", "cluster", p.f.cluster, "reason", why)
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failLocked(&failure{status: p.f.statusOnError, code: "ext_proc_error", msg: "The gateway could not process the request."})
}

// failLocked ends processing; with failure_mode_allow the request carries on
// unprocessed, otherwise it gets f's local reply.
func (p *processor) failLocked(f *failure) error {
	p.complete.Store(true)
	p.closeLocked()
	if p.f.failureModeAllow {
		return errSkip
	}
	return f
}

// overrideMode replaces the whole processing mode for both directions, as
// Envoy does, unless allowed_override_modes excludes it or it asks for what
// this data plane does not implement.
func (p *processor) overrideMode(mo *extprocfilterv3.ProcessingMode) {
	if err := checkMode(mo); err != nil {
		p.log.Warn("ext_proc mode_override ignored", "error", err)
		return
	}
	m := modeOf(mo)
	if len(p.f.allowedOverrides) > 0 {
		ok := false
		for _, a := range p.f.allowedOverrides {
			// request_header_mode is not part of the comparison.
			if a.respHeaders == m.respHeaders && a.reqBody == m.reqBody && a.respBody == m.respBody {
				ok = true
				break
			}
		}
		if !ok {
			return
		}
	}
	p.mode = m
}

// setMetadata keeps the reply's dynamic metadata for receiving namespaces and
// drops the rest.
func (p *processor) setMetadata(resp *extprocv3.ProcessingResponse) {
	dm := resp.GetDynamicMetadata()
	if dm == nil {
		return
	}
	for ns, v := range dm.GetFields() {
		if !p.f.receiving[ns] {
			p.log.Debug("ext_proc dynamic metadata dropped: namespace not in receiving_namespaces", "namespace", ns)
			continue
		}
		if s := v.GetStructValue(); s != nil {
			p.meta.merge(ns, s)
		}
	}
}

func (p *processor) addForwardingMetadata(req *extprocv3.ProcessingRequest) {
	if len(p.f.forwarding) == 0 {
		return
	}
	for _, ns := range p.f.forwarding {
		s := p.meta.get(ns)
		if s == nil {
			continue
		}
		if req.MetadataContext == nil {
			req.MetadataContext = newCoreMetadata()
		}
		req.MetadataContext.FilterMetadata[ns] = s
	}
}

// headersRequest builds a request_headers or response_headers message.
func (p *processor) headersRequest(h headerMap, endOfStream, response bool) *extprocv3.ProcessingRequest {
	hm := h
	if len(p.f.forwardAllowed) > 0 || len(p.f.forwardDisallowed) > 0 {
		hm = nil
		for _, f := range h {
			if p.f.forwardable(f.key) {
				hm = append(hm, f)
			}
		}
	}
	if p.hdrs == nil {
		p.hdrs = new(headersMsg)
		p.hdrs.req.RequestHeaders = &p.hdrs.hh
		p.hdrs.resp.ResponseHeaders = &p.hdrs.hh
		p.hdrs.hh.Headers = &p.hdrs.hm
	}
	m := p.hdrs
	m.fill(hm)
	m.hh.EndOfStream = endOfStream
	// A message is used again: what a previous one was given (forwarded
	// metadata) is not carried over.
	m.msg.MetadataContext = nil
	if response {
		m.msg.Request = &m.resp
	} else {
		m.msg.Request = &m.req
	}
	return &m.msg
}

// headersMsg is a headers message and its parts, allocated together and
// reused for each headers message of a processor's stream (the request's,
// then the response's), like bodyChunk: a sender may reuse a message once
// Send has returned, and headers messages go out one at a time, from the
// request's goroutine.
type headersMsg struct {
	msg  extprocv3.ProcessingRequest
	req  extprocv3.ProcessingRequest_RequestHeaders
	resp extprocv3.ProcessingRequest_ResponseHeaders
	hh   extprocv3.HttpHeaders
	hm   corev3.HeaderMap
	vals []corev3.HeaderValue
	ptrs []*corev3.HeaderValue
	raw  []byte
}

// fill renders h into the message's header map, as headerMap.proto does,
// in the blocks of the previous message when they are large enough.
func (m *headersMsg) fill(h headerMap) {
	n := 0
	for _, f := range h {
		n += len(f.value)
	}
	if cap(m.vals) < len(h) {
		m.vals = make([]corev3.HeaderValue, len(h))
		m.ptrs = make([]*corev3.HeaderValue, len(h))
	}
	if cap(m.raw) < n {
		m.raw = make([]byte, 0, n)
	}
	vals, ptrs, raw := m.vals[:len(h)], m.ptrs[:len(h)], m.raw[:0]
	for i, f := range h {
		start := len(raw)
		raw = append(raw, f.value...)
		vals[i].Key = f.key
		vals[i].Value = ""
		vals[i].RawValue = raw[start:len(raw):len(raw)]
		ptrs[i] = &vals[i]
	}
	m.hm.Headers = ptrs
}

// chunkRequest is bodyRequest for the chunks of a streamed body: one
// message, reused for every chunk of the request.
func (p *processor) chunkRequest(body []byte, endOfStream, response bool) *extprocv3.ProcessingRequest {
	c := &p.reqChunk
	if response {
		c = &p.respChunk
	}
	if *c == nil {
		*c = new(bodyChunk)
		(*c).req.RequestBody = &(*c).body
		(*c).resp.ResponseBody = &(*c).body
		if response {
			(*c).msg.Request = &(*c).resp
		} else {
			(*c).msg.Request = &(*c).req
		}
	}
	(*c).body.Body, (*c).body.EndOfStream = body, endOfStream
	return &(*c).msg
}

// bodyRequest builds a buffered body message, its parts allocated together.
func bodyRequest(body []byte, endOfStream, response bool) *extprocv3.ProcessingRequest {
	c := &bodyChunk{}
	c.body.Body, c.body.EndOfStream = body, endOfStream
	if response {
		c.resp.ResponseBody = &c.body
		c.msg.Request = &c.resp
	} else {
		c.req.RequestBody = &c.body
		c.msg.Request = &c.req
	}
	return &c.msg
}

// mutateBody applies a BodyMutation to body and returns the result.
func mutateBody(body []byte, bm *extprocv3.BodyMutation) []byte {
	switch m := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_Body:
		return m.Body
	case *extprocv3.BodyMutation_ClearBody:
		if m.ClearBody {
			return nil
		}
	}
	return body
}

// shouldRemoveContentLength is Envoy's rule: in these modes the filter
// cannot promise that a mutated body keeps the declared length.
func shouldRemoveContentLength(body extprocfilterv3.ProcessingMode_BodySendMode, sendHeaders bool) bool {
	return body == extprocfilterv3.ProcessingMode_STREAMED ||
		body == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL ||
		(body == extprocfilterv3.ProcessingMode_BUFFERED && !sendHeaders)
}
