package extproc

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// responseHeaders chooses how the response body is processed. Its reply
// also carries the admission's x-ratelimit-* headers (withLimitHeaders).
func (st *stream) responseHeaders(_ context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	r := &respHeadersReply{}
	r.rh.ResponseHeaders = &r.hr
	r.resp.Response = &r.rh
	if len(st.limits.headers) > 0 {
		r.mutation() // for withLimitHeaders
	}
	if !st.routed {
		return &r.resp
	}
	var ctype, encoding string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":status":
			st.status, _ = strconv.Atoi(headerView(hv))
		case "content-type":
			ctype = headerView(hv)
		case "content-encoding":
			encoding = headerView(hv)
		}
	}
	if h.GetEndOfStream() {
		return &r.resp // no body to read
	}
	if encoding != "" && !strings.EqualFold(encoding, "identity") {
		// We removed accept-encoding, so this is a provider ignoring it;
		// a compressed body cannot be read, so let it through untouched.
		st.srv.log.Warn("extproc: compressed response, usage not recorded", "request_id", st.requestID,
			"key_id", st.key.ID, "model", st.model, "status", st.status)
		return &r.resp
	}
	media := mediaType(ctype)
	switch {
	case st.status >= 400:
		// Errors are buffered whatever their type, so one that is not
		// OpenAI-shaped (an HTML 502 page, say) can be replaced.
		st.kind = respJSON
		r.resp.ModeOverride = jsonResponseMode
	case media == "text/event-stream":
		st.kind = respSSE
		r.resp.ModeOverride = sseResponseMode
		if st.sse.drop || st.sse.model != nil {
			// Chunks may change length; a length would no longer be true.
			r.mutation().RemoveHeaders = removeContentLength
		}
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		st.kind = respJSON
		r.resp.ModeOverride = jsonResponseMode
	}
	return &r.resp
}

// The response's processing for the rest of a routed request, shared by
// replies (never modified): the body BUFFERED for JSON and errors, STREAMED
// for event streams.
var (
	jsonResponseMode    = modeOverride(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_SEND)
	sseResponseMode     = modeOverride(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_SEND)
	removeContentLength = []string{"content-length"}
)

// respHeadersReply is responseHeaders' reply, its parts allocated together:
// one allocation on every request where building them takes up to five.
// Never copied: the parts point at each other.
type respHeadersReply struct {
	resp extprocv3.ProcessingResponse
	rh   extprocv3.ProcessingResponse_ResponseHeaders
	hr   extprocv3.HeadersResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
}

// mutation returns the reply's header mutation, linking it in.
func (r *respHeadersReply) mutation() *extprocv3.HeaderMutation {
	r.hr.Response = &r.cr
	r.cr.HeaderMutation = &r.hm
	return &r.hm
}

// mediaType is a Content-Type's media type, lower case, without its
// parameters: what mime.ParseMediaType returns for a well-formed one,
// without the map of parameters it builds.
func mediaType(ctype string) string {
	media, _, _ := strings.Cut(ctype, ";")
	media = strings.TrimSpace(media)
	for i := 0; i < len(media); i++ {
		if c := media[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(media)
		}
	}
	return media
}

// responseBody handles the response body in the mode responseHeaders chose.
func (st *stream) responseBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	st.chunkReplies()
	switch st.kind {
	case respSSE:
		return st.sseChunk(ctx, b)
	case respJSON:
		return st.jsonBody(ctx, b)
	}
	return st.passChunk
}

// jsonBody reads usage from a buffered JSON response and makes sure error
// responses are OpenAI-shaped.
func (st *stream) jsonBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	body := b.GetBody()
	js := bytesString(body)
	if st.status >= 400 {
		if e := st.providerError(js); e != nil {
			st.srv.log.Info("extproc: provider error replaced", "request_id", st.requestID,
				"key_id", st.key.ID, "model", st.model, "provider", st.provider, "status", st.status)
			out := e.JSON()
			set := []*corev3.HeaderValueOption{
				setHeader("content-type", "application/json"),
				setHeader("content-length", strconv.Itoa(len(out))),
			}
			if e.Status != st.status {
				set = append(set, setHeader(":status", strconv.Itoa(e.Status)))
			}
			return responseBodyReply(&extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
				BodyMutation:   bodyMutation(out),
			})
		}
		return responseBodyReply(nil)
	}
	if u := gjson.Get(js, "usage"); u.IsObject() {
		st.setUsage(usageFrom(u))
	}
	r := &respBodyReply{}
	r.rb.ResponseBody = &r.br
	r.resp.Response = &r.rb
	st.renameModel(body, r)
	if !b.GetEndOfStream() || !st.haveUsage {
		return &r.resp
	}
	st.recordUsage(ctx)
	r.resp.DynamicMetadata = usageMetadata(st.usage, st.limits.reserved)
	st.limits.usagePublished = true
	return &r.resp
}

