package extproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/extproc/translate"
	"github.com/switchyard-ai/switchyard/extproc/translate/anthropic"
	"github.com/switchyard-ai/switchyard/extproc/translate/gemini"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// The upstream phase: the ext_proc filter on each provider cluster
// (HttpProtocolOptions.http_filters), run once per attempt, after Envoy's
// router has chosen the provider, including on every failover retry. The
// downstream phase (request.go) decides what is asked and which provider
// to try first; this phase speaks to the provider that was actually
// reached:
//
//   - request body (BUFFERED): rewrite the canonical OpenAI body for the
//     provider's kind: OpenAI-compatible providers get their upstream model
//     name spliced in; Anthropic and Gemini ones a translated body. :path,
//     the credential headers and content-length are set to match.
//   - response headers: the time to first byte is a latency sample for the
//     latency policy (policy.go), a 429 or 503 with retry-after puts the
//     provider in cooldown, and for translated kinds the response body is
//     asked for: BUFFERED for JSON and errors, STREAMED for event streams.
//     OpenAI-compatible responses are left alone (response body NONE), so
//     the common case costs nothing here. A prepared attempt on a provider
//     that no model compares with another (provider.compared) is not sent
//     the response headers at all.
//   - response body: translated to OpenAI's format, whole or chunk by
//     chunk. The downstream phase then reads usage from OpenAI bytes
//     whichever provider answered.
//
// Envoy passes each attempt the same request header map, so changes an
// earlier attempt made are still there (issue envoyproxy/ai-gateway#1387);
// the body, by contrast, is copied afresh from the buffered original (the
// body as the downstream phase left it). So every header this phase sets is
// set on every attempt, and the credential headers of the other kinds are
// removed, so that a credential set for one provider never reaches the
// next; the canonical model id comes from catalog.RouteHeader, which only
// the downstream phase sets (the body's model may already be the upstream
// model of the prepared provider), and the operation from the body.
//
// The prepared attempt (request.go, route): when the downstream phase
// already rewrote the body for this attempt's provider (preparedHeader
// names it), the request headers reply sets the headers and skips the
// request body message with a mode_override (preparedAttempt): the body is
// sent on as it is, and the attempt costs one ext_proc exchange less. That
// relies on the header map being as the downstream phase left it (above
// all content-length, which this phase cannot compute without the body),
// so any other attempt removes preparedHeader: after it, an attempt on the
// prepared provider reads and rewrites the body like any other.

// upstreamStream is the state of one attempt.
type upstreamStream struct {
	srv          *Server
	providerName string
	requestID    string // for logs only
	// canonical is the model id in catalog.RouteHeader ("" if absent).
	canonical string
	// ownsBody: as stream.ownsBody.
	ownsBody bool

	// Set by the request body phase once the request is sent on.
	prov   *provider
	model  *modelRoute
	op     operation
	stream bool
	b64    bool
	// promptTokens estimates a Gemini embeddings request's usage, which
	// Gemini does not report.
	promptTokens int
	sent         time.Time // zero until the request is sent on
	answered     bool      // response headers arrived

	status int
	kind   respKind
	anth   *anthropic.Stream
	// anthReply says how an Anthropic attempt's reply is translated back
	// (set with its request: structured output comes back as a tool call).
	anthReply anthropic.Reply
	gem       *gemini.Stream
	out       []byte // reused translation buffer for stream chunks
	failed    bool   // a stream translation error was logged

	// Replies reused for every chunk, as in stream.
	editChunk *extprocv3.ProcessingResponse
	editBody  *extprocv3.BodyMutation_Body

	// in is the message Process receives into (server.go).
	in extprocv3.ProcessingRequest
}

func newUpstreamStream(s *Server, provider string) *upstreamStream {
	return &upstreamStream{srv: s, providerName: provider}
}

// Credential and version headers of every kind; an attempt removes those
// its provider does not use.
var vendorHeaders = [...]string{"authorization", "x-api-key", "anthropic-version", "x-goog-api-key"}

