package protocodec

import (
	"math"
	"unicode/utf8"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// unmarshalProcessingRequest reads the ext_proc messages Envoy sends on
// every request (headers, body chunks, the metadata context) into m with a
// fixed handful of allocations: proto.Unmarshal allocates each header's
// HeaderValue, key and value on its own (three per header, about fifty per
// headers message) and a body message's oneof wrapper, HttpBody and bytes.
// Here a headers message is its wrapper, HttpHeaders and HeaderMap in one
// block, the HeaderValues in one, their pointers in one, the keys and
// values in one string and the raw values in one byte block; a body message
// its wrapper and HttpBody in one block and its bytes in their own slice
// (the handlers may edit a body in place; nothing else shares it).
//
// The result is what proto.Unmarshal gives (the tests compare both on
// every shape): every part is the message's own, nothing aliases data. A
// message outside these shapes (trailers, attributes, unknown fields, a
// field repeated where the fast path would have to merge, invalid UTF-8)
// returns false, and the caller unmarshals it with proto.Unmarshal, which
// also reports any error.
func unmarshalProcessingRequest(b []byte, m *extprocv3.ProcessingRequest) bool {
	m.Reset()
	haveOneof := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType && num == 10: // observability_mode
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			m.ObservabilityMode = v != 0
			continue
		case typ != protowire.BytesType:
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch num {
		case 2, 3: // request_headers, response_headers
			if haveOneof {
				return false
			}
			haveOneof = true
			if num == 2 {
				blk := &reqHeadersBlock{}
				blk.w.RequestHeaders = &blk.hh
				m.Request = &blk.w
				if !unmarshalHttpHeaders(v, &blk.hh, &blk.hm) {
					return false
				}
			} else {
				blk := &respHeadersBlock{}
				blk.w.ResponseHeaders = &blk.hh
				m.Request = &blk.w
				if !unmarshalHttpHeaders(v, &blk.hh, &blk.hm) {
					return false
				}
			}
		case 4, 5: // request_body, response_body
			if haveOneof {
				return false
			}
			haveOneof = true
			if num == 4 {
				blk := &reqBodyBlock{}
				blk.w.RequestBody = &blk.body
				m.Request = &blk.w
				if !unmarshalHttpBody(v, &blk.body) {
					return false
				}
			} else {
				blk := &respBodyBlock{}
				blk.w.ResponseBody = &blk.body
				m.Request = &blk.w
				if !unmarshalHttpBody(v, &blk.body) {
					return false
				}
			}
		case 8: // metadata_context (twice would need proto's merge)
			if m.MetadataContext != nil {
				return false
			}
			md, ok := unmarshalMetadata(v)
			if !ok {
				return false
			}
			m.MetadataContext = md
		case 11: // protocol_config
			if m.ProtocolConfig == nil {
				m.ProtocolConfig = new(extprocv3.ProtocolConfiguration)
			}
			if (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, m.ProtocolConfig) != nil {
				return false
			}
		default:
			return false
		}
	}
	return true
}

type reqHeadersBlock struct {
	w  extprocv3.ProcessingRequest_RequestHeaders
	hh extprocv3.HttpHeaders
	hm corev3.HeaderMap
}

type respHeadersBlock struct {
	w  extprocv3.ProcessingRequest_ResponseHeaders
	hh extprocv3.HttpHeaders
	hm corev3.HeaderMap
}

type reqBodyBlock struct {
	w    extprocv3.ProcessingRequest_RequestBody
	body extprocv3.HttpBody
}

type respBodyBlock struct {
	w    extprocv3.ProcessingRequest_ResponseBody
	body extprocv3.HttpBody
}

