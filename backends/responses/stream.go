package responses

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/sse"
)

// eventWriter writes Responses stream events, one flush per event. Its
// buffers are reused, so an event costs no allocation beyond what its
// fields need.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	seq     int64
	data    []byte
	out     []byte
	err     error // the first write error: the client is gone
	started bool
}

func newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w),
		data: make([]byte, 0, 1024), out: make([]byte, 0, 1024)}
}

func (e *eventWriter) start() {
	h := e.w.Header()
	h.Set("content-type", "text/event-stream; charset=utf-8")
	h.Set("cache-control", "no-cache")
	e.w.WriteHeader(http.StatusOK)
	e.started = true
}

// send writes event typ. fields appends the event's members after "type",
// each followed by a comma; send adds sequence_number.
func (e *eventWriter) send(typ string, fields func([]byte) []byte) {
	if e.err != nil {
		return
	}
	d := append(e.data[:0], `{"type":"`...)
	d = append(d, typ...)
	d = append(d, `",`...)
	d = fields(d)
	d = append(d, `"sequence_number":`...)
	d = strconv.AppendInt(d, e.seq, 10)
	d = append(d, '}')
	e.seq++
	e.data = d
	e.out = sse.AppendEvent(e.out[:0], typ, d)
	if _, err := e.w.Write(e.out); err != nil {
		e.err = err
		return
	}
	if err := e.rc.Flush(); err != nil {
		e.err = err
	}
}

// errStreamError is an error event inside the gateway's stream.
type errStreamError struct{ msg string }

func (e *errStreamError) Error() string { return "responses: error in the model stream" }

// maxStreamBytes bounds one streamed chat completion, as maxUpstreamBody
// bounds one read whole: an upstream that never ends must not grow the
// response's text without limit. A variable for the tests.
var maxStreamBytes int64 = maxUpstreamBody

// errStreamTooLong ends a model stream past maxStreamBytes.
var errStreamTooLong = &errStreamError{msg: "The model's answer exceeded the size this gateway accepts."}

// readStream reads the gateway's chat completion stream, turning its
// chunks into items and events as they arrive.
func (r *run) readStream(ctx context.Context, body io.Reader) error {
	var sp sse.Splitter
	buf := make([]byte, 32<<10)
	done := false
	var total int64
	onEvent := func(ev sse.Event) error {
		if done {
			return nil
		}
		if string(ev.Data) == "[DONE]" {
			done = true
			return nil
		}
		return r.onChunk(ev.Data)
	}
	for !done {
		n, rerr := body.Read(buf)
		if n > 0 {
			if err := sp.Feed(buf[:n], false, onEvent); err != nil {
				return err
			}
		}
		if total += int64(n); total > maxStreamBytes && !done {
			r.s.log.Warn("responses: model stream too long", "response", r.obj.ID, "bytes", total)
			return errStreamTooLong
		}
		if r.ev != nil && r.ev.err != nil {
			return errClientGone
		}
		if errors.Is(rerr, io.EOF) {
			if err := sp.Feed(nil, true, onEvent); err != nil {
				return err
			}
			break
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return errClientGone
			}
			r.s.log.Warn("responses: model stream broken", "response", r.obj.ID, "err", rerr)
			return fmt.Errorf("responses: read model stream: %w", rerr)
		}
	}
	// A stream that ends without [DONE] or a finish reason was cut.
	if !done && r.finish == "" {
		r.s.log.Warn("responses: model stream ended early", "response", r.obj.ID)
		return errors.New("responses: model stream ended early")
	}
	return nil
}

// onChunk handles one chat.completion.chunk. data is valid only during the
// call (it aliases the splitter's buffer), and so is everything parsed from
// it: text is copied into the message as it is appended, and the raw delta
// straight into the event.
func (r *run) onChunk(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	// A string view of data without copying it: gjson's results then alias
	// the chunk instead of each being a fresh copy, which is what keeps a
	// delta event free of allocations. data is not modified meanwhile.
	s := unsafe.String(&data[0], len(data))
	if !gjson.Valid(s) {
		return errors.New("responses: invalid chunk in the model stream")
	}
	// One pass over the top-level keys rather than a scan per key.
	var choice, u, e gjson.Result
	gjson.Parse(s).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			choice = v.Get("0")
		case "usage":
			u = v
		case "error":
			e = v
		}
		return true
	})
	if e.Exists() {
		return &errStreamError{msg: strings.Clone(e.Get("message").Str)}
	}
	if u.IsObject() {
		r.addUsage(u)
	}
	if !choice.Exists() {
		return nil
	}
	delta := choice.Get("delta")
	if c := delta.Get("content"); c.Type == gjson.String && c.Str != "" {
		r.textDelta(c.Raw, c.Str)
	}
	if c := delta.Get("refusal"); c.Type == gjson.String && c.Str != "" {
		r.refusalDelta(c.Raw, c.Str)
	}
	if tcs := delta.Get("tool_calls"); tcs.IsArray() {
		tcs.ForEach(func(_, tc gjson.Result) bool {
			args := tc.Get("function.arguments")
			// The id and name outlive the chunk.
			r.toolCallDelta(tc.Get("index").Int(), strings.Clone(tc.Get("id").Str),
				strings.Clone(tc.Get("function.name").Str), args.Raw, args.Str)
			return true
		})
	}
	if f := choice.Get("finish_reason"); f.Type == gjson.String {
		r.finish = strings.Clone(f.Str)
	}
	return nil
}
