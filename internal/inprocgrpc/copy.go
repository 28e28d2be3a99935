package inprocgrpc

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The ext_proc messages are nearly all of this channel's traffic (every
// request makes several exchanges), and proto.Clone, which walks a message
// through reflection, was a tenth of the gateway's CPU per request. They are
// copied here field by field instead. The copy covers the fields the gateway
// sends; a message using any other (immediate responses, trailers, typed
// metadata, attributes, unknown fields) is cloned by proto.Clone, whole.
//
// copiedFields lists, per message, every field the code below reads. At
// start-up each message's descriptor is checked against it: should a newer
// go-control-plane add a field, fastCopy turns off and every message is
// cloned by proto.Clone, rather than copied without it.
var copiedFields = map[protoreflect.FullName][]protoreflect.Name{
	"envoy.service.ext_proc.v3.ProcessingRequest": {"request_headers", "response_headers", "request_body", "response_body",
		"request_trailers", "response_trailers", "metadata_context", "attributes", "observability_mode", "protocol_config",
		"flow_control_init", "client_window_update"},
	"envoy.service.ext_proc.v3.HttpHeaders": {"headers", "attributes", "end_of_stream"},
	"envoy.service.ext_proc.v3.HttpBody": {"body", "end_of_stream", "end_of_stream_without_message",
		"grpc_message_compressed", "drain_complete"},
	"envoy.config.core.v3.Metadata":    {"filter_metadata", "typed_filter_metadata"},
	"envoy.config.core.v3.HeaderMap":   {"headers"},
	"envoy.config.core.v3.HeaderValue": {"key", "value", "raw_value"},
	"envoy.service.ext_proc.v3.ProcessingResponse": {"request_headers", "response_headers", "request_body", "response_body",
		"request_trailers", "response_trailers", "immediate_response", "streamed_immediate_response",
		"dynamic_metadata", "mode_override", "override_message_timeout", "typed_dynamic_metadata",
		"request_drain", "request_drain_requests", "request_drain_responses", "server_window_update"},
	"envoy.service.ext_proc.v3.HeadersResponse": {"response"},
	"envoy.service.ext_proc.v3.BodyResponse":    {"response"},
	"envoy.service.ext_proc.v3.CommonResponse":  {"status", "header_mutation", "body_mutation", "trailers", "clear_route_cache"},
	"envoy.service.ext_proc.v3.HeaderMutation":  {"set_headers", "remove_headers"},
	"envoy.service.ext_proc.v3.BodyMutation":    {"body", "clear_body", "streamed_response"},
	"envoy.config.core.v3.HeaderValueOption":    {"header", "append", "append_action", "keep_empty_value"},
	"envoy.extensions.filters.http.ext_proc.v3.ProcessingMode": {"request_header_mode", "response_header_mode",
		"request_body_mode", "response_body_mode", "request_trailer_mode", "response_trailer_mode"},
	"google.protobuf.Struct":    {"fields"},
	"google.protobuf.Value":     {"null_value", "number_value", "string_value", "bool_value", "struct_value", "list_value"},
	"google.protobuf.ListValue": {"values"},
	"google.protobuf.BoolValue": {"value"},
	"google.protobuf.Duration":  {"seconds", "nanos"},
	// The rate limit service's unary call, made twice per request.
	"envoy.service.ratelimit.v3.RateLimitRequest":                                {"domain", "descriptors", "hits_addend"},
	"envoy.extensions.common.ratelimit.v3.RateLimitDescriptor":                   {"entries", "limit", "hits_addend", "is_negative_hits"},
	"envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.Entry":             {"key", "value"},
	"envoy.extensions.common.ratelimit.v3.RateLimitDescriptor.RateLimitOverride": {"requests_per_unit", "unit", "unit_multiplier"},
	"envoy.service.ratelimit.v3.RateLimitResponse": {"overall_code", "statuses", "response_headers_to_add",
		"request_headers_to_add", "raw_body", "dynamic_metadata", "quota"},
	"envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus": {"code", "current_limit", "limit_remaining",
		"duration_until_reset", "quota"},
	"envoy.service.ratelimit.v3.RateLimitResponse.RateLimit": {"name", "requests_per_unit", "unit", "unit_multiplier"},
	"google.protobuf.UInt64Value":                            {"value"},
}

