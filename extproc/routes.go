package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/keys"
)

// routeTable is the routing state derived from one catalog. It is immutable
// once built, so requests read it without locks and a new catalog replaces
// it whole.
type routeTable struct {
	models map[string]*modelRoute
}

// modelRoute is one client-visible model and the providers that serve it, in
// catalog order.
type modelRoute struct {
	id      string
	targets []target
}

// target is everything the request path needs to send a request to one
// provider, computed once per catalog rather than per request.
type target struct {
	provider      string
	upstreamModel string
	// modelJSON is upstreamModel as a JSON string, spliced into bodies.
	modelJSON []byte
	// authorization is the authorization header value for the provider, or
	// "" when the provider takes no credential.
	authorization string
}

// policy chooses the provider for a request. Policies (weights, failover,
// latency, the key's region or tier) plug in here; the route always has at
// least one target.
type policy func(r *modelRoute, k *keys.Key) *target

// firstTarget is the default policy: the model's first provider.
func firstTarget(r *modelRoute, _ *keys.Key) *target { return &r.targets[0] }

// SetCatalog atomically replaces the routing state. It fails, keeping the
// previous state, if the catalog is inconsistent or a provider's api_key_env
// names an environment variable that is empty: a provider without its
// credential would fail every request it is sent.
func (s *Server) SetCatalog(c *catalog.Catalog) error {
	if c == nil {
		return errors.New("extproc: nil catalog")
	}
	var errs []error
	auth := make(map[string]string, len(c.Providers))
	for _, p := range c.Providers {
		if _, dup := auth[p.Name]; dup {
			errs = append(errs, fmt.Errorf("provider %q: duplicate", p.Name))
			continue
		}
		auth[p.Name] = ""
		if p.APIKeyEnv == "" {
			continue
		}
		cred := strings.TrimSpace(s.getenv(p.APIKeyEnv))
		switch {
		case cred == "":
			errs = append(errs, fmt.Errorf("provider %q: environment variable %s is empty or unset", p.Name, p.APIKeyEnv))
		case !validHeaderValue(cred):
			// Envoy rejects the whole mutation for an invalid header value;
			// fail here, naming the variable, rather than on every request.
			errs = append(errs, fmt.Errorf("provider %q: environment variable %s holds characters not allowed in a header", p.Name, p.APIKeyEnv))
		default:
			auth[p.Name] = "Bearer " + cred
		}
	}
	rt := &routeTable{models: make(map[string]*modelRoute, len(c.Models))}
	for _, m := range c.Models {
		if _, dup := rt.models[m.ID]; dup {
			errs = append(errs, fmt.Errorf("model %q: duplicate", m.ID))
			continue
		}
		if len(m.Providers) == 0 {
			errs = append(errs, fmt.Errorf("model %q: no providers", m.ID))
			continue
		}
		r := &modelRoute{id: m.ID, targets: make([]target, 0, len(m.Providers))}
		for _, mp := range m.Providers {
			a, ok := auth[mp.Provider]
			if !ok {
				errs = append(errs, fmt.Errorf("model %q: unknown provider %q", m.ID, mp.Provider))
				continue
			}
			if mp.UpstreamModel == "" {
				errs = append(errs, fmt.Errorf("model %q: provider %q: empty upstream_model", m.ID, mp.Provider))
				continue
			}
			js, err := json.Marshal(mp.UpstreamModel)
			if err != nil {
				return fmt.Errorf("extproc: model %q: %w", m.ID, err)
			}
			r.targets = append(r.targets, target{provider: mp.Provider, upstreamModel: mp.UpstreamModel, modelJSON: js, authorization: a})
		}
		rt.models[m.ID] = r
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("extproc: catalog rejected: %w", err)
	}
	s.routes.Store(rt)
	s.limits.setTiers(c.Tiers)
	s.log.Info("extproc: catalog loaded", "models", len(rt.models), "providers", len(auth))
	return nil
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
