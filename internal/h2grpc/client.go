// Package h2grpc is a gRPC client for the data plane's calls to ext_proc and
// the rate limit service, written as Envoy's own gRPC client (envoy_grpc)
// works rather than as grpc-go's: a message's frames are encoded and
// written on the caller's goroutine, and one reader goroutine per
// connection demultiplexes what the server sends to the streams. grpc-go
// hands every message to a writer goroutine (its loopyWriter), which must
// be woken to write it: on a small machine each such hand-off is a futex
// wake-up and often an inter-processor interrupt, paid several times per
// request by the data plane.
//
// Writes are combined as an event loop's one flush per pass: a writer
// appends its frames to the connection's buffer under the write lock, and
// the writer that finds no write in progress writes out everything
// buffered, looping until nothing is left; a writer that appends during
// a write leaves its frames to that one. Alone, each message is one write
// from its caller's goroutine; under load, several streams' frames share
// one write (the flusher yields to the runnable goroutines once before
// writing when other streams are open, so that they can join it). A
// stream's HEADERS go out with its first message.
//
// It speaks HTTP/2 with prior knowledge (h2c, as grpc-go's insecure
// client): the connection preface, SETTINGS with the initial stream window
// (Options.InitialWindowSize) and a WINDOW_UPDATE for the connection's,
// SETTINGS and PING acknowledgements, flow control in both directions (a
// writer waits for window, woken by the reader), MAX_CONCURRENT_STREAMS
// (a full connection makes the next stream dial another), the server's
// maximum frame size, GOAWAY (new streams go to a new connection, streams
// above the last stream id fail with UNAVAILABLE, the others finish) and
// RST_STREAM(CANCEL) when a caller abandons a stream (its context ends, or
// Abandon). A stream that raced a GOAWAY is not retried (grpc-go retries
// it transparently): it fails with UNAVAILABLE. There is no compression
// and no keepalive.
// A lost connection fails its streams with UNAVAILABLE and the next stream
// dials again. Messages are length-prefixed and uncompressed, marshalled
// by internal/protocodec; errors are grpc-go's status errors with the
// codes grpc-go reports, so callers handle them as they would grpc-go's.
//
// ClientConn implements grpc.ClientConnInterface, so generated clients
// work on it unchanged. Call options other than MaxCallRecvMsgSize,
// Header and Trailer are ignored.
package h2grpc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Options configure a ClientConn.
type Options struct {
	// InitialWindowSize is the stream receive window this client
	// advertises (default 4 MiB); InitialConnWindowSize the
	// connection's (default 16 MiB).
	InitialWindowSize     int32
	InitialConnWindowSize int32
	// Dial, if not nil, replaces net.Dialer.DialContext.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Authority is the :authority of every stream (default: the target).
	Authority string
	// UserAgent is sent as user-agent (default "switchyard-h2grpc").
	UserAgent string
}

// defaultMaxRecv is grpc-go's default limit on a received message.
const defaultMaxRecv = 4 << 20

// ClientConn is a pool of HTTP/2 connections to one target, used one at a
// time until it is full (MAX_CONCURRENT_STREAMS) or draining.
type ClientConn struct {
	target string
	opts   Options

	mu     sync.Mutex
	conns  []*conn
	closed bool
	// dialMu makes concurrent streams finding no usable connection wait
	// for one dial instead of each dialing.
	dialMu sync.Mutex
	// testHookGoAway, if not nil, is called when a GOAWAY was handled.
	testHookGoAway func()
}

var _ grpc.ClientConnInterface = (*ClientConn)(nil)

// New returns a ClientConn to target, "host:port" or "unix:/path". It
// connects on the first stream.
func New(target string, opts Options) *ClientConn {
	if opts.InitialWindowSize <= 0 {
		opts.InitialWindowSize = 4 << 20
	}
	if opts.InitialConnWindowSize <= 0 {
		opts.InitialConnWindowSize = 16 << 20
	}
	if opts.Authority == "" {
		opts.Authority = target
		if strings.HasPrefix(target, "unix:") {
			opts.Authority = "localhost"
		}
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "switchyard-h2grpc"
	}
	return &ClientConn{target: target, opts: opts}
}

// errClosing is what streams get once Close was called, as grpc-go's.
var errClosing = status.Error(codes.Canceled, "grpc: the client connection is closing")

// Close closes every connection; their streams fail.
func (cc *ClientConn) Close() error {
	cc.mu.Lock()
	cc.closed = true
	conns := cc.conns
	cc.conns = nil
	cc.mu.Unlock()
	for _, c := range conns {
		c.fail(errors.New("client connection closed"))
	}
	return nil
}

