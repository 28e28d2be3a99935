// Package config owns Switchyard's YAML configuration: its schema, defaults,
// the embedded default file, and validation that names the field and line of
// every mistake, so a bad file fails at start and never half-configures.
package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

//go:embed default.yaml
var defaultYAML []byte

// DefaultName is the file name reported in errors for the embedded default.
const DefaultName = "<embedded default>"

// Config is the whole configuration file.
type Config struct {
	// Region is this gateway instance's home region (us or asia).
	Region        string          `yaml:"region" json:"region,omitempty"`
	Listeners     []Listener      `yaml:"listeners" json:"listeners,omitempty"`
	Limits        Limits          `yaml:"limits" json:"limits,omitempty"`
	DemoUpstreams []DemoUpstream  `yaml:"demo_upstreams" json:"demo_upstreams,omitempty"`
	Providers     []Provider      `yaml:"providers" json:"providers,omitempty"`
	Models        []Model         `yaml:"models" json:"models,omitempty"`
	Tiers         map[string]Tier `yaml:"tiers" json:"tiers,omitempty"`
	// Backends is the Go service that answers the stateful endpoints
	// (files, batches, responses, models); nil: no backend routes.
	Backends *Backends `yaml:"backends" json:"backends,omitempty"`
	// UpstreamCAFile is the CA bundle provider certificates are verified
	// against; default DefaultUpstreamCAFile.
	UpstreamCAFile string `yaml:"upstream_ca_file" json:"upstream_ca_file,omitempty"`
	// OutlierDetection decides when a failing provider is taken out of
	// rotation, and for how long.
	OutlierDetection OutlierDetection `yaml:"outlier_detection" json:"outlier_detection,omitempty"`
	// Tools configures the Responses API's built-in tools (tools.go).
	Tools Tools `yaml:"tools" json:"tools,omitempty"`
	// Storage says where the stores keep their state (storage.go).
	Storage Storage `yaml:"storage" json:"storage,omitzero"`
	// Observability configures trace export (observability.go).
	Observability Observability `yaml:"observability" json:"observability,omitempty"`
}

// OutlierDetection ejects a provider that keeps failing: after
// ConsecutiveFailures 5xx answers (or connection failures, resets and
// timeouts) in a row it gets no traffic for BaseEjectionTime times the
// number of times in a row it was ejected, then is probed back in. 429s do
// not count: a rate-limited provider is not failing.
//
// A provider can also fail without failing twice in a row: one that cuts
// streams after their head answers 200 first. FailurePercentage ejects a
// provider whose answers in the last Interval were at least that percent
// failures (5xx, connection failures, resets before or after the head,
// timeouts; a cut stream counts as one success and one failure, as in
// Envoy), once it had FailurePercentageRequestVolume answers in it.
type OutlierDetection struct {
	ConsecutiveFailures            int           `yaml:"consecutive_failures" json:"consecutive_failures,omitempty"`
	Interval                       time.Duration `yaml:"interval" json:"interval,omitempty"`
	BaseEjectionTime               time.Duration `yaml:"base_ejection_time" json:"base_ejection_time,omitempty"`
	FailurePercentageThreshold     int           `yaml:"failure_percentage_threshold" json:"failure_percentage_threshold,omitempty"`
	FailurePercentageRequestVolume int           `yaml:"failure_percentage_request_volume" json:"failure_percentage_request_volume,omitempty"`
}

// Listener is a public listener of the data plane.
type Listener struct {
	Name    string `yaml:"name" json:"name,omitempty"`
	Address string `yaml:"address" json:"address,omitempty"`
	TLS     *TLS   `yaml:"tls" json:"tls,omitempty"`
	// AdminAddress is where `switchyard run` serves the admin API (plain
	// HTTP, loopback unless --insecure); only the first listener's is
	// used. Empty: a free loopback port. --admin-listen overrides it.
	AdminAddress string `yaml:"admin_address" json:"admin_address,omitempty"`
}

// TLS names certificate files; their contents are read at start.
type TLS struct {
	CertFile string `yaml:"cert_file" json:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file" json:"key_file,omitempty"`
}

