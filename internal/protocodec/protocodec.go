// Package protocodec is a gRPC codec for protobuf messages that marshals
// every message into a pooled buffer. The bytes on the wire are those of
// gRPC's own "proto" codec (the format Envoy speaks); only where they are
// built differs. gRPC's codec allocates a fresh slice for each message under
// 1 KiB, and nearly every ext_proc and rate limit message is that small: on
// the hot path every request sends about a dozen of them, and a streamed
// response two per relayed chunk.
//
// gRPC pools a buffer only when its capacity is above 1 KiB
// (mem.IsBelowBufferPoolingThreshold); a smaller one is wrapped as a
// mem.SliceBuffer (an allocation of its own) and never returned. So small
// messages are marshalled into buffers of smallCap bytes from a pool of the
// codec's own, which gRPC hands back once the bytes are written: sending a
// small message then allocates only its one-element mem.BufferSlice.
//
// Importing the package registers Codec in place of gRPC's for the whole
// process, as encoding.RegisterCodecV2 asks (at init). Nothing changes on the
// wire, content-type included, so peers see gRPC's standard protobuf codec.
package protocodec

import (
	"fmt"
	"sync"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/encoding"
	// Initialised first, so its registration of the default codec is the one
	// replaced here, not the other way round.
	_ "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Name is the codec's name: gRPC's protobuf codec's, so the content-type
// stays application/grpc(+proto) and either side may use the standard codec.
const Name = "proto"

// Codec marshals with pooled buffers; see the package documentation.
type Codec struct{}

func init() { encoding.RegisterCodecV2(Codec{}) }

// Marshal writes v's wire form into a pooled buffer, which gRPC returns to
// the pool once the bytes are written. The ext_proc server's replies and
// the data plane's requests are written by appendResponse and
// appendRequest where they fit their shapes (their metadata Structs
// without proto's reflection over maps), others by proto.Marshal.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("protocodec: cannot marshal %T: not a proto.Message", v)
	}
	size, byHand := 0, false
	switch r := m.(type) {
	case *extprocv3.ProcessingResponse:
		size, byHand = responseSize(r)
	case *extprocv3.ProcessingRequest:
		size, byHand = requestSize(r)
	}
	if byHand {
		pool := poolFor(size)
		buf := pool.Get(size)
		var out []byte
		var err error
		if r, ok := m.(*extprocv3.ProcessingResponse); ok {
			out, err = appendResponse((*buf)[:0], r)
		} else {
			out, err = appendRequest((*buf)[:0], m.(*extprocv3.ProcessingRequest))
		}
		if err != nil {
			pool.Put(buf)
			return nil, fmt.Errorf("protocodec: marshal %T: %w", v, err)
		}
		*buf = out
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
	// UseCachedSize is safe only right after Size, as in gRPC's codec.
	size = proto.Size(m)
	pool := poolFor(size)
	buf := pool.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("protocodec: marshal %T: %w", v, err)
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal reads data into v. What it keeps is copied, so the buffers are
// released on return. An ext_proc ProcessingRequest (what the gRPC server
// receives from Envoy on every phase) is read by unmarshalProcessingRequest
// with a few allocations per message instead of three per header; any
// other message, or a request outside its shapes, by proto.Unmarshal.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("protocodec: cannot unmarshal into %T: not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	switch r := m.(type) {
	case *extprocv3.ProcessingRequest:
		if unmarshalProcessingRequest(buf.ReadOnlyData(), r) {
			return nil
		}
	case *extprocv3.ProcessingResponse:
		if unmarshalProcessingResponse(buf.ReadOnlyData(), r) {
			return nil
		}
	}
	if err := proto.Unmarshal(buf.ReadOnlyData(), m); err != nil {
		return fmt.Errorf("protocodec: unmarshal %T: %w", v, err)
	}
	return nil
}

// Name returns Name.
func (Codec) Name() string { return Name }

// poolFor is the pool for a message of size bytes.
func poolFor(size int) mem.BufferPool {
	if size > smallCap {
		return mem.DefaultBufferPool()
	}
	return smallPool
}

// smallCap is the capacity of the buffers small messages are marshalled
// into: above gRPC's pooling threshold, so mem.NewBuffer pools them, and
// large enough for every ext_proc and rate limit message of an ordinary
// request (headers, a chunk of a streamed body, the replies).
const smallCap = 2 << 10

// smallPool is a mem.BufferPool of smallCap-byte buffers. Unlike gRPC's
// default pool it does not clear a buffer it hands out: Marshal overwrites
// the bytes it returns, and nothing reads beyond them.
var smallPool = &bufferPool{}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get(length int) *[]byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		*buf = (*buf)[:length]
		return buf
	}
	buf := make([]byte, length, smallCap)
	return &buf
}

// Put keeps buffers of smallCap bytes; any other (one Marshal's append
// would have had to grow, which a correct Size rules out) goes to gRPC's
// default pool, which takes buffers of any size.
func (b *bufferPool) Put(buf *[]byte) {
	if cap(*buf) != smallCap {
		mem.DefaultBufferPool().Put(buf)
		return
	}
	*buf = (*buf)[:0]
	b.p.Put(buf)
}

// AppendMarshal appends v's wire form to b, as Marshal writes it (the
// ext_proc shapes by hand, others by proto.Marshal), for a transport that
// frames messages in buffers of its own (internal/h2grpc).
func AppendMarshal(b []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return b, fmt.Errorf("protocodec: cannot marshal %T: not a proto.Message", v)
	}
	switch r := m.(type) {
	case *extprocv3.ProcessingResponse:
		if _, ok := responseSize(r); ok {
			return appendResponse(b, r)
		}
	case *extprocv3.ProcessingRequest:
		if _, ok := requestSize(r); ok {
			return appendRequest(b, r)
		}
	}
	out, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b, fmt.Errorf("protocodec: marshal %T: %w", v, err)
	}
	return out, nil
}

// UnmarshalBytes reads data into v, as Unmarshal does; nothing of data is
// kept, so the caller may reuse it on return.
func UnmarshalBytes(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("protocodec: cannot unmarshal into %T: not a proto.Message", v)
	}
	switch r := m.(type) {
	case *extprocv3.ProcessingRequest:
		if unmarshalProcessingRequest(data, r) {
			return nil
		}
	case *extprocv3.ProcessingResponse:
		if unmarshalProcessingResponse(data, r) {
			return nil
		}
	}
	if err := proto.Unmarshal(data, m); err != nil {
		return fmt.Errorf("protocodec: unmarshal %T: %w", v, err)
	}
	return nil
}
