package dataplane

import (
	"context"
	"encoding/hex"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/jsonlog"
)

// accessFields are the access log's own fields; dynamic metadata keys with
// these names are left out rather than shadow them.
var accessFields = map[string]bool{
	"listener": true, "method": true, "path": true, "protocol": true, "status": true,
	"duration_ms": true, "upstream_cluster": true, "request_id": true, "bytes_sent": true,
	"response_detail": true, "response_flags": true, "upstream_host": true, "attempts": true,
	"trace_id": true,
}

// logAccess writes the request's one access log line. It carries no header
// values (authorization least of all) and no body content: the path without
// its query string, the outcome, and the dynamic metadata extproc put in the
// switchyard namespace (key id, model, provider, token counts).
func (s *requestState) logAccess() {
	ctx := context.Background()
	level := slog.LevelInfo
	if s.streamCut {
		// The client got the status line of a success and then an error
		// event: an error nonetheless.
		level = slog.LevelError
	}
	if !s.log.Enabled(ctx, level) {
		return
	}
	if h, ok := s.log.Handler().(lineHandler); ok && s.logAccessLine(h, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("listener", s.lis.name),
		slog.String("method", s.r.Method),
		slog.String("path", s.path),
		slog.String("protocol", s.r.Proto),
		slog.Int("status", s.status),
		slog.Int64("duration_ms", s.end.Sub(s.start).Milliseconds()),
		slog.String("upstream_cluster", s.cluster),
		slog.String("request_id", s.requestID),
		slog.Int64("bytes_sent", s.bytesSent),
	)
	if s.attempts > 0 {
		attrs = append(attrs, slog.String("upstream_host", s.upstreamHost), slog.Int("attempts", s.attempts))
	}
	if s.detail != "" {
		attrs = append(attrs, slog.String("response_detail", s.detail))
	}
	if len(s.flags) > 0 {
		attrs = append(attrs, slog.String("response_flags", strings.Join(s.flags, ",")))
	}
	if s.span != nil {
		// With tracing on, the line names the request's trace.
		if sc := s.span.SpanContext(); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
	}
	if md := s.meta.get(catalog.MetadataNamespace); md != nil {
		keys := make([]string, 0, len(md.GetFields()))
		for k := range md.GetFields() {
			if !accessFields[k] {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			attrs = append(attrs, slog.Any(k, plainValue(md.GetFields()[k])))
		}
	}
	s.log.LogAttrs(ctx, level, "access", attrs...)
}

// plainValue turns a Struct value into a Go value; whole numbers (token
// counts) become integers rather than floats.
func plainValue(v *structpb.Value) any {
	if n, ok := v.GetKind().(*structpb.Value_NumberValue); ok {
		f := n.NumberValue
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		return f
	}
	return v.AsInterface()
}

// lineHandler is a log handler taking whole pre-encoded JSON lines
// (jsonlog.Handler): the access log line, written on every request, is
// appended into a reused buffer rather than built from slog attributes and
// encoded by slog.
type lineHandler interface {
	AppendStart(buf []byte, t time.Time, level slog.Level, msg string) ([]byte, bool)
	WriteLine(line []byte) error
}

// accessBufs holds the access log's line buffers.
var accessBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// logAccessLine writes the access log line through h's fast path: the
// same fields, names, order and encoding as the slog path of logAccess.
// It reports false when h has no fast path.
func (s *requestState) logAccessLine(h lineHandler, level slog.Level) bool {
	bp := accessBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 16<<10 { // a huge line's buffer is not kept
			accessBufs.Put(bp)
		}
	}()
	b, ok := h.AppendStart((*bp)[:0], time.Now(), level, "access")
	if !ok {
		return false
	}
	b = jsonlog.AppendString(b, "listener", s.lis.name)
	b = jsonlog.AppendString(b, "method", s.r.Method)
	b = jsonlog.AppendString(b, "path", s.path)
	b = jsonlog.AppendString(b, "protocol", s.r.Proto)
	b = jsonlog.AppendInt(b, "status", int64(s.status))
	b = jsonlog.AppendInt(b, "duration_ms", s.end.Sub(s.start).Milliseconds())
	b = jsonlog.AppendString(b, "upstream_cluster", s.cluster)
	b = jsonlog.AppendString(b, "request_id", s.requestID)
	b = jsonlog.AppendInt(b, "bytes_sent", s.bytesSent)
	if s.attempts > 0 {
		b = jsonlog.AppendString(b, "upstream_host", s.upstreamHost)
		b = jsonlog.AppendInt(b, "attempts", int64(s.attempts))
	}
	if s.detail != "" {
		b = jsonlog.AppendString(b, "response_detail", s.detail)
	}
	if len(s.flags) > 0 {
		// The flags are Envoy's short codes: nothing to escape.
		b = append(b, `,"response_flags":"`...)
		for i, f := range s.flags {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, f...)
		}
		b = append(b, '"')
	}
	if s.span != nil {
		if sc := s.span.SpanContext(); sc.HasTraceID() {
			id := sc.TraceID()
			b = append(b, `,"trace_id":"`...)
			b = hex.AppendEncode(b, id[:])
			b = append(b, '"')
		}
	}
	if md := s.meta.get(catalog.MetadataNamespace); md != nil {
		fields := md.GetFields()
		var arr [24]string
		keys := arr[:0]
		for k := range fields {
			if !accessFields[k] {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = appendPlainValue(b, k, fields[k])
		}
	}
	*bp = b
	_ = h.WriteLine(b) // as with slog, a line that fails to be written is dropped
	return true
}

// appendPlainValue appends the field k with v's plainValue, as slog.Any
// encodes it.
func appendPlainValue(b []byte, k string, v *structpb.Value) []byte {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return jsonlog.AppendString(b, k, x.StringValue)
	case *structpb.Value_NumberValue:
		if f := x.NumberValue; f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return jsonlog.AppendInt(b, k, int64(f))
		}
	}
	n := len(b)
	if out, ok := jsonlog.AppendStructValue(jsonlog.AppendKey(b, k), v); ok {
		return out
	}
	return jsonlog.AppendAny(b[:n], k, plainValue(v))
}
