package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/sse"
)

// response is what the router hands back to the filter chain: an upstream
// response or a local reply.
type response struct {
	headers headerMap // with :status
	buf     []byte    // the whole body, when known up front
	body    io.Reader // the streaming body otherwise
	closer  io.Closer // the upstream's body, released by close
	// trailerOf is the upstream response whose trailers (known once its
	// body has been read) go downstream after the body; nil: none.
	trailerOf *http.Response
}

func (r *response) noBody() bool { return len(r.buf) == 0 && r.body == nil }

func (r *response) reader() io.Reader {
	if r.body != nil {
		return r.body
	}
	return bytes.NewReader(r.buf)
}

func (r *response) close() {
	if r.closer != nil {
		_ = r.closer.Close()
		r.closer = nil
	}
}

func (r *response) replaceBody(b []byte) {
	r.close()
	r.buf, r.body, r.trailerOf = b, nil, nil
}

// encode runs the response through the ext_proc filter and writes it.
func (s *requestState) encode(resp *response) {
	defer resp.close()
	p := s.proc
	if p == nil || p.done() {
		s.writeResponse(resp)
		return
	}
	ctx := s.r.Context()
	headersSent := false
	if p.mode.respHeaders {
		common, imm, err := p.call(ctx, p.headersRequest(resp.headers, resp.noBody(), true), kindResponseHeaders)
		switch {
		case imm != nil:
			s.sendImmediate(imm)
			return
		case errors.Is(err, errSkip):
		case err != nil:
			s.processingFailed(err)
			return
		default:
			headersSent = true
			body, replaced, err := s.applyHeadersReply(p, &resp.headers, common, false)
			if err != nil {
				s.processingFailed(err)
				return
			}
			if replaced {
				resp.replaceBody(body)
			}
		}
	}
	if !p.done() && !p.f.keepContentLength && shouldRemoveContentLength(p.mode.respBody, p.mode.respHeaders) {
		resp.headers.del("content-length")
	}
	if resp.noBody() || p.done() {
		s.writeResponse(resp)
		return
	}
	switch p.mode.respBody {
	case extprocfilterv3.ProcessingMode_BUFFERED, extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL:
		s.encodeBuffered(p, resp, headersSent, p.mode.respBody == extprocfilterv3.ProcessingMode_BUFFERED_PARTIAL)
	case extprocfilterv3.ProcessingMode_STREAMED:
		s.encodeStreamed(p, resp)
	default:
		s.writeResponse(resp)
	}
}

// encodeBuffered holds the response headers until the processor has seen
// the whole body (or, for BUFFERED_PARTIAL, the first limit bytes).
func (s *requestState) encodeBuffered(p *processor, resp *response, headersSent, partial bool) {
	limit := s.lis.bufferLimit
	src := resp.reader()
	buf, over, err := readUpTo(src, limit, resp.headers.contentLength())
	if err != nil {
		s.upstreamBodyFailed(err)
		return
	}
	if over && !partial {
		s.sendLocal(apierror.Server(http.StatusInternalServerError, "response_payload_too_large", "The upstream response is too large."), "response_payload_too_large")
		return
	}
	chunk, rest := buf, io.Reader(nil)
	if over {
		chunk, rest = buf[:limit], io.MultiReader(bytes.NewReader(buf[limit:]), src)
	}
	common, imm, err := p.call(s.r.Context(), bodyRequest(chunk, !over, true), kindResponseBody)
	switch {
	case imm != nil:
		s.sendImmediate(imm)
		return
	case errors.Is(err, errSkip):
	case err != nil:
		s.processingFailed(err)
		return
	default:
		if chunk, err = s.applyBodyReply(p, &resp.headers, common, chunk, headersSent, !partial, false); err != nil {
			s.processingFailed(err)
			return
		}
	}
	if rest == nil {
		// The whole body is known: send its exact length.
		resp.headers.set("content-length", strconv.Itoa(len(chunk)))
		s.writeHeaders(resp.headers)
		s.writeChunk(chunk)
		s.writeTrailers(resp)
		return
	}
	s.writeHeaders(resp.headers)
	if !s.writeChunk(chunk) {
		return
	}
	s.copyBody(rest)
	s.writeTrailers(resp)
}

