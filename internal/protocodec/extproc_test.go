package protocodec

import (
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func headersMsg(response bool, eos bool, hvs ...*corev3.HeaderValue) *extprocv3.ProcessingRequest {
	hh := &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hvs}, EndOfStream: eos}
	if response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hh}}
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireCases are ProcessingRequests as bytes: what Envoy sends on each
// phase, and shapes the fast path leaves to proto.Unmarshal.
func wireCases(t testing.TB) []struct {
	name string
	wire []byte
	fast bool // read by unmarshalProcessingRequest
} {
	meta, err := structpb.NewStruct(map[string]any{"model": "demo/chat", "tokens": 12})
	if err != nil {
		t.Fatal(err)
	}
	withMeta := headersMsg(false, false, &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/chat")})
	withMeta.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"switchyard": meta}}
	withMeta.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: 1, SendBodyWithoutWaitingForHeaderResponse: true}
	withMeta.ObservabilityMode = true
	attrs := headersMsg(false, true)
	attrs.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": meta}
	trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
		RequestTrailers: &extprocv3.HttpTrailers{Trailers: &corev3.HeaderMap{}}}}
	body := func(response bool, hb *extprocv3.HttpBody) []byte {
		if response {
			return mustMarshal(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}})
		}
		return mustMarshal(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}})
	}
	// Hand-built wire forms proto.Marshal never writes.
	hv := func(fields ...[2]string) []byte {
		var b []byte
		for _, f := range fields {
			num := protowire.Number(1)
			switch f[0] {
			case "value":
				num = 2
			case "raw":
				num = 3
			}
			b = protowire.AppendTag(b, num, protowire.BytesType)
			b = protowire.AppendString(b, f[1])
		}
		return b
	}
	headersWire := func(num protowire.Number, values ...[]byte) []byte {
		var hm []byte
		for _, v := range values {
			hm = protowire.AppendTag(hm, 1, protowire.BytesType)
			hm = protowire.AppendBytes(hm, v)
		}
		hh := protowire.AppendTag(nil, 1, protowire.BytesType)
		hh = protowire.AppendBytes(hh, hm)
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendBytes(b, hh)
	}
	// request_headers whose HttpHeaders carries the headers field twice:
	// proto merges the two maps.
	hm1 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hv([2]string{"key", "a"}))
	hm2 := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hv([2]string{"key", "b"}))
	hh := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hm1)
	hh = protowire.AppendBytes(protowire.AppendTag(hh, 1, protowire.BytesType), hm2)
	twoMaps := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), hh)
	unknown := protowire.AppendVarint(protowire.AppendTag(mustMarshal(t, headersMsg(false, true)), 99, protowire.VarintType), 1)
	return []struct {
		name string
		wire []byte
		fast bool
	}{
		{"request headers", mustMarshal(t, headersMsg(false, false,
			&corev3.HeaderValue{Key: ":method", RawValue: []byte("POST")},
			&corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/chat/completions")},
			&corev3.HeaderValue{Key: "authorization", RawValue: []byte("Bearer sk-test")},
			&corev3.HeaderValue{Key: "x-empty"},
			&corev3.HeaderValue{Key: "x-value", Value: "text"},
			&corev3.HeaderValue{Key: "x-both", Value: "v", RawValue: []byte("r")})), true},
		{"response headers, end of stream", mustMarshal(t, headersMsg(true, true,
			&corev3.HeaderValue{Key: ":status", RawValue: []byte("200")})), true},
		{"headers, empty map", mustMarshal(t, headersMsg(false, true)), true},
		{"headers, no map", mustMarshal(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{EndOfStream: true}}}), true},
		{"headers with metadata, protocol config, observability", mustMarshal(t, withMeta), true},
		{"request body", body(false, &extprocv3.HttpBody{Body: []byte(`{"model":"x"}`), EndOfStream: true}), true},
		{"response body chunk", body(true, &extprocv3.HttpBody{Body: []byte("data: {}\n\n")}), true},
		{"response body, every flag", body(true, &extprocv3.HttpBody{Body: []byte("x"), EndOfStream: true,
			EndOfStreamWithoutMessage: true, GrpcMessageCompressed: true, DrainComplete: true}), true},
		{"empty body", body(true, &extprocv3.HttpBody{EndOfStream: true}), true},
		{"empty message", nil, true},
		{"a header's key twice: the last wins", headersWire(2, hv([2]string{"key", "a"}, [2]string{"value", "1"}, [2]string{"key", "b"}, [2]string{"raw", "r1"}, [2]string{"raw", ""})), true},
		{"attributes", mustMarshal(t, attrs), false},
		{"trailers", mustMarshal(t, trailers), false},
		{"unknown field", unknown, false},
		{"header map twice", twoMaps, false},
		{"invalid UTF-8 key", headersWire(2, hv([2]string{"key", "\xff"})), false},
		{"invalid UTF-8 value", headersWire(3, hv([2]string{"value", "a\xc0"})), false},
		{"truncated", mustMarshal(t, headersMsg(false, false, &corev3.HeaderValue{Key: "k", RawValue: []byte("v")}))[:9], false},
	}
}