// fastCopy: every message copiedFields names has exactly the fields the
// copy knows.
var fastCopy = coversAll(copiedFields, []proto.Message{
	&extprocv3.ProcessingRequest{}, &extprocv3.HttpHeaders{}, &extprocv3.HttpBody{}, &corev3.Metadata{}, &corev3.HeaderMap{},
	&corev3.HeaderValue{}, &extprocv3.ProcessingResponse{}, &extprocv3.HeadersResponse{}, &extprocv3.BodyResponse{},
	&extprocv3.CommonResponse{}, &extprocv3.HeaderMutation{}, &extprocv3.BodyMutation{}, &corev3.HeaderValueOption{},
	&filterv3.ProcessingMode{}, &structpb.Struct{}, &structpb.Value{}, &structpb.ListValue{}, &wrapperspb.BoolValue{},
	&durationpb.Duration{}, &rlsv3.RateLimitRequest{}, &rlv3.RateLimitDescriptor{}, &rlv3.RateLimitDescriptor_Entry{},
	&rlv3.RateLimitDescriptor_RateLimitOverride{}, &rlsv3.RateLimitResponse{}, &rlsv3.RateLimitResponse_DescriptorStatus{},
	&rlsv3.RateLimitResponse_RateLimit{}, &wrapperspb.UInt64Value{},
})

func coversAll(known map[protoreflect.FullName][]protoreflect.Name, msgs []proto.Message) bool {
	if len(known) != len(msgs) {
		return false
	}
	for _, m := range msgs {
		d := m.ProtoReflect().Descriptor()
		names, ok := known[d.FullName()]
		if !ok || d.Fields().Len() != len(names) {
			return false
		}
		for _, n := range names {
			if d.Fields().ByName(n) == nil {
				return false
			}
		}
	}
	return true
}

// cloneMessage deep-copies m. The copies of body messages (every chunk of
// a streamed body is one) take their memory from a, if not nil.
func cloneMessage(m proto.Message, a *arena) proto.Message {
	if c, ok := fastClone(m, a); ok {
		return c
	}
	return proto.Clone(m)
}

// fastClone is cloneMessage's field-by-field copy; false when m is not a
// message it copies.
func fastClone(m proto.Message, a *arena) (proto.Message, bool) {
	if !fastCopy {
		return nil, false
	}
	switch v := m.(type) {
	case *extprocv3.ProcessingRequest:
		return copyProcessingRequest(v, a)
	case *extprocv3.ProcessingResponse:
		return copyProcessingResponse(v, a)
	case *rlsv3.RateLimitRequest:
		return copyRateLimitRequest(v)
	case *rlsv3.RateLimitResponse:
		return copyRateLimitResponse(v)
	}
	return nil, false
}

// moveFast moves src's fields into dst (of the same type), as moveMessage
// does through reflection; false if it does not know the type.
func moveFast(dst, src proto.Message) bool {
	if !fastCopy || hasUnknown(src) {
		return false
	}
	switch s := src.(type) {
	case *extprocv3.ProcessingRequest:
		d, ok := dst.(*extprocv3.ProcessingRequest)
		if !ok {
			return false
		}
		d.Reset()
		d.Request, d.MetadataContext, d.Attributes = s.Request, s.MetadataContext, s.Attributes
		d.ObservabilityMode, d.ProtocolConfig = s.ObservabilityMode, s.ProtocolConfig
		d.FlowControlInit, d.ClientWindowUpdate = s.FlowControlInit, s.ClientWindowUpdate
		return true
	case *extprocv3.ProcessingResponse:
		d, ok := dst.(*extprocv3.ProcessingResponse)
		if !ok {
			return false
		}
		d.Reset()
		d.Response, d.DynamicMetadata, d.ModeOverride = s.Response, s.DynamicMetadata, s.ModeOverride
		d.OverrideMessageTimeout, d.TypedDynamicMetadata = s.OverrideMessageTimeout, s.TypedDynamicMetadata
		//lint:ignore SA1019 a deep copy copies every field, deprecated ones included
		d.RequestDrain, d.RequestDrainRequests, d.RequestDrainResponses = s.RequestDrain, s.RequestDrainRequests, s.RequestDrainResponses
		d.ServerWindowUpdate = s.ServerWindowUpdate
		return true
	case *rlsv3.RateLimitRequest:
		d, ok := dst.(*rlsv3.RateLimitRequest)
		if !ok {
			return false
		}
		d.Reset()
		d.Domain, d.Descriptors, d.HitsAddend = s.Domain, s.Descriptors, s.HitsAddend
		return true
	case *rlsv3.RateLimitResponse:
		d, ok := dst.(*rlsv3.RateLimitResponse)
		if !ok {
			return false
		}
		d.Reset()
		d.OverallCode, d.Statuses, d.ResponseHeadersToAdd = s.OverallCode, s.Statuses, s.ResponseHeadersToAdd
		d.RequestHeadersToAdd, d.RawBody, d.DynamicMetadata, d.Quota = s.RequestHeadersToAdd, s.RawBody, s.DynamicMetadata, s.Quota
		return true
	}
	return false
}

func hasUnknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) > 0 }

func copyProcessingRequest(m *extprocv3.ProcessingRequest, a *arena) (*extprocv3.ProcessingRequest, bool) {
	if hasUnknown(m) || len(m.Attributes) > 0 || m.ProtocolConfig != nil ||
		m.FlowControlInit != nil || m.ClientWindowUpdate != nil {
		return nil, false
	}
	var c *extprocv3.ProcessingRequest
	var parts *bodyRequestParts
	var hparts *headersRequestParts
	switch m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestBody, *extprocv3.ProcessingRequest_ResponseBody:
		parts = a.requestParts()
		c = &parts.msg
	case *extprocv3.ProcessingRequest_RequestHeaders, *extprocv3.ProcessingRequest_ResponseHeaders:
		hparts = &headersRequestParts{}
		c = &hparts.msg
	default:
		c = &extprocv3.ProcessingRequest{}
	}
	c.ObservabilityMode = m.ObservabilityMode
	if md := m.MetadataContext; md != nil {
		// The forwarding namespaces (an upstream filter's processor
		// reads what the downstream one wrote).
		if hasUnknown(md) || len(md.TypedFilterMetadata) > 0 {
			return nil, false
		}
		c.MetadataContext = &corev3.Metadata{}
		if md.FilterMetadata != nil {
			c.MetadataContext.FilterMetadata = make(map[string]*structpb.Struct, len(md.FilterMetadata))
			for ns, st := range md.FilterMetadata {
				if st == nil {
					return nil, false
				}
				cs, ok := copyStruct(st)
				if !ok {
					return nil, false
				}
				c.MetadataContext.FilterMetadata[ns] = cs
			}
		}
	}
	ok := true
	var h *extprocv3.HttpHeaders
	switch r := m.Request.(type) {
	case nil:
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if h, ok = copyHttpHeaders(r.RequestHeaders, hparts); ok {
			hparts.rq.RequestHeaders = h
			c.Request = &hparts.rq
		}
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if h, ok = copyHttpHeaders(r.ResponseHeaders, hparts); ok {
			hparts.rs.ResponseHeaders = h
			c.Request = &hparts.rs
		}
	case *extprocv3.ProcessingRequest_RequestBody:
		parts.rq.RequestBody, ok = copyHttpBody(r.RequestBody, &parts.body, a)
		c.Request = &parts.rq
	case *extprocv3.ProcessingRequest_ResponseBody:
		parts.rs.ResponseBody, ok = copyHttpBody(r.ResponseBody, &parts.body, a)
		c.Request = &parts.rs
	default: // trailers
		return nil, false
	}
	if !ok {
		return nil, false
	}
	return c, true
}

// headersRequestParts are the parts of a headers message's copy,
// allocated together (two such messages a request).
type headersRequestParts struct {
	msg extprocv3.ProcessingRequest
	rq  extprocv3.ProcessingRequest_RequestHeaders
	rs  extprocv3.ProcessingRequest_ResponseHeaders
	hh  extprocv3.HttpHeaders
	hm  corev3.HeaderMap
}

// copyHttpHeaders copies m into p's HttpHeaders and HeaderMap.
func copyHttpHeaders(m *extprocv3.HttpHeaders, p *headersRequestParts) (*extprocv3.HttpHeaders, bool) {
	if m == nil {
		return nil, true
	}
	//lint:ignore SA1019 a deep copy copies every field, deprecated ones included
	if hasUnknown(m) || len(m.Attributes) > 0 {
		return nil, false
	}
	c := &p.hh
	c.EndOfStream = m.EndOfStream
	if m.Headers != nil {
		if !copyHeaderMap(m.Headers, &p.hm) {
			return nil, false
		}
		c.Headers = &p.hm
	}
	return c, true
}