// Limits are gateway-wide request limits.
type Limits struct {
	MaxRequestBodyBytes   int64         `yaml:"max_request_body_bytes" json:"max_request_body_bytes,omitempty"`
	ExtProcMessageTimeout time.Duration `yaml:"ext_proc_message_timeout" json:"ext_proc_message_timeout,omitempty"`
	StreamIdleTimeout     time.Duration `yaml:"stream_idle_timeout" json:"stream_idle_timeout,omitempty"`
	// FirstByteTimeout and ModelIdleTimeout are the defaults of the
	// models' first_byte_timeout and idle_timeout.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout" json:"first_byte_timeout,omitempty"`
	ModelIdleTimeout time.Duration `yaml:"model_idle_timeout" json:"model_idle_timeout,omitempty"`
	// RequestBodyTimeout bounds how long a client may take to send a
	// whole request body (408 past it); a client trickling its body
	// otherwise holds its connection for as long as it keeps trickling.
	RequestBodyTimeout time.Duration `yaml:"request_body_timeout" json:"request_body_timeout,omitempty"`
	// MaxConcurrentRequestsPerKey caps one API key's requests in flight
	// (429 with retry-after past it).
	MaxConcurrentRequestsPerKey int `yaml:"max_concurrent_requests_per_key" json:"max_concurrent_requests_per_key,omitempty"`
	// MaxRequestBytesInFlight caps the bytes of request bodies the data
	// plane holds at once across all requests (503 with retry-after past
	// it). At least max_request_body_bytes.
	MaxRequestBytesInFlight int64 `yaml:"max_request_bytes_in_flight" json:"max_request_bytes_in_flight,omitempty"`
}

// DemoUpstream is a fake vendor endpoint the gateway process starts itself.
type DemoUpstream struct {
	Name   string `yaml:"name" json:"name,omitempty"`
	Kind   string `yaml:"kind" json:"kind,omitempty"`
	Listen string `yaml:"listen" json:"listen,omitempty"`
}

// Provider is an upstream vendor endpoint.
type Provider struct {
	Name    string `yaml:"name" json:"name,omitempty"`
	Kind    string `yaml:"kind" json:"kind,omitempty"`
	BaseURL string `yaml:"base_url" json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable holding the provider's
	// credential; the credential itself never appears in the file.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env,omitempty"`
	Region    string `yaml:"region" json:"region,omitempty"`
	// HTTP2 says the provider speaks HTTP/2 (over TLS by ALPN, or h2c for
	// http URLs), so many requests share one connection.
	HTTP2 bool `yaml:"http2" json:"http2,omitempty"`
	// TLS overrides the upstream TLS settings of an https provider.
	TLS *ProviderTLS `yaml:"tls" json:"tls,omitempty"`
	// ForwardHeaders names client request headers, beyond those the
	// provider's API needs, that reach it (say, a vendor's beta-feature
	// header). Credentials, cookies and the gateway's own headers cannot be
	// named.
	ForwardHeaders []string `yaml:"forward_headers" json:"forward_headers,omitempty"`
}

// neverForwarded are request headers no provider may be sent from a
// client: credentials, cookies, the client's Host and its hop-by-hop
// headers. The provider's own credential header is the gateway's to set.
var neverForwarded = []string{"authorization", "proxy-authorization", "cookie", "api-key", "x-api-key",
	"x-goog-api-key", "host", "connection", "te", "transfer-encoding", "upgrade", "keep-alive", "content-length",
	"content-encoding", "accept-encoding"}

// headerNameRE is a lower-case HTTP header name (an RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[a-z0-9!#$%&'*+.^_`|~-]+$")

// Model is a client-visible model id and the providers that serve it.
type Model struct {
	ID            string          `yaml:"id" json:"id,omitempty"`
	ContextWindow int             `yaml:"context_window" json:"context_window,omitempty"`
	Capabilities  []string        `yaml:"capabilities" json:"capabilities,omitempty"`
	Providers     []ModelProvider `yaml:"providers" json:"providers,omitempty"`
	// Routing picks the first provider tried: RoutingPriority (default),
	// RoutingWeighted or RoutingLatency. Failover order follows priority.
	Routing string `yaml:"routing" json:"routing,omitempty"`
	// FirstByteTimeout bounds one attempt until response headers; past it
	// the attempt fails over to the next provider.
	FirstByteTimeout time.Duration `yaml:"first_byte_timeout" json:"first_byte_timeout,omitempty"`
	// IdleTimeout bounds the silence between two reads of the upstream's
	// response (the model route's idle_timeout): a stream that stalls
	// longer ends with an error event. As Envoy's route idle_timeout, it
	// also runs while the response head is awaited, so it must exceed
	// FirstByteTimeout for a stalled attempt to fail over.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout,omitempty"`
	// DropUnsupported drops request parameters a provider cannot honour
	// instead of answering 400 naming them.
	DropUnsupported bool `yaml:"drop_unsupported" json:"drop_unsupported,omitempty"`
	// Tokenizer names the model's tokenizer (see package tokenizer) for
	// embedding truncation; empty means the documented estimate.
	Tokenizer string `yaml:"tokenizer" json:"tokenizer,omitempty"`
	// Dimensions reports whether the embedding model accepts `dimensions`.
	Dimensions bool `yaml:"dimensions" json:"dimensions,omitempty"`
	// PromptCache keeps providers' prompt caches warm: cache affinity
	// routing and Anthropic cache breakpoints (see PromptCache).
	PromptCache PromptCache `yaml:"prompt_cache" json:"prompt_cache,omitzero"`
	// Pricing gives the model's requests a cost (usage and budgets); a
	// model without one costs nothing.
	Pricing Pricing `yaml:"pricing" json:"pricing,omitzero"`
}

