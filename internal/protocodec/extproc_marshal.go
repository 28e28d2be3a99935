package protocodec

import (
	"math"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The ext_proc server's replies carry dynamic metadata (google.protobuf.Struct:
// maps of Values), and proto.Marshal walks a map through reflection,
// allocating for each key and value it visits (about 35 allocations per
// request). responseSize and appendResponse write the replies of the
// ordinary phases by hand, field by field in proto.Marshal's order (field
// numbers, a message's oneof last), so the bytes are proto.Marshal's (a map's entries
// in whatever order Go iterates the map, as proto.Marshal's own order is
// unspecified). Anything else (immediate responses, trailers, streamed
// body mutations, typed metadata, the deprecated append BoolValue, unknown
// fields, invalid UTF-8) makes responseSize return false, and the caller
// uses proto.Marshal, which also reports any error.

// marshalByHand is false when a message the writer covers has fields it
// does not know (a newer go-control-plane or protobuf): it would leave
// them out, so then every reply goes to proto.Marshal.
var marshalByHand = fieldsAre(&extprocv3.ProcessingResponse{}, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16) &&
	fieldsAre(&extprocv3.HeadersResponse{}, 1) && fieldsAre(&extprocv3.BodyResponse{}, 1) &&
	fieldsAre(&extprocv3.CommonResponse{}, 1, 2, 3, 4, 5) && fieldsAre(&extprocv3.HeaderMutation{}, 1, 2) &&
	fieldsAre(&extprocv3.BodyMutation{}, 1, 2, 3) && fieldsAre(&corev3.HeaderValueOption{}, 1, 2, 3, 4) &&
	fieldsAre(&corev3.HeaderValue{}, 1, 2, 3) && fieldsAre(&structpb.Struct{}, 1) &&
	fieldsAre(&structpb.Value{}, 1, 2, 3, 4, 5, 6) && fieldsAre(&structpb.ListValue{}, 1)

// fieldsAre reports whether m's message has exactly the fields nums.
func fieldsAre(m proto.Message, nums ...protowire.Number) bool {
	fields := m.ProtoReflect().Descriptor().Fields()
	if fields.Len() != len(nums) {
		return false
	}
	for _, n := range nums {
		if fields.ByNumber(n) == nil {
			return false
		}
	}
	return true
}

// responseSize returns the size of m's wire form, or false when m is not
// one of the shapes appendResponse writes.
func responseSize(m *extprocv3.ProcessingResponse) (int, bool) {
	if !marshalByHand || !noUnknown(m) || m.TypedDynamicMetadata != nil || m.RequestDrainRequests ||
		m.RequestDrainResponses || m.ServerWindowUpdate != nil {
		return 0, false
	}
	//lint:ignore SA1019 a reply that sets this deprecated field goes to proto.Marshal, which writes it
	if m.RequestDrain {
		return 0, false
	}
	n := 0
	if m.Response != nil {
		num, cr, ok := responseCommon(m)
		if !ok {
			return 0, false
		}
		hs := 0
		if cr != nil {
			s, ok := commonSize(cr)
			if !ok {
				return 0, false
			}
			hs = sizeField(1, s)
		}
		n += sizeField(num, hs)
	}
	if m.DynamicMetadata != nil {
		s, ok := structSize(m.DynamicMetadata, 0)
		if !ok {
			return 0, false
		}
		n += sizeField(8, s)
	}
	if m.ModeOverride != nil {
		n += sizeField(9, proto.Size(m.ModeOverride))
	}
	if m.OverrideMessageTimeout != nil {
		n += sizeField(10, proto.Size(m.OverrideMessageTimeout))
	}
	return n, true
}

// appendResponse appends m's wire form; m was checked by responseSize.
func appendResponse(b []byte, m *extprocv3.ProcessingResponse) ([]byte, error) {
	// proto.Marshal writes the oneof after the other fields.
	if m.DynamicMetadata != nil {
		s, _ := structSize(m.DynamicMetadata, 0)
		b = appendStruct(appendTagLen(b, 8, s), m.DynamicMetadata)
	}
	var err error
	if m.ModeOverride != nil {
		b = appendTagLen(b, 9, proto.Size(m.ModeOverride))
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, m.ModeOverride); err != nil {
			return nil, err
		}
	}
	if m.OverrideMessageTimeout != nil {
		b = appendTagLen(b, 10, proto.Size(m.OverrideMessageTimeout))
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, m.OverrideMessageTimeout); err != nil {
			return nil, err
		}
	}
	if m.Response != nil {
		num, cr, _ := responseCommon(m)
		hs := 0
		if cr != nil {
			s, _ := commonSize(cr)
			hs = sizeField(1, s)
		}
		b = appendTagLen(b, num, hs)
		if cr != nil {
			s, _ := commonSize(cr)
			b = appendCommon(appendTagLen(b, 1, s), cr)
		}
	}
	return b, nil
}

