package extproc

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// responseHeaders chooses how the response body is processed.
func (st *stream) responseHeaders(_ context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	if !st.routed {
		return responseHeadersReply(nil)
	}
	var ctype, encoding string
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":status":
			st.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			ctype = headerValue(hv)
		case "content-encoding":
			encoding = headerValue(hv)
		}
	}
	if h.GetEndOfStream() {
		return responseHeadersReply(nil) // no body to read
	}
	if encoding != "" && !strings.EqualFold(encoding, "identity") {
		// We removed accept-encoding, so this is a provider ignoring it;
		// a compressed body cannot be read, so let it through untouched.
		st.srv.log.Warn("extproc: compressed response, usage not recorded", "request_id", st.requestID,
			"key_id", st.key.ID, "model", st.model, "status", st.status)
		return responseHeadersReply(nil)
	}
	media, _, _ := mime.ParseMediaType(ctype)
	var cr *extprocv3.CommonResponse
	var mode *filterv3.ProcessingMode
	switch {
	case st.status >= 400:
		// Errors are buffered whatever their type, so one that is not
		// OpenAI-shaped (an HTML 502 page, say) can be replaced.
		st.kind = respJSON
		mode = modeOverride(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_SEND)
	case media == "text/event-stream":
		st.kind = respSSE
		mode = modeOverride(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED, filterv3.ProcessingMode_SEND)
		if st.sse.drop || st.sse.model != nil {
			// Chunks may change length; a length would no longer be true.
			cr = &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{"content-length"}}}
		}
	case media == "application/json" || strings.HasSuffix(media, "+json"):
		st.kind = respJSON
		mode = modeOverride(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_SEND)
	}
	resp := responseHeadersReply(cr)
	resp.ModeOverride = mode
	return resp
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
	cr := st.renameModel(body)
	if !b.GetEndOfStream() || !st.haveUsage {
		return responseBodyReply(cr)
	}
	st.recordUsage(ctx)
	resp := responseBodyReply(cr)
	resp.DynamicMetadata = usageMetadata(st.usage, st.limits.reserved)
	st.limits.usagePublished = true
	return resp
}

// renameModel returns the mutation that makes a JSON response's top-level
// model the id the client asked for (an OpenAI-kind provider answers with
// its own name for it), or nil when it already is.
func (st *stream) renameModel(body []byte) *extprocv3.CommonResponse {
	want := st.sse.model
	m := gjson.Get(bytesString(body), "model")
	if want == nil || m.Type != gjson.String || m.Index <= 0 || m.Raw == string(want) {
		return nil
	}
	out := make([]byte, 0, len(body)-len(m.Raw)+len(want))
	out = append(append(append(out, body[:m.Index]...), want...), body[m.Index+len(m.Raw):]...)
	return &extprocv3.CommonResponse{
		HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader("content-length", strconv.Itoa(len(out)))}},
		BodyMutation: bodyMutation(out),
	}
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
