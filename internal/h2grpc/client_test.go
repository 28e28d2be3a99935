package h2grpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// These tests drive the client against a real grpc-go server on loopback
// TCP; internal/inprocgrpc's conformance table runs it beside grpc-go's
// client as well.

// waitTimeout bounds waits for the other side; reached only on failure.
const waitTimeout = 10 * time.Second

// procServer runs handle for each Process stream.
type procServer struct {
	extprocv3.UnimplementedExternalProcessorServer
	handle func(extprocv3.ExternalProcessor_ProcessServer) error
}

func (p *procServer) Process(s extprocv3.ExternalProcessor_ProcessServer) error { return p.handle(s) }

// echo answers each message with a reply carrying its body, until the
// client half-closes.
func echo(s extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(replyTo(req)); err != nil {
			return err
		}
	}
}

func replyTo(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
			BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: req.GetRequestBody().GetBody()}},
		}},
	}}
}

func bodyMsg(b []byte) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: b},
	}}
}

func replyBody(r *extprocv3.ProcessingResponse) []byte {
	return r.GetRequestBody().GetResponse().GetBodyMutation().GetBody()
}

// countingListener counts and keeps the connections it accepts.
type countingListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

func (l *countingListener) accepted() []net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]net.Conn(nil), l.conns...)
}

// serve starts a grpc-go server with handle and returns a client to it.
func serve(t *testing.T, handle func(extprocv3.ExternalProcessor_ProcessServer) error, opts ...grpc.ServerOption) (*ClientConn, *countingListener, *grpc.Server) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: l}
	srv := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(srv, &procServer{handle: handle})
	go srv.Serve(lis)
	cc := New(l.Addr().String(), Options{})
	t.Cleanup(func() {
		cc.Close()
		srv.Stop()
	})
	return cc, lis, srv
}

func process(ctx context.Context, t *testing.T, cc grpc.ClientConnInterface, opts ...grpc.CallOption) extprocv3.ExternalProcessor_ProcessClient {
	t.Helper()
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx, opts...)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	return s
}

// exchange sends body and checks that the reply echoes it.
func exchange(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient, body []byte) {
	t.Helper()
	if err := s.Send(bodyMsg(body)); err != nil {
		t.Fatalf("Send: %v", err)
	}
	r, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if !bytes.Equal(replyBody(r), body) {
		t.Fatalf("reply body of %d bytes, want the %d sent", len(replyBody(r)), len(body))
	}
}

// chat makes 20 exchanges on a stream and ends it, from a goroutine of its
// own.
func chat(ctx context.Context, cc grpc.ClientConnInterface, i int) error {
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx)
	if err != nil {
		return err
	}
	for j := range 20 {
		body := bytes.Repeat([]byte{byte(i)}, 100+j*50)
		if err := s.Send(bodyMsg(body)); err != nil {
			return err
		}
		r, err := s.Recv()
		if err != nil {
			return err
		}
		if !bytes.Equal(replyBody(r), body) {
			return fmt.Errorf("exchange %d: reply is not the body sent", j)
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	if _, err := s.Recv(); err != io.EOF {
		return fmt.Errorf("Recv after CloseSend: %v, want io.EOF", err)
	}
	return nil
}

// finish half-closes s and expects the server's clean end.
func finish(t *testing.T, s extprocv3.ExternalProcessor_ProcessClient) {
	t.Helper()
	if err := s.CloseSend(); err != nil {
		t.Fatalf("CloseSend: %v", err)
	}
	if _, err := s.Recv(); err != io.EOF {
		t.Fatalf("Recv after CloseSend: %v, want io.EOF", err)
	}
}

func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want code %v", what, err, code)
	}
}

func TestClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"concurrent streams", func(t *testing.T) {
			cc, lis, _ := serve(t, echo)
			ctx := context.Background()
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := chat(ctx, cc, i); err != nil {
						t.Errorf("stream %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if n := len(lis.accepted()); n != 1 {
				t.Fatalf("%d connections, want the streams to share 1", n)
			}
		}},
		{"max concurrent streams", func(t *testing.T) {
			cc, lis, _ := serve(t, echo, grpc.MaxConcurrentStreams(2))
			ctx := context.Background()
			var open []extprocv3.ExternalProcessor_ProcessClient
			for range 5 {
				s := process(ctx, t, cc)
				exchange(t, s, []byte("x"))
				open = append(open, s)
			}
			if n := len(lis.accepted()); n != 3 {
				t.Fatalf("%d connections for 5 streams at 2 per connection, want 3", n)
			}
			for _, s := range open {
				finish(t, s)
			}
		}},
		{"messages larger than the windows", func(t *testing.T) {
			// 9 MiB each way: above the 4 MiB stream and (with the reply
			// queued behind it) the 16 MiB connection windows' quarter
			// thresholds, and above grpc-go's default 64 KiB initial
			// window the server starts with.
			cc, _, _ := serve(t, echo, grpc.MaxRecvMsgSize(32<<20), grpc.MaxSendMsgSize(32<<20))
			s := process(context.Background(), t, cc, grpc.MaxCallRecvMsgSize(32<<20))
			big := bytes.Repeat([]byte("0123456789abcdef"), 9<<16)
			for range 3 {
				exchange(t, s, big)
			}
			finish(t, s)
		}},
		{"receive limit", func(t *testing.T) {
			cc, _, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				if err := s.Send(replyTo(bodyMsg(make([]byte, 5<<20)))); err != nil {
					return err
				}
				<-s.Context().Done()
				return nil
			})
			s := process(context.Background(), t, cc)
			if err := s.Send(bodyMsg([]byte("a"))); err != nil {
				t.Fatalf("Send: %v", err)
			}
			_, err := s.Recv()
			wantCode(t, "Recv of a reply over the default 4 MiB", err, codes.ResourceExhausted)
		}},
		{"server closes the connection", func(t *testing.T) {
			reached := make(chan struct{}, 1)
			cc, lis, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				reached <- struct{}{}
				<-s.Context().Done()
				return nil
			})
			s := process(context.Background(), t, cc)
			if err := s.Send(bodyMsg([]byte("a"))); err != nil {
				t.Fatal(err)
			}
			<-reached
			for _, c := range lis.accepted() {
				c.Close()
			}
			_, err := s.Recv()
			wantCode(t, "Recv on a connection the server closed", err, codes.Unavailable)
			if err := s.Send(bodyMsg([]byte("b"))); err != io.EOF {
				t.Fatalf("Send after the failure: %v, want io.EOF", err)
			}
			// The next stream dials again.
			s2 := process(context.Background(), t, cc)
			if err := s2.Send(bodyMsg([]byte("c"))); err != nil {
				t.Fatal(err)
			}
			<-reached
			if n := len(lis.accepted()); n != 2 {
				t.Fatalf("%d connections, want a second one", n)
			}
		}},
		{"status error", func(t *testing.T) {
			cc, _, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				s.SetTrailer(metadata.Pairs("why", "because"))
				return status.Error(codes.PermissionDenied, "100% denied: ünïcode\nand a newline")
			})
			s := process(context.Background(), t, cc)
			if err := s.Send(bodyMsg([]byte("a"))); err != nil {
				t.Fatal(err)
			}
			_, err := s.Recv()
			wantCode(t, "Recv", err, codes.PermissionDenied)
			if msg := status.Convert(err).Message(); msg != "100% denied: ünïcode\nand a newline" {
				t.Fatalf("message %q", msg)
			}
			if got := s.Trailer().Get("why"); len(got) != 1 || got[0] != "because" {
				t.Fatalf("trailer why = %q", got)
			}
			if _, err := s.Recv(); status.Code(err) != codes.PermissionDenied {
				t.Fatalf("second Recv: %v, want the status again", err)
			}
		}},
		{"metadata and deadline reach the server", func(t *testing.T) {
			type seen struct {
				md       metadata.MD
				deadline time.Time
			}
			got := make(chan seen, 1)
			cc, _, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				md, _ := metadata.FromIncomingContext(s.Context())
				d, _ := s.Context().Deadline()
				got <- seen{md, d}
				return nil
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-abc-def-01", "x-bin", "\x00\x01")
			s := process(ctx, t, cc)
			if _, err := s.Recv(); err != io.EOF {
				t.Fatalf("Recv: %v, want io.EOF", err)
			}
			sn := <-got
			if v := sn.md.Get("traceparent"); len(v) != 1 || v[0] != "00-abc-def-01" {
				t.Fatalf("traceparent %q", v)
			}
			if v := sn.md.Get("x-bin"); len(v) != 1 || v[0] != "\x00\x01" {
				t.Fatalf("x-bin %q", v)
			}
			if left := time.Until(sn.deadline); left <= 50*time.Second || left > time.Minute {
				t.Fatalf("server deadline %v away, want about a minute", left)
			}
		}},
		{"caller cancel", func(t *testing.T) {
			reached := make(chan struct{})
			serverErr := make(chan error, 1)
			cc, _, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				close(reached)
				_, err := s.Recv()
				serverErr <- err
				return err
			})
			ctx, cancel := context.WithCancel(context.Background())
			s := process(ctx, t, cc)
			if err := s.Send(bodyMsg([]byte("a"))); err != nil {
				t.Fatal(err)
			}
			<-reached
			cancel()
			_, err := s.Recv()
			wantCode(t, "Recv after cancel", err, codes.Canceled)
			select {
			case err := <-serverErr:
				wantCode(t, "the server's Recv", err, codes.Canceled)
			case <-time.After(waitTimeout):
				t.Fatal("the server did not see the cancel")
			}
		}},
		{"unary call with header and trailer", func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			rlsv3.RegisterRateLimitServiceServer(srv, rlsFunc(func(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
				_ = grpc.SetHeader(ctx, metadata.Pairs("h", "1"))
				_ = grpc.SetTrailer(ctx, metadata.Pairs("t", "2"))
				if req.GetDomain() == "deny" {
					return nil, status.Error(codes.ResourceExhausted, "over the limit")
				}
				return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}, nil
			}))
			go srv.Serve(l)
			defer srv.Stop()
			cc := New(l.Addr().String(), Options{})
			defer cc.Close()
			var hdr, trl metadata.MD
			resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(),
				&rlsv3.RateLimitRequest{Domain: "d"}, grpc.Header(&hdr), grpc.Trailer(&trl))
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Fatalf("ShouldRateLimit: %v, %v", resp, err)
			}
			if hdr.Get("h")[0] != "1" || trl.Get("t")[0] != "2" {
				t.Fatalf("header %v, trailer %v", hdr, trl)
			}
			_, err = rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "deny"})
			wantCode(t, "ShouldRateLimit refused", err, codes.ResourceExhausted)
		}},
		{"unix socket", func(t *testing.T) {
			path := t.TempDir() + "/s.sock"
			l, err := net.Listen("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			extprocv3.RegisterExternalProcessorServer(srv, &procServer{handle: echo})
			go srv.Serve(l)
			defer srv.Stop()
			cc := New("unix:"+path, Options{})
			defer cc.Close()
			s := process(context.Background(), t, cc)
			exchange(t, s, []byte("over a unix socket"))
			finish(t, s)
		}},
		{"server unreachable", func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			l.Close()
			cc := New(addr, Options{})
			defer cc.Close()
			_, err = extprocv3.NewExternalProcessorClient(cc).Process(context.Background())
			wantCode(t, "Process to a closed port", err, codes.Unavailable)
		}},
		{"abandon", func(t *testing.T) {
			// What the data plane does with a Process stream it is done
			// with: the server sees the half-close, then the cancel.
			seen := make(chan error, 2)
			cc, _, _ := serve(t, func(s extprocv3.ExternalProcessor_ProcessServer) error {
				if _, err := s.Recv(); err != nil {
					return err
				}
				if err := s.Send(replyTo(bodyMsg([]byte("a")))); err != nil {
					return err
				}
				_, err := s.Recv()
				seen <- err
				<-s.Context().Done()
				seen <- s.Context().Err()
				return nil
			})
			gs := process(context.Background(), t, cc)
			exchange(t, gs, []byte("a"))
			gs.(*grpc.GenericClientStream[extprocv3.ProcessingRequest, extprocv3.ProcessingResponse]).ClientStream.(interface{ Abandon() }).Abandon()
			if err := <-seen; err != io.EOF {
				t.Fatalf("server Recv after Abandon: %v, want io.EOF", err)
			}
			if err := <-seen; !errors.Is(err, context.Canceled) {
				t.Fatalf("server context after Abandon: %v, want canceled", err)
			}
			_, err := gs.Recv()
			wantCode(t, "Recv after Abandon", err, codes.Canceled)
		}},
		{"graceful stop", func(t *testing.T) {
			// One listener address, handed to whichever server is current:
			// the new stream must reach the second server over a new
			// connection while the first drains.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			sw := newSwitchListener(l)
			srv1, srv2 := grpc.NewServer(), grpc.NewServer()
			served := make(chan string, 4)
			for name, srv := range map[string]*grpc.Server{"first": srv1, "second": srv2} {
				extprocv3.RegisterExternalProcessorServer(srv, &procServer{handle: func(s extprocv3.ExternalProcessor_ProcessServer) error {
					served <- name
					return echo(s)
				}})
			}
			l1, l2 := sw.add(), sw.add()
			go srv1.Serve(l1)
			go srv2.Serve(l2)
			defer srv2.Stop()
			defer srv1.Stop()
			cc := New(l.Addr().String(), Options{})
			defer cc.Close()
			goaway := make(chan struct{}, 2)
			cc.testHookGoAway = func() { goaway <- struct{}{} }

			sw.use(l1)
			inflight := process(context.Background(), t, cc)
			exchange(t, inflight, []byte("before"))
			if got := <-served; got != "first" {
				t.Fatalf("first stream served by %s", got)
			}
			sw.use(l2)
			stopped := make(chan struct{})
			go func() {
				srv1.GracefulStop()
				close(stopped)
			}()
			<-goaway
			next := process(context.Background(), t, cc)
			exchange(t, next, []byte("new"))
			if got := <-served; got != "second" {
				t.Fatalf("stream after GOAWAY served by %s, want the second server", got)
			}
			// The in-flight stream still finishes on the draining connection.
			exchange(t, inflight, []byte("after"))
			finish(t, inflight)
			select {
			case <-stopped:
			case <-time.After(waitTimeout):
				t.Fatal("GracefulStop did not return once the in-flight stream ended")
			}
			finish(t, next)
		}},
	} {
		t.Run(tc.name, tc.run)
	}
}

// rlsFunc is a rate limit service answering with a function.
type rlsFunc func(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)

func (f rlsFunc) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return f(ctx, req)
}

// switchListener hands the connections of one listener to the current one
// of its children.
type switchListener struct {
	l   net.Listener
	mu  sync.Mutex
	cur *childListener
}

type childListener struct {
	parent *switchListener
	ch     chan net.Conn
	done   chan struct{}
	once   sync.Once
}

func newSwitchListener(l net.Listener) *switchListener {
	sw := &switchListener{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			sw.mu.Lock()
			cur := sw.cur
			sw.mu.Unlock()
			select {
			case cur.ch <- c:
			case <-cur.done:
				c.Close()
			}
		}
	}()
	return sw
}

func (sw *switchListener) add() *childListener {
	return &childListener{parent: sw, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (sw *switchListener) use(c *childListener) {
	sw.mu.Lock()
	sw.cur = c
	sw.mu.Unlock()
}

func (c *childListener) Accept() (net.Conn, error) {
	select {
	case nc := <-c.ch:
		return nc, nil
	case <-c.done:
		return nil, net.ErrClosed
	}
}

func (c *childListener) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

func (c *childListener) Addr() net.Addr { return c.parent.l.Addr() }
