package dataplane

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// TestReplacedCertificateFilesServed: Envoy watches the files of an SDS
// certificate given by path; replacing them (in place, or by renaming new
// files over them, as cert-manager and certbot do) is picked up by the next
// handshake without a configuration change. A half-written pair (a new
// certificate beside the old key) keeps the old pair serving.
func TestReplacedCertificateFilesServed(t *testing.T) {
	e := newEnv(t)
	c1, c2, c3 := newTestCert(t, "localhost"), newTestCert(t, "localhost"), newTestCert(t, "localhost")
	ts, secret := tlsResources(t, c1)
	e.apply(resOpts{tls: ts, secrets: []*tlsv3.Secret{secret}})
	addr := e.dp.Addr(testListener).String()
	certFile := secret.GetTlsCertificate().GetCertificateChain().GetFilename()
	keyFile := secret.GetTlsCertificate().GetPrivateKey().GetFilename()

	serves := func(c testCert) error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: c.pool, ServerName: "localhost"})
		if err == nil {
			conn.Close()
		}
		return err
	}
	if err := serves(c1); err != nil {
		t.Fatal(err)
	}

	// Rewritten in place.
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certFile, c2.certPEM)
	if err := serves(c1); err != nil {
		t.Errorf("a certificate without its key replaced the serving pair: %v", err)
	}
	write(keyFile, c2.keyPEM)
	if err := serves(c2); err != nil {
		t.Errorf("the rewritten certificate is not served: %v", err)
	}

	// Renamed over the old files.
	dir := t.TempDir()
	for name, b := range map[string][]byte{"cert.pem": c3.certPEM, "key.pem": c3.keyPEM} {
		write(filepath.Join(dir, name), b)
	}
	if err := os.Rename(filepath.Join(dir, "cert.pem"), certFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "key.pem"), keyFile); err != nil {
		t.Fatal(err)
	}
	if err := serves(c3); err != nil {
		t.Errorf("the renamed certificate is not served: %v", err)
	}
}

// TestTLS12OffersOnlyAEADSuites: TLS 1.2 clients get forward secrecy and
// an AEAD (ECDHE with AES-GCM or ChaCha20-Poly1305), never CBC or RSA key
// exchange; a client offering only those is refused.
func TestTLS12OffersOnlyAEADSuites(t *testing.T) {
	e := newEnv(t)
	c := newTestCert(t, "localhost")
	ts, secret := tlsResources(t, c)
	e.apply(resOpts{tls: ts, secrets: []*tlsv3.Secret{secret}})
	addr := e.dp.Addr(testListener).String()
	dial := func(suites ...uint16) (uint16, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: c.pool, ServerName: "localhost",
			MaxVersion: tls.VersionTLS12, CipherSuites: suites})
		if err != nil {
			return 0, err
		}
		defer conn.Close()
		return conn.ConnectionState().CipherSuite, nil
	}
	for _, s := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	} {
		if got, err := dial(s); err != nil || got != s {
			t.Errorf("%s: negotiated %s, %v", tls.CipherSuiteName(s), tls.CipherSuiteName(got), err)
		}
	}
	for _, s := range []uint16{
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA,
		tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256, tls.TLS_RSA_WITH_AES_128_GCM_SHA256,
	} {
		if got, err := dial(s); err == nil {
			t.Errorf("%s offered alone: negotiated %s", tls.CipherSuiteName(s), tls.CipherSuiteName(got))
		}
	}
}

func TestCipherSuitesConfig(t *testing.T) {
	for _, tc := range []struct {
		names []string
		want  []uint16 // nil: refused
	}{
		{nil, aeadSuites},
		{[]string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256}},
		{[]string{"[ECDHE-ECDSA-AES128-GCM-SHA256|ECDHE-ECDSA-CHACHA20-POLY1305]"},
			[]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}},
		{[]string{"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"}, nil},
		{[]string{"AES128-GCM-SHA256"}, nil},
	} {
		got, err := cipherSuites(tc.names)
		if tc.want == nil {
			if err == nil {
				t.Errorf("%v accepted: %v", tc.names, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%v = %v, %v; want %v", tc.names, got, err, tc.want)
		}
	}
}
