package dataplane

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Transport socket names Envoy recognises.
const (
	transportSocketTLS = "envoy.transport_sockets.tls"
	transportSocketRaw = "envoy.transport_sockets.raw_buffer"
)

// readDataSource resolves a DataSource; files are read when the update is
// applied, so a missing file fails the update instead of a request.
func readDataSource(ds *corev3.DataSource) ([]byte, error) {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_Filename:
		b, err := os.ReadFile(s.Filename)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", s.Filename, err)
		}
		return b, nil
	case *corev3.DataSource_EnvironmentVariable:
		v, ok := os.LookupEnv(s.EnvironmentVariable)
		if !ok {
			return nil, fmt.Errorf("environment variable %s is not set", s.EnvironmentVariable)
		}
		return []byte(v), nil
	}
	return nil, errors.New("empty data source")
}

// tlsVersion maps Envoy's TLS version enum; auto means def.
func tlsVersion(v tlsv3.TlsParameters_TlsProtocol, def uint16) uint16 {
	switch v {
	case tlsv3.TlsParameters_TLSv1_0:
		return tls.VersionTLS10
	case tlsv3.TlsParameters_TLSv1_1:
		return tls.VersionTLS11
	case tlsv3.TlsParameters_TLSv1_2:
		return tls.VersionTLS12
	case tlsv3.TlsParameters_TLSv1_3:
		return tls.VersionTLS13
	}
	return def
}

// certificates resolves a CommonTlsContext's certificates, inline or by SDS
// name from secrets.
func certificates(c *tlsv3.CommonTlsContext, secrets map[string]*tlsv3.Secret, from string) ([]tls.Certificate, error) {
	var certs []*tlsv3.TlsCertificate
	certs = append(certs, c.GetTlsCertificates()...)
	for _, sc := range c.GetTlsCertificateSdsSecretConfigs() {
		s, ok := secrets[sc.GetName()]
		if !ok {
			return nil, &missingError{kind: "secret", name: sc.GetName(), from: from}
		}
		tc := s.GetTlsCertificate()
		if tc == nil {
			return nil, fmt.Errorf("%s: secret %q holds no tls_certificate", from, sc.GetName())
		}
		certs = append(certs, tc)
	}
	var out []tls.Certificate
	for _, tc := range certs {
		chain, err := readDataSource(tc.GetCertificateChain())
		if err != nil {
			return nil, fmt.Errorf("%s: certificate_chain: %w", from, err)
		}
		key, err := readDataSource(tc.GetPrivateKey())
		if err != nil {
			return nil, fmt.Errorf("%s: private_key: %w", from, err)
		}
		cert, err := tls.X509KeyPair(chain, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		out = append(out, cert)
	}
	return out, nil
}

// downstreamTLS builds a listener's server TLS configuration: h2 and
// http/1.1 over ALPN unless the context says otherwise, TLS 1.2 at least,
// and for TLS 1.2 only forward-secret AEAD suites (aeadSuites, or those of
// cipher_suites, which may name no other).
//
// A certificate given by file paths (the gateway's SDS secrets are) is
// re-read when its files change, as Envoy does for SDS secrets that name
// files: each handshake checks the files' identity, size and modification
// time, and a changed pair is loaded once both parse and match; until then
// the previous pair is served.
func downstreamTLS(ctx *tlsv3.DownstreamTlsContext, secrets map[string]*tlsv3.Secret, from string, log *slog.Logger) (*tls.Config, error) {
	if ctx.GetRequireClientCertificate().GetValue() {
		return nil, fmt.Errorf("%s: client certificates are not supported", from)
	}
	common := ctx.GetCommonTlsContext()
	certs, err := certificates(common, secrets, from)
	if err != nil {
		return nil, err
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: TLS context has no certificate", from)
	}
	alpn := common.GetAlpnProtocols()
	if len(alpn) == 0 {
		alpn = []string{"h2", "http/1.1"}
	}
	params := common.GetTlsParams()
	suites, err := cipherSuites(params.GetCipherSuites())
	if err != nil {
		return nil, fmt.Errorf("%s: cipher_suites: %w", from, err)
	}
	cfg := &tls.Config{
		Certificates: certs,
		NextProtos:   alpn,
		MinVersion:   tlsVersion(params.GetTlsMinimumProtocolVersion(), tls.VersionTLS12),
		MaxVersion:   tlsVersion(params.GetTlsMaximumProtocolVersion(), 0),
		CipherSuites: suites,
	}
	if cfg.MinVersion < tls.VersionTLS12 {
		// Envoy's server default is also 1.2; older versions are refused here.
		cfg.MinVersion = tls.VersionTLS12
	}
	if files := certificateFiles(common, secrets, certs, log); files != nil {
		cfg.Certificates = nil
		cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			var first *tls.Certificate
			for _, f := range files {
				c := f.current()
				if first == nil {
					first = c
				}
				if len(files) == 1 || hello.SupportsCertificate(c) == nil {
					return c, nil
				}
			}
			return first, nil
		}
	}
	return cfg, nil
}