var (
	errUnknownProvider = apierror.Server(http.StatusServiceUnavailable, "provider_unavailable",
		"The gateway is applying a configuration change. Please retry shortly.")
	errBadUpstream = apierror.Server(http.StatusBadGateway, "upstream_error",
		"The model provider returned a response the gateway could not read.")
)

// handle answers one message; a panic ends only this stream, as in
// stream.handle.
func (st *upstreamStream) handle(ctx context.Context, req *extprocv3.ProcessingRequest) (resp *extprocv3.ProcessingResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			st.srv.log.Error("extproc: panic in upstream phase", "request_id", st.requestID, "provider", st.providerName,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, errInternal
		}
	}()
	switch m := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(m.RequestHeaders, req.GetMetadataContext()), nil
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(m.RequestBody), nil
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(m.ResponseHeaders), nil
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(m.ResponseBody), nil
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}}, nil
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}}, nil
	default:
		return nil, status.Errorf(codes.InvalidArgument, "extproc: unexpected message %T", m)
	}
}

// finish runs when the attempt's stream ends. An attempt that was sent but
// never answered (connect failure, reset, per-try timeout) is a failure
// sample for the latency estimate.
func (st *upstreamStream) finish(context.Context) {
	if !st.sent.IsZero() && !st.answered {
		st.prov.health.observe(st.model.firstByteTimeout)
	}
}

// requestHeaders notes what the attempt needs from the headers, removes
// every header the provider's API does not need, and answers a prepared
// attempt at once.
//
// What reaches a vendor is an allow-list (vendorAllowed): the client's
// other headers (a key in api-key, cookies, its SDK's telemetry, its Host:
// the cluster's auto_host_rewrite replaces that) and the gateway's own
// (x-switchyard-*: routing, the prepared mark) are removed here, on every
// attempt. Removed from the shared header map, the routing headers are
// gone for later attempts too, so the canonical model id comes from the
// dynamic metadata the downstream phase set (forwarded to this filter,
// metadata_options.forwarding_namespaces); the header is only a fallback.
// The prepared mark needs no such second source: an attempt after the
// first never finds it, and reads the body, as any attempt after another
// provider's must.
func (st *upstreamStream) requestHeaders(h *extprocv3.HttpHeaders, md *corev3.Metadata) *extprocv3.ProcessingResponse {
	var path, prepared string
	var prov *provider
	if rt := st.srv.routes.Load(); rt != nil {
		prov = rt.providers[st.providerName]
	}
	var remove []string
	for _, hv := range h.GetHeaders().GetHeaders() {
		key := hv.GetKey()
		switch key {
		case "x-request-id":
			st.requestID = headerValue(hv)
		case ":path":
			path = headerView(hv)
		case catalog.RouteHeader:
			st.canonical = headerValue(hv)
		case preparedHeader:
			prepared = headerView(hv)
		}
		if !vendorAllowed(prov, key) && !slices.Contains(remove, key) {
			if remove == nil {
				// Room for every header left and an OpenAI-kind
				// attempt's own removals (preparedAttempt): one
				// allocation, not one per doubling.
				n := len(h.GetHeaders().GetHeaders())
				if prov != nil {
					n += len(prov.removeOpenAI)
				}
				remove = make([]string, 0, n)
			}
			remove = append(remove, key)
		}
	}
	if v := md.GetFilterMetadata()[catalog.MetadataNamespace].GetFields()["model"].GetStringValue(); v != "" {
		st.canonical = v
	}
	if prepared != "" && prepared == st.providerName {
		if resp := st.preparedAttempt(path, remove); resp != nil {
			return resp
		}
	}
	// An attempt that was not prepared rewrites the header map
	// (content-length, :path, the credential) for its own body; removing
	// the prepared mark (above all) tells a later attempt on the prepared
	// provider not to trust the map, so it reads the body like this one.
	if len(remove) == 0 {
		return requestHeadersReply(nil)
	}
	return requestHeadersReply(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: remove}})
}

// preparedReply is preparedAttempt's reply and its parts, allocated
// together (as requestHeadersReply's, with the CommonResponse, the
// HeaderMutation and room for its three set headers): every attempt on a
// prepared provider answers one. The parts point at each other and are
// never copied.
type preparedReply struct {
	resp extprocv3.ProcessingResponse
	w    extprocv3.ProcessingResponse_RequestHeaders
	hr   extprocv3.HeadersResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
	set  [3]*corev3.HeaderValueOption
}