// unmarshalHttpHeaders reads an HttpHeaders (headers, end_of_stream) into
// hh, its header map into hm.
func unmarshalHttpHeaders(b []byte, hh *extprocv3.HttpHeaders, hm *corev3.HeaderMap) bool {
	haveMap := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 3 && typ == protowire.VarintType: // end_of_stream
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			hh.EndOfStream = v != 0
		case num == 1 && typ == protowire.BytesType && !haveMap: // headers
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			haveMap = true
			if !unmarshalHeaderMap(v, hm) {
				return false
			}
			hh.Headers = hm
		default:
			return false
		}
	}
	return true
}

// unmarshalHeaderMap reads a HeaderMap's headers in two passes: the first
// checks the shape and sizes the blocks, the second fills them.
func unmarshalHeaderMap(b []byte, hm *corev3.HeaderMap) bool {
	count, text, raw := 0, 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return false
		}
		rest = rest[n:]
		v, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return false
		}
		rest = rest[n:]
		count++
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 || num < 1 || num > 3 || typ != protowire.BytesType {
				return false
			}
			v = v[n:]
			f, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return false
			}
			v = v[n:]
			if num == 3 {
				raw += len(f)
				continue
			}
			if !utf8.Valid(f) {
				return false
			}
			text += len(f)
		}
	}
	if count == 0 {
		return true
	}
	vals := make([]corev3.HeaderValue, count)
	ptrs := make([]*corev3.HeaderValue, count)
	// The keys and values, copied into one block made a string once full
	// and never written again.
	textBuf := make([]byte, 0, text)
	var rawBuf []byte
	if raw > 0 {
		rawBuf = make([]byte, 0, raw)
	}
	type span struct{ start, end int }
	i := 0
	for rest := b; len(rest) > 0; i++ {
		_, _, n := protowire.ConsumeTag(rest)
		rest = rest[n:]
		v, n := protowire.ConsumeBytes(rest)
		rest = rest[n:]
		var key, value span
		hv := &vals[i]
		for len(v) > 0 {
			num, _, n := protowire.ConsumeTag(v)
			v = v[n:]
			f, n := protowire.ConsumeBytes(v)
			v = v[n:]
			switch num {
			case 1, 2: // key, value: the last one wins, as in proto.Unmarshal
				s := span{len(textBuf), len(textBuf) + len(f)}
				textBuf = append(textBuf, f...)
				if num == 1 {
					key = s
				} else {
					value = s
				}
			case 3: // raw_value; capacity capped, so an append copies
				if len(f) == 0 {
					hv.RawValue = nil
					continue
				}
				start := len(rawBuf)
				rawBuf = append(rawBuf, f...)
				hv.RawValue = rawBuf[start:len(rawBuf):len(rawBuf)]
			}
		}
		// textBuf has the capacity of all the text (the first pass counted
		// it), so appends never move it and the bytes a string covers are
		// never written again.
		vals[i].Key = spanString(textBuf, key.start, key.end)
		vals[i].Value = spanString(textBuf, value.start, value.end)
		ptrs[i] = hv
	}
	hm.Headers = ptrs
	return true
}

// spanString is text[start:end] as a string sharing text's memory: text is
// filled once by unmarshalHeaderMap and never written again.
func spanString(text []byte, start, end int) string {
	if start == end {
		return ""
	}
	return unsafe.String(&text[start], end-start)
}

// unmarshalHttpBody reads an HttpBody into body; its bytes are copied into
// a slice of their own.
func unmarshalHttpBody(b []byte, body *extprocv3.HttpBody) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType: // body: the last one wins
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			body.Body = nil
			if len(v) > 0 {
				body.Body = append([]byte(nil), v...)
			}
		case num >= 2 && num <= 5 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			switch num {
			case 2:
				body.EndOfStream = v != 0
			case 3:
				body.EndOfStreamWithoutMessage = v != 0
			case 4:
				body.GrpcMessageCompressed = v != 0
			case 5:
				body.DrainComplete = v != 0
			}
		default:
			return false
		}
	}
	return true
}

