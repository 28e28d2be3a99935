package dataplane

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/tracing"
)

// Tracing, as Envoy's tracer does it: a server span per request, continuing
// the trace of the request's traceparent; a span per ext_proc message,
// whose stream carries the trace context in its gRPC metadata; a client
// span per upstream attempt. Only the clusters of Options.TraceClusters
// (the backends) get a traceparent: a provider is sent what its API needs,
// and extproc's header allow-list keeps a client's traceparent from it too.
// With no Options.Tracer, none of this runs: the hot path does no tracing
// work at all.

const tracerName = "github.com/switchyard-ai/switchyard/envoy/dataplane"

// headerCarrier reads the trace context from a request's header map.
type headerCarrier struct{ h *headerMap }

func (c headerCarrier) Get(k string) string { return c.h.value(k) }
func (c headerCarrier) Set(k, v string)     { c.h.set(strings.ToLower(k), v) }
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(*c.h))
	for _, f := range *c.h {
		keys = append(keys, f.key)
	}
	return keys
}

// mdCarrier writes the trace context into outgoing gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(k string) string {
	if v := metadata.MD(c).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c mdCarrier) Set(k, v string) { metadata.MD(c).Set(k, v) }
func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// startTrace starts the request's server span when tracing is on.
func (s *requestState) startTrace() {
	tr := s.d.tracer
	if tr == nil {
		return
	}
	ctx := tracing.Propagator.Extract(context.Background(), headerCarrier{&s.headers})
	s.traceCtx, s.span = tr.Start(ctx, s.r.Method+" "+spanRoute(s.path), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(s.start),
		trace.WithAttributes(tracing.HTTPRequestMethod.String(s.r.Method), tracing.SwitchyardRequestID.String(s.requestID)))
}

// spanRoute names a request's route with few distinct values: the model
// endpoints' fixed paths, else the path family (/v1/files, not
// /v1/files/file-…).
func spanRoute(p string) string {
	for _, fixed := range []string{"/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses", "/v1/models"} {
		if p == fixed {
			return fixed
		}
	}
	return pathFamily(p)
}

// genAIAttrs are the GenAI attributes of the request's metadata.
func (s *requestState) genAIAttrs() []attribute.KeyValue {
	md := s.meta.get(catalog.MetadataNamespace).GetFields()
	model := md["model"].GetStringValue()
	if model == "" {
		return nil
	}
	attrs := []attribute.KeyValue{
		tracing.GenAIOperationName.String(tracing.OperationName(s.path)),
		tracing.GenAIRequestModel.String(model),
	}
	if p := md["provider"].GetStringValue(); p != "" {
		attrs = append(attrs, tracing.GenAIProviderName.String(p), tracing.SwitchyardProvider.String(p))
	}
	if v, ok := md["prompt_tokens"]; ok {
		attrs = append(attrs, tracing.GenAIUsageInputTokens.Int64(wholeNumber(v)))
	}
	if v, ok := md["completion_tokens"]; ok {
		attrs = append(attrs, tracing.GenAIUsageOutputTokens.Int64(wholeNumber(v)))
	}
	return attrs
}

// endTrace ends the request's spans with its outcome.
func (s *requestState) endTrace() {
	if s.span == nil {
		return
	}
	if s.upSpan != nil {
		s.endAttemptSpan(s.upSpan, s.upStatus)
	}
	attrs := append(s.genAIAttrs(), tracing.HTTPResponseStatusCode.Int(s.status))
	if s.detail != "" {
		attrs = append(attrs, tracing.SwitchyardResponseInfo.String(s.detail))
	}
	s.span.SetAttributes(attrs...)
	if s.status >= 500 || s.streamCut {
		s.span.SetStatus(codes.Error, strconv.Itoa(s.status))
		s.span.SetAttributes(tracing.ErrorType.String(strconv.Itoa(s.status)))
	}
	s.span.End(trace.WithTimestamp(s.end))
}

// startAttemptSpan starts the client span of an upstream attempt, a child
// of the request's; ctx carries it.
func (s *requestState) startAttemptSpan(ctx context.Context, cluster string) (context.Context, trace.Span) {
	md := s.meta.get(catalog.MetadataNamespace).GetFields()
	name := "upstream " + cluster
	attrs := []attribute.KeyValue{tracing.SwitchyardUpstreamCluster.String(cluster), tracing.SwitchyardAttempt.Int(s.attempts)}
	if model := md["model"].GetStringValue(); model != "" {
		op := tracing.OperationName(s.path)
		name = op + " " + model // the GenAI conventions' client span name
		attrs = append(attrs, tracing.GenAIOperationName.String(op), tracing.GenAIRequestModel.String(model))
	}
	_, span := s.d.tracer.Start(s.traceCtx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return trace.ContextWithSpan(ctx, span), span
}

// endAttemptSpan ends an attempt's span with its outcome: the provider
// upstream ext_proc chose for it, the status.
func (s *requestState) endAttemptSpan(span trace.Span, status int) {
	md := s.meta.get(catalog.MetadataNamespace).GetFields()
	if p := md["provider"].GetStringValue(); p != "" {
		span.SetAttributes(tracing.GenAIProviderName.String(p))
	}
	if status > 0 {
		span.SetAttributes(tracing.HTTPResponseStatusCode.Int(status))
	}
	if status == 0 || status >= 500 {
		span.SetStatus(codes.Error, "upstream failed")
	}
	span.End()
}

// traceExchange starts the span of one ext_proc message, a child of the
// request's (or the attempt's) span; nil when tracing is off. A streamed
// body's chunks get none but the last, so a long stream is not thousands
// of spans.
func (p *processor) traceExchange(req *extprocv3.ProcessingRequest) trace.Span {
	if p.tracer == nil {
		return nil
	}
	var phase string
	switch r := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		phase = "request_headers"
	case *extprocv3.ProcessingRequest_RequestBody:
		if !r.RequestBody.GetEndOfStream() {
			return nil
		}
		phase = "request_body"
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		phase = "response_headers"
	case *extprocv3.ProcessingRequest_ResponseBody:
		if !r.ResponseBody.GetEndOfStream() {
			return nil
		}
		phase = "response_body"
	default:
		return nil
	}
	_, span := p.tracer.Start(p.parent, "ext_proc "+phase, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.SwitchyardExtProcPhase.String(phase)))
	return span
}

// traceMetadata adds the trace context to the ext_proc stream's gRPC
// metadata, for extproc's spans to join the request's trace.
func (p *processor) traceMetadata(ctx context.Context) context.Context {
	if p.tracer == nil {
		return ctx
	}
	md := metadata.MD{}
	tracing.Propagator.Inject(p.parent, mdCarrier(md))
	for k, v := range md {
		for _, x := range v {
			ctx = metadata.AppendToOutgoingContext(ctx, k, x)
		}
	}
	return ctx
}

// traceCarrier adds the trace context to md, the metadata a local ext_proc
// session is opened with (traceMetadata's equivalent).
func (p *processor) traceCarrier(md metadata.MD) {
	tracing.Propagator.Inject(p.parent, mdCarrier(md))
}

// injectTrace sets the attempt's traceparent on an upstream request to a
// cluster of Options.TraceClusters.
func (s *requestState) injectTrace(ctx context.Context, cluster string, h http.Header) {
	if s.d.tracer == nil || !s.d.opts.TraceClusters[cluster] {
		return
	}
	tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}