// Pricing is a model's price in US dollars per million tokens. Cached
// input tokens (prompt_tokens_details.cached_tokens) are billed at
// CachedInput instead of Input; CachedInput 0 bills them at Input.
type Pricing struct {
	Input       float64 `yaml:"input" json:"input,omitempty"`
	CachedInput float64 `yaml:"cached_input" json:"cached_input,omitempty"`
	Output      float64 `yaml:"output" json:"output,omitempty"`
}

// MaxPrice bounds a price (US dollars per million tokens), so a request's
// cost cannot overflow its integer micro-dollars.
const MaxPrice = 1_000_000

// Micros returns the prices in micro-dollars per million tokens (which is
// pico-dollars per token), rounded: costs are summed as integers so they
// never drift.
func (p Pricing) Micros() (input, cachedInput, output int64) {
	m := func(f float64) int64 { return int64(math.Round(f * 1e6)) }
	input, cachedInput, output = m(p.Input), m(p.CachedInput), m(p.Output)
	if p.CachedInput == 0 {
		cachedInput = input
	}
	return input, cachedInput, output
}

// CostMicros is the cost in micro-dollars of a request that used input
// prompt tokens (cached included, as OpenAI counts them), cached of them
// from a prompt cache, and output completion tokens; rounded to the
// nearest micro-dollar.
func (p Pricing) CostMicros(input, cached, output int64) int64 {
	in, ca, out := p.Micros()
	cached = min(max(cached, 0), max(input, 0))
	pico := (input-cached)*in + cached*ca + output*out
	if pico <= 0 {
		return 0
	}
	return (pico + 500_000) / 1_000_000
}

// PromptCache configures how a model's requests use providers' prompt
// caches. Providers cache prompt prefixes (OpenAI automatically from 1024
// tokens, Gemini 2.5 implicitly, Anthropic at cache_control breakpoints);
// a cached prefix is billed at a fraction of the price and skips most of
// the time to first byte, but only on the provider that saw it.
type PromptCache struct {
	// Affinity sends the requests of one conversation to the same first
	// provider: the highest-random-weight (rendezvous) choice for a key
	// made of the request's prompt_cache_key, or else its stable prefix
	// (system and developer messages up to the first user message, and
	// tools), and the caller's key owner. Weighted routing keeps its
	// weights across keys; latency routing chooses among the providers
	// within LatencyTolerance of the best estimate. Unset: on for
	// RoutingWeighted and RoutingLatency; priority routing is affine
	// already (its first choice only changes with health).
	Affinity *bool `yaml:"affinity" json:"affinity,omitempty"`
	// LatencyTolerance is, under RoutingLatency with affinity, how much
	// slower than the best estimate (a fraction: 0.25 is 25%) a provider
	// may be and still keep its conversations. Default
	// DefaultLatencyTolerance.
	LatencyTolerance float64 `yaml:"latency_tolerance" json:"latency_tolerance,omitempty"`
	// Breakpoints adds Anthropic cache_control breakpoints when a request
	// is translated for an anthropic provider (the last tool, the system
	// prompt, the conversation before the newest user turn), where the
	// prefix is long enough to be cached. Unset: on.
	Breakpoints *bool `yaml:"breakpoints" json:"breakpoints,omitempty"`
	// MinTokens is the shortest prefix a breakpoint is placed after,
	// estimated at 4 bytes a token. Default DefaultCacheMinTokens
	// (Anthropic's minimum for most models; Haiku models need 2048).
	MinTokens int `yaml:"min_tokens" json:"min_tokens,omitempty"`
}

// CacheAffinity reports whether the model's first choices are cache affine
// (PromptCache.Affinity, defaulting by routing policy).
func (m *Model) CacheAffinity() bool {
	if a := m.PromptCache.Affinity; a != nil {
		return *a
	}
	return m.Routing == RoutingWeighted || m.Routing == RoutingLatency
}

