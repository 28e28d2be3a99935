package inprocgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/h2grpc"
	"github.com/switchyard-ai/switchyard/internal/inprocgrpc"
	// The real-gRPC backend ("tcp") marshals with the gateway's codec, as
	// the gateway's loopback gRPC does.
	_ "github.com/switchyard-ai/switchyard/internal/protocodec"
)

// Every scenario runs against a real grpc.Server over loopback TCP and
// against the in-process Channel, with the same assertions: the channel's
// contract is to be indistinguishable from the network for its callers.

// waitTimeout bounds every wait for something the other side does; it is
// only reached when a test fails.
const waitTimeout = 10 * time.Second

// A backend serves the services register registers and returns a client
// connection to them. maxRecv is the server's receive limit, 0 the default.
type backend struct {
	name  string
	serve func(tb testing.TB, maxRecv int, register func(grpc.ServiceRegistrar)) grpc.ClientConnInterface
}

var backends = []backend{
	{"tcp", serveTCP},
	{"inprocess", serveInProcess},
	{"h2grpc", serveH2},
}

// serveH2 is the real grpc.Server over loopback TCP called through the data
// plane's own client (internal/h2grpc), which must behave as grpc-go's.
func serveH2(tb testing.TB, maxRecv int, register func(grpc.ServiceRegistrar)) grpc.ClientConnInterface {
	tb.Helper()
	addr := serveLoopback(tb, maxRecv, register)
	cc := h2grpc.New(addr, h2grpc.Options{})
	tb.Cleanup(func() { cc.Close() })
	return cc
}

// serveLoopback serves register's services on a real grpc.Server on a
// free loopback port until the test ends.
func serveLoopback(tb testing.TB, maxRecv int, register func(grpc.ServiceRegistrar)) string {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var opts []grpc.ServerOption
	if maxRecv > 0 {
		opts = append(opts, grpc.MaxRecvMsgSize(maxRecv))
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go srv.Serve(lis)
	tb.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func serveTCP(tb testing.TB, maxRecv int, register func(grpc.ServiceRegistrar)) grpc.ClientConnInterface {
	tb.Helper()
	addr := serveLoopback(tb, maxRecv, register)
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	// Connect up front, so that short deadlines in the tests are spent on
	// the call and not on dialing.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cc.Connect()
	for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
		if !cc.WaitForStateChange(ctx, s) {
			tb.Fatalf("connecting to %s: %v", addr, s)
		}
	}
	return cc
}

func serveInProcess(tb testing.TB, maxRecv int, register func(grpc.ServiceRegistrar)) grpc.ClientConnInterface {
	ch := inprocgrpc.New(inprocgrpc.Options{MaxRecvMsgSize: maxRecv})
	register(ch)
	return ch
}

// procServer is an ext_proc server whose behaviour each scenario sets, and
// which reports what its handler saw.
type procServer struct {
	extprocv3.UnimplementedExternalProcessorServer

	handle  func(p *procServer, s procStream) error
	calls   chan context.Context // each call's context, as its handler starts
	recvErr chan error           // the error that ended a handler's receiving
	gate    chan struct{}        // closed by a test to let a handler go on
	sent    chan struct{}        // closed by a handler to let a test go on
}

type procStream = extprocv3.ExternalProcessor_ProcessServer

func newProcServer(handle func(*procServer, procStream) error) *procServer {
	return &procServer{
		handle:  handle,
		calls:   make(chan context.Context, 1),
		recvErr: make(chan error, 1),
		gate:    make(chan struct{}),
		sent:    make(chan struct{}),
	}
}

func (p *procServer) Process(s procStream) error {
	offer(p.calls, s.Context())
	return p.handle(p, s)
}

// offer sends v unless ch is full: the tests look at the first call only,
// and the benchmark at none.
func offer[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// echo answers each request with reply until Recv fails, and ends the call
// cleanly when the client has closed its side.
func echo(p *procServer, s procStream) error {
	for {
		req, err := s.Recv()
		if err != nil {
			offer(p.recvErr, err)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := s.Send(reply(req)); err != nil {
			return err
		}
	}
}

// request is the request-headers message of an HTTP request for path;
// extra are more header names and values.
func request(path string, extra ...string) *extprocv3.ProcessingRequest {
	kv := append([]string{
		":path", path,
		":method", "POST",
		"authorization", "Bearer sk-test-0123456789",
		"content-type", "application/json",
	}, extra...)
	var hs []*corev3.HeaderValue
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}},
		},
	}
}

