package metrics

import (
	"io"
	"slices"
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
	// Operation is the GenAI semantic conventions' gen_ai.operation.name
	// of a model request ("chat", "embeddings"); "" for other requests,
	// which the gen_ai_* families leave out.
	Operation string
	// Upstream is the time spent waiting on upstreams: each attempt's
	// round trip to its response headers plus the time blocked reading
	// response bodies. Duration less Upstream is the latency the gateway
	// added; negative means no upstream was involved.
	Upstream time.Duration
	// Stream: the response was an event stream, whose time per output
	// token is meaningful (a buffered response's headers come with its
	// last token).
	Stream bool
}

// Latency buckets in seconds: sub-millisecond gateway answers (local
// replies, cached lookups) up to long generations.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Bucket bounds the OpenTelemetry GenAI semantic conventions advise for
// their histograms (explicit bucket boundaries), so dashboards built for
// the conventions read these as they are.
var (
	genAITokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
	genAIDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genAITTFTBuckets     = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0}
	genAITPOTBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}
	// The gateway's own share is sub-millisecond when all is well.
	addedLatencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
)

// genAILabels are the GenAI families' labels: the semantic conventions'
// attribute names in Prometheus form (dots become underscores).
var genAILabels = []string{"gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"}

// Requests are the request metrics.
type Requests struct {
	Total    *CounterVec
	Duration *HistogramVec
	TTFB     *HistogramVec
	Tokens   *CounterVec
	Retries  *CounterVec
	// Added is the latency the gateway adds to a request: its duration
	// less the time spent waiting on the upstream.
	Added *HistogramVec

	// The OpenTelemetry GenAI semantic-convention metrics, in their
	// Prometheus form (OTLP→Prometheus naming: dots to underscores, the
	// unit "s" as the _seconds suffix, an annotation unit like {token}
	// dropped).
	GenAITokenUsage      *HistogramVec // gen_ai.client.token.usage, {token}
	GenAIRequestDuration *HistogramVec // gen_ai.server.request.duration, s
	GenAITimeToFirst     *HistogramVec // gen_ai.server.time_to_first_token, s
	GenAITimePerOutput   *HistogramVec // gen_ai.server.time_per_output_token, s
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
		Added: NewHistogramVec("switchyard_added_latency_seconds",
			"Latency the gateway added to a request: its duration less the time spent waiting on upstreams (round trips to response headers, response body reads).",
			addedLatencyBuckets, "model", "provider"),
		GenAITokenUsage: NewHistogramVec("gen_ai_client_token_usage",
			"GenAI semantic conventions gen_ai.client.token.usage ({token}): tokens per model request, by type (input, output).",
			genAITokenBuckets, slices.Concat(genAILabels, []string{"gen_ai_token_type"})...),
		GenAIRequestDuration: NewHistogramVec("gen_ai_server_request_duration_seconds",
			"GenAI semantic conventions gen_ai.server.request.duration (s): model request duration; error_type is the HTTP status of a failure.",
			genAIDurationBuckets, slices.Concat(genAILabels, []string{"error_type"})...),
		GenAITimeToFirst: NewHistogramVec("gen_ai_server_time_to_first_token_seconds",
			"GenAI semantic conventions gen_ai.server.time_to_first_token (s): time to the response headers of a successful model request (for streams, the first token).",
			genAITTFTBuckets, genAILabels...),
		GenAITimePerOutput: NewHistogramVec("gen_ai_server_time_per_output_token_seconds",
			"GenAI semantic conventions gen_ai.server.time_per_output_token (s): time per output token after the first, of a successful streamed model request.",
			genAITPOTBuckets, genAILabels...),
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
	if r.Upstream >= 0 {
		m.Added.Observe(max(r.Duration-r.Upstream, 0).Seconds(), r.Model, r.Provider)
	}
	if r.Operation == "" {
		return
	}
	errorType := ""
	if r.Status >= 400 || r.Status < 100 {
		errorType = strconv.Itoa(r.Status)
	}
	m.GenAIRequestDuration.Observe(r.Duration.Seconds(), r.Operation, r.Provider, r.Model, errorType)
	if r.PromptTokens > 0 {
		m.GenAITokenUsage.Observe(float64(r.PromptTokens), r.Operation, r.Provider, r.Model, "input")
	}
	if r.CompletionTokens > 0 {
		m.GenAITokenUsage.Observe(float64(r.CompletionTokens), r.Operation, r.Provider, r.Model, "output")
	}
	if errorType != "" || r.TimeToFirstByte <= 0 {
		return
	}
	m.GenAITimeToFirst.Observe(r.TimeToFirstByte.Seconds(), r.Operation, r.Provider, r.Model)
	if r.Stream && r.CompletionTokens > 1 {
		per := (r.Duration - r.TimeToFirstByte).Seconds() / float64(r.CompletionTokens-1)
		m.GenAITimePerOutput.Observe(per, r.Operation, r.Provider, r.Model)
	}
}

// WritePrometheus writes every family.
func (m *Requests) WritePrometheus(w io.Writer) error {
	if m == nil {
		return nil
	}
	for _, f := range []interface{ WritePrometheus(io.Writer) error }{m.Total, m.Duration, m.TTFB, m.Tokens, m.Retries, m.Added,
		m.GenAITokenUsage, m.GenAIRequestDuration, m.GenAITimeToFirst, m.GenAITimePerOutput} {
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