// encodeStreamed sends the response headers right after their reply, then
// each chunk of the body as the upstream delivers it, forwarding and
// flushing each one after its reply. An empty message carries
// end_of_stream when the last read had no data.
func (s *requestState) encodeStreamed(p *processor, resp *response) {
	s.writeHeaders(resp.headers)
	s.flush()
	src := resp.reader()
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	for {
		n, rerr := src.Read(*bufp)
		eos := rerr == io.EOF
		if rerr != nil && !eos {
			s.upstreamBodyFailed(rerr)
			return
		}
		chunk := (*bufp)[:n]
		if !p.done() && (n > 0 || eos) {
			common, imm, err := p.call(s.r.Context(), p.chunkRequest(chunk, eos, true), kindResponseBody)
			switch {
			case imm != nil:
				// Response bytes are on the wire: Envoy can only reset.
				s.reset("ext_proc_immediate_response_after_headers")
			case errors.Is(err, errSkip):
			case err != nil:
				s.processingFailed(err)
				return
			default:
				if bm := common.GetBodyMutation(); bm != nil {
					chunk = mutateBody(chunk, bm)
				}
			}
		}
		if len(chunk) > 0 && !s.writeChunk(chunk) {
			return
		}
		if eos {
			s.writeTrailers(resp)
			return
		}
	}
}

// writeResponse writes a response unprocessed, streaming its body.
func (s *requestState) writeResponse(resp *response) {
	s.writeHeaders(resp.headers)
	if resp.body == nil {
		if len(resp.buf) > 0 {
			s.writeChunk(resp.buf)
		}
		return
	}
	// The head goes out now, as Envoy forwards it, not with the first body
	// bytes: a client waiting on a slow stream sees the response start.
	s.flush()
	if s.copyBody(resp.body) {
		s.writeTrailers(resp)
	}
}

// copyBody copies src to the client, flushing after every read so
// server-sent events reach the client as the upstream sends them.
func (s *requestState) copyBody(src io.Reader) bool {
	bufp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bufp)
	for {
		n, err := src.Read(*bufp)
		if n > 0 && !s.writeChunk((*bufp)[:n]) {
			return false
		}
		if err == io.EOF {
			return true
		}
		if err != nil {
			s.upstreamBodyFailed(err)
			return false
		}
	}
}

// writeChunk writes and flushes; it reports false when the client is gone.
func (s *requestState) writeChunk(b []byte) bool {
	n, err := s.w.Write(b)
	s.bytesSent += int64(n)
	if s.eventStream {
		s.keepTail(b[:n])
	}
	if err != nil {
		s.detail = "downstream_remote_disconnect"
		return false
	}
	s.flush()
	if s.idle != nil {
		s.idle.touch()
	}
	return true
}

func (s *requestState) flush() { _ = s.rc.Flush() }

func (s *requestState) writeTrailers(resp *response) {
	if resp.trailerOf == nil {
		return
	}
	for k, vs := range resp.trailerOf.Trailer {
		s.w.Header()[http.TrailerPrefix+k] = vs
	}
}