// pick returns a connection with room for a stream, dialing one if none.
func (cc *ClientConn) pick(ctx context.Context) (*conn, error) {
	if c, err := cc.usable(); c != nil || err != nil {
		return c, err
	}
	cc.dialMu.Lock()
	defer cc.dialMu.Unlock()
	if c, err := cc.usable(); c != nil || err != nil {
		return c, err
	}
	c, err := cc.dial(ctx)
	if err == nil {
		// The first stream waits for the server's SETTINGS, so that its
		// stream limit is known before streams are opened against it.
		select {
		case <-c.ready:
			err = c.deadErr()
		case <-ctx.Done():
			c.fail(ctx.Err())
			err = ctx.Err()
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Error(codes.Unavailable, fmt.Sprintf("connection error: desc = %q", err.Error()))
	}
	cc.mu.Lock()
	if cc.closed {
		cc.mu.Unlock()
		c.fail(errors.New("client connection closed"))
		return nil, errClosing
	}
	cc.conns = append(cc.conns, c)
	cc.mu.Unlock()
	return c, nil
}

func (cc *ClientConn) usable() (*conn, error) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.closed {
		return nil, errClosing
	}
	for _, c := range cc.conns {
		c.mu.Lock()
		ok := c.usable()
		c.mu.Unlock()
		if ok {
			return c, nil
		}
	}
	return nil, nil
}

// forget drops a dead or draining connection from the pool.
func (cc *ClientConn) forget(c *conn) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for i, x := range cc.conns {
		if x == c {
			cc.conns = append(cc.conns[:i], cc.conns[i+1:]...)
			return
		}
	}
}

// callInfo is what the call options ask for.
type callInfo struct {
	maxRecv int
	header  *metadata.MD
	trailer *metadata.MD
}

func callInfoOf(opts []grpc.CallOption) callInfo {
	ci := callInfo{maxRecv: defaultMaxRecv}
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.MaxRecvMsgSizeCallOption:
			ci.maxRecv = o.MaxRecvMsgSize
		case grpc.HeaderCallOption:
			ci.header = o.HeaderAddr
		case grpc.TrailerCallOption:
			ci.trailer = o.TrailerAddr
		}
	}
	return ci
}

// NewStream opens a stream for method.
func (cc *ClientConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := cc.newStream(ctx, method, callInfoOf(opts))
	if err != nil {
		return nil, err
	}
	s.serverStreams = desc.ServerStreams
	return s, nil
}

// Invoke makes a unary call: the request and END_STREAM in one write.
func (cc *ClientConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	s, err := cc.newStream(ctx, method, callInfoOf(opts))
	if err != nil {
		return err
	}
	defer s.release()
	s.serverStreams = false
	if err := s.send(args, true); err != nil && err != io.EOF {
		return err
	}
	// RecvMsg waits for the end of the call after the one reply, and
	// reports a failed send's status.
	err = s.RecvMsg(reply)
	if err == io.EOF {
		err = status.Error(codes.Internal, "cardinality violation: expected <Response> received <EOF>")
	}
	return err
}

func (cc *ClientConn) newStream(ctx context.Context, method string, ci callInfo) (*stream, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	deadline, hasDeadline := ctx.Deadline()
	for {
		c, err := cc.pick(ctx)
		if err != nil {
			return nil, err
		}
		s := newStream(ctx, c, ci)
		err = c.open(s, func(enc *hpack.Encoder) {
			cc.writeHeaders(enc, method, md, deadline, hasDeadline)
		})
		if err == errRetry {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.watch()
		return s, nil
	}
}

func (cc *ClientConn) writeHeaders(enc *hpack.Encoder, method string, md metadata.MD, deadline time.Time, hasDeadline bool) {
	w := func(k, v string) { _ = enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	w(":method", "POST")
	w(":scheme", "http")
	w(":path", method)
	w(":authority", cc.opts.Authority)
	w("content-type", "application/grpc")
	w("user-agent", cc.opts.UserAgent)
	w("te", "trailers")
	if hasDeadline {
		w("grpc-timeout", encodeTimeout(time.Until(deadline)))
	}
	for k, vs := range md {
		if reserved(k) {
			continue
		}
		for _, v := range vs {
			if strings.HasSuffix(k, "-bin") {
				v = base64.RawStdEncoding.EncodeToString([]byte(v))
			}
			w(k, v)
		}
	}
}

// reserved are the headers the transport writes itself, which metadata
// does not carry (grpc-go's list, and HTTP/2's connection headers).
func reserved(k string) bool {
	if strings.HasPrefix(k, ":") {
		return true
	}
	switch k {
	case "content-type", "user-agent", "te", "connection", "host",
		"grpc-message-type", "grpc-encoding", "grpc-accept-encoding", "grpc-message",
		"grpc-status", "grpc-timeout", "grpc-status-details-bin":
		return true
	}
	return false
}

// encodeTimeout writes d as grpc-timeout: at most eight digits and a unit.
func encodeTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	units := []struct {
		unit string
		d    time.Duration
	}{{"n", time.Nanosecond}, {"u", time.Microsecond}, {"m", time.Millisecond}, {"S", time.Second}, {"M", time.Minute}, {"H", time.Hour}}
	for _, u := range units {
		v := (d + u.d - 1) / u.d
		if v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return "99999999H"
}

// decodeMessage undoes grpc-message's percent-encoding.
func decodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