// unmarshalProcessingResponse reads the replies of the ordinary phases
// (a headers or body response whose common response carries a status, a
// header mutation and a body mutation, with dynamic metadata, a mode
// override or a message timeout override beside it) into m with a fixed
// handful of allocations, where proto.Unmarshal allocates every part on its
// own: the wrapper, response, common response and mutations in one block,
// the set headers' options, values and pointers in a block each, their
// text in one string and raw values in one byte block. What
// unmarshalProcessingRequest says of the result and its fallback holds
// here too (immediate responses, trailers, typed metadata, the deprecated
// append BoolValue and unknown fields go to proto.Unmarshal).
func unmarshalProcessingResponse(b []byte, m *extprocv3.ProcessingResponse) bool {
	m.Reset()
	haveOneof := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		var sub proto.Message
		switch num {
		case 1, 2, 3, 4: // request_headers, response_headers, request_body, response_body
			if haveOneof {
				return false
			}
			haveOneof = true
			blk := &replyBlock{}
			var r *extprocv3.CommonResponse
			switch num {
			case 1:
				blk.reqHeaders.RequestHeaders, m.Response = &blk.headers, &blk.reqHeaders
				r = unmarshalCommonHolder(v, blk, &blk.headers.Response)
			case 2:
				blk.respHeaders.ResponseHeaders, m.Response = &blk.headers, &blk.respHeaders
				r = unmarshalCommonHolder(v, blk, &blk.headers.Response)
			case 3:
				blk.reqBody.RequestBody, m.Response = &blk.body, &blk.reqBody
				r = unmarshalCommonHolder(v, blk, &blk.body.Response)
			case 4:
				blk.respBody.ResponseBody, m.Response = &blk.body, &blk.respBody
				r = unmarshalCommonHolder(v, blk, &blk.body.Response)
			}
			if r == nil {
				return false
			}
			continue
		case 8: // dynamic_metadata (twice would need proto's merge)
			if m.DynamicMetadata != nil {
				return false
			}
			s, ok := unmarshalStruct(v)
			if !ok {
				return false
			}
			m.DynamicMetadata = s
			continue
		case 9: // mode_override
			if m.ModeOverride == nil {
				m.ModeOverride = new(extprocfilterv3.ProcessingMode)
			}
			sub = m.ModeOverride
		case 10: // override_message_timeout
			if m.OverrideMessageTimeout == nil {
				m.OverrideMessageTimeout = new(durationpb.Duration)
			}
			sub = m.OverrideMessageTimeout
		default:
			return false
		}
		// proto's own decoding, merged as proto merges a repeated field.
		if (proto.UnmarshalOptions{Merge: true}).Unmarshal(v, sub) != nil {
			return false
		}
	}
	return true
}

// replyBlock holds a reply's parts: one of the four wrappers and one of
// the two responses is used.
type replyBlock struct {
	reqHeaders  extprocv3.ProcessingResponse_RequestHeaders
	respHeaders extprocv3.ProcessingResponse_ResponseHeaders
	reqBody     extprocv3.ProcessingResponse_RequestBody
	respBody    extprocv3.ProcessingResponse_ResponseBody
	headers     extprocv3.HeadersResponse
	body        extprocv3.BodyResponse
	common      extprocv3.CommonResponse
	hm          extprocv3.HeaderMutation
	bm          extprocv3.BodyMutation
	mutBody     extprocv3.BodyMutation_Body
	mutClear    extprocv3.BodyMutation_ClearBody
}

// unmarshalCommonHolder reads a HeadersResponse or BodyResponse (both
// only a CommonResponse, field 1) and sets *dst to the common response in
// blk; nil when the message is outside the fast path's shapes. An empty
// holder gets a nil CommonResponse, as from proto.Unmarshal, and a
// non-nil result.
func unmarshalCommonHolder(b []byte, blk *replyBlock, dst **extprocv3.CommonResponse) *extprocv3.CommonResponse {
	seen := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType || seen {
			return nil
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		seen = true
		if !unmarshalCommonResponse(v, blk) {
			return nil
		}
		*dst = &blk.common
	}
	return &blk.common
}