// reply answers req by setting its headers back, so that a reply shows
// which request, as the server received it, it answers.
func reply(req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	var set []*corev3.HeaderValueOption
	for _, h := range req.GetRequestHeaders().GetHeaders().GetHeaders() {
		set = append(set, &corev3.HeaderValueOption{Header: proto.Clone(h).(*corev3.HeaderValue)})
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{
				Response: &extprocv3.CommonResponse{
					HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set},
				},
			},
		},
	}
}

// scribble overwrites h in place, bytes included, as a sender reusing a
// message would.
func scribble(h *corev3.HeaderValue) {
	h.Key = "scribbled"
	for i := range h.RawValue {
		h.RawValue[i] = 'X'
	}
}

type clientStream = extprocv3.ExternalProcessor_ProcessClient

func open(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) clientStream {
	t.Helper()
	s, err := extprocv3.NewExternalProcessorClient(cc).Process(ctx, opts...)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	return s
}

func send(t *testing.T, s clientStream, req *extprocv3.ProcessingRequest) {
	t.Helper()
	if err := s.Send(req); err != nil {
		t.Fatalf("Send: %v", err)
	}
}

// recvReply receives a reply and checks that it answers want.
func recvReply(t *testing.T, s clientStream, want *extprocv3.ProcessingRequest) {
	t.Helper()
	got, err := s.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	if w := reply(want); !proto.Equal(got, w) {
		t.Fatalf("Recv = %v, want %v", got, w)
	}
}

func exchange(t *testing.T, s clientStream, path string) {
	t.Helper()
	send(t, s, request(path))
	recvReply(t, s, request(path))
}

func wantCode(t *testing.T, what string, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("%s: error %v, want code %v", what, err, want)
	}
}

func wantEOF(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("%s: error %v, want io.EOF", what, err)
	}
}

// wantSent accepts what SendMsg may return while the call is ending: nil
// when the message was written before the end was noticed, else io.EOF.
func wantSent(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("%s: error %v, want nil or io.EOF", what, err)
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	wait(t, ctx.Done(), what)
}

type ctxKey struct{}

