package h2grpc

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/protocodec"
)

// stream is one gRPC call. Its sending side (SendMsg, CloseSend) and its
// receiving side (RecvMsg) are each used by one goroutine at a time, as
// grpc-go's ClientStream; the reader goroutine fills it.
type stream struct {
	c             *conn
	id            uint32
	ctx           context.Context
	ci            callInfo
	serverStreams bool

	// sendWin is the stream's send window, under c.mu.
	sendWin int64

	mu sync.Mutex
	// rbuf holds received bytes not yet consumed: length-prefixed
	// messages. The reader only appends; the receiver consumes from the
	// front, unmarshalling outside mu (bytes it reads are never written by
	// an append).
	rbuf       []byte
	unacked    int // received bytes not yet given back by WINDOW_UPDATE
	gotHeaders bool
	header     metadata.MD
	trailer    metadata.MD
	ended      bool
	// abrupt: ended by a reset, a cancel or a dead connection, when
	// messages still buffered are not delivered (as grpc-go).
	abrupt bool
	err    error // the final status; nil is OK
	stop   func() bool
	notify chan struct{} // poked on each arrival
	done   chan struct{} // closed when ended

	// Sending side.
	wbuf    []byte
	sentEnd bool
	flushed bool
}

func newStream(ctx context.Context, c *conn, ci callInfo) *stream {
	return &stream{
		c:             c,
		ctx:           ctx,
		ci:            ci,
		serverStreams: true,
		notify:        make(chan struct{}, 1),
		done:          make(chan struct{}),
	}
}

// watch makes the end of the caller's context cancel the stream.
func (s *stream) watch() {
	if s.ctx.Done() == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.stop = context.AfterFunc(s.ctx, s.cancelled)
	}
}

func (s *stream) cancelled() {
	s.abort(status.FromContextError(s.ctx.Err()).Err())
}

// abort ends the stream with err and resets it on the wire
// (RST_STREAM(CANCEL)), unless it had ended already.
func (s *stream) abort(err error) {
	if s.finish(err, true) {
		s.c.reset(s, http2.ErrCodeCancel)
	}
}

// finish ends the stream with err (nil: OK); false when it had ended.
func (s *stream) finish(err error, abrupt bool) bool {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	s.ended, s.err, s.abrupt = true, err, abrupt
	stop := s.stop
	close(s.done)
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	return true
}

func (s *stream) isDone() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func (s *stream) poke() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// release is the end of a unary call: a stream still open is reset.
func (s *stream) release() {
	s.abort(status.Error(codes.Canceled, "grpc: the call ended"))
}

var errSendAfterEnd = status.Error(codes.Internal, "SendMsg called after CloseSend")

// send marshals m behind its 5-byte prefix and writes it, with END_STREAM
// when end is set. An ended stream returns io.EOF (RecvMsg reports why).
func (s *stream) send(m any, end bool) error {
	if s.sentEnd {
		return errSendAfterEnd
	}
	if s.isDone() {
		return io.EOF
	}
	b, err := protocodec.AppendMarshal(append(s.wbuf[:0], 0, 0, 0, 0, 0), m)
	if err != nil {
		err = status.Error(codes.Internal, "grpc: error while marshaling: "+err.Error())
		s.abort(err)
		return err
	}
	if len(b)-5 > math.MaxUint32 {
		err = status.Error(codes.ResourceExhausted, "grpc: message too large")
		s.abort(err)
		return err
	}
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	s.wbuf = b
	s.sentEnd = end
	s.flushed = true
	if err := s.c.writeData(s, b, end); err != nil {
		return io.EOF
	}
	return nil
}

// SendMsg sends m; m may be reused once it returns.
func (s *stream) SendMsg(m any) error { return s.send(m, false) }

// CloseSend half-closes the stream (END_STREAM).
func (s *stream) CloseSend() error {
	if s.sentEnd || s.isDone() {
		return nil
	}
	s.sentEnd, s.flushed = true, true
	_ = s.c.writeData(s, nil, true)
	return nil
}

// Abandon ends the stream from the client's side as Envoy's ext_proc
// filter does once it is done with it: half-close and RST_STREAM(CANCEL),
// written together (grpc-go writes the same two frames for CloseSend
// followed by cancelling the context, from its writer goroutine). The
// stream then reports Canceled; the caller's later cancel of the context
// costs nothing more.
func (s *stream) Abandon() {
	if !s.finish(status.Error(codes.Canceled, "grpc: the stream was abandoned"), true) {
		return
	}
	if !s.c.remove(s) {
		return
	}
	c := s.c
	c.wmu.Lock()
	if !s.sentEnd {
		s.sentEnd = true
		// An empty DATA frame takes no flow-control window.
		_ = c.wfr.WriteData(s.id, true, nil)
	}
	_ = c.wfr.WriteRSTStream(s.id, http2.ErrCodeCancel)
	_ = c.unlockAndFlush(true)
}