// vendorAllowed reports whether a request header may reach the provider:
// the pseudo-headers, what every API needs to read the body, the gateway's
// request id (for correlating with the vendor), the kind's own credential
// and version headers, which the attempt sets itself, and those the
// configuration names (forward_headers). For a provider the catalog does
// not know (yet), only the common ones.
func vendorAllowed(p *provider, name string) bool {
	if strings.HasPrefix(name, ":") {
		return true
	}
	switch name {
	case "content-type", "content-length", "accept", "x-request-id":
		return true
	}
	if p == nil {
		return false
	}
	if slices.Contains(p.forward, name) {
		return true
	}
	switch p.kind {
	case kindOpenAI:
		return name == "authorization"
	case kindAnthropic:
		return name == "x-api-key" || name == "anthropic-version"
	case kindGemini:
		return name == "x-goog-api-key"
	}
	return false
}

// preparedAttempt answers the request headers of an attempt on the provider
// the downstream phase prepared the body for: the headers an OpenAI-kind
// attempt sets, and a mode_override that sends the body on without this
// filter (request body NONE; response headers still SEND, for the latency
// sample and cooldowns, unless nothing reads them: provider.compared). It
// returns nil when the attempt cannot be answered from the headers alone (a
// catalog that no longer routes the model there, or, for a model that
// serves both operations, a path it does not know): the body message then
// comes, and requestBody rewrites it as for any attempt.
func (st *upstreamStream) preparedAttempt(path string, remove []string) *extprocv3.ProcessingResponse {
	rt := st.srv.routes.Load()
	if rt == nil {
		return nil
	}
	p, m := rt.providers[st.providerName], rt.models[st.canonical]
	if p == nil || m == nil || p.kind != kindOpenAI {
		return nil
	}
	t := m.target(p.name)
	if t == nil {
		return nil
	}
	// The operation: the model's only one (the downstream phase refused
	// the other), or else the client's path, which is as the downstream
	// phase left it (another attempt would have removed preparedHeader;
	// should a route have rewritten it, the body tells).
	path, _, _ = strings.Cut(path, "?")
	switch {
	case m.chat && !m.embeddings, m.chat && path == chatPath:
		st.op = opChat
	case m.embeddings && !m.chat, m.embeddings && path == embeddingsPath:
		st.op = opEmbeddings
	default:
		return nil
	}
	pathHeader := t.chatPathHeader
	if st.op == opEmbeddings {
		pathHeader = t.embedHeader
	}
	st.prov, st.model = p, m
	r := &preparedReply{}
	hm := &r.hm
	hm.SetHeaders, hm.RemoveHeaders = r.set[:0], p.removeOpenAI
	if len(remove) > 0 {
		// remove is this call's own (requestHeaders made it): appended
		// to in place when it has the room.
		hm.RemoveHeaders = append(remove, p.removeOpenAI...)
	}
	if p.authHeader != nil {
		hm.SetHeaders = append(hm.SetHeaders, p.authHeader)
	}
	hm.SetHeaders = append(hm.SetHeaders, pathHeader, contentTypeJSON)
	r.cr.HeaderMutation = hm
	r.hr.Response, r.w.RequestHeaders, r.resp.Response = &r.cr, &r.hr, &r.w
	resp := &r.resp
	if !p.compared {
		// Nothing reads this provider's health: no model chooses between
		// it and another. The response headers would only feed it, and an
		// OpenAI-kind response needs no translation, so this attempt's
		// stream ends with this reply.
		resp.ModeOverride = preparedModeAlone
		return resp
	}
	// The request goes to the provider as soon as this reply is applied.
	st.sent = time.Now()
	resp.ModeOverride = preparedMode
	return resp
}

var (
	// preparedMode is the prepared attempt's mode_override: the filter's
	// configured mode (upstream filter: request headers SEND, request body
	// BUFFERED, response headers SEND, response body NONE, trailers SKIP)
	// without the request body.
	preparedMode = modeOverride(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_SEND)
	// preparedModeAlone is preparedMode without the response headers, for
	// a provider whose health nothing reads (provider.compared).
	preparedModeAlone = modeOverride(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_SKIP)
	contentTypeJSON   = setHeader("content-type", "application/json")
)

