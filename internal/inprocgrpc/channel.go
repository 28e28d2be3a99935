// Package inprocgrpc provides an in-process gRPC channel: a
// grpc.ClientConnInterface whose calls run the services registered on it in
// the same process, without sockets, HTTP/2 framing or serialization.
//
// The embedded gateway (`switchyard run`) puts its data plane, ext_proc
// server and rate limit service in one process; between them every request
// makes five ext_proc exchanges and a rate limit call, and over loopback
// gRPC each exchange costs a socket write and read on both sides and four
// goroutine hand-offs (the writers' and readers' goroutines), which on a
// small machine is most of the latency the gateway adds. On this channel an
// exchange is two hand-offs (to the stream's handler goroutine and back).
// The embedded gateway now uses the channel for the rate limit service's
// unary calls only (which run on the caller's goroutine): its data plane
// calls extproc's per-stream handler directly, on the request's goroutine,
// with no hand-off at all (internal/gateway's localExtProc,
// extproc.Session), and hands its body messages to extproc as deep copies
// made by this package's Copier, the copies the channel makes. The services and
// their generated stubs are the same ones a network server runs; what the
// channel keeps of gRPC's contract:
//
//   - messages are deep-copied, so sender and receiver never share memory
//     (a sender may reuse a message once SendMsg returns, as on a wire);
//   - outgoing metadata arrives as incoming metadata; deadlines and
//     cancellation reach the server's context (a unary handler's context
//     has the caller's deadline, cancellation and error: it runs within
//     Invoke); a handler's error arrives as
//     its status, a nil error as io.EOF after the last message;
//   - receive-size limits (grpc.MaxCallRecvMsgSize on calls, Options on the
//     server side) fail the call with ResourceExhausted;
//   - unknown services and methods fail with Unimplemented.
//
// Interceptors and compression are not offered, and a unary handler's
// grpc.SetHeader and SetTrailer are accepted but not delivered: nothing in
// this gateway uses them over this channel.
package inprocgrpc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Options configure a Channel.
type Options struct {
	// MaxRecvMsgSize is the largest message a server on the channel accepts,
	// as grpc.MaxRecvMsgSize. 0: gRPC's default of 4 MiB.
	MaxRecvMsgSize int
}

// defaultMaxRecv is grpc-go's default server receive limit.
const defaultMaxRecv = 4 << 20

// Channel is an in-process gRPC channel and the registrar of the services
// it serves. Register services before the first call.
type Channel struct {
	maxRecv int
	// work hands a stream to an idle worker, which runs its handler
	// (unbuffered: a send succeeds only when one is waiting).
	work    chan *stream
	workers chan struct{} // tokens: at most cap(workers) workers

	mu       sync.RWMutex
	services map[string]*service
}

type service struct {
	impl    any
	methods map[string]*grpc.MethodDesc
	streams map[string]*grpc.StreamDesc
	// unary holds each method's transport stream, shared by its calls
	// (it is the method's name and nothing else).
	unary map[string]*unaryTransport
}

var (
	_ grpc.ClientConnInterface = (*Channel)(nil)
	_ grpc.ServiceRegistrar    = (*Channel)(nil)
)

// New returns a Channel with no services.
func New(opts Options) *Channel {
	c := &Channel{maxRecv: opts.MaxRecvMsgSize, services: map[string]*service{},
		work: make(chan *stream), workers: make(chan struct{}, 4*runtime.GOMAXPROCS(0))}
	if c.maxRecv <= 0 {
		c.maxRecv = defaultMaxRecv
	}
	return c
}

// RegisterService registers impl as the service desc describes, as
// grpc.Server does; it panics on a duplicate or an impl of the wrong type.
func (c *Channel) RegisterService(desc *grpc.ServiceDesc, impl any) {
	if ht := reflect.TypeOf(desc.HandlerType).Elem(); !reflect.TypeOf(impl).Implements(ht) {
		panic(fmt.Sprintf("inprocgrpc: %T does not implement %v", impl, ht))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.services[desc.ServiceName]; dup {
		panic("inprocgrpc: service " + desc.ServiceName + " registered twice")
	}
	s := &service{impl: impl, methods: map[string]*grpc.MethodDesc{}, streams: map[string]*grpc.StreamDesc{},
		unary: map[string]*unaryTransport{}}
	for i := range desc.Methods {
		name := desc.Methods[i].MethodName
		s.methods[name] = &desc.Methods[i]
		s.unary[name] = newUnaryTransport("/" + desc.ServiceName + "/" + name)
	}
	for i := range desc.Streams {
		s.streams[desc.Streams[i].StreamName] = &desc.Streams[i]
	}
	c.services[desc.ServiceName] = s
}

// lookup splits "/package.Service/Method".
func (c *Channel) lookup(method string) (*service, string, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, "", status.Errorf(codes.Unimplemented, "malformed method name %q", method)
	}
	c.mu.RLock()
	s := c.services[svc]
	c.mu.RUnlock()
	if s == nil {
		return nil, "", status.Errorf(codes.Unimplemented, "unknown service %s", svc)
	}
	return s, name, nil
}

