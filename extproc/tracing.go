package extproc

import (
	"bytes"
	"context"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	grpcmd "google.golang.org/grpc/metadata"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/tracing"
)

// streamTrace is a Process stream's span when tracing is on: a server span
// joining the trace the data plane put in the stream's gRPC metadata, with
// the GenAI attributes of the metadata extproc replies with and the model
// the provider answered with. Never content: the response body is only
// looked at for its "model" field.
type streamTrace struct {
	span          trace.Span
	responseModel bool // gen_ai.response.model is set
}

// mdCarrier reads the trace context from incoming gRPC metadata.
type mdCarrier grpcmd.MD

func (c mdCarrier) Get(k string) string {
	if v := grpcmd.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(k, v string) { grpcmd.MD(c).Set(k, v) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// startTrace starts the stream's span, from the trace context in the
// stream's gRPC metadata md; nil when tracing is off or the data plane sent
// no trace context (an unsampled request, or Envoy without tracing).
func (s *Server) startTrace(ctx context.Context, md grpcmd.MD, upstream bool) *streamTrace {
	if s.tracer == nil {
		return nil
	}
	if len(md.Get("traceparent")) == 0 {
		return nil
	}
	pctx := tracing.Propagator.Extract(ctx, mdCarrier(md))
	name := "extproc downstream"
	if upstream {
		name = "extproc upstream"
	}
	_, span := s.tracer.Start(pctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return &streamTrace{span: span}
}

// observe records what a message and its reply tell the span.
func (t *streamTrace) observe(req *extprocv3.ProcessingRequest, resp *extprocv3.ProcessingResponse) {
	if t == nil {
		return
	}
	if fields := resp.GetDynamicMetadata().GetFields()[catalog.MetadataNamespace].GetStructValue().GetFields(); len(fields) > 0 {
		var attrs []attribute.KeyValue
		if v := fields["model"].GetStringValue(); v != "" {
			attrs = append(attrs, tracing.GenAIRequestModel.String(v))
		}
		if v := fields["provider"].GetStringValue(); v != "" {
			attrs = append(attrs, tracing.GenAIProviderName.String(v))
		}
		if v, ok := fields["prompt_tokens"]; ok {
			attrs = append(attrs, tracing.GenAIUsageInputTokens.Int64(int64(v.GetNumberValue())))
		}
		if v, ok := fields["completion_tokens"]; ok {
			attrs = append(attrs, tracing.GenAIUsageOutputTokens.Int64(int64(v.GetNumberValue())))
		}
		t.span.SetAttributes(attrs...)
	}
	if rh := req.GetRequestHeaders(); rh != nil {
		for _, h := range rh.GetHeaders().GetHeaders() {
			if h.GetKey() == ":path" {
				path := string(h.GetRawValue())
				if path == "" {
					path = h.GetValue()
				}
				t.span.SetAttributes(tracing.GenAIOperationName.String(tracing.OperationName(path)))
			}
		}
	}
	if rb := req.GetResponseBody(); rb != nil && !t.responseModel {
		if m := responseModel(rb.GetBody()); m != "" {
			t.span.SetAttributes(tracing.GenAIResponseModel.String(m))
			t.responseModel = true
		}
	}
	if ih := resp.GetImmediateResponse(); ih != nil {
		t.span.SetAttributes(tracing.HTTPResponseStatusCode.Int(int(ih.GetStatus().GetCode())))
	}
}

func (t *streamTrace) end() {
	if t != nil {
		t.span.End()
	}
}

// responseModel is the "model" of a JSON response body, or of the first
// event of an SSE chunk that has one.
func responseModel(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if b[0] == '{' {
		return gjson.GetBytes(b, "model").String()
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok && len(data) > 0 && data[0] == '{' {
			if m := gjson.GetBytes(data, "model").String(); m != "" {
				return m
			}
		}
	}
	return ""
}
