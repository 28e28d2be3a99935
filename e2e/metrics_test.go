package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/gateway"
)

// TestRequestMetrics: the admin /metrics reports every request's outcome,
// latency and tokens by model and provider (performance monitoring), with
// no content in it.
func TestRequestMetrics(t *testing.T) {
	const adminToken = "metrics-admin-token-0123456789"
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = adminToken
	}})
	ctx := context.Background()
	c := s.client()
	for range 3 {
		if _, err := c.Chat.Completions.New(ctx, chatParams("secret-prompt-text")); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "nobody/nothing",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
	apiError(t, err, 404, "model_not_found")

	want := []string{
		`switchyard_requests_total{model="demo/chat",provider="fake-openai",origin="",code="2xx"} 3`,
		`switchyard_requests_total{model="/v1/chat",provider="",origin="",code="4xx"} 1`,
		`switchyard_request_duration_seconds_count{model="demo/chat",provider="fake-openai"} 3`,
		`switchyard_time_to_first_byte_seconds_count{model="demo/chat",provider="fake-openai"} 3`,
		fmt.Sprintf(`switchyard_tokens_total{model="demo/chat",provider="fake-openai",type="completion"} %d`, 3*2),
		"# TYPE switchyard_request_duration_seconds histogram",
	}
	// The data plane records a request just after its response is sent.
	var m string
	missing := want
	for deadline := time.Now().Add(5 * time.Second); len(missing) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = s.adminGet(t, "/metrics", adminToken)
		missing = missing[:0:0]
		for _, line := range want {
			if !strings.Contains(m, line+"\n") {
				missing = append(missing, line)
			}
		}
	}
	for _, line := range missing {
		t.Errorf("metrics lack %q", line)
	}
	if strings.Contains(m, "secret-prompt-text") || t.Failed() {
		t.Logf("metrics:\n%s", m)
	}
	if strings.Contains(m, "secret-prompt-text") {
		t.Error("metrics carry request content")
	}
}

// TestGenAIMetrics: the GenAI semantic-convention families and the added
// latency, through the real path. The fake provider takes 300 ms per
// answer; the gateway's share (the added latency) must not count it.
func TestGenAIMetrics(t *testing.T) {
	const adminToken = "metrics-admin-token-0123456789"
	s := newStack(t, stackOptions{serviceTime: 300 * time.Millisecond, gateway: func(o *gateway.Options) {
		o.AdminListen = "127.0.0.1:0"
		o.AdminToken = adminToken
	}})
	ctx := context.Background()
	c := s.client()
	if _, err := c.Chat.Completions.New(ctx, chatParams("hello there")); err != nil {
		t.Fatal(err)
	}
	stream := c.Chat.Completions.NewStreaming(ctx, chatParams("a streamed hello with a few more words"))
	for stream.Next() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	labels := `gen_ai_operation_name="chat",gen_ai_provider_name="fake-openai",gen_ai_request_model="demo/chat"`
	want := []string{
		`gen_ai_client_token_usage_count{` + labels + `,gen_ai_token_type="input"} 2`,
		`gen_ai_client_token_usage_count{` + labels + `,gen_ai_token_type="output"} 2`,
		`gen_ai_server_request_duration_seconds_count{` + labels + `,error_type=""} 2`,
		// Both took the fake's 300 ms: none within 0.16 s.
		`gen_ai_server_request_duration_seconds_bucket{` + labels + `,error_type="",le="0.16"} 0`,
		`gen_ai_server_time_to_first_token_seconds_count{` + labels + `} 2`,
		// Streams only.
		`gen_ai_server_time_per_output_token_seconds_count{` + labels + `} 1`,
		// The gateway's own share is far below the provider's 300 ms.
		`switchyard_added_latency_seconds_bucket{model="demo/chat",provider="fake-openai",le="0.1"} 2`,
	}
	var m string
	missing := want
	for deadline := time.Now().Add(5 * time.Second); len(missing) > 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		m = s.adminGet(t, "/metrics", adminToken)
		missing = missing[:0:0]
		for _, line := range want {
			if !strings.Contains(m, line+"\n") {
				missing = append(missing, line)
			}
		}
	}
	for _, line := range missing {
		t.Errorf("metrics lack %q", line)
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", m)
	}
}
