package dataplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// The router's side of a request: attempts, retries and the upstream HTTP
// filter chain of the cluster each attempt goes to.
//
// Envoy's router picks a host, runs the cluster's upstream filters
// (HttpProtocolOptions.http_filters, ending with the codec) on a copy of the
// request for that attempt, and sees the response only after those filters
// have processed its headers (and, when a filter buffers it, its body). It
// retries, per the route's retry policy, attempts that failed to connect,
// were reset, timed out (per_try_timeout) or answered a retriable status,
// as long as nothing has gone downstream; each retry picks its host again,
// so with an aggregate cluster and previous_priorities it goes to the next
// provider, and that provider's upstream ext_proc adapts the request anew.

// compileUpstreamFilters reads a cluster's upstream HTTP filter chain: one
// ext_proc filter, then envoy.filters.http.upstream_codec, which must be
// last.
func (d *DataPlane) compileUpstreamFilters(po *upstreamhttpv3.HttpProtocolOptions, out *cluster, from string) error {
	filters := po.GetHttpFilters()
	for i, f := range filters {
		last := i == len(filters)-1
		if f.GetConfigDiscovery() != nil {
			return fmt.Errorf("%s: upstream http filter %q: config discovery is not supported", from, f.GetName())
		}
		a := f.GetTypedConfig()
		switch {
		case a.MessageIs(&upstreamcodecv3.UpstreamCodec{}):
			if !last {
				return fmt.Errorf("%s: upstream http filter %q: the upstream codec must be the last upstream http filter", from, f.GetName())
			}
		case last:
			return fmt.Errorf("%s: the last upstream http filter is %q, not envoy.filters.http.upstream_codec", from, f.GetName())
		case a.MessageIs(&extprocfilterv3.ExternalProcessor{}):
			if out.upstreamExtProc != nil {
				return fmt.Errorf("%s: more than one upstream ext_proc filter is not supported", from)
			}
			ep := &extprocfilterv3.ExternalProcessor{}
			if err := a.UnmarshalTo(ep); err != nil {
				return fmt.Errorf("%s: upstream http filter %q: %w", from, f.GetName(), err)
			}
			pf, err := compileExtProc(f.GetName(), f.GetDisabled(), ep, d.staticCluster, d.grpcConn, d.localProcessor)
			if err != nil {
				var me *missingError
				if errors.As(err, &me) {
					return err
				}
				return fmt.Errorf("%s: upstream http filter %q: %w", from, f.GetName(), err)
			}
			if pf.disabledByDefault {
				continue // upstream filters have no per-route enabling here
			}
			pf.counters = &d.extProcUp
			out.upstreamExtProc = pf
		case f.GetIsOptional():
			d.log.Warn("optional upstream http filter not supported by the data plane; skipped", "cluster", out.name, "filter", f.GetName())
		default:
			return fmt.Errorf("%s: upstream http filter %q (%s) is not supported by the data plane", from, f.GetName(), a.GetTypeUrl())
		}
	}
	return nil
}