// CacheBreakpoints reports whether Anthropic cache breakpoints are added
// (PromptCache.Breakpoints, default on).
func (m *Model) CacheBreakpoints() bool {
	return m.PromptCache.Breakpoints == nil || *m.PromptCache.Breakpoints
}

// ModelProvider is one provider serving a model, under the provider's own name.
type ModelProvider struct {
	Provider      string `yaml:"provider" json:"provider,omitempty"`
	UpstreamModel string `yaml:"upstream_model" json:"upstream_model,omitempty"`
	// Weight is the share of first attempts under RoutingWeighted (default 1).
	Weight int `yaml:"weight" json:"weight,omitempty"`
	// Priority orders failover: lower first; equal priorities keep file order.
	Priority int `yaml:"priority" json:"priority,omitempty"`
}

// Model routing policies.
const (
	RoutingPriority = "priority"
	RoutingWeighted = "weighted"
	RoutingLatency  = "latency"
)

// Tier holds per-minute limits; zero means "set per key" (enterprise).
type Tier struct {
	RPM int `yaml:"rpm" json:"rpm,omitempty"`
	TPM int `yaml:"tpm" json:"tpm,omitempty"`
	// OnLimiterError is what happens to this tier's requests while the rate
	// limiter cannot decide (the ratelimit service or its Redis is down):
	// LimiterDeny (answer 503), LimiterLocal (count them in this replica's
	// memory against 1/LocalReplicas of the key's limits) or LimiterAllow
	// (serve them unmetered). It defaults to deny for the free tier, whose
	// traffic is the cheapest to turn away and the likeliest to be abuse,
	// and to local for every other tier, whose customers pay to be served
	// but whose limits still bound what a runaway client costs.
	OnLimiterError string `yaml:"on_limiter_error" json:"on_limiter_error,omitempty"`
	// LocalReplicas is what on_limiter_error local divides the limits by
	// (rounding up): the number of replicas sharing the traffic, so the
	// fleet together stays near the key's limits. 0 means 1: each replica
	// allows the whole limit, so the fleet allows up to replicas × limit.
	LocalReplicas int `yaml:"local_replicas" json:"local_replicas,omitempty"`
	// BatchLinesPerDay bounds the request lines of the batches one key (its
	// rotation chain) creates in any 24 hours, checked when a batch is
	// created; -1 means no bound. Unset (0), the built-in tiers get
	// DefaultFreeBatchLines and DefaultStandardBatchLines, and any other
	// tier a day of its RPM (RPM × 1440), or no bound if its RPM is set per
	// key (enterprise). Running lines draw from the key's TPM as well.
	BatchLinesPerDay int64 `yaml:"batch_lines_per_day" json:"batch_lines_per_day,omitempty"`
}

// BatchLineAllowance is the tier's daily batch line allowance (defaults
// applied), and whether it has one.
func (t Tier) BatchLineAllowance() (lines int64, limited bool) {
	return t.BatchLinesPerDay, t.BatchLinesPerDay >= 0
}

// Tier.OnLimiterError values.
const (
	LimiterDeny  = "deny"
	LimiterLocal = "local"
	LimiterAllow = "allow"
)

// Defaults applied when a field is absent.
const (
	DefaultMaxRequestBodyBytes   = 32 << 20
	DefaultExtProcMessageTimeout = 10 * time.Second
	DefaultStreamIdleTimeout     = 5 * time.Minute
	DefaultContextWindow         = 128000
	DefaultFirstByteTimeout      = 30 * time.Second
	DefaultModelIdleTimeout      = 60 * time.Second
	DefaultConsecutiveFailures   = 3
	DefaultOutlierInterval       = time.Second
	DefaultBaseEjectionTime      = 10 * time.Second
	// A provider failing a fifth of at least 20 answers in an interval is
	// sick: failing over beats serving those failures. Envoy's defaults
	// (85 %, 50 answers, 5 hosts) never act on one-host provider clusters.
	DefaultFailurePercentageThreshold = 20
	DefaultFailurePercentageVolume    = 20
	DefaultLatencyTolerance           = 0.25
	DefaultCacheMinTokens             = 1024
	// Daily batch line allowances of the built-in tiers (docs/operations.md).
	DefaultFreeBatchLines          = 2_000
	DefaultStandardBatchLines      = 50_000
	DefaultRequestBodyTimeout      = 60 * time.Second
	DefaultMaxConcurrentPerKey     = 64
	DefaultMaxRequestBytesInFlight = 256 << 20
)

