package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// longPrompt is 400 bytes of text: admission estimates it at no fewer than
// 100 tokens (four bytes a token), and the fakes echo it in ~80 chunks, so
// a stream cut after its first few chunks is far from its usage event.
var longPrompt = strings.TrimSpace(strings.Repeat("word ", 80)) + "."

// minPromptCharge is the least an abandoned stream of longPrompt is charged.
const minPromptCharge = 100

// stallStreams lets the first n writes of every event stream through, then
// holds the stream open, sending nothing more, until the request is
// cancelled: the gateway hung up on the upstream because its own client
// hung up. The usage event never comes.
func stallStreams(n int) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&stallWriter{ResponseWriter: w, left: n, ctx: r.Context()}, r)
		})
	}
}

type stallWriter struct {
	http.ResponseWriter
	left int
	ctx  context.Context
}

func (w *stallWriter) Write(p []byte) (int, error) {
	if strings.HasPrefix(w.Header().Get("content-type"), "text/event-stream") {
		if w.left == 0 {
			<-w.ctx.Done()
			return 0, w.ctx.Err()
		}
		w.left--
	}
	return w.ResponseWriter.Write(p)
}

func (w *stallWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// waitUsedAtLeast waits for a key's tokens counter to reach want: the
// charge of a stream the client abandoned is made when the gateway notices
// the hang-up, which the client cannot observe.
func (r *rlsClient) waitUsedAtLeast(t *testing.T, tier, keyID string, want int64) int64 {
	t.Helper()
	var got int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = r.used(t, tier, keyID, ratelimit.Limits{}); got >= want {
			return got
		}
	}
	t.Fatalf("tokens used = %d, want at least %d", got, want)
	return got
}

// TestAbandonedStreamsCharged: a stream that ends before its usage event,
// because the client hung up after the first chunks or the upstream reset
// the connection, is still charged to the key's tokens per minute (its
// prompt estimate at least), for every vendor kind.
func TestAbandonedStreamsCharged(t *testing.T) {
	vs := newVendorStack(t, stallStreams(4))
	rls := vs.rls(t)
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini"} {
		for _, how := range []string{"client hang-up", "upstream reset"} {
			t.Run(model+"/"+how, func(t *testing.T) {
				key, k := vs.issue(t, keys.Spec{Name: "abandon", Tier: "free"})
				c := vs.clientWith(key)
				p := chatParams(longPrompt)
				p.Model = model
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				var opts []option.RequestOption
				if how == "upstream reset" {
					// Two events, then the fake drops the connection
					// (before the stall, which would come after four).
					opts = append(opts, option.WithHeader(fake.HeaderCutAfter, "2"))
				}
				stream := c.Chat.Completions.NewStreaming(ctx, p, opts...)
				defer stream.Close()
				if how == "client hang-up" {
					if !stream.Next() {
						t.Fatalf("no first chunk: %v", stream.Err())
					}
					cancel()
				} else {
					for stream.Next() {
						if stream.Current().Usage.TotalTokens != 0 {
							t.Fatal("usage arrived before the cut")
						}
					}
					if stream.Err() == nil {
						t.Fatal("cut stream ended without an error")
					}
				}
				got := rls.waitUsedAtLeast(t, "free", k.LimitID(), minPromptCharge)
				t.Logf("charged %d tokens", got)
			})
		}
	}
}

// TestAbandonedResponsesStreamCharged: a /v1/responses stream whose client
// hangs up after the first text delta is charged (the Responses service's
// own chat completion call ends early with it).
func TestAbandonedResponsesStreamCharged(t *testing.T) {
	s := newStack(t, stackOptions{wrapUpstream: stallStreams(4)})
	rls := s.rls(t)
	key, k := s.issue(t, keys.Spec{Name: "abandon-responses", Tier: "free"})
	c := s.clientWith(key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(longPrompt)},
	})
	defer stream.Close()
	for stream.Next() {
		if stream.Current().Type == "response.output_text.delta" {
			break
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	cancel()
	got := rls.waitUsedAtLeast(t, "free", k.LimitID(), minPromptCharge)
	t.Logf("charged %d tokens", got)
}

// TestTokenRefusalsKeepRequestSlots: requests refused for tokens per minute
// do not use the key's requests per minute.
func TestTokenRefusalsKeepRequestSlots(t *testing.T) {
	s := newStack(t, stackOptions{})
	key, k := s.issue(t, keys.Spec{Name: "tpm-spent", Tier: "free"})
	c := s.clientWith(key)
	rls := s.rls(t)
	rls.charge(t, "free", k.LimitID(), 40000) // the free tier's whole TPM
	for i := range 5 {
		_, err := c.Chat.Completions.New(context.Background(), chatParams("refused for tokens"))
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Type != "tokens" {
			t.Fatalf("request %d: want 429 tokens, got %v", i, err)
		}
		if got := apiErr.Response.Header.Get("x-ratelimit-remaining-requests"); got != "10" {
			t.Errorf("request %d: remaining-requests = %q, want 10", i, got)
		}
	}
	st := rls.call(t, ratelimit.RequestsDescriptor("free", k.LimitID(), ratelimit.Limits{}, 0))
	if st.GetLimitRemaining() != 10 {
		t.Fatalf("requests left after 5 token refusals = %d, want all 10", st.GetLimitRemaining())
	}
}
