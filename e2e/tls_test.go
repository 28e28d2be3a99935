package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// selfSigned returns a PEM certificate for 127.0.0.1, its key, and a pool
// trusting it.
func selfSigned(t *testing.T, serial int64) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("switchyard e2e %d", serial)},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), pool
}

// TestListenerCertificateReplaced: the operator replaces the listener's
// certificate files (new files renamed over the old, as cert-manager and
// certbot do) and the gateway serves the new certificate on the next
// connection, with no configuration change or restart. TLS 1.2 clients
// get only ECDHE with an AEAD.
func TestListenerCertificateReplaced(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, pool1 := selfSigned(t, 1)
	c2, k2, pool2 := selfSigned(t, 2)
	for f, b := range map[string][]byte{certFile: c1, keyFile: k1} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(providerKeyEnv, "prov-key-0123456789")
	up := httptest.NewServer(fake.NewOpenAI(fake.Options{APIKey: "prov-key-0123456789"}))
	t.Cleanup(up.Close)
	yaml := fmt.Sprintf(`listeners:
  - name: public
    address: 127.0.0.1:18080
    tls: {cert_file: %q, key_file: %q}
providers:
  - {name: p, kind: openai, base_url: "%s/v1", api_key_env: %s}
models:
  - {id: demo/chat, providers: [{provider: p, upstream_model: fake-chat-1}]}
`, certFile, keyFile, up.URL, providerKeyEnv)
	cfg, err := config.Parse("tls.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gw, err := gateway.Start(ctx, gateway.Options{Config: cfg, DataDir: t.TempDir(), ListenOverride: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler), RateLimitClock: fixedClock{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	key, _, err := gw.Keys.Issue(ctx, keys.Spec{Name: "tls", Tier: "enterprise", RPM: 1000, TPM: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	// A client with a fresh connection pool each time: every call is a new
	// handshake.
	chat := func(pool *x509.CertPool) error {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
		defer tr.CloseIdleConnections()
		c := openai.NewClient(option.WithBaseURL(gw.BaseURL()), option.WithAPIKey(key), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: tr}))
		_, err := c.Chat.Completions.New(ctx, chatParams("over TLS"))
		return err
	}
	if err := chat(pool1); err != nil {
		t.Fatalf("first certificate: %v", err)
	}

	for f, b := range map[string][]byte{certFile: c2, keyFile: k2} {
		tmp := f + ".new"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := chat(pool2); err != nil {
		t.Fatalf("the replaced certificate is not served: %v", err)
	}
	if err := chat(pool1); err == nil {
		t.Error("the old certificate is still served")
	}

	addr := gw.Data.Addr("public").String()
	for _, tc := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
	} {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool2, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tc.suite}})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("TLS 1.2 with %s: %v, want accepted %v", tls.CipherSuiteName(tc.suite), err, tc.ok)
		}
	}
}
