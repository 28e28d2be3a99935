package extproc

import (
	"slices"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// setHeader is a header_mutation entry that replaces the header.
func setHeader(name, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		// Envoy reads raw_value; only one of value and raw_value may be set.
		Header: &corev3.HeaderValue{Key: name, RawValue: []byte(value)},
		// Overwrite explicitly: newer Envoys honour append_action, older
		// ones the (unset, hence false) append flag; both then replace.
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// headerValue returns a header's value; Envoy sends raw_value, but accept
// value from data planes that still use it.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// headerView is headerValue without the copy: valid only while the message
// that holds the header is, which is until the handler returns.
func headerView(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return bytesString(h.GetRawValue())
	}
	return h.GetValue()
}

// immediate answers the client with e and ends processing. extra are
// additional header name/value pairs.
func immediate(e *apierror.Error, extra ...string) *extprocv3.ProcessingResponse {
	h := e.Headers()
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names) // deterministic replies
	set := make([]*corev3.HeaderValueOption, 0, len(names))
	for _, k := range names {
		set = append(set, setHeader(k, h[k]))
	}
	details := "switchyard_error"
	if e.Code != "" {
		details = "switchyard_" + e.Code
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocv3.ImmediateResponse{
			// Envoy answers 200 when the status is unset: always set it.
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: set},
			Body:    e.JSON(),
			Details: details, // %RESPONSE_CODE_DETAILS% in access logs
		}},
	}
}

// The reply builders allocate a reply with its oneof wrapper and its
// HeadersResponse or BodyResponse together: one allocation instead of
// three, for the four or five replies of every request. The parts point
// at each other and are never copied.

func requestHeadersReply(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	p := &struct {
		resp extprocv3.ProcessingResponse
		w    extprocv3.ProcessingResponse_RequestHeaders
		hr   extprocv3.HeadersResponse
	}{}
	p.hr.Response, p.w.RequestHeaders, p.resp.Response = cr, &p.hr, &p.w
	return &p.resp
}

func requestBodyReply(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	p := &struct {
		resp extprocv3.ProcessingResponse
		w    extprocv3.ProcessingResponse_RequestBody
		br   extprocv3.BodyResponse
	}{}
	p.br.Response, p.w.RequestBody, p.resp.Response = cr, &p.br, &p.w
	return &p.resp
}

func responseHeadersReply(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	p := &struct {
		resp extprocv3.ProcessingResponse
		w    extprocv3.ProcessingResponse_ResponseHeaders
		hr   extprocv3.HeadersResponse
	}{}
	p.hr.Response, p.w.ResponseHeaders, p.resp.Response = cr, &p.hr, &p.w
	return &p.resp
}

func responseBodyReply(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
	p := &struct {
		resp extprocv3.ProcessingResponse
		w    extprocv3.ProcessingResponse_ResponseBody
		br   extprocv3.BodyResponse
	}{}
	p.br.Response, p.w.ResponseBody, p.resp.Response = cr, &p.br, &p.w
	return &p.resp
}

// bodyMutation replaces the body (or the current chunk) with b.
func bodyMutation(b []byte) *extprocv3.BodyMutation {
	p := &struct {
		m extprocv3.BodyMutation
		b extprocv3.BodyMutation_Body
	}{}
	p.b.Body = b
	p.m.Mutation = &p.b
	return &p.m
}

// modeOverride returns the processing mode for the rest of the request with
// the given response body mode. Envoy replaces the whole mode with the
// override, so every field the filter config sets is restated.
func modeOverride(requestBody, responseBody filterv3.ProcessingMode_BodySendMode, responseHeaders filterv3.ProcessingMode_HeaderSendMode) *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestHeaderMode:   filterv3.ProcessingMode_SEND,
		RequestBodyMode:     requestBody,
		RequestTrailerMode:  filterv3.ProcessingMode_SKIP,
		ResponseHeaderMode:  responseHeaders,
		ResponseBodyMode:    responseBody,
		ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
	}
}

// metadata wraps fields in the namespace the filter is configured to accept
// (metadata_options.receiving_namespaces); Envoy drops any other.
func metadata(fields map[string]*structpb.Value) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		catalog.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: fields}),
	}}
}

// usageMetadata is the usage for the access log and the stream-end charge:
// charge_tokens is what the data plane's ratelimit filter adds to the key's
// tokens per minute, the total less what admission reserved already (a
// batch line's estimate, admitBatchLine). Every request with usage sends
// one, so its parts are allocated together (usageBlock): three allocations
// where building them one by one takes about fifteen.
func usageMetadata(u Usage, reserved int64) *structpb.Struct {
	b := &usageBlock{}
	nums := [len(b.nums)]float64{float64(u.PromptTokens), float64(u.CompletionTokens), float64(u.TotalTokens),
		float64(u.CachedTokens), float64(max(u.TotalTokens-reserved, 0))}
	fields := make(map[string]*structpb.Value, len(usageFields))
	for i, name := range usageFields {
		b.nums[i].NumberValue = nums[i]
		b.vals[i].Kind = &b.nums[i]
		fields[name] = &b.vals[i]
	}
	b.inner.Fields = fields
	b.ns.StructValue = &b.inner
	b.nsVal.Kind = &b.ns
	b.outer.Fields = map[string]*structpb.Value{catalog.MetadataNamespace: &b.nsVal}
	return &b.outer
}

// usageFields are usageMetadata's fields, in usageBlock's order.
var usageFields = [...]string{"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens", "charge_tokens"}

// usageBlock is usageMetadata's Struct and values, allocated together.
// Never copied: the parts point at each other.
type usageBlock struct {
	outer, inner structpb.Struct
	nsVal        structpb.Value
	ns           structpb.Value_StructValue
	vals         [len(usageFields)]structpb.Value
	nums         [len(usageFields)]structpb.Value_NumberValue
}

// bytesString views b as a string without copying, so gjson can read bodies
// of many megabytes in place. b must not be modified while the string (or
// any gjson result taken from it) is in use; bodies received from Envoy are
// never modified.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