// respBodyReply is jsonBody's reply, its parts allocated together: one
// allocation where building them one by one takes about ten, on every
// non-streaming request. Never copied: the parts point at each other.
type respBodyReply struct {
	resp extprocv3.ProcessingResponse
	rb   extprocv3.ProcessingResponse_ResponseBody
	br   extprocv3.BodyResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
	set  [1]*corev3.HeaderValueOption
	bodyReplacement
}

// renameModel sets, in r, the mutation that makes a JSON response's
// top-level model the id the client asked for (an OpenAI-kind provider
// answers with its own name for it); none when it already is.
func (st *stream) renameModel(body []byte, r *respBodyReply) {
	want := st.sse.model
	m := gjson.Get(bytesString(body), "model")
	if want == nil || m.Type != gjson.String || m.Index <= 0 || m.Raw == string(want) {
		return
	}
	out := make([]byte, 0, len(body)-len(m.Raw)+len(want))
	out = append(append(append(out, body[:m.Index]...), want...), body[m.Index+len(m.Raw):]...)
	cl, bm := r.replace(out)
	r.set[0] = cl
	r.hm.SetHeaders = r.set[:]
	r.cr.HeaderMutation, r.cr.BodyMutation = &r.hm, bm
	r.br.Response = &r.cr
}

// providerError returns the error to send instead of a provider's error
// response, or nil to pass the provider's own through.
func (st *stream) providerError(js string) *apierror.Error {
	switch st.status {
	case http.StatusUnauthorized, http.StatusForbidden:
		// The client's key was valid (we checked it); the provider refused
		// ours. Its message is about the gateway's credential, which the
		// client must neither see nor be told is theirs.
		return apierror.Server(http.StatusBadGateway, "upstream_auth_error",
			"The gateway could not authenticate with the model provider.")
	}
	if gjson.Get(js, "error.message").Type == gjson.String {
		return nil // already OpenAI-shaped
	}
	e := &apierror.Error{Status: st.status, Code: "upstream_error",
		Message: fmt.Sprintf("The model provider returned an error (HTTP %d).", st.status)}
	if st.status >= 500 {
		e.Type = apierror.TypeServer
	}
	return e
}

// sseChunk reads one chunk of an event stream. A chunk that is forwarded
// unchanged costs no allocation.
func (st *stream) sseChunk(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	out, replace := st.sse.chunk(b.GetBody(), b.GetEndOfStream())
	resp := st.passChunk
	if replace {
		st.editBody.Body = out
		resp = st.editChunk
	}
	if !b.GetEndOfStream() {
		return st.publishUsageEarly(resp, out, replace)
	}
	if st.sse.seen {
		st.setUsage(st.sse.usage)
	}
	if !st.haveUsage {
		return resp
	}
	st.recordUsage(ctx)
	// The last reply carries metadata, so build it afresh rather than
	// touch the reused ones.
	var cr *extprocv3.CommonResponse
	if replace {
		cr = &extprocv3.CommonResponse{BodyMutation: bodyMutation(out)}
	}
	last := responseBodyReply(cr)
	last.DynamicMetadata = usageMetadata(st.usage, st.limits.reserved)
	st.limits.usagePublished = true
	return last
}

// usageFrom reads an OpenAI usage object.
func usageFrom(u gjson.Result) Usage {
	return Usage{
		PromptTokens:     u.Get("prompt_tokens").Int(),
		CompletionTokens: u.Get("completion_tokens").Int(),
		TotalTokens:      u.Get("total_tokens").Int(),
		CachedTokens:     u.Get("prompt_tokens_details.cached_tokens").Int(),
	}
}
