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
		{"unknown field", [2]string{"kind: openai", "kind: openai\n    colour: red"}, []string{"line 7", "colour"}},
		{"missing upstream", [2]string{"upstream_model: m1", "upstream_model: \"\""}, []string{"test.yaml:12:", "upstream_model", "required"}},
		{"bad address", [2]string{"127.0.0.1:8080", "nowhere"}, []string{"test.yaml:3:", "listeners[0].address"}},
		{"listener host name", [2]string{"127.0.0.1:8080", "gateway.example.com:8080"}, []string{"test.yaml:3:", "listeners[0].address", "IP address"}},
		{"bad routing", [2]string{"- id: acme/m1", "- id: acme/m1\n    routing: random"}, []string{"test.yaml:10:", "models[0].routing"}},
		{"bad tokenizer", [2]string{"- id: acme/m1", "- id: acme/m1\n    tokenizer: gpt2"}, []string{"test.yaml:10:", "models[0].tokenizer"}},
		{"negative weight", [2]string{"upstream_model: m1", "upstream_model: m1\n        weight: -1"}, []string{"test.yaml:13:", "weight"}},
		{"bad region", [2]string{"kind: openai", "kind: openai\n    region: mars"}, []string{"test.yaml:7:", "providers[0].region"}},
		{"wrong type", [2]string{"- id: acme/m1", "- id: acme/m1\n    context_window: lots"}, []string{"line 10", "lots"}},
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