// Invoke makes a unary call.
func (c *Channel) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	s, name, err := c.lookup(method)
	if err != nil {
		return err
	}
	md := s.methods[name]
	if md == nil {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	sts := s.unary[name]
	if sts.method != method {
		// A name gRPC would have routed here too (no leading slash).
		sts = newUnaryTransport(method)
	}
	sctx := unaryContext(ctx, sts)
	dec := func(m any) error { return copyMessage(m, args, c.maxRecv) }
	out, err := md.Handler(s.impl, sctx, dec, nil)
	if err != nil {
		return handlerStatus(err)
	}
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return copyMessage(reply, out, callMaxRecv(opts))
}

// NewStream opens a streaming call; the handler runs on a worker goroutine.
func (c *Channel) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, name, err := c.lookup(method)
	if err != nil {
		return nil, err
	}
	sd := s.streams[name]
	if sd == nil {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	st := &stream{
		method:        method,
		clientCtx:     ctx,
		clientMaxRecv: callMaxRecv(opts),
		serverMaxRecv: c.maxRecv,
		headerSent:    make(chan struct{}),
		handler:       sd.Handler,
		impl:          s.impl,
	}
	st.toServer.init()
	st.toClient.init()
	st.server.st = st
	st.client.st = st
	st.serverCtx, st.cancel = serverContext(ctx, transportStream{&st.server})
	c.run(st)
	return &st.client, nil
}

// workerIdle is how long a stream worker waits for work before it exits.
const workerIdle = 30 * time.Second

// run runs a stream's handler on a worker goroutine, as grpc.Server does
// with NumStreamWorkers: a worker's stack has already grown to what the
// handler needs, where a fresh goroutine per stream copies its stack as it
// grows, every time. With every worker busy, f gets a goroutine of its own.
func (c *Channel) run(st *stream) {
	select {
	case c.work <- st:
		return
	default:
	}
	select {
	case c.workers <- struct{}{}:
		go c.worker(st)
	default:
		go st.serve()
	}
}

func (c *Channel) worker(st *stream) {
	defer func() { <-c.workers }()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		st.serve()
		idle.Reset(workerIdle)
		select {
		case st = <-c.work:
		case <-idle.C:
			return
		}
	}
}

// peerContext is where every handler's context starts: the in-process
// peer, the same for every call.
var peerContext = peer.NewContext(context.Background(), &peer.Peer{Addr: inProcessAddr{}})