// copyHeaderMap copies m into c, the map's header values in one block.
func copyHeaderMap(m, c *corev3.HeaderMap) bool {
	if hasUnknown(m) {
		return false
	}
	if m.Headers == nil {
		return true
	}
	vals := make([]corev3.HeaderValue, len(m.Headers))
	c.Headers = make([]*corev3.HeaderValue, len(m.Headers))
	raw := rawBlock(m.Headers)
	for i, h := range m.Headers {
		if h == nil {
			// proto.Clone would fail on this too (a nil element of a
			// repeated message field); let it.
			return false
		}
		if !copyHeaderValue(&vals[i], h, &raw) {
			return false
		}
		c.Headers[i] = &vals[i]
	}
	return true
}

// rawBlock is memory for the raw values of hs, copied by copyHeaderValue:
// one allocation for a header map rather than one per header.
func rawBlock(hs []*corev3.HeaderValue) []byte {
	n := 0
	for _, h := range hs {
		n += len(h.GetRawValue())
	}
	return make([]byte, 0, n)
}

// copyHeaderValue copies m into dst, its raw value into raw's spare
// capacity (each value capped at its length, so that appending to one
// never writes over the next).
func copyHeaderValue(dst, m *corev3.HeaderValue, raw *[]byte) bool {
	if hasUnknown(m) {
		return false
	}
	dst.Key, dst.Value = m.Key, m.Value
	if m.RawValue != nil {
		start := len(*raw)
		*raw = append(*raw, m.RawValue...)
		dst.RawValue = (*raw)[start:len(*raw):len(*raw)]
	}
	return true
}

// bodyRequestParts are the parts of a body message's copy, allocated
// together: every chunk of a streamed body is such a message.
type bodyRequestParts struct {
	msg  extprocv3.ProcessingRequest
	rq   extprocv3.ProcessingRequest_RequestBody
	rs   extprocv3.ProcessingRequest_ResponseBody
	body extprocv3.HttpBody
}

// copyHttpBody copies m into c.
func copyHttpBody(m, c *extprocv3.HttpBody, a *arena) (*extprocv3.HttpBody, bool) {
	if m == nil {
		return nil, true
	}
	if hasUnknown(m) {
		return nil, false
	}
	c.Body, c.EndOfStream, c.EndOfStreamWithoutMessage = a.copyBytes(m.Body), m.EndOfStream, m.EndOfStreamWithoutMessage
	c.GrpcMessageCompressed, c.DrainComplete = m.GrpcMessageCompressed, m.DrainComplete
	return c, true
}

func copyProcessingResponse(m *extprocv3.ProcessingResponse, a *arena) (*extprocv3.ProcessingResponse, bool) {
	if hasUnknown(m) || len(m.TypedDynamicMetadata) > 0 || m.ServerWindowUpdate != nil {
		return nil, false
	}
	var c *extprocv3.ProcessingResponse
	var parts *bodyReplyParts
	var hp *headersReplyParts
	switch m.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestBody, *extprocv3.ProcessingResponse_ResponseBody:
		parts = a.replyParts()
		c = &parts.msg
	case *extprocv3.ProcessingResponse_RequestHeaders, *extprocv3.ProcessingResponse_ResponseHeaders:
		hp = &headersReplyParts{}
		c = &hp.msg
	default:
		c = &extprocv3.ProcessingResponse{}
	}
	//lint:ignore SA1019 a deep copy copies every field, deprecated ones included
	c.RequestDrain, c.RequestDrainRequests, c.RequestDrainResponses = m.RequestDrain, m.RequestDrainRequests, m.RequestDrainResponses
	ok := true
	switch r := m.Response.(type) {
	case nil:
	case *extprocv3.ProcessingResponse_RequestHeaders:
		hp.rq.RequestHeaders, ok = copyHeadersResponse(r.RequestHeaders, hp)
		c.Response = &hp.rq
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		hp.rs.ResponseHeaders, ok = copyHeadersResponse(r.ResponseHeaders, hp)
		c.Response = &hp.rs
	case *extprocv3.ProcessingResponse_RequestBody:
		parts.rq.RequestBody, ok = copyBodyResponse(r.RequestBody, parts, a)
		c.Response = &parts.rq
	case *extprocv3.ProcessingResponse_ResponseBody:
		parts.rs.ResponseBody, ok = copyBodyResponse(r.ResponseBody, parts, a)
		c.Response = &parts.rs
	default: // trailers, immediate responses, streamed immediate responses
		return nil, false
	}
	if !ok {
		return nil, false
	}
	if m.DynamicMetadata != nil {
		s, ok := copyStruct(m.DynamicMetadata)
		if !ok {
			return nil, false
		}
		c.DynamicMetadata = s
	}
	if mo := m.ModeOverride; mo != nil {
		if hasUnknown(mo) {
			return nil, false
		}
		if hp != nil {
			c.ModeOverride = &hp.mode
		} else {
			c.ModeOverride = &filterv3.ProcessingMode{}
		}
		d := c.ModeOverride
		d.RequestHeaderMode, d.ResponseHeaderMode = mo.RequestHeaderMode, mo.ResponseHeaderMode
		d.RequestBodyMode, d.ResponseBodyMode = mo.RequestBodyMode, mo.ResponseBodyMode
		d.RequestTrailerMode, d.ResponseTrailerMode = mo.RequestTrailerMode, mo.ResponseTrailerMode
	}
	if d := m.OverrideMessageTimeout; d != nil {
		if hasUnknown(d) {
			return nil, false
		}
		c.OverrideMessageTimeout = &durationpb.Duration{Seconds: d.Seconds, Nanos: d.Nanos}
	}
	return c, true
}