// upstreamBody is what the upstream phase reads of the canonical body.
type upstreamBody struct {
	model                 span
	stream, b64           bool
	hasMessages, hasInput bool
}

// scanUpstreamBody reads the top-level members the upstream phase needs,
// in one pass without copying. The body was validated by the downstream
// phase. With view set, the same pass fills the parsed view a translator
// reads, so no translator scans the body again.
func scanUpstreamBody(body []byte, view *translate.ChatRequest) (upstreamBody, bool) {
	var u upstreamBody
	s := bytesString(body)
	start := skipSpace(s, 0)
	if start >= len(s) || s[start] != '{' {
		return u, false
	}
	for it := newIter(s, start); it.next(); {
		if view != nil {
			view.SetRaw(it.key, it.raw(), it.val)
		}
		switch it.key {
		case "model":
			u.model = span{it.val, it.end}
		case "stream":
			u.stream = it.raw() == "true"
		case "messages":
			u.hasMessages = true
		case "input":
			u.hasInput = true
		case "encoding_format":
			u.b64 = str(it.raw()) == "base64"
		}
	}
	return u, u.model.present() && body[u.model.start] == '"'
}

// requestBody rewrites the request for the provider this attempt reached.
func (st *upstreamStream) requestBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	rt := st.srv.routes.Load()
	if rt == nil {
		return immediate(errNotReady)
	}
	body := b.GetBody()
	p := rt.providers[st.providerName]
	// A translating provider's translator reads the members this scan
	// finds.
	var viewed translate.ChatRequest // on the stack: nothing keeps it
	var view *translate.ChatRequest
	if p != nil && p.kind != kindOpenAI {
		view = &viewed
	}
	ub, ok := scanUpstreamBody(body, view)
	if !ok || (!ub.hasMessages && !ub.hasInput) {
		st.srv.log.Error("extproc: upstream phase got a body that is not a routed request", "request_id", st.requestID,
			"provider", st.providerName)
		return immediate(errInternalBody)
	}
	// The canonical id: the body's model may be the prepared provider's
	// upstream model by now.
	modelID := st.canonical
	if modelID == "" {
		modelID = str(bytesString(body[ub.model.start:ub.model.end]))
	}
	m := rt.models[modelID]
	var t *target
	if p != nil && m != nil {
		t = m.target(p.name)
	}
	if t == nil {
		// The data plane's routes and this catalog disagree: one of them
		// is a version behind. A 503 lets the router fail over.
		st.srv.log.Warn("extproc: upstream phase for a provider the catalog does not route this model to",
			"request_id", st.requestID, "provider", st.providerName, "model", clip(modelID))
		return immediate(errUnknownProvider)
	}
	st.op = opChat
	if !ub.hasMessages {
		st.op = opEmbeddings
	}
	if !p.kind.serves(st.op) {
		st.srv.log.Error("extproc: provider cannot serve the operation", "request_id", st.requestID,
			"provider", p.name, "kind", p.kind.String(), "model", m.id)
		return immediate(apierror.Server(http.StatusBadGateway, "provider_unsupported_operation",
			"The model's provider cannot serve this endpoint."))
	}
	st.prov, st.model, st.stream, st.b64 = p, m, ub.stream, ub.b64

	hm := &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 0, 6)}
	out, path, unchanged, err := st.providerRequest(body, ub, view, t, hm)
	if err != nil {
		if e, ok := errors.AsType[*apierror.Error](err); ok {
			// A parameter the provider cannot honour: the client's to fix.
			return immediate(e)
		}
		st.srv.log.Error("extproc: translating request", "request_id", st.requestID, "provider", p.name, "error", err)
		return immediate(errInternalBody)
	}
	for _, name := range vendorHeaders {
		if !hasHeader(hm.SetHeaders, name) {
			hm.RemoveHeaders = append(hm.RemoveHeaders, name)
		}
	}
	hm.SetHeaders = append(hm.SetHeaders,
		setHeader(":path", path),
		setHeader("content-length", strconv.Itoa(len(out))))
	if !hasHeader(hm.SetHeaders, "content-type") {
		hm.SetHeaders = append(hm.SetHeaders, setHeader("content-type", "application/json"))
	}
	st.sent = time.Now()
	cr := &extprocv3.CommonResponse{HeaderMutation: hm}
	if !unchanged {
		cr.BodyMutation = bodyMutation(out)
	}
	return requestBodyReply(cr)
}

