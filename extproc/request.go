package extproc

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/sjson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// Paths extproc serves.
const (
	chatPath       = "/v1/chat/completions"
	embeddingsPath = "/v1/embeddings"
	modelsPath     = "/v1/models"

	// preparedHeader names the provider whose attempt the downstream phase
	// already prepared the body for (route, below; upstream.go). Internal:
	// a client's is removed with the other x-switchyard- headers.
	preparedHeader = catalog.InternalHeaderPrefix + "prepared"

	// lookupTimeout bounds a key lookup well inside Envoy's 10 s
	// message_timeout, so a stuck key store gives clients a retryable 503
	// from us rather than a 504 from Envoy.
	lookupTimeout = 5 * time.Second
)

var (
	errNotReady = apierror.Server(http.StatusServiceUnavailable, "service_unavailable",
		"The gateway is starting up and cannot serve requests yet. Please retry shortly.")
	errKeyStore = apierror.Server(http.StatusServiceUnavailable, "service_unavailable",
		"The gateway could not verify your API key right now. Please retry shortly.")
	errInternalBody = apierror.Server(http.StatusInternalServerError, "server_error",
		"The gateway failed to process your request.")
	errContentEncoding = &apierror.Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_content_encoding",
		Message: "Compressed request bodies are not supported: send the body uncompressed, without a Content-Encoding header (or with Content-Encoding: identity)."}
)

// requestHeaders strips internal and credential headers, authenticates the
// client and decides whether the request needs the body phase.
func (st *stream) requestHeaders(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var method, path, authz, onBehalfOf, origin, encoding string
	nAuth := 0
	// The client's authorization must never reach a provider or backend,
	// whatever the path; internal headers must never come from a client.
	var internal []string
	for _, hv := range h.GetHeaders().GetHeaders() {
		name := strings.ToLower(hv.GetKey()) // Envoy sends lower case already; no copy then
		switch {
		case name == ":method":
			method = headerView(hv)
		case name == ":path":
			path = headerView(hv)
		case name == "authorization":
			// Read in place: only authenticate reads it, within this
			// call (lookups hash it; an error message masks it).
			authz = headerView(hv)
			nAuth++
		case name == "x-request-id":
			st.requestID = headerValue(hv)
		case name == "content-encoding":
			if v := strings.TrimSpace(headerView(hv)); v != "" && !strings.EqualFold(v, "identity") {
				encoding = headerValue(hv)
			}
		case catalog.IsInternalHeader(name):
			internal = append(internal, name)
			// Read only to be honoured with the internal token
			// (authenticate); removed like every internal header.
			switch name {
			case catalog.OnBehalfOfHeader:
				onBehalfOf = headerValue(hv)
			case catalog.OriginHeader:
				origin = headerValue(hv)
			}
		}
	}
	if !st.srv.Ready() {
		return immediate(errNotReady)
	}
	k, internalCall, e := st.srv.authenticate(ctx, authz, nAuth, st.requestID, onBehalfOf, origin)
	if e != nil {
		return immediate(e)
	}
	if encoding != "" && !h.GetEndOfStream() {
		// Bodies are read as sent: a compressed one would only be reported
		// as invalid JSON, or reach a backend or provider unread.
		return immediate(errContentEncoding)
	}
	st.key = k
	if internalCall {
		st.origin = origin
	}
	st.keyMeta = st.srv.keyMetaOf(&k, st.origin)
	md := st.keyMeta.headers

	p, _, _ := strings.Cut(path, "?")
	switch {
	case isBackendPath(p):
		// Files, batches and responses: the backends serve them, for the
		// owner extproc vouches for here (docs/backends-design.md). Bodies
		// stream through unread.
		resp := newHeadersReply(removing(removeAuth, internal), md)
		resp.ModeOverride = passThroughMode
		st.srv.setCaller(resp.GetRequestHeaders().GetResponse().GetHeaderMutation(), &k)
		return resp
	case p == chatPath:
		st.op = opChat
	case p == embeddingsPath:
		st.op = opEmbeddings
	case p == modelsPath || strings.HasPrefix(p, modelsPath+"/"):
		return st.models(method, p)
	default:
		// Not ours (yet): pass it on with only the header clean-up, and
		// skip the remaining phases rather than buffer bodies we would
		// not read. The route table answers unknown paths.
		resp := newHeadersReply(removing(removeAuth, internal), md)
		resp.ModeOverride = passThroughMode
		return resp
	}
	if method != http.MethodPost {
		op := st.op
		st.op = opNone
		return immediate(&apierror.Error{Status: http.StatusMethodNotAllowed,
			Message: fmt.Sprintf("Invalid method for URL (%s %s).", clip(method), op.path())}, "allow", http.MethodPost)
	}
	if h.GetEndOfStream() {
		st.op = opNone
		return immediate(apierror.InvalidJSON()) // no body at all
	}
	// A key known to be over a per-minute limit is refused before its
	// body is read and held (overlimit.go).
	if resp := st.refuseOverLimit(); resp != nil {
		st.op = opNone
		return resp
	}
	// Providers must answer uncompressed, or usage cannot be read from the
	// response (the OpenAI SDKs send accept-encoding: gzip).
	return newHeadersReply(removing(removeAuthEncoding, internal), md)
}

