package admin

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// newRoutingAPI serves the admin API with a real control plane (no
// subscribers) as its routing side.
func newRoutingAPI(t *testing.T) (*httptest.Server, *controlplane.Server) {
	t.Helper()
	cfg, err := config.Parse("routing.yaml", []byte(`
region: us
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: a, kind: openai, base_url: http://127.0.0.1:9001/v1, region: us}
  - {name: b, kind: openai, base_url: http://127.0.0.1:9002/v1, region: asia}
  - {name: c, kind: openai, base_url: http://127.0.0.1:9003/v1, region: us}
models:
  - id: v/m1
    providers: [{provider: a, upstream_model: x}, {provider: b, upstream_model: y}]
  - id: v/m2
    providers: [{provider: b, upstream_model: z}]
`))
	if err != nil {
		t.Fatal(err)
	}
	cp := controlplane.New(nil)
	if _, err := cp.Update(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Keys: &keys.SQLiteStore{}, Token: token, Config: cp.Config, Routing: cp, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, cp
}

// TestRoutingEndpoints runs a sequence of changes: each row's answer, and
// the version it leaves (refused changes keep it).
func TestRoutingEndpoints(t *testing.T) {
	srv, cp := newRoutingAPI(t)
	auth := "Bearer " + token
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     []string // substrings of the answer
		version                  string   // after the call
	}{
		{"list", "GET", "/admin/v1/routing", "", 200,
			[]string{`"version":"1"`, `"region":"us"`, `"id":"v/m1"`, `"failover":["a","b"]`, `"drained":[]`}, "1"},
		{"one model", "GET", "/admin/v1/models/v/m1", "", 200, []string{`"routing":"priority"`, `"first_byte_timeout":"30s"`, `"idle_timeout":"1m0s"`, `"region":"asia"`}, "1"},
		{"unknown model", "GET", "/admin/v1/models/v/nope", "", 404, []string{"model_not_found"}, "1"},
		// b's priority is higher, but b is in the other region: home first.
		{"priority below the home region", "PATCH", "/admin/v1/models/v/m1/providers/b", `{"priority":-1}`, 200,
			[]string{`"priority":-1,"region":"asia"`, `"failover":["a","b"]`, `"version":"2"`}, "2"},
		{"policy, timeout and providers", "PATCH", "/admin/v1/models/v/m1",
			`{"routing":"latency","first_byte_timeout":"5s","providers":[{"provider":"c","upstream_model":"w","weight":2},{"provider":"a"}]}`, 200,
			[]string{`"routing":"latency"`, `"first_byte_timeout":"5s"`, `"failover":["c","a"]`, `"upstream_model":"x"`, `"weight":2`}, "3"},
		{"unknown policy", "PATCH", "/admin/v1/models/v/m1", `{"routing":"fastest"}`, 400, []string{"models[0].routing", "must be one of"}, "3"},
		{"unknown provider", "PATCH", "/admin/v1/models/v/m1", `{"providers":[{"provider":"zz","upstream_model":"q"}]}`, 400,
			[]string{`unknown provider \"zz\"`}, "3"},
		{"new provider without upstream_model", "PATCH", "/admin/v1/models/v/m1", `{"providers":[{"provider":"b"}]}`, 400,
			[]string{"upstream_model is required"}, "3"},
		{"no providers", "PATCH", "/admin/v1/models/v/m1", `{"providers":[]}`, 400, []string{"at least one provider"}, "3"},
		{"bad timeout", "PATCH", "/admin/v1/models/v/m1", `{"first_byte_timeout":"-1s"}`, 400, []string{"first_byte_timeout"}, "3"},
		{"bad idle timeout", "PATCH", "/admin/v1/models/v/m1", `{"idle_timeout":"soon"}`, 400, []string{"idle_timeout"}, "3"},
		// The idle timeout also runs while the head is awaited: it must
		// exceed the first-byte timeout, or a stall could not fail over.
		{"first byte past the idle timeout", "PATCH", "/admin/v1/models/v/m1", `{"first_byte_timeout":"90s"}`, 400,
			[]string{"idle_timeout", "longer than first_byte_timeout (1m30s)"}, "3"},
		{"zero weight", "PATCH", "/admin/v1/models/v/m1/providers/c", `{"weight":0}`, 400, []string{"weight must be positive"}, "3"},
		{"unknown field", "PATCH", "/admin/v1/models/v/m1", `{"colour":"red"}`, 400, []string{"colour"}, "3"},
		{"provider not serving the model", "PATCH", "/admin/v1/models/v/m2/providers/a", `{"weight":2}`, 404, []string{"does not serve"}, "3"},
		{"provider of the path and the body differ", "PATCH", "/admin/v1/models/v/m1/providers/a", `{"provider":"c"}`, 400, []string{"the path"}, "3"},
		{"drain the last provider of v/m2", "POST", "/admin/v1/providers/b/drain", "", 409, []string{"conflict", "v/m2"}, "3"},
		{"drain an unknown provider", "POST", "/admin/v1/providers/zz/drain", "", 404, []string{"not found"}, "3"},
		{"drain c", "POST", "/admin/v1/providers/c/drain", "", 200, []string{`"drained":true`, `"drained_providers":["c"]`, `"version":"4"`}, "4"},
		{"drained c is listed, out of the failover", "GET", "/admin/v1/models/v/m1", "", 200,
			[]string{`"provider":"c","upstream_model":"w","weight":2,"priority":0,"region":"us","drained":true`, `"failover":["a"]`}, "4"},
		{"drain c again: nothing to do", "POST", "/admin/v1/providers/c/drain", "", 200, []string{`"version":"4"`}, "4"},
		{"undrain c", "POST", "/admin/v1/providers/c/undrain", "", 200, []string{`"drained":false`, `"version":"5"`}, "5"},
		{"back in the failover", "GET", "/admin/v1/routing", "", 200, []string{`"failover":["c","a"]`, `"drained":[]`}, "5"},
		{"both timeouts at once", "PATCH", "/admin/v1/models/v/m1", `{"first_byte_timeout":"90s","idle_timeout":"2m"}`, 200,
			[]string{`"first_byte_timeout":"1m30s"`, `"idle_timeout":"2m0s"`, `"version":"6"`}, "6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := do(t, srv, tt.method, tt.path, auth, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %s: %s", w, body)
				}
			}
			if got := cp.Version(); got != tt.version {
				t.Errorf("version %s, want %s", got, tt.version)
			}
		})
	}
	// The changes are the configuration in force.
	m := cp.Config().Models[0]
	if m.Routing != config.RoutingLatency || m.FirstByteTimeout.String() != "1m30s" || m.IdleTimeout.String() != "2m0s" ||
		len(m.Providers) != 2 || m.Providers[0].Weight != 2 {
		t.Errorf("model in force = %+v", m)
	}
	if status, _, _ := do(t, srv, "GET", "/admin/v1/routing", "", ""); status != http.StatusUnauthorized {
		t.Errorf("without the token: %d", status)
	}
}

