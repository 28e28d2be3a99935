// Package tracing sets up OpenTelemetry traces (OTLP/gRPC export, off by
// default) and holds what the components share to trace a request: the
// W3C trace-context propagator, the GenAI semantic-convention attribute
// keys, and HTTP middleware for the backends.
//
// Spans carry ids, names, counts and statuses only: never request or
// response content, header values other than the trace context, keys or
// credentials.
package tracing

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// The GenAI and HTTP semantic-convention attribute keys the gateway sets.
const (
	GenAIOperationName        = attribute.Key("gen_ai.operation.name")
	GenAIRequestModel         = attribute.Key("gen_ai.request.model")
	GenAIResponseModel        = attribute.Key("gen_ai.response.model")
	GenAIProviderName         = attribute.Key("gen_ai.provider.name")
	GenAIUsageInputTokens     = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens    = attribute.Key("gen_ai.usage.output_tokens")
	HTTPRequestMethod         = attribute.Key("http.request.method")
	HTTPResponseStatusCode    = attribute.Key("http.response.status_code")
	URLPath                   = attribute.Key("url.path")
	ErrorType                 = attribute.Key("error.type")
	SwitchyardProvider        = attribute.Key("switchyard.provider")
	SwitchyardUpstreamCluster = attribute.Key("switchyard.upstream_cluster")
	SwitchyardRequestID       = attribute.Key("switchyard.request_id")
	SwitchyardAttempt         = attribute.Key("switchyard.attempt")
	SwitchyardExtProcPhase    = attribute.Key("switchyard.ext_proc.phase")
	SwitchyardResponseInfo    = attribute.Key("switchyard.response_detail")
	SwitchyardBackendsRoute   = attribute.Key("switchyard.backends.route")
)

// Propagator is the W3C trace context (traceparent, tracestate), the one
// propagation format the components speak with each other.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// NewProvider returns a tracer provider exporting to t's OTLP/gRPC
// collector in batches, sampling t's ratio of new traces (parent-based: a
// caller's decision is kept), with service.name service; nil when t does
// not enable tracing. Shut it down to flush what is buffered.
func NewProvider(ctx context.Context, t *config.Tracing, service string) (*sdktrace.TracerProvider, error) {
	if !t.Enabled() {
		return nil, nil
	}
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(t.OTLPEndpoint))
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(t.Ratio()))),
	), nil
}

// Shutdown flushes and stops tp, if any, within a few seconds.
func Shutdown(tp *sdktrace.TracerProvider) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx)
}

// OperationName is gen_ai.operation.name for an OpenAI API path.
func OperationName(path string) string {
	switch {
	case hasPrefix(path, "/v1/embeddings"):
		return "embeddings"
	case hasPrefix(path, "/v1/completions"):
		return "text_completion"
	}
	return "chat"
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// Handler wraps h with a server span per request, continuing the trace of
// the request's traceparent. The span is named by method and route, never
// the full path (ids) or the query.
func Handler(tp trace.TracerProvider, route func(*http.Request) string, h http.Handler) http.Handler {
	if tp == nil {
		return h
	}
	tr := tp.Tracer("github.com/switchyard-ai/switchyard/backends")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		rt := route(r)
		ctx, span := tr.Start(ctx, r.Method+" "+rt, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(HTTPRequestMethod.String(r.Method), SwitchyardBackendsRoute.String(rt)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(HTTPResponseStatusCode.Int(sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(sw.status))
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Transport wraps base with a client span per request, whose context goes
// in the request's traceparent: the backends' calls to the gateway (model
// calls of a Responses run, batch lines), never a provider.
func Transport(tp trace.TracerProvider, base http.RoundTripper) http.RoundTripper {
	if tp == nil {
		return base
	}
	return &transport{tr: tp.Tracer("github.com/switchyard-ai/switchyard/backends"), base: base}
}

type transport struct {
	tr   trace.Tracer
	base http.RoundTripper
}

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	op := OperationName(r.URL.Path)
	ctx, span := t.tr.Start(r.Context(), r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(HTTPRequestMethod.String(r.Method), URLPath.String(r.URL.Path), GenAIOperationName.String(op)))
	r = r.Clone(ctx)
	Propagator.Inject(ctx, propagation.HeaderCarrier(r.Header))
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		span.SetStatus(codes.Error, "transport error")
		span.SetAttributes(ErrorType.String("transport"))
		span.End()
		return nil, err
	}
	span.SetAttributes(HTTPResponseStatusCode.Int(resp.StatusCode))
	if resp.StatusCode >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(resp.StatusCode))
	}
	// The call lasts until its body is read (a stream's last event).
	resp.Body = &endOnClose{ReadCloser: resp.Body, span: span}
	return resp, nil
}

type endOnClose struct {
	io.ReadCloser
	span trace.Span
	once sync.Once
}

func (e *endOnClose) Close() error {
	err := e.ReadCloser.Close()
	e.once.Do(func() { e.span.End() })
	return err
}