// responseCommon returns the field number of m's headers or body response
// and its common response; false for other kinds of reply.
func responseCommon(m *extprocv3.ProcessingResponse) (protowire.Number, *extprocv3.CommonResponse, bool) {
	switch r := m.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		return 1, r.RequestHeaders.GetResponse(), r.RequestHeaders != nil && noUnknown(r.RequestHeaders)
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		return 2, r.ResponseHeaders.GetResponse(), r.ResponseHeaders != nil && noUnknown(r.ResponseHeaders)
	case *extprocv3.ProcessingResponse_RequestBody:
		return 3, r.RequestBody.GetResponse(), r.RequestBody != nil && noUnknown(r.RequestBody)
	case *extprocv3.ProcessingResponse_ResponseBody:
		return 4, r.ResponseBody.GetResponse(), r.ResponseBody != nil && noUnknown(r.ResponseBody)
	}
	return 0, nil, false
}

func noUnknown(m proto.Message) bool { return len(m.ProtoReflect().GetUnknown()) == 0 }

func sizeField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func appendTagLen(b []byte, num protowire.Number, n int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(n))
}

func sizeVarintField(num protowire.Number, v uint64) int {
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func commonSize(cr *extprocv3.CommonResponse) (int, bool) {
	if !noUnknown(cr) || cr.Trailers != nil {
		return 0, false
	}
	n := 0
	if cr.Status != 0 {
		n += sizeVarintField(1, uint64(int64(cr.Status)))
	}
	if hm := cr.HeaderMutation; hm != nil {
		s, ok := headerMutationSize(hm)
		if !ok {
			return 0, false
		}
		n += sizeField(2, s)
	}
	if bm := cr.BodyMutation; bm != nil {
		s, ok := bodyMutationSize(bm)
		if !ok {
			return 0, false
		}
		n += sizeField(3, s)
	}
	if cr.ClearRouteCache {
		n += sizeVarintField(5, 1)
	}
	return n, true
}

func appendCommon(b []byte, cr *extprocv3.CommonResponse) []byte {
	if cr.Status != 0 {
		b = appendVarintField(b, 1, uint64(int64(cr.Status)))
	}
	if hm := cr.HeaderMutation; hm != nil {
		s, _ := headerMutationSize(hm)
		b = appendHeaderMutation(appendTagLen(b, 2, s), hm)
	}
	if bm := cr.BodyMutation; bm != nil {
		s, _ := bodyMutationSize(bm)
		b = appendTagLen(b, 3, s)
		switch mu := bm.Mutation.(type) {
		case *extprocv3.BodyMutation_Body:
			b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), mu.Body)
		case *extprocv3.BodyMutation_ClearBody:
			b = appendVarintField(b, 2, protowire.EncodeBool(mu.ClearBody))
		}
	}
	if cr.ClearRouteCache {
		b = appendVarintField(b, 5, 1)
	}
	return b
}

func bodyMutationSize(bm *extprocv3.BodyMutation) (int, bool) {
	if !noUnknown(bm) {
		return 0, false
	}
	switch mu := bm.Mutation.(type) {
	case nil:
		return 0, true
	case *extprocv3.BodyMutation_Body: // a oneof member is written even when empty
		return sizeField(1, len(mu.Body)), true
	case *extprocv3.BodyMutation_ClearBody:
		return sizeVarintField(2, protowire.EncodeBool(mu.ClearBody)), true
	}
	return 0, false
}

func headerMutationSize(hm *extprocv3.HeaderMutation) (int, bool) {
	if !noUnknown(hm) {
		return 0, false
	}
	n := 0
	for _, o := range hm.SetHeaders {
		s, ok := headerOptionSize(o)
		if !ok {
			return 0, false
		}
		n += sizeField(1, s)
	}
	for _, r := range hm.RemoveHeaders {
		if !utf8.ValidString(r) {
			return 0, false
		}
		n += sizeField(2, len(r))
	}
	return n, true
}