// writeHeaders sends the response head. Pseudo-headers and hop-by-hop
// headers stay behind; the server header follows the connection manager's
// server_header_transformation.
func (s *requestState) writeHeaders(h headerMap) {
	status, err := strconv.Atoi(h.value(hdrStatus))
	if err != nil || status < 100 || status > 999 {
		status = http.StatusBadGateway
	}
	out := s.w.Header()
	h.addTo(out)
	hcm := s.lis.hcm
	switch hcm.serverTransform {
	case serverOverwrite:
		out.Set("Server", hcm.serverName)
	case serverAppendIfAbsent:
		if out.Get("Server") == "" {
			out.Set("Server", hcm.serverName)
		}
	}
	if hcm.alwaysSetRequestID && s.requestID != "" {
		out.Set("X-Request-Id", s.requestID)
	}
	s.status = status
	s.wroteHeader = true
	s.eventStream = strings.HasPrefix(strings.TrimSpace(strings.ToLower(out.Get("Content-Type"))), "text/event-stream")
	s.headersAt = time.Now()
	s.w.WriteHeader(status)
}

// localResponse is a reply generated by the router or the connection
// manager, in the OpenAI error shape, then rewritten by local_reply_config
// when the connection manager has one. It still runs through the ext_proc
// filter's response path, as Envoy's local replies do.
func (s *requestState) localResponse(e *apierror.Error, detail string) *response {
	s.detail = detail
	body := e.JSON()
	h := headerMap{{hdrStatus, strconv.Itoa(e.Status)}}
	eh := e.Headers()
	keys := make([]string, 0, len(eh))
	for k := range eh {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.add(k, eh[k])
	}
	h.add("content-length", strconv.Itoa(len(body)))
	h, body = s.mapLocalReply(h, body)
	return &response{headers: h, buf: body}
}

// directResponse answers a direct_response route: Envoy's local reply sets
// text/plain for a body, then the route's response headers apply.
func (s *requestState) directResponse(rt *route) *response {
	s.detail = "direct_response"
	h := headerMap{{hdrStatus, strconv.Itoa(rt.directStatus)}}
	if len(rt.directBody) > 0 {
		h.add("content-type", "text/plain")
	}
	s.finalizeResponseHeaders(&h, rt)
	h.set("content-length", strconv.Itoa(len(rt.directBody)))
	h, body := s.mapLocalReply(h, rt.directBody)
	return &response{headers: h, buf: body}
}

// sendLocal writes a local reply that bypasses the ext_proc filter: the
// filter's own errors. With response bytes on the wire it resets instead.
func (s *requestState) sendLocal(e *apierror.Error, detail string) {
	if s.wroteHeader {
		s.reset(detail)
	}
	s.writeResponse(s.localResponse(e, detail))
}

// sendImmediate writes an ext_proc immediate_response: its status (200 when
// unset or invalid, as in Envoy), its headers and its body.
func (s *requestState) sendImmediate(ir *extprocv3.ImmediateResponse) {
	s.detail = "ext_proc_immediate_response"
	if s.wroteHeader {
		s.reset("ext_proc_immediate_response_after_headers")
	}
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
			s.log.Warn("ext_proc immediate response header mutation failed", "error", err)
		}
	}
	h.set("content-length", strconv.Itoa(len(ir.GetBody())))
	h, body := s.mapLocalReply(h, ir.GetBody())
	s.writeResponse(&response{headers: h, buf: body})
}

// processingFailed ends the request after an ext_proc failure.
func (s *requestState) processingFailed(err error) {
	if s.r.Context().Err() != nil {
		s.detail = "downstream_remote_disconnect"
		return
	}
	var f *failure
	if !errors.As(err, &f) {
		// A reply the filter cannot apply (an invalid mutation, a
		// content-length mismatch): Envoy answers 500 and stops processing.
		s.log.Warn("ext_proc reply rejected", "error", err)
		f = &failure{status: http.StatusInternalServerError, code: "ext_proc_error", msg: "The gateway could not process the request."}
		if s.proc != nil {
			s.proc.close()
		}
	}
	s.sendLocal(apierror.Server(f.status, f.code, f.msg), f.code)
}