func (s *stream) Context() context.Context { return s.ctx }

// Header waits for the server's response headers.
func (s *stream) Header() (metadata.MD, error) {
	s.flush()
	for {
		s.mu.Lock()
		switch {
		case s.gotHeaders:
			md := s.header
			s.mu.Unlock()
			return md, nil
		case s.ended:
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
			s.poke() // the receiver may be waiting on it too
		case <-s.done:
		}
	}
}

// Trailer is the server's trailers, once RecvMsg has returned an error.
func (s *stream) Trailer() metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trailer
}

// flush writes out the stream's HEADERS when nothing was sent after them.
func (s *stream) flush() {
	if !s.flushed {
		s.flushed = true
		s.c.flush()
	}
}

// RecvMsg receives the next message into m: io.EOF when the server ended
// the stream with OK, its status error otherwise. Once it has returned an
// error, the Header and Trailer call options have their metadata.
func (s *stream) RecvMsg(m any) error {
	err := s.recvMsg(m)
	if err != nil {
		s.setCallMetadata()
	}
	return err
}

// setCallMetadata fills the Header and Trailer call options' metadata.
func (s *stream) setCallMetadata() {
	if s.ci.header == nil && s.ci.trailer == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ci.header != nil {
		*s.ci.header = s.header
	}
	if s.ci.trailer != nil {
		*s.ci.trailer = s.trailer
	}
}

func (s *stream) recvMsg(m any) error {
	s.flush()
	for {
		s.mu.Lock()
		if s.ended && s.abrupt {
			err := s.err
			s.mu.Unlock()
			return err
		}
		if len(s.rbuf) >= 5 {
			n := int(binary.BigEndian.Uint32(s.rbuf[1:5]))
			var err error
			switch {
			case s.rbuf[0] != 0:
				err = status.Error(codes.Internal, "grpc: compressed message received without negotiated compression")
			case n > s.ci.maxRecv:
				err = status.Error(codes.ResourceExhausted, fmt.Sprintf("grpc: received message larger than max (%d vs. %d)", n, s.ci.maxRecv))
			}
			if err != nil {
				s.mu.Unlock()
				s.abort(err)
				return err
			}
			if len(s.rbuf) >= 5+n {
				msg := s.rbuf[5 : 5+n]
				s.mu.Unlock()
				uerr := protocodec.UnmarshalBytes(msg, m)
				s.consume(5 + n)
				if uerr != nil {
					err := status.Error(codes.Internal, "grpc: failed to unmarshal the received message: "+uerr.Error())
					s.abort(err)
					return err
				}
				if !s.serverStreams {
					err := s.waitEnd()
					if err == nil {
						s.setCallMetadata()
					}
					return err
				}
				return nil
			}
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			if err == nil {
				return io.EOF
			}
			return err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-s.done:
		}
	}
}

// consume drops n received bytes and gives the window back once a quarter
// of it is used.
func (s *stream) consume(n int) {
	s.mu.Lock()
	if len(s.rbuf) == n {
		s.rbuf = s.rbuf[:0]
	} else {
		s.rbuf = s.rbuf[:copy(s.rbuf, s.rbuf[n:])]
	}
	inc := 0
	if !s.ended && s.unacked >= s.c.recvWin/4 {
		inc, s.unacked = s.unacked, 0
	}
	s.mu.Unlock()
	if inc > 0 {
		id := s.id
		s.c.writeControl(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(id, uint32(inc)) })
	}
}

