package config

import (
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
)

// Settings that matter when Envoy is the data plane: where the backends
// service is, and how provider certificates are verified.

// DefaultUpstreamCAFile is the system CA bundle on Debian, Ubuntu and Alpine,
// and in Envoy's official image. Operators on other systems (macOS:
// /etc/ssl/cert.pem) set upstream_ca_file.
const DefaultUpstreamCAFile = "/etc/ssl/certs/ca-certificates.crt"

// Backends is the Go service behind the stateful endpoints.
type Backends struct {
	// Address is host:port; a host name is resolved by the data plane
	// (a Kubernetes Service or a compose service name).
	Address string `yaml:"address" json:"address,omitempty"`
}

// ProviderTLS tunes the TLS connection to an https provider.
type ProviderTLS struct {
	// CAFile is the CA bundle for this provider; default the config's
	// upstream_ca_file.
	CAFile string `yaml:"ca_file" json:"ca_file,omitempty"`
	// SNI is the server name sent and verified; default the base URL's host.
	SNI string `yaml:"sni" json:"sni,omitempty"`
}

// dnsNameRE is a host name as SNI carries it (RFC 6066: no IP literals).
var dnsNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)

func (c *Config) applyDeployDefaults() {
	if c.UpstreamCAFile == "" {
		c.UpstreamCAFile = DefaultUpstreamCAFile
	}
}

func (v *validator) checkDeploy(c *Config) {
	if b := c.Backends; b != nil {
		host, port, err := net.SplitHostPort(b.Address)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || host == "" || perr != nil || n == 0 {
			v.fail("must be host:port", "backends", "address")
		}
	}
	// Envoy resolves relative paths against its own working directory, which
	// is rarely the operator's; an absolute path means the same file to both.
	if !filepath.IsAbs(c.UpstreamCAFile) {
		v.fail("must be an absolute path", "upstream_ca_file")
	}
	for i, p := range c.Providers {
		if p.TLS == nil {
			continue
		}
		if u, err := url.Parse(p.BaseURL); err == nil && u.Scheme != "https" {
			v.fail("only https providers take tls settings", "providers", i, "tls")
		}
		if p.TLS.CAFile != "" && !filepath.IsAbs(p.TLS.CAFile) {
			v.fail("must be an absolute path", "providers", i, "tls", "ca_file")
		}
		if p.TLS.SNI != "" && (net.ParseIP(p.TLS.SNI) != nil || !dnsNameRE.MatchString(p.TLS.SNI)) {
			v.fail("must be a DNS host name", "providers", i, "tls", "sni")
		}
	}
}

// CAFile is the CA bundle that verifies this provider's certificate.
func (p *Provider) CAFile(c *Config) string {
	if p.TLS != nil && p.TLS.CAFile != "" {
		return p.TLS.CAFile
	}
	return c.UpstreamCAFile
}
