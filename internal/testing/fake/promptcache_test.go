package fake

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// longText is n words.
func longText(n int) string { return strings.TrimSpace(strings.Repeat("word ", n)) }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

type openAIUsage struct {
	Usage struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// TestOpenAIPromptCache: a prompt whose prefix of at least MinTokens was
// seen reports it as cached_tokens and answers sooner; short prompts, other
// prefixes and other fakes do not.
func TestOpenAIPromptCache(t *testing.T) {
	const service = 300 * time.Millisecond
	srv := newServer(t, Options{ServiceTime: service, PromptCache: CacheOptions{Enabled: true, MinTokens: 100, CachedServiceTime: 0}})
	system := `{"role":"system","content":` + jsonString(longText(150)) + `}`
	turn := func(msgs ...string) (openAIUsage, time.Duration) {
		t.Helper()
		start := time.Now()
		resp := post(t, srv, `{"model":"m","messages":[`+strings.Join(msgs, ",")+`]}`)
		b := readBody(t, resp)
		took := time.Since(start)
		var u openAIUsage
		if err := json.Unmarshal(b, &u); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d %s (%v)", resp.StatusCode, b, err)
		}
		if u.Usage.PromptTokensDetails == nil {
			t.Fatalf("no prompt_tokens_details with caching on: %s", b)
		}
		return u, took
	}
	u1 := `{"role":"user","content":"first question"}`
	a1 := `{"role":"assistant","content":"Echo: first question"}`
	u2 := `{"role":"user","content":"second"}`

	got, took := turn(system, u1)
	if c := got.Usage.PromptTokensDetails.CachedTokens; c != 0 || took < service {
		t.Errorf("first turn: cached %d in %v, want 0 after the full %v", c, took, service)
	}
	got, took = turn(system, u1, a1, u2)
	if c := got.Usage.PromptTokensDetails.CachedTokens; c != 152 { // system 150 + "first question"
		t.Errorf("second turn: cached %d, want 152 of %d", c, got.Usage.PromptTokens)
	}
	// 152 of 157 tokens cached: the wait shrinks to about 5/157 of it.
	if took > service/2 {
		t.Errorf("second turn took %v, want well under %v", took, service)
	}
	got, _ = turn(system, u1, a1, u2)
	if c := got.Usage.PromptTokensDetails.CachedTokens; c != got.Usage.PromptTokens {
		t.Errorf("repeat: cached %d, want the whole prompt %d", c, got.Usage.PromptTokens)
	}
	// Another system prompt is another prefix; a short one is never cached.
	other := `{"role":"system","content":` + jsonString("other "+longText(150)) + `}`
	if got, _ = turn(other, u1); got.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("other prefix: cached %d", got.Usage.PromptTokensDetails.CachedTokens)
	}
	short := `{"role":"system","content":"be brief"}`
	turn(short, u1)
	if got, _ = turn(short, u1); got.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("short prompt: cached %d", got.Usage.PromptTokensDetails.CachedTokens)
	}
	// The cache is the fake's own: another instance has not seen anything.
	srv2 := newServer(t, Options{PromptCache: CacheOptions{Enabled: true, MinTokens: 100}})
	resp := post(t, srv2, `{"model":"m","messages":[`+system+`,`+u1+`]}`)
	var u openAIUsage
	_ = json.Unmarshal(readBody(t, resp), &u)
	if u.Usage.PromptTokensDetails == nil || u.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Errorf("fresh instance: %+v", u.Usage)
	}
}

// TestOpenAIPromptCacheOff: without PromptCache the usage is as it always
// was (no prompt_tokens_details).
func TestOpenAIPromptCacheOff(t *testing.T) {
	srv := newServer(t, Options{})
	body := `{"model":"m","messages":[{"role":"system","content":` + jsonString(longText(2000)) + `},{"role":"user","content":"q"}]}`
	for range 2 {
		b := readBody(t, post(t, srv, body))
		if strings.Contains(string(b), "prompt_tokens_details") {
			t.Fatalf("caching off, yet %s", b)
		}
	}
}

// TestAnthropicPromptCache: only breakpoints cache; the first request that
// marks a prefix writes it (cache_creation_input_tokens), later ones read it
// (cache_read_input_tokens), also from a breakpoint moved further on.
func TestAnthropicPromptCache(t *testing.T) {
	srv := anthropicServer(t, Options{APIKey: anthropicKey, PromptCache: CacheOptions{Enabled: true, MinTokens: 100}})
	sys := jsonString(longText(150))
	cc := `,"cache_control":{"type":"ephemeral"}`
	send := func(system, messages string) anthropicGot {
		t.Helper()
		return anthropicMessageOK(t, anthropicPost(t, srv, `{"model":"claude","max_tokens":100,"system":`+system+`,"messages":[`+messages+`]}`))
	}
	check := func(name string, m anthropicGot, input, read, creation int) {
		t.Helper()
		if *m.Usage.InputTokens != input || *m.Usage.CacheReadInputTokens != read || *m.Usage.CacheCreationInputTokens != creation {
			t.Errorf("%s: input %d read %d creation %d, want %d %d %d", name, *m.Usage.InputTokens,
				*m.Usage.CacheReadInputTokens, *m.Usage.CacheCreationInputTokens, input, read, creation)
		}
	}
	plain := sys
	marked := `[{"type":"text","text":` + sys + cc + `}]`
	u1 := `{"role":"user","content":[{"type":"text","text":"first question"}]}`

	check("no breakpoint", send(plain, u1), 152, 0, 0)
	check("no breakpoint again", send(plain, u1), 152, 0, 0)
	check("marked: written", send(marked, u1), 2, 0, 150)
	check("marked: read", send(marked, u1), 2, 150, 0)
	// The string system prompt is the same prefix as its text block.
	check("string system after marked", send(plain, u1), 152, 0, 0)

	// Turn 2 marks the conversation too: the system is read, the rest up to
	// the new breakpoint written; turn 3 reads that, 20-block lookback.
	a1 := `{"role":"assistant","content":[{"type":"text","text":"Echo: first question"` + cc + `}]}`
	u2 := `{"role":"user","content":[{"type":"text","text":"second"}]}`
	check("turn 2", send(marked, u1+","+a1+","+u2), 1, 150, 5)
	a1plain := `{"role":"assistant","content":[{"type":"text","text":"Echo: first question"}]}`
	a2 := `{"role":"assistant","content":[{"type":"text","text":"Echo: second"` + cc + `}]}`
	u3 := `{"role":"user","content":[{"type":"text","text":"third"}]}`
	check("turn 3", send(marked, u1+","+a1plain+","+u2+","+a2+","+u3), 1, 155, 3)

	// Below MinTokens nothing is cached, marked or not.
	short := `[{"type":"text","text":"be brief"` + cc + `}]`
	send(short, u1)
	check("short", send(short, u1), 4, 0, 0)
}
