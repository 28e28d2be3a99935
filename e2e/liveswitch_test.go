package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// liveYAML serves demo/live from the providers named (in priority order),
// and demo/other from a and b.
func liveYAML(serving ...string) func(base, keyEnv map[string]string) string {
	return func(base, keyEnv map[string]string) string {
		var ps strings.Builder
		for i, p := range serving {
			fmt.Fprintf(&ps, "      - {provider: %s, upstream_model: model-%s, priority: %d}\n", p, p, i)
		}
		return fmt.Sprintf(`
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
# 200 clients share one key here.
limits: {max_concurrent_requests_per_key: 1000}
providers:
  - {name: a, kind: openai, base_url: %q, api_key_env: %s, forward_headers: [x-fake-delay-ms]}
  - {name: b, kind: openai, base_url: %q, api_key_env: %s, forward_headers: [x-fake-delay-ms]}
models:
  - id: demo/live
    first_byte_timeout: 10s
    providers:
%s  - id: demo/other
    providers: [{provider: a, upstream_model: other-a}, {provider: b, upstream_model: other-b}]
`, base["a"], keyEnv["a"], base["b"], keyEnv["b"], ps.String())
	}
}

// loadResult is one request of a load run.
type loadResult struct {
	start, end time.Time
	from       string
	err        error
}

// switchUnderLoad keeps 200 clients busy with slow demo/live requests (the
// fake holds each for 400 ms: x-fake-delay-ms) and one client sending fast
// ones back to back, makes the switch once 200 requests are in flight at
// provider from, keeps the load on for a while, and checks: no client saw
// an error (the 200 in flight finished on from), the fast client reached
// to within a second, and every request started more than a second after
// the switch reached to.
func switchUnderLoad(t *testing.T, s *routeStack, from, to string, doSwitch func()) {
	t.Helper()
	const clients = 200
	var (
		mu      sync.Mutex
		results []loadResult
		wg      sync.WaitGroup
		stop    = make(chan struct{})
	)
	client := func(name string, opts ...option.RequestOption) {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			r := loadResult{start: time.Now()}
			r.from, r.err = s.ask(context.Background(), "demo/live", fmt.Sprintf("%s request %d", name, n), opts...)
			r.end = time.Now()
			mu.Lock()
			results = append(results, r)
			mu.Unlock()
		}
	}
	for w := range clients {
		wg.Add(1)
		go client(fmt.Sprintf("slow client %d", w), option.WithHeader(fake.HeaderDelayMS, "400"))
	}
	wg.Add(1)
	go client("fast client")
	waitFor(t, 15*time.Second, fmt.Sprintf("%d requests in flight at %s", clients, from), func() bool {
		return s.up[from].inFlight.Load() >= clients
	})
	switchAt := time.Now()
	doSwitch()
	// The deadline is a second; keep the load on until a request that
	// started after it has finished.
	waitFor(t, 15*time.Second, "a request started a second after the switch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range results {
			if r.start.After(switchAt.Add(time.Second)) {
				return true
			}
		}
		return false
	})
	close(stop)
	wg.Wait()

	var errs []string
	inFlight, after, firstTo := 0, 0, time.Duration(-1)
	for _, r := range results {
		if r.err != nil {
			errs = append(errs, r.err.Error())
			continue
		}
		if r.start.Before(switchAt) && r.end.After(switchAt) {
			inFlight++
		}
		if r.from == to && r.start.After(switchAt) && (firstTo < 0 || r.start.Sub(switchAt) < firstTo) {
			firstTo = r.start.Sub(switchAt)
		}
		if r.start.After(switchAt.Add(time.Second)) {
			after++
			if r.from != to {
				errs = append(errs, fmt.Sprintf("a request started %v after the switch reached %q, want %q", r.start.Sub(switchAt), r.from, to))
			}
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		// E2E_DUMP_LOGS=FILE keeps the gateway's whole log (at debug level)
		// for a post-mortem.
		if path := os.Getenv("E2E_DUMP_LOGS"); path != "" {
			_ = os.WriteFile(path, []byte(s.logs.String()), 0o600)
		}
		t.Fatalf("%d of %d requests went wrong; first: %s", len(errs), len(results), strings.Join(errs[:min(5, len(errs))], "\n"))
	}
	if inFlight < clients {
		t.Errorf("%d requests were in flight across the switch, want %d", inFlight, clients)
	}
	if after == 0 {
		t.Error("no request started more than a second after the switch")
	}
	if firstTo < 0 || firstTo > time.Second {
		t.Errorf("the first request to reach %s started %v after the switch, want within 1s", to, firstTo)
	}
	t.Logf("%d requests, %d in flight across the switch, first to %s %v after it, %d started after the deadline",
		len(results), inFlight, to, firstTo, after)
}

