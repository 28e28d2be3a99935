package dataplane

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

func TestDNSNameMatch(t *testing.T) {
	tests := []struct {
		name, cert string
		want       bool
	}{
		{"api.example.com", "api.example.com", true},
		{"API.example.com", "api.EXAMPLE.com", true},
		{"api.example.com", "*.example.com", true},
		{"a.b.example.com", "*.example.com", false},
		{"example.com", "*.example.com", false},
		{"api.example.com", "other.example.com", false},
		{"api.example.com", "*.example.org", false},
	}
	for _, tt := range tests {
		if got := dnsNameMatch(tt.name, tt.cert); got != tt.want {
			t.Errorf("dnsNameMatch(%q, %q) = %v", tt.name, tt.cert, got)
		}
	}
}

// TestUpstreamSANValidation: with match_typed_subject_alt_names the data
// plane, like Envoy, accepts a certificate whose chain is trusted and whose
// names include a listed one, whatever the SNI, and rejects the rest.
func TestUpstreamSANValidation(t *testing.T) {
	cert := newTestCert(t, "vllm.internal.example")
	certFile, keyFile := cert.files(t)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the rejected handshakes are the point
	srv.StartTLS()
	defer srv.Close()

	other := newTestCert(t, "elsewhere")
	otherCA := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(otherCA, other.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := func(ca string, sans ...*tlsv3.SubjectAltNameMatcher) *tlsv3.UpstreamTlsContext {
		return &tlsv3.UpstreamTlsContext{Sni: "vllm.internal.example", CommonTlsContext: &tlsv3.CommonTlsContext{
			ValidationContextType: &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
				TrustedCa:                 &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca}},
				MatchTypedSubjectAltNames: sans,
			}},
		}}
	}
	san := func(typ tlsv3.SubjectAltNameMatcher_SanType, v string) *tlsv3.SubjectAltNameMatcher {
		return &tlsv3.SubjectAltNameMatcher{SanType: typ, Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}}
	}
	tests := []struct {
		name string
		ctx  *tlsv3.UpstreamTlsContext
		ok   bool
	}{
		{"DNS name listed", ctx(certFile, san(tlsv3.SubjectAltNameMatcher_DNS, "vllm.internal.example")), true},
		{"IP listed", ctx(certFile, san(tlsv3.SubjectAltNameMatcher_IP_ADDRESS, "127.0.0.1")), true},
		{"name not listed", ctx(certFile, san(tlsv3.SubjectAltNameMatcher_DNS, "api.openai.com")), false},
		{"untrusted chain", ctx(otherCA, san(tlsv3.SubjectAltNameMatcher_DNS, "vllm.internal.example")), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := upstreamTLS(tt.ctx, nil, "cluster")
			if err != nil {
				t.Fatal(err)
			}
			tr := &http.Transport{TLSClientConfig: cfg}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
			if err == nil {
				resp.Body.Close()
			}
			if (err == nil) != tt.ok {
				t.Errorf("err = %v, want ok %v", err, tt.ok)
			}
			if err != nil && !tt.ok && !strings.Contains(err.Error(), "certificate") && !strings.Contains(err.Error(), "subject alternative name") {
				t.Errorf("unexpected error kind: %v", err)
			}
		})
	}
}