// serverContext is a handler's context: the client's deadline and
// cancellation and its outgoing metadata as incoming metadata, but none of
// its other values, as across a network.
func serverContext(client context.Context, sts grpc.ServerTransportStream) (context.Context, context.CancelFunc) {
	ctx := peerContext
	if md, ok := metadata.FromOutgoingContext(client); ok {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	ctx = grpc.NewContextWithServerTransportStream(ctx, sts)
	var cancel context.CancelFunc
	d, hasDeadline := client.Deadline()
	if hasDeadline {
		ctx, cancel = context.WithDeadline(ctx, d)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	stop := context.AfterFunc(client, func() {
		// Past the deadline ctx's own timer ends it with DeadlineExceeded,
		// as the client sees; cancelling could beat the timer and make a
		// handler returning ctx.Err() end the call as Canceled.
		if hasDeadline && errors.Is(client.Err(), context.DeadlineExceeded) {
			return
		}
		cancel()
	})
	return ctx, func() { stop(); cancel() }
}

// unaryContext is a unary handler's context: the values of a server's
// (the peer, the method's transport stream, the client's outgoing metadata
// as incoming metadata) and the client's own deadline, cancellation and
// error. The handler runs on the caller's goroutine within Invoke, so the
// client's context is the call's lifetime, and its Err is the one the
// client sees (DeadlineExceeded past the deadline, Canceled on cancel).
// Unlike serverContext it derives no cancel context, timer or AfterFunc
// per call (a rate limit call's seven allocations, three calls a request).
func unaryContext(client context.Context, sts *unaryTransport) context.Context {
	ctx := sts.ctx
	if md, ok := metadata.FromOutgoingContext(client); ok {
		ctx = metadata.NewIncomingContext(ctx, md)
	}
	return &callContext{Context: ctx, client: client}
}

// callContext takes its values from Context and its lifetime from client.
type callContext struct {
	context.Context
	client context.Context
}

func (c *callContext) Deadline() (time.Time, bool) { return c.client.Deadline() }
func (c *callContext) Done() <-chan struct{}       { return c.client.Done() }
func (c *callContext) Err() error                  { return c.client.Err() }

// AfterFunc lets contexts a handler derives follow the client's without a
// goroutine each (context.WithCancel looks for it on its parent).
func (c *callContext) AfterFunc(f func()) func() bool { return context.AfterFunc(c.client, f) }

// handlerStatus is the status a handler's error ends its call with. As in
// grpc.Server, a context error keeps its code (handlers commonly return
// ctx.Err()) and any other non-status error is Unknown.
func handlerStatus(err error) error {
	if s, ok := status.FromError(err); ok {
		return s.Err()
	}
	return status.FromContextError(err).Err()
}

// callMaxRecv is the call's grpc.MaxCallRecvMsgSize, or no limit.
func callMaxRecv(opts []grpc.CallOption) int {
	n := math.MaxInt
	for _, o := range opts {
		if m, ok := o.(grpc.MaxRecvMsgSizeCallOption); ok {
			n = m.MaxRecvMsgSize
		}
	}
	return n
}

// copyMessage deep-copies src into dst, as receiving it would, failing
// with ResourceExhausted when its encoding is over limit. A unary call's
// messages are copied this way: the caller is blocked in Invoke while its
// request is read, and a handler is done with its reply once it returns.
func copyMessage(dst, src any, limit int) error {
	s, ok := src.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inprocgrpc: messages must be protocol buffers, got %T", src)
	}
	return transfer(dst, s, limit, func(d, s proto.Message) {
		if c, ok := fastClone(s, nil); ok && moveFast(d, c) {
			return
		}
		proto.Merge(d, s)
	})
}

// moveMessage moves src, which nothing else references (the clone a
// stream's SendMsg made, since the sender may reuse its message at once),
// into dst: a shallow move of its fields, so a streamed message is
// deep-copied once on its way, not twice.
func moveMessage(dst any, src proto.Message, limit int) error {
	return transfer(dst, src, limit, func(d, s proto.Message) {
		if moveFast(d, s) {
			return
		}
		dm := d.ProtoReflect()
		sm := s.ProtoReflect()
		sm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			dm.Set(fd, v)
			return true
		})
		if u := sm.GetUnknown(); len(u) > 0 {
			dm.SetUnknown(u)
		}
	})
}

// transfer checks what receiving src into dst would (type, size limit),
// then resets dst and fills it with fill.
func transfer(dst any, src proto.Message, limit int, fill func(dst, src proto.Message)) error {
	d, ok := dst.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inprocgrpc: messages must be protocol buffers, got %T", dst)
	}
	if limit < math.MaxInt32 {
		if n := proto.Size(src); n > limit {
			return status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, limit)
		}
	}
	if dn, sn := d.ProtoReflect().Descriptor().FullName(), src.ProtoReflect().Descriptor().FullName(); dn != sn {
		return status.Errorf(codes.Internal, "inprocgrpc: received %s into %s", sn, dn)
	}
	proto.Reset(d)
	fill(d, src)
	return nil
}

// inProcessAddr is the peer address handlers see.
type inProcessAddr struct{}

func (inProcessAddr) Network() string { return "inprocess" }
func (inProcessAddr) String() string  { return "inprocess" }

var _ net.Addr = inProcessAddr{}

// unaryTransport lets a unary handler call grpc.Method; the header and
// trailer calls are accepted and dropped (unary replies carry none here).
type unaryTransport struct {
	method string
	// ctx is the values every call of the method starts from: the peer
	// and the transport stream (this), the same for every call.
	ctx context.Context
}

func newUnaryTransport(method string) *unaryTransport {
	t := &unaryTransport{method: method}
	t.ctx = grpc.NewContextWithServerTransportStream(peerContext, t)
	return t
}

func (t *unaryTransport) Method() string                  { return t.method }
func (t *unaryTransport) SetHeader(metadata.MD) error     { return nil }
func (t *unaryTransport) SendHeader(metadata.MD) error    { return nil }
func (t *unaryTransport) SetTrailer(md metadata.MD) error { return nil }
