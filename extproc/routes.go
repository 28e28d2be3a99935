package extproc

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/extproc/translate/anthropic"
	"github.com/switchyard-ai/switchyard/extproc/translate/gemini"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// routeTable is the routing state derived from one catalog. It is immutable
// once built, so requests read it without locks and a new catalog replaces
// it whole. Only the providers' health (health.go) changes underneath it,
// and that is shared across catalogs by provider name.
type routeTable struct {
	region    string
	models    map[string]*modelRoute
	order     []*modelRoute // catalog order, for GET /v1/models
	providers map[string]*provider
}

// providerKind is a provider's wire format.
type providerKind uint8

const (
	kindOpenAI    providerKind = iota // OpenAI-compatible: passthrough with model rewrite
	kindAnthropic                     // Anthropic Messages API: translated
	kindGemini                        // Google Gemini API: translated
)

func parseKind(s string) (providerKind, bool) {
	switch s {
	case "openai":
		return kindOpenAI, true
	case "anthropic":
		return kindAnthropic, true
	case "gemini":
		return kindGemini, true
	}
	return 0, false
}

func (k providerKind) String() string {
	switch k {
	case kindAnthropic:
		return "anthropic"
	case kindGemini:
		return "gemini"
	}
	return "openai"
}

// serves reports whether providers of this kind can serve op.
func (k providerKind) serves(op operation) bool {
	return op != opEmbeddings || k != kindAnthropic // Anthropic has no embeddings API
}

// provider is one upstream endpoint as the upstream phase needs it.
type provider struct {
	name   string
	kind   providerKind
	region string
	// basePath is the base URL's path without a trailing slash; vendor
	// paths go under it.
	basePath string
	// credential is the provider's secret ("" when it takes none).
	credential string
	// missing says why the provider cannot be used ("" when it can): its
	// credential is unset or unusable. Such a provider is left out of every
	// model's targets, so its models fail over or answer 503, and the rest
	// of the catalog keeps serving.
	missing string
	// authorization is "Bearer <credential>" for OpenAI-kind providers.
	authorization string
	health        *providerHealth
	// compared: some model of the catalog chooses between this provider
	// and others, so its health (policy.go) is read. A provider only ever
	// routed to alone needs no time-to-first-byte samples or cooldowns,
	// and its prepared attempts skip the response headers message
	// (upstream.go, preparedAttempt).
	compared bool

	// Built once per catalog for the upstream phase's replies, and shared
	// by them (never modified): the credential header of an OpenAI-kind
	// provider (nil without one) and the vendor headers its attempts
	// remove.
	authHeader   *corev3.HeaderValueOption
	removeOpenAI []string
	// metaName is the provider's name as dynamic metadata.
	metaName *structpb.Value
	// forward are the client headers the configuration lets reach this
	// provider beyond those its API needs (config forward_headers).
	forward []string
}

// modelRoute is one client-visible model and the providers that serve it.
type modelRoute struct {
	id string
	// targets are in failover order: the home region's providers before
	// the other region's, each by priority, then file order. Policies
	// choose the first attempt among them (policy.go).
	targets []target
	// unavailable, when set, answers every request for the model: none of
	// its providers has a usable credential.
	unavailable      *apierror.Error
	policy           routingPolicy
	firstByteTimeout time.Duration
	dropUnsupported  bool
	tokenizer        string
	dimensions       bool
	contextWindow    int
	chat, embeddings bool
	pricing          config.Pricing
	// Prompt caching (affinity.go): cache affine first choices, the
	// latency policy's tolerance, and the options anthropic attempts
	// translate with.
	affinity         bool
	latencyTolerance float64
	anthropicOpts    anthropic.Options
	// listing is the model's object in GET /v1/models, rendered once.
	listing []byte
	// routeHeader (catalog.RouteHeader) and metaID (the id as dynamic
	// metadata), built once and shared by replies.
	routeHeader *corev3.HeaderValueOption
	metaID      *structpb.Value
	// idJSON is the id as a JSON string: the model of every response
	// (response.go, sse.go), whatever the provider that answered calls it.
	idJSON []byte
}

// target is everything the request path needs to send a request to one
// provider, computed once per catalog rather than per request.
type target struct {
	provider      *provider
	upstreamModel string
	// modelJSON is upstreamModel as a JSON string, spliced into bodies.
	modelJSON []byte
	weight    int
	home      bool // in the gateway's home region
	// Upstream paths (including the base path) for each operation.
	chatPath, streamPath, embedPath string
	// Header mutations built once and shared by replies: the first-choice
	// and prepared headers naming the provider (request.go), and :path
	// for OpenAI-kind chat and embeddings attempts.
	firstHeader, preparedHeader *corev3.HeaderValueOption
	chatPathHeader, embedHeader *corev3.HeaderValueOption
}

