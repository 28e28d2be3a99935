package h2grpc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// defaultWindow is HTTP/2's initial window, the peer's until its
	// SETTINGS say otherwise.
	defaultWindow   = 65535
	defaultMaxFrame = 16384
	maxStreamID     = 1<<31 - 1
	ioBufSize       = 32 << 10
)

// conn is one HTTP/2 connection. Writers (the callers' goroutines) append
// their frames to out under wmu and write them to the socket themselves;
// the reader goroutine demultiplexes what the server sends.
//
// Writing is combined, as an event loop's one flush per pass is: the
// writer that finds no write in progress becomes the flusher and writes
// out everything appended, looping until nothing is left; a writer that
// appends while a flush is in progress leaves its frames to that flusher
// and returns. At concurrency 1 every message is its own write, from its
// caller's goroutine; under load, many streams' frames share one write
// and nobody waits for a socket write but the flusher. There is no writer
// goroutine to wake. (The flusher yields once first when other streams
// are open: unlockAndFlush.)
type conn struct {
	cc *ClientConn
	nc net.Conn

	// Write side: everything below wmu is used only under it.
	wmu      sync.Mutex
	out      []byte // frames not yet written
	spare    []byte // the other buffer, swapped with out by the flusher
	flushing bool   // a writer is writing out to the socket
	wfr      *http2.Framer
	henc     *hpack.Encoder
	hbuf     bytes.Buffer
	fhdr     [9]byte

	mu sync.Mutex
	// streams are the open streams by id; active counts them against the
	// server's MAX_CONCURRENT_STREAMS.
	streams    map[uint32]*stream
	nextID     uint32
	maxStreams uint32
	// draining: a GOAWAY came (or ids ran out); no new streams here.
	draining bool
	// err is set once the connection is dead; every stream failed with it.
	err error
	// Send flow control: the connection's window and the server's
	// initial stream window and maximum frame size.
	sendWin      int64
	peerInitWin  int64
	peerMaxFrame int
	// flowCh is closed and replaced whenever a window grows or the
	// connection dies, waking writers waiting for window.
	flowCh chan struct{}

	// ready is closed once the server's first SETTINGS arrived (its
	// stream limit is known) or the connection died.
	ready     chan struct{}
	readyOnce sync.Once

	// Reader goroutine only.
	connUnacked int
	// recvWin is the stream window this client advertised.
	recvWin int
}

func (cc *ClientConn) dial(ctx context.Context) (*conn, error) {
	network, addr := "tcp", cc.target
	if a, ok := cutPrefix(cc.target, "unix:"); ok {
		network, addr = "unix", a
	}
	var d net.Dialer
	if cc.opts.Dial != nil {
		nc, err := cc.opts.Dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return cc.start(nc)
	}
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return cc.start(nc)
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// start speaks the client's side of the connection preface and starts the
// reader.
func (cc *ClientConn) start(nc net.Conn) (*conn, error) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c := &conn{
		cc:           cc,
		nc:           nc,
		streams:      map[uint32]*stream{},
		nextID:       1,
		maxStreams:   math.MaxUint32,
		sendWin:      defaultWindow,
		peerInitWin:  defaultWindow,
		peerMaxFrame: defaultMaxFrame,
		flowCh:       make(chan struct{}),
		ready:        make(chan struct{}),
		recvWin:      int(cc.opts.InitialWindowSize),
	}
	c.wfr = http2.NewFramer((*outWriter)(c), nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	rfr := http2.NewFramer(nil, bufio.NewReaderSize(nc, ioBufSize))
	rfr.SetReuseFrames()
	rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rfr.SetMaxReadFrameSize(defaultMaxFrame)

	c.out = append(c.out, clientPreface...)
	err := c.wfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(cc.opts.InitialWindowSize)})
	if err == nil && cc.opts.InitialConnWindowSize > defaultWindow {
		err = c.wfr.WriteWindowUpdate(0, uint32(cc.opts.InitialConnWindowSize-defaultWindow))
	}
	if err == nil {
		_, err = nc.Write(c.out)
		c.out = c.out[:0]
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	go c.read(rfr)
	return c, nil
}