// forward sends the request to the route's cluster, retrying per the
// route's retry policy, and returns the response of the last attempt or the
// local reply Envoy's router would send instead. It returns nil when the
// client went away.
func (s *requestState) forward(rt *route, body upstreamBody) *response {
	name, ok := rt.pickCluster(s.headers)
	c := s.cfg.clusters[name]
	if !ok || c == nil {
		return s.localResponse(apierror.Server(rt.notFoundCode, "cluster_not_found", "The route's upstream cluster does not exist."), "cluster_not_found")
	}
	s.cluster = name

	// The request headers of every attempt: the route's header changes and
	// path rewrite, as the router applies them before the upstream filters
	// run. Envoy hands every attempt's upstream filters this same header
	// map, so what one attempt's filters change, the next attempt still
	// sees (envoyproxy/ai-gateway#1387); the body, by contrast, is a fresh
	// copy of the buffered one per attempt.
	h := s.headers.clone()
	// Most specific first, so the least specific level wins an overwrite,
	// as Envoy does by default.
	for _, ops := range []headerOps{rt.hdrOps, rt.vh.headers, s.table.headers} {
		for _, k := range ops.reqRemove {
			h.del(k)
		}
		applyHeaderOptions(&h, ops.reqAdd)
	}
	h.del("expect") // Envoy answers 100-continue itself and does not forward it
	h.set(hdrPath, rt.rewritePath(h.value(hdrPath)))
	switch {
	case rt.hostLiteral != "":
		h.set(hdrAuthority, rt.hostLiteral)
	case rt.hostHeader != "" && h.value(rt.hostHeader) != "":
		h.set(hdrAuthority, h.value(rt.hostHeader))
	}

	// The upstream context is the request's own (finish cancels it): a
	// context of its own here would cost another cancelCtx, and its
	// registration in the parent, on every request. Whatever cancels it
	// records why first (abort), and upstreamFailure reads that reason
	// before it looks at the context.
	ctx, cancel := s.upCtx, s.upCancel
	if rt.timeout > 0 {
		t := time.AfterFunc(rt.timeout, func() { s.abort("upstream_request_timeout", cancel) })
		s.cleanups = append(s.cleanups, func() { t.Stop() })
	}
	idle := s.lis.hcm.streamIdleTimeout
	if rt.hasIdle {
		idle = rt.idleTimeout
	}
	s.idle = newIdleTimer(idle, func() { s.abort("stream_idle_timeout", cancel) })
	s.cleanups = append(s.cleanups, s.idle.stop)
	// A drain whose grace period is over ends the attempt (Shutdown).
	stopOnDrain := context.AfterFunc(s.d.stopping, func() { s.abort("gateway_shutdown", cancel) })
	s.cleanups = append(s.cleanups, func() { stopOnDrain() })

	policy := rt.retry
	if policy != nil && body.r != nil && !body.buffered {
		// Envoy's router keeps the request body for retries up to the
		// buffer limit; past it the request goes on without retries.
		b, over, err := s.readBody(body.r, s.bodyLimit(), s.r.ContentLength)
		if errors.Is(err, errOverloaded) {
			return s.localResponse(overloaded(), "overloaded")
		}
		if err != nil {
			return s.upstreamFailure(err)
		}
		if over {
			body, policy = upstreamBody{r: io.MultiReader(bytes.NewReader(b), body.r)}, nil
		} else {
			body = upstreamBody{buf: b, buffered: true}
		}
	}
	sel := &selection{}
	if policy != nil {
		sel.prevHosts, sel.prevPriorities, sel.maxHostTries = policy.prevHosts, policy.prevPriorities, policy.maxHostTries
	}
	for retries := 0; ; {
		now := c.clock()
		c.sweepAll(now, s.log)
		member, ep, priority := c.choose(sel, now)
		if ep == nil {
			return s.localResponse(apierror.Server(http.StatusServiceUnavailable, "no_healthy_upstream", "No upstream is available."), "no_healthy_upstream")
		}
		s.attempts++
		s.upstreamHost = ep.addr
		s.upCluster, s.upEndpoint = member, ep
		actx := ctx
		var span trace.Span
		if s.span != nil {
			actx, span = s.startAttemptSpan(ctx, member.name)
		}
		a := s.attempt(actx, rt, member, ep, &h, body, policy)
		if span != nil {
			// The answering attempt's span lasts until the response is
			// sent (endTrace); a retried one ends when it is discarded.
			s.upSpan, s.upStatus = span, a.status
		}
		if a.done {
			return a.resp
		}
		retriable := policy != nil && policy.retriable(a.kind, a.status)
		if retriable && retries < policy.numRetries && ctx.Err() == nil {
			s.log.Info("upstream attempt failed; retrying", "cluster", member.name, "host", ep.addr,
				"status", a.status, "failure", a.kind, "attempt", s.attempts, "request_id", s.requestID, "error", a.err)
			a.discard()
			if s.upSpan != nil {
				s.endAttemptSpan(s.upSpan, s.upStatus)
				s.upSpan = nil
			}
			sel.attempted(ep, priority)
			retries++
			t := time.NewTimer(policy.backoff(retries))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return s.upstreamFailure(ctx.Err())
			}
			continue
		}
		s.retriesExhausted = retriable
		return a.finish(rt)
	}
}

