package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// vendorStack is a gateway in front of one recording fake of each wire
// format, with models served by each and the provider credentials the fakes
// require.
type vendorStack struct {
	*stack
	// fakes are the recording fakes by provider name.
	fakes map[string]*recorder
	creds map[string]string
	// hosts are the fakes' host:port by provider name.
	hosts map[string]string
}

// Provider names of the vendor stack and the credential header each fake
// checks.
var vendorProviders = []struct{ name, kind, env, header string }{
	{"openai", fake.KindOpenAI, "SWITCHYARD_E2E_OPENAI_KEY", "authorization"},
	{"anthropic", fake.KindAnthropic, "SWITCHYARD_E2E_ANTHROPIC_KEY", "x-api-key"},
	{"gemini", fake.KindGemini, "SWITCHYARD_E2E_GEMINI_KEY", "x-goog-api-key"},
	// Answers every request with a 500, for failover across kinds.
	{"broken", fake.KindAnthropic, "SWITCHYARD_E2E_BROKEN_KEY", "x-api-key"},
}

// vendorModels are the vendor stack's models.
const vendorModels = `
models:
  - {id: vendor/gpt, providers: [{provider: openai, upstream_model: fake-chat-1}]}
  - {id: vendor/claude, context_window: 200000, providers: [{provider: anthropic, upstream_model: claude-fake-1}]}
  - {id: vendor/gemini, providers: [{provider: gemini, upstream_model: gemini-fake-1}]}
  - id: vendor/failover
    providers:
      - {provider: broken, upstream_model: claude-fake-1}
      - {provider: gemini, upstream_model: gemini-fake-1}
  - id: vendor/embed
    capabilities: [embeddings]
    tokenizer: cl100k_base
    context_window: 8191
    dimensions: true
    providers: [{provider: openai, upstream_model: text-embedding-fake}]
  - id: vendor/gemini-embed
    capabilities: [embeddings]
    dimensions: true
    providers: [{provider: gemini, upstream_model: text-embedding-004}]
  - id: vendor/embed-fixed
    capabilities: [embeddings]
    context_window: 8191
    providers: [{provider: openai, upstream_model: text-embedding-fixed}]
`