// waitEnd waits for the end of a stream whose one reply was received.
func (s *stream) waitEnd() error {
	for {
		s.mu.Lock()
		if len(s.rbuf) > 0 && !s.abrupt {
			s.mu.Unlock()
			err := status.Error(codes.Internal, "cardinality violation: expected <EOF> for non server-streaming RPCs, but received another message")
			s.abort(err)
			return err
		}
		if s.ended {
			err := s.err
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		select {
		case <-s.notify:
		case <-s.done:
		}
	}
}

// onData is the reader's: it buffers a DATA frame's payload (length n with
// padding) and returns the stream window to give back now: at once while
// the buffered bytes are within the window or do not yet make a whole
// message (a message larger than the window must still arrive), else when
// the receiver consumes them.
func (s *stream) onData(data []byte, n int, end bool, win int) int {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return 0
	}
	s.rbuf = append(s.rbuf, data...)
	s.unacked += n
	inc := 0
	if end {
		s.ended, s.err = true, status.Error(codes.Internal, "server closed the stream without sending trailers")
		close(s.done)
	} else if s.unacked >= win/4 && (len(s.rbuf) <= win || !wholeMessage(s.rbuf)) {
		inc, s.unacked = s.unacked, 0
	}
	stop := s.stop
	s.mu.Unlock()
	if end && stop != nil {
		stop()
	}
	s.poke()
	return inc
}

func wholeMessage(b []byte) bool {
	return len(b) >= 5 && len(b)-5 >= int(binary.BigEndian.Uint32(b[1:5]))
}

// onHeaders takes the response headers or the trailers. reset: the
// response is not gRPC and the stream must be reset.
func (s *stream) onHeaders(f *http2.MetaHeadersFrame) (reset bool) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return false
	}
	if !s.gotHeaders {
		s.gotHeaders = true
		if err := checkResponse(f); err != nil {
			s.mu.Unlock()
			s.finish(err, true)
			return !f.StreamEnded()
		}
		if !f.StreamEnded() {
			s.header = headerMD(f)
			s.mu.Unlock()
			s.poke()
			return false
		}
	} else if !f.StreamEnded() {
		s.mu.Unlock()
		s.finish(status.Error(codes.Internal, "trailers without END_STREAM"), true)
		return true
	}
	// Trailers, or a trailers-only response.
	s.trailer = headerMD(f)
	s.mu.Unlock()
	s.finish(statusOf(f), false)
	s.poke()
	return false
}

// checkResponse refuses a response that is not gRPC's, with the code
// grpc-go derives from its HTTP status.
func checkResponse(f *http2.MetaHeadersFrame) error {
	if st := f.PseudoValue("status"); st != "200" {
		code, _ := strconv.Atoi(st)
		c := codes.Unknown
		switch code {
		case 400:
			c = codes.Internal
		case 401:
			c = codes.Unauthenticated
		case 403:
			c = codes.PermissionDenied
		case 404:
			c = codes.Unimplemented
		case 429, 502, 503, 504:
			c = codes.Unavailable
		}
		return status.Error(c, fmt.Sprintf("unexpected HTTP status code received from server: %d", code))
	}
	ct := ""
	for _, hf := range f.RegularFields() {
		if hf.Name == "content-type" {
			ct = hf.Value
		}
	}
	if !strings.HasPrefix(ct, "application/grpc") {
		return status.Error(codes.Unknown, fmt.Sprintf("transport: received unexpected content-type %q", ct))
	}
	return nil
}

// statusOf reads grpc-status, grpc-message and grpc-status-details-bin.
func statusOf(f *http2.MetaHeadersFrame) error {
	var code, msg, details string
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "grpc-status":
			code = hf.Value
		case "grpc-message":
			msg = decodeMessage(hf.Value)
		case "grpc-status-details-bin":
			details = hf.Value
		}
	}
	if code == "" {
		return status.Error(codes.Internal, "server closed the stream without sending trailers")
	}
	c, err := strconv.ParseUint(code, 10, 32)
	if err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("transport: malformed grpc-status %q", code))
	}
	if c == 0 {
		return nil
	}
	if details != "" {
		if b, err := decodeBin(details); err == nil {
			st := &spb.Status{}
			if proto.Unmarshal(b, st) == nil && st.GetCode() == int32(c) {
				return status.FromProto(st).Err()
			}
		}
	}
	return status.Error(codes.Code(c), msg)
}

func decodeBin(v string) ([]byte, error) {
	if len(v)%4 == 0 {
		return base64.StdEncoding.DecodeString(v)
	}
	return base64.RawStdEncoding.DecodeString(v)
}

// headerMD is the metadata of a HEADERS frame: its regular fields but
// gRPC's own.
func headerMD(f *http2.MetaHeadersFrame) metadata.MD {
	md := metadata.MD{}
	for _, hf := range f.RegularFields() {
		if reserved(hf.Name) {
			continue
		}
		v := hf.Value
		if strings.HasSuffix(hf.Name, "-bin") {
			if b, err := decodeBin(v); err == nil {
				v = string(b)
			}
		}
		md[hf.Name] = append(md[hf.Name], v)
	}
	return md
}
