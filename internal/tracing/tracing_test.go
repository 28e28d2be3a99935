package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchyard-ai/switchyard/internal/config"
)

func TestOperationName(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat/completions": "chat", "/v1/embeddings": "embeddings", "/v1/completions": "text_completion", "/v1/responses": "chat",
	} {
		if got := OperationName(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

func TestOffByDefault(t *testing.T) {
	for _, c := range []*config.Tracing{nil, {}} {
		tp, err := NewProvider(context.Background(), c, "x")
		if tp != nil || err != nil {
			t.Errorf("%+v: provider %v, %v", c, tp, err)
		}
	}
	h := http.NotFoundHandler()
	if got := Handler(nil, nil, h); got == nil {
		t.Error("no handler without a provider")
	}
	if Transport(nil, http.DefaultTransport) != http.DefaultTransport {
		t.Error("the transport is wrapped without a provider")
	}
}

// TestHandlerAndTransport: a call through Transport carries its span's
// traceparent, and Handler's server span is that span's child.
func TestHandlerAndTransport(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := trace.NewTracerProvider(trace.WithSpanProcessor(rec))
	var got string
	srv := httptest.NewServer(Handler(tp, func(*http.Request) string { return "/v1/responses" },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got = r.Header.Get("traceparent")
			w.WriteHeader(http.StatusTeapot)
		})))
	defer srv.Close()
	c := &http.Client{Transport: Transport(tp, http.DefaultTransport)}
	resp, err := c.Post(srv.URL+"/v1/responses/resp_1", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if got == "" {
		t.Fatal("no traceparent sent")
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	server, client := spans[0], spans[1]
	if server.Name() != "POST /v1/responses" || server.Parent().SpanID() != client.SpanContext().SpanID() {
		t.Errorf("server span %q, parent %s, client %s", server.Name(), server.Parent().SpanID(), client.SpanContext().SpanID())
	}
	for _, kv := range server.Attributes() {
		if kv.Key == HTTPResponseStatusCode && kv.Value.AsInt64() != http.StatusTeapot {
			t.Errorf("status %d", kv.Value.AsInt64())
		}
	}
}
