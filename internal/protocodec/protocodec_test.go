package protocodec

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// TestRegistered: importing the package replaces gRPC's default codec.
func TestRegistered(t *testing.T) {
	if _, ok := encoding.GetCodecV2(Name).(Codec); !ok {
		t.Fatalf("codec %q is %T, want protocodec.Codec", Name, encoding.GetCodecV2(Name))
	}
}

// TestWireFormat: the bytes are proto.Marshal's, below and above gRPC's
// pooling threshold, and they read back into an equal message.
func TestWireFormat(t *testing.T) {
	for _, tc := range []struct {
		name string
		body int
	}{{"empty", 0}, {"small", 100}, {"threshold", 1 << 10}, {"large", 64 << 10}} {
		t.Run(tc.name, func(t *testing.T) {
			in := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{
					Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
						{Key: ":path", RawValue: []byte("/v1/chat/completions")},
						{Key: "x-body", RawValue: []byte(strings.Repeat("a", tc.body))},
					}},
					EndOfStream: tc.body%2 == 0,
				},
			}}
			want, err := proto.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			var c Codec
			data, err := c.Marshal(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := data.Materialize(); !bytes.Equal(got, want) {
				t.Fatalf("wire bytes differ from proto.Marshal: %d vs %d bytes", len(got), len(want))
			}
			out := &extprocv3.ProcessingRequest{}
			if err := c.Unmarshal(data, out); err != nil {
				t.Fatal(err)
			}
			data.Free()
			if !proto.Equal(in, out) {
				t.Fatal("message changed in a round trip")
			}
		})
	}
}

func TestNotAMessage(t *testing.T) {
	var c Codec
	if _, err := c.Marshal("text"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer{1}}, new(int)); err == nil {
		t.Error("Unmarshal into an int: no error")
	}
}

// TestSmallMessagePooled: a message under gRPC's pooling threshold is
// marshalled into a buffer gRPC returns to a pool (not a mem.SliceBuffer,
// which it drops), so marshalling and freeing it allocates only the
// one-element BufferSlice.
func TestSmallMessagePooled(t *testing.T) {
	m := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: []byte("data: {\"choices\":[]}\n\n")}}}
	var c Codec
	data, err := c.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data[0].(mem.SliceBuffer); ok {
		t.Fatal("small message marshalled into an unpooled mem.SliceBuffer")
	}
	data.Free()
	if raceEnabled {
		return // the race detector makes sync.Pool drop items at random
	}
	allocs := testing.AllocsPerRun(100, func() {
		d, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		d.Free()
	})
	if allocs > 1 {
		t.Fatalf("Marshal and Free of a small message: %v allocations, want at most 1", allocs)
	}
}