// headersReply is a request headers reply that removes headers and sets
// metadata, its parts allocated together.
type headersReply struct {
	resp extprocv3.ProcessingResponse
	rh   extprocv3.ProcessingResponse_RequestHeaders
	hr   extprocv3.HeadersResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
}

func newHeadersReply(remove []string, md *structpb.Struct) *extprocv3.ProcessingResponse {
	r := &headersReply{}
	r.hm.RemoveHeaders = remove
	r.cr.HeaderMutation = &r.hm
	r.hr.Response = &r.cr
	r.rh.RequestHeaders = &r.hr
	r.resp.Response = &r.rh
	r.resp.DynamicMetadata = md
	return &r.resp
}

// passThroughMode is the mode for a request extproc does not read: no
// bodies, no response headers.
var passThroughMode = modeOverride(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_SKIP)

// Headers the request headers phase removes, shared by replies (never
// modified: removing copies before it appends).
var (
	removeAuth         = []string{"authorization"}
	removeAuthEncoding = []string{"authorization", "accept-encoding"}
)

// removing returns base and the internal headers a client sent.
func removing(base, internal []string) []string {
	if len(internal) == 0 {
		return base
	}
	return append(slices.Clip(base), internal...)
}

// keyMeta is a key's dynamic metadata, built once per key and shared by
// the replies of its requests (never modified).
type keyMeta struct {
	// What it was built from: the key's limit id, tier and TPM.
	limitID, tierName string
	tpm               int64
	keyID, tier       *structpb.Value
	// idField names keyID in the metadata ("key_id"); owner: it is also
	// named "owner" (batch lines, for the access log); origin is set for
	// backends' calls.
	idField string
	owner   bool
	origin  *structpb.Value
	// headers is the request headers reply's metadata.
	headers *structpb.Struct
	// routes holds the request body reply's metadata by *target (which
	// names the model and provider too), nRoutes counts them.
	routes  sync.Map
	nRoutes atomic.Int64
}

// Bounds on the cached metadata: past them a cache starts over.
const (
	maxKeyMeta   = 1 << 16 // keys
	maxRouteMeta = 256     // targets per key (each catalog has its own)
)

// keyMetaOf returns k's metadata for requests of origin ("" for clients).
// A batch line's metadata names the key as owner as well as key_id: batch
// lines are outside the requests per minute but draw from, and are charged
// to, the key's tokens per minute (the stream-end charge reads key_id), so
// a running batch is paced by it (docs/operations.md).
func (s *Server) keyMetaOf(k *keys.Key, origin string) *keyMeta {
	limitID := k.LimitID()
	cache := &s.keyMeta[originSlot(origin)]
	if v, ok := cache.Load(k.ID); ok {
		if m := v.(*keyMeta); m.limitID == limitID && m.tierName == k.Tier && m.tpm == k.TPM {
			return m
		}
	}
	m := &keyMeta{limitID: limitID, tierName: k.Tier, tpm: k.TPM, idField: "key_id",
		keyID: structpb.NewStringValue(limitID), tier: structpb.NewStringValue(k.Tier)}
	fields := map[string]*structpb.Value{m.idField: m.keyID, "tier": m.tier}
	if origin == catalog.OriginBatch {
		m.owner = true
		fields["owner"] = m.keyID
	}
	if origin != "" {
		m.origin = structpb.NewStringValue(origin)
		fields["origin"] = m.origin
	}
	m.headers = metadata(fields)
	if s.keyMetaN.Add(1) > maxKeyMeta {
		for i := range s.keyMeta {
			s.keyMeta[i].Clear()
		}
		s.keyMetaN.Store(0)
	}
	cache.Store(k.ID, m)
	return m
}