// TestRoutingOverridesClear: the routing list names the overridden models,
// and clearing an override brings back the file's routing.
func TestRoutingOverridesClear(t *testing.T) {
	srv, cp := newRoutingAPI(t)
	auth := "Bearer " + token
	tests := []struct {
		name, method, path, body string
		status                   int
		want                     []string // substrings of the answer
		version                  string   // after the call
	}{
		{"no overrides", "GET", "/admin/v1/routing", "", 200, []string{`"overrides":[]`, `"overlay_version":0`}, "1"},
		{"override m1", "PATCH", "/admin/v1/models/v/m1", `{"routing":"weighted"}`, 200, []string{`"routing":"weighted"`}, "2"},
		{"override m2", "PATCH", "/admin/v1/models/v/m2", `{"first_byte_timeout":"5s"}`, 200, []string{`"first_byte_timeout":"5s"`}, "3"},
		{"drain a", "POST", "/admin/v1/providers/a/drain", "", 200, []string{`"drained":true`}, "4"},
		{"listed", "GET", "/admin/v1/routing", "", 200, []string{`"overrides":["v/m1","v/m2"]`, `"overlay_version":3`, `"drained":["a"]`}, "4"},
		{"clear an unknown model", "DELETE", "/admin/v1/routing/overrides?model=v/nope", "", 404, []string{"model_not_found"}, "4"},
		{"clear m1", "DELETE", "/admin/v1/routing/overrides?model=v/m1", "", 200, []string{`"overrides":["v/m2"]`, `"version":"5"`}, "5"},
		{"m1 routes as the file says", "GET", "/admin/v1/models/v/m1", "", 200, []string{`"routing":"priority"`}, "5"},
		{"clear all", "DELETE", "/admin/v1/routing/overrides", "", 200, []string{`"overrides":[]`, `"version":"6"`}, "6"},
		{"clear all again: nothing to do", "DELETE", "/admin/v1/routing/overrides", "", 200, []string{`"version":"6"`}, "6"},
		{"drains stay", "GET", "/admin/v1/routing", "", 200, []string{`"drained":["a"]`, `"first_byte_timeout":"30s"`}, "6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, body := do(t, srv, tt.method, tt.path, auth, tt.body)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %s", status, tt.status, body)
			}
			for _, w := range tt.want {
				if !strings.Contains(body, w) {
					t.Errorf("answer lacks %s: %s", w, body)
				}
			}
			if got := cp.Version(); got != tt.version {
				t.Errorf("version %s, want %s", got, tt.version)
			}
		})
	}
}

// TestRoutingOff: without a routing side the endpoints do not exist.
func TestRoutingOff(t *testing.T) {
	srv, _, _ := newAPI(t)
	if status, _, _ := do(t, srv, "GET", "/admin/v1/routing", "Bearer "+token, ""); status != http.StatusNotFound {
		t.Errorf("status %d, want 404", status)
	}
}