func copyHeadersResponse(m *extprocv3.HeadersResponse, hp *headersReplyParts) (*extprocv3.HeadersResponse, bool) {
	if m == nil {
		return nil, true
	}
	if hasUnknown(m) {
		return nil, false
	}
	cr, ok := copyCommonResponse(m.Response, nil, nil, hp)
	hp.hr.Response = cr
	return &hp.hr, ok
}

// setCell is the memory of a header mutation's set_headers entry.
type setCell struct {
	opt corev3.HeaderValueOption
	val corev3.HeaderValue
}

// headersReplyParts are the parts of a headers reply's copy, allocated
// together: every request has two or three such replies.
type headersReplyParts struct {
	msg  extprocv3.ProcessingResponse
	rq   extprocv3.ProcessingResponse_RequestHeaders
	rs   extprocv3.ProcessingResponse_ResponseHeaders
	hr   extprocv3.HeadersResponse
	cr   extprocv3.CommonResponse
	hm   extprocv3.HeaderMutation
	mode filterv3.ProcessingMode
}

// bodyReplyParts are the parts of a body reply's copy, allocated
// together: every chunk of a streamed body has such a reply.
type bodyReplyParts struct {
	msg extprocv3.ProcessingResponse
	rq  extprocv3.ProcessingResponse_RequestBody
	rs  extprocv3.ProcessingResponse_ResponseBody
	br  extprocv3.BodyResponse
	cr  extprocv3.CommonResponse
	bm  extprocv3.BodyMutation
	b   extprocv3.BodyMutation_Body
}

func copyBodyResponse(m *extprocv3.BodyResponse, parts *bodyReplyParts, a *arena) (*extprocv3.BodyResponse, bool) {
	if m == nil {
		return nil, true
	}
	if hasUnknown(m) {
		return nil, false
	}
	cr, ok := copyCommonResponse(m.Response, parts, a, nil)
	parts.br.Response = cr
	return &parts.br, ok
}