// Known enumerations.
var (
	ProviderKinds = []string{"openai", "anthropic", "gemini"}
	// DemoKinds are the fake upstreams the gateway can start: every
	// provider kind, and the Brave Search API for web_search.
	DemoKinds       = append(append([]string(nil), ProviderKinds...), "brave")
	RoutingPolicies = []string{RoutingPriority, RoutingWeighted, RoutingLatency}
	Regions         = []string{"us", "asia"}
	Capabilities    = []string{"chat", "embeddings", "responses", "tools"}
)

// Error is a validation error located in the file.
type Error struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Field, e.Msg)
}

// Default returns the embedded default configuration.
func Default() (*Config, error) { return Parse(DefaultName, defaultYAML) }

// DefaultYAML returns the embedded default file's bytes.
func DefaultYAML() []byte { return bytes.Clone(defaultYAML) }

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates configuration bytes; name is used in errors.
func Parse(name string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: name, Field: "(file)", Msg: "empty configuration"}
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// Type errors do not stop the decoder: it fills what it can, so the
	// validation below still runs and every problem is reported at once.
	var errs []error
	if err := dec.Decode(&c); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		errs = decodeErrors(name, &root, err)
	}
	v := validator{file: name, root: root.Content[0]}
	c.applyDefaults()
	v.check(&c)
	errs = append(errs, v.errs...)
	if len(errs) > 0 {
		sortByLine(errs)
		return nil, errors.Join(errs...)
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	if c.Region == "" {
		c.Region = "us"
	}
	c.applyDeployDefaults()
	c.applyStorageDefaults()
	c.applyLimitDefaults()
	for i := range c.Providers {
		if c.Providers[i].Region == "" {
			c.Providers[i].Region = c.Region
		}
	}
	for i := range c.Models {
		c.Models[i].applyDefaults(c.Limits)
	}
	c.applyTierDefaults()
}

func (c *Config) applyLimitDefaults() {
	if c.Limits.MaxRequestBodyBytes == 0 {
		c.Limits.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	if c.Limits.ExtProcMessageTimeout == 0 {
		c.Limits.ExtProcMessageTimeout = DefaultExtProcMessageTimeout
	}
	if c.Limits.StreamIdleTimeout == 0 {
		c.Limits.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if c.Limits.FirstByteTimeout == 0 {
		c.Limits.FirstByteTimeout = DefaultFirstByteTimeout
	}
	if c.Limits.ModelIdleTimeout == 0 {
		c.Limits.ModelIdleTimeout = DefaultModelIdleTimeout
	}
	if c.Limits.RequestBodyTimeout == 0 {
		c.Limits.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	if c.Limits.MaxConcurrentRequestsPerKey == 0 {
		c.Limits.MaxConcurrentRequestsPerKey = DefaultMaxConcurrentPerKey
	}
	if c.Limits.MaxRequestBytesInFlight == 0 {
		// Never below one largest body: that one would always be refused.
		c.Limits.MaxRequestBytesInFlight = max(DefaultMaxRequestBytesInFlight, c.Limits.MaxRequestBodyBytes)
	}
	if c.OutlierDetection.ConsecutiveFailures == 0 {
		c.OutlierDetection.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if c.OutlierDetection.Interval == 0 {
		c.OutlierDetection.Interval = DefaultOutlierInterval
	}
	if c.OutlierDetection.BaseEjectionTime == 0 {
		c.OutlierDetection.BaseEjectionTime = DefaultBaseEjectionTime
	}
	if c.OutlierDetection.FailurePercentageThreshold == 0 {
		c.OutlierDetection.FailurePercentageThreshold = DefaultFailurePercentageThreshold
	}
	if c.OutlierDetection.FailurePercentageRequestVolume == 0 {
		c.OutlierDetection.FailurePercentageRequestVolume = DefaultFailurePercentageVolume
	}
}

// applyDefaults fills a model's unset fields; its timeouts default to the
// gateway-wide limits.
func (m *Model) applyDefaults(limits Limits) {
	if m.ContextWindow == 0 {
		m.ContextWindow = DefaultContextWindow
	}
	if len(m.Capabilities) == 0 {
		m.Capabilities = []string{"chat", "tools"}
	}
	if m.Routing == "" {
		m.Routing = RoutingPriority
	}
	if m.FirstByteTimeout == 0 {
		m.FirstByteTimeout = limits.FirstByteTimeout
	}
	if m.IdleTimeout == 0 {
		m.IdleTimeout = limits.ModelIdleTimeout
	}
	for j := range m.Providers {
		if m.Providers[j].Weight == 0 {
			m.Providers[j].Weight = 1
		}
	}
}

// applyTierDefaults adds the built-in tiers the config leaves out and fills
// every tier's unset fields.
func (c *Config) applyTierDefaults() {
	if c.Tiers == nil {
		c.Tiers = map[string]Tier{}
	}
	for name, t := range map[string]Tier{"free": {RPM: 10, TPM: 40000}, "standard": {RPM: 60, TPM: 200000}, "enterprise": {}} {
		if _, ok := c.Tiers[name]; !ok {
			c.Tiers[name] = t
		}
	}
	for name, t := range c.Tiers {
		if t.OnLimiterError == "" {
			t.OnLimiterError = LimiterLocal
			if name == "free" {
				t.OnLimiterError = LimiterDeny
			}
		}
		if t.BatchLinesPerDay == 0 {
			switch {
			case name == "free":
				t.BatchLinesPerDay = DefaultFreeBatchLines
			case name == "standard":
				t.BatchLinesPerDay = DefaultStandardBatchLines
			case t.RPM > 0:
				t.BatchLinesPerDay = int64(t.RPM) * 24 * 60
			default:
				t.BatchLinesPerDay = -1
			}
		}
		c.Tiers[name] = t
	}
}

// Provider returns the named provider.
func (c *Config) Provider(name string) (*Provider, bool) {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i], true
		}
	}
	return nil, false
}

// Model returns the model with the given id.
func (c *Config) Model(id string) (*Model, bool) {
	for i := range c.Models {
		if c.Models[i].ID == id {
			return &c.Models[i], true
		}
	}
	return nil, false
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	modelIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._:-]*$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

type validator struct {
	file string
	root *yaml.Node
	errs []error
}

// fail records an error at the YAML node that path leads to. Path elements
// are map keys (string) and sequence indexes (int).
func (v *validator) fail(msg string, path ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: lineOf(v.root, path), Field: fieldName(path), Msg: msg})
}