// attempt is one try of the router: the response it produced, or how it
// failed.
type attempt struct {
	s      *requestState
	c      *cluster // the cluster of the host (a member of an aggregate)
	kind   failKind
	err    error
	status int       // of resp
	resp   *response // the response headers the router sees, body to come
	// done means resp is the request's answer, never retried: a local reply
	// for a timeout of the whole request, or nil when the client is gone.
	done   bool
	cancel context.CancelFunc
	proc   *processor // the upstream ext_proc of this attempt
}

// discard ends an attempt that is retried: its response body and its
// upstream ext_proc stream are released.
func (a *attempt) discard() {
	if a.resp != nil {
		a.resp.close()
	}
	if a.proc != nil {
		a.proc.close()
	}
	a.cancel()
}

// finish turns the last attempt into the response: the upstream's, with
// the route's response headers, or the local reply for how it failed.
func (a *attempt) finish(rt *route) *response {
	s := a.s
	s.cleanups = append(s.cleanups, a.cancel)
	if a.proc != nil {
		s.cleanups = append(s.cleanups, a.proc.close)
	}
	if a.resp != nil {
		if s.retriesExhausted {
			s.flags = append(s.flags, "URX")
		}
		s.finalizeResponseHeaders(&a.resp.headers, rt)
		return a.resp
	}
	switch a.kind {
	case failConnect:
		s.log.Warn("upstream connect failed", "cluster", a.c.name, "error", a.err)
		return s.localResponse(apierror.Server(http.StatusServiceUnavailable, "upstream_connect_error", "The gateway could not connect to the upstream."), "upstream_connect_error")
	case failPerTryTimeout:
		return s.localResponse(apierror.Server(http.StatusGatewayTimeout, "upstream_per_try_timeout", "The upstream did not respond in time."), "upstream_per_try_timeout")
	default:
		s.log.Warn("upstream request failed", "cluster", a.c.name, "error", a.err)
		return s.localResponse(apierror.Server(http.StatusServiceUnavailable, "upstream_reset_before_response_started", "The upstream closed the connection before responding."), "upstream_reset_before_response_started")
	}
}

