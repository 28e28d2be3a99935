package extproc

import (
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// policyServer is a Server with the routing catalog and fresh health.
func policyServer(t *testing.T) (*Server, *routeTable) {
	t.Helper()
	srv, _, _ := newTestServer(t, false)
	srv.getenv = routingEnv
	if err := srv.SetCatalog(routingCatalog()); err != nil {
		t.Fatal(err)
	}
	return srv, srv.routes.Load()
}

func TestFailoverOrder(t *testing.T) {
	_, rt := policyServer(t)
	var got []string
	for _, tg := range rt.models["acme/chat"].targets {
		got = append(got, tg.provider.name)
	}
	// Home region (us) first, then priority, then file order.
	want := []string{"claude", "oa-us", "gem", "oa-asia"}
	if len(got) != len(want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

func TestPriorityPolicy(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name    string
		cooling []string
		want    string
	}{
		{"first in order", nil, "claude"},
		{"skips a cooling provider", []string{"claude"}, "oa-us"},
		{"home region before the other", []string{"claude", "oa-us"}, "gem"},
		{"other region when home is cooling", []string{"claude", "oa-us", "gem"}, "oa-asia"},
		{"normal order when all are cooling", []string{"claude", "oa-us", "gem", "oa-asia"}, "claude"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, rt := policyServer(t)
			for _, p := range tc.cooling {
				srv.healthOf(p).coolDown(now, time.Minute)
			}
			if got := choose(rt.models["acme/chat"], opChat, now).provider.name; got != tc.want {
				t.Errorf("chose %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("a cooldown ends", func(t *testing.T) {
		srv, rt := policyServer(t)
		srv.healthOf("claude").coolDown(now, time.Second)
		if got := choose(rt.models["acme/chat"], opChat, now.Add(2*time.Second)).provider.name; got != "claude" {
			t.Errorf("chose %q after the cooldown", got)
		}
	})
}

func TestWeightedPolicy(t *testing.T) {
	now := time.Now()
	srv, rt := policyServer(t)
	m := rt.models["acme/weighted"]
	const n = 8000
	count := map[string]int{}
	for range n {
		count[choose(m, opChat, now).provider.name]++
	}
	// Weights 3:1:1 (the config's weight 0 means the default, 1).
	for p, want := range map[string]float64{"oa-us": 0.6, "claude": 0.2, "gem": 0.2} {
		if share := float64(count[p]) / n; share < want-0.04 || share > want+0.04 {
			t.Errorf("%s share %.3f, want about %.1f (%v)", p, share, want, count)
		}
	}
	srv.healthOf("oa-us").coolDown(now, time.Minute)
	count = map[string]int{}
	for range 1000 {
		count[choose(m, opChat, now).provider.name]++
	}
	if count["oa-us"] != 0 || count["claude"] < 400 || count["gem"] < 400 {
		t.Errorf("with oa-us cooling: %v", count)
	}
	srv.healthOf("claude").coolDown(now, time.Minute)
	if got := choose(m, opChat, now).provider.name; got != "gem" {
		t.Errorf("chose %q; want gem, the only one not cooling", got)
	}
}

func TestLatencyPolicy(t *testing.T) {
	now := time.Now()
	srv, rt := policyServer(t)
	m := rt.models["acme/fast"] // oa-us, claude, gem
	observe := func(p string, ds ...time.Duration) {
		for _, d := range ds {
			srv.healthOf(p).observe(d)
		}
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"no samples: explore the first", func() {}, "oa-us"},
		{"explore until 3 samples", func() { observe("oa-us", 100*time.Millisecond, 100*time.Millisecond) }, "oa-us"},
		{"then the next unexplored", func() { observe("oa-us", 100*time.Millisecond) }, "claude"},
		{"and the last", func() { observe("claude", 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond) }, "gem"},
		{"then the fastest", func() { observe("gem", time.Second, time.Second, time.Second) }, "claude"},
		{"slower samples move the estimate", func() {
			observe("claude", 400*time.Millisecond, 400*time.Millisecond)
		}, "oa-us"},
		{"a cooling provider is skipped however fast", func() { srv.healthOf("oa-us").coolDown(now, time.Minute) }, "claude"},
	}
	for _, s := range steps {
		s.do()
		if got := choose(m, opChat, now).provider.name; got != s.want {
			t.Fatalf("%s: chose %q, want %q", s.name, got, s.want)
		}
	}
}

func TestEWMA(t *testing.T) {
	var h providerHealth
	h.observe(100 * time.Millisecond)
	if est, n := h.estimate(); est != 100*time.Millisecond || n != 1 {
		t.Fatalf("first sample: %v %d", est, n)
	}
	h.observe(200 * time.Millisecond)
	// 0.3 × 200 + 0.7 × 100
	if est, n := h.estimate(); est != 130*time.Millisecond || n != 2 {
		t.Errorf("estimate %v (%d samples), want 130ms", est, n)
	}
}

func TestCooldownKeepsTheLonger(t *testing.T) {
	var h providerHealth
	now := time.Now()
	h.coolDown(now, time.Minute)
	h.coolDown(now, time.Second)
	if !h.cooling(now.Add(30 * time.Second).UnixNano()) {
		t.Error("a shorter retry-after shortened the cooldown")
	}
	h.coolDown(now, 24*time.Hour)
	if h.cooling(now.Add(maxCooldown + time.Second).UnixNano()) {
		t.Error("cooldown not capped")
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		value string
		ms    bool
		want  time.Duration
		ok    bool
	}{
		{"30", false, 30 * time.Second, true},
		{" 1.5 ", false, 1500 * time.Millisecond, true},
		{"250", true, 250 * time.Millisecond, true},
		{now.Add(90 * time.Second).Format(http.TimeFormat), false, 90 * time.Second, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), false, 0, false},
		{"999999999999", false, maxCooldown, true},
		{"0", false, 0, false},
		{"-3", false, 0, false},
		{"NaN", false, 0, false},
		{"soon", false, 0, false},
		{"", false, 0, false},
		{now.Format(http.TimeFormat), true, 0, false},
	} {
		got, ok := retryAfter(tc.value, tc.ms, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("retryAfter(%q, ms %v) = %v, %v; want %v, %v", tc.value, tc.ms, got, ok, tc.want, tc.ok)
		}
	}
}

func TestFirstHeaderFollowsPolicy(t *testing.T) {
	h := newCatalogHarness(t, routingCatalog())
	h.srv.healthOf("claude").coolDown(time.Now(), time.Minute)
	e := h.open(t)
	e.do(chatHeaders(goodKey))
	r := e.do(reqBody(chatBody("acme/chat")))
	set := setHeaders(common(r).GetHeaderMutation())
	if set[catalog.FirstHeader] != "oa-us" || set[catalog.RouteHeader] != "acme/chat" {
		t.Errorf("route headers = %v", set)
	}
	if md := metaFields(t, r); md["provider"] != "oa-us" {
		t.Errorf("metadata provider = %v", md["provider"])
	}
}
