package e2e

import (
	"context"
	"net/http"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/keys"
)

// A key already over its requests-per-minute limit is refused on its
// headers: the gateway does not read and hold its body first. The raw
// client below declares a large body and sends none of it; the 429 must
// come anyway.
func TestOverLimitKeyRefusedBeforeItsBody(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, _ := s.issue(t, keys.Spec{Name: "spent", Tier: "free"}) // 10 RPM
	c := s.clientWith(key)
	for i := range 10 {
		if _, err := c.Chat.Completions.New(context.Background(), chatParams("hi")); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
	}
	// The eleventh is refused by the limiter, in the body phase.
	_, err := c.Chat.Completions.New(context.Background(), chatParams("one too many"))
	apiError(t, err, 429, "rate_limit_exceeded")

	for _, path := range []string{"/v1/chat/completions", "/v1/embeddings"} {
		s.key = key
		raw := "POST " + path + " HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer KEY\r\n" +
			"Content-Type: application/json\r\nContent-Length: 30000000\r\n\r\n"
		resp, body := rawExchange(t, s, raw, false)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("retry-after") == "" ||
			resp.Header.Get("x-ratelimit-remaining-requests") != "0" {
			t.Fatalf("%s: status %d, retry-after %q, headers %v, body %s", path, resp.StatusCode, resp.Header.Get("retry-after"), resp.Header, body)
		}
		if code := openAIError(t, resp, body); code != "rate_limit_exceeded" {
			t.Errorf("%s: code %q", path, code)
		}
	}
}
