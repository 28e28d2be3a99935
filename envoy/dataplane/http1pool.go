package dataplane

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// http1Pool is the connection pool of a cluster that speaks HTTP/1.1. Its
// round trip runs on the caller's goroutine: it takes an idle connection
// (or dials one), writes the request head and a small buffered body in one
// write, and reads the response head itself; the response body reads come
// straight off the connection, and the read that ends the body puts the
// connection back. net/http's Transport hands every request to two
// goroutines of the connection (writeLoop, readLoop) and back, three or
// four wake-ups per request, each a futex and often an IPI on a small VM.
//
// A streaming request body (one without GetBody, or a large one) is written
// on a goroutine of its own while the caller reads the response head, as
// net/http does, so an upstream may answer while the upload continues.
type http1Pool struct {
	dial        func(ctx context.Context, addr string) (net.Conn, error) // errors are *connectError
	idleTimeout time.Duration                                            // 0: idle connections stay
	maxIdle     int                                                      // per host

	mu      sync.Mutex
	hosts   map[string]*idleConns
	retired bool // CloseIdleConnections was called: nothing is pooled any more
}

// idleConns are a host's idle connections, the most recently used last.
// One timer per host closes the expired ones, re-armed for the oldest.
type idleConns struct {
	conns []*http1Conn
	timer *time.Timer
	armed bool
}

// http1MaxIdlePerHost bounds each host's idle connections, as
// MaxIdleConnsPerHost did for net/http's Transport.
const http1MaxIdlePerHost = 256

// http1BufferSize is the read and write buffer of a connection, net/http's.
const http1BufferSize = 4 << 10

func newHTTP1Pool(dial func(ctx context.Context, addr string) (net.Conn, error), idleTimeout time.Duration) *http1Pool {
	return &http1Pool{dial: dial, idleTimeout: idleTimeout, maxIdle: http1MaxIdlePerHost, hosts: map[string]*idleConns{}}
}

// http1Conn is one upstream connection. While a request owns it (from
// RoundTrip until its body ends and its write is done), nothing else
// touches it.
type http1Conn struct {
	pool      *http1Pool
	addr      string
	conn      net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	written   int64 // bytes that reached the connection (connWriter)
	writeErr  error // the connection's first write error (connWriter)
	idleSince time.Time
	closeOnce sync.Once
	peek      *sockPeek // the check at reuse; nil where it cannot look
	interrupt func()    // sets a deadline in the past; made once

	// The request in flight. pending counts the parties still using the
	// connection: the response body's reader, and the body's writer when
	// it runs on a goroutine of its own. The last one to finish returns
	// the connection to the pool, or closes it.
	stop      func() bool // ends the context's hold on the connection
	pending   atomic.Int32
	broken    atomic.Bool
	keepAlive bool
	bodyErr   atomic.Pointer[error] // of the request body's goroutine
}

// connWriter counts what reaches the connection, so a failed request
// knows whether any of it was written (nothingWrittenError).
type connWriter struct{ pc *http1Conn }

func (w connWriter) Write(p []byte) (int, error) {
	n, err := w.pc.conn.Write(p)
	w.pc.written += int64(n)
	if err != nil && w.pc.writeErr == nil {
		w.pc.writeErr = err
	}
	return n, err
}

// ReadFrom lets a streaming body's reads go to the connection as they come
// (bufio.Writer hands its copy over once its buffer is empty), not wait for
// a full buffer: an upstream answering early needs what the client sent so
// far. Its errors may be the body's, so they do not count as writeErr.
func (w connWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(w.pc.conn, r)
	w.pc.written += n
	return n, err
}

func (pc *http1Conn) close() {
	pc.closeOnce.Do(func() { _ = pc.conn.Close() })
}

// nothingWrittenError is a request that failed on a reused connection
// before any of it reached the upstream: it can go again on another
// connection without the upstream seeing it twice.
type nothingWrittenError struct{ err error }

