package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// Prompt cache affinity through the whole stack (extproc/affinity.go): two
// OpenAI-kind fakes that cache prompt prefixes as OpenAI does (automatic
// from 1024 tokens, per instance), one weighted model with affinity (the
// default for weighted routing) and one with it turned off, each its own
// upstream model so the fakes' caches keep them apart.

func promptCacheYAML(base, keyEnv map[string]string) string {
	return fmt.Sprintf(`
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
providers:
  - {name: a, kind: openai, base_url: %q, api_key_env: %s, region: us}
  - {name: b, kind: openai, base_url: %q, api_key_env: %s, region: us}
models:
  - id: demo/affine
    routing: weighted
    providers:
      - {provider: a, upstream_model: affine}
      - {provider: b, upstream_model: affine}
  - id: demo/spread
    routing: weighted
    prompt_cache: {affinity: false}
    providers:
      - {provider: a, upstream_model: spread}
      - {provider: b, upstream_model: spread}
`, base["a"], keyEnv["a"], base["b"], keyEnv["b"])
}

// TestPromptCacheAffinity: with affinity every turn after the first of a
// conversation with a long system prompt reads the whole previous prompt
// from the cache (cached_tokens is the previous turn's prompt_tokens);
// spread across both providers by weight alone, turns land where the recent
// turns were not seen and read less.
func TestPromptCacheAffinity(t *testing.T) {
	const (
		service = 40 * time.Millisecond
		convs   = 8
		turns   = 5
	)
	up := map[string]*switchable{}
	for _, name := range []string{"a", "b"} {
		env := "SWITCHYARD_E2E_KEY_" + strings.ToUpper(name)
		cred := name + "-" + randomHex(12)
		t.Setenv(env, cred)
		up[name] = newSwitchable(t, name, cred, fake.Options{ServiceTime: service,
			PromptCache: fake.CacheOptions{Enabled: true, CachedServiceTime: service / 10}})
	}
	s := newRouteStack(t, routeStackOptions{upstreams: up, yaml: promptCacheYAML})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// run holds convs conversations of turns turns on model and returns
	// the cached tokens of all turns after the first, and their time.
	run := func(model string, strict bool) (cached, possible int64, took time.Duration) {
		for c := range convs {
			system := fmt.Sprintf("You are support agent %d for %s. %s", c, model, strings.Repeat("Follow the policy carefully. ", 300))
			msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
			var prevPrompt int64
			for turn := range turns {
				msgs = append(msgs, openai.UserMessage(fmt.Sprintf("question %d of conversation %d", turn, c)))
				start := time.Now()
				res, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model, Messages: msgs})
				if err != nil {
					t.Fatalf("%s conversation %d turn %d: %v", model, c, turn, err)
				}
				got := res.Usage.PromptTokensDetails.CachedTokens
				if turn == 0 {
					if got != 0 {
						t.Errorf("%s conversation %d: first turn cached %d tokens", model, c, got)
					}
				} else {
					took += time.Since(start)
					cached += got
					possible += prevPrompt
					if strict && got != prevPrompt {
						t.Errorf("%s conversation %d turn %d: cached_tokens %d, want the previous prompt's %d (prompt %d)",
							model, c, turn, got, prevPrompt, res.Usage.PromptTokens)
					}
				}
				prevPrompt = res.Usage.PromptTokens
				msgs = append(msgs, openai.AssistantMessage(res.Choices[0].Message.Content))
			}
		}
		return cached, possible, took
	}

	onCached, onPossible, onTook := run("demo/affine", true)
	offCached, offPossible, offTook := run("demo/spread", false)
	t.Logf("affinity on: %d of %d possible cached tokens, later turns took %v", onCached, onPossible, onTook)
	t.Logf("affinity off: %d of %d possible cached tokens, later turns took %v", offCached, offPossible, offTook)
	if onCached != onPossible {
		t.Errorf("affinity on: %d of %d tokens cached, want all", onCached, onPossible)
	}
	// Off, each later turn has an even chance of going where the previous
	// one did not: some of 32 turns read less than the whole previous
	// prompt (all reading it has probability 2^-32).
	if offCached >= offPossible {
		t.Errorf("affinity off: %d of %d tokens cached; want fewer (turns spread over both caches)", offCached, offPossible)
	}
	if a, b := up["a"].hits.Load(), up["b"].hits.Load(); a == 0 || b == 0 {
		t.Errorf("hits a %d b %d: weighted routing should use both providers across conversations", a, b)
	}
}

// TestPromptCacheAnthropic: the gateway marks a translated request's
// conversation with cache_control breakpoints, the Anthropic fake caches at
// them, and its cache reads come back as cached_tokens: every turn after the
// first reads at least the long system prompt.
func TestPromptCacheAnthropic(t *testing.T) {
	cred := "ant-" + randomHex(12)
	t.Setenv("SWITCHYARD_E2E_KEY_CLAUDE", cred)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", fake.KindAnthropic, fake.Options{APIKey: cred,
		PromptCache: fake.CacheOptions{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	s := newRouteStack(t, routeStackOptions{upstreams: map[string]*switchable{}, yaml: func(map[string]string, map[string]string) string {
		return fmt.Sprintf(`
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
providers:
  - {name: claude, kind: anthropic, base_url: "http://%s", api_key_env: SWITCHYARD_E2E_KEY_CLAUDE, region: us}
models:
  - id: demo/claude
    providers: [{provider: claude, upstream_model: claude-fake}]
`, addr)
	}})
	// 1500 words of system prompt: over 1024 fake tokens and over 4096 bytes.
	system := strings.Repeat("Follow the policy carefully. ", 375)
	msgs := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system)}
	var prevPrompt int64
	for turn := range 4 {
		msgs = append(msgs, openai.UserMessage(fmt.Sprintf("question %d", turn)))
		res, err := s.client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "demo/claude", Messages: msgs})
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		got := res.Usage.PromptTokensDetails.CachedTokens
		switch {
		case turn == 0 && got != 0:
			t.Errorf("turn 0: cached %d", got)
		case turn > 0 && got < 1500:
			t.Errorf("turn %d: cached %d of %d prompt tokens, want at least the system prompt's 1500", turn, got, res.Usage.PromptTokens)
		case turn > 1 && got >= prevPrompt:
			t.Errorf("turn %d: cached %d, but the previous prompt (%d) ended with a turn not yet marked", turn, got, prevPrompt)
		}
		t.Logf("turn %d: prompt %d, cached %d", turn, res.Usage.PromptTokens, got)
		prevPrompt = res.Usage.PromptTokens
		msgs = append(msgs, openai.AssistantMessage(res.Choices[0].Message.Content))
	}
}