func fieldName(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		case int:
			b.WriteString("[" + strconv.Itoa(p) + "]")
		}
	}
	return b.String()
}

// lineOf walks as far along path as the document goes and returns that node's line.
func lineOf(n *yaml.Node, path []any) int {
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
						line = n.Content[i].Line
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

func contains(set []string, s string) bool {
	for _, x := range set {
		if x == s {
			return true
		}
	}
	return false
}

func (v *validator) check(c *Config) {
	if !contains(Regions, c.Region) {
		v.fail(fmt.Sprintf("must be one of %v", Regions), "region")
	}
	v.checkDeploy(c)
	v.checkTools(c)
	v.checkStorage(c)
	v.checkObservability(c)
	v.checkListeners(c.Listeners)
	v.checkLimits(c)
	v.checkDemoUpstreams(c.DemoUpstreams)
	providers := v.checkProviders(c.Providers)
	v.checkModels(c.Models, providers)
	v.checkTiers(c.Tiers)
}

// checkName reports a name that is not a lower-case name at path.
func (v *validator) checkName(name string, path ...any) bool {
	if !nameRE.MatchString(name) {
		v.fail("must be a lower-case name ([a-z0-9_-])", path...)
		return false
	}
	return true
}

func (v *validator) checkListeners(listeners []Listener) {
	if len(listeners) == 0 {
		v.fail("at least one listener is required", "listeners")
	}
	// seen holds listener names ("l:") and bound addresses ("a:"), the
	// admin addresses checked against both listeners' addresses.
	seen := map[string]bool{}
	for i, l := range listeners {
		if v.checkName(l.Name, "listeners", i, "name") && seen["l:"+l.Name] {
			v.fail(fmt.Sprintf("duplicate listener %q", l.Name), "listeners", i, "name")
		}
		seen["l:"+l.Name] = true
		if host, _, err := net.SplitHostPort(l.Address); err != nil {
			v.fail("must be host:port", "listeners", i, "address")
		} else if host != "" && host != "localhost" && net.ParseIP(host) == nil {
			// Envoy binds socket addresses, not names.
			v.fail("host must be an IP address (or localhost)", "listeners", i, "address")
		} else if seen["a:"+l.Address] {
			v.fail(fmt.Sprintf("duplicate address %q", l.Address), "listeners", i, "address")
		}
		seen["a:"+l.Address] = true
		if l.TLS != nil && (l.TLS.CertFile == "" || l.TLS.KeyFile == "") {
			v.fail("cert_file and key_file are both required", "listeners", i, "tls")
		}
		if l.AdminAddress != "" {
			v.checkAdminAddress(i, l.AdminAddress, seen)
		}
	}
}

func (v *validator) checkAdminAddress(i int, addr string, seen map[string]bool) {
	switch host, _, err := net.SplitHostPort(addr); {
	case i > 0:
		v.fail("only the first listener has an admin address", "listeners", i, "admin_address")
	case err != nil:
		v.fail("must be host:port", "listeners", i, "admin_address")
	case host != "localhost" && net.ParseIP(host) == nil:
		v.fail("host must be an IP address (or localhost)", "listeners", i, "admin_address")
	case seen["a:"+addr]:
		v.fail(fmt.Sprintf("duplicate address %q", addr), "listeners", i, "admin_address")
	}
}

func (v *validator) checkLimits(c *Config) {
	if c.Limits.MaxRequestBodyBytes < 1024 {
		v.fail("must be at least 1024", "limits", "max_request_body_bytes")
	}
	if c.Limits.ExtProcMessageTimeout < 0 || c.Limits.StreamIdleTimeout < 0 || c.Limits.FirstByteTimeout < 0 || c.Limits.ModelIdleTimeout < 0 || c.Limits.RequestBodyTimeout < 0 {
		v.fail("durations must be positive", "limits")
	}
	if c.Limits.RequestBodyTimeout > 0 && c.Limits.RequestBodyTimeout < time.Second {
		v.fail("must be at least 1s", "limits", "request_body_timeout")
	}
	if c.Limits.MaxConcurrentRequestsPerKey < 1 {
		v.fail("must be at least 1", "limits", "max_concurrent_requests_per_key")
	}
	if c.Limits.MaxRequestBytesInFlight < c.Limits.MaxRequestBodyBytes {
		v.fail(fmt.Sprintf("must be at least max_request_body_bytes (%d): a body of that size would always be refused",
			c.Limits.MaxRequestBodyBytes), "limits", "max_request_bytes_in_flight")
	}
	if od := c.OutlierDetection; od.ConsecutiveFailures < 1 || od.Interval < time.Millisecond || od.BaseEjectionTime < time.Millisecond {
		v.fail("consecutive_failures must be at least 1, interval and base_ejection_time at least 1ms", "outlier_detection")
	}
	if od := c.OutlierDetection; od.FailurePercentageThreshold < 1 || od.FailurePercentageThreshold > 100 || od.FailurePercentageRequestVolume < 1 {
		v.fail("failure_percentage_threshold must be 1 to 100, failure_percentage_request_volume at least 1", "outlier_detection")
	}
}

func (v *validator) checkDemoUpstreams(demos []DemoUpstream) {
	for i, d := range demos {
		v.checkName(d.Name, "demo_upstreams", i, "name")
		if !contains(DemoKinds, d.Kind) {
			v.fail(fmt.Sprintf("must be one of %v", DemoKinds), "demo_upstreams", i, "kind")
		}
		if host, _, err := net.SplitHostPort(d.Listen); err != nil {
			v.fail("must be host:port", "demo_upstreams", i, "listen")
		} else if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			v.fail("demo upstreams listen on loopback only", "demo_upstreams", i, "listen")
		}
	}
}

