package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

const token = "admin-token-for-tests-0123"

func newAPI(t *testing.T) (*httptest.Server, *keys.SQLiteStore, *int) {
	t.Helper()
	store, err := keys.OpenSQLite(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	changes := new(int)
	h, err := New(Options{
		Keys:    store,
		Token:   token,
		Config:  func() *config.Config { return cfg },
		Metrics: func(w io.Writer) error { _, err := io.WriteString(w, "metric_total 1\n"); return err },
		Changed: func() { *changes++ },
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, store, changes
}

func do(t *testing.T, srv *httptest.Server, method, path, auth, body string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m, string(b)
}

func TestUnauthenticated(t *testing.T) {
	srv, _, _ := newAPI(t)
	for _, tt := range []struct{ method, path, auth string }{
		{"GET", "/admin/v1/keys", ""},
		{"GET", "/admin/v1/keys", "Bearer wrong"},
		{"GET", "/admin/v1/keys", "Basic " + token},
		{"GET", "/admin/v1/keys", token},
		{"POST", "/admin/v1/keys", ""},
		{"POST", "/admin/v1/keys/key_0123456789abcdef/revoke", ""},
		{"GET", "/metrics", ""},
		{"GET", "/nowhere", ""},
	} {
		status, m, raw := do(t, srv, tt.method, tt.path, tt.auth, `{}`)
		if status != http.StatusUnauthorized {
			t.Errorf("%s %s (%q): status %d, want 401", tt.method, tt.path, tt.auth, status)
			continue
		}
		e, _ := m["error"].(map[string]any)
		for _, k := range []string{"message", "type", "param", "code"} {
			if _, ok := e[k]; !ok {
				t.Errorf("401 body lacks %q: %s", k, raw)
			}
		}
		if e["code"] != "invalid_admin_token" {
			t.Errorf("code = %v", e["code"])
		}
	}
}

func TestNewRefusesWeakToken(t *testing.T) {
	cfg := func() *config.Config { return &config.Config{} }
	if _, err := New(Options{Token: "short", Keys: &keys.SQLiteStore{}, Config: cfg}); err == nil {
		t.Error("accepted a short token")
	}
}

func TestKeyLifecycle(t *testing.T) {
	srv, store, changes := newAPI(t)
	auth := "Bearer " + token

	status, m, raw := do(t, srv, "POST", "/admin/v1/keys", auth, `{"name":"acme","tier":"enterprise","rpm":100,"tpm":5000,"models":["demo/chat"]}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, raw)
	}
	secret, id := m["secret"].(string), m["id"].(string)
	if !strings.HasPrefix(secret, "sk-sy-") || m["rpm"] != 100.0 || m["tpm"] != 5000.0 || m["status"] != "active" {
		t.Fatalf("create answer = %s", raw)
	}
	if k, err := store.Lookup(context.Background(), secret); err != nil || k.ID != id {
		t.Fatalf("created key not in the store: %v", err)
	}

	// A name with control characters (a terminal escape, a forged log
	// line) is refused.
	for _, name := range []string{`"x\u001b[2J"`, `"a\nb"`, `"a\u0000b"`} {
		status, m, raw := do(t, srv, "POST", "/admin/v1/keys", auth, `{"name":`+name+`,"tier":"free"}`)
		if status != http.StatusBadRequest || !strings.Contains(raw, "control characters") {
			t.Errorf("create named %s: %d %v", name, status, m)
		}
	}

	// Listings and show never carry the secret.
	for _, path := range []string{"/admin/v1/keys", "/admin/v1/keys/" + id} {
		status, _, raw := do(t, srv, "GET", path, auth, "")
		if status != 200 || strings.Contains(raw, secret) || strings.Contains(raw, `"secret"`) || !strings.Contains(raw, id) {
			t.Errorf("GET %s: %d %s", path, status, raw)
		}
	}
	// Keys are named by ID in URLs, never by secret.
	if status, _, _ := do(t, srv, "GET", "/admin/v1/keys/"+secret, auth, ""); status != http.StatusBadRequest {
		t.Errorf("show by secret: %d, want 400", status)
	}
	if status, m, _ := do(t, srv, "GET", "/admin/v1/keys/key_0000000000000000", auth, ""); status != 404 || m["error"].(map[string]any)["code"] != "key_not_found" {
		t.Errorf("unknown key: %d %v", status, m)
	}

	// set-tier: validated against the configuration.
	for _, body := range []string{
		`{"tier":"platinum"}`,
		`{"tier":"enterprise"}`, // no limits of its own
		`{"tier":"free","models":["nope/model"]}`,
		`{"tier":"free","rpm":-1}`,
		`{"tier":"free","bogus":1}`,
	} {
		if status, _, raw := do(t, srv, "POST", "/admin/v1/keys/"+id+"/set-tier", auth, body); status != http.StatusBadRequest {
			t.Errorf("set-tier %s: %d %s", body, status, raw)
		}
	}
	status, m, raw = do(t, srv, "POST", "/admin/v1/keys/"+id+"/set-tier", auth, `{"tier":"free","models":[]}`)
	if status != 200 || m["tier"] != "free" || m["rpm"] != nil || m["models"] != nil {
		t.Errorf("set-tier free: %d %s", status, raw)
	}

	// rotate: a new secret; the old key works until its grace ends.
	status, m, raw = do(t, srv, "POST", "/admin/v1/keys/"+id+"/rotate", auth, `{"grace":"1h"}`)
	if status != 200 {
		t.Fatalf("rotate: %d %s", status, raw)
	}
	newSecret := m["secret"].(string)
	replaces := m["replaces"].(map[string]any)
	if newSecret == secret || replaces["id"] != id || replaces["status"] != "rotated" || replaces["expires_at"] == nil || m["limit_id"] != id {
		t.Errorf("rotate answer = %s", raw)
	}
	for _, s := range []string{secret, newSecret} {
		if _, err := store.Lookup(context.Background(), s); err != nil {
			t.Errorf("key not working after rotate: %v", err)
		}
	}
	if status, _, _ := do(t, srv, "POST", "/admin/v1/keys/"+id+"/rotate", auth, ""); status != http.StatusBadRequest {
		t.Errorf("second rotate of the same key: %d, want 400", status)
	}
	if status, _, _ := do(t, srv, "POST", "/admin/v1/keys/"+id+"/rotate", auth, `{"grace":"soon"}`); status != http.StatusBadRequest {
		t.Errorf("bad grace: %d, want 400", status)
	}

	// revoke
	status, m, raw = do(t, srv, "POST", "/admin/v1/keys/"+id+"/revoke", auth, "")
	if status != 200 || m["status"] != "revoked" || m["revoked_at"] == nil {
		t.Errorf("revoke: %d %s", status, raw)
	}
	if _, err := store.Lookup(context.Background(), secret); err == nil {
		t.Error("revoked key still works")
	}
	if *changes != 4 {
		t.Errorf("Changed called %d times, want 4 (create, set-tier, rotate, revoke)", *changes)
	}

	status, _, raw = do(t, srv, "GET", "/metrics", auth, "")
	if status != 200 || raw != "metric_total 1\n" {
		t.Errorf("metrics: %d %q", status, raw)
	}
}

func TestCheckSpec(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		sp   keys.Spec
		want string // "" for valid
	}{
		{keys.Spec{Tier: "free"}, ""},
		{keys.Spec{Tier: "free", RPM: 5}, ""},
		{keys.Spec{Tier: "enterprise", RPM: 5, TPM: 6}, ""},
		{keys.Spec{Tier: "enterprise", RPM: 5}, "no limits of its own"},
		{keys.Spec{Tier: "gold"}, "unknown tier"},
		{keys.Spec{Tier: "free", Models: []string{"demo/chat"}}, ""},
		{keys.Spec{Tier: "free", Models: []string{"x/y"}}, "not served"},
	} {
		err := CheckSpec(cfg, tt.sp)
		if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
			t.Errorf("CheckSpec(%+v) = %v, want %q", tt.sp, err, tt.want)
		}
	}
}