// copyCommonResponse copies m, into a body reply's parts or a headers
// reply's hp if not nil.
func copyCommonResponse(m *extprocv3.CommonResponse, parts *bodyReplyParts, a *arena, hp *headersReplyParts) (*extprocv3.CommonResponse, bool) {
	if m == nil {
		return nil, true
	}
	if hasUnknown(m) || m.Trailers != nil {
		return nil, false
	}
	var c *extprocv3.CommonResponse
	switch {
	case parts != nil:
		c = &parts.cr
	case hp != nil:
		c = &hp.cr
	default:
		c = &extprocv3.CommonResponse{}
	}
	c.Status, c.ClearRouteCache = m.Status, m.ClearRouteCache
	if hm := m.HeaderMutation; hm != nil {
		if hasUnknown(hm) {
			return nil, false
		}
		if hp != nil {
			c.HeaderMutation = &hp.hm
		} else {
			c.HeaderMutation = &extprocv3.HeaderMutation{}
		}
		if hm.RemoveHeaders != nil {
			c.HeaderMutation.RemoveHeaders = append(make([]string, 0, len(hm.RemoveHeaders)), hm.RemoveHeaders...)
		}
		if hm.SetHeaders != nil {
			// Each option and its value in one cell, the cells in one
			// block, the values' bytes in another.
			cells := make([]setCell, len(hm.SetHeaders))
			set := make([]*corev3.HeaderValueOption, len(hm.SetHeaders))
			var raw []byte // allocated with the first header
			for i, o := range hm.SetHeaders {
				if o == nil || hasUnknown(o) {
					return nil, false
				}
				d := &cells[i].opt
				d.AppendAction, d.KeepEmptyValue = o.AppendAction, o.KeepEmptyValue
				//lint:ignore SA1019 a deep copy copies every field, deprecated ones included
				if ap := o.Append; ap != nil {
					if hasUnknown(ap) {
						return nil, false
					}
					//lint:ignore SA1019 a deep copy copies every field, deprecated ones included
					d.Append = &wrapperspb.BoolValue{Value: ap.Value}
				}
				if o.Header != nil {
					if raw == nil {
						n := 0
						for _, o := range hm.SetHeaders {
							n += len(o.GetHeader().GetRawValue())
						}
						raw = make([]byte, 0, n)
					}
					if !copyHeaderValue(&cells[i].val, o.Header, &raw) {
						return nil, false
					}
					d.Header = &cells[i].val
				}
				set[i] = d
			}
			c.HeaderMutation.SetHeaders = set
		}
	}
	if bm := m.BodyMutation; bm != nil {
		if hasUnknown(bm) {
			return nil, false
		}
		if parts != nil {
			c.BodyMutation = &parts.bm
		} else {
			c.BodyMutation = &extprocv3.BodyMutation{}
		}
		switch v := bm.Mutation.(type) {
		case nil:
		case *extprocv3.BodyMutation_Body:
			var b *extprocv3.BodyMutation_Body
			if parts != nil {
				b = &parts.b
			} else {
				b = &extprocv3.BodyMutation_Body{}
			}
			b.Body = a.copyBytes(v.Body)
			c.BodyMutation.Mutation = b
		case *extprocv3.BodyMutation_ClearBody:
			c.BodyMutation.Mutation = &extprocv3.BodyMutation_ClearBody{ClearBody: v.ClearBody}
		default: // streamed_response
			return nil, false
		}
	}
	return c, true
}

func copyStruct(m *structpb.Struct) (*structpb.Struct, bool) {
	if hasUnknown(m) {
		return nil, false
	}
	if c, ok, shaped := copyNamespaced(m); shaped {
		return c, ok
	}
	c := &structpb.Struct{}
	if m.Fields != nil {
		// The values, with their string or number kinds (nearly all of
		// the gateway's metadata), are allocated in one block.
		cells := make([]valueCell, len(m.Fields))
		c.Fields = make(map[string]*structpb.Value, len(m.Fields))
		i := 0
		for k, v := range m.Fields {
			cv, ok := copyValue(v, &cells[i])
			if !ok {
				return nil, false
			}
			c.Fields[k] = cv
			i++
		}
	}
	return c, true
}

// copyNamespaced copies a Struct of the shape dynamic metadata has, one
// field (the namespace) holding a Struct, with the namespace's Struct, its
// value and their wrapper in one allocation. shaped is false, and nothing
// is copied, when m has another shape.
func copyNamespaced(m *structpb.Struct) (c *structpb.Struct, ok, shaped bool) {
	if len(m.Fields) != 1 {
		return nil, false, false
	}
	for k, v := range m.Fields {
		sv, isStruct := v.GetKind().(*structpb.Value_StructValue)
		if !isStruct || hasUnknown(v) || sv.StructValue == nil {
			return nil, false, false
		}
		inner, ok := copyStruct(sv.StructValue)
		if !ok {
			return nil, false, true
		}
		b := &namespaceCell{}
		b.sv.StructValue = inner
		b.v.Kind = &b.sv
		b.s.Fields = map[string]*structpb.Value{k: &b.v}
		return &b.s, true, true
	}
	return nil, false, false
}

// namespaceCell is the memory of copyNamespaced's outer Struct.
type namespaceCell struct {
	s  structpb.Struct
	v  structpb.Value
	sv structpb.Value_StructValue
}

// valueCell is the memory of one Struct value and its kind, when that is a
// string or a number.
type valueCell struct {
	v   structpb.Value
	str structpb.Value_StringValue
	num structpb.Value_NumberValue
}

