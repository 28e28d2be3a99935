package dataplane

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
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