var processScenarios = []struct {
	name    string
	maxRecv int // the server's receive limit; 0: gRPC's default
	handle  func(p *procServer, s procStream) error
	run     func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer)
}{
	{
		name:   "ping-pong",
		handle: echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			for i := range 5 {
				exchange(t, s, fmt.Sprintf("/v1/chat/completions?n=%d", i))
			}
			if err := s.CloseSend(); err != nil {
				t.Fatalf("CloseSend: %v", err)
			}
			_, err := s.Recv()
			wantEOF(t, "Recv after CloseSend", err)
			wantEOF(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"))
		},
	},
	{
		// The client reuses its message right after Send; the handler
		// reads only once it has.
		name: "client message copied",
		handle: func(p *procServer, s procStream) error {
			select {
			case <-p.gate:
			case <-s.Context().Done():
				return s.Context().Err()
			}
			return echo(p, s)
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			req := request("/v1/models")
			send(t, s, req)
			for _, h := range req.GetRequestHeaders().GetHeaders().GetHeaders() {
				scribble(h)
			}
			close(p.gate)
			recvReply(t, s, request("/v1/models"))
		},
	},
	{
		// The handler reuses its reply right after Send; the client reads
		// only once it has.
		name: "server reply copied",
		handle: func(p *procServer, s procStream) error {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			resp := reply(req)
			if err := s.Send(resp); err != nil {
				return err
			}
			for _, o := range resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				scribble(o.Header)
			}
			close(p.sent)
			return echo(p, s)
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			send(t, s, request("/v1/models"))
			wait(t, p.sent, "the handler to reuse its reply")
			recvReply(t, s, request("/v1/models"))
		},
	},
	{
		name:   "metadata",
		handle: echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			ctx = metadata.AppendToOutgoingContext(ctx,
				"x-tenant", "acme",
				"x-request-id", "req-1",
				"x-request-id", "req-2",
				"trace-bin", "\x00\x01\xff")
			// Context values are the client's own; they do not travel.
			ctx = context.WithValue(ctx, ctxKey{}, "client only")
			s := open(t, ctx, cc)
			exchange(t, s, "/v1/chat/completions")
			sctx := wait(t, p.calls, "the handler")
			md, _ := metadata.FromIncomingContext(sctx)
			for key, want := range map[string][]string{
				"x-tenant":     {"acme"},
				"x-request-id": {"req-1", "req-2"},
				"trace-bin":    {"\x00\x01\xff"},
			} {
				if got := md.Get(key); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("handler's metadata %q = %q, want %q", key, got, want)
				}
			}
			if v := sctx.Value(ctxKey{}); v != nil {
				t.Errorf("handler's context has the client's value %v", v)
			}
		},
	},
	{
		name: "handler error",
		handle: func(p *procServer, s procStream) error {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			if err := s.Send(reply(req)); err != nil {
				return err
			}
			return status.Error(codes.PermissionDenied, "route not allowed for tenant acme")
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			exchange(t, s, "/admin")
			_, err := s.Recv()
			wantCode(t, "Recv", err, codes.PermissionDenied)
			if msg := status.Convert(err).Message(); msg != "route not allowed for tenant acme" {
				t.Errorf("status message %q", msg)
			}
			wantEOF(t, "Send after the call ended", s.Send(request("/late")))
		},
	},
	{
		// Replies queued before the handler returns nil all arrive, then
		// io.EOF.
		name: "handler returns nil",
		handle: func(p *procServer, s procStream) error {
			if _, err := s.Recv(); err != nil {
				return err
			}
			for i := range 3 {
				if err := s.Send(reply(request(fmt.Sprintf("/queued/%d", i)))); err != nil {
					return err
				}
			}
			return nil
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			send(t, s, request("/start"))
			for i := range 3 {
				recvReply(t, s, request(fmt.Sprintf("/queued/%d", i)))
			}
			_, err := s.Recv()
			wantEOF(t, "Recv after the replies", err)
			wantEOF(t, "Send after the call ended", s.Send(request("/late")))
			// The call is over, and so is the handler's context.
			waitDone(t, wait(t, p.calls, "the handler"), "the handler's context to end")
		},
	},
	{
		name:   "close send",
		handle: echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			if err := s.CloseSend(); err != nil {
				t.Fatalf("CloseSend: %v", err)
			}
			wantEOF(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"))
			_, err := s.Recv()
			wantEOF(t, "Recv", err)
		},
	},
	{
		name:   "client cancel",
		handle: echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s := open(t, cctx, cc)
			// After an exchange the handler is blocked in Recv.
			exchange(t, s, "/v1/chat/completions")
			cancel()
			_, err := s.Recv()
			wantCode(t, "Recv after cancel", err, codes.Canceled)
			waitDone(t, wait(t, p.calls, "the handler"), "the handler's context to end")
			// The handler must not mistake a cancelled call for a client
			// that finished sending.
			wantCode(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"), codes.Canceled)
			wantSent(t, "Send after cancel", s.Send(request("/late")))
		},
	},
	{
		// A cancelled call the client no longer reads from still ends the
		// handler's context.
		name:   "client cancel without Recv",
		handle: echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			cctx, cancel := context.WithCancel(ctx)
			s := open(t, cctx, cc)
			exchange(t, s, "/v1/chat/completions")
			cancel()
			waitDone(t, wait(t, p.calls, "the handler"), "the handler's context to end")
			wantCode(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"), codes.Canceled)
			wantSent(t, "Send after cancel", s.Send(request("/late")))
			_, err := s.Recv()
			wantCode(t, "Recv after cancel", err, codes.Canceled)
		},
	},
	{
		// The handler waits on its context and returns its error, as
		// handlers commonly do.
		name: "deadline",
		handle: func(p *procServer, s procStream) error {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			if err := s.Send(reply(req)); err != nil {
				return err
			}
			<-s.Context().Done()
			return s.Context().Err()
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			s := open(t, dctx, cc)
			exchange(t, s, "/v1/chat/completions")
			_, err := s.Recv()
			wantCode(t, "Recv past the deadline", err, codes.DeadlineExceeded)
			sctx := wait(t, p.calls, "the handler")
			waitDone(t, sctx, "the handler's context to end")
			d, _ := dctx.Deadline()
			if sd, ok := sctx.Deadline(); !ok || sd.Sub(d).Abs() > time.Second {
				t.Errorf("handler's deadline %v (%v), want about %v", sd, ok, d)
			}
		},
	},
	{
		name: "call receive limit",
		handle: func(p *procServer, s procStream) error {
			req, err := s.Recv()
			if err != nil {
				return err
			}
			if err := s.Send(reply(req)); err != nil {
				return err
			}
			if err := s.Send(reply(request("/big", "x-pad", strings.Repeat("p", 4096)))); err != nil {
				return err
			}
			return echo(p, s)
		},
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc, grpc.MaxCallRecvMsgSize(1024))
			exchange(t, s, "/small")
			_, err := s.Recv()
			wantCode(t, "Recv of a reply over the limit", err, codes.ResourceExhausted)
			// The client refused the call, which cancels it for the handler.
			waitDone(t, wait(t, p.calls, "the handler"), "the handler's context to end")
			wantCode(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"), codes.Canceled)
		},
	},
	{
		name:    "server receive limit",
		maxRecv: 1024,
		handle:  echo,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			s := open(t, ctx, cc)
			exchange(t, s, "/small")
			wantSent(t, "Send over the limit", s.Send(request("/big", "x-pad", strings.Repeat("p", 4096))))
			_, err := s.Recv()
			wantCode(t, "Recv", err, codes.ResourceExhausted)
			wantCode(t, "handler's Recv", wait(t, p.recvErr, "the handler's Recv"), codes.ResourceExhausted)
		},
	},
	{
		name: "unknown method",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, p *procServer) {
			for _, method := range []string{
				"/envoy.service.ext_proc.v3.ExternalProcessor/NoSuchMethod",
				"/no.such.Service/Process",
			} {
				desc := &grpc.StreamDesc{StreamName: "x", ServerStreams: true, ClientStreams: true}
				// A network server's answer arrives with the first Recv;
				// the channel may know at once.
				s, err := cc.NewStream(ctx, desc, method)
				if err == nil {
					err = s.RecvMsg(new(extprocv3.ProcessingResponse))
				}
				wantCode(t, method, err, codes.Unimplemented)
			}
		},
	},
}

