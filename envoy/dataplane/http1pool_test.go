package dataplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// poolServer is an upstream that counts the connections it accepted and
// reports the ones that went idle or closed.
type poolServer struct {
	*httptest.Server
	accepted atomic.Int32
	idle     chan net.Conn
	closed   chan struct{}
}

func newPoolServer(t *testing.T, useTLS bool, h http.HandlerFunc) *poolServer {
	t.Helper()
	s := &poolServer{idle: make(chan net.Conn, 64), closed: make(chan struct{}, 64)}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(c net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.accepted.Add(1)
		case http.StateIdle:
			select {
			case s.idle <- c:
			default: // more than the test waits for
			}
		case http.StateClosed:
			select {
			case s.closed <- struct{}{}:
			default:
			}
		}
	}
	if useTLS {
		s.StartTLS() // HTTP/1.1 only: EnableHTTP2 is off
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// newTestPool is the pool a cluster of s would get.
func newTestPool(t *testing.T, s *httptest.Server, idle time.Duration) *http1Pool {
	t.Helper()
	c := &cluster{connectTimeout: 5 * time.Second, idleTimeout: idle, proto: protoHTTP1}
	if s.TLS != nil {
		roots := x509.NewCertPool()
		roots.AddCert(s.Certificate())
		// ALPN as the control plane configures an HTTP/1.1 provider.
		c.tls = &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}
	}
	tr, ok := newTransport(c).(*http1Pool)
	if !ok {
		t.Fatalf("an HTTP/1.1 cluster got %T", newTransport(c))
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// poolRequest is a request as the router builds it (attempt).
func poolRequest(ctx context.Context, s *httptest.Server, method, path, body string) *http.Request {
	u, _ := url.Parse(s.URL + path)
	req := &http.Request{Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"User-Agent": {""}}, Host: u.Host}
	if body != "" {
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(strings.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	}
	return req.WithContext(ctx)
}

// roundTrip sends a request and reads its whole body.
func roundTrip(t *testing.T, p *http1Pool, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	_ = resp.Body.Close()
	return resp, string(b)
}

// within waits for ch, failing the test after a generous bound.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func TestHTTP1Pool(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		tlsOn := r.TLS != nil
		fmt.Fprintf(w, "%s %s HTTP/%d.%d tls=%v ua=%q", r.Method, b, r.ProtoMajor, r.ProtoMinor, tlsOn, r.Header.Values("User-Agent"))
	}
	ctx := context.Background()
	waiting := make(chan struct{}, 1)
	for _, tc := range []struct {
		name    string
		tls     bool
		idle    time.Duration
		handler http.HandlerFunc
		// run sends the requests; wantConns is how many connections the
		// upstream accepted for them.
		run       func(t *testing.T, p *http1Pool, s *poolServer)
		wantConns int32
	}{
		{name: "a kept-alive connection is reused", handler: echo, wantConns: 1,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				for i := range 3 {
					_, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", fmt.Sprint("req", i)))
					if want := fmt.Sprintf(`POST req%d HTTP/1.1 tls=false ua=[]`, i); body != want {
						t.Errorf("request %d: upstream saw %q, want %q", i, body, want)
					}
				}
			}},
		{name: "TLS upstream over HTTP/1.1", tls: true, handler: echo, wantConns: 1,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				for range 2 {
					if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", "x")); body != `POST x HTTP/1.1 tls=true ua=[]` {
						t.Errorf("upstream saw %q", body)
					}
				}
			}},
		{name: "the upstream closed the idle connection", handler: echo, wantConns: 2,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", "one"))
				_ = within(t, s.idle, "the idle connection").Close()
				if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", "two")); !strings.HasPrefix(body, "POST two") {
					t.Errorf("upstream saw %q", body)
				}
			}},
		{name: "the upstream closed the idle TLS connection", tls: true, handler: echo, wantConns: 2,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", "one"))
				_ = within(t, s.idle, "the idle connection").Close()
				if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodPost, "/", "two")); !strings.HasPrefix(body, "POST two") {
					t.Errorf("upstream saw %q", body)
				}
			}},
		{name: "Connection: close is not reused", wantConns: 2,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Connection", "close")
				_, _ = io.WriteString(w, "bye")
			},
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				for range 2 {
					if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", "")); body != "bye" {
						t.Errorf("body %q", body)
					}
				}
			}},
		{name: "a body closed early closes the connection", wantConns: 2,
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/big" {
					_, _ = io.WriteString(w, "small")
					return
				}
				w.Header().Set("Content-Length", fmt.Sprint(1<<20))
				chunk := strings.Repeat("x", 32<<10)
				for range 32 {
					if _, err := io.WriteString(w, chunk); err != nil {
						return
					}
				}
			},
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				resp, err := p.RoundTrip(poolRequest(ctx, s.Server, http.MethodGet, "/big", ""))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(resp.Body, make([]byte, 10)); err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
				if _, err := resp.Body.Read(make([]byte, 1)); err == nil {
					t.Error("a read after Close succeeded")
				}
				within(t, s.closed, "the upstream to see the connection closed")
				if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", "")); body != "small" {
					t.Errorf("body %q", body)
				}
			}},
		{name: "chunked response with trailers", wantConns: 1,
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Trailer", "X-Checksum")
				_, _ = io.WriteString(w, "part1;")
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "part2")
				w.Header().Set("X-Checksum", "42")
			},
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				for range 2 {
					resp, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", ""))
					if body != "part1;part2" || resp.Trailer.Get("X-Checksum") != "42" || resp.ContentLength != -1 {
						t.Errorf("body %q, trailers %v, length %d", body, resp.Trailer, resp.ContentLength)
					}
				}
			}},
		{name: "a cancelled context ends the head read and the connection", wantConns: 2,
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/wait" {
					// The server notices a closed connection once the body
					// is read.
					_, _ = io.ReadAll(r.Body)
					waiting <- struct{}{}
					select {
					case <-r.Context().Done(): // the connection closed
					case <-time.After(20 * time.Second): // a bound if it never does
					}
					return
				}
				_, _ = io.WriteString(w, "ok")
			},
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", ""))
				within(t, s.idle, "the first request's end")
				cctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() {
					_, err := p.RoundTrip(poolRequest(cctx, s.Server, http.MethodPost, "/wait", "body"))
					done <- err
				}()
				within(t, waiting, "the upstream to read the request") // its answer is yet to come
				cancel()
				if err := within(t, done, "the round trip to return"); !errors.Is(err, context.Canceled) {
					t.Errorf("error %v, want context.Canceled", err)
				}
				within(t, s.closed, "the upstream to see the connection closed")
				if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", "")); body != "ok" {
					t.Errorf("body %q", body)
				}
			}},
		{name: "a cancelled context ends a body read and the connection", wantConns: 2,
			handler: func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/stall" {
					_, _ = io.WriteString(w, "ok")
					return
				}
				_, _ = io.WriteString(w, "first")
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done(): // the connection closed
				case <-time.After(20 * time.Second): // a bound if it never does
				}
			},
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				cctx, cancel := context.WithCancel(ctx)
				resp, err := p.RoundTrip(poolRequest(cctx, s.Server, http.MethodGet, "/stall", ""))
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 5)
				if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
					t.Fatalf("read %q, %v", buf, err)
				}
				done := make(chan error, 1)
				go func() {
					_, err := resp.Body.Read(buf) // blocks: the upstream stalls
					done <- err
				}()
				cancel()
				if err := within(t, done, "the body read to return"); !errors.Is(err, context.Canceled) {
					t.Errorf("error %v, want context.Canceled", err)
				}
				within(t, s.closed, "the upstream to see the connection closed")
				if _, body := roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", "")); body != "ok" {
					t.Errorf("body %q", body)
				}
			}},
		{name: "the idle timeout closes the connection", idle: 20 * time.Millisecond, handler: echo, wantConns: 2,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", ""))
				within(t, s.closed, "the idle connection to be closed")
				p.mu.Lock()
				n := len(p.hosts)
				p.mu.Unlock()
				if n != 0 {
					t.Errorf("%d hosts with idle connections left, want none", n)
				}
				roundTrip(t, p, poolRequest(ctx, s.Server, http.MethodGet, "/", ""))
			}},
		{name: "a retired pool closes the connections returned to it", handler: echo, wantConns: 1,
			run: func(t *testing.T, p *http1Pool, s *poolServer) {
				resp, err := p.RoundTrip(poolRequest(ctx, s.Server, http.MethodGet, "/", ""))
				if err != nil {
					t.Fatal(err)
				}
				p.CloseIdleConnections() // the cluster was replaced
				_, _ = io.ReadAll(resp.Body)
				within(t, s.closed, "the connection to be closed")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newPoolServer(t, tc.tls, tc.handler)
			p := newTestPool(t, s.Server, tc.idle)
			tc.run(t, p, s)
			if got := s.accepted.Load(); got != tc.wantConns {
				t.Errorf("the upstream accepted %d connections, want %d", got, tc.wantConns)
			}
		})
	}
}