// target returns the model's target on the named provider.
func (m *modelRoute) target(provider string) *target {
	for i := range m.targets {
		if m.targets[i].provider.name == provider {
			return &m.targets[i]
		}
	}
	return nil
}

// SetCatalog atomically replaces the routing state. It fails, keeping the
// previous state, if the catalog is inconsistent. A provider whose
// api_key_env names an empty variable is logged as an error and left out of
// its models' targets: one missing credential must not take down every
// model.
func (s *Server) SetCatalog(c *catalog.Catalog) error {
	if c == nil {
		return errors.New("extproc: nil catalog")
	}
	var errs []error
	now := time.Now()
	rt := &routeTable{
		region:    c.Region,
		models:    make(map[string]*modelRoute, len(c.Models)),
		providers: make(map[string]*provider, len(c.Providers)),
	}
	for _, p := range c.Providers {
		if _, dup := rt.providers[p.Name]; dup {
			errs = append(errs, fmt.Errorf("provider %q: duplicate", p.Name))
			continue
		}
		pr, err := s.newProvider(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("provider %q: %w", p.Name, err))
			continue
		}
		rt.providers[p.Name] = pr
		if pr.missing != "" {
			s.log.Error("extproc: provider unavailable; its models fail over to other providers or answer 503",
				"provider", p.Name, "reason", pr.missing)
		}
	}
	for i := range c.Models {
		m := &c.Models[i]
		if _, dup := rt.models[m.ID]; dup {
			errs = append(errs, fmt.Errorf("model %q: duplicate", m.ID))
			continue
		}
		r, err := s.newModelRoute(rt, m, now)
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", m.ID, err))
			continue
		}
		rt.models[m.ID] = r
		rt.order = append(rt.order, r)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("extproc: catalog rejected: %w", err)
	}
	for _, m := range rt.order {
		if len(m.targets) > 1 {
			for _, t := range m.targets {
				t.provider.compared = true
			}
		}
	}
	s.routes.Store(rt)
	s.limits.setTiers(c.Tiers)
	s.log.Info("extproc: catalog loaded", "models", len(rt.models), "providers", len(rt.providers))
	return nil
}

func (s *Server) newProvider(p config.Provider) (*provider, error) {
	kind, ok := parseKind(p.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", p.Kind)
	}
	u, err := url.Parse(p.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("base_url: %w", err)
	}
	pr := &provider{
		name: p.Name, kind: kind, region: p.Region,
		basePath: strings.TrimSuffix(u.EscapedPath(), "/"),
		health:   s.healthOf(p.Name),
		forward:  p.ForwardHeaders,
	}
	if p.APIKeyEnv == "" {
		pr.finish()
		return pr, nil
	}
	cred := strings.TrimSpace(s.getenv(p.APIKeyEnv))
	switch {
	case cred == "":
		pr.missing = fmt.Sprintf("environment variable %s (api_key_env) is empty or unset", p.APIKeyEnv)
		return pr, nil
	case !validHeaderValue(cred):
		// Envoy rejects the whole mutation for an invalid header value;
		// say so once, naming the variable, rather than on every request.
		pr.missing = fmt.Sprintf("environment variable %s (api_key_env) holds characters not allowed in a header", p.APIKeyEnv)
		return pr, nil
	}
	pr.credential = cred
	if kind == kindOpenAI {
		pr.authorization = "Bearer " + cred
	}
	pr.finish()
	return pr, nil
}

// finish builds the provider's shared reply parts.
func (p *provider) finish() {
	p.metaName = structpb.NewStringValue(p.name)
	if p.kind != kindOpenAI {
		return
	}
	for _, h := range vendorHeaders {
		if h != "authorization" || p.authorization == "" {
			p.removeOpenAI = append(p.removeOpenAI, h)
		}
	}
	p.removeOpenAI = slices.Clip(p.removeOpenAI)
	if p.authorization != "" {
		p.authHeader = setHeader("authorization", p.authorization)
	}
}