// attempt sends one attempt to ep, a host of c, through c's upstream
// filters, and returns once the router would see its response headers (or
// its failure). per_try_timeout bounds it until then; once the router has
// the headers, the timeout no longer applies (Envoy ignores it once the
// response has started downstream).
func (s *requestState) attempt(ctx context.Context, rt *route, c *cluster, ep *endpoint, h *headerMap, body upstreamBody, policy *retryPolicy) *attempt {
	actx, acancel := context.WithCancel(ctx)
	a := &attempt{s: s, c: c, cancel: acancel}
	var timedOut atomic.Bool
	var perTry *time.Timer
	if policy != nil && policy.perTry > 0 {
		perTry = time.AfterFunc(policy.perTry, func() {
			timedOut.Store(true)
			acancel()
		})
	}
	// fail classifies an error of this attempt; the outcome counts for
	// outlier detection when the host is to blame.
	fail := func(err error) *attempt {
		if perTry != nil {
			perTry.Stop()
		}
		a.err = err
		var ce *connectError
		switch {
		case s.bodyBad.Load() != nil:
			// The client's body broke its framing: its 400, no retry, and
			// not the host's fault.
			a.done, a.resp = true, s.upstreamFailure(err)
			a.discardProc()
			acancel()
		case timedOut.Load():
			a.kind = failPerTryTimeout
			c.report(ep, outcomeTimeout, c.clock(), s.log)
		case ctx.Err() != nil || s.r.Context().Err() != nil:
			// The whole request ended (its timeout, the client): no retry.
			a.done, a.resp = true, s.upstreamFailure(err)
			a.discardProc()
			acancel()
		case errors.As(err, &ce):
			a.kind = failConnect
			c.report(ep, outcomeConnectFailure, c.clock(), s.log)
		default:
			a.kind = failReset
			c.report(ep, outcomeReset, c.clock(), s.log)
		}
		return a
	}
	// reply ends the attempt with a response the router sees: the
	// upstream's, or one an upstream filter produced in its place.
	reply := func(resp *response) *attempt {
		if perTry != nil && !perTry.Stop() && timedOut.Load() {
			resp.close()
			return fail(context.DeadlineExceeded)
		}
		a.resp = resp
		a.status, _ = strconv.Atoi(resp.headers.value(hdrStatus))
		return a
	}

	if rt.autoHost && ep.hostname != "" {
		h.set(hdrAuthority, ep.hostname)
	}
	buf, stream := body.buf, body.r
	hasBody := len(buf) > 0 || stream != nil

	if f := c.upstreamExtProc; f != nil {
		// Envoy's upstream filters share the downstream stream's info, and
		// so its dynamic metadata: what the downstream ext_proc filter set
		// is forwarded to this one (forwarding_namespaces).
		p := &processor{f: f, log: s.log, mode: f.mode, meta: &s.meta}
		if s.span != nil {
			p.tracer, p.parent = s.d.tracer, ctx
		}
		a.proc = p
		if stream != nil && p.mode.reqBody != extprocfilterv3.ProcessingMode_NONE {
			// The filter needs the whole body; a request the downstream
			// filter streamed through is buffered here, within the limit.
			b, over, err := s.readBody(stream, s.bodyLimit(), s.r.ContentLength)
			if errors.Is(err, errOverloaded) {
				return reply(localReply(overloaded()))
			}
			if err != nil {
				return fail(err)
			}
			if over {
				return reply(localReply(apierror.TooLarge(s.bodyLimit())))
			}
			buf, stream = b, nil
		}
		var (
			resp *response
			err  error
		)
		buf, resp, err = s.upstreamRequestPhases(actx, p, h, buf, hasBody)
		switch {
		case err != nil:
			return fail(err)
		case resp != nil:
			return reply(resp)
		}
	}

	u, err := url.ParseRequestURI(h.value(hdrPath))
	if err != nil {
		return reply(localReply(apierror.InvalidParam("", "The request path is invalid.")))
	}
	u.Scheme, u.Host = "http", ep.addr
	if c.tls != nil {
		u.Scheme = "https"
	}
	hdr := h.httpHeader()
	s.injectTrace(ctx, c.name, hdr)
	if _, ok := hdr["User-Agent"]; !ok {
		hdr["User-Agent"] = []string{""} // Go would otherwise add its own
	}
	req := &http.Request{
		Method:     h.value(hdrMethod),
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       h.value(hdrAuthority),
	}
	switch {
	case stream != nil:
		// The body streams upstream while the response may already be
		// coming back, as in Envoy. Without full duplex, net/http's HTTP/1.1
		// server would drain and close the request body when the response
		// head is written, under the transport still sending it; that
		// write error closes the upstream connection mid-response.
		// (HTTP/2 is always full duplex: ErrNotSupported.)
		_ = s.rc.EnableFullDuplex()
		req.ContentLength = -1
		if cl, err := strconv.ParseInt(h.value("content-length"), 10, 64); err == nil {
			req.ContentLength = cl
		}
		req.Body = io.NopCloser(&activityReader{r: stream, idle: s.idle})
	case len(buf) > 0 || body.buffered:
		req.ContentLength = int64(len(buf))
		if len(buf) > 0 {
			req.Body = upstreamBufferedBody(buf, s.idle)
			// GetBody lets the transport replay the body on a connection that
			// died before it was written.
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		}
	}
	sent := time.Now()
	upResp, err := c.transport.RoundTrip(req.WithContext(actx))
	s.upstreamWait.Add(int64(time.Since(sent)))
	if err != nil {
		return fail(err)
	}
	c.report(ep, upResp.StatusCode, c.clock(), s.log)
	s.idle.touch() // the response head is activity, as in Envoy
	// Room for the upstream's headers and the filters' additions.
	rh := make(headerMap, 1, 1+len(upResp.Header)+4)
	rh[0] = headerField{hdrStatus, strconv.Itoa(upResp.StatusCode)}
	rh.appendHTTPHeader(upResp.Header)
	rh.stripHopByHop()
	out := &response{headers: rh, closer: upResp.Body, trailerOf: upResp}
	if upResp.Body != http.NoBody && upResp.ContentLength != 0 {
		out.body = &activityReader{r: upResp.Body, idle: s.idle, wait: &s.upstreamWait}
	}
	if p := a.proc; p != nil {
		out, err = s.upstreamResponsePhases(actx, p, out)
		if err != nil {
			return fail(err)
		}
	}
	return reply(out)
}