func unmarshalCommonResponse(b []byte, blk *replyBlock) bool {
	cr := &blk.common
	haveHM, haveBM := false, false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.VarintType && (num == 1 || num == 5) {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			if num == 1 {
				cr.Status = extprocv3.CommonResponse_ResponseStatus(int32(v))
			} else {
				cr.ClearRouteCache = v != 0
			}
			continue
		}
		if typ != protowire.BytesType {
			return false
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 2 && !haveHM:
			haveHM = true
			if !unmarshalHeaderMutation(v, &blk.hm) {
				return false
			}
			cr.HeaderMutation = &blk.hm
		case num == 3 && !haveBM:
			haveBM = true
			if !unmarshalBodyMutation(v, blk) {
				return false
			}
			cr.BodyMutation = &blk.bm
		default:
			return false
		}
	}
	return true
}

func unmarshalBodyMutation(b []byte, blk *replyBlock) bool {
	haveOneof := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || haveOneof {
			return false
		}
		b = b[n:]
		haveOneof = true
		switch {
		case num == 1 && typ == protowire.BytesType: // body
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			// Never nil, as proto's oneof bytes: an empty body replaces the
			// body with nothing.
			blk.mutBody.Body = append(make([]byte, 0, len(v)), v...)
			blk.bm.Mutation = &blk.mutBody
		case num == 2 && typ == protowire.VarintType: // clear_body
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			b = b[n:]
			blk.mutClear.ClearBody = v != 0
			blk.bm.Mutation = &blk.mutClear
		default:
			return false
		}
	}
	return true
}

// unmarshalHeaderMutation reads set_headers and remove_headers in two
// passes, as unmarshalHeaderMap.
func unmarshalHeaderMutation(b []byte, hm *extprocv3.HeaderMutation) bool {
	sets, removes, text, raw := 0, 0, 0, 0
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 || (num != 1 && num != 2) || typ != protowire.BytesType {
			return false
		}
		rest = rest[n:]
		v, n := protowire.ConsumeBytes(rest)
		if n < 0 {
			return false
		}
		rest = rest[n:]
		if num == 2 {
			if !utf8.Valid(v) {
				return false
			}
			removes++
			text += len(v)
			continue
		}
		sets++
		haveHeader := false
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			if n < 0 {
				return false
			}
			v = v[n:]
			if typ == protowire.VarintType && (num == 3 || num == 4) {
				if _, n = protowire.ConsumeVarint(v); n < 0 {
					return false
				}
				v = v[n:]
				continue
			}
			if num != 1 || typ != protowire.BytesType || haveHeader {
				return false
			}
			haveHeader = true
			h, n := protowire.ConsumeBytes(v)
			if n < 0 {
				return false
			}
			v = v[n:]
			t, r, ok := headerValueSizes(h)
			if !ok {
				return false
			}
			text, raw = text+t, raw+r
		}
	}
	textBuf := make([]byte, 0, text)
	var rawBuf []byte
	if raw > 0 {
		rawBuf = make([]byte, 0, raw)
	}
	var opts []corev3.HeaderValueOption
	var vals []corev3.HeaderValue
	if sets > 0 {
		opts = make([]corev3.HeaderValueOption, sets)
		vals = make([]corev3.HeaderValue, sets)
		hm.SetHeaders = make([]*corev3.HeaderValueOption, sets)
	}
	if removes > 0 {
		hm.RemoveHeaders = make([]string, 0, removes)
	}
	i := 0
	for rest := b; len(rest) > 0; {
		num, _, n := protowire.ConsumeTag(rest)
		rest = rest[n:]
		v, n := protowire.ConsumeBytes(rest)
		rest = rest[n:]
		if num == 2 {
			start := len(textBuf)
			textBuf = append(textBuf, v...)
			hm.RemoveHeaders = append(hm.RemoveHeaders, spanString(textBuf, start, len(textBuf)))
			continue
		}
		o := &opts[i]
		for len(v) > 0 {
			num, typ, n := protowire.ConsumeTag(v)
			v = v[n:]
			if typ == protowire.VarintType {
				x, n := protowire.ConsumeVarint(v)
				v = v[n:]
				if num == 3 {
					o.AppendAction = corev3.HeaderValueOption_HeaderAppendAction(int32(x))
				} else {
					o.KeepEmptyValue = x != 0
				}
				continue
			}
			h, n := protowire.ConsumeBytes(v)
			v = v[n:]
			textBuf, rawBuf = fillHeaderValue(h, &vals[i], textBuf, rawBuf)
			o.Header = &vals[i]
		}
		hm.SetHeaders[i] = o
		i++
	}
	return true
}