func appendHeaderMutation(b []byte, hm *extprocv3.HeaderMutation) []byte {
	for _, o := range hm.SetHeaders {
		s, _ := headerOptionSize(o)
		b = appendTagLen(b, 1, s)
		if h := o.Header; h != nil {
			b = appendHeaderValue(appendTagLen(b, 1, headerValueSize(h)), h)
		}
		if o.AppendAction != 0 {
			b = appendVarintField(b, 3, uint64(int64(o.AppendAction)))
		}
		if o.KeepEmptyValue {
			b = appendVarintField(b, 4, 1)
		}
	}
	for _, r := range hm.RemoveHeaders {
		b = appendStringField(b, 2, r)
	}
	return b
}

// headerOptionSize is the size of a HeaderValueOption; false for a nil
// one (proto.Marshal writes it as empty, but nothing sends that), the
// deprecated append field, unknown fields or invalid UTF-8.
func headerOptionSize(o *corev3.HeaderValueOption) (int, bool) {
	if o == nil || !noUnknown(o) {
		return 0, false
	}
	//lint:ignore SA1019 an option that sets this deprecated field goes to proto.Marshal, which writes it
	if o.Append != nil {
		return 0, false
	}
	n := 0
	if h := o.Header; h != nil {
		if !noUnknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return 0, false
		}
		n += sizeField(1, headerValueSize(h))
	}
	if o.AppendAction != 0 {
		n += sizeVarintField(3, uint64(int64(o.AppendAction)))
	}
	if o.KeepEmptyValue {
		n += sizeVarintField(4, 1)
	}
	return n, true
}

func appendHeaderValue(b []byte, h *corev3.HeaderValue) []byte {
	if h.Key != "" {
		b = appendStringField(b, 1, h.Key)
	}
	if h.Value != "" {
		b = appendStringField(b, 2, h.Value)
	}
	if len(h.RawValue) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 3, protowire.BytesType), h.RawValue)
	}
	return b
}

func headerValueSize(h *corev3.HeaderValue) int {
	n := 0
	if h.Key != "" {
		n += sizeField(1, len(h.Key))
	}
	if h.Value != "" {
		n += sizeField(2, len(h.Value))
	}
	if len(h.RawValue) > 0 {
		n += sizeField(3, len(h.RawValue))
	}
	return n
}

// structSize is the size of a Struct; false past maxStructDepth, for a nil
// value, unknown fields or invalid UTF-8.
func structSize(s *structpb.Struct, depth int) (int, bool) {
	if depth > maxStructDepth || !noUnknown(s) {
		return 0, false
	}
	n := 0
	for k, v := range s.Fields {
		e, ok := entrySize(k, v, depth)
		if !ok {
			return 0, false
		}
		n += sizeField(1, e)
	}
	return n, true
}

// entrySize is the size of one map entry: proto.Marshal writes a map
// entry's key and message value even when they are empty.
func entrySize(k string, v *structpb.Value, depth int) (int, bool) {
	if v == nil || !utf8.ValidString(k) {
		return 0, false
	}
	vs, ok := valueSize(v, depth)
	if !ok {
		return 0, false
	}
	return sizeField(1, len(k)) + sizeField(2, vs), true
}

func valueSize(v *structpb.Value, depth int) (int, bool) {
	if !noUnknown(v) {
		return 0, false
	}
	switch k := v.Kind.(type) {
	case nil:
		return 0, true
	case *structpb.Value_NullValue:
		return sizeVarintField(1, uint64(int64(k.NullValue))), true
	case *structpb.Value_NumberValue:
		return protowire.SizeTag(2) + 8, true
	case *structpb.Value_StringValue:
		if !utf8.ValidString(k.StringValue) {
			return 0, false
		}
		return sizeField(3, len(k.StringValue)), true
	case *structpb.Value_BoolValue:
		return sizeVarintField(4, protowire.EncodeBool(k.BoolValue)), true
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			return 0, false
		}
		s, ok := structSize(k.StructValue, depth+1)
		return sizeField(5, s), ok
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			return 0, false
		}
		s, ok := listSize(k.ListValue, depth+1)
		return sizeField(6, s), ok
	}
	return 0, false
}

