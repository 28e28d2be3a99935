package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// redisDownTiers: free fails closed (the default), standard falls back to
// this replica's share of its limits (6 a minute over 2 replicas: 3), open
// is served unmetered.
const redisDownTiers = `
tiers:
  free: {rpm: 10, tpm: 40000}
  standard: {rpm: 6, tpm: 200000, local_replicas: 2}
  open: {rpm: 5, tpm: 200000, on_limiter_error: allow}
`

// TestLimitsWhenRedisDown runs the gateway on envoyproxy/ratelimit over a
// real redis-server, which is paused (it hangs, as behind a partition),
// resumed, killed and started again, empty, mid-test. While it is down,
// every request is answered within the limiter's bound, per its tier's
// on_limiter_error: free 503 rate_limiter_unavailable, standard exactly its
// local share then 429, open unmetered. Once the ratelimit service reaches
// Redis again, the limits are Redis's again, counted exactly: after the
// pause from the counts it kept, after the restart from zero. Every window
// is held by a fixed clock, so none resets during the test.
func TestLimitsWhenRedisDown(t *testing.T) {
	redis := ratelimittest.StartRedis(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{extraYAML: redisDownTiers, gateway: func(o *gateway.Options) { o.RateLimitAddr = lis.Addr().String() }})
	ratelimittest.EnvoyRateLimit(t, lis, s.gw.XDSAddr(), redis.Sock, fixedClock{})
	free, _ := s.issue(t, keys.Spec{Name: "free", Tier: "free"})
	std, _ := s.issue(t, keys.Spec{Name: "standard", Tier: "standard"})
	open, _ := s.issue(t, keys.Spec{Name: "open", Tier: "open"})
	probe, _ := s.issue(t, keys.Spec{Name: "probe", Tier: "free"})

	// send sends one chat request with key and checks its answer: want
	// is its status, code the error code of a refusal; no answer may take
	// longer than the limiter's bound allows.
	send := func(phase, key string, want int, code string) {
		t.Helper()
		start := time.Now()
		r := burst(t, s, key, 1)[0]
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: answered after %v", phase, took)
		}
		if r.status != want {
			t.Fatalf("%s: %d %s, want %d %s", phase, r.status, r.body, want, code)
		}
		if want == http.StatusOK {
			return
		}
		var e struct {
			Error map[string]any `json:"error"`
		}
		if err := json.Unmarshal(r.body, &e); err != nil || e.Error["code"] != code || e.Error["message"] == "" {
			t.Fatalf("%s: error body %s, want OpenAI's error with code %s", phase, r.body, code)
		}
		for _, f := range []string{"type", "param"} {
			if _, ok := e.Error[f]; !ok {
				t.Errorf("%s: error body lacks %q: %s", phase, f, r.body)
			}
		}
		if want == http.StatusServiceUnavailable && r.header.Get("retry-after") != "1" {
			t.Errorf("%s: retry-after %q, want 1", phase, r.header.Get("retry-after"))
		}
	}
	sendN := func(phase, key string, n int) {
		t.Helper()
		for range n {
			send(phase, key, http.StatusOK, "")
		}
	}
	// back waits until the ratelimit service decides with Redis again
	// (its client reconnects with a backoff of up to 4 s): a free key
	// the test does not count with is refused with 503 until then.
	back := func(phase string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r := burst(t, s, probe, 1)[0]
			if r.status == http.StatusOK {
				return
			}
			if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				t.Fatalf("%s: probe %d %s, want 503 until Redis is reached, then 200", phase, r.status, r.body)
			}
		}
	}

	sendN("up: free", free, 4)
	sendN("up: standard", std, 2)
	sendN("up: open", open, 1)

	redis.Pause()
	send("paused: free", free, http.StatusServiceUnavailable, "rate_limiter_unavailable")
	sendN("paused: standard, its local share", std, 3)
	send("paused: standard, past its local share", std, http.StatusTooManyRequests, "rate_limit_exceeded")
	sendN("paused: open, unmetered beyond its 5", open, 6)

	redis.Resume()
	back("resumed")
	// Redis kept its counts: free had 4 of 10, standard 2 of 6 (the local
	// admissions are not in them, and the local refusal does not linger).
	sendN("resumed: free", free, 6)
	send("resumed: free, over", free, http.StatusTooManyRequests, "rate_limit_exceeded")
	sendN("resumed: standard", std, 4)
	send("resumed: standard, over", std, http.StatusTooManyRequests, "rate_limit_exceeded")
	sendN("resumed: open, counted again", open, 4) // 1 before the pause
	send("resumed: open, over", open, http.StatusTooManyRequests, "rate_limit_exceeded")

	redis.Stop()
	send("killed: probe", probe, http.StatusServiceUnavailable, "rate_limiter_unavailable")
	// A key Redis refused for this window stays refused on the replica
	// until the window ends, Redis or not.
	send("killed: free, over its limit this window", free, http.StatusTooManyRequests, "rate_limit_exceeded")
	std2, _ := s.issue(t, keys.Spec{Name: "standard-2", Tier: "standard"})
	sendN("killed: another standard key, its local share", std2, 3)
	send("killed: another standard key, past its local share", std2, http.StatusTooManyRequests, "rate_limit_exceeded")

	redis.Start()
	back("restarted") // the probe's first request of the new count
	// A restarted Redis has lost the window's counts: the limits count
	// from zero again, exactly.
	sendN("restarted: probe", probe, 9)
	send("restarted: probe, over", probe, http.StatusTooManyRequests, "rate_limit_exceeded")
	sendN("restarted: standard-2", std2, 6)
	send("restarted: standard-2, over", std2, http.StatusTooManyRequests, "rate_limit_exceeded")
}
