package main

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// TestPCSend holds a two-turn conversation with an in-process caching fake:
// pcSend reads the streamed answer and usage, and the second turn reports
// the first turn's whole prompt as cached.
func TestPCSend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", fake.KindOpenAI, fake.Options{PromptCache: fake.CacheOptions{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	ep := endpoint{"http://" + addr.String() + "/v1/chat/completions", http.Header{"Content-Type": {"application/json"}}, "m"}
	c := newClient(1)
	msgs := []pcMessage{{"system", pcSystemPrompt(3)}, {"user", pcUserMessage(3, 0)}}
	if n := len(strings.Fields(msgs[0].Content)); n < pcSystemWords || n > pcSystemWords+30 {
		t.Errorf("system prompt of %d words, want about %d", n, pcSystemWords)
	}
	r1, answer, err := pcSend(ctx, c, ep, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(answer, "Echo: Question 1") || r1.cached != 0 || !r1.hasCached || r1.prompt < pcSystemWords || r1.ttfb <= 0 || r1.total < r1.ttfb {
		t.Fatalf("turn 1: %+v, answer %q", r1, answer)
	}
	msgs = append(msgs, pcMessage{"assistant", answer}, pcMessage{"user", pcUserMessage(3, 1)})
	r2, _, err := pcSend(ctx, c, ep, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if r2.cached != r1.prompt || r2.prompt <= r1.prompt {
		t.Errorf("turn 2: cached %d of %d, want turn 1's whole prompt %d", r2.cached, r2.prompt, r1.prompt)
	}
}

func TestPCStats(t *testing.T) {
	v := &pcVariant{
		first: []pcTurn{{ttfb: 100 * time.Millisecond, prompt: 1000}},
		later: []pcTurn{
			{ttfb: 10 * time.Millisecond, prompt: 1100, cached: 1000, prevPrompt: 1000},
			{ttfb: 100 * time.Millisecond, prompt: 1200, cached: 0, prevPrompt: 1100},
		},
	}
	s := v.stats()
	if s.n != 2 || s.whole != 1 || math.Abs(s.share-1000.0/2300) > 1e-9 {
		t.Errorf("n %d whole %d share %f", s.n, s.whole, s.share)
	}
	// 3300 prompt tokens, 1000 cached: 2300 + 0.1*1000 and 2300 + 0.5*1000.
	if math.Abs(s.cost[0]-2400.0/3300) > 1e-9 || math.Abs(s.cost[1]-2800.0/3300) > 1e-9 {
		t.Errorf("cost %v", s.cost)
	}
}