// usable reports whether c takes a new stream; c.mu is held.
func (c *conn) usable() bool {
	return c.err == nil && !c.draining && uint32(len(c.streams)) < c.maxStreams
}

// outWriter is the Framer's writer: it appends to out (wmu held).
type outWriter conn

func (w *outWriter) Write(p []byte) (int, error) {
	w.out = append(w.out, p...)
	return len(p), nil
}

// unlockAndFlush releases wmu, first writing out what is buffered unless
// another writer is doing so (which then writes this too), or flush is
// false (a stream's HEADERS wait for its first message). An error kills
// the connection.
func (c *conn) unlockAndFlush(flush bool) error {
	if !flush || c.flushing || len(c.out) == 0 {
		c.wmu.Unlock()
		return nil
	}
	c.flushing = true
	// With other streams open, the flusher first lets the goroutines
	// that are ready run (they are likely other requests about to send on
	// this connection), so that their frames join this write: what
	// grpc-go's writer goroutine gets by being woken late, without the
	// wake-up. At concurrency 16 this saved about 4 of 29 read and write
	// calls per request, and some CPU; alone it costs a scheduler call.
	c.mu.Lock()
	busy := len(c.streams) > 1
	c.mu.Unlock()
	if busy {
		c.wmu.Unlock()
		runtime.Gosched()
		c.wmu.Lock()
	}
	for len(c.out) > 0 {
		out := c.out
		c.out = c.spare[:0]
		c.wmu.Unlock()
		_, err := c.nc.Write(out)
		c.wmu.Lock()
		// out becomes the spare buffer (out now holds what was the spare):
		// never the buffer being filled.
		c.spare = nil
		if cap(out) <= maxKeptBuf {
			c.spare = out[:0]
		}
		if err != nil {
			c.flushing = false
			c.out = c.out[:0]
			c.wmu.Unlock()
			c.fail(err)
			return c.deadErr()
		}
	}
	c.flushing = false
	c.wmu.Unlock()
	return nil
}

// maxKeptBuf bounds the write buffer kept for reuse; a larger one (a big
// message's window-sized chunk) is left to the collector.
const maxKeptBuf = 256 << 10

// open registers s under a new id and appends its HEADERS (not flushed:
// the first message or CloseSend flushes them with it).
func (c *conn) open(s *stream, hdrs func(enc *hpack.Encoder)) error {
	c.wmu.Lock()
	c.mu.Lock()
	if !c.usable() {
		// Dead, draining or full since it was picked.
		c.mu.Unlock()
		c.wmu.Unlock()
		return errRetry
	}
	s.id = c.nextID
	c.nextID += 2
	if c.nextID > maxStreamID {
		c.draining = true
	}
	s.sendWin = c.peerInitWin
	c.streams[s.id] = s
	maxFrame := c.peerMaxFrame
	c.mu.Unlock()
	c.hbuf.Reset()
	hdrs(c.henc)
	block := c.hbuf.Bytes()
	first := true
	for first || len(block) > 0 {
		n := min(len(block), maxFrame)
		// Writing into out cannot fail.
		if first {
			_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: block[:n], EndHeaders: n == len(block)})
		} else {
			_ = c.wfr.WriteContinuation(s.id, n == len(block), block[:n])
		}
		block, first = block[n:], false
	}
	c.wmu.Unlock()
	return nil
}

// errRetry: the connection chosen takes no new streams after all; pick
// another.
var errRetry = errors.New("h2grpc: connection not usable")