// A connection with bytes no request asked for is not reused; a request
// the upstream read before the connection died is an upstream reset for
// the route's retry policy, never sent again by the pool; and a connection
// that cannot be made is a connectError.
func TestHTTP1PoolFailures(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted, requests atomic.Int32
	// The first response comes with bytes no request asked for: the
	// connection is not reused (a new one takes the second request).
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if requests.Add(1) == 3 {
						return // read, never answered: the connection drops
					}
					reply := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
					if requests.Load() == 1 {
						reply += "HTTP/1.1 200 OK\r\n" // unsolicited
					}
					_, _ = io.WriteString(c, reply)
				}
			}()
		}
	}()
	t.Cleanup(func() { _ = l.Close() })
	s := &httptest.Server{URL: "http://" + l.Addr().String()}
	p := newTestPool(t, s, 0)
	ctx := context.Background()
	roundTrip(t, p, poolRequest(ctx, s, http.MethodPost, "/", "one"))
	roundTrip(t, p, poolRequest(ctx, s, http.MethodPost, "/", "two"))
	var ce *connectError
	if _, err := p.RoundTrip(poolRequest(ctx, s, http.MethodPost, "/", "three")); err == nil || errors.As(err, &ce) {
		t.Fatalf("error %v, want an upstream reset", err)
	}
	if r, a := requests.Load(), accepted.Load(); r != 3 || a != 2 {
		t.Errorf("the upstream read %d requests on %d connections, want 3 on 2", r, a)
	}

	_ = l.Close()
	_, err = p.RoundTrip(poolRequest(ctx, s, http.MethodPost, "/", "four"))
	if !errors.As(err, &ce) {
		t.Errorf("error %v, want a connectError", err)
	}
}