// checkProviders returns the set of provider names, against which the
// models' providers are checked.
func (v *validator) checkProviders(ps []Provider) map[string]bool {
	providers := map[string]bool{}
	for i, p := range ps {
		if v.checkName(p.Name, "providers", i, "name") && providers[p.Name] {
			v.fail(fmt.Sprintf("duplicate provider %q", p.Name), "providers", i, "name")
		}
		providers[p.Name] = true
		v.checkProvider(i, p)
	}
	return providers
}

func (v *validator) checkProvider(i int, p Provider) {
	if !contains(ProviderKinds, p.Kind) {
		v.fail(fmt.Sprintf("must be one of %v", ProviderKinds), "providers", i, "kind")
	}
	if u, err := url.Parse(p.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.fail("must be an http or https URL with a host", "providers", i, "base_url")
	} else if u.RawQuery != "" || u.Fragment != "" {
		v.fail("must not have a query or fragment", "providers", i, "base_url")
	}
	if p.APIKeyEnv != "" && !envNameRE.MatchString(p.APIKeyEnv) {
		v.fail("must be an environment variable name", "providers", i, "api_key_env")
	}
	if !contains(Regions, p.Region) {
		v.fail(fmt.Sprintf("must be one of %v", Regions), "providers", i, "region")
	}
	for j, h := range p.ForwardHeaders {
		switch {
		case !headerNameRE.MatchString(h):
			v.fail("must be a lower-case header name", "providers", i, "forward_headers", j)
		case contains(neverForwarded, h) || strings.HasPrefix(h, "x-switchyard-"):
			v.fail(fmt.Sprintf("%s is never forwarded to a provider", h), "providers", i, "forward_headers", j)
		}
	}
}