// deadErr is the status a stream on a dead connection fails with.
func (c *conn) deadErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// writeData writes p as DATA frames of s, waiting for flow-control window
// as needed, END_STREAM on the last frame when end is set. Each grant of
// window is flushed before waiting for the next, so the server sees the
// data it has room for.
func (c *conn) writeData(s *stream, p []byte, end bool) error {
	for {
		n, maxFrame, err := c.acquire(s, len(p))
		if err != nil {
			return err
		}
		c.wmu.Lock()
		if n > 0 && s.isDone() {
			// Reset (or ended by the server) since the window was taken:
			// nothing more goes out on it, and the connection's share
			// of the window is given back.
			c.wmu.Unlock()
			c.mu.Lock()
			c.sendWin += int64(n)
			c.wakeFlow()
			c.mu.Unlock()
			return io.EOF
		}
		chunk := p[:n]
		p = p[n:]
		for {
			f := min(len(chunk), maxFrame)
			var flags byte
			if end && len(p) == 0 && f == len(chunk) {
				flags = byte(http2.FlagDataEndStream)
			}
			h := &c.fhdr
			h[0], h[1], h[2] = byte(f>>16), byte(f>>8), byte(f)
			h[3], h[4] = byte(http2.FrameData), flags
			binary.BigEndian.PutUint32(h[5:], s.id)
			c.out = append(append(c.out, h[:]...), chunk[:f]...)
			chunk = chunk[f:]
			if len(chunk) == 0 {
				break
			}
		}
		if err := c.unlockAndFlush(true); err != nil {
			return err
		}
		if len(p) == 0 {
			return nil
		}
	}
}

// acquire takes up to want bytes of send window for s (at least one byte,
// or all of want when it is zero), waiting until the server grants some.
func (c *conn) acquire(s *stream, want int) (int, int, error) {
	for {
		c.mu.Lock()
		if c.err != nil {
			err := c.err
			c.mu.Unlock()
			return 0, 0, err
		}
		if s.isDone() {
			c.mu.Unlock()
			return 0, 0, io.EOF
		}
		if want == 0 {
			mf := c.peerMaxFrame
			c.mu.Unlock()
			return 0, mf, nil
		}
		avail := min(int64(want), c.sendWin, s.sendWin)
		if avail > 0 {
			c.sendWin -= avail
			s.sendWin -= avail
			mf := c.peerMaxFrame
			c.mu.Unlock()
			return int(avail), mf, nil
		}
		ch := c.flowCh
		c.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
		}
	}
}

// wakeFlow wakes the writers waiting for window; c.mu is held.
func (c *conn) wakeFlow() {
	close(c.flowCh)
	c.flowCh = make(chan struct{})
}

// writeControl writes control frames and flushes them.
func (c *conn) writeControl(write func(*http2.Framer) error) {
	c.wmu.Lock()
	_ = write(c.wfr) // into out: cannot fail
	_ = c.unlockAndFlush(true)
}

// flush writes out what is buffered (a stream's HEADERS not yet followed
// by data).
func (c *conn) flush() {
	c.wmu.Lock()
	_ = c.unlockAndFlush(true)
}

// reset ends s on the wire with RST_STREAM and forgets it.
func (c *conn) reset(s *stream, code http2.ErrCode) {
	if !c.remove(s) {
		return
	}
	c.writeControl(func(fr *http2.Framer) error { return fr.WriteRSTStream(s.id, code) })
}

// remove forgets s; false when it was not registered (any more).
func (c *conn) remove(s *stream) bool {
	c.mu.Lock()
	if c.streams[s.id] != s {
		c.mu.Unlock()
		return false
	}
	delete(c.streams, s.id)
	idle := c.draining && len(c.streams) == 0
	c.mu.Unlock()
	if idle {
		// A draining connection with no streams left is done.
		c.nc.Close()
	}
	return true
}

// fail kills the connection: every stream on it ends with UNAVAILABLE, and
// the next stream dials anew.
func (c *conn) fail(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = status.Error(codes.Unavailable, fmt.Sprintf("connection error: desc = %q", err.Error()))
	streams := c.streams
	c.streams = map[uint32]*stream{}
	c.wakeFlow()
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
	c.nc.Close()
	c.cc.forget(c)
	for _, s := range streams {
		s.finish(c.err, true)
	}
}

