// Package protocodec is a gRPC codec for protobuf messages that marshals
// every message into a pooled buffer. The bytes on the wire are those of
// gRPC's own "proto" codec (the format Envoy speaks); only where they are
// built differs. gRPC's codec allocates a fresh slice for each message under
// 1 KiB, and nearly every ext_proc and rate limit message is that small: on
// the hot path every request sends about a dozen of them.
//
// Importing the package registers Codec in place of gRPC's for the whole
// process, as encoding.RegisterCodecV2 asks (at init). Nothing changes on the
// wire, content-type included, so peers see gRPC's standard protobuf codec.
package protocodec

import (
	"fmt"

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

// Marshal writes v's wire form into a buffer of the default pool, which
// gRPC returns to the pool once the bytes are written.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("protocodec: cannot marshal %T: not a proto.Message", v)
	}
	// UseCachedSize is safe only right after Size, as in gRPC's codec.
	size := proto.Size(m)
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		pool.Put(buf)
		return nil, fmt.Errorf("protocodec: marshal %T: %w", v, err)
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal reads data into v. proto.Unmarshal copies what it keeps, so the
// buffers are released on return.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("protocodec: cannot unmarshal into %T: not a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	if err := proto.Unmarshal(buf.ReadOnlyData(), m); err != nil {
		return fmt.Errorf("protocodec: unmarshal %T: %w", v, err)
	}
	return nil
}

// Name returns Name.
func (Codec) Name() string { return Name }
