package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// copyBufferSize is the size of the pooled buffers bodies are copied with.
const copyBufferSize = 32 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}

// requestState is one request's trip through the connection manager, the
// ext_proc filter and the router.
type requestState struct {
	d     *DataPlane
	cfg   *snapshot // the configuration the request started with
	lis   *listenerConfig
	table *routeTable
	log   *slog.Logger
	w     http.ResponseWriter
	rc    *http.ResponseController
	r     *http.Request
	start time.Time
	end   time.Time // when the handler finished
	// headersAt is when the response headers went downstream.
	headersAt time.Time

	headers    headerMap
	body       *idleBody // the request body, bounded by the stream idle timeout; nil without one
	path       string    // downstream path without the query string
	requestID  string
	route      *route
	routeStale bool // clear_route_cache: match again before routing
	proc       *processor
	meta       requestMetadata

	upCtx    context.Context // the upstream request; cancelled by timeouts and ext_proc failures
	upCancel context.CancelFunc
	reason   atomic.Pointer[string]
	// The downstream request: complete, or timed out while reading its body
	// (which also cancels the request's context in net/http).
	requestComplete atomic.Bool
	bodyTimedOut    atomic.Bool
	// wholeBodyTimedOut: the body took longer than the request body
	// timeout, not merely idle too long.
	wholeBodyTimedOut atomic.Bool
	// reserved is what the request holds of the bytes-in-flight cap.
	reserved int64
	// bodyBad is set when the client's body broke its own framing: cut
	// short of its Content-Length or its last chunk, or a malformed chunk.
	bodyBad  atomic.Pointer[apierror.Error]
	idle     *idleTimer
	cleanups []func()
	// cleanupArr holds the first cleanups: a forwarded request has about
	// six, which would otherwise grow the slice four times.
	cleanupArr [8]func()

	// A STREAMED request body runs in its own goroutine; a failure there is
	// answered by the request's goroutine.
	bodyDone  chan struct{}
	asyncMu   sync.Mutex
	asyncFail func()

	// Outcome, for the access log.
	status    int
	bytesSent int64
	cluster   string
	// The router's attempts: how many, the host of the last one, and
	// whether the last failed retriably with no retry left (Envoy's URX).
	attempts         int
	upstreamHost     string
	retriesExhausted bool
	// The last attempt's cluster (a member, for an aggregate) and host: a
	// reset after its response head counts against it (upstreamBodyFailed).
	upCluster  *cluster
	upEndpoint *endpoint
	// The request's spans when tracing is on (tracing.go): the server
	// span and its context, and the last upstream attempt's span with the
	// status it answered.
	span     trace.Span
	traceCtx context.Context
	upSpan   trace.Span
	upStatus int
	// upstreamWait is the nanoseconds spent waiting on upstreams (round
	// trips to response headers, blocked response body reads): the
	// request's duration less this is the latency the gateway added.
	upstreamWait atomic.Int64
	detail       string
	flags        []string // Envoy's response flags of a local reply
	wroteHeader  bool
	// eventStream: the response is text/event-stream; tail is the end of
	// what went downstream, so a cut can tell whether it is between events.
	eventStream bool
	tail        [4]byte
	// streamCut: the response started and was then cut short.
	streamCut bool
}

// serveHTTP is every listener's handler.
func (d *DataPlane) serveHTTP(listener string, w http.ResponseWriter, r *http.Request) {
	if d.refusedFraming(listener, w, r) {
		return
	}
	cfg := d.cfg.Load()
	lc := cfg.listeners[listener]
	if lc == nil {
		// The listener was removed and is draining.
		w.Header().Set("Connection", "close")
		apierror.Server(http.StatusServiceUnavailable, "listener_draining", "The gateway is reloading; retry the request.").Write(w)
		return
	}
	s := &requestState{
		d:     d,
		cfg:   cfg,
		lis:   lc,
		table: lc.hcm.routes,
		log:   d.log,
		w:     w,
		rc:    http.NewResponseController(w),
		r:     r,
		start: time.Now(),
	}
	s.cleanups = s.cleanupArr[:0]
	s.upCtx, s.upCancel = context.WithCancel(r.Context())
	defer s.finish()
	s.run()
}

func (s *requestState) run() {
	s.prepareHeaders()
	s.startTrace()
	s.route = s.table.match(s.headers)
	s.proc = s.newProcessor()
	body, ok := s.decode()
	if !ok {
		return
	}
	if s.routeStale {
		s.route = s.table.match(s.headers)
	}
	var resp *response
	switch rt := s.route; {
	case rt == nil:
		resp = s.localResponse(apierror.NotFound(s.path), "route_not_found")
	case rt.direct:
		resp = s.directResponse(rt)
	default:
		resp = s.forward(rt, body)
	}
	if f := s.takeAsyncFailure(); f != nil {
		if resp != nil {
			resp.close()
		}
		f()
		return
	}
	if resp == nil {
		return // the client went away
	}
	s.encode(resp)
}

// finish releases the request's resources, then makes the ratelimit
// filter's stream-done call and writes the access log line once the
// handler has returned. It runs even when the stream is reset with a panic.
//
// The stream-done work does not hold the connection, as in Envoy, where
// the stream is over once the response is sent: the ratelimit filter's
// stream-done call is detached from the finished stream, and the
// connection reads its next request meanwhile. Done synchronously, the
// call's round trip would delay a keep-alive client's next request. It
// runs on the stream-done workers (streamdone.go).
func (s *requestState) finish() {
	s.end = time.Now()
	s.upCancel()
	if s.body != nil {
		s.body.ended.Store(true)
	}
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	if s.bodyDone != nil {
		<-s.bodyDone
	}
	if s.proc != nil {
		s.proc.close()
	}
	s.endTrace()
	d := s.d
	d.streamDone.Add(1)
	d.doneQ.enqueue(d, s)
}

// prepareHeaders builds the header map filters see, with the connection
// manager's additions: x-forwarded-for, x-forwarded-proto, x-request-id.
func (s *requestState) prepareHeaders() {
	r := s.r
	path := r.RequestURI
	if !strings.HasPrefix(path, "/") && path != "*" {
		// Absolute-form request targets are turned into a path, as Envoy does.
		path = r.URL.RequestURI()
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h := make(headerMap, 0, len(r.Header)+8)
	h = append(h, headerField{hdrAuthority, r.Host}, headerField{hdrPath, path},
		headerField{hdrMethod, r.Method}, headerField{hdrScheme, scheme})
	h.appendHTTPHeader(r.Header)
	h.stripHopByHop()

	hcm := s.lis.hcm
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && !hcm.skipXFFAppend {
		if xff, ok := h.joined("x-forwarded-for"); ok && xff != "" {
			h.set("x-forwarded-for", xff+","+ip)
		} else {
			h.set("x-forwarded-for", ip)
		}
	}
	if hcm.useRemoteAddress || h.value("x-forwarded-proto") == "" {
		h.set("x-forwarded-proto", scheme)
	}
	if hcm.generateRequestID && h.value("x-request-id") == "" {
		h.set("x-request-id", newRequestID())
	}
	s.requestID = h.value("x-request-id")
	s.headers = h
	s.path = path
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		s.path = path[:i]
	}
}

// newProcessor sets up the ext_proc filter for this request, with the
// per-route configuration of the initial route match: Envoy reads it once,
// and a later re-route does not change it.
func (s *requestState) newProcessor() *processor {
	f := s.lis.hcm.extProc
	if f == nil {
		return nil
	}
	enabled := !f.disabledByDefault
	mode := f.mode
	if rt := s.route; rt != nil {
		var (
			haveOverride bool
			disabled     bool
			pm           *extprocfilterv3.ProcessingMode
		)
		for _, pf := range []*perFilterConfig{rt.vh.perFilter[f.name], rt.perFilter[f.name]} {
			if pf == nil {
				continue
			}
			enabled = !pf.disabled
			if ep := pf.extProc; ep != nil {
				// Envoy merges less specific with more specific: a more
				// specific "disabled" wins, else its mode if it has one.
				haveOverride = true
				disabled = ep.GetDisabled()
				if disabled {
					pm = nil
				} else if m := ep.GetOverrides().GetProcessingMode(); m != nil {
					pm = m
				}
			}
		}
		if haveOverride {
			switch {
			case disabled:
				mode = procMode{}
			case pm != nil:
				// The override replaces the whole mode: unset fields revert to
				// their defaults, not to the filter's configuration.
				mode = modeOf(pm)
			}
		}
	}
	if !enabled {
		return nil
	}
	p := &processor{f: f, log: s.log, mode: mode, meta: &s.meta}
	if s.span != nil {
		p.tracer, p.parent = s.d.tracer, s.traceCtx
	}
	return p
}

