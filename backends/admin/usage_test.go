package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/usage"
)

func TestUsageEndpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := keys.OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	us, err := usage.OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = us.Close() })
	if err := us.Add(ctx, []usage.Row{
		{Day: "2026-11-01", KeyID: "key_a", LimitID: "key_a", Model: "demo/chat", Requests: 3, InputTokens: 30, CachedTokens: 10, OutputTokens: 9, CostMicros: 120},
		{Day: "2026-11-02", KeyID: "key_b", LimitID: "key_b", Model: "demo/chat", Requests: 1, Errors: 1},
	}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Keys: store, Token: token, Config: func() *config.Config { return cfg }, Usage: us,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	status, m, raw := do(t, srv, "GET", "/admin/v1/usage?key=key_a&since=2026-11-01", "Bearer "+token, "")
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, raw)
	}
	data, _ := m["data"].([]any)
	if len(data) != 1 {
		t.Fatalf("rows %s, want key_a's one", raw)
	}
	row := data[0].(map[string]any)
	if row["key_id"] != "key_a" || row["requests"] != 3.0 || row["cached_tokens"] != 10.0 || row["cost_micros"] != 120.0 || !strings.Contains(raw, `"cost_usd": 0.000120`) {
		t.Errorf("row %s", raw)
	}

	req, _ := http.NewRequest("GET", srv.URL+"/admin/v1/usage?format=csv&until=2026-11-02", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/csv; charset=utf-8" || strings.Count(string(b), "\n") != 3 ||
		!strings.Contains(string(b), "2026-11-02,key_b,key_b,demo/chat,1,0,0,0,1,0,0.000000\n") {
		t.Errorf("CSV (%s):\n%s", resp.Header.Get("Content-Type"), b)
	}

	for _, q := range []string{"format=xml", "since=yesterday", "since=2026-11-02&until=2026-11-01", "key=sk-sy-secret"} {
		status, m, raw := do(t, srv, "GET", "/admin/v1/usage?"+q, "Bearer "+token, "")
		if status != http.StatusBadRequest || m["error"] == nil {
			t.Errorf("%s: status %d %s, want 400 in the error shape", q, status, raw)
		}
	}
	if status, _, _ := do(t, srv, "GET", "/admin/v1/usage", "", ""); status != http.StatusUnauthorized {
		t.Errorf("without the token: %d", status)
	}
}

func TestKeyBudget(t *testing.T) {
	srv, _, _ := newAPI(t)
	auth := "Bearer " + token
	status, m, raw := do(t, srv, "POST", "/admin/v1/keys", auth, `{"name":"capped","tier":"free","monthly_budget_usd":50,"budget_alert_ratio":0.5}`)
	if status != http.StatusCreated || !strings.Contains(raw, `"monthly_budget_usd":50.000000`) || m["budget_alert_ratio"] != 0.5 {
		t.Fatalf("create: %d %s", status, raw)
	}
	id := m["id"].(string)
	status, _, raw = do(t, srv, "POST", "/admin/v1/keys/"+id+"/set-tier", auth, `{"tier":"free","monthly_budget_usd":0.25}`)
	if status != http.StatusOK || !strings.Contains(raw, `"monthly_budget_usd":0.250000`) || !strings.Contains(raw, `"budget_alert_ratio":0.5`) {
		t.Fatalf("set-tier: %d %s", status, raw)
	}
	// A set-tier without budget fields keeps the budget.
	status, _, raw = do(t, srv, "POST", "/admin/v1/keys/"+id+"/set-tier", auth, `{"tier":"standard"}`)
	if status != http.StatusOK || !strings.Contains(raw, `"monthly_budget_usd":0.250000`) {
		t.Fatalf("set-tier without budget: %d %s", status, raw)
	}
	for _, body := range []string{`{"name":"x","tier":"free","monthly_budget_usd":-1}`, `{"name":"x","tier":"free","budget_alert_ratio":2}`} {
		if status, m, raw := do(t, srv, "POST", "/admin/v1/keys", auth, body); status != http.StatusBadRequest || m["error"] == nil {
			t.Errorf("%s: %d %s, want 400", body, status, raw)
		}
	}
}
