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