func TestProcessConformance(t *testing.T) {
	for _, sc := range processScenarios {
		for _, b := range backends {
			t.Run(sc.name+"/"+b.name, func(t *testing.T) {
				handle := sc.handle
				if handle == nil {
					handle = func(*procServer, procStream) error {
						t.Error("handler called")
						return nil
					}
				}
				p := newProcServer(handle)
				cc := b.serve(t, sc.maxRecv, func(r grpc.ServiceRegistrar) {
					extprocv3.RegisterExternalProcessorServer(r, p)
				})
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				defer cancel()
				sc.run(t, ctx, cc, p)
			})
		}
	}
}

// healthServer answers Check by the service name, and keeps what its last
// call saw.
type healthServer struct {
	healthpb.UnimplementedHealthServer

	calls chan context.Context
	reqs  chan *healthpb.HealthCheckRequest
	resps chan *healthpb.HealthCheckResponse
}

func (h *healthServer) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	offer(h.calls, ctx)
	offer(h.reqs, req)
	var resp *healthpb.HealthCheckResponse
	switch req.Service {
	case "", "ready":
		resp = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	case "draining":
		resp = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}
	case "forbidden":
		return nil, status.Error(codes.PermissionDenied, "health of forbidden is private")
	case "slow":
		// Hold the call until the client gives up, then say why, as
		// handlers commonly do.
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		return nil, status.Errorf(codes.NotFound, "unknown service %q", req.Service)
	}
	offer(h.resps, resp)
	return resp, nil
}

func check(ctx context.Context, cc grpc.ClientConnInterface, service string, opts ...grpc.CallOption) (*healthpb.HealthCheckResponse, error) {
	return healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: service}, opts...)
}

