// Package jsonlog provides a slog handler writing JSON lines exactly as
// slog's JSONHandler does, with a fast path for hot log lines (the data
// plane's access log): the caller appends the line's fields itself into a
// buffer it reuses, without slog's attribute values and encoder state.
package jsonlog

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// Handler is a slog.Handler writing what slog.NewJSONHandler writes. Its
// records go through slog's JSONHandler; AppendStart and WriteLine are the
// fast path, whose lines have the same format.
type Handler struct {
	json  slog.Handler
	out   *lockedWriter
	level slog.Leveler
	// prefix is the WithAttrs attributes as slog encodes them, each with
	// its leading comma.
	prefix []byte
	// fast is false when the fast path cannot match slog's output (a
	// group, ReplaceAttr, AddSource, an attribute named as a built-in).
	fast bool
}

// lockedWriter serialises the writes of slog's handler and of WriteLine.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// NewHandler returns a handler writing JSON lines to w, as
// slog.NewJSONHandler(w, opts) does.
func NewHandler(w io.Writer, opts *slog.HandlerOptions) *Handler {
	if opts == nil {
		opts = &slog.HandlerOptions{}
	}
	out := &lockedWriter{w: w}
	level := opts.Level
	if level == nil {
		level = slog.LevelInfo
	}
	return &Handler{json: slog.NewJSONHandler(out, opts), out: out, level: level,
		fast: opts.ReplaceAttr == nil && !opts.AddSource}
}

// Enabled reports whether level is logged.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.json.Enabled(ctx, level)
}

// Handle writes r through slog's JSONHandler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error { return h.json.Handle(ctx, r) }

// WithAttrs returns a handler adding attrs to every line.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &Handler{json: h.json.WithAttrs(attrs), out: h.out, level: h.level, fast: h.fast}
	if n.fast {
		n.prefix, n.fast = encodeAttrs(h.prefix, attrs)
	}
	return n
}

// WithGroup returns a handler nesting later attributes in group name; it
// has no fast path.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{json: h.json.WithGroup(name), out: h.out, level: h.level}
}

// encodeAttrs appends attrs to prefix as slog's JSONHandler encodes them
// (by having it encode them, without the built-in fields).
func encodeAttrs(prefix []byte, attrs []slog.Attr) ([]byte, bool) {
	for _, a := range attrs {
		switch a.Key {
		case slog.TimeKey, slog.LevelKey, slog.MessageKey, slog.SourceKey:
			return nil, false
		}
	}
	var buf bytes.Buffer
	drop := func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 {
			switch a.Key {
			case slog.TimeKey, slog.LevelKey, slog.MessageKey:
				return slog.Attr{}
			}
		}
		return a
	}
	j := slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: drop}).WithAttrs(attrs)
	if err := j.Handle(context.Background(), slog.NewRecord(time.Time{}, slog.LevelInfo, "", 0)); err != nil {
		return nil, false
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("}\n"))
	if len(b) == 0 || b[0] != '{' {
		return nil, false
	}
	b = b[1:]
	if len(b) == 0 {
		return prefix, true
	}
	out := append([]byte(nil), prefix...)
	out = append(out, ',')
	return append(out, b...), true
}

// AppendStart appends the start of a line for a record at t, level, msg,
// with the handler's attributes: `{"time":…,"level":…,"msg":…` and
// ok true; ok is false when the handler has no fast path (the caller logs
// through slog then). The caller appends its fields with Append* and
// writes the line with WriteLine.
func (h *Handler) AppendStart(buf []byte, t time.Time, level slog.Level, msg string) (_ []byte, ok bool) {
	if !h.fast {
		return buf, false
	}
	if y := t.Year(); y < 0 || y >= 10000 {
		return buf, false // slog writes an error value; leave it to slog
	}
	buf = append(buf, `{"time":"`...)
	buf = t.AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","level":`...)
	buf = AppendStringValue(buf, level.String())
	buf = append(buf, `,"msg":`...)
	buf = AppendStringValue(buf, msg)
	return append(buf, h.prefix...), true
}

// WriteLine ends line (from AppendStart) and writes it whole.
func (h *Handler) WriteLine(line []byte) error {
	line = append(line, '}', '\n')
	_, err := h.out.Write(line)
	return err
}

// AppendString appends the field `,"key":"value"`.
func AppendString(buf []byte, key, value string) []byte {
	buf = appendKey(buf, key)
	return AppendStringValue(buf, value)
}

// AppendInt appends the field `,"key":n`.
func AppendInt(buf []byte, key string, n int64) []byte {
	buf = appendKey(buf, key)
	return strconv.AppendInt(buf, n, 10)
}

// AppendAny appends the field `,"key":v` as slog.Any(key, v) encodes it:
// strings, integers and booleans directly, anything else with
// encoding/json (without HTML escaping).
func AppendAny(buf []byte, key string, v any) []byte {
	buf = appendKey(buf, key)
	switch v := v.(type) {
	case string:
		return AppendStringValue(buf, v)
	case int64:
		return strconv.AppendInt(buf, v, 10)
	case int:
		return strconv.AppendInt(buf, int64(v), 10)
	case bool:
		return strconv.AppendBool(buf, v)
	}
	// Floats too: slog encodes them with encoding/json, whose format
	// strconv does not always match (and NaN and infinities fail).
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// slog writes the error message as the value.
		return AppendStringValue(buf, "!ERROR:"+err.Error())
	}
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// AppendKey appends `,"key":`, for a value appended after it.
func AppendKey(buf []byte, key string) []byte { return appendKey(buf, key) }

func appendKey(buf []byte, key string) []byte {
	buf = append(buf, ',')
	buf = AppendStringValue(buf, key)
	return append(buf, ':')
}

// AppendStringValue appends s as a JSON string, escaped as slog's
// JSONHandler escapes it: quotation mark, backslash and control
// characters, invalid UTF-8 as U+FFFD, U+2028 and U+2029; no HTML
// escaping.
func AppendStringValue(buf []byte, s string) []byte {
	// jsonquote escapes exactly so (encoding/json's rules but for \b and
	// \f, which slog writes as \u0008 and \u000c, as jsonquote does).
	return jsonquote.Append(buf, s)
}