// copyValue copies m, into cell's memory if cell is not nil.
func copyValue(m *structpb.Value, cell *valueCell) (*structpb.Value, bool) {
	if m == nil || hasUnknown(m) {
		return nil, false
	}
	var c *structpb.Value
	if cell != nil {
		c = &cell.v
	} else {
		c = &structpb.Value{}
	}
	switch k := m.Kind.(type) {
	case nil:
	case *structpb.Value_NullValue:
		c.Kind = &structpb.Value_NullValue{NullValue: k.NullValue}
	case *structpb.Value_NumberValue:
		if cell != nil {
			cell.num.NumberValue = k.NumberValue
			c.Kind = &cell.num
		} else {
			c.Kind = &structpb.Value_NumberValue{NumberValue: k.NumberValue}
		}
	case *structpb.Value_StringValue:
		if cell != nil {
			cell.str.StringValue = k.StringValue
			c.Kind = &cell.str
		} else {
			c.Kind = &structpb.Value_StringValue{StringValue: k.StringValue}
		}
	case *structpb.Value_BoolValue:
		c.Kind = &structpb.Value_BoolValue{BoolValue: k.BoolValue}
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			return nil, false
		}
		s, ok := copyStruct(k.StructValue)
		if !ok {
			return nil, false
		}
		c.Kind = &structpb.Value_StructValue{StructValue: s}
	case *structpb.Value_ListValue:
		if k.ListValue == nil || hasUnknown(k.ListValue) {
			return nil, false
		}
		l := &structpb.ListValue{}
		if k.ListValue.Values != nil {
			l.Values = make([]*structpb.Value, len(k.ListValue.Values))
			for i, v := range k.ListValue.Values {
				if v == nil {
					return nil, false
				}
				cv, ok := copyValue(v, nil)
				if !ok {
					return nil, false
				}
				l.Values[i] = cv
			}
		}
		c.Kind = &structpb.Value_ListValue{ListValue: l}
	default:
		return nil, false
	}
	return c, true
}

// cloneBytes copies b, keeping nil and empty apart as proto.Clone does
// for proto3 bytes (it copies an empty slice as empty, not nil).
func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// arena hands out the memory of one direction's copies of body messages
// in blocks, so that a streamed body's chunks do not each cost
// allocations: a block of parts for many messages, a block of bytes for
// many bodies. Each copy gets memory of its own, never handed out again
// (the receiver may keep it as long as it likes and change it in place);
// a block is freed by the collector once no copy in it is referenced.
// Only the direction's sender uses its arena: gRPC allows one SendMsg at
// a time per stream.
//
// Blocks start at the size of one copy and double up to the maximum, so a
// stream of one body message (a non-streaming request) allocates no more
// than a plain copy would, and a long stream soon allocates once per 16
// chunks.
type arena struct {
	bytes []byte
	reqs  []bodyRequestParts
	reps  []bodyReplyParts
	// Sizes of the last blocks made.
	nbytes, nreqs, nreps int
}

// Largest block sizes: small enough that the blocks a stream holds on to
// are a few kilobytes per direction.
const (
	arenaBytes = 16 << 10
	arenaParts = 16
)

// grow is the next block's size after one of last.
func grow(last, need, limit int) int {
	return max(min(2*last, limit), need)
}

func (a *arena) requestParts() *bodyRequestParts {
	if a == nil {
		return new(bodyRequestParts)
	}
	return takePart(&a.reqs, &a.nreqs)
}

func (a *arena) replyParts() *bodyReplyParts {
	if a == nil {
		return new(bodyReplyParts)
	}
	return takePart(&a.reps, &a.nreps)
}

// takePart hands out the first of free's parts, after making a new block
// (sized from last, the previous block's size) when free is empty.
func takePart[T any](free *[]T, last *int) *T {
	if len(*free) == 0 {
		*last = grow(*last, 1, arenaParts)
		*free = make([]T, *last)
	}
	p := &(*free)[0]
	*free = (*free)[1:]
	return p
}

// copyBytes copies b. Bodies over a quarter of a block get their own
// allocation.
func (a *arena) copyBytes(b []byte) []byte {
	if a == nil || len(b) > arenaBytes/4 || b == nil {
		return cloneBytes(b)
	}
	if cap(a.bytes)-len(a.bytes) < len(b) {
		a.nbytes = grow(a.nbytes, len(b), arenaBytes)
		a.bytes = make([]byte, 0, a.nbytes)
	}
	n := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	// Capped at its length: a receiver appending to its copy gets new
	// memory rather than writing over the next copy.
	return a.bytes[n:len(a.bytes):len(a.bytes)]
}