// TestProcessingRequestMatchesProto: the codec reads every ProcessingRequest
// as proto.Unmarshal does (same message, or an error for both), through
// the fast path where it applies, and into a message used before.
func TestProcessingRequestMatchesProto(t *testing.T) {
	reused := &extprocv3.ProcessingRequest{}
	for _, tc := range wireCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			if fast := unmarshalProcessingRequest(tc.wire, &extprocv3.ProcessingRequest{}); fast != tc.fast {
				t.Errorf("fast path taken: %v, want %v", fast, tc.fast)
			}
			unmarshalMatchesProto(t, tc.wire, &extprocv3.ProcessingRequest{}, &extprocv3.ProcessingRequest{}, reused)
		})
	}
}

// unmarshalMatchesProto checks that the codec reads wire into each of into
// as proto.Unmarshal reads it into want: the same message, or an error for
// both.
func unmarshalMatchesProto(t *testing.T, wire []byte, want proto.Message, into ...proto.Message) {
	t.Helper()
	wantErr := proto.Unmarshal(wire, want)
	for _, got := range into {
		err := Codec{}.Unmarshal(mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), wire...))}, got)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("%T: error %v, proto.Unmarshal's %v", got, err, wantErr)
		}
		if err == nil && !proto.Equal(got, want) {
			t.Fatalf("%T: got %v\nwant %v", got, got, want)
		}
	}
}

// TestProcessingRequestOwnsItsParts: nothing read aliases the wire bytes,
// and a header's raw value cannot grow into its neighbour's.
func TestProcessingRequestOwnsItsParts(t *testing.T) {
	wire := mustMarshal(t, headersMsg(false, false,
		&corev3.HeaderValue{Key: "a", RawValue: []byte("one")},
		&corev3.HeaderValue{Key: "b", RawValue: []byte("two")}))
	m := &extprocv3.ProcessingRequest{}
	if !unmarshalProcessingRequest(wire, m) {
		t.Fatal("fast path not taken")
	}
	clear(wire)
	hs := m.GetRequestHeaders().GetHeaders().GetHeaders()
	if hs[0].Key != "a" || string(hs[0].RawValue) != "one" || hs[1].Key != "b" || string(hs[1].RawValue) != "two" {
		t.Fatalf("headers changed with the wire bytes: %v", hs)
	}
	_ = append(hs[0].RawValue, 'X')
	if string(hs[1].RawValue) != "two" {
		t.Fatalf("an append to one raw value wrote into the next: %q", hs[1].RawValue)
	}
	body := mustMarshal(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte("body")}}})
	if !unmarshalProcessingRequest(body, m) {
		t.Fatal("fast path not taken")
	}
	clear(body)
	if got := string(m.GetRequestBody().GetBody()); got != "body" {
		t.Fatalf("body changed with the wire bytes: %q", got)
	}
}

// requestHeaders are the dozen headers of an ordinary request.
func requestHeaders() []*corev3.HeaderValue {
	var hvs []*corev3.HeaderValue
	for _, k := range []string{":method", ":path", ":authority", ":scheme", "content-type", "authorization",
		"user-agent", "accept", "x-request-id", "content-length", "x-forwarded-proto", "accept-encoding"} {
		hvs = append(hvs, &corev3.HeaderValue{Key: k, RawValue: []byte("value of " + k)})
	}
	return hvs
}

