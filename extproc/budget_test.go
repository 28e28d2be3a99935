package extproc

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

type fixedSpend map[string]int64

func (f fixedSpend) MonthSpend(limitID string, _ time.Time) int64 { return f[limitID] }

func TestCheckBudget(t *testing.T) {
	price := config.Pricing{Input: 2, CachedInput: 1, Output: 8} // 2 micro-dollars a prompt token, 1 cached
	tests := []struct {
		name    string
		budget  int64
		spent   int64
		pricing config.Pricing
		prompt  int64
		refused bool
	}{
		{name: "no budget", budget: 0, spent: 1 << 40, pricing: price, prompt: 10},
		{name: "nothing spent", budget: 100, pricing: price, prompt: 10},
		// The least a 10-token prompt costs is all of it cached: 10.
		{name: "least cost fits exactly", budget: 100, spent: 90, pricing: price, prompt: 10},
		{name: "least cost does not fit", budget: 100, spent: 91, pricing: price, prompt: 10, refused: true},
		{name: "spent", budget: 100, spent: 100, pricing: config.Pricing{}, prompt: 10, refused: true},
		{name: "overshot", budget: 100, spent: 250, pricing: price, prompt: 1, refused: true},
		{name: "free model under budget", budget: 100, spent: 99, pricing: config.Pricing{}, prompt: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, _ := newTestServer(t, false)
			s.budgets = fixedSpend{"key_chain": tt.spent}
			st := newStream(s)
			st.key = keys.Key{ID: "key_new", Lineage: "key_chain", Tier: "standard", MonthlyBudget: tt.budget}
			st.pricing = tt.pricing
			resp := st.checkBudget(tt.prompt)
			if (resp != nil) != tt.refused {
				t.Fatalf("refused = %v, want %v", resp != nil, tt.refused)
			}
			if resp == nil {
				return
			}
			ir := resp.GetImmediateResponse()
			var body struct {
				Error struct{ Message, Type, Code string }
			}
			if err := json.Unmarshal(ir.GetBody(), &body); err != nil {
				t.Fatal(err)
			}
			if ir.GetStatus().GetCode() != 429 || body.Error.Type != "insufficient_quota" || body.Error.Code != "insufficient_quota" ||
				!strings.Contains(body.Error.Message, "key_new") {
				t.Errorf("reply %d %+v", ir.GetStatus().GetCode(), body.Error)
			}
			retry := ""
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				if h.GetHeader().GetKey() == "x-should-retry" {
					retry = string(h.GetHeader().GetRawValue()) + h.GetHeader().GetValue()
				}
			}
			if retry != "false" {
				t.Errorf("x-should-retry = %q, want false", retry)
			}
		})
	}
}

func TestBudgetAlertOncePerMonth(t *testing.T) {
	s, _, logs := newTestServer(t, false)
	spend := fixedSpend{"key_a": 79}
	s.budgets = spend
	st := newStream(s)
	st.key = keys.Key{ID: "key_a", Tier: "standard", MonthlyBudget: 100} // alert at the default 0.8
	alerts := func() int { return strings.Count(logs.String(), "passed its budget alert threshold") }
	if st.checkBudget(1); alerts() != 0 {
		t.Fatal("alert below the threshold")
	}
	spend["key_a"] = 80
	for range 3 {
		st.checkBudget(1)
	}
	if alerts() != 1 {
		t.Fatalf("%d alerts, want 1", alerts())
	}
	// Next month's crossing alerts again.
	now := time.Now()
	st.budgetAlert("key_a", 80, 100, now.AddDate(0, 1, 0))
	if alerts() != 2 {
		t.Fatalf("%d alerts after a new month, want 2", alerts())
	}
	var b strings.Builder
	if err := s.limits.metrics.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `switchyard_budget_alerts_total{tier="standard"} 2`) {
		t.Errorf("metrics:\n%s", b.String())
	}
}
