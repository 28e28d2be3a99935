package config

import (
	"strings"
	"testing"
)

const deployGood = `listeners:
  - name: public
    address: 127.0.0.1:8080
backends:
  address: backends.internal:8092
upstream_ca_file: /etc/ssl/cert.pem
providers:
  - name: p1
    kind: openai
    base_url: https://10.0.0.1:8443/v1
    http2: true
    tls:
      sni: vllm.internal.example
      ca_file: /etc/ca/internal.pem
  - name: p2
    kind: openai
    base_url: https://api.example.com/v1
models:
  - id: acme/m1
    providers:
      - provider: p1
        upstream_model: m1
`

func TestDeploySettings(t *testing.T) {
	c, err := Parse("deploy.yaml", []byte(deployGood))
	if err != nil {
		t.Fatal(err)
	}
	if c.Backends == nil || c.Backends.Address != "backends.internal:8092" {
		t.Errorf("backends = %+v", c.Backends)
	}
	p1, p2 := &c.Providers[0], &c.Providers[1]
	if !p1.HTTP2 || p1.TLS.SNI != "vllm.internal.example" || p1.CAFile(c) != "/etc/ca/internal.pem" {
		t.Errorf("p1 = %+v", p1)
	}
	if p2.HTTP2 || p2.CAFile(c) != "/etc/ssl/cert.pem" {
		t.Errorf("p2 = %+v, CA %s", p2, p2.CAFile(c))
	}
	d, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if d.UpstreamCAFile != DefaultUpstreamCAFile || d.Backends != nil {
		t.Errorf("defaults: CA %q backends %+v", d.UpstreamCAFile, d.Backends)
	}
}

func TestDeploySettingsErrors(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		want     []string
	}{
		{"backends without port", "backends.internal:8092", "backends.internal", []string{"deploy.yaml:5:", "backends.address", "host:port"}},
		{"backends port zero", "backends.internal:8092", "backends.internal:0", []string{"backends.address"}},
		{"relative CA bundle", "upstream_ca_file: /etc/ssl/cert.pem", "upstream_ca_file: cert.pem", []string{"deploy.yaml:6:", "upstream_ca_file", "absolute"}},
		{"tls on an http provider", "https://10.0.0.1:8443/v1", "http://10.0.0.1:8443/v1", []string{"providers[0].tls", "only https"}},
		{"SNI is an IP", "sni: vllm.internal.example", "sni: 10.0.0.1", []string{"providers[0].tls.sni", "DNS host name"}},
		{"SNI is not a name", "sni: vllm.internal.example", "sni: not_a name", []string{"providers[0].tls.sni"}},
		{"relative provider CA", "ca_file: /etc/ca/internal.pem", "ca_file: internal.pem", []string{"providers[0].tls.ca_file", "absolute"}},
		{"unknown tls field", "sni: vllm.internal.example", "sni: vllm.internal.example\n      verify: false", []string{"verify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(deployGood, tt.from, tt.to, 1)
			if src == deployGood {
				t.Fatalf("%q not in the configuration", tt.from)
			}
			_, err := Parse("deploy.yaml", []byte(src))
			if err == nil {
				t.Fatal("Parse succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