// originSlot is the keyMeta cache of an origin: clients, batch lines, the
// Responses service (one cache each, so a lookup builds no composite key).
func originSlot(origin string) int {
	switch origin {
	case catalog.OriginBatch:
		return 1
	case catalog.OriginResponses:
		return 2
	}
	return 0
}

// routeMetadata is the request body reply's metadata: the key's, the model
// and the first provider.
func (st *stream) routeMetadata(mr *modelRoute, t *target) *structpb.Struct {
	if st.keyMeta == nil { // no request headers phase (benchmarks)
		st.keyMeta = st.srv.keyMetaOf(&st.key, st.origin)
	}
	km := st.keyMeta
	if v, ok := km.routes.Load(t); ok {
		return v.(*structpb.Struct)
	}
	fields := map[string]*structpb.Value{km.idField: km.keyID, "tier": km.tier, "model": mr.metaID, "provider": t.provider.metaName}
	if km.owner {
		fields["owner"] = km.keyID
	}
	if km.origin != nil {
		fields["origin"] = km.origin
	}
	st.limitMetadata(fields)
	md := metadata(fields)
	if km.nRoutes.Add(1) > maxRouteMeta {
		km.routes.Clear()
		km.nRoutes.Store(0)
	}
	km.routes.Store(t, md)
	return md
}