// aeadSuites are the TLS 1.2 suites a listener offers by default: ECDHE
// key exchange (forward secrecy) with an AEAD cipher. TLS 1.3's suites are
// all AEAD and not configurable.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// aeadSuiteNames are aeadSuites by the (OpenSSL) names Envoy's
// cipher_suites uses.
var aeadSuiteNames = map[string]uint16{
	"ECDHE-ECDSA-AES128-GCM-SHA256": tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-RSA-AES128-GCM-SHA256":   tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	"ECDHE-ECDSA-AES256-GCM-SHA384": tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-RSA-AES256-GCM-SHA384":   tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	"ECDHE-ECDSA-CHACHA20-POLY1305": tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	"ECDHE-RSA-CHACHA20-POLY1305":   tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// cipherSuites maps a listener's cipher_suites (empty: aeadSuites). Envoy's
// equal-preference groups ("[A|B]") count as their members in order. Only
// the AEAD suites are accepted: a listener offering CBC or static RSA key
// exchange is refused, not quietly weakened.
func cipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return aeadSuites, nil
	}
	var out []uint16
	for _, n := range names {
		for _, m := range strings.Split(strings.Trim(n, "[]"), "|") {
			id, ok := aeadSuiteNames[strings.TrimSpace(m)]
			if !ok {
				return nil, fmt.Errorf("%q is not supported: only ECDHE suites with AES-GCM or ChaCha20-Poly1305", m)
			}
			out = append(out, id)
		}
	}
	return out, nil
}

// certFile is a certificate and key given by file paths, with the pair
// loaded from them and what the files were like when it was.
type certFile struct {
	chain, key string
	log        *slog.Logger

	mu          sync.Mutex
	cert        *tls.Certificate
	chainInfo   os.FileInfo
	keyInfo     os.FileInfo
	failedChain os.FileInfo // the last files that did not load, so as not
	failedKey   os.FileInfo // to re-read them on every handshake
}

// certificateFiles returns a reloading source for each certificate when
// every one is given by file paths (certs are their contents, just read),
// or nil.
func certificateFiles(c *tlsv3.CommonTlsContext, secrets map[string]*tlsv3.Secret, certs []tls.Certificate, log *slog.Logger) []*certFile {
	var tcs []*tlsv3.TlsCertificate
	tcs = append(tcs, c.GetTlsCertificates()...)
	for _, sc := range c.GetTlsCertificateSdsSecretConfigs() {
		tcs = append(tcs, secrets[sc.GetName()].GetTlsCertificate())
	}
	if len(tcs) != len(certs) {
		return nil
	}
	var out []*certFile
	for i, tc := range tcs {
		chain, key := tc.GetCertificateChain().GetFilename(), tc.GetPrivateKey().GetFilename()
		if chain == "" || key == "" {
			return nil
		}
		f := &certFile{chain: chain, key: key, log: log, cert: &certs[i]}
		// What the files are now: at worst a change made since they were
		// read is loaded once more.
		f.chainInfo, _ = os.Stat(chain)
		f.keyInfo, _ = os.Stat(key)
		out = append(out, f)
	}
	return out
}

// current returns the pair to serve, reloading it first if either file
// changed. A pair that does not load (a certificate replaced before its
// key, a file being written) leaves the previous one in service.
func (f *certFile) current() *tls.Certificate {
	ci, cerr := os.Stat(f.chain)
	ki, kerr := os.Stat(f.key)
	f.mu.Lock()
	defer f.mu.Unlock()
	if cerr != nil || kerr != nil || sameFile(ci, f.chainInfo) && sameFile(ki, f.keyInfo) ||
		sameFile(ci, f.failedChain) && sameFile(ki, f.failedKey) {
		return f.cert
	}
	chain, err := os.ReadFile(f.chain)
	var key []byte
	if err == nil {
		key, err = os.ReadFile(f.key)
	}
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.X509KeyPair(chain, key)
	}
	if err != nil {
		f.failedChain, f.failedKey = ci, ki
		if f.log != nil {
			f.log.Warn("listener certificate files changed but do not load; serving the previous certificate",
				"certificate", f.chain, "key", f.key, "error", err)
		}
		return f.cert
	}
	f.cert, f.chainInfo, f.keyInfo = &cert, ci, ki
	if f.log != nil {
		f.log.Info("listener certificate reloaded", "certificate", f.chain)
	}
	return f.cert
}