// TestLiveSwitchUnderLoad: the route of a model moves from provider a to b
// by a config file change, then back by the admin API, each while 200
// requests are in flight: no client sees an error, requests in flight
// finish where they started, and new ones reach the new provider within a
// second, with no restart.
func TestLiveSwitchUnderLoad(t *testing.T) {
	s := newRouteStack(t, routeStackOptions{names: []string{"a", "b"}, yaml: liveYAML("a")})
	if from := s.mustAsk(t, "demo/live", "before"); from != "a" {
		t.Fatalf("answered by %q, want a", from)
	}
	version := func() string { return s.gw.Control.Version() }

	t.Run("config file reload", func(t *testing.T) {
		before := version()
		switchUnderLoad(t, s, "a", "b", func() {
			src := liveYAML("b")(map[string]string{"a": "http://" + s.up["a"].addr + "/v1", "b": "http://" + s.up["b"].addr + "/v1"},
				map[string]string{"a": "SWITCHYARD_E2E_KEY_A", "b": "SWITCHYARD_E2E_KEY_B"})
			tmp := s.cfgPath + ".new"
			if err := os.WriteFile(tmp, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, s.cfgPath); err != nil {
				t.Fatal(err)
			}
		})
		if version() == before {
			t.Error("the file change made no new snapshot version")
		}
	})

	t.Run("admin API", func(t *testing.T) {
		before := version()
		switchUnderLoad(t, s, "b", "a", func() {
			status, body := s.admin(t, http.MethodPatch, "/admin/v1/models/demo/live",
				map[string]any{"providers": []map[string]any{{"provider": "a", "upstream_model": "model-a"}}})
			if status != http.StatusOK || !strings.Contains(string(body), `"failover":["a"]`) {
				t.Errorf("PATCH: %d %s", status, body)
			}
		})
		if version() == before {
			t.Error("the admin change made no new snapshot version")
		}
	})
}

