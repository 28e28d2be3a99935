package dataplane

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// HTTP/1.1 request framing, checked as Envoy's codec does before net/http
// sees a request. net/http accepts a request with both Content-Length and
// Transfer-Encoding (it drops the length) and unfolds obs-fold header
// lines; Envoy refuses both with 400, since an intermediary that reads
// such a request differently from the next hop is how requests are
// smuggled. net/http also answers the requests it cannot parse (431,
// 400, 501) in plain text on its own, bypassing the handler.
//
// framingConn sits between a clear-text connection and net/http: it follows
// the HTTP/1.1 message framing of what the client sends (heads, then bodies
// by Content-Length or chunks), holds each request head back until it is
// whole, and either releases it or, for a request it refuses, hands
// net/http a stand-in request marked with a per-process token, which the
// handler answers with the OpenAI-shaped 400 and an access log line; the
// rest of the connection is dropped. net/http's own plain-text answers are
// rewritten into the OpenAI error shape on their way out. On TLS
// listeners net/http needs the *tls.Conn itself, so neither applies there.

// framingHeader marks the stand-in request of a refused one.
const framingHeader = "X-Switchyard-Framing-Rejected"

// framing states.
const (
	fsHead      = iota // reading a request head (held back)
	fsBody             // remaining bytes of a Content-Length body
	fsChunkSize        // a chunk-size line
	fsChunkData        // remaining bytes of a chunk
	fsChunkEnd         // the CRLF after a chunk
	fsTrailer          // trailer lines after the last chunk
	fsPass             // no more checks: HTTP/2 prior knowledge, or net/http will refuse and close
	fsRejected         // a request was refused: nothing more is read
)

// maxFramingLine bounds a chunk-size or trailer line; past it the framing is
// left to net/http, which refuses it.
const maxFramingLine = 4 << 10

type framingConn struct {
	net.Conn
	token   string
	maxHead int
	d       *DataPlane
	lis     string

	state     int
	remaining int64  // of fsBody / fsChunkData
	head      []byte // the held-back head, or the current framing line
	pending   []byte // bytes for net/http not yet returned
	rbuf      []byte
	// The refused request, for its reply and access log line.
	reason       string
	method, path string
	// between is true from when net/http is done with a request until it
	// hands the next one to the handler: a write then is net/http's own
	// answer to a request it could not parse.
	between atomic.Bool
	mu      sync.Mutex // guards reason, method, path
}

func newFramingConn(c net.Conn, d *DataPlane, lis string, token string, maxHeaderBytes int) *framingConn {
	if maxHeaderBytes <= 0 {
		maxHeaderBytes = http.DefaultMaxHeaderBytes
	}
	fc := &framingConn{Conn: c, token: token, d: d, lis: lis,
		// net/http allows 4096 bytes of slack over MaxHeaderBytes; past
		// this net/http refuses the head itself.
		maxHead: maxHeaderBytes + 4096 + 1024}
	fc.between.Store(true)
	return fc
}

func (c *framingConn) Read(p []byte) (int, error) {
	for {
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			if len(c.pending) == 0 {
				c.pending = nil
			}
			return n, nil
		}
		switch c.state {
		case fsRejected:
			return 0, io.EOF
		case fsPass:
			return c.Conn.Read(p)
		}
		// Small reads (net/http's one-byte background read) go through a
		// buffer of ours, not one syscall per byte of a held-back head.
		buf, inPlace := p, true
		if len(p) < 512 {
			if c.rbuf == nil {
				c.rbuf = make([]byte, 4<<10)
			}
			buf, inPlace = c.rbuf, false
		}
		n, err := c.Conn.Read(buf)
		if n > 0 {
			if direct := c.feed(buf[:n], inPlace); direct > 0 {
				return direct, nil
			}
			if len(c.pending) > 0 {
				continue
			}
		}
		if err != nil {
			if len(c.head) > 0 && c.state == fsHead {
				// A head cut short: net/http reports it as it would.
				c.pending, c.head = c.head, nil
				c.state = fsPass
				continue
			}
			return 0, err
		}
	}
}