// inMemoryBodyMax is the largest buffered request body handed to the
// upstream transport as a plain in-memory reader. net/http writes the
// request head and such a body in one write (one syscall, one TCP
// segment); for any other reader it flushes the head first, in a write of
// its own, and the upstream reads twice. A body this small goes out at
// once, so reading it is no activity worth tracking; a larger one is
// written as fast as the upstream reads, and each read of it still resets
// the stream idle timer.
const inMemoryBodyMax = 64 << 10

// upstreamBufferedBody is the request body of an attempt for a buffered
// body: see inMemoryBodyMax.
func upstreamBufferedBody(buf []byte, idle *idleTimer) io.ReadCloser {
	if len(buf) <= inMemoryBodyMax {
		idle.touch()
		return io.NopCloser(bytes.NewReader(buf))
	}
	return io.NopCloser(&activityReader{r: bytes.NewReader(buf), idle: idle})
}

func (a *attempt) discardProc() {
	if a.proc != nil {
		a.proc.close()
	}
}

// upstreamRequestPhases runs the upstream ext_proc filter on an attempt's
// request: the headers (which the reply may change, :path included), then
// the buffered body, with Envoy's rules for mutations and content-length.
// It returns the body to send, or the response that replaces the attempt
// (the filter's immediate response, or its failure's local reply), or an
// error when the attempt ended under it (per-try timeout, request end).
func (s *requestState) upstreamRequestPhases(ctx context.Context, p *processor, h *headerMap, buf []byte, hasBody bool) ([]byte, *response, error) {
	headersSent := false
	if p.mode.reqHeaders {
		common, imm, err := p.call(ctx, p.headersRequest(*h, !hasBody, false), kindRequestHeaders)
		switch {
		case imm != nil:
			return nil, immediateReply(s, imm), nil
		case errors.Is(err, errSkip):
		case err != nil:
			return s.upstreamFilterFailed(p, err)
		default:
			headersSent = true
			if hm := common.GetHeaderMutation(); hm != nil {
				if err := applyHeaderMutation(h, hm, common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE, p.f.checker, s.log.Warn); err != nil {
					return s.upstreamFilterFailed(p, err)
				}
			}
			if common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
				p.mode.reqBody = extprocfilterv3.ProcessingMode_NONE
				if bm := common.GetBodyMutation(); bm != nil {
					h.del("content-length")
					return mutateBody(nil, bm), nil, nil
				}
			}
		}
	}
	if !p.done() && !p.f.keepContentLength && shouldRemoveContentLength(p.mode.reqBody, p.mode.reqHeaders) {
		h.del("content-length")
	}
	if !hasBody || p.done() || p.mode.reqBody == extprocfilterv3.ProcessingMode_NONE {
		return buf, nil, nil
	}
	// Every body mode sends the (already buffered) body as one message.
	common, imm, err := p.call(ctx, bodyRequest(buf, true, false), kindRequestBody)
	switch {
	case imm != nil:
		return nil, immediateReply(s, imm), nil
	case errors.Is(err, errSkip):
		return buf, nil, nil
	case err != nil:
		return s.upstreamFilterFailed(p, err)
	}
	out, err := s.applyBodyReply(p, h, common, buf, headersSent, p.mode.reqBody == extprocfilterv3.ProcessingMode_BUFFERED, false)
	if err != nil {
		return s.upstreamFilterFailed(p, err)
	}
	return out, nil, nil
}

