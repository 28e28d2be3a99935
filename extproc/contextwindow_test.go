package extproc

import (
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// TestContextWindow: a chat prompt whose estimate (4 bytes of text a token,
// 3 tokens a message) exceeds the model's context window is refused with
// OpenAI's context_length_exceeded before it reaches a provider; one that
// fits goes on. The test catalog's models have the default window.
func TestContextWindow(t *testing.T) {
	h := newHarness(t, true)
	window := config.DefaultContextWindow
	user := func(n int) string { return `{"role":"user","content":"` + strings.Repeat("a", n) + `"}` }
	body := func(msgs ...string) string {
		return `{"model":"openai/gpt-4o","messages":[` + strings.Join(msgs, ",") + `]}`
	}
	fits := 4 * (window - 3) // one message: ceil(n/4) + 3 tokens
	tests := []struct {
		name, body string
		refused    bool
	}{
		{"exactly the window", body(user(fits)), false},
		{"one byte over", body(user(fits + 1)), true},
		{"over across messages", body(user(fits/2), `{"role":"assistant","content":"`+strings.Repeat("b", fits/2)+`"}`), true},
		{"streamed too", strings.TrimSuffix(body(user(fits+1)), "}") + `,"stream":true}`, true},
		{"small", body(user(10)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := h.open(t)
			e.do(chatHeaders(goodKey))
			resp := e.do(reqBody(tt.body))
			if !tt.refused {
				if resp.GetRequestBody() == nil {
					t.Fatalf("rejected: %v", resp.GetImmediateResponse())
				}
				return
			}
			msg := wantImmediate(t, resp, 400, "context_length_exceeded", "messages")
			if !strings.Contains(msg, "maximum context length is 128000 tokens") {
				t.Errorf("message %q", msg)
			}
		})
	}
}