// decode runs the request through the ext_proc filter and returns the body
// to forward. ok is false when the request has already been answered.
func (s *requestState) decode() (upstreamBody, bool) {
	// net/http gives HTTP/1.1 requests without a body http.NoBody, and
	// HTTP/2 requests whose stream ended with the headers ContentLength 0.
	hasBody := s.r.Body != nil && s.r.Body != http.NoBody && s.r.ContentLength != 0
	var out upstreamBody
	if hasBody {
		s.body = &idleBody{r: s.r.Body, rc: s.rc, d: s.lis.hcm.streamIdleTimeout, remaining: s.r.ContentLength,
			timedOut: &s.bodyTimedOut, complete: &s.requestComplete, bad: &s.bodyBad, http2: s.r.ProtoMajor == 2,
			wholeTimedOut: &s.wholeBodyTimedOut}
		if t := s.d.adm.bodyTimeout; t > 0 {
			s.body.deadline = s.start.Add(t)
		}
		out.r = s.body
	} else {
		s.requestComplete.Store(true)
	}
	p := s.proc
	if p == nil {
		return out, true
	}
	ctx := s.r.Context()
	headersSent := false
	if p.mode.reqHeaders {
		common, imm, err := p.call(ctx, p.headersRequest(s.headers, !hasBody, false), kindRequestHeaders)
		switch {
		case imm != nil:
			s.sendImmediate(imm)
			return out, false
		case errors.Is(err, errSkip):
		case err != nil:
			s.processingFailed(err)
			return out, false
		default:
			headersSent = true
			body, replaced, err := s.applyHeadersReply(p, &s.headers, common, true)
			if err != nil {
				s.processingFailed(err)
				return out, false
			}
			// The key is known now, before any of the body is read.
			if !s.admitKey() {
				return out, false
			}
			if replaced {
				// CONTINUE_AND_REPLACE: the client's body, if any, is dropped.
				return upstreamBody{buf: body, buffered: true}, true
			}
		}
	}
	if !p.done() && !p.f.keepContentLength && shouldRemoveContentLength(p.mode.reqBody, p.mode.reqHeaders) {
		s.headers.del("content-length")
	}
	if !hasBody || p.done() {
		return out, true
	}
	switch p.mode.reqBody {
	case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
		return s.decodeBuffered(p, headersSent, p.mode.reqBody == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL)
	case extprocfilterv3.ProcessingMode_STREAMED:
		return s.decodeStreamed(p), true
	}
	return out, true
}

// decodeBuffered sends the request body in one message. Over the buffer
// limit a BUFFERED request gets 413 without a body message; BUFFERED_PARTIAL
// sends the first limit bytes and streams the rest unprocessed.
func (s *requestState) decodeBuffered(p *processor, headersSent, partial bool) (upstreamBody, bool) {
	limit := s.bodyLimit()
	buf, over, err := s.readBody(s.body, limit, s.r.ContentLength)
	if err != nil {
		if errors.Is(err, errOverloaded) {
			s.encode(s.localResponse(overloaded(), "overloaded"))
			return upstreamBody{}, false
		}
		if s.bodyTimedOut.Load() {
			// net/http has cancelled the request's context, and with it the
			// ext_proc stream, so this reply cannot run through the filter
			// as Envoy's would.
			s.sendLocal(s.bodyTimeout())
			return upstreamBody{}, false
		}
		if s.badBody() {
			return upstreamBody{}, false
		}
		s.detail = "downstream_remote_disconnect"
		return upstreamBody{}, false
	}
	if over && !partial {
		s.encode(s.localResponse(apierror.TooLarge(limit), "request_payload_too_large"))
		return upstreamBody{}, false
	}
	chunk, rest := buf, io.Reader(nil)
	if over {
		chunk, rest = buf[:limit], io.MultiReader(bytes.NewReader(buf[limit:]), s.body)
	}
	common, imm, err := p.call(s.r.Context(), bodyRequest(chunk, !over, false), kindRequestBody)
	switch {
	case imm != nil:
		s.sendImmediate(imm)
		return upstreamBody{}, false
	case errors.Is(err, errSkip):
	case err != nil:
		s.processingFailed(err)
		return upstreamBody{}, false
	default:
		if chunk, err = s.applyBodyReply(p, &s.headers, common, chunk, headersSent, !partial, true); err != nil {
			s.processingFailed(err)
			return upstreamBody{}, false
		}
	}
	if rest != nil {
		return upstreamBody{r: io.MultiReader(bytes.NewReader(chunk), rest)}, true
	}
	return upstreamBody{buf: chunk, buffered: true}, true
}