// upstreamResponsePhases runs the upstream ext_proc filter on an attempt's
// response: the headers (mode_override may switch the body on), then, in
// BUFFERED mode, the whole body before the router sees anything, or in
// STREAMED mode chunk by chunk as the body is read downstream.
func (s *requestState) upstreamResponsePhases(ctx context.Context, p *processor, out *response) (*response, error) {
	if p.done() {
		return out, nil
	}
	headersSent := false
	if p.mode.respHeaders {
		common, imm, err := p.call(ctx, p.headersRequest(out.headers, out.noBody(), true), kindResponseHeaders)
		switch {
		case imm != nil:
			out.close()
			return immediateReply(s, imm), nil
		case errors.Is(err, errSkip):
		case err != nil:
			out.close()
			_, resp, err := s.upstreamFilterFailed(p, err)
			return resp, err
		default:
			headersSent = true
			replace := common.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE
			if hm := common.GetHeaderMutation(); hm != nil {
				if err := applyHeaderMutation(&out.headers, hm, replace, p.f.checker, s.log.Warn); err != nil {
					out.close()
					_, resp, err := s.upstreamFilterFailed(p, err)
					return resp, err
				}
			}
			if replace {
				p.mode.respBody = extprocfilterv3.ProcessingMode_NONE
				if bm := common.GetBodyMutation(); bm != nil {
					out.headers.del("content-length")
					out.replaceBody(mutateBody(nil, bm))
				}
			}
		}
	}
	if p.done() || out.noBody() {
		return out, nil
	}
	if !p.f.keepContentLength && shouldRemoveContentLength(p.mode.respBody, p.mode.respHeaders) {
		out.headers.del("content-length")
	}
	switch p.mode.respBody {
	case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
		b, over, err := readUpTo(out.reader(), s.lis.bufferLimit, out.headers.contentLength())
		if err != nil {
			out.close()
			return nil, err
		}
		if over {
			out.close()
			return localReply(apierror.Server(http.StatusInternalServerError, "response_payload_too_large", "The upstream response is too large.")), nil
		}
		common, imm, err := p.call(ctx, bodyRequest(b, true, true), kindResponseBody)
		switch {
		case imm != nil:
			out.close()
			return immediateReply(s, imm), nil
		case errors.Is(err, errSkip):
		case err != nil:
			out.close()
			_, resp, err := s.upstreamFilterFailed(p, err)
			return resp, err
		default:
			if b, err = s.applyBodyReply(p, &out.headers, common, b, headersSent, p.mode.respBody == extprocfilterv3.ProcessingMode_BUFFERED, false); err != nil {
				out.close()
				_, resp, err := s.upstreamFilterFailed(p, err)
				return resp, err
			}
		}
		// The body is read whole: release the upstream stream, keep the
		// trailers it delivered, and declare the body's exact length.
		out.close()
		out.buf, out.body = b, nil
		out.headers.set("content-length", strconv.Itoa(len(b)))
	case extprocfilterv3.ProcessingMode_STREAMED:
		out.body = &upstreamStreamed{ctx: ctx, p: p, src: out.body}
	}
	return out, nil
}

