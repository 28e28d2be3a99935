package protocodec

import (
	"bytes"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestMarshalByHandOn: the writer knows every field of the messages it
// writes in the go-control-plane and protobuf versions built with. A
// failure here means a dependency added a field: teach appendResponse
// (and marshalByHand's lists) about it.
func TestMarshalByHandOn(t *testing.T) {
	if !marshalByHand {
		t.Fatal("marshalByHand is off: a message it writes has a field it does not know")
	}
}

func usageStruct(t testing.TB) *structpb.Struct {
	s, err := structpb.NewStruct(map[string]any{
		"usage": map[string]any{"prompt_tokens": 20, "completion_tokens": 256, "model": "demo/chat", "cached": false,
			"none": nil, "list": []any{"a", 1.5, true, map[string]any{}, []any{}}},
		"": "empty key", "empty": "", "zero": 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestResponseMarshalMatchesProto: a reply written by appendResponse reads
// back as the reply, and without maps of more than one entry (whose order
// proto.Marshal leaves unspecified) its bytes are proto.Marshal's exactly.
func TestResponseMarshalMatchesProto(t *testing.T) {
	one, err := structpb.NewStruct(map[string]any{"switchyard": map[string]any{"tokens": 12}})
	if err != nil {
		t.Fatal(err)
	}
	empty := &structpb.Struct{Fields: map[string]*structpb.Value{"": {}, "null": structpb.NewNullValue()}}
	set := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
	}
	common := &extprocv3.CommonResponse{
		Status:          extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
		ClearRouteCache: true,
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{set(":path", "/v1/chat/completions"), set("x-empty", ""),
				{Header: &corev3.HeaderValue{Key: "x-value", Value: "text"}, KeepEmptyValue: true}, {},
				{Header: &corev3.HeaderValue{}}},
			RemoveHeaders: []string{"authorization", ""},
		},
		BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"demo/chat"}`)}},
	}
	body := func(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
	}
	withMeta := body(nil)
	withMeta.DynamicMetadata = usageStruct(t)
	cases := []struct {
		name  string
		m     *extprocv3.ProcessingResponse
		exact bool // no map of more than one entry
		hand  bool // written by appendResponse
	}{
		{"request headers, everything", &extprocv3.ProcessingResponse{
			Response:               &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}},
			DynamicMetadata:        one,
			ModeOverride:           &extprocfilterv3.ProcessingMode{ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP, ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED},
			OverrideMessageTimeout: durationpb.New(1500 * time.Millisecond)}, true, true},
		{"response headers, no common response", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}, true, true},
		{"request body, empty common response", &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}, true, true},
		{"chunk, body mutation", body(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_Body{Body: []byte("data: {}\n\n")}}}), true, true},
		{"empty body mutation", body(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_Body{}}}), true, true},
		{"clear body false", body(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_ClearBody{}}}), true, true},
		{"body mutation without mutation", body(&extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{}}), true, true},
		{"empty values and a null", &extprocv3.ProcessingResponse{DynamicMetadata: empty}, false, true},
		{"usage metadata", withMeta, false, true},
		{"empty", &extprocv3.ProcessingResponse{}, true, true},
		{"immediate response", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Body: []byte("no")}}}, true, false},
		{"deprecated append", body(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "k"}, Append: wrapperspb.Bool(true)}}}}), true, false},
		{"nil option", body(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{nil}}}), true, false},
		{"trailers", body(&extprocv3.CommonResponse{Trailers: &corev3.HeaderMap{}}), true, false},
		{"request drain requests", &extprocv3.ProcessingResponse{RequestDrainRequests: true}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, hand := responseSize(tc.m)
			if hand != tc.hand {
				t.Errorf("written by hand: %v, want %v", hand, tc.hand)
			}
			marshalMatchesProto(t, tc.m, &extprocv3.ProcessingResponse{}, tc.exact)
		})
	}
}

// marshalMatchesProto checks that the codec writes m as proto.Marshal
// does: bytes that read back (into back) as m, of proto.Size's length, and
// when exact (no map of more than one entry, whose order proto.Marshal
// leaves unspecified) proto.Marshal's bytes exactly.
func marshalMatchesProto(t *testing.T, m, back proto.Message, exact bool) {
	t.Helper()
	data, err := (Codec{}).Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := data.Materialize()
	data.Free()
	if err := proto.Unmarshal(got, back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, m) {
		t.Fatalf("read back %v\nwant %v", back, m)
	}
	if want := proto.Size(m); len(got) != want {
		t.Fatalf("%d bytes, proto.Size %d", len(got), want)
	}
	if exact {
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("bytes differ from proto.Marshal:\n%x\n%x", got, want)
		}
	}
}

// TestResponseMarshalInvalidUTF8: invalid UTF-8 anywhere is proto.Marshal's
// error, not bytes Envoy would reject.
func TestResponseMarshalInvalidUTF8(t *testing.T) {
	bad := "a\xff"
	body := func(cr *extprocv3.CommonResponse) *extprocv3.ProcessingResponse {
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: cr}}}
	}
	for name, m := range map[string]*extprocv3.ProcessingResponse{
		"header key": body(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: bad}}}}}),
		"removed header": body(&extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{RemoveHeaders: []string{bad}}}),
		"metadata key":   {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{bad: structpb.NewBoolValue(true)}}},
		"metadata value": {DynamicMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue(bad)}}},
	} {
		if _, err := (Codec{}).Marshal(m); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestResponseMarshalAllocations: a reply with usage metadata (nested
// Struct, list) allocates only its one-element BufferSlice.
func TestResponseMarshalAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	m := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}, DynamicMetadata: usageStruct(t)}
	got := testing.AllocsPerRun(100, func() {
		d, err := (Codec{}).Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		d.Free()
	})
	if got > 1 {
		t.Errorf("%v allocations, want at most 1", got)
	}
}

// BenchmarkMarshalResponse: a body reply with usage metadata, written by
// hand (the codec) and by proto.Marshal.
func BenchmarkMarshalResponse(b *testing.B) {
	m := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}, DynamicMetadata: usageStruct(b)}
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, err := (Codec{}).Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			d.Free()
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 2048)
		for b.Loop() {
			var err error
			if buf, err = (proto.MarshalOptions{}).MarshalAppend(buf[:0], m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRequestMarshalMatchesProto: as TestResponseMarshalMatchesProto, for
// the data plane's requests: every ProcessingRequest of wireCases (those
// that parse) and ones with metadata of several namespaces.
func TestRequestMarshalMatchesProto(t *testing.T) {
	type tc struct {
		name  string
		m     *extprocv3.ProcessingRequest
		exact bool
		hand  bool
	}
	var cases []tc
	for _, w := range wireCases(t) {
		m := &extprocv3.ProcessingRequest{}
		if proto.Unmarshal(w.wire, m) != nil {
			continue
		}
		_, hand := requestSize(m)
		// Exact bytes only without maps: proto.Marshal's map order varies.
		exact := len(m.GetMetadataContext().GetFilterMetadata()) == 0 && len(m.GetAttributes()) == 0
		cases = append(cases, tc{w.name, m, exact, hand})
	}
	meta := headersMsg(false, false, &corev3.HeaderValue{Key: ":path", RawValue: []byte("/v1/chat")})
	meta.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"switchyard": usageStruct(t), "envoy.filters.http.ext_proc": {}, "": usageStruct(t)}}
	body := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n"), EndOfStream: true, DrainComplete: true}},
		ObservabilityMode: true}
	cases = append(cases, tc{"metadata in three namespaces", meta, false, true}, tc{"body chunk", body, true, true},
		tc{"flow control", &extprocv3.ProcessingRequest{FlowControlInit: &extprocv3.ProcessingRequest_FlowControlInit{}}, true, false})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, hand := requestSize(c.m); hand != c.hand {
				t.Errorf("written by hand: %v, want %v", hand, c.hand)
			}
			marshalMatchesProto(t, c.m, &extprocv3.ProcessingRequest{}, c.exact)
		})
	}
	hand := 0
	for _, c := range cases {
		if c.hand {
			hand++
		}
	}
	if hand < 10 {
		t.Errorf("only %d cases written by hand", hand)
	}
	// Invalid UTF-8 is proto.Marshal's error.
	for name, m := range map[string]*extprocv3.ProcessingRequest{
		"header key":     headersMsg(false, false, &corev3.HeaderValue{Key: "a\xff"}),
		"header value":   headersMsg(true, false, &corev3.HeaderValue{Key: "k", Value: "\xc0"}),
		"namespace":      {MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"\xff": {}}}},
		"metadata value": {MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": {Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("\xff")}}}}},
	} {
		if _, err := (Codec{}).Marshal(m); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
