package metrics

import (
	"io"
	"strconv"
	"time"
)

// Request is what the data plane knows of one finished request: the
// outcome and the metadata extproc published (model, provider, origin,
// token counts). Empty strings are rendered as empty labels.
type Request struct {
	// Model is the canonical model id for model requests, else the API
	// path family (/v1/files, ...): low cardinality either way.
	Model, Provider, Origin string
	Status                  int
	Duration                time.Duration
	// TimeToFirstByte is when the response headers went downstream; zero
	// when none did.
	TimeToFirstByte                        time.Duration
	PromptTokens, CompletionTokens, Cached int64
	Attempts                               int
}

// Latency buckets in seconds: sub-millisecond gateway answers (local
// replies, cached lookups) up to long generations.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Requests are the request metrics.
type Requests struct {
	Total    *CounterVec
	Duration *HistogramVec
	TTFB     *HistogramVec
	Tokens   *CounterVec
	Retries  *CounterVec
}

// NewRequests returns zeroed request metrics.
func NewRequests() *Requests {
	return &Requests{
		Total: NewCounterVec("switchyard_requests_total",
			"Requests served, by model (or API path), provider, origin and status class.", "model", "provider", "origin", "code"),
		Duration: NewHistogramVec("switchyard_request_duration_seconds",
			"Time from the request's arrival to the last byte of its response.", latencyBuckets, "model", "provider"),
		TTFB: NewHistogramVec("switchyard_time_to_first_byte_seconds",
			"Time from the request's arrival to its response headers (for streams, the first token's wait).", latencyBuckets, "model", "provider"),
		Tokens: NewCounterVec("switchyard_tokens_total",
			"Tokens reported by providers, by model, provider and type (prompt, completion, cached).", "model", "provider", "type"),
		Retries: NewCounterVec("switchyard_upstream_retries_total",
			"Upstream attempts beyond the first (failover), by model.", "model"),
	}
}

// Observe records one finished request.
func (m *Requests) Observe(r Request) {
	if m == nil {
		return
	}
	m.Total.Inc(r.Model, r.Provider, r.Origin, statusClass(r.Status))
	m.Duration.Observe(r.Duration.Seconds(), r.Model, r.Provider)
	if r.TimeToFirstByte > 0 {
		m.TTFB.Observe(r.TimeToFirstByte.Seconds(), r.Model, r.Provider)
	}
	if r.PromptTokens > 0 {
		m.Tokens.Add(uint64(r.PromptTokens), r.Model, r.Provider, "prompt")
	}
	if r.CompletionTokens > 0 {
		m.Tokens.Add(uint64(r.CompletionTokens), r.Model, r.Provider, "completion")
	}
	if r.Cached > 0 {
		m.Tokens.Add(uint64(r.Cached), r.Model, r.Provider, "cached")
	}
	if r.Attempts > 1 {
		m.Retries.Add(uint64(r.Attempts-1), r.Model)
	}
}

// WritePrometheus writes every family.
func (m *Requests) WritePrometheus(w io.Writer) error {
	if m == nil {
		return nil
	}
	for _, f := range []interface{ WritePrometheus(io.Writer) error }{m.Total, m.Duration, m.TTFB, m.Tokens, m.Retries} {
		if err := f.WritePrometheus(w); err != nil {
			return err
		}
	}
	return nil
}

// statusClass is "2xx" and so on: the status itself would multiply series
// without helping alerts; 429 is kept apart because it is a limit, not a
// fault.
func statusClass(status int) string {
	switch {
	case status == 429:
		return "429"
	case status >= 100 && status < 600:
		return strconv.Itoa(status/100) + "xx"
	}
	return "other"
}