// headerValueSizes checks a HeaderValue's shape (key, value, raw_value;
// valid UTF-8) and returns the bytes of its text and of its raw values.
func headerValueSizes(v []byte) (text, raw int, ok bool) {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 || num < 1 || num > 3 || typ != protowire.BytesType {
			return 0, 0, false
		}
		v = v[n:]
		f, n := protowire.ConsumeBytes(v)
		if n < 0 {
			return 0, 0, false
		}
		v = v[n:]
		if num == 3 {
			raw += len(f)
			continue
		}
		if !utf8.Valid(f) {
			return 0, 0, false
		}
		text += len(f)
	}
	return text, raw, true
}

// fillHeaderValue reads a HeaderValue checked by headerValueSizes into hv,
// its text appended to textBuf and its raw value to rawBuf (both sized by
// headerValueSizes, so neither moves).
func fillHeaderValue(v []byte, hv *corev3.HeaderValue, textBuf, rawBuf []byte) ([]byte, []byte) {
	for len(v) > 0 {
		num, _, n := protowire.ConsumeTag(v)
		v = v[n:]
		f, n := protowire.ConsumeBytes(v)
		v = v[n:]
		switch num {
		case 1, 2: // the last one wins, as in proto.Unmarshal
			start := len(textBuf)
			textBuf = append(textBuf, f...)
			if num == 1 {
				hv.Key = spanString(textBuf, start, len(textBuf))
			} else {
				hv.Value = spanString(textBuf, start, len(textBuf))
			}
		case 3: // capacity capped, so an append copies
			hv.RawValue = nil
			if len(f) > 0 {
				start := len(rawBuf)
				rawBuf = append(rawBuf, f...)
				hv.RawValue = rawBuf[start:len(rawBuf):len(rawBuf)]
			}
		}
	}
	return textBuf, rawBuf
}

// unmarshalMetadata reads a Metadata whose filter_metadata Structs are
// read by unmarshalStruct; false for typed_filter_metadata or anything
// else outside that shape.
func unmarshalMetadata(b []byte) (*corev3.Metadata, bool) {
	md := &corev3.Metadata{}
	n := 0
	for rest := b; len(rest) > 0; n++ {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		rest = rest[l:]
		if l = protowire.ConsumeFieldValue(num, typ, rest); l < 0 {
			return nil, false
		}
		rest = rest[l:]
	}
	if n == 0 {
		return md, true
	}
	md.FilterMetadata = make(map[string]*structpb.Struct, n)
	for len(b) > 0 {
		_, _, l := protowire.ConsumeTag(b)
		b = b[l:]
		entry, l := protowire.ConsumeBytes(b)
		b = b[l:]
		var key string
		var s *structpb.Struct
		haveKey, haveValue := false, false
		for len(entry) > 0 {
			num, typ, l := protowire.ConsumeTag(entry)
			if l < 0 || typ != protowire.BytesType {
				return nil, false
			}
			entry = entry[l:]
			v, l := protowire.ConsumeBytes(entry)
			if l < 0 {
				return nil, false
			}
			entry = entry[l:]
			switch {
			case num == 1 && !haveKey:
				if !utf8.Valid(v) {
					return nil, false
				}
				haveKey, key = true, string(v)
			case num == 2 && !haveValue:
				haveValue = true
				var ok bool
				if s, ok = unmarshalStruct(v); !ok {
					return nil, false
				}
			default:
				return nil, false
			}
		}
		if s == nil {
			s = &structpb.Struct{} // a missing value is an empty message, as in proto
		}
		md.FilterMetadata[key] = s
	}
	return md, true
}

