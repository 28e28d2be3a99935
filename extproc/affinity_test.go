package extproc

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// affinityCatalog: three OpenAI-kind providers under each policy, weights
// 3:1:1 for weighted; acme/spread turns affinity off.
func affinityCatalog() *catalog.Catalog {
	return parseCatalog(`
region: us
providers:
  - {name: p1, kind: openai, base_url: "https://p1.example/v1"}
  - {name: p2, kind: openai, base_url: "https://p2.example/v1"}
  - {name: p3, kind: openai, base_url: "https://p3.example/v1"}
models:
  - id: acme/weighted
    routing: weighted
    providers:
      - {provider: p1, upstream_model: m, weight: 3}
      - {provider: p2, upstream_model: m}
      - {provider: p3, upstream_model: m}
  - id: acme/fast
    routing: latency
    prompt_cache: {latency_tolerance: 0.25}
    providers:
      - {provider: p1, upstream_model: m}
      - {provider: p2, upstream_model: m}
      - {provider: p3, upstream_model: m}
  - id: acme/spread
    routing: weighted
    prompt_cache: {affinity: false}
    providers:
      - {provider: p1, upstream_model: m}
      - {provider: p2, upstream_model: m}
  - id: acme/priority
    providers:
      - {provider: p1, upstream_model: m}
      - {provider: p2, upstream_model: m}
`)
}

func affinityServer(t *testing.T) (*Server, *routeTable) {
	t.Helper()
	srv, _, _ := newTestServer(t, false)
	if err := srv.SetCatalog(affinityCatalog()); err != nil {
		t.Fatal(err)
	}
	return srv, srv.routes.Load()
}

// conversation is a chat body: a system prompt, the first user message,
// then turns more exchanges, and extra top-level members.
func conversation(model, system, first string, turns int, extra string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":%q}`, model, system, first)
	for i := range turns {
		fmt.Fprintf(&b, `,{"role":"assistant","content":"answer %d"},{"role":"user","content":"question %d"}`, i, i)
	}
	b.WriteString("]" + extra + "}")
	return []byte(b.String())
}

// firstChoice is the provider chatBody would choose for body from owner.
func firstChoice(t testing.TB, rt *routeTable, owner string, body []byte, now time.Time) string {
	t.Helper()
	req, e := parseChat(body)
	if e != nil {
		t.Fatalf("parseChat: %v", e)
	}
	mr := rt.models[req.model]
	var key uint64
	if mr.affinity {
		key = cacheKey(owner, body, &req)
	}
	return chooseKeyed(mr, opChat, now, key).provider.name
}

func TestAffinityDefaults(t *testing.T) {
	_, rt := affinityServer(t)
	for model, want := range map[string]bool{"acme/weighted": true, "acme/fast": true, "acme/spread": false, "acme/priority": false} {
		if got := rt.models[model].affinity; got != want {
			t.Errorf("%s: affinity %v, want %v", model, got, want)
		}
	}
	if tol := rt.models["acme/weighted"].latencyTolerance; tol != 0.25 {
		t.Errorf("default tolerance %v", tol)
	}
}

// TestAffinitySameConversation: every turn of a conversation, however long
// it grows, goes to the same provider; so does a repeat of it.
func TestAffinitySameConversation(t *testing.T) {
	_, rt := affinityServer(t)
	now := time.Now()
	for c := range 50 {
		system := fmt.Sprintf("You are assistant %d. %s", c, strings.Repeat("Be helpful. ", 20))
		want := firstChoice(t, rt, "owner-a", conversation("acme/weighted", system, "hello", 0, ""), now)
		for turns := 1; turns < 20; turns++ {
			body := conversation("acme/weighted", system, "hello", turns, `,"stream":false`)
			if got := firstChoice(t, rt, "owner-a", body, now); got != want {
				t.Fatalf("conversation %d turn %d: %s, turn 0 went to %s", c, turns, got, want)
			}
		}
	}
}

