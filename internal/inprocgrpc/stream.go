package inprocgrpc

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// stream is one streaming call: two message queues and the call's end.
type stream struct {
	method        string
	clientCtx     context.Context
	serverCtx     context.Context
	cancel        context.CancelFunc
	clientMaxRecv int
	serverMaxRecv int

	toServer, toClient queue
	// Memory for the copies each direction's sender makes (copy.go).
	toServerArena, toClientArena arena

	mu         sync.Mutex
	header     metadata.MD
	headerSent chan struct{} // closed once the header is sent
	sentHeader bool
	trailer    metadata.MD

	client clientStream
	server serverStream

	// The handler the stream's worker runs (serve).
	handler grpc.StreamHandler
	impl    any
}

// serve runs the handler and ends the call with its result.
func (st *stream) serve() {
	err := st.handler(st.impl, &st.server)
	end := io.EOF
	if err != nil {
		end = handlerStatus(err)
	}
	st.end(end)
}

// end finishes the call: the client reads what is queued, then end; the
// server's context is cancelled, as gRPC does when an RPC is over. A
// handler still receiving gets err too, not the io.EOF of a CloseSend,
// which would tell it the client had finished cleanly. The server's queue
// closes first: a client whose RecvMsg has returned the call's end must get
// io.EOF from a later SendMsg, never a message queued to nobody.
func (st *stream) end(err error) {
	st.sendHeader(nil)
	st.toServer.close(err)
	st.toClient.close(err)
	st.cancel()
}

func (st *stream) sendHeader(md metadata.MD) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sentHeader {
		return false
	}
	st.header = metadata.Join(st.header, md)
	st.sentHeader = true
	close(st.headerSent)
	return true
}

// clientStream is the caller's side (grpc.ClientStream).
type clientStream struct{ st *stream }

func (c *clientStream) Context() context.Context { return c.st.clientCtx }

func (c *clientStream) Header() (metadata.MD, error) {
	select {
	case <-c.st.headerSent:
		c.st.mu.Lock()
		defer c.st.mu.Unlock()
		return c.st.header.Copy(), nil
	case <-c.st.clientCtx.Done():
		return nil, status.FromContextError(c.st.clientCtx.Err()).Err()
	}
}

// Trailer is the handler's trailer once RecvMsg has returned an error.
func (c *clientStream) Trailer() metadata.MD {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	return c.st.trailer.Copy()
}

func (c *clientStream) CloseSend() error {
	c.st.toServer.close(io.EOF)
	return nil
}

// SendMsg queues a copy of m. After the call has ended it returns io.EOF,
// and RecvMsg says how it ended.
func (c *clientStream) SendMsg(m any) error {
	st := c.st
	if st.clientCtx.Err() != nil {
		// The call is over; RecvMsg says how, as with grpc-go.
		return io.EOF
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inprocgrpc: messages must be protocol buffers, got %T", m)
	}
	if st.serverMaxRecv < math.MaxInt32 {
		if n := proto.Size(pm); n > st.serverMaxRecv {
			// The server refuses it and the call ends, as over a wire.
			st.end(status.Errorf(codes.ResourceExhausted, "grpc: received message larger than max (%d vs. %d)", n, st.serverMaxRecv))
			return io.EOF
		}
	}
	if !st.toServer.push(cloneMessage(pm, &st.toServerArena)) {
		return io.EOF
	}
	return nil
}

func (c *clientStream) RecvMsg(m any) error {
	st := c.st
	msg, err := st.toClient.pop(st.clientCtx)
	if err != nil {
		if errors.Is(err, errContextDone) {
			err = status.FromContextError(st.clientCtx.Err()).Err()
			st.end(err)
		}
		return err
	}
	if err := moveMessage(m, msg, st.clientMaxRecv); err != nil {
		// The client refuses the message and cancels the call, which
		// the handler sees as a cancellation, as over a wire.
		st.toServer.close(status.FromContextError(context.Canceled).Err())
		st.end(err)
		return err
	}
	return nil
}

// serverStream is the handler's side (grpc.ServerStream and, for
// grpc.Method and friends, grpc.ServerTransportStream).
type serverStream struct{ st *stream }

func (s *serverStream) Context() context.Context { return s.st.serverCtx }
func (s *serverStream) Method() string           { return s.st.method }

func (s *serverStream) SetHeader(md metadata.MD) error {
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.sentHeader {
		return status.Error(codes.Internal, "transport: the stream is done or SetHeader was called after SendHeader")
	}
	st.header = metadata.Join(st.header, md)
	return nil
}

func (s *serverStream) SendHeader(md metadata.MD) error {
	if !s.st.sendHeader(md) {
		return status.Error(codes.Internal, "transport: SendHeader called multiple times")
	}
	return nil
}

func (s *serverStream) SetTrailer(md metadata.MD) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.trailer = metadata.Join(s.st.trailer, md)
}

func (s *serverStream) SendMsg(m any) error {
	st := s.st
	if err := st.serverCtx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	pm, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "inprocgrpc: messages must be protocol buffers, got %T", m)
	}
	st.sendHeader(nil)
	if !st.toClient.push(cloneMessage(pm, &st.toClientArena)) {
		return status.Error(codes.Canceled, "the call has ended")
	}
	return nil
}

func (s *serverStream) RecvMsg(m any) error {
	st := s.st
	msg, err := st.toServer.pop(st.serverCtx)
	if err != nil {
		if errors.Is(err, errContextDone) {
			return status.FromContextError(st.serverCtx.Err()).Err()
		}
		return err
	}
	return moveMessage(m, msg, math.MaxInt)
}

// grpc.ServerTransportStream's SetTrailer returns an error.
type transportStream struct{ *serverStream }

func (t transportStream) SetTrailer(md metadata.MD) error { t.serverStream.SetTrailer(md); return nil }

var errContextDone = errors.New("inprocgrpc: context done")

// queue is one direction's messages: any number of senders, one receiver.
// A send never blocks (the callers here keep one message in flight; gRPC's
// flow control would bound a flood, which this channel does not need).
type queue struct {
	mu     sync.Mutex
	items  []proto.Message
	closed bool
	err    error         // what pop returns once items are drained
	ready  chan struct{} // capacity 1: "something changed"
}

// init readies a queue, in place: a stream's queues are part of it.
func (q *queue) init() { q.ready = make(chan struct{}, 1) }

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// push appends m; false once the queue is closed.
func (q *queue) push(m proto.Message) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return false
	}
	q.items = append(q.items, m)
	q.mu.Unlock()
	q.signal()
	return true
}

// close ends the queue with err; the first close wins.
func (q *queue) close(err error) {
	q.mu.Lock()
	if !q.closed {
		q.closed, q.err = true, err
	}
	q.mu.Unlock()
	q.signal()
}

// pop returns the next message, the queue's end, or errContextDone.
func (q *queue) pop(ctx context.Context) (proto.Message, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			// Shift rather than reslice, so the backing array is reused.
			m := q.items[0]
			n := copy(q.items, q.items[1:])
			q.items[n] = nil
			q.items = q.items[:n]
			q.mu.Unlock()
			return m, nil
		}
		if q.closed {
			err := q.err
			q.mu.Unlock()
			return nil, err
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return nil, errContextDone
		}
	}
}