var checkScenarios = []struct {
	name    string
	maxRecv int
	run     func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer)
}{
	{
		name: "reply",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			for service, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
				"ready":    healthpb.HealthCheckResponse_SERVING,
				"draining": healthpb.HealthCheckResponse_NOT_SERVING,
			} {
				resp, err := check(ctx, cc, service)
				if err != nil || resp.GetStatus() != want {
					t.Errorf("Check(%q) = %v, %v; want %v", service, resp, err, want)
				}
			}
		},
	},
	{
		name: "handler error",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			_, err := check(ctx, cc, "forbidden")
			wantCode(t, "Check", err, codes.PermissionDenied)
			if msg := status.Convert(err).Message(); msg != "health of forbidden is private" {
				t.Errorf("status message %q", msg)
			}
			_, err = check(ctx, cc, "nosuch")
			wantCode(t, "Check", err, codes.NotFound)
		},
	},
	{
		name: "metadata",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", "acme", "x-request-id", "req-1")
			if _, err := check(ctx, cc, ""); err != nil {
				t.Fatalf("Check: %v", err)
			}
			md, _ := metadata.FromIncomingContext(wait(t, h.calls, "the handler"))
			if got := md.Get("x-tenant"); len(got) != 1 || got[0] != "acme" {
				t.Errorf("handler's x-tenant = %q", got)
			}
			if got := md.Get("x-request-id"); len(got) != 1 || got[0] != "req-1" {
				t.Errorf("handler's x-request-id = %q", got)
			}
		},
	},
	{
		// Neither side's message is the other's: changing them after the
		// call changes nothing on the other side.
		name: "messages copied",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			req := &healthpb.HealthCheckRequest{Service: "ready"}
			resp, err := healthpb.NewHealthClient(cc).Check(ctx, req)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			req.Service = "scribbled"
			sreq := wait(t, h.reqs, "the handler's request")
			sresp := wait(t, h.resps, "the handler's reply")
			sresp.Status = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
			if sreq.GetService() != "ready" {
				t.Errorf("handler's request changed to %q", sreq.GetService())
			}
			if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("client's reply changed to %v", resp.GetStatus())
			}
		},
	},
	{
		name: "deadline",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			dctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			_, err := check(dctx, cc, "slow")
			wantCode(t, "Check past the deadline", err, codes.DeadlineExceeded)
			waitDone(t, wait(t, h.calls, "the handler"), "the handler's context to end")
		},
	},
	{
		name: "client cancel",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			started := make(chan context.Context, 1)
			go func() {
				// Cancel once the handler runs; if it never does, Check
				// ends at the test's timeout and fails.
				select {
				case sctx := <-h.calls:
					started <- sctx
					cancel()
				case <-cctx.Done():
				}
			}()
			_, err := check(cctx, cc, "slow")
			wantCode(t, "Check after cancel", err, codes.Canceled)
			waitDone(t, wait(t, started, "the handler"), "the handler's context to end")
		},
	},
	{
		name: "call receive limit",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			// A SERVING reply encodes in two bytes.
			_, err := check(ctx, cc, "ready", grpc.MaxCallRecvMsgSize(1))
			wantCode(t, "Check", err, codes.ResourceExhausted)
		},
	},
	{
		name:    "server receive limit",
		maxRecv: 1024,
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			_, err := check(ctx, cc, strings.Repeat("s", 4096))
			wantCode(t, "Check", err, codes.ResourceExhausted)
			if _, err := check(ctx, cc, "ready"); err != nil {
				t.Errorf("Check under the limit: %v", err)
			}
		},
	},
	{
		name: "unknown method",
		run: func(t *testing.T, ctx context.Context, cc grpc.ClientConnInterface, h *healthServer) {
			for _, method := range []string{"/grpc.health.v1.Health/NoSuchMethod", "/no.such.Service/Check"} {
				err := cc.Invoke(ctx, method, &healthpb.HealthCheckRequest{}, new(healthpb.HealthCheckResponse))
				wantCode(t, method, err, codes.Unimplemented)
			}
		},
	},
}

func TestCheckConformance(t *testing.T) {
	for _, sc := range checkScenarios {
		for _, b := range backends {
			t.Run(sc.name+"/"+b.name, func(t *testing.T) {
				h := &healthServer{
					calls: make(chan context.Context, 1),
					reqs:  make(chan *healthpb.HealthCheckRequest, 1),
					resps: make(chan *healthpb.HealthCheckResponse, 1),
				}
				cc := b.serve(t, sc.maxRecv, func(r grpc.ServiceRegistrar) {
					healthpb.RegisterHealthServer(r, h)
				})
				ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
				defer cancel()
				sc.run(t, ctx, cc, h)
			})
		}
	}
}

// BenchmarkProcessExchange is one ext_proc call of five request-headers
// exchanges, as the gateway makes per request.
func BenchmarkProcessExchange(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			p := newProcServer(echo)
			cc := be.serve(b, 0, func(r grpc.ServiceRegistrar) {
				extprocv3.RegisterExternalProcessorServer(r, p)
			})
			c := extprocv3.NewExternalProcessorClient(cc)
			ctx := b.Context()
			req := request("/v1/chat/completions")
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.Process(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for range 5 {
					if err := s.Send(req); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Recv(); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.CloseSend(); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Recv(); !errors.Is(err, io.EOF) {
					b.Fatalf("Recv at the end: %v", err)
				}
			}
		})
	}
}
