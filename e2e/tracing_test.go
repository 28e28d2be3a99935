package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// collector is an in-test OTLP/gRPC trace collector: it keeps every span
// exported to it.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
	res   []*commonpb.KeyValue // the resources' attributes
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		c.res = append(c.res, rs.GetResource().GetAttributes()...)
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *collector) all() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...)
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return c, "http://" + lis.Addr().String()
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.GetAttributes() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func spanID(b []byte) string { return hex.EncodeToString(b) }

// TestTracesExported sends a chat completion, a streamed one and a
// Responses request through the stack with tracing on and checks the
// spans the in-test collector received: the data plane's server span per
// request with the GenAI attributes, its ext_proc, extproc and upstream
// attempt children, the backends' spans of the Responses run joining the
// same trace, the W3C trace context of the client continued and never
// sent to the provider, and no content, key or credential anywhere.
func TestTracesExported(t *testing.T) {
	col, endpoint := startCollector(t)
	const (
		prompt       = "zanzibar quokka marmalade"
		streamPrompt = "plover anemone tuxedo"
		respPrompt   = "fjord lantern pumpernickel"
		// A client's own trace: the gateway continues it.
		clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		clientParent = "00f067aa0ba902b7"
	)
	s := newStack(t, stackOptions{extraYAML: fmt.Sprintf(`observability:
  tracing:
    otlp_endpoint: %s
    sample_ratio: 1
`, endpoint)})
	ctx := context.Background()
	c := s.client()

	chat, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "demo/chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}, option.WithHeader("traceparent", "00-"+clientTrace+"-"+clientParent+"-01"))
	if err != nil {
		t.Fatal(err)
	}
	completion := chat.Choices[0].Message.Content
	stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:    "demo/chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(streamPrompt)},
	})
	var streamed strings.Builder
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 {
			streamed.WriteString(ch.Choices[0].Delta.Content)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(respPrompt)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A provider failure: the spans say so.
	const failTrace = "5bf92f3577b34da6a3ce929d0e0e4737"
	_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "demo/chat",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}, option.WithHeader("x-fake-status", "500"), option.WithHeader("traceparent", "00-"+failTrace+"-"+clientParent+"-01"))
	apiError(t, err, 500, "fake_fault")
	if completion == "" || streamed.Len() == 0 || resp.OutputText() == "" {
		t.Fatalf("empty answers: %q %q %q", completion, streamed.String(), resp.OutputText())
	}
	// Closing the gateway flushes the spans it has batched.
	s.gw.Close()
	spans := col.all()
	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byID[spanID(sp.GetSpanId())] = sp
	}
	children := func(parent *tracepb.Span, name string) []*tracepb.Span {
		var out []*tracepb.Span
		for _, sp := range spans {
			if spanID(sp.GetParentSpanId()) == spanID(parent.GetSpanId()) && (name == "" || sp.GetName() == name) {
				out = append(out, sp)
			}
		}
		return out
	}
	if testing.Verbose() {
		for _, sp := range spans {
			t.Logf("%s %s parent %s kind %v", spanID(sp.GetSpanId()), sp.GetName(), spanID(sp.GetParentSpanId()), sp.GetKind())
		}
	}
	var chatServers []*tracepb.Span
	var respServer, failed *tracepb.Span
	for _, sp := range spans {
		switch {
		case sp.GetName() == "POST /v1/chat/completions" && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER &&
			hex.EncodeToString(sp.GetTraceId()) == failTrace:
			failed = sp
		case sp.GetName() == "POST /v1/chat/completions" && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER:
			chatServers = append(chatServers, sp)
		case sp.GetName() == "POST /v1/responses" && sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER && attr(sp, "switchyard.backends.route") == nil:
			respServer = sp
		}
	}
	// Three chat completions reached the data plane: the client's two and
	// the Responses run's model call.
	if len(chatServers) != 3 || respServer == nil {
		var names []string
		for _, sp := range spans {
			names = append(names, sp.GetName())
		}
		t.Fatalf("server spans: %d chat, responses %v; all spans: %v", len(chatServers), respServer != nil, names)
	}

	for _, sv := range chatServers {
		for key, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "demo/chat", "gen_ai.provider.name": "fake-openai"} {
			if got := attr(sv, key).GetStringValue(); got != want {
				t.Errorf("server span %s: %s = %q, want %q", spanID(sv.GetSpanId()), key, got, want)
			}
		}
		if attr(sv, "http.response.status_code").GetIntValue() != 200 ||
			attr(sv, "gen_ai.usage.input_tokens").GetIntValue() <= 0 || attr(sv, "gen_ai.usage.output_tokens").GetIntValue() <= 0 {
			t.Errorf("server span attributes: %v", sv.GetAttributes())
		}
		// The upstream attempt: the GenAI conventions' client span.
		att := children(sv, "chat demo/chat")
		if len(att) != 1 || att[0].GetKind() != tracepb.Span_SPAN_KIND_CLIENT ||
			attr(att[0], "gen_ai.provider.name").GetStringValue() != "fake-openai" || attr(att[0], "http.response.status_code").GetIntValue() != 200 {
			t.Errorf("attempt spans under %s: %v", spanID(sv.GetSpanId()), att)
			continue
		}
		// The ext_proc messages of the downstream filter, and of the
		// attempt's upstream filter.
		for _, phase := range []string{"ext_proc request_headers", "ext_proc request_body", "ext_proc response_headers"} {
			if len(children(sv, phase)) != 1 {
				t.Errorf("no %q span under the request", phase)
			}
		}
		if len(children(att[0], "ext_proc request_headers")) != 1 {
			t.Error("no upstream ext_proc span under the attempt")
		}
		// extproc's own spans join through the stream's gRPC metadata.
		down := children(sv, "extproc downstream")
		up := children(att[0], "extproc upstream")
		if len(down) != 1 || len(up) != 1 {
			t.Errorf("extproc spans: downstream %d, upstream %d", len(down), len(up))
		} else if attr(down[0], "gen_ai.request.model").GetStringValue() != "demo/chat" || attr(down[0], "gen_ai.response.model").GetStringValue() == "" {
			t.Errorf("extproc span attributes: %v", down[0].GetAttributes())
		}
	}
	// The failed request: an error, on the request and on its attempts.
	if failed == nil {
		t.Fatal("no span of the failed request")
	}
	if failed.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(failed, "error.type").GetStringValue() != "500" ||
		attr(failed, "http.response.status_code").GetIntValue() != 500 {
		t.Errorf("failed request's span: %v %v", failed.GetStatus(), failed.GetAttributes())
	}
	atts := children(failed, "chat demo/chat")
	if len(atts) == 0 {
		t.Error("no attempt span under the failed request")
	}
	for _, a := range atts {
		if a.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || attr(a, "http.response.status_code").GetIntValue() != 500 {
			t.Errorf("failed attempt's span: %v %v", a.GetStatus(), a.GetAttributes())
		}
	}
	// The client's traceparent is continued...
	var continued bool
	for _, sv := range chatServers {
		if hex.EncodeToString(sv.GetTraceId()) == clientTrace && spanID(sv.GetParentSpanId()) == clientParent {
			continued = true
		}
	}
	if !continued {
		t.Error("no server span continues the client's trace")
	}
	// The access log line names the trace.
	if !strings.Contains(s.logs.String(), `"trace_id":"`+clientTrace+`"`) {
		t.Error("no access log line names the client's trace")
	}
	// ...and never reaches the provider, nor does the gateway's own.
	for _, r := range s.upstream.all() {
		if r.header.Get("traceparent") != "" || r.header.Get("tracestate") != "" {
			t.Errorf("the provider was sent trace context: %q", r.header.Get("traceparent"))
		}
	}

	// The Responses run: the data plane's span, its attempt to the
	// backends cluster, the backends' server span under that, the run's
	// model call under it, and the data plane's span of that call under
	// the model call: one trace.
	toBackends := children(respServer, "upstream switchyard_backends")
	if len(toBackends) != 1 {
		t.Fatalf("attempt spans of the responses request: %v", toBackends)
	}
	be := children(toBackends[0], "POST /v1/responses")
	if len(be) != 1 || be[0].GetKind() != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("backends spans under the responses request: %v", be)
	}
	calls := children(be[0], "POST /v1/chat/completions")
	if len(calls) != 1 || calls[0].GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
		t.Fatalf("model call spans of the run: %v", calls)
	}
	inner := children(calls[0], "POST /v1/chat/completions")
	if len(inner) != 1 || !bytesEqual(inner[0].GetTraceId(), respServer.GetTraceId()) {
		t.Fatalf("the run's model call is not traced through the data plane: %v", inner)
	}
	if attr(inner[0], "gen_ai.usage.output_tokens").GetIntValue() <= 0 {
		t.Errorf("the run's model call has no usage: %v", inner[0].GetAttributes())
	}

	// No content, client key or provider credential in any span.
	secrets := map[string]string{"prompt": "zanzibar", "streamed prompt": "plover", "responses prompt": "fjord",
		"completion": completion, "streamed completion": streamed.String(), "responses output": resp.OutputText(),
		"client key": s.key, "provider key": s.providerKey}
	check := func(where, v string) {
		for what, secret := range secrets {
			if secret != "" && strings.Contains(v, secret) {
				t.Errorf("%s holds the %s", where, what)
			}
		}
	}
	var walk func(where string, v *commonpb.AnyValue)
	walk = func(where string, v *commonpb.AnyValue) {
		check(where, v.GetStringValue())
		check(where, string(v.GetBytesValue()))
		for _, x := range v.GetArrayValue().GetValues() {
			walk(where, x)
		}
		for _, kv := range v.GetKvlistValue().GetValues() {
			walk(where+"."+kv.GetKey(), kv.GetValue())
		}
	}
	for _, sp := range spans {
		check("span name "+sp.GetName(), sp.GetName())
		check("span status", sp.GetStatus().GetMessage())
		for _, kv := range sp.GetAttributes() {
			walk(sp.GetName()+" attribute "+kv.GetKey(), kv.GetValue())
		}
		for _, ev := range sp.GetEvents() {
			check("event "+ev.GetName(), ev.GetName())
			for _, kv := range ev.GetAttributes() {
				walk(sp.GetName()+" event attribute "+kv.GetKey(), kv.GetValue())
			}
		}
	}
	for _, kv := range col.res {
		walk("resource attribute "+kv.GetKey(), kv.GetValue())
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }
