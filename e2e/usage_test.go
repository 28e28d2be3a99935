package e2e

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/usage"
)

const usageAdminToken = "usage-admin-token-0123456789"

// pricedModels are two models on the stack's fake, with prices. They are
// appended to the stack's models list.
var pricedModels = map[string]config.Pricing{
	"demo/priced-a": {Input: 2, CachedInput: 0.5, Output: 8},
	"demo/priced-b": {Input: 0.15, Output: 0.6},
}

const pricedModelsYAML = `  - id: demo/priced-a
    context_window: 100000
    pricing: {input: 2, cached_input: 0.5, output: 8}
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
  - id: demo/priced-b
    context_window: 100000
    pricing: {input: 0.15, output: 0.6}
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
`

func newUsageStack(t *testing.T) *stack {
	return newStack(t, stackOptions{
		extraYAML: pricedModelsYAML,
		// A prompt repeated is partly cached, so cached tokens are priced.
		promptCache: fake.CacheOptions{Enabled: true, MinTokens: 4},
		gateway: func(o *gateway.Options) {
			o.AdminListen, o.AdminToken = "127.0.0.1:0", usageAdminToken
		},
	})
}

// usageRows reads GET /admin/v1/usage.
func (s *stack) usageRows(t *testing.T, query string) []usage.Row {
	t.Helper()
	b := []byte(s.adminGet(t, "/admin/v1/usage?"+query, usageAdminToken))
	var out struct {
		Data []usage.Row `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("usage answer %s: %v", b, err)
	}
	return out.Data
}

// waitRequests waits until the usage of keyID counts want requests: a
// request's usage is recorded when the gateway's processing of it ends,
// which its client does not observe.
func (s *stack) waitRequests(t *testing.T, keyID string, want int64) []usage.Row {
	t.Helper()
	var rows []usage.Row
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		rows = s.usageRows(t, "key="+keyID)
		var n int64
		for _, r := range rows {
			n += r.Requests
		}
		if n >= want {
			return rows
		}
	}
	t.Fatalf("usage of %s never reached %d requests: %+v", keyID, want, rows)
	return nil
}

type tokens struct{ input, cached, output, requests, errors, cost int64 }

// add counts one request of model; each request's cost is rounded to the
// micro-dollar on its own, as the gateway bills it.
func (tk *tokens) add(model string, u openai.CompletionUsage) {
	tk.input += u.PromptTokens
	tk.cached += u.PromptTokensDetails.CachedTokens
	tk.output += u.CompletionTokens
	tk.requests++
	tk.cost += pricedModels[model].CostMicros(u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens)
}

// TestUsageAndSpendPerKey: chat calls, streamed and not, on two priced
// models are reported per key, day and model by the admin endpoint (JSON
// and CSV) with the exact tokens the client was told and their cost; an
// error counts as the key's error; a stream the upstream cut before its
// usage event is counted too.
func TestUsageAndSpendPerKey(t *testing.T) {
	s := newUsageStack(t)
	ctx := context.Background()
	key, k, err := s.gw.Keys.Issue(ctx, keys.Spec{Name: "usage", Tier: "enterprise", RPM: 1000, TPM: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(option.WithAPIKey(key))
	want := map[string]*tokens{"demo/priced-a": {}, "demo/priced-b": {}}
	prompt := "the quick brown fox jumps over the lazy dog again and again"
	for _, model := range []string{"demo/priced-a", "demo/priced-b"} {
		for range 2 { // the second call's prompt is cached
			p := chatParamsFor(model, prompt)
			resp, err := c.Chat.Completions.New(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			want[model].add(model, resp.Usage)

			p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			stream := c.Chat.Completions.NewStreaming(ctx, p)
			var u openai.CompletionUsage
			for stream.Next() {
				if ch := stream.Current(); ch.Usage.TotalTokens != 0 {
					u = ch.Usage
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			stream.Close()
			want[model].add(model, u)
		}
	}
	if want["demo/priced-a"].cached == 0 {
		t.Fatal("no cached tokens: the test does not cover cached pricing")
	}
	// An upstream error answered to the key.
	_, err = c.Chat.Completions.New(ctx, chatParamsFor("demo/priced-b", "fail"), option.WithHeader(fake.HeaderStatus, "500"))
	if err == nil {
		t.Fatal("faulted call succeeded")
	}
	want["demo/priced-b"].requests++
	want["demo/priced-b"].errors++

	rows := s.waitRequests(t, k.ID, 9)
	day := time.Now().UTC().Format(usage.DayLayout)
	if len(rows) != 2 {
		t.Fatalf("rows %+v, want one per model", rows)
	}
	var total int64
	for _, r := range rows {
		w := want[r.Model]
		if w == nil {
			t.Fatalf("row for unexpected model: %+v", r)
		}
		cost := w.cost
		if r.Day != day || r.KeyID != k.ID || r.Requests != w.requests || r.InputTokens != w.input || r.CachedTokens != w.cached ||
			r.OutputTokens != w.output || r.Errors != w.errors || r.CostMicros != cost {
			t.Errorf("row %+v, want %s/%s %+v costing %d", r, day, k.ID, *w, cost)
		}
		total += r.CostMicros
	}
	if total == 0 {
		t.Fatal("no cost reported")
	}

	// The CSV form has the same numbers.
	recs, err := csv.NewReader(strings.NewReader(s.adminGet(t, "/admin/v1/usage?format=csv&since="+day+"&key="+k.ID, usageAdminToken))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0][0] != "day" || recs[1][9] != strconv.FormatInt(rows[0].CostMicros, 10) || recs[2][3] != rows[1].Model {
		t.Errorf("CSV %v does not match rows %+v", recs, rows)
	}
	// Other keys' usage is not in this key's report, and the stack's own
	// key has none.
	if other := s.usageRows(t, "key="+mustKeyID(t, s, s.key)); len(other) != 0 {
		t.Errorf("the unused key has rows: %+v", other)
	}

	// A stream the upstream cut before its usage event is counted (its
	// prompt estimate and the completion relayed, as rate limits charge it).
	p := chatParamsFor("demo/priced-a", longPrompt)
	stream := c.Chat.Completions.NewStreaming(ctx, p, option.WithHeader(fake.HeaderCutAfter, "2"))
	for stream.Next() {
	}
	if stream.Err() == nil {
		t.Fatal("cut stream ended without an error")
	}
	stream.Close()
	rows = s.waitRequests(t, k.ID, 10)
	for _, r := range rows {
		if r.Model == "demo/priced-a" {
			if got := r.InputTokens - want["demo/priced-a"].input; got < minPromptCharge {
				t.Errorf("cut stream counted %d input tokens, want at least %d", got, minPromptCharge)
			}
			if r.CostMicros <= want[r.Model].cost {
				t.Errorf("cut stream cost nothing: %+v", r)
			}
		}
	}
}

func mustKeyID(t *testing.T, s *stack, secret string) string {
	t.Helper()
	k, err := s.gw.Keys.Get(context.Background(), secret)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// TestMonthlyBudgetEnforced: a key with a tiny monthly budget is refused
// with OpenAI's 429 insufficient_quota once its spend reaches it, while
// another key of the same tier goes on being served.
func TestMonthlyBudgetEnforced(t *testing.T) {
	s := newUsageStack(t)
	ctx := context.Background()
	spec := keys.Spec{Name: "capped", Tier: "enterprise", RPM: 1000, TPM: 1_000_000,
		MonthlyBudget: 30} // 30 micro-dollars: one call of demo/priced-a
	capped, ck, err := s.gw.Keys.Issue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Name, spec.MonthlyBudget = "uncapped", 0
	free, _, err := s.gw.Keys.Issue(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(option.WithAPIKey(capped))
	p := chatParamsFor("demo/priced-a", "count these words for the budget test")
	resp, err := c.Chat.Completions.New(ctx, p)
	if err != nil {
		t.Fatalf("first call within the budget: %v", err)
	}
	cost := pricedModels["demo/priced-a"].CostMicros(resp.Usage.PromptTokens, resp.Usage.PromptTokensDetails.CachedTokens, resp.Usage.CompletionTokens)
	if cost < spec.MonthlyBudget {
		t.Fatalf("the call cost %d micro-dollars, less than the budget: the test proves nothing", cost)
	}
	rows := s.waitRequests(t, ck.ID, 1)
	if rows[0].CostMicros != cost {
		t.Fatalf("spend %d, want %d", rows[0].CostMicros, cost)
	}

	for _, stream := range []bool{false, true} {
		var err error
		if stream {
			st := c.Chat.Completions.NewStreaming(ctx, p)
			for st.Next() {
			}
			err = st.Err()
			st.Close()
		} else {
			_, err = c.Chat.Completions.New(ctx, p)
		}
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "insufficient_quota" ||
			apiErr.Type != "insufficient_quota" {
			t.Fatalf("stream=%v over budget: %v, want 429 insufficient_quota", stream, err)
		}
		if !strings.Contains(apiErr.Message, ck.ID) {
			t.Errorf("message %q does not name the key", apiErr.Message)
		}
	}
	// The refusals count as errors, and cost nothing.
	rows = s.waitRequests(t, ck.ID, 3)
	if rows[0].Errors != 2 || rows[0].CostMicros != cost {
		t.Errorf("after the refusals %+v, want 2 errors and the cost unchanged", rows[0])
	}
	// The SDK does not retry the refusal (x-should-retry: false): one more
	// error, not three.
	retrying := s.client(option.WithAPIKey(capped), option.WithMaxRetries(2))
	if _, err := retrying.Chat.Completions.New(ctx, p); err == nil {
		t.Fatal("over budget with retries: served")
	}
	rows = s.waitRequests(t, ck.ID, 4)
	if rows[0].Errors != 3 {
		t.Errorf("a retrying client made %d refused requests, want 1", rows[0].Errors-2)
	}
	// Another key is unaffected.
	other := s.client(option.WithAPIKey(free))
	if _, err := other.Chat.Completions.New(ctx, p); err != nil {
		t.Fatalf("a key without budget: %v", err)
	}
	// Raising the budget lets the key in again.
	if _, err := s.gw.Keys.SetBudget(ctx, ck.ID, cost+1000, 0); err != nil {
		t.Fatal(err)
	}
	s.gw.KeyCache.Invalidate()
	if _, err := c.Chat.Completions.New(ctx, p); err != nil {
		t.Fatalf("after raising the budget: %v", err)
	}
	if !strings.Contains(s.logs.String(), "passed its budget alert threshold") {
		t.Error("no budget alert logged")
	}
}

// TestUsageCountsGatewayTimeouts: a request the gateway itself ends with
// 504 (no first byte within the model's first_byte_timeout) is counted as
// the key's error, with no tokens.
func TestUsageCountsGatewayTimeouts(t *testing.T) {
	s := newStack(t, stackOptions{
		extraYAML: `  - id: demo/slow
    context_window: 1000
    first_byte_timeout: 200ms
    idle_timeout: 5s
    providers:
      - provider: fake-openai
        upstream_model: fake-chat-1
`,
		gateway: func(o *gateway.Options) { o.AdminListen, o.AdminToken = "127.0.0.1:0", usageAdminToken },
	})
	ctx := context.Background()
	key, k, err := s.gw.Keys.Issue(ctx, keys.Spec{Name: "timeouts", Tier: "enterprise", RPM: 100, TPM: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	c := s.client(option.WithAPIKey(key))
	_, err = c.Chat.Completions.New(ctx, chatParamsFor("demo/slow", "hi"),
		option.WithHeader(fake.HeaderDelayMS, "1500"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("err %v, want 504", err)
	}
	rows := s.waitRequests(t, k.ID, 1)
	if want := (usage.Row{Day: rows[0].Day, KeyID: k.ID, LimitID: k.ID, Model: "demo/slow", Requests: 1, Errors: 1}); len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows %+v, want [%+v]", rows, want)
	}
}