func (e *nothingWrittenError) Error() string {
	return "upstream connection closed before the request was sent: " + e.err.Error()
}
func (e *nothingWrittenError) Unwrap() error { return e.err }

// aLongTimeAgo is a deadline in the past: it interrupts the I/O in flight.
var aLongTimeAgo = time.Unix(1, 0)

// RoundTrip sends req on a connection of req.URL.Host and returns the
// response once its head has been read. Closing the body before its end
// closes the connection; reading it to the end returns the connection to
// the pool when keep-alive holds.
func (p *http1Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := validHeader(req.Header); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	for {
		pc, reused, err := p.conn(ctx, req.URL.Host)
		if err != nil {
			closeBody(req) // as a RoundTripper does on every path
			return nil, err
		}
		resp, err := pc.roundTrip(ctx, req)
		var nw *nothingWrittenError
		if err == nil || !reused || !errors.As(err, &nw) || ctx.Err() != nil {
			return resp, err
		}
		// The idle connection died before the request reached it: the
		// upstream saw nothing, so the request goes again, on another
		// connection, with a fresh copy of its body.
		if req.Body != nil {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r := *req
			r.Body = body
			req = &r
		}
	}
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// conn returns an idle connection to addr that is still open, or a new one.
func (p *http1Pool) conn(ctx context.Context, addr string) (*http1Conn, bool, error) {
	for {
		pc := p.takeIdle(addr)
		if pc == nil {
			break
		}
		// An upstream that closed the idle connection has sent its FIN
		// (or an unsolicited response) by now: Envoy's event loop sees it
		// at once and the connection never takes a request; this peek is
		// the same check at the moment of reuse. What it cannot see is a
		// close racing with this request (the FIN still in flight): that
		// request fails as an upstream reset, which the route's retry
		// policy may retry, as Envoy does. A request nothing of which was
		// written goes again (RoundTrip); one that was written is never
		// replayed here.
		if pc.br.Buffered() == 0 && pc.peek.open() {
			return pc, true, nil
		}
		pc.close()
	}
	conn, err := p.dial(ctx, addr)
	if err != nil {
		return nil, false, err
	}
	pc := &http1Conn{pool: p, addr: addr, conn: conn, peek: newSockPeek(conn)}
	pc.interrupt = func() { _ = conn.SetDeadline(aLongTimeAgo) }
	pc.br = bufio.NewReaderSize(conn, http1BufferSize)
	pc.bw = bufio.NewWriterSize(connWriter{pc}, http1BufferSize)
	return pc, false, nil
}

// takeIdle pops the most recently used idle connection of addr that has
// not expired.
func (p *http1Pool) takeIdle(addr string) *http1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[addr]
	if h == nil {
		return nil
	}
	for n := len(h.conns); n > 0; n = len(h.conns) {
		pc := h.conns[n-1]
		h.conns[n-1] = nil
		h.conns = h.conns[:n-1]
		if p.idleTimeout > 0 && time.Since(pc.idleSince) >= p.idleTimeout {
			pc.close() // its timer has not run yet
			continue
		}
		return pc
	}
	return nil
}

// put returns a connection whose request is over to the idle pool, or
// closes it when the pool is full or retired.
func (p *http1Pool) put(pc *http1Conn) {
	pc.stop = nil
	pc.idleSince = time.Now()
	p.mu.Lock()
	h := p.hosts[pc.addr]
	if h == nil {
		h = &idleConns{}
		p.hosts[pc.addr] = h
	}
	if p.retired || len(h.conns) >= p.maxIdle {
		p.mu.Unlock()
		pc.close()
		return
	}
	h.conns = append(h.conns, pc)
	if p.idleTimeout > 0 && !h.armed {
		h.armed = true
		if h.timer == nil {
			addr := pc.addr
			h.timer = time.AfterFunc(p.idleTimeout, func() { p.expire(addr) })
		} else {
			h.timer.Reset(p.idleTimeout)
		}
	}
	p.mu.Unlock()
}