func (s *Server) newModelRoute(rt *routeTable, m *config.Model, now time.Time) (*modelRoute, error) {
	if len(m.Providers) == 0 {
		return nil, errors.New("no providers")
	}
	r := &modelRoute{
		id:               m.ID,
		policy:           parsePolicy(m.Routing),
		firstByteTimeout: m.FirstByteTimeout,
		dropUnsupported:  m.DropUnsupported,
		tokenizer:        m.Tokenizer,
		dimensions:       m.Dimensions,
		contextWindow:    m.ContextWindow,
		pricing:          m.Pricing,
		targets:          make([]target, 0, len(m.Providers)),
	}
	if r.firstByteTimeout <= 0 {
		r.firstByteTimeout = config.DefaultFirstByteTimeout
	}
	if r.contextWindow <= 0 {
		r.contextWindow = config.DefaultContextWindow
	}
	caps := m.Capabilities
	if len(caps) == 0 {
		// The config's default; catalogs built without defaults applied
		// (tests, older control planes) mean the same.
		caps = []string{"chat", "tools"}
	}
	r.chat, r.embeddings = slices.Contains(caps, "chat"), slices.Contains(caps, "embeddings")
	r.setPromptCache(m)
	type ranked struct {
		t        target
		priority int
		index    int
	}
	var rs []ranked
	var errs []error
	var missing []string
	for i, mp := range m.Providers {
		p, ok := rt.providers[mp.Provider]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown provider %q", mp.Provider))
			continue
		}
		if mp.UpstreamModel == "" {
			errs = append(errs, fmt.Errorf("provider %q: empty upstream_model", mp.Provider))
			continue
		}
		if p.missing != "" {
			missing = append(missing, p.name+": "+p.missing)
			continue
		}
		js, err := json.Marshal(mp.UpstreamModel)
		if err != nil {
			return nil, fmt.Errorf("provider %q: %w", mp.Provider, err)
		}
		t := target{provider: p, upstreamModel: mp.UpstreamModel, modelJSON: js, weight: mp.Weight,
			home: p.region == "" || rt.region == "" || p.region == rt.region}
		switch p.kind {
		case kindOpenAI:
			// OpenAI-style base URLs end in the API version (.../v1).
			t.chatPath = p.basePath + "/chat/completions"
			t.streamPath = t.chatPath
			t.embedPath = p.basePath + "/embeddings"
			t.chatPathHeader = setHeader(":path", t.chatPath)
			t.embedHeader = setHeader(":path", t.embedPath)
			t.preparedHeader = setHeader(preparedHeader, p.name)
		case kindAnthropic:
			t.chatPath = p.basePath + anthropic.Path(false)
			t.streamPath = p.basePath + anthropic.Path(true)
		case kindGemini:
			t.chatPath = p.basePath + gemini.ChatPath(mp.UpstreamModel, false)
			t.streamPath = p.basePath + gemini.ChatPath(mp.UpstreamModel, true)
			t.embedPath = p.basePath + gemini.EmbedPath(mp.UpstreamModel)
		}
		t.firstHeader = setHeader(catalog.FirstHeader, p.name)
		rs = append(rs, ranked{t, mp.Priority, i})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Failover order, as the control plane orders the model's aggregate
	// cluster: home region first, then priority, then file order.
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if a.t.home != b.t.home {
			if a.t.home {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.priority, b.priority)
	})
	for _, x := range rs {
		r.targets = append(r.targets, x.t)
	}
	if len(r.targets) == 0 && len(missing) > 0 {
		r.unavailable = apierror.Server(http.StatusServiceUnavailable, "provider_unavailable",
			fmt.Sprintf("The model `%s` is not available: none of its providers is configured on this gateway.", m.ID))
	}
	listing, err := json.Marshal(modelObject{
		ID: m.ID, Object: "model", Created: s.createdAt(m.ID, now), OwnedBy: ownedBy(m.ID),
		ContextWindow: r.contextWindow, Capabilities: caps,
	})
	if err != nil {
		return nil, err
	}
	r.listing = listing
	r.routeHeader = setHeader(catalog.RouteHeader, m.ID)
	r.metaID = structpb.NewStringValue(m.ID)
	r.idJSON = jsonquote.Append(nil, m.ID)
	return r, nil
}

// CatalogHandler is the xDS handler for the RTDS type
// (resourcev3.RuntimeType): it decodes the catalog.RuntimeName resource and
// applies it with SetCatalog. Other runtime layers are ignored. An error
// means the update was rejected (NACK) and the previous catalog stays.
func (s *Server) CatalogHandler(ctx context.Context, version string, resources map[string]proto.Message) error {
	res, ok := resources[catalog.RuntimeName]
	if !ok {
		return fmt.Errorf("extproc: RTDS version %q has no %q resource", version, catalog.RuntimeName)
	}
	r, ok := res.(*runtimev3.Runtime)
	if !ok {
		return fmt.Errorf("extproc: RTDS resource %q is a %T, not a Runtime", catalog.RuntimeName, res)
	}
	c, err := catalog.Decode(r)
	if err != nil {
		return fmt.Errorf("extproc: RTDS version %q: %w", version, err)
	}
	if err := s.SetCatalog(c); err != nil {
		return fmt.Errorf("extproc: RTDS version %q: %w", version, err)
	}
	return nil
}

// validHeaderValue reports whether v may be sent as an HTTP header value:
// visible ASCII, space and tab only.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
