package config

import (
	"strings"
	"testing"
)

func TestDefaultIsValid(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatalf("embedded default does not validate: %v", err)
	}
	if len(c.Models) == 0 || c.Models[0].ID != "demo/chat" {
		t.Fatalf("default models = %+v, want demo/chat first", c.Models)
	}
	if got := c.Tiers["free"]; got.RPM != 10 || got.TPM != 40000 {
		t.Errorf("free tier = %+v, want 10 RPM / 40000 TPM", got)
	}
	if c.Limits.MaxRequestBodyBytes != 32<<20 {
		t.Errorf("max body = %d", c.Limits.MaxRequestBodyBytes)
	}
	if l := c.Limits; l.RequestBodyTimeout != DefaultRequestBodyTimeout || l.MaxConcurrentRequestsPerKey != 64 || l.MaxRequestBytesInFlight != 256<<20 {
		t.Errorf("admission limits = %+v", l)
	}
}

const good = `listeners:
  - name: public
    address: 127.0.0.1:8080
providers:
  - name: p1
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - id: acme/m1
    providers:
      - provider: p1
        upstream_model: m1
`

func TestParseErrorsNameFieldAndLine(t *testing.T) {
	tests := []struct {
		name    string
		replace [2]string
		want    []string
	}{
		{"unknown provider", [2]string{"provider: p1", "provider: nope"}, []string{"test.yaml:11:", "models[0].providers[0].provider", `unknown provider "nope"`}},
		{"bad kind", [2]string{"kind: openai", "kind: carrier-pigeon"}, []string{"test.yaml:6:", "providers[0].kind"}},
		{"bad url", [2]string{"http://127.0.0.1:9/v1", "ftp://x"}, []string{"test.yaml:7:", "providers[0].base_url"}},
		{"bad model id", [2]string{"id: acme/m1", "id: m1"}, []string{"test.yaml:9:", "models[0].id", "<vendor>/<model>"}},
		{"unknown field", [2]string{"kind: openai", "kind: openai\n    colour: red"}, []string{"test.yaml:7:", "providers[0].colour", `unknown field "colour"`}},
		{"missing upstream", [2]string{"upstream_model: m1", "upstream_model: \"\""}, []string{"test.yaml:12:", "upstream_model", "required"}},
		{"bad address", [2]string{"127.0.0.1:8080", "nowhere"}, []string{"test.yaml:3:", "listeners[0].address"}},
		{"listener host name", [2]string{"127.0.0.1:8080", "gateway.example.com:8080"}, []string{"test.yaml:3:", "listeners[0].address", "IP address"}},
		{"bad routing", [2]string{"- id: acme/m1", "- id: acme/m1\n    routing: random"}, []string{"test.yaml:10:", "models[0].routing"}},
		{"bad tokenizer", [2]string{"- id: acme/m1", "- id: acme/m1\n    tokenizer: gpt2"}, []string{"test.yaml:10:", "models[0].tokenizer"}},
		{"negative weight", [2]string{"upstream_model: m1", "upstream_model: m1\n        weight: -1"}, []string{"test.yaml:13:", "weight"}},
		{"bad region", [2]string{"kind: openai", "kind: openai\n    region: mars"}, []string{"test.yaml:7:", "providers[0].region"}},
		{"wrong type", [2]string{"- id: acme/m1", "- id: acme/m1\n    context_window: lots"}, []string{"test.yaml:10:", "models[0].context_window", `"lots" is not a whole number`}},
		{"duration in words", [2]string{"- id: acme/m1", "- id: acme/m1\n    first_byte_timeout: 30 seconds"}, []string{"test.yaml:10:", "models[0].first_byte_timeout", "durations look like 30s"}},
		{"idle not above first byte", [2]string{"- id: acme/m1", "- id: acme/m1\n    first_byte_timeout: 90s"}, []string{"test.yaml:9:", "models[0].idle_timeout", "longer than first_byte_timeout (1m30s)"}},
		{"negative idle", [2]string{"- id: acme/m1", "- id: acme/m1\n    idle_timeout: -1s"}, []string{"models[0].idle_timeout", "positive"}},
		{"negative default", [2]string{"models:", "limits: {model_idle_timeout: -1s}\nmodels:"}, []string{"limits", "positive"}},
		{"admin address", [2]string{"127.0.0.1:8080", "127.0.0.1:8080\n    admin_address: nowhere"}, []string{"test.yaml:4:", "listeners[0].admin_address"}},
		{"admin address is the listener's", [2]string{"127.0.0.1:8080", "127.0.0.1:8080\n    admin_address: 127.0.0.1:8080"}, []string{"listeners[0].admin_address", "duplicate"}},
		{"forwarded credential", [2]string{"kind: openai", "kind: openai\n    forward_headers: [openai-beta, cookie]"}, []string{"providers[0].forward_headers[1]", "never forwarded"}},
		{"forwarded internal header", [2]string{"kind: openai", "kind: openai\n    forward_headers: [x-switchyard-model]"}, []string{"providers[0].forward_headers[0]", "never forwarded"}},
		{"forwarded header name", [2]string{"kind: openai", "kind: openai\n    forward_headers: [\"X Beta\"]"}, []string{"providers[0].forward_headers[0]", "header name"}},
		{"bad batch allowance", [2]string{"models:", "tiers: {gold: {rpm: 5, tpm: 5, batch_lines_per_day: -2}}\nmodels:"}, []string{"tiers", "gold", "batch_lines_per_day"}},
		{"unknown limiter failure mode", [2]string{"models:", "tiers: {gold: {rpm: 5, tpm: 5, on_limiter_error: open}}\nmodels:"}, []string{"tiers", "gold", "on_limiter_error", `"local"`}},
		{"negative local replicas", [2]string{"models:", "tiers: {gold: {rpm: 5, tpm: 5, on_limiter_error: local, local_replicas: -1}}\nmodels:"}, []string{"tiers", "gold", "local_replicas"}},
		{"negative price", [2]string{"- id: acme/m1", "- id: acme/m1\n    pricing: {input: 1, output: -2}"}, []string{"test.yaml:10:", "models[0].pricing.output", "between 0 and"}},
		{"price in words", [2]string{"- id: acme/m1", "- id: acme/m1\n    pricing: {input: cheap}"}, []string{"test.yaml:10:", "models[0].pricing.input", "is not a number"}},
		{"bad outlier detection", [2]string{"models:", "outlier_detection: {consecutive_failures: -1}\nmodels:"}, []string{"outlier_detection", "consecutive_failures"}},
		{"bytes in flight below one body", [2]string{"models:", "limits: {max_request_body_bytes: 2048, max_request_bytes_in_flight: 1024}\nmodels:"}, []string{"limits.max_request_bytes_in_flight", "at least max_request_body_bytes"}},
		{"per-key cap below 1", [2]string{"models:", "limits: {max_concurrent_requests_per_key: -3}\nmodels:"}, []string{"limits.max_concurrent_requests_per_key"}},
		{"tiny body timeout", [2]string{"models:", "limits: {request_body_timeout: 10ms}\nmodels:"}, []string{"limits.request_body_timeout", "1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(good, tt.replace[0], tt.replace[1], 1)
			_, err := Parse("test.yaml", []byte(src))
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Parse("test.yaml", []byte(good)); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
}

// A type error must not hide the others: every problem of the file is
// reported at once, in file order, with no Go type names.
func TestParseReportsEveryProblemAtOnce(t *testing.T) {
	src := strings.Replace(good, "kind: openai", "kind: carrier-pigeon\n    colour: red", 1)
	src = strings.Replace(src, "- id: acme/m1", "- id: acme/m1\n    context_window: lots\n    first_byte_timeout: 30 seconds", 1)
	_, err := Parse("test.yaml", []byte(src))
	if err == nil {
		t.Fatal("Parse succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{"providers[0].kind", "providers[0].colour", "models[0].context_window", "models[0].first_byte_timeout"}
	if len(lines) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("problem %d = %q, want it about %s", i, lines[i], w)
		}
		for _, goName := range []string{"int64", "time.Duration", "config.", "!!str"} {
			if strings.Contains(lines[i], goName) {
				t.Errorf("problem %q shows the Go name %q", lines[i], goName)
			}
		}
	}
}

func TestMissingCredentials(t *testing.T) {
	c, err := Parse("test.yaml", []byte(strings.Replace(good, "kind: openai", "kind: openai\n    api_key_env: ACME_KEY", 1)))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	if got := c.MissingCredentials(getenv); len(got) != 1 || !strings.Contains(got[0], "ACME_KEY") || !strings.Contains(got[0], `"p1"`) {
		t.Errorf("MissingCredentials = %q, want one line naming p1 and ACME_KEY", got)
	}
	env["ACME_KEY"] = "k"
	if got := c.MissingCredentials(getenv); len(got) != 0 {
		t.Errorf("MissingCredentials with the variable set = %q", got)
	}
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.MissingCredentials(func(string) string { return "" }); len(got) != 0 {
		t.Errorf("the demo upstreams' generated credentials reported missing: %q", got)
	}
}

func TestOutlierDetectionDefaults(t *testing.T) {
	c, err := Parse("test.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if od := c.OutlierDetection; od.ConsecutiveFailures != DefaultConsecutiveFailures || od.Interval != DefaultOutlierInterval ||
		od.BaseEjectionTime != DefaultBaseEjectionTime {
		t.Errorf("defaults = %+v", od)
	}
	c, err = Parse("test.yaml", []byte(strings.Replace(good, "models:", "outlier_detection: {consecutive_failures: 2, base_ejection_time: 500ms}\nmodels:", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if od := c.OutlierDetection; od.ConsecutiveFailures != 2 || od.BaseEjectionTime.String() != "500ms" || od.Interval != DefaultOutlierInterval {
		t.Errorf("parsed = %+v", od)
	}
}

func TestEmptyConfigRejected(t *testing.T) {
	if _, err := Parse("e.yaml", []byte("# nothing\n")); err == nil {
		t.Fatal("empty config accepted")
	}
}

func TestStreamTimeouts(t *testing.T) {
	tests := []struct {
		name                string
		replace             [2]string
		firstByte, idle     string
		limitsFB, limitsIdl string
	}{
		{name: "defaults", firstByte: "30s", idle: "1m0s", limitsFB: "30s", limitsIdl: "1m0s"},
		{name: "global defaults apply to models",
			replace:   [2]string{"models:", "limits: {first_byte_timeout: 5s, model_idle_timeout: 20s}\nmodels:"},
			firstByte: "5s", idle: "20s", limitsFB: "5s", limitsIdl: "20s"},
		{name: "a model's own win",
			replace:   [2]string{"- id: acme/m1", "- id: acme/m1\n    first_byte_timeout: 2m\n    idle_timeout: 3m"},
			firstByte: "2m0s", idle: "3m0s", limitsFB: "30s", limitsIdl: "1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(strings.Replace(good, tt.replace[0], tt.replace[1], 1)))
			if err != nil {
				t.Fatal(err)
			}
			m := c.Models[0]
			if m.FirstByteTimeout.String() != tt.firstByte || m.IdleTimeout.String() != tt.idle ||
				c.Limits.FirstByteTimeout.String() != tt.limitsFB || c.Limits.ModelIdleTimeout.String() != tt.limitsIdl {
				t.Errorf("model %v/%v, limits %v/%v", m.FirstByteTimeout, m.IdleTimeout, c.Limits.FirstByteTimeout, c.Limits.ModelIdleTimeout)
			}
		})
	}
}

func TestBatchLineAllowanceDefaults(t *testing.T) {
	src := strings.Replace(good, "models:", `tiers:
  gold: {rpm: 100, tpm: 1000}
  perkey: {}
  capped: {batch_lines_per_day: 7}
  open: {rpm: 100, tpm: 1000, batch_lines_per_day: -1}
models:`, 1)
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for tier, want := range map[string]int64{"free": DefaultFreeBatchLines, "standard": DefaultStandardBatchLines,
		"enterprise": -1, "gold": 100 * 1440, "perkey": -1, "capped": 7, "open": -1} {
		got := c.Tiers[tier].BatchLinesPerDay
		if got != want {
			t.Errorf("%s: batch_lines_per_day = %d, want %d", tier, got, want)
		}
		if n, limited := c.Tiers[tier].BatchLineAllowance(); limited != (want >= 0) || (limited && n != want) {
			t.Errorf("%s: BatchLineAllowance = %d, %v", tier, n, limited)
		}
	}
}

// TestOnLimiterErrorDefaults: free fails closed, every other tier falls
// back to local limits; an explicit choice is kept.
func TestOnLimiterErrorDefaults(t *testing.T) {
	src := strings.Replace(good, "models:", `tiers:
  gold: {rpm: 100, tpm: 1000}
  open: {rpm: 100, tpm: 1000, on_limiter_error: allow}
  split: {rpm: 100, tpm: 1000, on_limiter_error: local, local_replicas: 3}
models:`, 1)
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for tier, want := range map[string]string{"free": LimiterDeny, "standard": LimiterLocal, "enterprise": LimiterLocal,
		"gold": LimiterLocal, "open": LimiterAllow, "split": LimiterLocal} {
		if got := c.Tiers[tier].OnLimiterError; got != want {
			t.Errorf("%s: on_limiter_error = %q, want %q", tier, got, want)
		}
	}
	if n := c.Tiers["split"].LocalReplicas; n != 3 {
		t.Errorf("split: local_replicas = %d, want 3", n)
	}
}

func TestPricingCost(t *testing.T) {
	p := Pricing{Input: 2.5, CachedInput: 1.25, Output: 10}
	tests := []struct {
		input, cached, output, want int64
	}{
		{0, 0, 0, 0},
		{1_000_000, 0, 0, 2_500_000},                  // $2.50
		{1_000_000, 1_000_000, 1_000_000, 11_250_000}, // all cached: $1.25 + $10
		{10, 4, 3, 50},                                // 6*2.5 + 4*1.25 + 3*10 micro-dollars
		{1, 0, 0, 3},                                  // 2.5 micro-dollars rounds to 3
		{5, 9, 0, 6},                                  // cached beyond input is capped at input
	}
	for _, tt := range tests {
		if got := p.CostMicros(tt.input, tt.cached, tt.output); got != tt.want {
			t.Errorf("CostMicros(%d, %d, %d) = %d, want %d", tt.input, tt.cached, tt.output, got, tt.want)
		}
	}
	// Without a cached price, cached tokens cost the input price.
	if got := (Pricing{Input: 3}).CostMicros(10, 10, 0); got != 30 {
		t.Errorf("no cached price: %d, want 30", got)
	}
	// Decimal prices are exact to the micro-dollar per million tokens.
	if got := (Pricing{Input: 0.1, Output: 0.2}).CostMicros(10_000_000, 0, 10_000_000); got != 3_000_000 {
		t.Errorf("0.1+0.2: %d, want 3000000", got)
	}
}