// valueCell is one Value with room for each of its kinds, so a Struct's
// or a list's values are one allocation.
type valueCell struct {
	v    structpb.Value
	str  structpb.Value_StringValue
	num  structpb.Value_NumberValue
	boo  structpb.Value_BoolValue
	null structpb.Value_NullValue
	sv   structpb.Value_StructValue
	lv   structpb.Value_ListValue
}

// unmarshalStruct reads a Struct (dynamic metadata): the Struct, its map,
// its values (one block) and its text (one string), and as much again for
// each nested Struct or list, instead of four or five allocations per
// field. A Struct proto.Unmarshal would have to merge (a key or value
// repeated in an entry, a Value with two kinds) or that does not parse is
// read by proto.Unmarshal instead; false only when that fails.
func unmarshalStruct(b []byte) (*structpb.Struct, bool) {
	if s, ok := readStruct(b, 0); ok {
		return s, true
	}
	s := &structpb.Struct{}
	if proto.Unmarshal(b, s) != nil {
		return nil, false
	}
	return s, true
}

// maxStructDepth bounds readStruct's recursion; deeper values go to
// proto.Unmarshal, which has its own limit.
const maxStructDepth = 16

// readStruct reads a Struct in two passes: the first checks its entries
// and sizes the blocks, the second fills them.
func readStruct(b []byte, depth int) (*structpb.Struct, bool) {
	if depth > maxStructDepth {
		return nil, false
	}
	s := &structpb.Struct{}
	n, text := 0, 0
	for rest := b; len(rest) > 0; n++ {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		rest = rest[l:]
		entry, l := protowire.ConsumeBytes(rest)
		if l < 0 {
			return nil, false
		}
		rest = rest[l:]
		haveKey, haveValue := false, false
		for len(entry) > 0 {
			num, typ, l := protowire.ConsumeTag(entry)
			if l < 0 || typ != protowire.BytesType {
				return nil, false
			}
			entry = entry[l:]
			v, l := protowire.ConsumeBytes(entry)
			if l < 0 {
				return nil, false
			}
			entry = entry[l:]
			switch {
			case num == 1 && !haveKey:
				if !utf8.Valid(v) {
					return nil, false
				}
				haveKey, text = true, text+len(v)
			case num == 2 && !haveValue:
				haveValue = true
				t, ok := valueText(v)
				if !ok {
					return nil, false
				}
				text += t
			default:
				return nil, false
			}
		}
	}
	if n == 0 {
		return s, true
	}
	cells := make([]valueCell, n)
	textBuf := make([]byte, 0, text)
	s.Fields = make(map[string]*structpb.Value, n)
	for i := 0; len(b) > 0; i++ {
		_, _, l := protowire.ConsumeTag(b)
		b = b[l:]
		entry, l := protowire.ConsumeBytes(b)
		b = b[l:]
		c := &cells[i]
		key := ""
		for len(entry) > 0 {
			num, _, l := protowire.ConsumeTag(entry)
			entry = entry[l:]
			v, l := protowire.ConsumeBytes(entry)
			entry = entry[l:]
			if num == 1 {
				start := len(textBuf)
				textBuf = append(textBuf, v...)
				key = spanString(textBuf, start, len(textBuf))
				continue
			}
			var ok bool
			if textBuf, ok = fillValue(v, c, textBuf, depth); !ok {
				return nil, false
			}
		}
		s.Fields[key] = &c.v
	}
	return s, true
}

