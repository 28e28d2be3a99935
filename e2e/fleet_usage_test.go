package e2e

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// fleetUsageFlush is the replicas' usage flush interval in these tests:
// short, so a replica sees the other's spend quickly.
const fleetUsageFlush = 50 * time.Millisecond

// fleetUsagePair is fleetPair with the priced models, the admin API and a
// short usage flush interval.
func fleetUsagePair(t *testing.T) (a, b *stack) {
	t.Helper()
	o := stackOptions{
		extraYAML: pricedModelsYAML + fleetStorageYAML(t),
		gateway: func(o *gateway.Options) {
			o.AdminListen, o.AdminToken = "127.0.0.1:0", usageAdminToken
			o.UsageFlushInterval = fleetUsageFlush
		},
	}
	return newStack(t, o), newStack(t, o)
}

// TestFleetUsageAcrossReplicas: with PostgreSQL storage, usage is kept
// once for the fleet: a key's requests through two replicas add up in
// GET /admin/v1/usage read from either.
func TestFleetUsageAcrossReplicas(t *testing.T) {
	a, b := fleetUsagePair(t)
	ctx := context.Background()
	key, k, err := a.gw.Keys.Issue(ctx, keys.Spec{Name: "fleet-usage", Tier: "enterprise", RPM: 1000, TPM: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	var want tokens
	for _, s := range []*stack{a, b, b} {
		p := chatParamsFor("demo/priced-b", "usage through two replicas")
		c := s.client(option.WithAPIKey(key))
		resp, err := c.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want.add("demo/priced-b", resp.Usage)
	}
	for name, s := range map[string]*stack{"a": a, "b": b} {
		rows := s.waitRequests(t, k.ID, 3) // each replica's own requests are flushed by its read
		if len(rows) != 1 {
			t.Fatalf("%s: rows %+v, want one", name, rows)
		}
		got := rows[0]
		if got.Requests != 3 || got.InputTokens != want.input || got.OutputTokens != want.output || got.CostMicros != want.cost {
			t.Errorf("%s reads %+v, want the 3 requests of both replicas (input %d, output %d, cost %d)",
				name, got, want.input, want.output, want.cost)
		}
	}
}

// TestFleetBudgetAcrossReplicas: a monthly budget spent through one
// replica is refused (429 insufficient_quota) by the other, which has
// served the key nothing, once it has read the spend back: within two
// flush intervals of the spending request.
func TestFleetBudgetAcrossReplicas(t *testing.T) {
	a, b := fleetUsagePair(t)
	ctx := context.Background()
	capped, ck, err := a.gw.Keys.Issue(ctx, keys.Spec{Name: "capped", Tier: "enterprise", RPM: 1000, TPM: 1_000_000,
		MonthlyBudget: 30}) // 30 micro-dollars: one call of demo/priced-a
	if err != nil {
		t.Fatal(err)
	}
	p := chatParamsFor("demo/priced-a", "count these words for the fleet budget test")
	ca, cb := a.client(option.WithAPIKey(capped)), b.client(option.WithAPIKey(capped))
	resp, err := ca.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatalf("first call through a, within the budget: %v", err)
	}
	cost := pricedModels["demo/priced-a"].CostMicros(resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens, resp.Usage.CompletionTokens)
	if cost < 30 {
		t.Fatalf("the call cost %d micro-dollars, less than the budget: the test proves nothing", cost)
	}
	// The call's usage is recorded once a's processing of it ends, which
	// the client does not observe: wait for it in a's own count.
	for deadline := time.Now().Add(5 * time.Second); a.gw.Usage.MonthSpend(ck.LimitID(), time.Now()) < cost; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a never counted the call's cost")
		}
	}
	spent := time.Now()
	for b.gw.Usage.MonthSpend(ck.LimitID(), time.Now()) < cost {
		if time.Since(spent) > 2*time.Second {
			t.Fatalf("b does not see the spend through a after %v (flush interval %v)", time.Since(spent), fleetUsageFlush)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("b saw a's spend %v after a counted it", time.Since(spent).Round(time.Millisecond))
	_, err = cb.Chat.Completions.New(ctx, p)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "insufficient_quota" {
		t.Fatalf("b, for a key whose budget a spent: %v, want 429 insufficient_quota", err)
	}
}