// newVendorStack starts the stack; wrap, if given, wraps every fake's
// handler.
func newVendorStack(t *testing.T, wrap ...func(http.Handler) http.Handler) *vendorStack {
	t.Helper()
	vs := &vendorStack{fakes: map[string]*recorder{}, creds: map[string]string{}, hosts: map[string]string{}}
	var providers strings.Builder
	providers.WriteString("providers:\n")
	for _, p := range vendorProviders {
		cred := fmt.Sprintf("%s-%s-%d", p.name, strings.Repeat("k", 16), time.Now().UnixNano())
		t.Setenv(p.env, cred)
		opts := fake.Options{APIKey: cred}
		if p.name == "broken" {
			opts.Fault.Status = http.StatusInternalServerError
		}
		h, err := fake.Handler(p.kind, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wrap {
			h = w(h)
		}
		rec := &recorder{next: h}
		up := httptest.NewServer(rec)
		t.Cleanup(up.Close)
		vs.fakes[p.name], vs.creds[p.name], vs.hosts[p.name] = rec, cred, strings.TrimPrefix(up.URL, "http://")
		base := up.URL
		if p.kind == fake.KindOpenAI {
			base += "/v1"
		}
		fmt.Fprintf(&providers, "  - {name: %s, kind: %s, base_url: %q, api_key_env: %s, forward_headers: [%s, %s, %s]}\n",
			p.name, p.kind, base, p.env, fake.HeaderStatus, fake.HeaderCutAfter, fake.HeaderStallAfter)
	}
	yaml := "listeners:\n  - {name: public, address: 127.0.0.1:18080}\n" + providers.String() + vendorModels
	cfg, err := config.Parse("e2e-vendors.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dataDir := t.TempDir()
	gw, err := gateway.Start(ctx, gateway.Options{
		Config:         cfg,
		DataDir:        dataDir,
		Logger:         slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		ListenOverride: "127.0.0.1:0",
		RateLimitClock: fixedClock{},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	key, _, err := gw.Keys.Issue(ctx, keys.Spec{Name: "e2e", Tier: "enterprise", RPM: 1_000_000, TPM: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	vs.stack = &stack{gw: gw, key: key, logs: logs, dataDir: dataDir}
	return vs
}

// lastRequest is the last request the named fake received.
func (vs *vendorStack) lastRequest(t *testing.T, provider string) recorded {
	t.Helper()
	reqs := vs.fakes[provider].all()
	if len(reqs) == 0 {
		t.Fatalf("%s received no request", provider)
	}
	return reqs[len(reqs)-1]
}

func weatherTool() openai.ChatCompletionToolUnionParam {
	return openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather",
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}},
			"required":   []string{"city"},
		},
	})
}

// TestTranslatedProviders drives models served in Anthropic's and Gemini's
// wire formats with the official SDK: the gateway translates both ways, per
// attempt, in the upstream phase.
func TestTranslatedProviders(t *testing.T) {
	vs := newVendorStack(t)
	c := vs.client()
	ctx := context.Background()
	for _, tc := range []struct {
		model, provider, path string
	}{
		{"vendor/claude", "anthropic", "/v1/messages"},
		{"vendor/gemini", "gemini", "/v1beta/models/gemini-fake-1:"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			header := ""
			for _, p := range vendorProviders {
				if p.name == tc.provider {
					header = p.header
				}
			}
			params := func(text string) openai.ChatCompletionNewParams {
				return openai.ChatCompletionNewParams{Model: tc.model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
			}

			t.Run("chat", func(t *testing.T) {
				res, err := c.Chat.Completions.New(ctx, params("hello from the sdk"))
				if err != nil {
					t.Fatal(err)
				}
				if res.Model != tc.model || len(res.Choices) != 1 || res.Choices[0].Message.Content != "Echo: hello from the sdk" ||
					res.Choices[0].FinishReason != "stop" {
					t.Errorf("completion = %+v", res)
				}
				if res.Usage.PromptTokens == 0 || res.Usage.CompletionTokens == 0 ||
					res.Usage.TotalTokens != res.Usage.PromptTokens+res.Usage.CompletionTokens {
					t.Errorf("usage = %+v", res.Usage)
				}
				validateSchema(t, "CreateChatCompletionResponse", []byte(res.RawJSON()))
				up := vs.lastRequest(t, tc.provider)
				if got := up.header.Get(header); got != vs.creds[tc.provider] {
					t.Errorf("%s reached the provider as %q", header, got)
				}
				if up.header.Get(header) == vs.key || up.header.Get("authorization") != "" {
					t.Error("the client's key or an authorization header reached the provider")
				}
				if strings.Contains(string(up.body), `"messages":[{"role":"user","content":"hello`) {
					t.Errorf("the provider got an OpenAI body: %s", up.body)
				}
			})

			t.Run("streaming accumulated by the SDK", func(t *testing.T) {
				for _, usage := range []bool{true, false} {
					p := params("stream this through a translation")
					if usage {
						p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					}
					stream := c.Chat.Completions.NewStreaming(ctx, p)
					acc := openai.ChatCompletionAccumulator{}
					chunks, usageChunks := 0, 0
					for stream.Next() {
						ch := stream.Current()
						acc.AddChunk(ch)
						chunks++
						if len(ch.Choices) == 0 {
							usageChunks++
						}
					}
					if err := stream.Err(); err != nil {
						t.Fatal(err)
					}
					got := acc.Choices[0]
					if chunks < 4 || got.Message.Role != "assistant" || got.Message.Content != "Echo: stream this through a translation" ||
						got.FinishReason != "stop" {
						t.Errorf("include_usage %v: %d chunks, role %q content %q finish %q", usage, chunks, got.Message.Role,
							got.Message.Content, got.FinishReason)
					}
					if usage && (usageChunks != 1 || acc.Usage.TotalTokens == 0) {
						t.Errorf("usage chunks %d, usage %+v", usageChunks, acc.Usage)
					}
					if !usage && usageChunks != 0 {
						t.Errorf("got %d usage chunks without asking", usageChunks)
					}
				}
			})

			t.Run("tool call round trip", func(t *testing.T) {
				p := params("what is the weather in Paris?")
				p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
				res, err := c.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				msg := res.Choices[0].Message
				if res.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_weather" {
					t.Fatalf("want one get_weather call, got finish %q calls %+v", res.Choices[0].FinishReason, msg.ToolCalls)
				}
				var args map[string]any
				if err := json.Unmarshal([]byte(msg.ToolCalls[0].Function.Arguments), &args); err != nil || args["city"] == nil {
					t.Errorf("arguments %q: %v", msg.ToolCalls[0].Function.Arguments, err)
				}
				p.Messages = append(p.Messages, msg.ToParam(), openai.ToolMessage("sunny, 21C", msg.ToolCalls[0].ID))
				final, err := c.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if final.Choices[0].FinishReason != "stop" || final.Choices[0].Message.Content != "The tool returned: sunny, 21C" {
					t.Errorf("final answer = %q (%s)", final.Choices[0].Message.Content, final.Choices[0].FinishReason)
				}
			})

			t.Run("streamed tool call", func(t *testing.T) {
				p := params("weather?")
				p.Tools = []openai.ChatCompletionToolUnionParam{weatherTool()}
				stream := c.Chat.Completions.NewStreaming(ctx, p)
				acc := openai.ChatCompletionAccumulator{}
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				calls := acc.Choices[0].Message.ToolCalls
				if len(calls) != 1 || calls[0].Function.Name != "get_weather" || !json.Valid([]byte(calls[0].Function.Arguments)) ||
					acc.Choices[0].FinishReason != "tool_calls" {
					t.Errorf("accumulated tool calls = %+v finish %q", calls, acc.Choices[0].FinishReason)
				}
			})

			t.Run("unsupported parameter", func(t *testing.T) {
				p := params("hi")
				p.Logprobs = openai.Bool(true)
				_, err := c.Chat.Completions.New(ctx, p)
				if e := apiError(t, err, http.StatusBadRequest, "unsupported_parameter"); e.Param != "logprobs" {
					t.Errorf("param = %q, want logprobs", e.Param)
				}
			})

			t.Run("provider errors in OpenAI's shape", func(t *testing.T) {
				c := vs.client(option.WithHeader("x-fake-status", "400"))
				_, err := c.Chat.Completions.New(ctx, params("hi"))
				var e *openai.Error
				if !errors.As(err, &e) || e.StatusCode != http.StatusBadRequest || e.Message == "" || e.Type != "invalid_request_error" {
					t.Errorf("err = %v", err)
				}
			})
		})
	}

	t.Run("failover translates for the next provider", func(t *testing.T) {
		before := len(vs.fakes["broken"].all())
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "vendor/failover",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("survive this")}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Choices[0].Message.Content != "Echo: survive this" {
			t.Errorf("content %q", res.Choices[0].Message.Content)
		}
		if len(vs.fakes["broken"].all()) == before {
			t.Error("the first provider was never tried")
		}
		up := vs.lastRequest(t, "gemini")
		if up.header.Get("x-api-key") != "" || up.header.Get("anthropic-version") != "" {
			t.Errorf("the Anthropic attempt's headers reached Gemini: %v", up.header)
		}
		if !strings.Contains(string(up.body), `"contents"`) {
			t.Errorf("Gemini got %s", up.body)
		}
	})
}