// TestAffinityKeyParts: what the key is made of.
func TestAffinityKeyParts(t *testing.T) {
	key := func(owner string, body []byte) uint64 {
		req, e := parseChat(body)
		if e != nil {
			t.Fatalf("parseChat(%s): %v", body, e)
		}
		return cacheKey(owner, body, &req)
	}
	base := conversation("acme/weighted", "sys", "hello", 0, "")
	k := key("o", base)
	for _, tc := range []struct {
		name string
		body []byte
		same bool
	}{
		{"later turns", conversation("acme/weighted", "sys", "hello", 3, ""), true},
		{"other members", conversation("acme/weighted", "sys", "hello", 1, `,"temperature":0.5,"stream":true`), true},
		{"another system prompt", conversation("acme/weighted", "sys2", "hello", 0, ""), false},
		{"another first message", conversation("acme/weighted", "sys", "hello!", 0, ""), false},
		{"tools", conversation("acme/weighted", "sys", "hello", 0, `,"tools":[{"type":"function","function":{"name":"f"}}]`), false},
		{"empty prompt_cache_key is no key", conversation("acme/weighted", "sys", "hello", 0, `,"prompt_cache_key":""`), true},
	} {
		if got := key("o", tc.body) == k; got != tc.same {
			t.Errorf("%s: same key %v, want %v", tc.name, got, tc.same)
		}
	}
	// prompt_cache_key wins over the prefix.
	a := key("o", conversation("acme/weighted", "sys", "hello", 0, `,"prompt_cache_key":"tenant-42"`))
	b := key("o", conversation("acme/weighted", "other", "bye", 2, `,"prompt_cache_key":"tenant-42"`))
	c := key("o", conversation("acme/weighted", "sys", "hello", 0, `,"prompt_cache_key":"tenant-43"`))
	if a != b || a == c || a == k {
		t.Errorf("prompt_cache_key: same key %v (want true), other key differs %v, differs from prefix %v", a == b, a != c, a != k)
	}
	// The owner is part of every key.
	if key("o2", base) == k || key("o2", conversation("acme/weighted", "sys", "hello", 0, `,"prompt_cache_key":"tenant-42"`)) == a {
		t.Error("different owners, same key")
	}
	// Long prefixes: the start, the end and the length count.
	long := strings.Repeat("policy ", 20000)
	lk := key("o", conversation("acme/weighted", long, "hello", 0, ""))
	for name, body := range map[string][]byte{
		"another start":  conversation("acme/weighted", "X"+long[1:], "hello", 0, ""),
		"another end":    conversation("acme/weighted", long, "hello!", 0, ""),
		"another length": conversation("acme/weighted", long[:60000]+"policy "+long[60000:], "hello", 0, ""),
	} {
		if key("o", body) == lk {
			t.Errorf("long prefix, %s: same key", name)
		}
	}
	if key("o", conversation("acme/weighted", long, "hello", 4, "")) != lk {
		t.Error("long prefix: later turns changed the key")
	}
	// Only the first user message: a conversation of system prompts only
	// hashes them all.
	if key("o", []byte(`{"model":"m","messages":[{"role":"system","content":"a"}]}`)) ==
		key("o", []byte(`{"model":"m","messages":[{"role":"system","content":"a"},{"role":"system","content":"b"}]}`)) {
		t.Error("system-only conversations of different prompts share a key")
	}
}

// TestAffinityWeights: across many conversations the weights hold, and two
// owners sending the same conversations are spread independently.
func TestAffinityWeights(t *testing.T) {
	_, rt := affinityServer(t)
	now := time.Now()
	const n = 8000
	count := map[string]int{}
	agree := 0
	for i := range n {
		body := conversation("acme/weighted", "sys", fmt.Sprintf("question %d", i), 0, "")
		a := firstChoice(t, rt, "owner-a", body, now)
		count[a]++
		if firstChoice(t, rt, "owner-b", body, now) == a {
			agree++
		}
	}
	for p, want := range map[string]float64{"p1": 0.6, "p2": 0.2, "p3": 0.2} {
		if share := float64(count[p]) / n; share < want-0.03 || share > want+0.03 {
			t.Errorf("%s share %.3f, want about %.1f (%v)", p, share, want, count)
		}
	}
	// Independent choices agree with probability 0.6²+0.2²+0.2² = 0.44.
	if share := float64(agree) / n; share < 0.40 || share > 0.48 {
		t.Errorf("owners agree on %.3f of conversations, want about 0.44 (independent)", share)
	}
}