// TestProcessingRequestAllocations: a headers message costs a fixed five
// allocations whatever its number of headers, a body message two.
func TestProcessingRequestAllocations(t *testing.T) {
	hvs := requestHeaders()
	for _, tc := range []struct {
		name string
		wire []byte
		max  float64
	}{
		{"headers", mustMarshal(t, headersMsg(false, false, hvs...)), 5},
		{"body chunk", mustMarshal(t, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n")}}}), 2},
	} {
		m := &extprocv3.ProcessingRequest{}
		got := testing.AllocsPerRun(100, func() {
			if !unmarshalProcessingRequest(tc.wire, m) {
				t.Fatal("fast path not taken")
			}
		})
		if got > tc.max {
			t.Errorf("%s: %v allocations, want at most %v", tc.name, got, tc.max)
		}
	}
}

func BenchmarkUnmarshalProcessingRequest(b *testing.B) {
	hvs := requestHeaders()
	for _, tc := range []struct {
		name string
		m    proto.Message
	}{
		{"headers", headersMsg(false, false, hvs...)},
		{"body_chunk", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n")}}}},
	} {
		wire := mustMarshal(b, tc.m)
		var c Codec
		b.Run(tc.name, func(b *testing.B) {
			m := &extprocv3.ProcessingRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/proto", func(b *testing.B) {
			m := &extprocv3.ProcessingRequest{}
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(wire, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestProcessingResponseMatchesProto: as TestProcessingRequestMatchesProto,
// for the replies the data plane receives.
func TestProcessingResponseMatchesProto(t *testing.T) {
	meta, err := structpb.NewStruct(map[string]any{"prompt_tokens": 20, "model": "demo/chat"})
	if err != nil {
		t.Fatal(err)
	}
	set := func(k, v string, action corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: action}
	}
	common := &extprocv3.CommonResponse{
		Status:          extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
		ClearRouteCache: true,
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{
				set(":path", "/v1/chat/completions", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD),
				set("x-ratelimit-limit-requests", "60", 0),
				{Header: &corev3.HeaderValue{Key: "x-value", Value: "text"}, KeepEmptyValue: true},
				{Header: &corev3.HeaderValue{Key: "x-empty"}},
				{AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT},
			},
			RemoveHeaders: []string{"x-switchyard-model", "authorization"},
		},
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"demo/chat"}`)}},
	}
	cases := []struct {
		name string
		m    *extprocv3.ProcessingResponse
		fast bool
	}{
		{"request headers, everything", &extprocv3.ProcessingResponse{
			Response:               &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}},
			DynamicMetadata:        meta,
			ModeOverride:           &extprocfilterv3.ProcessingMode{ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED},
			OverrideMessageTimeout: durationpb.New(1500 * time.Millisecond)}, true},
		{"response headers, empty", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}, true},
		{"request body, empty common", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}, true},
		{"response body chunk, body mutation", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("data: {}\n\n")}}}}}}, true},
		{"response body, empty body mutation", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte{}}}}}}}, true},
		{"response body, clear body", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}}}}, true},
		{"metadata alone", &extprocv3.ProcessingResponse{DynamicMetadata: meta}, true},
		{"empty", &extprocv3.ProcessingResponse{}, true},
		{"immediate response", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Body: []byte("no")}}}, false},
		{"trailers in the common response", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				Trailers: &corev3.HeaderMap{}}}}}, false},
		{"deprecated append", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
					Header: &corev3.HeaderValue{Key: "k"}, Append: wrapperspb.Bool(true)}}}}}}}, false},
		{"request drain requests", &extprocv3.ProcessingResponse{RequestDrainRequests: true}, false},
	}
	type wireCase struct {
		name string
		wire []byte
		fast bool
	}
	var wires []wireCase
	for _, tc := range cases {
		wires = append(wires, wireCase{tc.name, mustMarshal(t, tc.m), tc.fast})
	}
	bad := func(hv []byte) []byte { // response_headers setting one header hv
		o := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hv)
		hm := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), o)
		cr := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), hm)
		hr := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), cr)
		return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), hr)
	}
	key := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), s)
	}
	wires = append(wires,
		wireCase{"invalid UTF-8 header key", bad(key("\xff")), false},
		wireCase{"a header's key twice", bad(append(key("a"), key("b")...)), true},
		wireCase{"invalid UTF-8 removed header", func() []byte {
			hm := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "\xc0")
			cr := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), hm)
			hr := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), cr)
			return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), hr)
		}(), false},
		wireCase{"unknown field", protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 1), false},
		wireCase{"truncated", mustMarshal(t, cases[0].m)[:20], false},
	)
	reused := &extprocv3.ProcessingResponse{}
	for _, tc := range wires {
		t.Run(tc.name, func(t *testing.T) {
			if fast := unmarshalProcessingResponse(tc.wire, &extprocv3.ProcessingResponse{}); fast != tc.fast {
				t.Errorf("fast path taken: %v, want %v", fast, tc.fast)
			}
			unmarshalMatchesProto(t, tc.wire, &extprocv3.ProcessingResponse{}, &extprocv3.ProcessingResponse{}, reused)
		})
	}
	// An empty body mutation stays a body mutation that empties the body.
	m := &extprocv3.ProcessingResponse{}
	if !unmarshalProcessingResponse(wires[4].wire, m) || m.GetResponseBody().GetResponse().GetBodyMutation().GetBody() == nil {
		t.Error("empty body mutation read as nil")
	}
}

// TestProcessingResponseAllocations: a streamed chunk's reply with a body
// mutation costs two allocations (proto.Unmarshal: six).
func TestProcessingResponseAllocations(t *testing.T) {
	wire := mustMarshal(t, &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("data: {}\n\n")}}}}}})
	m := &extprocv3.ProcessingResponse{}
	if got := testing.AllocsPerRun(100, func() {
		if !unmarshalProcessingResponse(wire, m) {
			t.Fatal("fast path not taken")
		}
	}); got > 2 {
		t.Errorf("%v allocations, want at most 2", got)
	}
}

// BenchmarkUnmarshalProcessingResponse: the replies the data plane reads
// (a headers reply with mutations and usage metadata, a chunk's reply) and
// a request with a metadata context of nested Structs and lists, read by
// the codec and by proto.Unmarshal.
func BenchmarkUnmarshalProcessingResponse(b *testing.B) {
	usage, err := structpb.NewStruct(map[string]any{"switchyard": map[string]any{"prompt_tokens": 20, "model": "demo/chat",
		"cached": false, "none": nil, "list": []any{"a", 1.5, true, map[string]any{"k": "v"}}}})
	if err != nil {
		b.Fatal(err)
	}
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	}
	withMeta := headersMsg(false, false, &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/chat/completions")})
	withMeta.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"switchyard": usage}}
	for _, tc := range []struct {
		name string
		m    proto.Message
	}{
		{"headers_reply", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
				Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE, ClearRouteCache: true,
				HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders:    []*corev3.HeaderValueOption{set(":path", "/v1/chat/completions"), set("x-ratelimit-limit-requests", "60")},
					RemoveHeaders: []string{"authorization", "x-switchyard-model"}},
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"demo/chat"}`)}}}}},
			DynamicMetadata: usage}},
		{"chunk_reply", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{
			Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{
				Body: []byte("data: {}\n\n")}}}}}}},
		{"request_with_metadata", withMeta},
	} {
		wire := mustMarshal(b, tc.m)
		b.Run(tc.name, func(b *testing.B) {
			m := tc.m.ProtoReflect().New().Interface()
			b.ReportAllocs()
			for b.Loop() {
				if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/proto", func(b *testing.B) {
			m := tc.m.ProtoReflect().New().Interface()
			b.ReportAllocs()
			for b.Loop() {
				if err := proto.Unmarshal(wire, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestStructsMatchProto: metadata Structs (a request's metadata_context, a
// reply's dynamic_metadata) read as proto.Unmarshal reads them, flat ones
// by the fast path and nested ones by proto.Unmarshal for that Struct.
func TestStructsMatchProto(t *testing.T) {
	flat, err := structpb.NewStruct(map[string]any{"model": "demo/chat", "prompt_tokens": 20, "cached": true,
		"none": nil, "": "empty key", "unicode": "modèle ✓", "empty": ""})
	if err != nil {
		t.Fatal(err)
	}
	nested, err := structpb.NewStruct(map[string]any{"a": "x", "inner": map[string]any{"b": 1}, "list": []any{"c", 2.5}})
	if err != nil {
		t.Fatal(err)
	}
	noKind := &structpb.Struct{Fields: map[string]*structpb.Value{"k": {}}}
	entry := func(key string, value []byte, withValue bool) []byte { // one Struct field, by hand
		e := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
		if withValue {
			e = protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), value)
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), e)
	}
	str := func(s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), s)
	}
	structs := []struct {
		name string
		wire []byte
	}{
		{"flat", mustMarshal(t, flat)},
		{"nested", mustMarshal(t, nested)},
		{"value without kind", mustMarshal(t, noKind)},
		{"empty", nil},
		{"entry without value", entry("k", nil, false)},
		{"key twice: the last entry wins", append(entry("k", str("one"), true), entry("k", str("two"), true)...)},
		{"value with two kinds", entry("k", append(str("a"), protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), 1)...), true)},
		{"invalid UTF-8 string", entry("k", str("\xff"), true)},
		{"invalid UTF-8 key", entry("\xff", str("v"), true)},
		{"nested Struct with a value of two kinds", entry("k", protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType),
			entry("in", append(str("a"), str("b")...), true)), true)},
		{"list with an invalid string", entry("k", protowire.AppendBytes(protowire.AppendTag(nil, 6, protowire.BytesType),
			protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), str("\xff"))), true)},
		{"empty nested Struct and list", entry("k", protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), nil), true)},
	}
	for _, tc := range structs {
		t.Run(tc.name, func(t *testing.T) {
			// As a reply's dynamic_metadata.
			reply := protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), tc.wire)
			unmarshalMatchesProto(t, reply, &extprocv3.ProcessingResponse{}, &extprocv3.ProcessingResponse{})
			// As a request's metadata_context, in two namespaces.
			md := append(
				protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
					protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "switchyard"), 2, protowire.BytesType), tc.wire)),
				protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType),
					protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "other"), 2, protowire.BytesType), tc.wire))...)
			req := append(mustMarshal(t, headersMsg(false, true)), protowire.AppendBytes(protowire.AppendTag(nil, 8, protowire.BytesType), md)...)
			unmarshalMatchesProto(t, req, &extprocv3.ProcessingRequest{}, &extprocv3.ProcessingRequest{})
		})
	}
	// Typed metadata and a repeated metadata_context go to proto.Unmarshal.
	typed := mustMarshal(t, &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{
		TypedFilterMetadata: map[string]*anypb.Any{"x": {TypeUrl: "type.googleapis.com/google.protobuf.Struct"}}}})
	twice := append(mustMarshal(t, &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{
		FilterMetadata: map[string]*structpb.Struct{"a": flat}}}), mustMarshal(t, &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{
		FilterMetadata: map[string]*structpb.Struct{"b": flat}}})...)
	for name, wire := range map[string][]byte{"typed metadata": typed, "metadata twice": twice} {
		if unmarshalProcessingRequest(wire, &extprocv3.ProcessingRequest{}) {
			t.Errorf("%s: fast path taken", name)
		}
		want, got := &extprocv3.ProcessingRequest{}, &extprocv3.ProcessingRequest{}
		if err := proto.Unmarshal(wire, want); err != nil {
			t.Fatal(err)
		}
		if err := (Codec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, got); err != nil || !proto.Equal(got, want) {
			t.Errorf("%s: got %v (%v), want %v", name, got, err, want)
		}
	}
	if _, ok := readStruct(mustMarshal(t, nested), 0); !ok {
		t.Error("nested Struct left to proto.Unmarshal")
	}
	// A flat Struct of seven fields: the Struct, its map, its values and
	// its text (proto.Unmarshal: about thirty).
	wire := mustMarshal(t, flat)
	if got := testing.AllocsPerRun(100, func() {
		if s, ok := unmarshalStruct(wire); !ok || len(s.Fields) != 7 {
			t.Fatal("flat Struct not read")
		}
	}); got > 6 {
		t.Errorf("flat Struct: %v allocations, want at most 6", got)
	}
}

// FuzzUnmarshal: on any bytes the codec reads a ProcessingRequest and a
// ProcessingResponse as proto.Unmarshal does (same message or an error for
// both), and never panics. Seeded with wireCases.
func FuzzUnmarshal(f *testing.F) {
	for _, tc := range wireCases(f) {
		f.Add(tc.wire)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		unmarshalMatchesProto(t, wire, &extprocv3.ProcessingRequest{}, &extprocv3.ProcessingRequest{})
		unmarshalMatchesProto(t, wire, &extprocv3.ProcessingResponse{}, &extprocv3.ProcessingResponse{})
	})
}