func copyRateLimitRequest(m *rlsv3.RateLimitRequest) (*rlsv3.RateLimitRequest, bool) {
	if hasUnknown(m) {
		return nil, false
	}
	c := &rlsv3.RateLimitRequest{Domain: m.Domain, HitsAddend: m.HitsAddend}
	if m.Descriptors == nil {
		return c, true
	}
	// The descriptors with their overrides and hits, and the entries of
	// all of them, each in one block: a rate limit call's request is a
	// constant five allocations, whatever its descriptors.
	cells := make([]descriptorCell, len(m.Descriptors))
	c.Descriptors = make([]*rlv3.RateLimitDescriptor, len(m.Descriptors))
	n := 0
	for _, d := range m.Descriptors {
		n += len(d.GetEntries())
	}
	es := make([]rlv3.RateLimitDescriptor_Entry, n)
	eps := make([]*rlv3.RateLimitDescriptor_Entry, n)
	for i, d := range m.Descriptors {
		if d == nil || hasUnknown(d) {
			return nil, false
		}
		cell := &cells[i]
		cd := &cell.d
		cd.IsNegativeHits = d.IsNegativeHits
		if d.Entries != nil {
			k := len(d.Entries)
			cd.Entries = eps[:k:k]
			for j, e := range d.Entries {
				if e == nil || hasUnknown(e) {
					return nil, false
				}
				es[j].Key, es[j].Value = e.Key, e.Value
				cd.Entries[j] = &es[j]
			}
			es, eps = es[k:], eps[k:]
		}
		if l := d.Limit; l != nil {
			if hasUnknown(l) || l.UnitMultiplier != nil {
				return nil, false
			}
			cell.limit.RequestsPerUnit, cell.limit.Unit = l.RequestsPerUnit, l.Unit
			cd.Limit = &cell.limit
		}
		if h := d.HitsAddend; h != nil {
			if hasUnknown(h) {
				return nil, false
			}
			cell.hits.Value = h.Value
			cd.HitsAddend = &cell.hits
		}
		c.Descriptors[i] = cd
	}
	return c, true
}

// descriptorCell is a rate limit descriptor's copy and the messages it
// points to.
type descriptorCell struct {
	d     rlv3.RateLimitDescriptor
	limit rlv3.RateLimitDescriptor_RateLimitOverride
	hits  wrapperspb.UInt64Value
}

// statusCell is a descriptor status's copy and the messages it points to.
type statusCell struct {
	s     rlsv3.RateLimitResponse_DescriptorStatus
	limit rlsv3.RateLimitResponse_RateLimit
	reset durationpb.Duration
}

func copyRateLimitResponse(m *rlsv3.RateLimitResponse) (*rlsv3.RateLimitResponse, bool) {
	if hasUnknown(m) || len(m.ResponseHeadersToAdd) > 0 || len(m.RequestHeadersToAdd) > 0 || m.Quota != nil {
		return nil, false
	}
	c := &rlsv3.RateLimitResponse{OverallCode: m.OverallCode, RawBody: cloneBytes(m.RawBody)}
	if m.DynamicMetadata != nil {
		md, ok := copyStruct(m.DynamicMetadata)
		if !ok {
			return nil, false
		}
		c.DynamicMetadata = md
	}
	if m.Statuses == nil {
		return c, true
	}
	ss := make([]statusCell, len(m.Statuses))
	c.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(m.Statuses))
	for i, st := range m.Statuses {
		if st == nil || hasUnknown(st) || st.Quota != nil {
			return nil, false
		}
		cell := &ss[i]
		cs := &cell.s
		cs.Code, cs.LimitRemaining = st.Code, st.LimitRemaining
		if l := st.CurrentLimit; l != nil {
			if hasUnknown(l) || l.UnitMultiplier != nil {
				return nil, false
			}
			cell.limit.Name, cell.limit.RequestsPerUnit, cell.limit.Unit = l.Name, l.RequestsPerUnit, l.Unit
			cs.CurrentLimit = &cell.limit
		}
		if d := st.DurationUntilReset; d != nil {
			if hasUnknown(d) {
				return nil, false
			}
			cell.reset.Seconds, cell.reset.Nanos = d.Seconds, d.Nanos
			cs.DurationUntilReset = &cell.reset
		}
		c.Statuses[i] = cs
	}
	return c, true
}

// Copier deep-copies ext_proc requests as the channel does, for callers
// that hand them to the ext_proc server's handler by a direct call, without
// a stream (the embedded gateway's data plane): the receiver of a copy may
// keep it and change it, and the sender may reuse its message at once. The
// copies of body messages take their memory from the Copier's blocks, as a
// stream's do. A Copier serves one stream; its methods must not be called
// concurrently. The zero value is ready.
type Copier struct{ req arena }

// Request returns a deep copy of m.
func (c *Copier) Request(m *extprocv3.ProcessingRequest) *extprocv3.ProcessingRequest {
	return cloneMessage(m, &c.req).(*extprocv3.ProcessingRequest)
}
