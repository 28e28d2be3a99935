package inprocgrpc

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// copyCases are the ext_proc messages the gateway sends, with every field
// the hand-written copy knows set, and ones it leaves to proto.Clone.
func copyCases(t testing.TB) []struct {
	name string
	msg  proto.Message
	fast bool // copied field by field, not by proto.Clone
} {
	meta, err := structpb.NewStruct(map[string]any{"switchyard": map[string]any{
		"key_id": "k1", "tokens": 12.0, "ok": true, "none": nil, "list": []any{"a", 1.0, map[string]any{"x": "y"}}}})
	if err != nil {
		t.Fatal(err)
	}
	headers := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: ":path", RawValue: []byte("/v1/chat/completions")}, {Key: "x-a", Value: "v"}, {Key: "x-empty", RawValue: []byte{}}}}
	mutation := &extprocv3.CommonResponse{
		Status: extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
		HeaderMutation: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{
				{Header: &corev3.HeaderValue{Key: "x-model", RawValue: []byte("m")}, Append: wrapperspb.Bool(false),
					AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD, KeepEmptyValue: true},
				{AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT},
			},
			RemoveHeaders: []string{"authorization", "accept-encoding"},
		},
		BodyMutation:    &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"m"}`)}},
		ClearRouteCache: true,
	}
	unknown := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte("x")}}}
	unknown.ProtoReflect().SetUnknown(protoreflect.RawFields{0x98, 0x06, 0x01}) // field 99, varint 1
	return []struct {
		name string
		msg  proto.Message
		fast bool
	}{
		{"request headers", &extprocv3.ProcessingRequest{ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: headers, EndOfStream: true}}}, true},
		{"response headers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers}}}, true},
		{"request body", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(`{"model":"a"}`), EndOfStream: true}}}, true},
		{"response body", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {}\n\n"), EndOfStreamWithoutMessage: true,
				GrpcMessageCompressed: true, DrainComplete: true}}}, true},
		{"empty request", &extprocv3.ProcessingRequest{}, true},
		{"upstream request headers with metadata context", &extprocv3.ProcessingRequest{
			Request:         &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: headers}},
			MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"ns": meta, "other": {}}}}, true},
		{"request with typed metadata context", &extprocv3.ProcessingRequest{MetadataContext: &corev3.Metadata{
			TypedFilterMetadata: map[string]*anypb.Any{"ns": {TypeUrl: "type.googleapis.com/google.protobuf.Empty"}}}}, false},
		{"request trailers", &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{}}}, false},
		{"request with unknown fields", unknown, false},
		{"headers reply", &extprocv3.ProcessingResponse{
			Response:        &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: mutation}},
			DynamicMetadata: meta,
			ModeOverride: &filterv3.ProcessingMode{RequestHeaderMode: filterv3.ProcessingMode_SEND,
				ResponseHeaderMode: filterv3.ProcessingMode_SKIP, RequestBodyMode: filterv3.ProcessingMode_BUFFERED,
				ResponseBodyMode: filterv3.ProcessingMode_STREAMED, RequestTrailerMode: filterv3.ProcessingMode_SKIP,
				ResponseTrailerMode: filterv3.ProcessingMode_SKIP},
			OverrideMessageTimeout: durationpb.New(1500000000),
			//lint:ignore SA1019 the copy must keep deprecated fields too
			RequestDrain: true, RequestDrainRequests: true, RequestDrainResponses: true,
		}, true},
		{"response headers reply", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{}}}, true},
		{"body reply", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: mutation}}, DynamicMetadata: meta}, true},
		{"response body reply, cleared", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}}}}, true},
		{"response body reply, empty body", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
				BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte{}}}}}}}, true},
		{"immediate response", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests},
				Body: []byte(`{"error":{}}`)}}, DynamicMetadata: meta}, false},
		{"rate limit request", &rlsv3.RateLimitRequest{Domain: "switchyard", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "tier", Value: "free"}, {Key: "key_id", Value: "k"}}},
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "usage", Value: "tokens"}},
				Limit:      &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: typev3.RateLimitUnit_MINUTE},
				HitsAddend: wrapperspb.UInt64(40), IsNegativeHits: true},
		}}, true},
		{"rate limit response", &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OVER_LIMIT, RawBody: []byte("over"),
			DynamicMetadata: meta, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{
				{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 3, DurationUntilReset: durationpb.New(5e9),
					CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: "n", RequestsPerUnit: 4, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE}},
				{Code: rlsv3.RateLimitResponse_OVER_LIMIT},
			}}, true},
		{"rate limit response with headers", &rlsv3.RateLimitResponse{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "x", Value: "y"}}}, false},
		{"reply with trailers", &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{Trailers: headers}}}}, false},
	}
}

// TestCloneMessage: the copy equals the original, shares no memory with
// it, and is made field by field for what the gateway sends.
func TestCloneMessage(t *testing.T) {
	if !fastCopy {
		t.Fatal("the ext_proc messages have fields the copy does not know: update copiedFields and the copy")
	}
	for _, tc := range copyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			want := proto.Clone(tc.msg)
			got := cloneMessage(tc.msg, nil)
			if !proto.Equal(got, tc.msg) {
				t.Fatalf("copy differs:\n got %v\nwant %v", got, tc.msg)
			}
			_, fast := fastClone(tc.msg, nil)
			if fast != tc.fast {
				t.Errorf("copied field by field: %v, want %v", fast, tc.fast)
			}
			// Scribble over every byte, string list and map of the copy:
			// the original must not change.
			scribble(got.ProtoReflect())
			if !proto.Equal(tc.msg, want) {
				t.Errorf("changing the copy changed the original:\n got %v\nwant %v", tc.msg, want)
			}
			// Copies from one arena, as a stream's sender makes them: each
			// whole, and none changed by scribbling over another.
			var ar arena
			first, second := cloneMessage(tc.msg, &ar), cloneMessage(tc.msg, &ar)
			scribble(first.ProtoReflect())
			if !proto.Equal(second, tc.msg) || !proto.Equal(tc.msg, want) {
				t.Errorf("copies from one arena share memory:\n got %v\nwant %v", second, tc.msg)
			}
			// And the move on the receiving side keeps it whole.
			dst := tc.msg.ProtoReflect().New().Interface()
			if err := moveMessage(dst, cloneMessage(tc.msg, nil), 1<<20); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(dst, tc.msg) {
				t.Errorf("moved message differs:\n got %v\nwant %v", dst, tc.msg)
			}
			// A unary call's copy, into a message holding something else.
			unary := proto.Clone(tc.msg)
			proto.Reset(unary)
			if err := copyMessage(unary, tc.msg, 1<<20); err != nil {
				t.Fatal(err)
			}
			scribble(unary.ProtoReflect())
			if !proto.Equal(tc.msg, want) {
				t.Errorf("a unary copy shares memory with the original")
			}
			if err := copyMessage(unary, tc.msg, 1<<20); err != nil || !proto.Equal(unary, tc.msg) {
				t.Errorf("unary copy differs (%v):\n got %v\nwant %v", err, unary, tc.msg)
			}
		})
	}
}

// scribble overwrites the contents of m's bytes, lists and maps in place.
func scribble(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				if fd.Message() != nil {
					scribble(l.Get(i).Message())
				} else if fd.Kind() == protoreflect.StringKind {
					l.Set(i, protoreflect.ValueOfString("scribbled"))
				}
			}
		case fd.IsMap():
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					scribble(mv.Message())
				}
				return true
			})
			mp.Set(protoreflect.ValueOfString("scribbled").MapKey(), mp.NewValue())
		case fd.Message() != nil:
			scribble(v.Message())
		case fd.Kind() == protoreflect.BytesKind:
			for i, b := range v.Bytes() {
				v.Bytes()[i] = ^b
			}
		}
		return true
	})
}

// BenchmarkCloneMessage: the field-by-field copy against proto.Clone for
// the gateway's messages.
func BenchmarkCloneMessage(b *testing.B) {
	for _, tc := range copyCases(b) {
		if !tc.fast {
			continue
		}
		b.Run(tc.name+"/copy", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cloneMessage(tc.msg, nil)
			}
		})
		b.Run(tc.name+"/proto.Clone", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				proto.Clone(tc.msg)
			}
		})
	}
}

// TestArenaBytes: copies carved from one block never overlap, even when a
// receiver appends to its copy; large bodies get memory of their own.
func TestArenaBytes(t *testing.T) {
	var a arena
	x := a.copyBytes([]byte("first"))
	y := a.copyBytes([]byte("second"))
	x = append(x, "-grown"...)
	x[0] = 'F'
	if string(y) != "second" || string(x) != "First-grown" {
		t.Errorf("x %q, y %q", x, y)
	}
	if e := a.copyBytes([]byte{}); e == nil || len(e) != 0 {
		t.Errorf("an empty body copied as %#v", e)
	}
	if a.copyBytes(nil) != nil {
		t.Error("a nil body copied as non-nil")
	}
	big := make([]byte, arenaBytes)
	if c := a.copyBytes(big); &c[0] == &big[0] || len(c) != len(big) {
		t.Error("a large body was not copied")
	}
}

// TestCopierRequest: a Copier's copies are equal to the request and share
// no memory with it, body chunks included, so a sender reusing its message
// (the data plane refills it) never changes what the receiver kept.
func TestCopierRequest(t *testing.T) {
	var c Copier
	for _, tc := range copyCases(t) {
		req, ok := tc.msg.(*extprocv3.ProcessingRequest)
		if !ok {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			orig := proto.Clone(req)
			got := c.Request(req)
			if !proto.Equal(got, orig) {
				t.Fatalf("copy differs:\n%v\nwant\n%v", got, orig)
			}
			// Overwrite every byte and value the sender owns.
			if b := req.GetRequestBody(); b != nil {
				clear(b.Body)
			}
			if b := req.GetResponseBody(); b != nil {
				clear(b.Body)
			}
			for _, h := range req.GetRequestHeaders().GetHeaders().GetHeaders() {
				clear(h.RawValue)
				h.Value = "changed"
			}
			if !proto.Equal(got, orig) {
				t.Errorf("copy changed with the sender's message:\n%v\nwant\n%v", got, orig)
			}
		})
	}
}