func listSize(l *structpb.ListValue, depth int) (int, bool) {
	if depth > maxStructDepth || !noUnknown(l) {
		return 0, false
	}
	n := 0
	for _, v := range l.Values {
		if v == nil {
			return 0, false
		}
		s, ok := valueSize(v, depth)
		if !ok {
			return 0, false
		}
		n += sizeField(1, s)
	}
	return n, true
}

// appendStruct appends a Struct checked by structSize. Sizes of nested
// values are computed again where written: metadata Structs are small and
// shallow, and this keeps the writer free of a size cache.
func appendStruct(b []byte, s *structpb.Struct) []byte {
	for k, v := range s.Fields {
		vs, _ := valueSize(v, 0)
		b = appendStringField(appendTagLen(b, 1, sizeField(1, len(k))+sizeField(2, vs)), 1, k)
		b = appendValue(appendTagLen(b, 2, vs), v)
	}
	return b
}

func appendValue(b []byte, v *structpb.Value) []byte {
	switch k := v.Kind.(type) {
	case *structpb.Value_NullValue:
		b = appendVarintField(b, 1, uint64(int64(k.NullValue)))
	case *structpb.Value_NumberValue:
		b = protowire.AppendFixed64(protowire.AppendTag(b, 2, protowire.Fixed64Type), math.Float64bits(k.NumberValue))
	case *structpb.Value_StringValue:
		b = appendStringField(b, 3, k.StringValue)
	case *structpb.Value_BoolValue:
		b = appendVarintField(b, 4, protowire.EncodeBool(k.BoolValue))
	case *structpb.Value_StructValue:
		s, _ := structSize(k.StructValue, 0)
		b = appendStruct(appendTagLen(b, 5, s), k.StructValue)
	case *structpb.Value_ListValue:
		s, _ := listSize(k.ListValue, 0)
		b = appendTagLen(b, 6, s)
		for _, e := range k.ListValue.Values {
			es, _ := valueSize(e, 0)
			b = appendValue(appendTagLen(b, 1, es), e)
		}
	}
	return b
}

// marshalRequestByHand is marshalByHand for the messages appendRequest
// writes (the data plane's side: Envoy's, in a deployment).
var marshalRequestByHand = marshalByHand &&
	fieldsAre(&extprocv3.ProcessingRequest{}, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13) &&
	fieldsAre(&extprocv3.HttpHeaders{}, 1, 2, 3) && fieldsAre(&extprocv3.HttpBody{}, 1, 2, 3, 4, 5) &&
	fieldsAre(&corev3.HeaderMap{}, 1) && fieldsAre(&corev3.Metadata{}, 1, 2)

// requestSize returns the size of a ProcessingRequest carrying headers or
// a body, with its metadata context (Structs), observability mode and
// protocol configuration, or false for any other shape (trailers,
// attributes, typed metadata, flow control, unknown fields, invalid
// UTF-8), which proto.Marshal writes.
func requestSize(m *extprocv3.ProcessingRequest) (int, bool) {
	if !marshalRequestByHand || !noUnknown(m) || len(m.Attributes) > 0 || m.FlowControlInit != nil ||
		m.ClientWindowUpdate != nil {
		return 0, false
	}
	n := 0
	if md := m.MetadataContext; md != nil {
		s, ok := metadataSize(md)
		if !ok {
			return 0, false
		}
		n += sizeField(8, s)
	}
	if m.ObservabilityMode {
		n += sizeVarintField(10, 1)
	}
	if m.ProtocolConfig != nil {
		n += sizeField(11, proto.Size(m.ProtocolConfig))
	}
	if m.Request != nil {
		num, s, ok := requestPhaseSize(m)
		if !ok {
			return 0, false
		}
		n += sizeField(num, s)
	}
	return n, true
}

