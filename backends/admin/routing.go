package admin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// Routing endpoints: live changes of which providers serve a model, and in
// what order (docs/routing-design.md). Every accepted change is validated
// as a whole and served by the control plane as a new snapshot version,
// which data planes and extprocs apply within a second, without a restart;
// requests in flight keep the configuration they started with. A refused
// change changes nothing.
//
//	GET   /admin/v1/routing                                 every model's routing, the drained providers, the version
//	GET   /admin/v1/models/{vendor}/{model}                 one model's routing
//	PATCH /admin/v1/models/{vendor}/{model}                 {routing?, first_byte_timeout?, providers?: [{provider, upstream_model?, weight?, priority?}]}
//	PATCH /admin/v1/models/{vendor}/{model}/providers/{p}   {upstream_model?, weight?, priority?}
//	POST  /admin/v1/providers/{name}/drain                  take a provider out of every model's rotation
//	POST  /admin/v1/providers/{name}/undrain                put it back
//	DELETE /admin/v1/routing/overrides[?model={vendor}/{model}]  drop the models' overrides: the file's routing applies again
//
// providers replaces the model's list (in failover order by priority, then
// list order); an entry without upstream_model keeps the one the model
// already has for that provider. Changes are kept in the control plane's
// routing overlay (controlplane.RoutingStore: the key database, or
// PostgreSQL in a fleet), shared by every control-plane replica and kept
// across restarts and reloads of the configuration file, until undrained
// or cleared.

// Routing is the control plane's side of routing changes;
// *controlplane.Server satisfies it.
type Routing interface {
	// Config is the configuration in force (drained providers removed).
	Config() *config.Config
	// BaseConfig is the configuration as loaded or last edited, and the
	// drained providers.
	BaseConfig() (*config.Config, []string)
	Version() string
	Modify(ctx context.Context, what string, change func(*config.Config) error) (string, error)
	Drain(ctx context.Context, provider string) (string, error)
	Undrain(ctx context.Context, provider string) (string, error)
	// ClearOverrides drops model's routing override, every model's if "".
	ClearOverrides(ctx context.Context, model string) (string, error)
	// Overlay is the stored routing changes in force and their version.
	Overlay() (controlplane.RoutingOverlay, int64)
}

func (a *api) routes(mux *http.ServeMux) {
	if a.opts.Routing == nil {
		return
	}
	mux.HandleFunc("GET /admin/v1/routing", a.routingList)
	mux.HandleFunc("GET /admin/v1/models/{vendor}/{model}", a.modelShow)
	mux.HandleFunc("PATCH /admin/v1/models/{vendor}/{model}", a.modelSet)
	mux.HandleFunc("PATCH /admin/v1/models/{vendor}/{model}/providers/{provider}", a.modelProviderSet)
	mux.HandleFunc("POST /admin/v1/providers/{name}/drain", a.drain)
	mux.HandleFunc("POST /admin/v1/providers/{name}/undrain", a.undrain)
	mux.HandleFunc("DELETE /admin/v1/routing/overrides", a.clearOverrides)
}

// modelRoutingJSON is a model's routing as the admin API shows it.
type modelRoutingJSON struct {
	ID               string              `json:"id"`
	Object           string              `json:"object"`
	Routing          string              `json:"routing"`
	FirstByteTimeout string              `json:"first_byte_timeout"`
	IdleTimeout      string              `json:"idle_timeout"`
	Providers        []modelProviderJSON `json:"providers"`
	// Failover is the order attempts go in from the gateway's home region
	// (drained providers left out): the model's default route. A request's
	// first attempt goes to extproc's choice, then on in this order.
	Failover []string `json:"failover"`
}

type modelProviderJSON struct {
	Provider      string `json:"provider"`
	UpstreamModel string `json:"upstream_model"`
	Weight        int    `json:"weight"`
	Priority      int    `json:"priority"`
	Region        string `json:"region"`
	Drained       bool   `json:"drained"`
}

type routingJSON struct {
	Object  string             `json:"object"`
	Version string             `json:"version"`
	Region  string             `json:"region"`
	Drained []string           `json:"drained"`
	Models  []modelRoutingJSON `json:"models"`
	// Overrides are the models whose routing the overlay sets, and
	// OverlayVersion the overlay's version in its store.
	Overrides      []string `json:"overrides"`
	OverlayVersion int64    `json:"overlay_version"`
}

func modelView(base, eff *config.Config, drained []string, m config.Model) modelRoutingJSON {
	out := modelRoutingJSON{ID: m.ID, Object: "model.routing", Routing: m.Routing,
		FirstByteTimeout: m.FirstByteTimeout.String(), IdleTimeout: m.IdleTimeout.String(),
		Providers: []modelProviderJSON{}, Failover: []string{}}
	for _, mp := range m.Providers {
		j := modelProviderJSON{Provider: mp.Provider, UpstreamModel: mp.UpstreamModel, Weight: mp.Weight,
			Priority: mp.Priority, Drained: slices.Contains(drained, mp.Provider)}
		if p, ok := base.Provider(mp.Provider); ok {
			j.Region = p.Region
		}
		out.Providers = append(out.Providers, j)
	}
	for _, em := range eff.Models {
		if em.ID == m.ID {
			for _, c := range controlplane.FailoverOrder(eff, em, eff.Region, "") {
				out.Failover = append(out.Failover, strings.TrimPrefix(c, "provider_"))
			}
		}
	}
	return out
}

func (a *api) routingList(w http.ResponseWriter, _ *http.Request) {
	base, drained := a.opts.Routing.BaseConfig()
	eff := a.opts.Routing.Config()
	out := routingJSON{Object: "routing", Version: a.opts.Routing.Version(), Region: eff.Region,
		Drained: append([]string{}, drained...), Models: []modelRoutingJSON{}}
	for _, m := range base.Models {
		out.Models = append(out.Models, modelView(base, eff, drained, m))
	}
	ov, ovVersion := a.opts.Routing.Overlay()
	out.Overrides, out.OverlayVersion = slices.Sorted(maps.Keys(ov.Models)), ovVersion
	if out.Overrides == nil {
		out.Overrides = []string{}
	}
	writeJSON(w, http.StatusOK, out)
}

// clearOverrides drops the routing overrides of the model the query names,
// or of every model.
func (a *api) clearOverrides(w http.ResponseWriter, r *http.Request) {
	model := r.URL.Query().Get("model")
	if model != "" {
		base, _ := a.opts.Routing.BaseConfig()
		if !slices.ContainsFunc(base.Models, func(m config.Model) bool { return m.ID == model }) {
			// A model the file dropped may still have a stale override to clear.
			ov, _ := a.opts.Routing.Overlay()
			if _, ok := ov.Models[model]; !ok {
				modelNotFound(w, model)
				return
			}
		}
	}
	version, err := a.opts.Routing.ClearOverrides(r.Context(), model)
	if err != nil {
		a.routingFailed(w, err)
		return
	}
	what := "clear overrides"
	if model != "" {
		what += " of " + model
	}
	a.opts.Logger.Info("admin: routing changed", "change", what, "version", version, "remote", r.RemoteAddr)
	ov, ovVersion := a.opts.Routing.Overlay()
	overrides := slices.Sorted(maps.Keys(ov.Models))
	if overrides == nil {
		overrides = []string{}
	}
	writeJSON(w, http.StatusOK, struct {
		Object         string   `json:"object"`
		Version        string   `json:"version"`
		Overrides      []string `json:"overrides"`
		OverlayVersion int64    `json:"overlay_version"`
	}{"routing.overrides", version, overrides, ovVersion})
}

// modelID is the model the path names: model ids are <vendor>/<model>.
func modelID(r *http.Request) string { return r.PathValue("vendor") + "/" + r.PathValue("model") }

func (a *api) modelShow(w http.ResponseWriter, r *http.Request) {
	base, drained := a.opts.Routing.BaseConfig()
	id := modelID(r)
	for _, m := range base.Models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, a.withVersion(modelView(base, a.opts.Routing.Config(), drained, m), a.opts.Routing.Version()))
			return
		}
	}
	modelNotFound(w, id)
}

type providerSettings struct {
	Provider      string  `json:"provider"`
	UpstreamModel *string `json:"upstream_model"`
	Weight        *int    `json:"weight"`
	Priority      *int    `json:"priority"`
}

type modelSettings struct {
	Routing          *string             `json:"routing"`
	FirstByteTimeout *string             `json:"first_byte_timeout"`
	IdleTimeout      *string             `json:"idle_timeout"`
	Providers        *[]providerSettings `json:"providers"`
}

// errModelNotFound marks a change naming a model the configuration lacks.
var errModelNotFound = errors.New("model not found")

func (a *api) modelSet(w http.ResponseWriter, r *http.Request) {
	var in modelSettings
	if !readJSON(w, r, &in) {
		return
	}
	var fbt, idle time.Duration
	for _, d := range []struct {
		name string
		in   *string
		out  *time.Duration
	}{{"first_byte_timeout", in.FirstByteTimeout, &fbt}, {"idle_timeout", in.IdleTimeout, &idle}} {
		if d.in == nil {
			continue
		}
		v, err := time.ParseDuration(*d.in)
		if err != nil || v <= 0 {
			badRequest(w, d.name, fmt.Errorf("%s must be a positive duration such as \"30s\"", d.name))
			return
		}
		*d.out = v
	}
	id := modelID(r)
	a.modify(w, r, id, "set model "+id, func(m *config.Model) error {
		if in.Routing != nil {
			m.Routing = *in.Routing
		}
		if in.FirstByteTimeout != nil {
			m.FirstByteTimeout = fbt
		}
		if in.IdleTimeout != nil {
			m.IdleTimeout = idle
		}
		if in.Providers == nil {
			return nil
		}
		if len(*in.Providers) == 0 {
			return fmt.Errorf("%w: providers: at least one provider is required", controlplane.ErrInvalid)
		}
		next := make([]config.ModelProvider, 0, len(*in.Providers))
		for i, ps := range *in.Providers {
			mp := config.ModelProvider{Provider: ps.Provider}
			if j := slices.IndexFunc(m.Providers, func(old config.ModelProvider) bool { return old.Provider == ps.Provider }); j >= 0 {
				mp = m.Providers[j]
			}
			if err := ps.apply(&mp); err != nil {
				return fmt.Errorf("%w: providers[%d]: %w", controlplane.ErrInvalid, i, err)
			}
			next = append(next, mp)
		}
		m.Providers = next
		return nil
	})
}

func (a *api) modelProviderSet(w http.ResponseWriter, r *http.Request) {
	var in providerSettings
	if !readJSON(w, r, &in) {
		return
	}
	id, name := modelID(r), r.PathValue("provider")
	if in.Provider != "" && in.Provider != name {
		badRequest(w, "provider", fmt.Errorf("the body names provider %q, the path %q", in.Provider, name))
		return
	}
	a.modify(w, r, id, "set model "+id+" provider "+name, func(m *config.Model) error {
		j := slices.IndexFunc(m.Providers, func(mp config.ModelProvider) bool { return mp.Provider == name })
		if j < 0 {
			return fmt.Errorf("%w: provider %q does not serve model %q (set the model's providers to add it)", controlplane.ErrNotFound, name, id)
		}
		if err := in.apply(&m.Providers[j]); err != nil {
			return fmt.Errorf("%w: %w", controlplane.ErrInvalid, err)
		}
		return nil
	})
}

// apply sets the given fields on mp; a new entry needs upstream_model.
func (p providerSettings) apply(mp *config.ModelProvider) error {
	if p.UpstreamModel != nil {
		mp.UpstreamModel = *p.UpstreamModel
	}
	if mp.UpstreamModel == "" {
		return fmt.Errorf("upstream_model is required for provider %q, which does not serve the model yet", mp.Provider)
	}
	if p.Weight != nil {
		if *p.Weight <= 0 {
			return errors.New("weight must be positive")
		}
		mp.Weight = *p.Weight
	}
	if p.Priority != nil {
		mp.Priority = *p.Priority
	}
	return nil
}

// modify applies change to the model id and answers with its new routing.
func (a *api) modify(w http.ResponseWriter, r *http.Request, id, what string, change func(*config.Model) error) {
	version, err := a.opts.Routing.Modify(r.Context(), what, func(cfg *config.Config) error {
		for i := range cfg.Models {
			if cfg.Models[i].ID == id {
				return change(&cfg.Models[i])
			}
		}
		return errModelNotFound
	})
	if err != nil {
		if errors.Is(err, errModelNotFound) {
			modelNotFound(w, id)
			return
		}
		a.routingFailed(w, err)
		return
	}
	a.opts.Logger.Info("admin: routing changed", "change", what, "version", version, "remote", r.RemoteAddr)
	base, drained := a.opts.Routing.BaseConfig()
	for _, m := range base.Models {
		if m.ID == id {
			writeJSON(w, http.StatusOK, a.withVersion(modelView(base, a.opts.Routing.Config(), drained, m), version))
			return
		}
	}
	modelNotFound(w, id)
}

func (a *api) drain(w http.ResponseWriter, r *http.Request)   { a.drainOp(w, r, true) }
func (a *api) undrain(w http.ResponseWriter, r *http.Request) { a.drainOp(w, r, false) }

func (a *api) drainOp(w http.ResponseWriter, r *http.Request, drain bool) {
	name := r.PathValue("name")
	op, what := a.opts.Routing.Undrain, "undrain"
	if drain {
		op, what = a.opts.Routing.Drain, "drain"
	}
	version, err := op(r.Context(), name)
	if err != nil {
		a.routingFailed(w, err)
		return
	}
	a.opts.Logger.Info("admin: routing changed", "change", what+" "+name, "version", version, "remote", r.RemoteAddr)
	_, drained := a.opts.Routing.BaseConfig()
	writeJSON(w, http.StatusOK, struct {
		Object   string   `json:"object"`
		Provider string   `json:"provider"`
		Drained  bool     `json:"drained"`
		Version  string   `json:"version"`
		All      []string `json:"drained_providers"`
	}{"provider.drain", name, slices.Contains(drained, name), version, append([]string{}, drained...)})
}

// withVersion adds the snapshot version that carries the model's routing.
func (a *api) withVersion(m modelRoutingJSON, version string) any {
	return struct {
		modelRoutingJSON
		Version string `json:"version"`
	}{m, version}
}

// routingFailed answers a refused change: 404 for an unknown provider or
// model, 409 for a drain that would leave a model without providers, 400
// naming the fields for a configuration that does not validate.
func (a *api) routingFailed(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, controlplane.ErrNotFound):
		(&apierror.Error{Status: http.StatusNotFound, Code: "not_found", Message: err.Error()}).Write(w)
	case errors.Is(err, controlplane.ErrConflict):
		(&apierror.Error{Status: http.StatusConflict, Code: "conflict", Message: err.Error()}).Write(w)
	case errors.Is(err, controlplane.ErrInvalid):
		badRequest(w, "", errors.New(describeInvalid(err)))
	default:
		a.opts.Logger.Error("admin: routing change failed", "error", err)
		apierror.Server(http.StatusInternalServerError, "server_error", "The routing change failed.").Write(w)
	}
}

// describeInvalid names the fields of configuration errors without the
// line numbers of the in-memory document they were found in.
func describeInvalid(err error) string {
	var parts []string
	var walk func(error)
	walk = func(e error) {
		var ce *config.Error
		if errors.As(e, &ce) && e == error(ce) {
			parts = append(parts, ce.Field+": "+ce.Msg)
			return
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	if len(parts) == 0 {
		return strings.TrimPrefix(err.Error(), controlplane.ErrInvalid.Error()+": ")
	}
	return "invalid configuration: " + strings.Join(parts, "; ")
}

func modelNotFound(w http.ResponseWriter, id string) {
	(&apierror.Error{Status: http.StatusNotFound, Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("No model %q in the configuration.", id)}).Write(w)
}
