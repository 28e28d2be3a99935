package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// upstreamAllowed are the request headers a vendor of each kind may see:
// what its API needs, the provider credential the gateway adds, and the
// gateway's request id. Anything else a client sent, or the gateway uses
// inside, stays in the gateway.
var upstreamAllowed = map[string][]string{
	fake.KindOpenAI:    {"Authorization"},
	fake.KindAnthropic: {"X-Api-Key", "Anthropic-Version"},
	fake.KindGemini:    {"X-Goog-Api-Key"},
}

var upstreamCommon = []string{"Content-Type", "Content-Length", "Accept", "X-Request-Id"}

// TestWhatReachesAProvider sends requests carrying credentials and
// internals a vendor must never see (the client's key in authorization and
// in api-key, as Azure-style SDKs send it, a cookie, the gateway's own
// routing headers, a Host of the client's choosing) on every path that
// reaches a vendor: chat and embeddings, streamed and not, a failover
// across kinds, the Responses backend's calls and batch lines. Every
// request each recording vendor got must carry only the headers its API
// needs, its own credential, and its own host.
func TestWhatReachesAProvider(t *testing.T) {
	vs := newVendorStack(t)
	const cookie = "session=client-cookie-secret"
	hostile := []option.RequestOption{
		option.WithHeader("api-key", vs.key),
		option.WithHeader("cookie", cookie),
		option.WithHeader("x-switchyard-model", "vendor/gpt"),
		option.WithHeader("x-switchyard-first", "openai"),
		option.WithHeader("openai-organization", "org-client"),
		option.WithHeader("x-forwarded-for", "203.0.113.9"),
		option.WithHeader("x-client-secret", "client-only"),
		option.WithHTTPClient(&http.Client{Transport: hostSetter{"client-chosen.example"}}),
	}
	c := vs.client(hostile...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini", "vendor/failover"} {
		if _, err := c.Chat.Completions.New(ctx, chatParamsFor(model, "hello")); err != nil {
			t.Fatalf("%s chat: %v", model, err)
		}
		s := c.Chat.Completions.NewStreaming(ctx, chatParamsFor(model, "stream"))
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatalf("%s stream: %v", model, err)
		}
	}
	for _, model := range []string{"vendor/embed", "vendor/gemini-embed"} {
		if _, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: model,
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("embed me")}}); err != nil {
			t.Fatalf("%s embeddings: %v", model, err)
		}
	}
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini"} {
		params := responses.ResponseNewParams{Model: model,
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello responses")}}
		if _, err := c.Responses.New(ctx, params); err != nil {
			t.Fatalf("%s responses: %v", model, err)
		}
		s := c.Responses.NewStreaming(ctx, params)
		for s.Next() {
		}
		if err := s.Err(); err != nil {
			t.Fatalf("%s responses stream: %v", model, err)
		}
	}
	var in strings.Builder
	for _, model := range []string{"vendor/gpt", "vendor/claude", "vendor/gemini"} {
		fmt.Fprintln(&in, batchLine("line-"+model, model, "batched"))
	}
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(in.String()), "batch.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeBatch,
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Batches.New(ctx, openai.BatchNewParams{InputFileID: f.ID,
		Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
	if err != nil {
		t.Fatal(err)
	}
	if done := waitBatch(t, c, b.ID, 30*time.Second); done.RequestCounts.Completed != 3 {
		t.Fatalf("batch = %s %+v", done.Status, done.RequestCounts)
	}

	for _, p := range vendorProviders {
		reqs := vs.fakes[p.name].all()
		if len(reqs) == 0 {
			t.Errorf("%s received no request", p.name)
		}
		allowed := append(slices.Clone(upstreamCommon), upstreamAllowed[p.kind]...)
		for i, r := range reqs {
			for name, vals := range r.header {
				if !slices.Contains(allowed, name) {
					t.Errorf("%s request %d: header %s: %q reached the vendor", p.name, i, name, vals)
				}
				for _, v := range vals {
					if strings.Contains(v, vs.key) || strings.Contains(v, "client-cookie-secret") {
						t.Errorf("%s request %d: header %s carries a client secret", p.name, i, name)
					}
				}
			}
			if got := r.header.Get(p.header); got != vs.creds[p.name] && got != "Bearer "+vs.creds[p.name] {
				t.Errorf("%s request %d: the provider credential %s is %q", p.name, i, p.header, got)
			}
			if r.host != vs.hosts[p.name] {
				t.Errorf("%s request %d: Host %q, want the vendor's %q", p.name, i, r.host, vs.hosts[p.name])
			}
		}
	}
}

func chatParamsFor(model, text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
}

// hostSetter sends every request with its own Host header.
type hostSetter struct{ host string }

func (h hostSetter) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Host = h.host
	return http.DefaultTransport.RoundTrip(req)
}