func (v *validator) checkModels(ms []Model, providers map[string]bool) {
	if len(ms) == 0 {
		v.fail("at least one model is required", "models")
	}
	models := map[string]bool{}
	for i, m := range ms {
		switch {
		case !modelIDRE.MatchString(m.ID):
			v.fail("must look like <vendor>/<model>", "models", i, "id")
		case models[m.ID]:
			v.fail(fmt.Sprintf("duplicate model %q", m.ID), "models", i, "id")
		}
		models[m.ID] = true
		if m.ContextWindow < 1 {
			v.fail("must be positive", "models", i, "context_window")
		}
		for j, capability := range m.Capabilities {
			if !contains(Capabilities, capability) {
				v.fail(fmt.Sprintf("must be one of %v", Capabilities), "models", i, "capabilities", j)
			}
		}
		v.checkModelProviders(i, m.Providers, providers)
		if !contains(RoutingPolicies, m.Routing) {
			v.fail(fmt.Sprintf("must be one of %v", RoutingPolicies), "models", i, "routing")
		}
		v.checkModelTimeouts(i, m)
		if pc := m.PromptCache; pc.LatencyTolerance < 0 || pc.LatencyTolerance > 10 {
			v.fail("must be between 0 and 10 (a fraction of the best estimate)", "models", i, "prompt_cache", "latency_tolerance")
		}
		if m.PromptCache.MinTokens < 0 {
			v.fail("must not be negative", "models", i, "prompt_cache", "min_tokens")
		}
		for j, price := range []float64{m.Pricing.Input, m.Pricing.CachedInput, m.Pricing.Output} {
			if !(price >= 0 && price <= MaxPrice) { // also refuses NaN
				v.fail(fmt.Sprintf("must be between 0 and %d US dollars per million tokens", MaxPrice),
					"models", i, "pricing", []string{"input", "cached_input", "output"}[j])
			}
		}
		if m.Tokenizer != "" && !contains([]string{"cl100k_base", "o200k_base", "estimate"}, m.Tokenizer) {
			v.fail("must be cl100k_base, o200k_base or estimate", "models", i, "tokenizer")
		}
	}
}

func (v *validator) checkModelProviders(i int, mps []ModelProvider, providers map[string]bool) {
	if len(mps) == 0 {
		v.fail("at least one provider is required", "models", i, "providers")
	}
	for j, mp := range mps {
		if !providers[mp.Provider] {
			v.fail(fmt.Sprintf("unknown provider %q", mp.Provider), "models", i, "providers", j, "provider")
		}
		if mp.UpstreamModel == "" {
			v.fail("is required", "models", i, "providers", j, "upstream_model")
		}
		if mp.Weight < 0 {
			v.fail("must not be negative", "models", i, "providers", j, "weight")
		}
	}
}

func (v *validator) checkModelTimeouts(i int, m Model) {
	if m.FirstByteTimeout < 0 {
		v.fail("must be positive", "models", i, "first_byte_timeout")
	}
	switch {
	case m.IdleTimeout < 0:
		v.fail("must be positive", "models", i, "idle_timeout")
	case m.FirstByteTimeout > 0 && m.IdleTimeout <= m.FirstByteTimeout:
		// Envoy's idle timeout also runs while the response head is
		// awaited: not longer than the first-byte timeout, it would end
		// a stalled attempt with 504 before it could fail over.
		v.fail(fmt.Sprintf("must be longer than first_byte_timeout (%v): it also runs while the response head is awaited", m.FirstByteTimeout),
			"models", i, "idle_timeout")
	}
}

func (v *validator) checkTiers(tiers map[string]Tier) {
	for name, t := range tiers {
		if !nameRE.MatchString(name) {
			v.fail("tier names must be lower-case names", "tiers", name)
		}
		if t.RPM < 0 || t.TPM < 0 {
			v.fail("limits must not be negative", "tiers", name)
		}
		if t.BatchLinesPerDay < -1 {
			v.fail("must be a number of lines, or -1 for no bound", "tiers", name, "batch_lines_per_day")
		}
		if t.OnLimiterError != LimiterDeny && t.OnLimiterError != LimiterLocal && t.OnLimiterError != LimiterAllow {
			v.fail(fmt.Sprintf("must be %q, %q or %q", LimiterDeny, LimiterLocal, LimiterAllow), "tiers", name, "on_limiter_error")
		}
		if t.LocalReplicas < 0 {
			v.fail("must be a number of replicas (0 or unset: 1)", "tiers", name, "local_replicas")
		}
	}
}