// upstreamBodyFailed handles a failure while reading the upstream body: a
// timeout before the response head went out is a 504; otherwise the
// downstream stream is reset, as Envoy does. Every reset is logged with its
// cause (metadata only: the error, never body bytes).
func (s *requestState) upstreamBodyFailed(err error) {
	reason := s.abortReason()
	if reason == "" {
		reason = "upstream_reset_after_response_started"
		if s.r.Context().Err() != nil {
			s.detail = "downstream_remote_disconnect"
			return
		}
		// The upstream went away mid-response: Envoy's router reports the
		// reset to outlier detection (its head already counted as an
		// answer), so a provider cutting streams is ejected.
		if c := s.upCluster; c != nil && s.upEndpoint != nil {
			c.report(s.upEndpoint, outcomeReset, c.clock(), s.log)
		}
	}
	s.log.Warn("upstream response body failed", "reason", reason, "cluster", s.cluster, "upstream_host", s.upstreamHost,
		"request_id", s.requestID, "bytes_sent", s.bytesSent, "error", err)
	if !s.wroteHeader && reason == "gateway_shutdown" {
		s.sendLocal(errShuttingDown, reason)
		return
	}
	if !s.wroteHeader && reason != "upstream_reset_after_response_started" {
		s.sendLocal(apierror.Server(http.StatusGatewayTimeout, reason, "The upstream did not respond in time."), reason)
		return
	}
	if s.wroteHeader && s.eventStream {
		s.cutEventStream(reason)
		return
	}
	s.reset(reason)
}

// errShuttingDown ends the requests a drain's grace period did not cover.
var errShuttingDown = apierror.Server(http.StatusServiceUnavailable, "gateway_shutdown",
	"The gateway is shutting down and ended this request; retry it.")

// cutEventStream ends an event stream whose upstream failed after the
// response started (stalled past the idle timeout, or went away) with an
// OpenAI error event, which the SDKs raise, and a clean end. Envoy can only
// reset the stream there, which clients see as a truncated read, if they
// notice at all. The access log keeps the status that went out, with the
// reason as response_detail and its response flag, at level ERROR.
func (s *requestState) cutEventStream(reason string) {
	s.detail = reason
	s.streamCut = true
	flag := responseFlags[reason]
	var e *apierror.Error
	switch reason {
	case "stream_idle_timeout":
		msg := "The upstream stopped sending; the response is incomplete."
		if s.idle != nil {
			msg = fmt.Sprintf("The upstream sent nothing for %v; the response is incomplete.", s.idle.d)
		}
		e = apierror.Server(http.StatusGatewayTimeout, reason, msg)
	case "gateway_shutdown":
		e = errShuttingDown
	case "upstream_reset_after_response_started":
		flag = "UC" // Envoy's upstream connection termination
		e = apierror.Server(http.StatusBadGateway, reason, "The upstream closed the connection before the response was complete.")
	default:
		e = apierror.Server(http.StatusGatewayTimeout, reason, "The upstream did not finish the response in time.")
	}
	if flag != "" && !slices.Contains(s.flags, flag) {
		s.flags = append(s.flags, flag)
	}
	buf := make([]byte, 0, 256)
	if !s.betweenEvents() {
		// Cut inside an event: end it, so the error event is one of its own.
		buf = append(buf, "\n\n"...)
	}
	s.writeChunk(sse.AppendEvent(buf, "error", e.JSON()))
}

// keepTail remembers the last bytes of an event stream written downstream.
func (s *requestState) keepTail(b []byte) {
	if len(b) >= len(s.tail) {
		copy(s.tail[:], b[len(b)-len(s.tail):])
		return
	}
	copy(s.tail[:], s.tail[len(b):])
	copy(s.tail[len(s.tail)-len(b):], b)
}

// betweenEvents reports whether what went downstream ends with a whole
// event (an empty line, in any of SSE's line endings) or is nothing yet.
func (s *requestState) betweenEvents() bool {
	if s.bytesSent == 0 {
		return true
	}
	t := string(s.tail[:])
	return strings.HasSuffix(t, "\n\n") || strings.HasSuffix(t, "\r\r") || t == "\r\n\r\n"
}