// readList reads a ListValue as readStruct reads a Struct.
func readList(b []byte, depth int) (*structpb.ListValue, bool) {
	if depth > maxStructDepth {
		return nil, false
	}
	lv := &structpb.ListValue{}
	n, text := 0, 0
	for rest := b; len(rest) > 0; n++ {
		num, typ, l := protowire.ConsumeTag(rest)
		if l < 0 || num != 1 || typ != protowire.BytesType {
			return nil, false
		}
		rest = rest[l:]
		v, l := protowire.ConsumeBytes(rest)
		if l < 0 {
			return nil, false
		}
		rest = rest[l:]
		t, ok := valueText(v)
		if !ok {
			return nil, false
		}
		text += t
	}
	if n == 0 {
		return lv, true
	}
	cells := make([]valueCell, n)
	textBuf := make([]byte, 0, text)
	lv.Values = make([]*structpb.Value, n)
	for i := 0; len(b) > 0; i++ {
		_, _, l := protowire.ConsumeTag(b)
		b = b[l:]
		v, l := protowire.ConsumeBytes(b)
		b = b[l:]
		var ok bool
		if textBuf, ok = fillValue(v, &cells[i], textBuf, depth); !ok {
			return nil, false
		}
		lv.Values[i] = &cells[i].v
	}
	return lv, true
}

// valueText checks that a Value has at most one kind, and returns the
// bytes of its string; a nested Struct or list is checked when read.
func valueText(b []byte) (int, bool) {
	if len(b) == 0 {
		return 0, true
	}
	num, typ, l := protowire.ConsumeTag(b)
	if l < 0 {
		return 0, false
	}
	b = b[l:]
	text := 0
	switch {
	case (num == 1 || num == 4) && typ == protowire.VarintType:
		_, l = protowire.ConsumeVarint(b)
	case num == 2 && typ == protowire.Fixed64Type:
		_, l = protowire.ConsumeFixed64(b)
	case num == 3 && typ == protowire.BytesType:
		var v []byte
		v, l = protowire.ConsumeBytes(b)
		if l >= 0 && !utf8.Valid(v) {
			return 0, false
		}
		text = len(v)
	case (num == 5 || num == 6) && typ == protowire.BytesType:
		_, l = protowire.ConsumeBytes(b)
	default:
		return 0, false
	}
	return text, l >= 0 && l == len(b)
}

// fillValue reads a Value checked by valueText into c.
func fillValue(b []byte, c *valueCell, textBuf []byte, depth int) ([]byte, bool) {
	if len(b) == 0 {
		return textBuf, true
	}
	num, _, l := protowire.ConsumeTag(b)
	b = b[l:]
	switch num {
	case 1:
		x, _ := protowire.ConsumeVarint(b)
		c.null.NullValue = structpb.NullValue(int32(x))
		c.v.Kind = &c.null
	case 2:
		x, _ := protowire.ConsumeFixed64(b)
		c.num.NumberValue = math.Float64frombits(x)
		c.v.Kind = &c.num
	case 3:
		v, _ := protowire.ConsumeBytes(b)
		start := len(textBuf)
		textBuf = append(textBuf, v...)
		c.str.StringValue = spanString(textBuf, start, len(textBuf))
		c.v.Kind = &c.str
	case 4:
		x, _ := protowire.ConsumeVarint(b)
		c.boo.BoolValue = x != 0
		c.v.Kind = &c.boo
	case 5:
		v, _ := protowire.ConsumeBytes(b)
		s, ok := readStruct(v, depth+1)
		if !ok {
			return nil, false
		}
		c.sv.StructValue = s
		c.v.Kind = &c.sv
	case 6:
		v, _ := protowire.ConsumeBytes(b)
		lv, ok := readList(v, depth+1)
		if !ok {
			return nil, false
		}
		c.lv.ListValue = lv
		c.v.Kind = &c.lv
	}
	return textBuf, true
}