// appendRequest appends m's wire form; m was checked by requestSize.
func appendRequest(b []byte, m *extprocv3.ProcessingRequest) ([]byte, error) {
	if md := m.MetadataContext; md != nil {
		s, _ := metadataSize(md)
		b = appendTagLen(b, 8, s)
		for k, st := range md.FilterMetadata {
			ss, _ := structSize(st, 0)
			b = appendStringField(appendTagLen(b, 1, sizeField(1, len(k))+sizeField(2, ss)), 1, k)
			b = appendStruct(appendTagLen(b, 2, ss), st)
		}
	}
	if m.ObservabilityMode {
		b = appendVarintField(b, 10, 1)
	}
	if m.ProtocolConfig != nil {
		b = appendTagLen(b, 11, proto.Size(m.ProtocolConfig))
		var err error
		if b, err = (proto.MarshalOptions{UseCachedSize: true}).MarshalAppend(b, m.ProtocolConfig); err != nil {
			return nil, err
		}
	}
	if m.Request == nil {
		return b, nil
	}
	num, s, _ := requestPhaseSize(m)
	b = appendTagLen(b, num, s)
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		b = appendHttpHeaders(b, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		b = appendHttpHeaders(b, r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		b = appendHttpBody(b, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseBody:
		b = appendHttpBody(b, r.ResponseBody)
	}
	return b, nil
}

func metadataSize(md *corev3.Metadata) (int, bool) {
	if !noUnknown(md) || len(md.TypedFilterMetadata) > 0 {
		return 0, false
	}
	n := 0
	for k, st := range md.FilterMetadata {
		if st == nil || !utf8.ValidString(k) {
			return 0, false
		}
		s, ok := structSize(st, 0)
		if !ok {
			return 0, false
		}
		n += sizeField(1, sizeField(1, len(k))+sizeField(2, s))
	}
	return n, true
}

// requestPhaseSize returns the field number and size of m's headers or
// body message; false for other phases.
func requestPhaseSize(m *extprocv3.ProcessingRequest) (protowire.Number, int, bool) {
	switch r := m.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		s, ok := httpHeadersSize(r.RequestHeaders)
		return 2, s, ok
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		s, ok := httpHeadersSize(r.ResponseHeaders)
		return 3, s, ok
	case *extprocv3.ProcessingRequest_RequestBody:
		s, ok := httpBodySize(r.RequestBody)
		return 4, s, ok
	case *extprocv3.ProcessingRequest_ResponseBody:
		s, ok := httpBodySize(r.ResponseBody)
		return 5, s, ok
	}
	return 0, 0, false
}

func httpHeadersSize(h *extprocv3.HttpHeaders) (int, bool) {
	//lint:ignore SA1019 headers that carry this deprecated field go to proto.Marshal, which writes it
	if h == nil || !noUnknown(h) || len(h.Attributes) > 0 {
		return 0, false
	}
	n := 0
	if hm := h.Headers; hm != nil {
		s, ok := headerMapSize(hm)
		if !ok {
			return 0, false
		}
		n += sizeField(1, s)
	}
	if h.EndOfStream {
		n += sizeVarintField(3, 1)
	}
	return n, true
}

func headerMapSize(hm *corev3.HeaderMap) (int, bool) {
	if !noUnknown(hm) {
		return 0, false
	}
	n := 0
	for _, h := range hm.Headers {
		if h == nil || !noUnknown(h) || !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return 0, false
		}
		n += sizeField(1, headerValueSize(h))
	}
	return n, true
}

func appendHttpHeaders(b []byte, h *extprocv3.HttpHeaders) []byte {
	if hm := h.Headers; hm != nil {
		s, _ := headerMapSize(hm)
		b = appendTagLen(b, 1, s)
		for _, hv := range hm.Headers {
			b = appendHeaderValue(appendTagLen(b, 1, headerValueSize(hv)), hv)
		}
	}
	if h.EndOfStream {
		b = appendVarintField(b, 3, 1)
	}
	return b
}

func httpBodySize(h *extprocv3.HttpBody) (int, bool) {
	if h == nil || !noUnknown(h) {
		return 0, false
	}
	n := 0
	if len(h.Body) > 0 {
		n += sizeField(1, len(h.Body))
	}
	for _, f := range [...]bool{h.EndOfStream, h.EndOfStreamWithoutMessage, h.GrpcMessageCompressed, h.DrainComplete} {
		if f {
			n += sizeVarintField(2, 1) // fields 2 to 5: one-byte tags
		}
	}
	return n, true
}

func appendHttpBody(b []byte, h *extprocv3.HttpBody) []byte {
	if len(h.Body) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), h.Body)
	}
	for i, f := range [...]bool{h.EndOfStream, h.EndOfStreamWithoutMessage, h.GrpcMessageCompressed, h.DrainComplete} {
		if f {
			b = appendVarintField(b, protowire.Number(2+i), 1)
		}
	}
	return b
}