// providerRequest is the body and path for the provider this attempt
// reached (st.prov, with target t), and the headers it needs added to hm:
// the canonical body with the provider's model spliced in (unchanged when
// it already names it), or the vendor translation of the parsed view.
func (st *upstreamStream) providerRequest(body []byte, ub upstreamBody, view *translate.ChatRequest, t *target,
	hm *extprocv3.HeaderMutation) (out []byte, path string, unchanged bool, err error) {
	p, m := st.prov, st.model
	switch p.kind {
	case kindOpenAI:
		// The path is the provider's alone: a query string the client sent
		// is not carried over (on a retry :path is an earlier attempt's
		// anyway), so nothing a client adds to the URL reaches a provider.
		// Unchanged (a retry on the prepared provider, a model that has
		// the same name upstream), the body need not travel back.
		unchanged = bytes.Equal(body[ub.model.start:ub.model.end], t.modelJSON)
		out = body
		if !unchanged {
			out = rewrite(body, []edit{{ub.model.start, ub.model.end, t.modelJSON}}, st.ownsBody)
		}
		path = t.chatPath
		if st.op == opEmbeddings {
			path = t.embedPath
		}
		if p.authHeader != nil {
			hm.SetHeaders = append(hm.SetHeaders, p.authHeader)
		}
	case kindAnthropic:
		out, st.anthReply, err = anthropic.TranslateChatReply(view, len(body), t.upstreamModel, m.anthropicOpts)
		path = t.chatPath
		if st.stream {
			path = t.streamPath
		}
		for _, h := range anthropic.Headers(p.credential) {
			if h.Value != "" {
				hm.SetHeaders = append(hm.SetHeaders, setHeader(h.Name, h.Value))
			}
		}
	case kindGemini:
		if st.op == opEmbeddings {
			out, err = gemini.TranslateEmbeddingRequest(body, t.upstreamModel)
			st.promptTokens = gemini.EstimateEmbeddingTokens(body)
			path = t.embedPath
		} else {
			out, err = gemini.TranslateChat(view, len(body), gemini.Options{DropUnsupported: m.dropUnsupported})
			path = t.chatPath
			if st.stream {
				path = t.streamPath
			}
		}
		for _, h := range gemini.Headers(p.credential) {
			if h.Value != "" {
				hm.SetHeaders = append(hm.SetHeaders, setHeader(h.Name, h.Value))
			}
		}
	}
	return out, path, unchanged, err
}

func hasHeader(set []*corev3.HeaderValueOption, name string) bool {
	for _, h := range set {
		if h.GetHeader().GetKey() == name {
			return true
		}
	}
	return false
}