// TestRoutingAdminAPI: routing changes by the admin API, and what a
// refused change leaves alone.
func TestRoutingAdminAPI(t *testing.T) {
	s := newRouteStack(t, routeStackOptions{names: []string{"a", "b"}, yaml: liveYAML("a", "b")})
	get := func() string {
		status, body := s.admin(t, http.MethodGet, "/admin/v1/routing", nil)
		if status != http.StatusOK {
			t.Fatalf("GET routing: %d %s", status, body)
		}
		return string(body)
	}
	if r := get(); !strings.Contains(r, `"id":"demo/live"`) || !strings.Contains(r, `"failover":["a","b"]`) {
		t.Fatalf("routing = %s", r)
	}

	// Priorities: b first.
	status, body := s.admin(t, http.MethodPatch, "/admin/v1/models/demo/live/providers/b", map[string]any{"priority": -1})
	if status != http.StatusOK || !strings.Contains(string(body), `"failover":["b","a"]`) {
		t.Fatalf("set priority: %d %s", status, body)
	}
	waitFor(t, time.Second, "demo/live on b", func() bool { return s.mustAsk(t, "demo/live", "who?") == "b" })

	// Weighted routing: b at weight 0 is never the first choice while a has
	// weight.
	status, body = s.admin(t, http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{
		"routing": "weighted",
		"providers": []map[string]any{
			{"provider": "a", "weight": 5},
			{"provider": "b", "weight": 1, "priority": 3},
		},
	})
	if status != http.StatusOK || !strings.Contains(string(body), `"routing":"weighted"`) {
		t.Fatalf("set weighted: %d %s", status, body)
	}

	// Refused changes: nothing moves, the version stays.
	v := s.gw.Control.Version()
	for _, tc := range []struct {
		method, path string
		body         any
		status       int
		want         string
	}{
		{http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{"routing": "fastest"}, 400, "routing"},
		{http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{"providers": []map[string]any{{"provider": "c"}}}, 400, "upstream_model"},
		{http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{"providers": []map[string]any{{"provider": "c", "upstream_model": "x"}}}, 400, `unknown provider \"c\"`},
		{http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{"providers": []map[string]any{}}, 400, "at least one provider"},
		{http.MethodPatch, "/admin/v1/models/demo/nope", map[string]any{"routing": "priority"}, 404, "model_not_found"},
		{http.MethodPatch, "/admin/v1/models/demo/live/providers/c", map[string]any{"weight": 2}, 404, "does not serve"},
		{http.MethodPatch, "/admin/v1/models/demo/live", map[string]any{"first_byte_timeout": "soon"}, 400, "first_byte_timeout"},
		{http.MethodPost, "/admin/v1/providers/zz/drain", nil, 404, "not found"},
	} {
		status, body := s.admin(t, tc.method, tc.path, tc.body)
		if status != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s %v: %d %s, want %d mentioning %s", tc.method, tc.path, tc.body, status, body, tc.status, tc.want)
		}
	}
	if got := s.gw.Control.Version(); got != v {
		t.Errorf("a refused change moved the version from %s to %s", v, got)
	}
	// Unauthenticated: 401.
	req, _ := http.NewRequest(http.MethodGet, s.gw.AdminURL()+"/admin/v1/routing", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the token: %v %v", resp, err)
	}
}

// TestDrainProvider: draining a provider takes it out of every model's
// rotation while the requests already on it finish; undraining brings it
// back. Draining a model's last provider is refused.
func TestDrainProvider(t *testing.T) {
	s := newRouteStack(t, routeStackOptions{names: []string{"a", "b"}, serviceTime: 200 * time.Millisecond, yaml: liveYAML("a", "b")})
	if from := s.mustAsk(t, "demo/other", "before"); from != "a" {
		t.Fatalf("demo/other answered by %q, want a", from)
	}
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from, err := s.ask(context.Background(), "demo/live", fmt.Sprintf("in flight %d", i))
			if err == nil && from != "a" {
				err = fmt.Errorf("in-flight request answered by %q", from)
			}
			errs <- err
		}()
	}
	waitFor(t, 10*time.Second, "requests in flight at a", func() bool { return s.up["a"].inFlight.Load() >= n })
	status, body := s.admin(t, http.MethodPost, "/admin/v1/providers/a/drain", nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"drained":true`) {
		t.Fatalf("drain: %d %s", status, body)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	// Every model moved to b.
	waitFor(t, time.Second, "traffic on b", func() bool { return s.mustAsk(t, "demo/live", "drained?") == "b" })
	for _, m := range []string{"demo/live", "demo/other"} {
		if from := s.mustAsk(t, m, "after the drain"); from != "b" {
			t.Errorf("%s answered by %q after draining a", m, from)
		}
	}
	// b is the last provider of both models now: it cannot be drained too.
	if status, body := s.admin(t, http.MethodPost, "/admin/v1/providers/b/drain", nil); status != http.StatusConflict {
		t.Errorf("draining the last provider: %d %s", status, body)
	}
	if status, body := s.admin(t, http.MethodPost, "/admin/v1/providers/a/undrain", nil); status != http.StatusOK || !strings.Contains(string(body), `"drained":false`) {
		t.Fatalf("undrain: %d %s", status, body)
	}
	waitFor(t, time.Second, "traffic back on a", func() bool { return s.mustAsk(t, "demo/live", "undrained?") == "a" })
}
