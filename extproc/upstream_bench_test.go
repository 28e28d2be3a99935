package extproc

import (
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BenchmarkUpstreamRequest is the upstream phase's request body message for
// one attempt: the model splice for an OpenAI-compatible provider (one copy
// of the body), and the full translation for an Anthropic one.
func BenchmarkUpstreamRequest(b *testing.B) {
	srv, _, _ := newTestServer(b, false)
	srv.getenv = routingEnv
	if err := srv.SetCatalog(routingCatalog()); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, provider string
		size           int
	}{
		{"openai/100KB", "oa-us", 100 << 10},
		{"openai/8MB", "oa-us", 8 << 20},
		{"anthropic/100KB", "claude", 100 << 10},
	} {
		body := []byte(strings.Replace(string(benchBody(b, tc.size)), `"openai/gpt-4o"`, `"acme/chat"`, 1))
		msg := &extprocv3.HttpBody{EndOfStream: true}
		bodies := newBodies(body) // as in BenchmarkRequestPhase
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				msg.Body = bodies.get(b)
				st := newUpstreamStream(srv, tc.provider)
				st.ownsBody = true // as Process
				if r := st.requestBody(msg); r.GetRequestBody() == nil {
					b.Fatalf("refused: %v", r)
				}
			}
		})
	}
}

// BenchmarkUpstreamStreamChunk is the translation of one Anthropic event
// stream chunk (a text delta) to OpenAI's, with the reused reply.
func BenchmarkUpstreamStreamChunk(b *testing.B) {
	srv, _, _ := newTestServer(b, false)
	srv.getenv = routingEnv
	if err := srv.SetCatalog(routingCatalog()); err != nil {
		b.Fatal(err)
	}
	st := newUpstreamStream(srv, "claude")
	if r := st.requestBody(&extprocv3.HttpBody{Body: []byte(chatBody("acme/strict", `"stream":true`)), EndOfStream: true}); r.GetRequestBody() == nil {
		b.Fatalf("refused: %v", r)
	}
	st.responseHeaders(respHeaders("200", "text/event-stream").GetResponseHeaders())
	start := &extprocv3.HttpBody{Body: []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")}
	st.responseBody(start)
	delta := &extprocv3.HttpBody{Body: []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" a word\"}}\n\n")}
	b.SetBytes(int64(len(delta.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if r := st.responseBody(delta); len(common(r).GetBodyMutation().GetBody()) == 0 {
			b.Fatal("no translation")
		}
	}
}