// expire closes addr's connections idle for the idle timeout, and re-arms
// the timer for the oldest of the rest.
func (p *http1Pool) expire(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[addr]
	if h == nil {
		return
	}
	now := time.Now()
	n := 0
	for n < len(h.conns) && now.Sub(h.conns[n].idleSince) >= p.idleTimeout {
		h.conns[n].close()
		n++
	}
	if n > 0 {
		rest := copy(h.conns, h.conns[n:])
		clear(h.conns[rest:])
		h.conns = h.conns[:rest]
	}
	if len(h.conns) == 0 {
		// A host gone from the endpoints leaves no entry behind; a host
		// still in use gets a new one (and timer) at its next put.
		h.armed = false
		delete(p.hosts, addr)
		return
	}
	h.timer.Reset(p.idleTimeout - now.Sub(h.conns[0].idleSince))
}

// CloseIdleConnections closes the idle connections, and retires the pool:
// it is called when the cluster's pool is replaced or the data plane shuts
// down, so connections whose requests end later are closed rather than
// kept idle where no request would take them.
func (p *http1Pool) CloseIdleConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = true
	for addr, h := range p.hosts {
		for _, pc := range h.conns {
			pc.close()
		}
		if h.timer != nil {
			h.timer.Stop()
		}
		delete(p.hosts, addr)
	}
}

// retainHosts closes the idle connections of every host not in keep: the
// endpoints changed and those hosts left the cluster. A connection still in
// use by one of them goes back to the pool when its request ends, and
// expires with the idle timeout.
func (p *http1Pool) retainHosts(keep map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, h := range p.hosts {
		if keep[addr] {
			continue
		}
		for _, pc := range h.conns {
			pc.close()
		}
		if h.timer != nil {
			h.timer.Stop()
		}
		delete(p.hosts, addr)
	}
}

// roundTrip sends req on pc and reads the response head.
func (pc *http1Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	pc.broken.Store(false)
	pc.bodyErr.Store(nil)
	pc.keepAlive = false
	// Cancelling the context interrupts whatever I/O is in flight on the
	// connection; a connection it interrupted is closed, never reused.
	pc.stop = context.AfterFunc(ctx, pc.interrupt)
	streamed := req.Body != nil && (req.GetBody == nil || req.ContentLength < 0 || req.ContentLength > inMemoryBodyMax)
	var written chan struct{}
	if streamed {
		pc.pending.Store(2)
		written = make(chan struct{})
		go pc.writeStreamed(req, written)
	} else {
		pc.pending.Store(1)
		start := pc.written
		pc.writeErr = nil
		err := req.Write(pc.bw)
		if err == nil {
			err = pc.bw.Flush()
		}
		if err != nil {
			nothing := pc.writeErr != nil && pc.written == start
			pc.release(false)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if nothing {
				return nil, &nothingWrittenError{err}
			}
			return nil, fmt.Errorf("upstream write: %w", err)
		}
	}
	resp, err := pc.readHead(req)
	if err != nil {
		pc.release(false)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if werr := pc.bodyErr.Load(); werr != nil {
			return nil, *werr
		}
		return nil, fmt.Errorf("upstream response: %w", err)
	}
	pc.keepAlive = !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		waitWritten(written)
		pc.release(true)
		return resp, nil
	}
	resp.Body = &http1Body{pc: pc, ctx: ctx, body: resp.Body, written: written}
	return resp, nil
}

// writeStreamed writes a streaming request on the body's own goroutine.
// A failed write closes the connection, as net/http does: the response,
// even one under way, cannot be trusted on it.
func (pc *http1Conn) writeStreamed(req *http.Request, written chan<- struct{}) {
	defer close(written)
	start := pc.written
	pc.writeErr = nil
	err := req.Write(pc.bw)
	if err == nil {
		err = pc.bw.Flush()
	}
	switch {
	case err == nil:
	case pc.writeErr != nil && pc.written == start:
		err = &nothingWrittenError{err}
		pc.bodyErr.Store(&err)
	default:
		err = fmt.Errorf("upstream write: %w", err)
		pc.bodyErr.Store(&err)
	}
	pc.release(err == nil)
}

// http1WriteWait is how long the end of a response waits for its streamed
// request body to finish writing, as net/http's readLoop does, so that the
// connection is back in the pool for the next request. A body still being
// written after it goes back when it is done, or is closed if it fails.
const http1WriteWait = 50 * time.Millisecond

// waitWritten waits, within http1WriteWait, for a streamed request body's
// write to end: usually it has (the upstream answered after reading it),
// and only its goroutine has yet to say so.
func waitWritten(written <-chan struct{}) {
	if written == nil {
		return
	}
	select {
	case <-written:
		return
	default:
	}
	t := time.NewTimer(http1WriteWait)
	defer t.Stop()
	select {
	case <-written:
	case <-t.C:
	}
}

// http1Max1xx bounds the informational responses before the final one, as
// net/http does.
const http1Max1xx = 5

// readHead reads the response head, skipping informational responses.
func (pc *http1Conn) readHead(req *http.Request) (*http.Response, error) {
	for n := 0; ; n++ {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				resp.Close = true // no upgrade: the connection is not HTTP any more
			}
			return resp, nil
		}
		if n == http1Max1xx {
			return nil, errors.New("too many 1xx informational responses")
		}
	}
}

// release ends one party's use of the connection (the body's reader, or
// the streaming body's writer); ok is false when it failed or stopped
// early, which closes the connection at once so the other party stops too.
// The last one returns it to the pool if it is still good.
func (pc *http1Conn) release(ok bool) {
	if !ok {
		pc.broken.Store(true)
		pc.close()
	}
	if pc.pending.Add(-1) != 0 {
		return
	}
	// stop reports false when the context's function ran (or runs): the
	// connection then has a deadline in the past.
	if !pc.stop() || pc.broken.Load() || !pc.keepAlive {
		pc.close()
		return
	}
	pc.pool.put(pc)
}

// errBodyClosed is a read of a response body after Close.
var errBodyClosed = errors.New("http: read on closed response body")

// http1Body is a response body read off the connection. Its end (EOF:
// the declared length reached, or the last chunk and trailers read)
// releases the connection; an error or an early Close closes it.
type http1Body struct {
	pc   *http1Conn
	ctx  context.Context
	body io.ReadCloser // net/http's reader of the body over pc.br
	// written is closed once a streamed request body's writer has
	// released the connection; nil for a request written inline.
	written <-chan struct{}
	ended   atomic.Bool
	closed  atomic.Bool
}

func (b *http1Body) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errBodyClosed
	}
	if b.ended.Load() {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == nil {
		return n, nil
	}
	if b.ended.CompareAndSwap(false, true) {
		if err == io.EOF {
			waitWritten(b.written)
		}
		b.pc.release(err == io.EOF)
	}
	if err != io.EOF && b.ctx.Err() != nil {
		err = b.ctx.Err() // what interrupted the read, as net/http reports it
	}
	return n, err
}

// Close releases the connection: read to its end, it was returned already;
// otherwise it is closed, which also ends a read in flight.
func (b *http1Body) Close() error {
	b.closed.Store(true)
	if b.ended.CompareAndSwap(false, true) {
		b.pc.release(false)
	}
	return nil
}

// validHeader refuses header fields net/http's Transport refuses: a
// request.Write would send them with their line breaks made spaces.
func validHeader(h http.Header) error {
	for k, vs := range h {
		if !wireHeaderName(k) {
			return fmt.Errorf("upstream request: invalid header field name %q", k)
		}
		for _, v := range vs {
			if !wireHeaderValue(v) {
				return fmt.Errorf("upstream request: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// wireHeaderName is a header field name as net/http's Transport accepts
// it: a token (validHeaderName also allows the pseudo-headers' colon).
func wireHeaderName(s string) bool {
	return !strings.HasPrefix(s, ":") && validHeaderName(s)
}

// wireHeaderValue: no control byte but horizontal tab, as net/http's
// Transport checks (validHeaderValue refuses only line breaks and NUL).
func wireHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