// upstreamFilterFailed is the upstream ext_proc filter's failure: with
// failure_mode_allow the attempt continues unprocessed; otherwise the
// filter's local reply (status_on_error, or 500 for a reply it cannot
// apply) becomes the attempt's response, which the router may retry like
// any other. An error means the attempt itself ended (per-try timeout,
// request end) while the filter waited.
func (s *requestState) upstreamFilterFailed(p *processor, err error) ([]byte, *response, error) {
	var f *failure
	switch {
	case errors.As(err, &f):
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return nil, nil, err
	default:
		s.log.Warn("upstream ext_proc reply rejected", "error", err)
		f = &failure{status: http.StatusInternalServerError, code: "ext_proc_error", msg: "The gateway could not process the request."}
	}
	p.close()
	return nil, localReply(apierror.Server(f.status, f.code, f.msg)), nil
}

// localReply is a reply an upstream filter sends in place of the upstream's:
// it reaches the router as the attempt's response, so the connection
// manager's local_reply_config does not rewrite it.
func localReply(e *apierror.Error) *response {
	body := e.JSON()
	h := headerMap{{hdrStatus, strconv.Itoa(e.Status)}}
	for k, v := range e.Headers() {
		h.set(k, v)
	}
	h.set("content-length", strconv.Itoa(len(body)))
	return &response{headers: h, buf: body}
}

// immediateReply is an upstream ext_proc immediate_response as the
// attempt's response: its status (200 when unset or invalid), headers and
// body.
func immediateReply(s *requestState, ir *extprocv3.ImmediateResponse) *response {
	status := 200
	if c := int(ir.GetStatus().GetCode()); c >= 200 && c <= 999 {
		status = c
	}
	h := headerMap{{hdrStatus, strconv.Itoa(status)}}
	if len(ir.GetBody()) > 0 {
		h.add("content-type", "text/plain")
	}
	if hm := ir.GetHeaders(); hm != nil {
		if err := applyHeaderMutation(&h, hm, false, permissiveChecker, s.log.Warn); err != nil {
			s.log.Warn("upstream ext_proc immediate response header mutation failed", "error", err)
		}
	}
	h.set("content-length", strconv.Itoa(len(ir.GetBody())))
	return &response{headers: h, buf: ir.GetBody()}
}

// errUpstreamImmediate is an upstream ext_proc immediate_response while the
// response body streams: the response has started downstream, so the
// stream can only be reset.
var errUpstreamImmediate = errors.New("upstream ext_proc immediate response after the response started")

// upstreamStreamed runs a STREAMED response body through the upstream
// ext_proc filter chunk by chunk as the downstream side reads it, so each
// translated chunk is forwarded as soon as its reply arrives.
type upstreamStreamed struct {
	ctx     context.Context
	p       *processor
	src     io.Reader
	buf     []byte
	pending []byte
	eos     bool
}

func (u *upstreamStreamed) Read(b []byte) (int, error) {
	for len(u.pending) == 0 {
		if u.eos {
			return 0, io.EOF
		}
		if u.buf == nil {
			u.buf = make([]byte, copyBufferSize)
		}
		n, err := u.src.Read(u.buf)
		u.eos = err == io.EOF
		if err != nil && !u.eos {
			return 0, err
		}
		chunk := u.buf[:n]
		if !u.p.done() && (n > 0 || u.eos) {
			common, imm, err := u.p.call(u.ctx, u.p.chunkRequest(chunk, u.eos, true), kindResponseBody)
			switch {
			case imm != nil:
				return 0, errUpstreamImmediate
			case errors.Is(err, errSkip):
			case err != nil:
				return 0, err
			default:
				if bm := common.GetBodyMutation(); bm != nil {
					chunk = mutateBody(chunk, bm)
				}
			}
		}
		u.pending = chunk
	}
	n := copy(b, u.pending)
	u.pending = u.pending[n:]
	return n, nil
}