// sameFile reports whether a and b describe the same file, unchanged.
func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// upstreamTLS builds a cluster's client TLS configuration. Envoy skips
// certificate verification when the context has no validation context; this
// data plane verifies against the system roots instead, because a proxy that
// forwards API credentials must not trust any certificate.
func upstreamTLS(ctx *tlsv3.UpstreamTlsContext, secrets map[string]*tlsv3.Secret, from string) (*tls.Config, error) {
	common := ctx.GetCommonTlsContext()
	certs, err := certificates(common, secrets, from)
	if err != nil {
		return nil, err
	}
	params := common.GetTlsParams()
	cfg := &tls.Config{
		ServerName:   ctx.GetSni(),
		Certificates: certs,
		NextProtos:   common.GetAlpnProtocols(),
		MinVersion:   tlsVersion(params.GetTlsMinimumProtocolVersion(), tls.VersionTLS12),
		MaxVersion:   tlsVersion(params.GetTlsMaximumProtocolVersion(), 0),
	}
	var vc *tlsv3.CertificateValidationContext
	switch v := common.GetValidationContextType().(type) {
	case nil:
	case *tlsv3.CommonTlsContext_ValidationContext:
		vc = v.ValidationContext
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		vc = v.CombinedValidationContext.GetDefaultValidationContext()
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		s, ok := secrets[v.ValidationContextSdsSecretConfig.GetName()]
		if !ok {
			return nil, &missingError{kind: "secret", name: v.ValidationContextSdsSecretConfig.GetName(), from: from}
		}
		vc = s.GetValidationContext()
	default:
		return nil, fmt.Errorf("%s: unsupported validation context %T", from, v)
	}
	if ca := vc.GetTrustedCa(); ca != nil {
		pem, err := readDataSource(ca)
		if err != nil {
			return nil, fmt.Errorf("%s: trusted_ca: %w", from, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: trusted_ca holds no PEM certificate", from)
		}
		cfg.RootCAs = pool
	}
	if sans := vc.GetMatchTypedSubjectAltNames(); len(sans) > 0 {
		verify, err := sanVerifier(sans)
		if err != nil {
			return nil, fmt.Errorf("%s: match_typed_subject_alt_names: %w", from, err)
		}
		// Envoy checks the names the matchers list instead of the host
		// name; Go can only replace its host name check wholesale, so the
		// chain is verified here too.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("upstream sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			leaf := cs.PeerCertificates[0]
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
				return err
			}
			return verify(leaf)
		}
	}
	return cfg, nil
}

// sanVerifier checks that a certificate carries a subject alternative name
// one of the matchers accepts, as Envoy's match_typed_subject_alt_names does.
func sanVerifier(matchers []*tlsv3.SubjectAltNameMatcher) (func(*x509.Certificate) error, error) {
	type san struct {
		typ tlsv3.SubjectAltNameMatcher_SanType
		m   *stringMatcher
		dns string // an exact DNS name: matched with wildcards, as Envoy does
	}
	var list []san
	for _, m := range matchers {
		sm, err := compileStringMatcher(m.GetMatcher())
		if err != nil {
			return nil, err
		}
		e := san{typ: m.GetSanType(), m: sm}
		if e.typ == tlsv3.SubjectAltNameMatcher_DNS && m.GetMatcher().GetExact() != "" && !m.GetMatcher().GetIgnoreCase() {
			e.dns = m.GetMatcher().GetExact()
		}
		switch e.typ {
		case tlsv3.SubjectAltNameMatcher_DNS, tlsv3.SubjectAltNameMatcher_IP_ADDRESS,
			tlsv3.SubjectAltNameMatcher_URI, tlsv3.SubjectAltNameMatcher_EMAIL:
		default:
			return nil, fmt.Errorf("san_type %s is not supported", e.typ)
		}
		list = append(list, e)
	}
	return func(c *x509.Certificate) error {
		for _, e := range list {
			var names []string
			switch e.typ {
			case tlsv3.SubjectAltNameMatcher_DNS:
				names = c.DNSNames
			case tlsv3.SubjectAltNameMatcher_IP_ADDRESS:
				for _, ip := range c.IPAddresses {
					names = append(names, ip.String())
				}
			case tlsv3.SubjectAltNameMatcher_URI:
				for _, u := range c.URIs {
					names = append(names, u.String())
				}
			case tlsv3.SubjectAltNameMatcher_EMAIL:
				names = c.EmailAddresses
			}
			for _, n := range names {
				if e.dns != "" && dnsNameMatch(e.dns, n) || e.dns == "" && e.m.match(n) {
					return nil
				}
			}
		}
		return errors.New("upstream certificate has no subject alternative name the cluster accepts")
	}, nil
}

// dnsNameMatch reports whether a certificate's DNS name covers name; a
// wildcard covers exactly one leftmost label.
func dnsNameMatch(name, certName string) bool {
	name, certName = strings.ToLower(name), strings.ToLower(certName)
	if name == certName {
		return true
	}
	suffix, ok := strings.CutPrefix(certName, "*.")
	if !ok {
		return false
	}
	first, rest, found := strings.Cut(name, ".")
	return found && first != "" && rest == suffix
}