// TestAffinityCooling: a cooling provider's conversations move, each to its
// own second choice and consistently, while the others stay put; they come
// back when the cooldown ends.
func TestAffinityCooling(t *testing.T) {
	srv, rt := affinityServer(t)
	now := time.Now()
	const n = 2000
	before := make([]string, n)
	body := func(i int) []byte { return conversation("acme/weighted", "sys", fmt.Sprintf("q%d", i), 0, "") }
	for i := range n {
		before[i] = firstChoice(t, rt, "o", body(i), now)
	}
	srv.healthOf("p1").coolDown(now, time.Minute)
	moved := map[string]int{}
	for i := range n {
		got := firstChoice(t, rt, "o", body(i), now)
		switch {
		case got == "p1":
			t.Fatalf("conversation %d still sent to cooling p1", i)
		case before[i] != "p1" && got != before[i]:
			t.Fatalf("conversation %d moved from %s to %s, though %s is healthy", i, before[i], got, before[i])
		case before[i] == "p1":
			moved[got]++
			if again := firstChoice(t, rt, "o", body(i), now); again != got {
				t.Fatalf("conversation %d: %s then %s while p1 cools", i, got, again)
			}
		}
	}
	if moved["p2"] == 0 || moved["p3"] == 0 {
		t.Errorf("p1's conversations all moved to one provider: %v", moved)
	}
	later := now.Add(2 * time.Minute)
	for i := range n {
		if got := firstChoice(t, rt, "o", body(i), later); got != before[i] {
			t.Fatalf("after the cooldown conversation %d went to %s, before to %s", i, got, before[i])
		}
	}
	// Everyone cooling: the normal order's candidates, still affine.
	srv.healthOf("p2").coolDown(now, time.Minute)
	srv.healthOf("p3").coolDown(now, time.Minute)
	for i := range 50 {
		if got := firstChoice(t, rt, "o", body(i), now); got != before[i] {
			t.Fatalf("all cooling: conversation %d went to %s, want %s", i, got, before[i])
		}
	}
}

// TestAffinityLatency: affinity among the providers within the tolerance of
// the best estimate; exploration first.
func TestAffinityLatency(t *testing.T) {
	srv, rt := affinityServer(t)
	now := time.Now()
	body := func(i int) []byte { return conversation("acme/fast", "sys", fmt.Sprintf("q%d", i), 0, "") }
	if got := firstChoice(t, rt, "o", body(0), now); got != "p1" {
		t.Fatalf("no samples: %s, want p1 (exploration in order)", got)
	}
	for p, d := range map[string]time.Duration{"p1": 100 * time.Millisecond, "p2": 120 * time.Millisecond, "p3": 500 * time.Millisecond} {
		for range exploreSamples {
			srv.healthOf(p).observe(d)
		}
	}
	count := map[string]int{}
	for i := range 1000 {
		got := firstChoice(t, rt, "o", body(i), now)
		count[got]++
		if again := firstChoice(t, rt, "o", body(i), now); again != got {
			t.Fatalf("conversation %d: %s then %s", i, got, again)
		}
	}
	if count["p3"] != 0 || count["p1"] < 400 || count["p2"] < 400 {
		t.Errorf("within 25%% of 100ms are p1 and p2 only: %v", count)
	}
	// p2 slows past the tolerance: its conversations go to p1.
	for range 10 {
		srv.healthOf("p2").observe(300 * time.Millisecond)
	}
	for i := range 200 {
		if got := firstChoice(t, rt, "o", body(i), now); got != "p1" {
			t.Fatalf("conversation %d: %s, want p1 (the only one within tolerance)", i, got)
		}
	}
}

// TestAffinityOffAndPriority: without affinity the weighted policy spreads
// one conversation; priority is unchanged.
func TestAffinityOffAndPriority(t *testing.T) {
	h := newCatalogHarness(t, affinityCatalog())
	seen := map[string]map[string]bool{}
	for _, model := range []string{"acme/spread", "acme/weighted", "acme/priority"} {
		seen[model] = map[string]bool{}
		body := string(conversation(model, "sys", "hello", 2, ""))
		for range 64 {
			e := h.open(t)
			e.do(chatHeaders(goodKey))
			r := e.do(reqBody(body))
			seen[model][setHeaders(common(r).GetHeaderMutation())[catalog.FirstHeader]] = true
		}
	}
	if len(seen["acme/spread"]) != 2 {
		t.Errorf("affinity off: one conversation went to %v, want both providers", seen["acme/spread"])
	}
	if len(seen["acme/weighted"]) != 1 {
		t.Errorf("affinity on: one conversation went to %v, want one provider", seen["acme/weighted"])
	}
	if !seen["acme/priority"]["p1"] || len(seen["acme/priority"]) != 1 {
		t.Errorf("priority: %v, want p1", seen["acme/priority"])
	}
}

// TestAffinityAllocs: the key and the choice allocate nothing.
func TestAffinityAllocs(t *testing.T) {
	_, rt := affinityServer(t)
	body := conversation("acme/weighted", strings.Repeat("system ", 1000), "hello", 10, `,"tools":[{"type":"function","function":{"name":"f"}}]`)
	req, e := parseChat(body)
	if e != nil {
		t.Fatal(e)
	}
	mr := rt.models["acme/weighted"]
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() {
		_ = chooseKeyed(mr, opChat, now, cacheKey("owner", body, &req))
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func BenchmarkAffinityKey(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 10, 8 << 20} {
		body := conversation("acme/weighted", strings.Repeat("x", size), "hello", 10, "")
		req, e := parseChat(body)
		if e != nil {
			b.Fatal(e)
		}
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				_ = cacheKey("owner", body, &req)
			}
		})
	}
}