// decodeStreamed sends each chunk of the request body as it arrives and
// forwards it only after the processor's reply.
func (s *requestState) decodeStreamed(p *processor) upstreamBody {
	pr, pw := io.Pipe()
	s.bodyDone = make(chan struct{})
	s.cleanups = append(s.cleanups, func() { _ = pr.CloseWithError(errRequestDone) })
	ctx := s.r.Context()
	go func() {
		defer close(s.bodyDone)
		bufp := bufPool.Get().(*[]byte)
		defer bufPool.Put(bufp)
		for {
			n, rerr := s.body.Read(*bufp)
			eos := rerr == io.EOF
			if rerr != nil && !eos {
				_ = pw.CloseWithError(rerr)
				return
			}
			chunk := (*bufp)[:n]
			if !p.done() && (n > 0 || eos) {
				common, imm, err := p.call(ctx, p.chunkRequest(chunk, eos, false), kindRequestBody)
				switch {
				case imm != nil:
					s.setAsyncFailure(func() { s.sendImmediate(imm) })
					_ = pw.CloseWithError(errRequestDone)
					return
				case errors.Is(err, errSkip):
				case err != nil:
					s.setAsyncFailure(func() { s.processingFailed(err) })
					_ = pw.CloseWithError(errRequestDone)
					return
				default:
					if bm := common.GetBodyMutation(); bm != nil {
						chunk = mutateBody(chunk, bm)
					}
				}
			}
			if len(chunk) > 0 {
				if _, err := pw.Write(chunk); err != nil {
					return
				}
			}
			if eos {
				_ = pw.Close()
				return
			}
		}
	}()
	return upstreamBody{r: pr}
}

var errRequestDone = errors.New("dataplane: request finished")

func (s *requestState) setAsyncFailure(f func()) {
	s.asyncMu.Lock()
	if s.asyncFail == nil {
		s.asyncFail = f
	}
	s.asyncMu.Unlock()
	s.upCancel()
}

func (s *requestState) takeAsyncFailure() func() {
	s.asyncMu.Lock()
	defer s.asyncMu.Unlock()
	f := s.asyncFail
	s.asyncFail = nil
	return f
}

// applyHeadersReply applies a headers reply to h. For CONTINUE_AND_REPLACE
// with a body mutation it returns the replacement body: no further body
// messages go out in that direction.
func (s *requestState) applyHeadersReply(p *processor, h *headerMap, common *extprocv3.CommonResponse, request bool) ([]byte, bool, error) {
	replace := common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
	if hm := common.GetHeaderMutation(); hm != nil {
		if err := applyHeaderMutation(h, hm, replace, p.f.checker, s.log.Warn); err != nil {
			return nil, false, err
		}
	}
	if request {
		s.clearRouteCache(p, common)
	}
	if !replace {
		return nil, false, nil
	}
	if request {
		p.mode.reqBody = extprocfilterv3.ProcessingMode_NONE
	} else {
		p.mode.respBody = extprocfilterv3.ProcessingMode_NONE
	}
	if bm := common.GetBodyMutation(); bm != nil {
		// The processor is unlikely to have fixed content-length for a body
		// it replaces wholesale, so Envoy drops it.
		h.del("content-length")
		return mutateBody(nil, bm), true, nil
	}
	return nil, false, nil
}

// errContentLength is Envoy's rejection of a buffered body mutation whose
// length does not match a content-length that is still present.
var errContentLength = errors.New("mismatch between content length and the length of the mutated body")

// applyBodyReply applies a reply to a buffered body message. The header
// mutation applies only when the headers were sent to the processor (Envoy
// still holds them then); the content-length check is for BUFFERED mode.
func (s *requestState) applyBodyReply(p *processor, h *headerMap, common *extprocv3.CommonResponse, body []byte, headersAvailable, checkLength, request bool) ([]byte, error) {
	if hm := common.GetHeaderMutation(); hm != nil && headersAvailable {
		if err := applyHeaderMutation(h, hm, false, p.f.checker, s.log.Warn); err != nil {
			return nil, err
		}
	}
	if bm := common.GetBodyMutation(); bm != nil {
		if cl, ok := h.get("content-length"); ok && checkLength && headersAvailable {
			// Envoy compares with the mutation's body field, so clear_body
			// needs content-length 0 (or none) too.
			if n, err := strconv.ParseUint(cl, 10, 64); err == nil && n != uint64(len(bm.GetBody())) {
				return nil, errContentLength
			}
		}
		body = mutateBody(body, bm)
	}
	if request {
		s.clearRouteCache(p, common)
	}
	return body, nil
}

