package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/sjson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/apierror"
	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/keys"
)

// Paths extproc serves.
const (
	chatPath       = "/v1/chat/completions"
	embeddingsPath = "/v1/embeddings"
	modelsPath     = "/v1/models"

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
)

// requestHeaders strips internal and credential headers, authenticates the
// client and decides whether the request needs the body phase.
func (st *stream) requestHeaders(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	var method, path, authz string
	nAuth := 0
	// The client's authorization must never reach a provider or backend,
	// whatever the path; internal headers must never come from a client.
	remove := []string{"authorization"}
	for _, hv := range h.GetHeaders().GetHeaders() {
		name := strings.ToLower(hv.GetKey()) // Envoy sends lower case already; no copy then
		switch {
		case name == ":method":
			method = headerValue(hv)
		case name == ":path":
			path = headerValue(hv)
		case name == "authorization":
			authz = headerValue(hv)
			nAuth++
		case name == "x-request-id":
			st.requestID = headerValue(hv)
		case catalog.IsInternalHeader(name):
			remove = append(remove, name)
		}
	}
	if !st.srv.Ready() {
		return immediate(errNotReady)
	}
	k, e := st.srv.authenticate(ctx, authz, nAuth, st.requestID)
	if e != nil {
		return immediate(e)
	}
	st.key = k
	md := metadata(map[string]*structpb.Value{
		"key_id": structpb.NewStringValue(k.LimitID()),
		"tier":   structpb.NewStringValue(k.Tier),
	})

	p, _, _ := strings.Cut(path, "?")
	switch {
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
		resp := requestHeadersReply(&extprocv3.CommonResponse{
			HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: remove},
		})
		resp.ModeOverride = modeOverride(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_SKIP)
		resp.DynamicMetadata = md
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
	// Providers must answer uncompressed, or usage cannot be read from the
	// response (the OpenAI SDKs send accept-encoding: gzip).
	remove = append(remove, "accept-encoding")
	resp := requestHeadersReply(&extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: remove},
	})
	resp.DynamicMetadata = md
	return resp
}

// authenticate checks the bearer key. Errors are ready to send.
func (s *Server) authenticate(ctx context.Context, authz string, n int, requestID string) (keys.Key, *apierror.Error) {
	authz = strings.TrimSpace(authz)
	if n == 0 || authz == "" {
		return keys.Key{}, apierror.InvalidAPIKey("You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	scheme, token, _ := strings.Cut(authz, " ")
	token = strings.TrimSpace(token)
	if n > 1 || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return keys.Key{}, apierror.InvalidAPIKey("Invalid authorization header. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
	}
	lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	k, err := s.keys.Lookup(lctx, token)
	cancel()
	switch {
	case errors.Is(err, keys.ErrNotFound), err == nil && k.Revoked():
		return keys.Key{}, incorrectKey(token)
	case err != nil:
		if ctx.Err() == nil { // not merely Envoy going away
			s.log.Warn("extproc: key lookup failed", "request_id", requestID, "error", err)
		}
		return keys.Key{}, errKeyStore
	}
	return k, nil
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
// format with the client's model id: the upstream phase (upstream.go)
// rewrites it for whichever provider each attempt reaches.
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
	if resp := st.admit(ctx, func() int64 { return estimatePromptTokens(body, &req) }); resp != nil {
		return resp
	}
	t := choose(mr, opChat, time.Now())
	if t == nil {
		return immediate(unsupportedModel(mr.id, opChat))
	}
	out, err := addIncludeUsage(body, &req)
	if err != nil {
		st.srv.log.Error("extproc: rewriting request body", "request_id", st.requestID, "error", err)
		return immediate(errInternalBody)
	}
	// The gateway asked for the usage chunk on the client's behalf; it is
	// cut out of the response again.
	st.sse.drop = req.stream && !req.includeUsage
	return st.route(mr, t, out)
}

// route records the routing decision and answers the request body message:
// the route headers with clear_route_cache, so the data plane re-matches
// the route onto the model's clusters, and the body if it changed (out is
// nil when it did not).
func (st *stream) route(mr *modelRoute, t *target, out []byte) *extprocv3.ProcessingResponse {
	st.routed, st.model, st.provider = true, mr.id, t.provider.name
	hm := &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 2, 3)}
	hm.SetHeaders[0] = setHeader(catalog.RouteHeader, mr.id)
	hm.SetHeaders[1] = setHeader(catalog.FirstHeader, t.provider.name)
	cr := &extprocv3.CommonResponse{
		HeaderMutation: hm,
		// Re-match the route on the headers just set; Envoy ignores this
		// unless the same reply carries a header mutation, as this one does.
		ClearRouteCache: true,
	}
	if out != nil {
		// Envoy rejects a replaced body whose content-length disagrees.
		hm.SetHeaders = append(hm.SetHeaders, setHeader("content-length", strconv.Itoa(len(out))))
		cr.BodyMutation = bodyMutation(out)
	}
	resp := requestBodyReply(cr)
	fields := map[string]*structpb.Value{
		"key_id":   structpb.NewStringValue(st.key.LimitID()),
		"tier":     structpb.NewStringValue(st.key.Tier),
		"model":    structpb.NewStringValue(mr.id),
		"provider": structpb.NewStringValue(t.provider.name),
	}
	st.limitMetadata(fields)
	resp.DynamicMetadata = metadata(fields)
	st.srv.log.Debug("extproc: routed", "request_id", st.requestID, "key_id", st.key.ID, "model", mr.id,
		"first_provider", t.provider.name)
	return resp
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

// addIncludeUsage returns the body with stream_options.include_usage set
// for a stream whose client did not ask for usage, or nil when the body
// needs no change.
//
// Validation already found where stream_options lies, so the edit is
// spliced into a single new body: one copy, however large the prompt. sjson
// edits only the small stream_options object; running sjson.SetBytes on the
// whole body would copy all of it and rescan it to find the key.
func addIncludeUsage(body []byte, r *chatRequest) ([]byte, error) {
	if !r.stream || r.includeUsage {
		return nil, nil
	}
	var start, end int
	var repl []byte
	switch so := r.fields[fStreamOptions]; {
	case !so.present():
		start, end, repl = r.end, r.end, includeUsageMember
	case body[so.start] == 'n': // null
		start, end, repl = so.start, so.end, includeUsageObject
	default:
		// Cap the capacity so sjson can never write into the body.
		obj, err := sjson.SetBytes(body[so.start:so.end:so.end], "include_usage", true)
		if err != nil {
			return nil, fmt.Errorf("setting stream_options.include_usage: %w", err)
		}
		start, end, repl = so.start, so.end, obj
	}
	return splice(body, []edit{{start, end, repl}}), nil
}

// edit replaces body[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
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
