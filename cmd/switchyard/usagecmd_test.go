package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	usagedb "github.com/switchyard-ai/switchyard/internal/usage"
)

// TestUsageCLI: what a gateway counted is what `switchyard usage` prints
// once the gateway has stopped (its last flush), by key secret or id, as
// JSON or CSV; the key was given its budget by `keys create`.
func TestUsageCLI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	up := httptest.NewServer(fake.NewOpenAI(fake.Options{}))
	t.Cleanup(up.Close)
	cfg, err := config.Parse("usage.yaml", []byte(fmt.Sprintf(`listeners:
  - {name: public, address: 127.0.0.1:18080}
providers:
  - {name: p, kind: openai, base_url: %q}
tiers:
  standard: {rpm: 100, tpm: 100000}
models:
  - id: acme/priced
    pricing: {input: 3, cached_input: 1, output: 15}
    providers: [{provider: p, upstream_model: m}]
`, up.URL+"/v1")))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--name", "spender", "--tier", "standard", "--monthly-budget", "12.5", "--budget-alert", "0.9")
	if err != nil {
		t.Fatal(err)
	}
	secret := lastLine(out)
	if !strings.Contains(out, "budget $12.500000/month (alert at 0.9)") {
		t.Errorf("create output does not show the budget:\n%s", out)
	}

	gw, err := gateway.Start(ctx, gateway.Options{Config: cfg, DataDir: dir, ListenOverride: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), UsageFlushInterval: time.Hour}) // only the last flush writes
	if err != nil {
		t.Fatal(err)
	}
	c := openai.NewClient(option.WithBaseURL(gw.BaseURL()), option.WithAPIKey(secret), option.WithMaxRetries(0))
	var in, outTok, cost int64
	for _, text := range []string{"one two three", "four five six seven"} {
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "acme/priced",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}})
		if err != nil {
			gw.Close()
			t.Fatal(err)
		}
		in += resp.Usage.PromptTokens
		outTok += resp.Usage.CompletionTokens
		cost += cfg.Models[0].Pricing.CostMicros(resp.Usage.PromptTokens, 0, resp.Usage.CompletionTokens)
	}
	gw.Close()

	day := time.Now().UTC().Format(usagedb.DayLayout)
	out, _, err = runCLI(t, "usage", "--data-dir", dir, "--key", secret, "--since", day, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{day, "", "", "acme/priced", "2", fmt.Sprint(in), "0", fmt.Sprint(outTok), "0", fmt.Sprint(cost), usagedb.USD(cost)}
	if len(recs) != 2 || recs[1][0] != want[0] || recs[1][3] != want[3] || strings.Join(recs[1][4:], ",") != strings.Join(want[4:], ",") {
		t.Fatalf("CSV:\n%s\nwant a row like %v", out, want)
	}
	keyID := recs[1][1]

	out, _, err = runCLI(t, "usage", "--data-dir", dir, "--key", keyID)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Data []usagedb.Row `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.Data) != 1 || js.Data[0].CostMicros != cost || js.Data[0].KeyID != keyID {
		t.Fatalf("JSON by id: %v\n%s", err, out)
	}
	// A day with nothing, an unknown key, bad flags.
	if out, _, err := runCLI(t, "usage", "--data-dir", dir, "--since", "2000-01-01", "--until", "2000-01-31", "--format", "csv"); err != nil ||
		strings.Count(out, "\n") != 1 {
		t.Errorf("empty range: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--key", "key_0000000000000000"}, {"--since", "yesterday"}, {"--format", "xml"}} {
		if _, _, err := runCLI(t, append([]string{"usage", "--data-dir", dir}, args...)...); err == nil {
			t.Errorf("usage %v succeeded", args)
		}
	}
}

// TestUsageCLIPostgres: with --config naming PostgreSQL storage, `switchyard
// usage` reads the fleet's usage (what every replica wrote) and finds the
// key given by its secret in the fleet's key store.
func TestUsageCLIPostgres(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) + `
storage:
  metadata: {kind: postgres, dsn_env: SY_TEST_PG_DSN}
`
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "keys", "create", "--config", cfgPath, "--name", "fleet", "--tier", "standard")
	if err != nil {
		t.Fatal(err)
	}
	secret := lastLine(out)
	ks, err := keys.OpenPostgres(ctx, dsn, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := ks.Get(ctx, secret)
	ks.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Two replicas' flushes of the same day, key and model.
	store, err := usagedb.OpenPostgres(ctx, dsn, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	row := usagedb.Row{Day: "2026-11-03", KeyID: k.ID, LimitID: k.ID, Model: "demo/chat", Requests: 2, InputTokens: 10, OutputTokens: 5, CostMicros: 7}
	for range 2 {
		if err := store.Add(ctx, []usagedb.Row{row}); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = runCLI(t, "usage", "--config", cfgPath, "--key", secret, "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("2026-11-03,%s,%s,demo/chat,4,20,0,10,0,14,", k.ID, k.ID)
	if !strings.Contains(out, want) {
		t.Fatalf("usage --config printed\n%s\nwant a line starting %s", out, want)
	}
}