// feed runs b (read into the caller's buffer) through the framing. It
// returns how many leading bytes of b go to net/http as they are; whatever
// else goes to net/http is appended to pending (copied, since b is the
// caller's).
func (c *framingConn) feed(b []byte, inPlace bool) int {
	direct := 0 // b[:direct] is returned in place, while inPlace: nothing was queued yet
	emit := func(start, end int) {
		if start == end {
			return
		}
		if inPlace && start == direct {
			direct = end
			return
		}
		inPlace = false
		c.pending = append(c.pending, b[start:end]...)
	}
	i := 0
	for i < len(b) {
		switch c.state {
		case fsPass:
			emit(i, len(b))
			return direct
		case fsRejected:
			return direct
		case fsBody, fsChunkData:
			k := int(min(int64(len(b)-i), c.remaining))
			emit(i, i+k)
			i += k
			if c.remaining -= int64(k); c.remaining == 0 {
				if c.state == fsBody {
					c.state = fsHead
				} else {
					c.state = fsChunkEnd
				}
			}
		case fsHead:
			inPlace = false // the head is held back, and so is what follows
			j := bytes.IndexByte(b[i:], '\n')
			if j < 0 {
				c.head = append(c.head, b[i:]...)
				if len(c.head) > c.maxHead {
					c.pending, c.head = append(c.pending, c.head...), nil
					c.state = fsPass
				}
				return direct
			}
			c.head = append(c.head, b[i:i+j+1]...)
			i += j + 1
			if len(c.head) > c.maxHead {
				c.pending, c.head = append(c.pending, c.head...), nil
				c.state = fsPass
				continue
			}
			if !headComplete(c.head) {
				continue
			}
			c.checkHead()
		default: // a framing line: chunk size, chunk end, trailer
			j := bytes.IndexByte(b[i:], '\n')
			end := len(b)
			if j >= 0 {
				end = i + j + 1
			}
			emit(i, end)
			c.head = append(c.head, b[i:end]...)
			i = end
			if len(c.head) > maxFramingLine {
				c.state, c.head = fsPass, nil
				continue
			}
			if j < 0 {
				return direct
			}
			c.framingLine(bytes.TrimRight(c.head, "\r\n"))
			c.head = c.head[:0]
		}
	}
	return direct
}

// headComplete reports whether h (whole lines) ends with the empty line.
// A lone empty line before any request line is a whole "head" too:
// net/http skips it.
func headComplete(h []byte) bool {
	return bytes.HasSuffix(h, []byte("\n\n")) || bytes.HasSuffix(h, []byte("\n\r\n")) ||
		string(h) == "\r\n" || string(h) == "\n"
}

// checkHead decides on a complete head: release it and follow its body, or
// refuse it. It reads the head in place: every request's head passes here.
func (c *framingConn) checkHead() {
	head := c.head
	defer func() {
		// The head's buffer serves the connection's next head, unless a
		// large head made it large.
		if cap(head) <= 4<<10 {
			c.head = head[:0]
		} else {
			c.head = nil
		}
	}()
	rest := bytes.TrimRight(head, "\r\n")
	requestLine, rest, _ := bytes.Cut(rest, []byte("\n"))
	requestLine = bytes.TrimSuffix(requestLine, []byte("\r"))
	if len(requestLine) == 0 {
		c.pending = append(c.pending, head...)
		return
	}
	method, target, _ := bytes.Cut(requestLine, []byte(" "))
	target, version, _ := bytes.Cut(target, []byte(" "))
	if string(method) == "PRI" && string(target) == "*" && string(version) == "HTTP/2.0" {
		// HTTP/2 with prior knowledge: its frames are net/http's to check.
		c.pending = append(c.pending, head...)
		c.state = fsPass
		return
	}
	var (
		// The first Content-Length and Transfer-Encoding values, how many
		// there are, and whether the Content-Length values differ.
		contentLength, te []byte
		nCL, nTE          int
		clDiffer          bool
		reason            string
	)
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		l = bytes.TrimSuffix(l, []byte("\r"))
		if len(l) == 0 {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			reason = "The request has a folded header line (obs-fold), which this gateway does not accept."
			break
		}
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue // net/http refuses it
		}
		switch {
		case bytes.EqualFold(name, []byte("content-length")):
			v := bytes.TrimSpace(value)
			if nCL == 0 {
				contentLength = v
			} else if !bytes.Equal(v, contentLength) {
				clDiffer = true
			}
			nCL++
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			if nTE == 0 {
				te = bytes.TrimSpace(value)
			}
			nTE++
		}
	}
	if reason == "" && nCL > 0 && nTE > 0 {
		reason = "The request has both Content-Length and Transfer-Encoding."
	}
	if reason != "" {
		c.refuse(reason, string(method), string(target))
		return
	}
	c.pending = append(c.pending, head...)
	switch {
	case nTE > 0:
		if nTE == 1 && bytes.EqualFold(te, []byte("chunked")) {
			c.state = fsChunkSize
		} else {
			c.state = fsPass // net/http answers 501 and closes
		}
	case nCL > 0:
		n, err := strconv.ParseInt(string(contentLength), 10, 64)
		if clDiffer {
			err = strconv.ErrSyntax
		}
		switch {
		case err != nil || n < 0:
			c.state = fsPass // net/http refuses it and closes
		case n > 0:
			c.state, c.remaining = fsBody, n
		}
	}
}

// framingLine handles a chunk-size line, the end of a chunk or a trailer
// line. Anything malformed is left to net/http, which fails the body (the
// handler's 400) and closes the connection.
func (c *framingConn) framingLine(line []byte) {
	switch c.state {
	case fsChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseUint(string(bytes.TrimRight(size, " \t")), 16, 63)
		switch {
		case err != nil:
			c.state = fsPass
		case n == 0:
			c.state = fsTrailer
		default:
			c.state, c.remaining = fsChunkData, int64(n)
		}
	case fsChunkEnd:
		if len(line) != 0 {
			c.state = fsPass
			return
		}
		c.state = fsChunkSize
	case fsTrailer:
		if len(line) == 0 {
			c.state = fsHead
		}
	}
}

