package e2e

import (
	"fmt"
	"testing"
	"time"
)

// regionYAML: provider a in us, b in asia, same priority; the gateway's home
// region is us unless the gateway says otherwise.
func regionYAML(base, keyEnv map[string]string) string {
	return fmt.Sprintf(`
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
outlier_detection: {consecutive_failures: 2, interval: 50ms, base_ejection_time: 500ms}
providers:
  - {name: a, kind: openai, base_url: %q, api_key_env: %s, region: us}
  - {name: b, kind: openai, base_url: %q, api_key_env: %s, region: asia}
models:
  - id: demo/regional
    first_byte_timeout: 2s
    providers:
      - {provider: b, upstream_model: model-b}
      - {provider: a, upstream_model: model-a}
`, base["a"], keyEnv["a"], base["b"], keyEnv["b"])
}

// TestRegionFailover: a gateway whose home region is us keeps traffic on
// its us provider while that is healthy (though asia's is listed first),
// moves it to asia when the us provider fails, and brings it back when it
// recovers. A gateway in asia, in front of the same providers and with
// the same configuration, prefers asia's.
func TestRegionFailover(t *testing.T) {
	us := newRouteStack(t, routeStackOptions{names: []string{"a", "b"}, yaml: regionYAML})
	a, b := us.up["a"], us.up["b"]
	const model = "demo/regional"

	for n := range 10 {
		if from := us.mustAsk(t, model, fmt.Sprintf("home %d", n)); from != "a" {
			t.Fatalf("request %d in region us answered by %q, want a (us)", n, from)
		}
	}
	if b.hits.Load() != 0 {
		t.Fatalf("the asia provider got %d requests while the home region was healthy", b.hits.Load())
	}

	// The home region fails: traffic moves to asia, every request answered.
	a.set(mode500)
	for n := range 10 {
		if from := us.mustAsk(t, model, fmt.Sprintf("away %d", n)); from != "b" {
			t.Fatalf("request %d during the us outage answered by %q, want b (asia)", n, from)
		}
	}
	if got := a.hits.Load(); got > 10+2 {
		t.Errorf("the failing us provider saw %d attempts; ejection should have stopped them after 2", got-10)
	}
	// It recovers: after its ejection it is probed, and traffic returns home.
	a.set(modeServe)
	waitFor(t, 10*time.Second, "traffic back in us", func() bool { return us.mustAsk(t, model, "back home?") == "a" })
	for n := range 5 {
		if from := us.mustAsk(t, model, fmt.Sprintf("home again %d", n)); from != "a" {
			t.Fatalf("request %d after recovery answered by %q, want a", n, from)
		}
	}

	// A gateway in asia: the same configuration, the other snapshot.
	asia := newRouteStack(t, routeStackOptions{region: "asia", upstreams: us.up, yaml: regionYAML})
	bBefore := b.hits.Load()
	for n := range 5 {
		if from := asia.mustAsk(t, model, fmt.Sprintf("asia %d", n)); from != "b" {
			t.Fatalf("request %d in region asia answered by %q, want b (asia)", n, from)
		}
	}
	if got := b.hits.Load() - bBefore; got != 5 {
		t.Errorf("asia's provider saw %d requests, want 5", got)
	}
}