// clearRouteCache marks the route for re-matching. Envoy ignores
// clear_route_cache unless the same reply carries a header mutation.
func (s *requestState) clearRouteCache(p *processor, common *extprocv3.CommonResponse) {
	clear := common.GetClearRouteCache()
	if common.GetHeaderMutation() == nil {
		if clear {
			s.log.Debug("ext_proc clear_route_cache ignored: the reply has no header_mutation")
		}
		return
	}
	switch p.f.routeCache {
	case extprocfilterv3.ExternalProcessor_CLEAR:
		s.routeStale = true
	case extprocfilterv3.ExternalProcessor_DEFAULT:
		if clear {
			s.routeStale = true
		}
	}
}

// bodyLimit is the request buffer limit: the route's, else the listener's.
func (s *requestState) bodyLimit() int64 {
	if rt := s.route; rt != nil {
		if rt.bodyLimit > 0 {
			return rt.bodyLimit
		}
		if rt.vh.bodyLimit > 0 {
			return rt.vh.bodyLimit
		}
	}
	return s.lis.bufferLimit
}

// idleBody bounds each read of the request body by the stream idle timeout,
// as Envoy's stream_idle_timeout does for a client that stops sending.
//
// A body of declared length ends (EOF) as soon as that many bytes were
// read, without another read of the server's body. The upstream transport
// reads once more after Content-Length bytes, looking for surplus; by then
// the upstream may have answered and the handler finished, and net/http
// closes the request body when a handler ends: that read would fail with
// "invalid Read on closed Body", and the transport would close the pooled
// upstream connection while the response body was still being read from it
// (a stream cut mid-way, upstream_reset_after_response_started).
type idleBody struct {
	r  io.Reader
	rc *http.ResponseController
	d  time.Duration
	// remaining is how much of a declared length is still to come; -1
	// without a Content-Length (chunked, or HTTP/2 without one).
	remaining int64
	timedOut  *atomic.Bool
	complete  *atomic.Bool
	// deadline, when set, ends the whole body (the request body timeout);
	// wholeTimedOut records that it, not the idle timeout, struck.
	deadline      time.Time
	wholeTimedOut *atomic.Bool
	bad           *atomic.Pointer[apierror.Error]
	http2         bool
	// ended is set when the request's handler is done: a late read (the
	// upstream transport's) must not touch the connection, which may be
	// reading the next request by then.
	ended atomic.Bool
	// mu is held during each read of the client's body (settle).
	mu sync.Mutex
}

// settle waits for a read of the body in flight (the upstream transport's
// or the STREAMED body's goroutine) to end. Call it only once the client's
// side has ended: a read on a live connection may wait for the client.
func (b *idleBody) settle() {
	if b != nil {
		b.mu.Lock()
		//lint:ignore SA2001 the empty critical section is the point: it waits for a read in flight to end
		b.mu.Unlock()
	}
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.remaining == 0 {
		b.done()
		return 0, io.EOF
	}
	if b.remaining > 0 && int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	if b.ended.Load() {
		return 0, errRequestDone
	}
	whole := false
	if b.d > 0 || !b.deadline.IsZero() {
		dl := time.Now().Add(b.d)
		if !b.deadline.IsZero() && (b.d <= 0 || b.deadline.Before(dl)) {
			dl, whole = b.deadline, true
		}
		_ = b.rc.SetReadDeadline(dl)
	}
	n, err := b.r.Read(p)
	if b.remaining > 0 {
		b.remaining -= int64(n)
		if b.remaining == 0 && err == nil {
			err = io.EOF
		}
	}
	switch {
	case err == io.EOF:
		b.done()
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		if whole && b.wholeTimedOut != nil {
			b.wholeTimedOut.Store(true)
		}
		b.timedOut.Store(true)
	default:
		if e := badBodyError(err, b.http2); e != nil {
			b.bad.CompareAndSwap(nil, e)
		}
	}
	return n, err
}