// refuse replaces the request with the stand-in net/http hands the
// handler, and stops reading the connection.
func (c *framingConn) refuse(reason, method, target string) {
	c.mu.Lock()
	c.reason, c.method = reason, method
	c.path, _, _ = strings.Cut(target, "?")
	c.mu.Unlock()
	c.pending = append(c.pending, "GET / HTTP/1.1\r\nHost: switchyard\r\n"+framingHeader+": "+c.token+"\r\n\r\n"...)
	c.state = fsRejected
}

func (c *framingConn) refused() (reason, method, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reason, c.method, c.path
}

// Write rewrites net/http's plain-text answers to requests it could not
// parse into the OpenAI error shape. net/http writes each as one write of
// "HTTP/1.1 <status>" + plainErrorHeaders + text, straight to the
// connection, and only between requests.
func (c *framingConn) Write(p []byte) (int, error) {
	if c.between.Load() && bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		if out, status, ok := rewritePlainError(p); ok {
			if _, err := c.Conn.Write(out); err != nil {
				return 0, err
			}
			c.logPlainError(status)
			return len(p), nil
		}
	}
	return c.Conn.Write(p)
}

const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewritePlainError turns one of net/http's plain-text error responses into
// the same status with an OpenAI error body.
func rewritePlainError(p []byte) ([]byte, int, bool) {
	statusLine, text, ok := bytes.Cut(p, []byte(plainErrorHeaders))
	if !ok || !bytes.HasPrefix(statusLine, []byte("HTTP/1.1 ")) || bytes.ContainsAny(statusLine, "\r\n") {
		return nil, 0, false
	}
	statusLine = statusLine[len("HTTP/1.1 "):]
	if len(statusLine) < 3 {
		return nil, 0, false
	}
	status, err := strconv.Atoi(string(statusLine[:3]))
	if err != nil || status < 400 || status > 599 {
		return nil, 0, false
	}
	e := &apierror.Error{Status: status, Code: "invalid_request", Message: "The request could not be parsed."}
	// net/http's texts are fixed strings that never echo the request.
	_, detail, _ := bytes.Cut(statusLine, []byte(": "))
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		e.Code, e.Message = "request_header_fields_too_large", "The request's headers are too large."
	case status == http.StatusNotImplemented:
		e.Code, e.Message = "unsupported_transfer_encoding", "The request's Transfer-Encoding is not supported."
		e.Type = apierror.TypeInvalidRequest
	case len(detail) > 0:
		e.Message = "The request could not be parsed: " + string(detail) + "."
	case len(text) > 0 && !bytes.Equal(text, statusLine):
		e.Message = "The request could not be parsed: " + string(text) + "."
	}
	body := e.JSON()
	var b bytes.Buffer
	b.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	b.WriteString("Content-Type: application/json\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n")
	b.Write(body)
	return b.Bytes(), status, true
}

// logPlainError writes the access log line of a request net/http refused
// before any handler saw it.
func (c *framingConn) logPlainError(status int) {
	if c.d == nil || !c.d.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	c.d.log.LogAttrs(context.Background(), slog.LevelInfo, "access",
		slog.String("listener", c.lis), slog.String("protocol", "HTTP/1.1"), slog.Int("status", status),
		slog.String("response_detail", "http1_codec_error"))
}

// framingCtxKey carries a connection's framingConn to its requests.
type framingCtxKey struct{}

// newFramingToken is the per-process mark of stand-in requests: a client
// cannot forge one.
func newFramingToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// refusedFraming answers the stand-in of a refused request, if r is one.
func (d *DataPlane) refusedFraming(listener string, w http.ResponseWriter, r *http.Request) bool {
	fc, _ := r.Context().Value(framingCtxKey{}).(*framingConn)
	if fc == nil {
		return false
	}
	fc.between.Store(false)
	if r.Header.Get(framingHeader) != d.framingToken {
		return false
	}
	reason, method, path := fc.refused()
	cfg := d.cfg.Load()
	lc := cfg.listeners[listener]
	if lc == nil {
		w.Header().Set("Connection", "close")
		apierror.InvalidParam("", "%s", reason).Write(w)
		return true
	}
	// The request refused is not the stand-in's GET: log what the client sent.
	r2 := r.Clone(r.Context())
	r2.Method = method
	s := &requestState{d: d, cfg: cfg, lis: lc, table: lc.hcm.routes, log: d.log, w: w,
		rc: http.NewResponseController(w), r: r2, start: time.Now(), path: path}
	s.upCtx, s.upCancel = context.WithCancel(r.Context())
	defer s.finish()
	w.Header().Set("Connection", "close")
	s.sendLocal(&apierror.Error{Status: http.StatusBadRequest, Code: "invalid_request_framing", Message: reason}, "http1_codec_error")
	return true
}

// framingConnContext and framingConnState connect a connection's
// framingConn to its requests and to net/http's view of it.
func framingConnContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingCtxKey{}, fc)
	}
	return ctx
}

func framingConnState(c net.Conn, st http.ConnState) {
	if fc, ok := c.(*framingConn); ok && st == http.StateIdle {
		fc.between.Store(true)
	}
}