// Through the data plane: an HTTP/1.1 cluster's requests share one kept-
// alive connection, and an upstream closing it while idle costs the next
// request nothing (no 503).
func TestUpstreamConnectionReuse(t *testing.T) {
	e := newEnv(t)
	s := newPoolServer(t, false, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	c, cla := edsCluster(t, testCluster, s.URL)
	e.apply(resOpts{noExtProc: true, clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla}})
	post := func(body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader(body))
		req.Header.Set(catalog.RouteHeader, testModel)
		return e.do(req)
	}
	for i := range 3 {
		if resp, body := post(fmt.Sprint(i)); resp.StatusCode != 200 || string(body) != fmt.Sprint(i) {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Errorf("%d upstream connections for 3 requests, want 1", n)
	}
	var idle net.Conn
	for len(s.idle) > 0 {
		idle = <-s.idle
	}
	_ = idle.Close()
	if resp, body := post("after"); resp.StatusCode != 200 || string(body) != "after" {
		t.Fatalf("after the upstream closed the idle connection: %d %q", resp.StatusCode, body)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Errorf("%d upstream connections, want 2", n)
	}
}

// A host gone from a cluster's endpoints loses its idle connections at
// the update, as Envoy drains them, while the cluster's pool stays.
func TestUpstreamRemovedHostConnectionsClosed(t *testing.T) {
	e := newEnv(t)
	ok := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }
	a, b := newPoolServer(t, false, ok), newPoolServer(t, false, ok)
	post := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader("{}"))
		req.Header.Set(catalog.RouteHeader, testModel)
		if resp, body := e.do(req); resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	apply := func(s *poolServer) {
		t.Helper()
		c, cla := edsCluster(t, testCluster, s.URL)
		e.apply(resOpts{noExtProc: true, clusters: []*clusterv3.Cluster{c}, endpoints: []*endpointv3.ClusterLoadAssignment{cla}})
	}
	apply(a)
	post()
	pool := e.dp.cfg.Load().clusters[testCluster].transport
	apply(b)
	within(t, a.closed, "the removed host's idle connection to be closed")
	post()
	if got := e.dp.cfg.Load().clusters[testCluster].transport; got != pool {
		t.Error("the cluster's pool was replaced; only its endpoints changed")
	}
	if na, nb := a.accepted.Load(), b.accepted.Load(); na != 1 || nb != 1 {
		t.Errorf("connections: %d to the removed host, %d to the new one; want 1 and 1", na, nb)
	}
}