// done marks the body complete. (The read deadline needs no lifting:
// net/http clears it when it starts its background read at the body's end.)
func (b *idleBody) done() { b.complete.Store(true) }

// badBodyError classifies a failed read of the client's body: the client's
// own framing error (a body cut short of its declared length or last chunk,
// a malformed chunk) is a 400; a broken connection is nil (nobody to
// answer). net/http reports HTTP/1.1 framing errors as plain errors and
// io.ErrUnexpectedEOF, a dead connection as a net.Error.
func badBodyError(err error, http2 bool) *apierror.Error {
	var ne net.Error
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &apierror.Error{Status: http.StatusBadRequest, Code: "incomplete_request_body",
			Message: "The request body ended before its declared length (Content-Length) or its last chunk."}
	case errors.As(err, &ne), errors.Is(err, http.ErrBodyReadAfterClose), errors.Is(err, errRequestDone),
		errors.Is(err, context.Canceled), errors.Is(err, http.ErrAbortHandler):
		return nil
	case http2:
		// A reset stream; HTTP/2 framing errors never reach the handler.
		return nil
	}
	return &apierror.Error{Status: http.StatusBadRequest, Code: "malformed_request_body",
		Message: "The request body's framing is malformed (chunked transfer encoding)."}
}

// badBody answers a request whose body broke its framing with 400 and
// reports whether it did. The connection closes after it: whatever follows
// on it cannot be told apart from the broken body. The reply bypasses the
// ext_proc filter (on HTTP/1.1 the cut-short body also ended the request's
// context, and with it the processor's stream).
func (s *requestState) badBody() bool {
	e := s.bodyBad.Load()
	if e == nil {
		return false
	}
	if !s.wroteHeader {
		s.w.Header().Set("Connection", "close")
	}
	s.sendLocal(e, "downstream_body_malformed")
	return true
}

// bodyTimeout is the 408 for a body that did not arrive in time, and its
// response detail.
func (s *requestState) bodyTimeout() (*apierror.Error, string) {
	if s.wholeBodyTimedOut.Load() {
		return &apierror.Error{Status: http.StatusRequestTimeout, Code: "request_body_timeout",
			Message: "The request body was not received within the gateway's request body timeout."}, "request_body_timeout"
	}
	return streamTimeout(), "stream_idle_timeout"
}

// streamTimeout is Envoy's reply to a request that stalls: 408.
func streamTimeout() *apierror.Error {
	return &apierror.Error{Status: http.StatusRequestTimeout, Code: "stream_idle_timeout",
		Message: "The request body was not received in time."}
}

// readUpTo reads r until EOF or until more than limit bytes were read; over
// reports the latter, with limit+1 bytes in the result. sizeHint is the
// declared length, if any.
//
// A body of the declared length is read into a buffer of that length and
// one byte, the room the read that finds EOF needs (bytes.Buffer.ReadFrom
// wanted 512 bytes free for it, a request's two bodies each padded so),
// and the limit is applied in place, without an io.LimitReader.
func readUpTo(r io.Reader, limit, sizeHint int64) ([]byte, bool, error) {
	var buf []byte
	if sizeHint > 0 && sizeHint <= limit {
		buf = make([]byte, 0, sizeHint+1)
	}
	left := limit + 1 // what may still be read: over shows as the one byte past limit
	for left > 0 {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(bytes.MinRead, len(buf)))
		}
		room := buf[len(buf):cap(buf)]
		if int64(len(room)) > left {
			room = room[:left]
		}
		n, err := r.Read(room)
		buf = buf[:len(buf)+n]
		left -= int64(n)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	return buf, int64(len(buf)) > limit, nil
}

// reset aborts the downstream stream: an HTTP/2 RST_STREAM, or a closed
// HTTP/1.1 connection. The deferred finish still logs the request.
func (s *requestState) reset(detail string) {
	s.detail = detail
	panic(http.ErrAbortHandler)
}

func (s *requestState) abort(reason string, cancel context.CancelFunc) {
	s.reason.CompareAndSwap(nil, &reason)
	cancel()
}

func (s *requestState) abortReason() string {
	if p := s.reason.Load(); p != nil {
		return *p
	}
	return ""
}

// newRequestID returns a random UUID (version 4), the form of Envoy's
// generated x-request-id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var out [36]byte
	hex.Encode(out[0:8], b[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], b[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], b[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], b[8:10])
	out[23] = '-'
	hex.Encode(out[24:36], b[10:16])
	return string(out[:])
}