// responseHeaders learns from the answer and chooses how to translate it.
func (st *upstreamStream) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if st.sent.IsZero() {
		return responseHeadersReply(nil)
	}
	now := time.Now()
	st.answered = true
	var ctype, encoding, after, afterMS string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":status":
			st.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			ctype = headerValue(hv)
		case "content-encoding":
			encoding = headerValue(hv)
		case "retry-after":
			after = headerValue(hv)
		case "retry-after-ms":
			afterMS = headerValue(hv)
		}
	}
	health := st.prov.health
	if st.status >= 500 || st.status == http.StatusTooManyRequests {
		health.observe(st.model.firstByteTimeout)
	} else {
		health.observe(now.Sub(st.sent))
	}
	if st.status == http.StatusTooManyRequests || st.status == http.StatusServiceUnavailable {
		d, ok := retryAfter(afterMS, true, now)
		if !ok {
			d, ok = retryAfter(after, false, now)
		}
		if ok {
			health.coolDown(now, d)
			st.srv.log.Info("extproc: provider cooling down", "request_id", st.requestID, "provider", st.prov.name,
				"status", st.status, "for", d)
		}
	}
	if st.prov.kind == kindOpenAI || h.GetEndOfStream() {
		return responseHeadersReply(nil)
	}
	if encoding != "" && !strings.EqualFold(encoding, "identity") {
		// The downstream phase removed accept-encoding; a provider that
		// compresses anyway cannot be translated.
		st.srv.log.Error("extproc: compressed response from a translated provider", "request_id", st.requestID,
			"provider", st.prov.name, "status", st.status)
		return responseHeadersReply(nil)
	}
	media, _, _ := mime.ParseMediaType(ctype)
	cr := &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
		// The body changes size; the body reply sets the new length of a
		// buffered one, and a stream has none.
		RemoveHeaders: []string{"content-length"},
	}}
	mode := filterv3.ProcessingMode_BUFFERED
	if st.status < 400 && media == "text/event-stream" && st.op == opChat {
		st.kind = respSSE
		mode = filterv3.ProcessingMode_STREAMED
		if st.prov.kind == kindAnthropic {
			st.anth = st.anthReply.NewStream(st.model.id)
		} else {
			st.gem = gemini.NewStream(st.model.id)
		}
		st.editBody = &extprocv3.BodyMutation_Body{}
		st.editChunk = responseBodyReply(&extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: st.editBody},
		})
		cr.HeaderMutation.SetHeaders = []*corev3.HeaderValueOption{setHeader("content-type", "text/event-stream")}
	} else {
		st.kind = respJSON
		cr.HeaderMutation.SetHeaders = []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	}
	resp := responseHeadersReply(cr)
	resp.ModeOverride = modeOverride(filterv3.ProcessingMode_BUFFERED, mode, filterv3.ProcessingMode_SEND)
	return resp
}

// responseBody translates the answer to OpenAI's format.
func (st *upstreamStream) responseBody(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	switch st.kind {
	case respSSE:
		var err error
		if st.anth != nil {
			st.out, err = st.anth.Translate(st.out[:0], b.GetBody(), b.GetEndOfStream())
		} else {
			st.out, err = st.gem.Translate(st.out[:0], b.GetBody(), b.GetEndOfStream())
		}
		if err != nil && !st.failed {
			// The translator has already put an error event in out.
			st.failed = true
			st.srv.log.Warn("extproc: provider stream could not be translated", "request_id", st.requestID,
				"provider", st.prov.name, "error", err)
		}
		st.editBody.Body = st.out
		return st.editChunk
	case respJSON:
		return st.jsonBody(b.GetBody())
	}
	return responseBodyReply(nil)
}

// jsonBody translates a buffered answer, success or error.
func (st *upstreamStream) jsonBody(body []byte) *extprocv3.ProcessingResponse {
	var out []byte
	var err error
	switch {
	case st.op == opEmbeddings:
		out, err = gemini.TranslateEmbeddingResponse(st.status, body, st.model.id, st.b64, st.promptTokens)
	case st.prov.kind == kindAnthropic:
		out, err = st.anthReply.Translate(st.status, body, st.model.id)
	default:
		out, err = gemini.TranslateResponse(st.status, body, st.model.id)
	}
	code := st.status
	var set []*corev3.HeaderValueOption
	if err != nil {
		e, ok := errors.AsType[*apierror.Error](err)
		if !ok {
			e = errBadUpstream
		}
		if out == nil || !ok {
			out = e.JSON()
		}
		if st.status < 400 {
			st.srv.log.Warn("extproc: provider response could not be translated", "request_id", st.requestID,
				"provider", st.prov.name, "status", st.status, "error", err)
		}
		code = e.Status
		if e.RetryAfter > 0 {
			set = append(set, setHeader("retry-after", strconv.Itoa(e.RetryAfter)))
		}
	}
	set = append(set, setHeader("content-length", strconv.Itoa(len(out))))
	if code != st.status {
		set = append(set, setHeader(":status", strconv.Itoa(code)))
	}
	return responseBodyReply(&extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
		BodyMutation:   bodyMutation(out),
	})
}
