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

const (
	chatPath = "/v1/chat/completions"

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
	if p != chatPath {
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
		return immediate(&apierror.Error{Status: http.StatusMethodNotAllowed,
			Message: fmt.Sprintf("Invalid method for URL (%s %s).", clip(method), chatPath)}, "allow", http.MethodPost)
	}
	if h.GetEndOfStream() {
		return immediate(apierror.InvalidJSON()) // no body at all
	}
	st.chat = true
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

// requestBody validates a chat completion request, chooses its provider and
// rewrites it for that provider.
func (st *stream) requestBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if !st.chat {
		// Only reached if the data plane ignored the mode override.
		return requestBodyReply(nil)
	}
	req, e := parseChat(b.GetBody())
	if e != nil {
		return immediate(e)
	}
	rt := st.srv.routes.Load()
	mr, ok := rt.models[req.model]
	if !ok || !st.key.AllowsModel(mr.id) {
		return immediate(apierror.ModelNotFound(clip(req.model)))
	}
	if resp := st.admit(ctx, b.GetBody(), &req); resp != nil {
		return resp
	}
	t := st.srv.pick(mr, &st.key)
	body, err := rewriteBody(b.GetBody(), &req, t)
	if err != nil {
		st.srv.log.Error("extproc: rewriting request body", "request_id", st.requestID, "error", err)
		return immediate(errInternalBody)
	}
	st.routed, st.model, st.provider = true, mr.id, t.provider
	// The gateway asked for the usage chunk on the client's behalf; it is
	// cut out of the response again.
	st.sse.drop = req.stream && !req.includeUsage

	hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
		setHeader(catalog.RouteHeader, mr.id),
		// Envoy rejects a replaced body whose content-length disagrees.
		setHeader("content-length", strconv.Itoa(len(body))),
	}}
	if t.authorization != "" {
		hm.SetHeaders = append(hm.SetHeaders, setHeader("authorization", t.authorization))
	} else {
		hm.RemoveHeaders = []string{"authorization"}
	}
	resp := requestBodyReply(&extprocv3.CommonResponse{
		HeaderMutation: hm,
		BodyMutation:   bodyMutation(body),
		// Re-match the route on the header just set; Envoy ignores this
		// unless the same reply carries a header mutation, as this one does.
		ClearRouteCache: true,
	})
	fields := map[string]*structpb.Value{
		"key_id":   structpb.NewStringValue(st.key.LimitID()),
		"tier":     structpb.NewStringValue(st.key.Tier),
		"model":    structpb.NewStringValue(mr.id),
		"provider": structpb.NewStringValue(t.provider),
	}
	st.limitMetadata(fields)
	resp.DynamicMetadata = metadata(fields)
	st.srv.log.Debug("extproc: routed", "request_id", st.requestID, "key_id", st.key.ID, "model", mr.id, "provider", t.provider)
	return resp
}

var (
	includeUsageMember = []byte(`,"stream_options":{"include_usage":true}`)
	includeUsageObject = []byte(`{"include_usage":true}`)
)

// rewriteBody returns the body with model set to the provider's name and,
// for a stream whose client did not ask for usage, include_usage set.
//
// Validation already found where each member lies, so the edits are spliced
// into a single new body: one copy, however large the prompt. sjson edits
// the small stream_options object; running sjson.SetBytes on the whole body
// would copy all of it once per edit and rescan it to find each key.
func rewriteBody(body []byte, r *chatRequest, t *target) ([]byte, error) {
	type edit struct {
		start, end int
		repl       []byte
	}
	m := r.fields[fModel]
	edits := [2]edit{{m.start, m.end, t.modelJSON}}
	n := 1
	if r.stream && !r.includeUsage {
		so := r.fields[fStreamOptions]
		switch {
		case !so.present():
			edits[1] = edit{r.end, r.end, includeUsageMember}
		case body[so.start] == 'n': // null
			edits[1] = edit{so.start, so.end, includeUsageObject}
		default:
			// Cap the capacity so sjson can never write into the body.
			obj, err := sjson.SetBytes(body[so.start:so.end:so.end], "include_usage", true)
			if err != nil {
				return nil, fmt.Errorf("setting stream_options.include_usage: %w", err)
			}
			edits[1] = edit{so.start, so.end, obj}
		}
		n = 2
		if edits[1].start < edits[0].start {
			edits[0], edits[1] = edits[1], edits[0]
		}
	}
	size := len(body)
	for _, e := range edits[:n] {
		size += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits[:n] {
		out = append(out, body[prev:e.start]...)
		out = append(out, e.repl...)
		prev = e.end
	}
	return append(out, body[prev:]...), nil
}