// authenticate checks the bearer key. Errors are ready to send. A backend
// calling with the internal token acts for the owner it names
// (docs/backends-design.md): the newest active key of that owner's rotation
// chain is the request's key, and internal is true.
func (s *Server) authenticate(ctx context.Context, authz string, n int, requestID, onBehalfOf, origin string) (k keys.Key, internal bool, _ *apierror.Error) {
	authz = strings.TrimSpace(authz)
	if n == 0 || authz == "" {
		return keys.Key{}, false, apierror.InvalidAPIKey("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	scheme, token, _ := strings.Cut(authz, " ")
	token = strings.TrimSpace(token)
	if n > 1 || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return keys.Key{}, false, apierror.InvalidAPIKey("Invalid authorization header. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	var err error
	if internal = s.internalToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(s.internalToken)) == 1; internal {
		if origin != catalog.OriginBatch && origin != catalog.OriginResponses {
			s.log.Warn("extproc: internal call without a valid origin refused", "request_id", requestID)
			return keys.Key{}, true, apierror.InvalidAPIKey("Internal calls must name their origin.")
		}
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		k, err = s.keys.LookupOwner(lctx, onBehalfOf)
		cancel()
		if errors.Is(err, keys.ErrNotFound) {
			// The owner's keys were revoked or expired since the batch or
			// response started: its work stops with its access.
			return keys.Key{}, true, apierror.InvalidAPIKey("The API key that owns this request has been revoked or has expired.")
		}
	} else {
		k, err = s.lookupKey(ctx, token)
	}
	switch {
	case errors.Is(err, keys.ErrNotFound), err == nil && k.Revoked():
		return keys.Key{}, internal, incorrectKey(token)
	case err != nil:
		if ctx.Err() == nil { // not merely Envoy going away
			s.log.Warn("extproc: key lookup failed", "request_id", requestID, "error", err)
		}
		return keys.Key{}, internal, errKeyStore
	}
	return k, internal, nil
}

// cachedKeys is a KeyLookup that can answer from memory (keys.Cache).
type cachedKeys interface {
	Cached(secret string) (k keys.Key, answered bool, err error)
}

// lookupKey looks the token's key up, bounded by lookupTimeout; a key the
// lookup's cache answers for needs no timeout (nor its context's timer and
// allocations, on every request of a cached key).
func (s *Server) lookupKey(ctx context.Context, token string) (keys.Key, error) {
	if c, ok := s.keys.(cachedKeys); ok {
		if k, answered, err := c.Cached(token); answered {
			return k, err
		}
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	return s.keys.Lookup(lctx, token)
}

// isBackendPath reports whether p is served by the backends.
func isBackendPath(p string) bool {
	for _, b := range backendPaths {
		if p == b || (strings.HasPrefix(p, b) && p[len(b)] == '/') {
			return true
		}
	}
	return false
}

// backendPaths are the backends' path prefixes (controlplane routes them).
var backendPaths = [...]string{"/v1/files", "/v1/batches", "/v1/responses", "/v1/conversations", "/v1/vector_stores"}

// setCaller adds the caller headers a backend trusts to a request headers
// mutation.
func (s *Server) setCaller(hm *extprocv3.HeaderMutation, k *keys.Key) {
	hm.SetHeaders = append(hm.SetHeaders,
		setHeader(catalog.OwnerHeader, k.LimitID()),
		setHeader(catalog.KeyIDHeader, k.ID),
		setHeader(catalog.TierHeader, k.Tier),
		setHeader(catalog.TokenHeader, s.internalToken))
}

func incorrectKey(token string) *apierror.Error {
	return apierror.InvalidAPIKey(fmt.Sprintf(
		"Incorrect API key provided: %s. Ask your gateway administrator for a valid API key.", maskKey(token)))
}

// maskKey shows a user which key they sent without echoing anything that
// matters: at most the first six characters (for Switchyard keys that is the
// public "sk-sy-" prefix), and nothing at all of short or odd tokens.
func maskKey(k string) string {
	const show = 6
	if len(k) < 4*show {
		return "****"
	}
	for i := 0; i < show; i++ {
		if c := k[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return "****"
		}
	}
	return k[:show] + "****"
}

// requestBody validates the request, chooses the provider of its first
// attempt and routes it.
func (st *stream) requestBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	switch st.op {
	case opChat:
		return st.chatBody(ctx, b.GetBody())
	case opEmbeddings:
		return st.embeddingsBody(ctx, b.GetBody())
	}
	// Only reached if the data plane ignored the mode override.
	return requestBodyReply(nil)
}

// chatBody handles a chat completion request. The body goes on in OpenAI's
// format; route prepares it for the first attempt when it can, and the
// upstream phase (upstream.go) rewrites it for whichever provider any other
// attempt reaches.
func (st *stream) chatBody(ctx context.Context, body []byte) *extprocv3.ProcessingResponse {
	req, e := parseChat(body)
	if e != nil {
		return immediate(e)
	}
	rt := st.srv.routes.Load()
	mr, ok := rt.models[req.model]
	if !ok || !st.key.AllowsModel(mr.id) {
		return immediate(apierror.ModelNotFound(clip(req.model)))
	}
	if !mr.chat {
		return immediate(unsupportedModel(mr.id, opChat))
	}
	if mr.unavailable != nil {
		return immediate(mr.unavailable)
	}
	st.model, st.pricing = mr.id, mr.pricing
	prompt := estimatePromptTokens(body, &req)
	if prompt > int64(mr.contextWindow) {
		// No provider could take it: refused before it costs a rate limit
		// token or a round trip.
		return immediate(contextLengthExceeded(mr.contextWindow, prompt))
	}
	if resp := st.checkBudget(prompt); resp != nil {
		return resp
	}
	if resp := st.admit(ctx, func() int64 { return prompt }); resp != nil {
		return resp
	}
	t := chooseKeyed(mr, opChat, time.Now(), st.affinityKey(mr, body, &req))
	if t == nil {
		return immediate(unsupportedModel(mr.id, opChat))
	}
	var buf [2]edit
	edits := buf[:0]
	if ed, ok, err := includeUsageEdit(body, &req); err != nil {
		st.srv.log.Error("extproc: rewriting request body", "request_id", st.requestID, "error", err)
		return immediate(errInternalBody)
	} else if ok {
		edits = append(edits, ed)
	}
	// The gateway asked for the usage chunk on the client's behalf; it is
	// cut out of the response again.
	st.sse.drop = req.stream && !req.includeUsage
	return st.route(ctx, body, mr, t, req.fields[fModel], edits)
}

// contextLengthExceeded is OpenAI's 400 for a prompt longer than the model's
// context window, with the gateway's estimate of the prompt (see
// estimatePromptTokens) where OpenAI counts exactly.
func contextLengthExceeded(window int, prompt int64) *apierror.Error {
	return &apierror.Error{Status: http.StatusBadRequest, Code: "context_length_exceeded", Param: "messages",
		Message: fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in about %d tokens "+
			"(estimated at %d bytes of text a token). Please reduce the length of the messages.", window, prompt, bytesPerToken)}
}

// route records the routing decision and answers the request body message:
// the route headers with clear_route_cache, so the data plane re-matches
// the route onto the model's clusters, and the body if it changed.
//
// The prepared first attempt: when the first-choice provider is
// OpenAI-compatible, the body already gets that provider's upstream model
// (one more edit in the same splice) and the reply names the provider in
// preparedHeader. The upstream phase of an attempt on that provider then
// needs nothing from the body, and answers the request headers with a
// mode_override that skips the request body message (upstream.go,
// preparedAttempt): one ext_proc exchange per attempt instead of two. Any
// other attempt rewrites the model from the canonical id
// (catalog.RouteHeader), not from the body. The credential is the upstream
// phase's to set, for every attempt: the header map is shared by all
// attempts (see upstream.go), so one set here would be wrong for an attempt
// on another provider before this one.
//
// edits are the request's own changes to the body, in order of position;
// model is where the body's model value lies.
func (st *stream) route(ctx context.Context, body []byte, mr *modelRoute, t *target, model span, edits []edit) *extprocv3.ProcessingResponse {
	st.routed, st.model, st.provider = true, mr.id, t.provider.name
	// Every response names the model the client asked for.
	st.sse.model = mr.idJSON
	prepared := t.provider.kind == kindOpenAI
	if prepared && !bytes.Equal(body[model.start:model.end], t.modelJSON) {
		edits = insertEdit(edits, edit{model.start, model.end, t.modelJSON})
	}
	r := &routeReply{}
	hm := &r.hm
	hm.SetHeaders = append(r.set[:0], mr.routeHeader, t.firstHeader)
	if prepared {
		hm.SetHeaders = append(hm.SetHeaders, t.preparedHeader)
	}
	// Re-match the route on the headers just set; Envoy ignores this unless
	// the same reply carries a header mutation, as this one does.
	r.cr.HeaderMutation, r.cr.ClearRouteCache = hm, true
	if len(edits) > 0 {
		out := rewrite(body, edits, st.ownsBody)
		cl, bm := r.replace(out)
		hm.SetHeaders = append(hm.SetHeaders, cl)
		r.cr.BodyMutation = bm
	}
	r.br.Response = &r.cr
	r.rb.RequestBody = &r.br
	r.resp.Response = &r.rb
	r.resp.DynamicMetadata = st.routeMetadata(mr, t)
	resp := &r.resp
	if st.srv.log.Enabled(ctx, slog.LevelDebug) {
		st.srv.log.Debug("extproc: routed", "request_id", st.requestID, "key_id", st.key.ID, "model", mr.id,
			"first_provider", t.provider.name, "prepared", prepared)
	}
	return resp
}

// routeReply is route's reply, its parts allocated together: one
// allocation where building them one by one takes about fifteen, on every
// request. Never copied: the parts point at each other.
type routeReply struct {
	resp extprocv3.ProcessingResponse
	rb   extprocv3.ProcessingResponse_RequestBody
	br   extprocv3.BodyResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
	set  [4]*corev3.HeaderValueOption
	bodyReplacement
}

// bodyReplacement is a body reply's replaced body and the content-length
// that goes with it, allocated with the reply (routeReply, respBodyReply).
type bodyReplacement struct {
	cl       corev3.HeaderValueOption
	clValue  corev3.HeaderValue
	clDigits [20]byte
	bm       extprocv3.BodyMutation
	bodyMut  extprocv3.BodyMutation_Body
}

// replace makes out the body, and returns the content-length header to
// set with it (Envoy rejects a replaced body whose content-length
// disagrees) and the body mutation.
func (r *bodyReplacement) replace(out []byte) (*corev3.HeaderValueOption, *extprocv3.BodyMutation) {
	r.clValue.Key, r.clValue.RawValue = "content-length", strconv.AppendInt(r.clDigits[:0], int64(len(out)), 10)
	r.cl.Header, r.cl.AppendAction = &r.clValue, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
	r.bodyMut.Body = out
	r.bm.Mutation = &r.bodyMut
	return &r.cl, &r.bm
}

// unsupportedModel is the error for a model that exists but does not serve
// the endpoint, worded as OpenAI words it for a chat request to a model
// that is not a chat model.
func unsupportedModel(model string, op operation) *apierror.Error {
	what := "a chat model and thus not supported in the v1/chat/completions endpoint"
	if op == opEmbeddings {
		what = "an embeddings model and thus not supported in the v1/embeddings endpoint"
	}
	return &apierror.Error{Status: http.StatusNotFound, Code: "model_not_supported", Param: "model",
		Message: fmt.Sprintf("The model `%s` is not %s.", clip(model), what)}
}

var (
	includeUsageMember = []byte(`,"stream_options":{"include_usage":true}`)
	includeUsageObject = []byte(`{"include_usage":true}`)
)

// includeUsageEdit returns the edit that sets stream_options.include_usage
// for a stream whose client did not ask for usage, and false when the body
// needs no change.
//
// Validation already found where stream_options lies, so the edit is
// spliced into the body with the others: one copy at most, however large
// the prompt. sjson edits only the small stream_options object; running
// sjson.SetBytes on the whole body would copy all of it and rescan it to
// find the key.
func includeUsageEdit(body []byte, r *chatRequest) (edit, bool, error) {
	if !r.stream || r.includeUsage {
		return edit{}, false, nil
	}
	switch so := r.fields[fStreamOptions]; {
	case !so.present():
		return edit{r.end, r.end, includeUsageMember}, true, nil
	case body[so.start] == 'n': // null
		return edit{so.start, so.end, includeUsageObject}, true, nil
	default:
		// Cap the capacity so sjson can never write into the body.
		obj, err := sjson.SetBytes(body[so.start:so.end:so.end], "include_usage", true)
		if err != nil {
			return edit{}, false, fmt.Errorf("setting stream_options.include_usage: %w", err)
		}
		return edit{so.start, so.end, obj}, true, nil
	}
}

// edit replaces body[start:end] with repl. repl never shares memory with
// the body.
type edit struct {
	start, end int
	repl       []byte
}

// insertEdit adds e to edits, keeping them in order of position.
func insertEdit(edits []edit, e edit) []edit {
	i := len(edits)
	for i > 0 && edits[i-1].start > e.start {
		i--
	}
	return slices.Insert(edits, i, e)
}

// rewrite applies edits (in order of position, not overlapping) to body:
// in place when inPlace (the caller owns the body: it came in a gRPC
// message that nothing else holds) and the body's spare capacity takes the
// growth, otherwise into a new buffer.
//
// A gRPC message's bytes field is allocated to the size class or page
// above its length, so a large body nearly always has a few kilobytes to
// spare, and the usual edits (include_usage at the end, the model) grow it
// by tens of bytes: in place, a megabytes prompt is neither copied nor
// allocated again, and only the bytes after the first edit that changes
// the length are moved.
func rewrite(body []byte, edits []edit, inPlace bool) []byte {
	if inPlace {
		if out, ok := spliceInPlace(body, edits); ok {
			return out
		}
	}
	return splice(body, edits)
}

// splice applies edits, in order of position and not overlapping, to body
// in one new buffer.
func splice(body []byte, edits []edit) []byte {
	size := len(body)
	for _, e := range edits {
		size += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits {
		out = append(out, body[prev:e.start]...)
		out = append(out, e.repl...)
		prev = e.end
	}
	return append(out, body[prev:]...)
}

// spliceInPlace is splice within body's own array, if its capacity allows.
// The unchanged segments between edits move by the edits' growth so far:
// those moving right are moved last first and those moving left first
// first, so that no segment is overwritten before it has moved (a segment
// only ever lands beyond the segments before it and short of those after
// it); then the replacements are written between them.
func spliceInPlace(body []byte, edits []edit) ([]byte, bool) {
	size := len(body)
	for _, e := range edits {
		size += len(e.repl) - (e.end - e.start)
	}
	if size > cap(body) {
		return nil, false
	}
	out := body[:size]
	// Segment k runs from the end of edit k-1 to the start of edit k (the
	// end of the body for the last) and moves by the growth of edits
	// 0..k-1; segment 0, before the first edit, stays.
	segEnd := func(k int) int {
		if k < len(edits) {
			return edits[k].start
		}
		return len(body)
	}
	shift := size - len(body)
	for k := len(edits); k > 0; k-- {
		e := edits[k-1]
		if shift > 0 {
			copy(out[e.end+shift:], body[e.end:segEnd(k)])
		}
		shift -= len(e.repl) - (e.end - e.start)
	}
	for k := 1; k <= len(edits); k++ {
		e := edits[k-1]
		if shift += len(e.repl) - (e.end - e.start); shift < 0 {
			copy(out[e.end+shift:], body[e.end:segEnd(k)])
		}
	}
	shift = 0
	for _, e := range edits {
		copy(out[e.start+shift:], e.repl)
		shift += len(e.repl) - (e.end - e.start)
	}
	return out, true
}
