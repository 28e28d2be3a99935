package config

import (
	"net/url"
)

// Observability configures what the gateway exports beyond its /metrics.
type Observability struct {
	// Tracing exports OpenTelemetry traces; nil (the default): none.
	Tracing *Tracing `yaml:"tracing" json:"tracing,omitempty"`
}

// Tracing configures OpenTelemetry trace export over OTLP/gRPC.
type Tracing struct {
	// OTLPEndpoint is the collector's OTLP/gRPC URL: http://host:4317 for
	// plain gRPC (a collector beside the gateway), https://host:4317 for TLS
	// verified against the system roots. "" turns tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint" json:"otlp_endpoint,omitempty"`
	// SampleRatio is the share of new traces recorded, 0 to 1; nil: 1
	// (every request). A request that arrives with a W3C traceparent keeps
	// its caller's sampling decision.
	SampleRatio *float64 `yaml:"sample_ratio" json:"sample_ratio,omitempty"`
}

// Ratio is the sample ratio in force (1 when unset).
func (t *Tracing) Ratio() float64 {
	if t == nil || t.SampleRatio == nil {
		return 1
	}
	return *t.SampleRatio
}

// Enabled reports whether traces are exported.
func (t *Tracing) Enabled() bool { return t != nil && t.OTLPEndpoint != "" }

func (v *validator) checkObservability(c *Config) {
	t := c.Observability.Tracing
	if t == nil {
		return
	}
	if t.OTLPEndpoint != "" {
		if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			v.fail("must be an http:// or https:// URL of an OTLP/gRPC collector (http://otel-collector:4317)", "observability", "tracing", "otlp_endpoint")
		}
	}
	if r := t.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		v.fail("must be between 0 and 1", "observability", "tracing", "sample_ratio")
	}
}