func (c *conn) stream(id uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// read is the connection's reader goroutine.
func (c *conn) read(fr *http2.Framer) {
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			idle := c.draining && len(c.streams) == 0
			c.mu.Unlock()
			if idle && errors.Is(err, io.EOF) {
				err = errors.New("server closed the connection after GOAWAY")
			}
			c.fail(err)
			return
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			c.onData(f)
		case *http2.MetaHeadersFrame:
			if s := c.stream(f.StreamID); s != nil {
				switch {
				case s.onHeaders(f):
					c.reset(s, http2.ErrCodeCancel)
				case f.StreamEnded():
					c.remove(s)
				}
			}
		case *http2.RSTStreamFrame:
			if s := c.stream(f.StreamID); s != nil {
				c.remove(s)
				s.finish(rstStatus(s.ctx, f.ErrCode), true)
			}
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.onSettings(f)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.writeControl(func(fr *http2.Framer) error { return fr.WritePing(true, data) })
			}
		case *http2.GoAwayFrame:
			c.onGoAway(f)
		case *http2.WindowUpdateFrame:
			c.mu.Lock()
			if f.StreamID == 0 {
				c.sendWin += int64(f.Increment)
			} else if s := c.streams[f.StreamID]; s != nil {
				s.sendWin += int64(f.Increment)
			}
			c.wakeFlow()
			c.mu.Unlock()
		}
	}
}

func (c *conn) onData(f *http2.DataFrame) {
	// Flow control counts the whole payload, padding included.
	if n := int(f.Length); n > 0 {
		c.connUnacked += n
		if c.connUnacked >= int(c.cc.opts.InitialConnWindowSize)/4 {
			inc := uint32(c.connUnacked)
			c.connUnacked = 0
			c.writeControl(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, inc) })
		}
	}
	s := c.stream(f.StreamID)
	if s == nil {
		return
	}
	if inc := s.onData(f.Data(), int(f.Length), f.StreamEnded(), c.recvWin); inc > 0 {
		id := s.id
		c.writeControl(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(id, uint32(inc)) })
	}
	if f.StreamEnded() {
		c.remove(s)
	}
}

func (c *conn) onSettings(f *http2.SettingsFrame) {
	c.mu.Lock()
	_ = f.ForeachSetting(func(st http2.Setting) error {
		switch st.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(st.Val) - c.peerInitWin
			c.peerInitWin = int64(st.Val)
			for _, s := range c.streams {
				s.sendWin += delta
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(st.Val)
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = st.Val
		}
		return nil
	})
	c.wakeFlow()
	c.mu.Unlock()
	c.writeControl(func(fr *http2.Framer) error {
		// The encoder's table follows the server's limit.
		_ = f.ForeachSetting(func(st http2.Setting) error {
			if st.ID == http2.SettingHeaderTableSize {
				c.henc.SetMaxDynamicTableSizeLimit(st.Val)
			}
			return nil
		})
		return fr.WriteSettingsAck()
	})
	c.readyOnce.Do(func() { close(c.ready) })
}

// onGoAway stops new streams on c; the streams the server will not
// process fail with UNAVAILABLE, the others finish.
func (c *conn) onGoAway(f *http2.GoAwayFrame) {
	c.mu.Lock()
	c.draining = true
	var refused []*stream
	for id, s := range c.streams {
		if id > f.LastStreamID {
			refused = append(refused, s)
			delete(c.streams, id)
		}
	}
	idle := len(c.streams) == 0
	c.wakeFlow()
	c.mu.Unlock()
	c.cc.forget(c)
	if h := c.cc.testHookGoAway; h != nil {
		h()
	}
	err := status.Error(codes.Unavailable, fmt.Sprintf("the connection is draining due to GOAWAY (%v)", f.ErrCode))
	for _, s := range refused {
		s.finish(err, true)
	}
	if idle {
		c.nc.Close()
	}
}

// rstStatus is the status of a stream the server reset, as gRPC maps the
// HTTP/2 error codes.
func rstStatus(ctx context.Context, code http2.ErrCode) error {
	c := codes.Internal
	switch code {
	case http2.ErrCodeRefusedStream:
		c = codes.Unavailable
	case http2.ErrCodeCancel:
		c = codes.Canceled
		// A server cancels the stream when the deadline sent in
		// grpc-timeout passes: that is the cause when the caller's has.
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			c = codes.DeadlineExceeded
		}
	case http2.ErrCodeEnhanceYourCalm:
		c = codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		c = codes.PermissionDenied
	}
	return status.Error(c, fmt.Sprintf("stream terminated by RST_STREAM with error code: %v", code))
}
