package controlplane

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	runtimeservice "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	secretservice "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"gopkg.in/yaml.v3"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/metrics"
)

// Snapshots are per home region (docs/routing-design.md): a node gets the
// snapshot of the region in its locality, so each gateway instance fails
// over from its own region to the other. Nodes without a locality, or with
// a region the configuration does not know, get the snapshot of the
// configuration's region.
const defaultNodeKey = "default"

// RegionNodeKey is the snapshot cache key of nodes in region.
func RegionNodeKey(region string) string { return "region:" + region }

// NodeHash maps a node to its snapshot cache key: RegionNodeKey of its
// locality's region, or the default key, under which the configuration's
// own region's snapshot is set. It maps by region, not by node id, so nodes
// that connect later under ids nobody announced are served too.
type NodeHash struct{}

// ID implements cachev3.NodeHash.
func (NodeHash) ID(n *corev3.Node) string {
	if r := n.GetLocality().GetRegion(); slices.Contains(config.Regions, r) {
		return RegionNodeKey(r)
	}
	return defaultNodeKey
}

// Errors of configuration changes (Modify, Drain, Undrain), for callers
// that map them to answers: wrapped, so errors.Is finds them.
var (
	// ErrInvalid: the change leaves a configuration that does not validate
	// or that Envoy would refuse.
	ErrInvalid = errors.New("invalid configuration")
	// ErrNotFound: the change names a provider or model that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the change cannot be made in the current state (draining
	// a model's last provider).
	ErrConflict = errors.New("conflict")
)

// Server serves the snapshot of the configuration in force over ADS and the
// per-type discovery services, and owns changes to that configuration: a
// new file (Update, WatchFile), routing edits (Modify) and draining
// providers (Drain, Undrain). Every change is validated as a whole before
// anything is served, so a bad change is refused and never half-applied,
// and every accepted change is one new snapshot version for every node.
type Server struct {
	// PhaseTimeout bounds how long a route change waits for extprocs to
	// take the new catalog before data planes get the new routes;
	// DefaultPhaseTimeout if 0.
	PhaseTimeout time.Duration
	// RetireAfter is how long the catalog keeps routes a change removed, for
	// requests that started on them; 0: computed from the configuration
	// (see retireAfter).
	RetireAfter time.Duration

	logger *slog.Logger
	cache  cachev3.SnapshotCache
	xds    serverv3.Server
	acks   *ackTracker

	mu      sync.Mutex // serialises changes so versions reach the cache in order
	version uint64
	// base is the configuration as loaded or last edited; drained are the
	// providers taken out of every model's rotation; cfg, in force, is base
	// without them.
	base    *config.Config
	drained []string
	snaps   map[string]*cachev3.Snapshot // by node key, as last set
	// ov is the routing overlay (overlay.go): the admin API's changes, kept
	// in a RoutingStore and applied on top of the configuration file.
	ov overlayState
	// retired are earlier route sets the catalog keeps for requests in
	// flight (see retiredRoutes); retireTimer trims them.
	retired     []retiredRoutes
	retireTimer *time.Timer
	cfg         atomic.Pointer[config.Config]
	vstr        atomic.Pointer[string]
	// file is the state of WatchFile.
	file fileState
	// filePolled, a test hook, is told after each of WatchFile's looks at
	// the file the hash of the content it last read, so tests wait for
	// the look instead of sleeping.
	filePolled func(seen [sha256.Size]byte)
	// Reloads counts configuration changes by source and result
	// (WritePrometheus); lastApplied is when one last took effect.
	reloads     *metrics.CounterVec
	lastApplied atomic.Int64 // Unix seconds

	// DefaultBackends, when set before the first Update, is the backends
	// service used when a configuration names none: `switchyard run` serves
	// the backends in process, on an address only it knows.
	DefaultBackends *config.Backends
}

// New returns a Server with no snapshot: subscribers wait until the first
// Update. A nil logger discards logs.
func New(logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// ADS mode makes the cache hold back EDS and RDS answers until the
	// request names every resource of the snapshot, which keeps Envoy's view
	// consistent while it moves from one snapshot to the next.
	cache := cachev3.NewSnapshotCache(true, NodeHash{}, slogAdapter{logger})
	acks := newAckTracker()
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(_ context.Context, id int64, typeURL string) error {
			logger.Debug("xds stream opened", "stream", id, "type", typeURL)
			return nil
		},
		StreamClosedFunc: func(id int64, node *corev3.Node) {
			acks.closed(id)
			logger.Debug("xds stream closed", "stream", id, "node", node.GetId())
		},
		StreamRequestFunc: func(id int64, req *discoveryv3.DiscoveryRequest) error {
			acks.request(id, req)
			// A NACK means a consumer is running on older configuration than
			// we think; it is the one signal that a snapshot is unusable.
			if d := req.GetErrorDetail(); d != nil {
				logger.Warn("xds NACK", "stream", id, "node", req.GetNode().GetId(), "type", req.GetTypeUrl(),
					"version", req.GetVersionInfo(), "nonce", req.GetResponseNonce(), "error", d.GetMessage())
			}
			return nil
		},
	}
	return &Server{
		reloads: metrics.NewCounterVec("switchyard_config_reloads_total",
			"Configuration changes, by source (file: loaded or reloaded from the configuration; api: the admin API's routing changes) and result (success, failure: refused, the previous configuration stays in force).",
			"source", "result"),
		logger:       logger,
		cache:        cache,
		acks:         acks,
		PhaseTimeout: DefaultPhaseTimeout,
		// The server context only ends streams; grpc.Server.Stop does that too,
		// so a background context keeps the API free of lifecycle plumbing.
		xds: serverv3.NewServer(context.Background(), cache, cb),
	}
}

// Update replaces the configuration file's configuration with cfg (which
// must have passed config validation) and serves it, with the routing
// overlay on top, under the next version ("1", "2", ...). The first Update
// loads the overlay from the RoutingStore, so the first snapshot already
// has it. Overlay entries cfg no longer allows are logged and skipped. It
// returns the version. When the change is refused, the current snapshot
// stays in place and no version is used up.
func (s *Server) Update(ctx context.Context, cfg *config.Config) (string, error) {
	if cfg == nil {
		return "", errors.New("controlplane: nil config")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadOverlayLocked(ctx); err != nil {
		s.countChange("update", err)
		return "", err
	}
	base, drained, err := s.applyOverlayLocked(cfg, s.ov.overlay)
	if err != nil {
		s.countChange("update", err)
		return "", err
	}
	version, err := s.setLocked(ctx, base, drained, "update")
	if err == nil {
		// A stored overlay the previous file refused may apply to this one.
		s.ov.file, s.ov.failed = cfg, 0
	}
	return version, err
}

// Modify applies change to a copy of the configuration and serves the
// result, like Update. change may edit models' routing settings (policy,
// timeouts, providers); unset fields of new entries get their defaults.
// The models it changed become overrides in the routing overlay, stored
// before they are served. An error from change is returned as is; a result
// that does not validate, or that changes anything else, is refused with
// ErrInvalid.
func (s *Server) Modify(ctx context.Context, what string, change func(*config.Config) error) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		return "", errors.New("controlplane: no configuration yet")
	}
	return s.modifyOverlay(ctx, what, change)
}

// Drain takes provider out of every model's rotation: new requests never go
// to it, while requests already on it finish (each request keeps the
// configuration it started with). It stays drained across configuration
// changes until Undrain. Draining the last provider of a model is refused
// with ErrConflict.
func (s *Server) Drain(ctx context.Context, provider string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		return "", errors.New("controlplane: no configuration yet")
	}
	if _, ok := s.base.Provider(provider); !ok {
		return "", fmt.Errorf("controlplane: provider %q: %w", provider, ErrNotFound)
	}
	return s.changeOverlayLocked(ctx, "drain "+provider, func(ov *RoutingOverlay, base *config.Config, drained []string) error {
		if slices.Contains(drained, provider) {
			return errUnchanged
		}
		if _, err := withoutDrained(base, append(slices.Clone(drained), provider)); err != nil {
			return err
		}
		if !slices.Contains(ov.Drained, provider) {
			ov.Drained = append(ov.Drained, provider)
			slices.Sort(ov.Drained)
		}
		return nil
	})
}

// Undrain puts a drained provider back into the rotation of the models
// that list it.
func (s *Server) Undrain(ctx context.Context, provider string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base == nil {
		return "", fmt.Errorf("controlplane: provider %q: %w", provider, ErrNotFound)
	}
	if _, ok := s.base.Provider(provider); !ok && !slices.Contains(s.ov.overlay.Drained, provider) {
		return "", fmt.Errorf("controlplane: provider %q: %w", provider, ErrNotFound)
	}
	return s.changeOverlayLocked(ctx, "undrain "+provider, func(ov *RoutingOverlay, _ *config.Config, _ []string) error {
		i := slices.Index(ov.Drained, provider)
		if i < 0 {
			return errUnchanged
		}
		ov.Drained = slices.Delete(ov.Drained, i, i+1)
		return nil
	})
}

// Config returns the configuration in force (drained providers removed from
// the models), nil before the first Update. Callers must not modify it.
func (s *Server) Config() *config.Config { return s.cfg.Load() }

// BaseConfig returns the configuration as loaded or last edited, drained
// providers included, and the drained providers. Callers must not modify it.
func (s *Server) BaseConfig() (*config.Config, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.base, slices.Clone(s.drained)
}

// Version returns the version of the snapshot in force, "" before the first.
func (s *Server) Version() string { return s.currentVersion() }

func (s *Server) currentVersion() string {
	if v := s.vstr.Load(); v != nil {
		return *v
	}
	return ""
}

// setLocked validates base without drained, builds one snapshot per region
// and sets them all under the next version.
func (s *Server) setLocked(ctx context.Context, base *config.Config, drained []string, what string) (_ string, err error) {
	defer func() { s.countChange(what, err) }()
	base, err = clone(base)
	if err != nil {
		return "", err
	}
	eff, err := withoutDrained(base, drained)
	if err != nil {
		return "", err
	}
	if eff.Backends == nil && s.DefaultBackends != nil {
		b := *s.DefaultBackends
		eff.Backends = &b
	}
	now := time.Now()
	retired := s.liveRetired(now)
	prev := s.cfg.Load()
	changed := prev != nil && !sameRoutes(prev, eff)
	if changed {
		retired = append(retired, retiredRoutes{until: now.Add(s.retireAfter(prev)), cfg: prev})
		if len(retired) > maxRetired {
			retired = retired[len(retired)-maxRetired:]
		}
	}
	cat := unionRoutes(eff, retired, false)
	version := strconv.FormatUint(s.version+1, 10)
	final := map[string]*cachev3.Snapshot{}
	for _, region := range config.Regions {
		snap, err := buildRegion(eff, cat, region, version)
		if err != nil {
			return "", fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		final[RegionNodeKey(region)] = snap
	}
	final[defaultNodeKey] = final[RegionNodeKey(eff.Region)]
	if final[defaultNodeKey] == nil {
		return "", fmt.Errorf("%w: region %q", ErrInvalid, eff.Region)
	}
	if changed {
		if err := s.catalogFirstLocked(ctx, version, unionRoutes(eff, retired, true)); err != nil {
			return "", err
		}
	}
	if err := s.setSnapshotsLocked(ctx, final); err != nil {
		return "", fmt.Errorf("controlplane: set snapshot %s: %w", version, err)
	}
	s.version++
	s.base, s.drained, s.retired = base, drained, retired
	s.cfg.Store(eff)
	s.vstr.Store(&version)
	s.scheduleRetirementLocked(now)
	s.logger.Info("xds snapshot updated", "version", version, "change", what, "drained", drained)
	return version, nil
}

// DefaultPhaseTimeout is how long a route change waits for extprocs to
// acknowledge the catalog before it gives the data planes the new routes.
const DefaultPhaseTimeout = 2 * time.Second

// maxRetired bounds the route sets kept for requests in flight.
const maxRetired = 16

// catalogTypes are the types extprocs subscribe to.
var catalogTypes = []string{resourcev3.RuntimeType}

// Route changes and version skew. Extproc's upstream phase adapts each
// attempt to the provider the data plane sent it to, so it must know every
// (model, provider) pair a data plane may route; data planes and extprocs
// get a change a few milliseconds apart, and a request keeps the routes it
// started with for its whole life (a retry after a 30 s first-byte timeout
// included). So a change is made before-break:
//
//   - the catalog extprocs get routes what the new configuration routes and
//     also, for RetireAfter, the (model, provider) pairs earlier ones did
//     (retired entries come after the new ones, with weight 0, so they are
//     never a first choice the policies prefer: the data plane's routes do
//     not include them, and a first choice they do not know falls through
//     to the model's default route); models a change removes stay in the
//     catalog only while the change rolls out;
//   - that catalog goes out first (catalogFirstLocked), and only once the
//     extprocs have acknowledged it (or PhaseTimeout passed) do the data
//     planes get the new routes.
//
// When the retired routes expire, the catalog is trimmed (a new version).

// retiredRoutes is a configuration whose routes requests in flight may
// still use until the time given.
type retiredRoutes struct {
	until time.Time
	cfg   *config.Config
}

func (s *Server) liveRetired(now time.Time) []retiredRoutes {
	var out []retiredRoutes
	for _, r := range s.retired {
		if now.Before(r.until) {
			out = append(out, r)
		}
	}
	return out
}

// retireAfter is how long the routes of prev stay known to extprocs after a
// change: RetireAfter, or by default the longest a request that started on
// them can keep making attempts (every provider of a model tried for its
// first_byte_timeout, plus extproc's message timeouts), at least a minute.
func (s *Server) retireAfter(prev *config.Config) time.Duration {
	if s.RetireAfter > 0 {
		return s.RetireAfter
	}
	d := time.Minute
	for _, m := range prev.Models {
		d = max(d, time.Duration(len(m.Providers))*m.FirstByteTimeout+4*prev.Limits.ExtProcMessageTimeout)
	}
	return d
}

// scheduleRetirementLocked arranges for the catalog to be trimmed when the
// first retired route set expires.
func (s *Server) scheduleRetirementLocked(now time.Time) {
	if s.retireTimer != nil {
		s.retireTimer.Stop()
		s.retireTimer = nil
	}
	if len(s.retired) == 0 {
		return
	}
	next := s.retired[0].until
	for _, r := range s.retired {
		if r.until.Before(next) {
			next = r.until
		}
	}
	s.retireTimer = time.AfterFunc(next.Sub(now), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.base == nil {
			return
		}
		if len(s.liveRetired(time.Now())) == len(s.retired) {
			s.scheduleRetirementLocked(time.Now()) // early: try again
			return
		}
		if _, err := s.setLocked(context.Background(), s.base, s.drained, "retire routes"); err != nil {
			s.logger.Error("retiring old routes failed", "error", err)
		}
	})
}

// catalogFirstLocked sets the catalog of cat on top of the current
// snapshots, under a transition version, and waits for the extprocs to
// acknowledge it.
func (s *Server) catalogFirstLocked(ctx context.Context, version string, cat *config.Config) error {
	tv := version + "-catalog"
	first := map[string]*cachev3.Snapshot{}
	for key, snap := range s.snaps {
		c := *cat
		if r, ok := strings.CutPrefix(key, RegionNodeKey("")); ok {
			c.Region = r
		}
		rt, err := catalog.FromConfig(&c).Runtime()
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		cp := &cachev3.Snapshot{Resources: snap.Resources}
		cp.Resources[types.Runtime] = cachev3.NewResources(tv, []types.Resource{rt})
		first[key] = cp
	}
	if err := s.setSnapshotsLocked(ctx, first); err != nil {
		return fmt.Errorf("controlplane: set snapshot %s: %w", tv, err)
	}
	timeout := s.PhaseTimeout
	if timeout <= 0 {
		timeout = DefaultPhaseTimeout
	}
	if lag := s.acks.wait(ctx, catalogTypes, tv, timeout); len(lag) > 0 {
		s.logger.Warn("route change: giving data planes the new routes before these subscribers took the catalog", "version", tv, "lagging", lag)
	}
	return nil
}

func (s *Server) setSnapshotsLocked(ctx context.Context, snaps map[string]*cachev3.Snapshot) error {
	keys := slices.Sorted(maps.Keys(snaps))
	for _, key := range keys {
		if err := s.cache.SetSnapshot(ctx, key, snaps[key]); err != nil {
			return err
		}
	}
	s.snaps = snaps
	return nil
}

// routePairs is every model's set of providers, and the providers.
func routePairs(cfg *config.Config) map[string]bool {
	out := map[string]bool{}
	for _, m := range cfg.Models {
		for _, mp := range m.Providers {
			out[m.ID+"\x00"+mp.Provider] = true
		}
	}
	for _, p := range cfg.Providers {
		out["\x00"+p.Name] = true
	}
	return out
}

// sameRoutes reports whether two configurations route the same models to
// the same providers, so a change between them needs no transition.
func sameRoutes(a, b *config.Config) bool { return maps.Equal(routePairs(a), routePairs(b)) }

// unionRoutes is next plus what the retired configurations routed that
// next does not: providers, each model's providers after next's own (with
// weight 0 and the lowest priority, so the catalog's policies prefer
// next's routes), and with models, the models next removed. Removed models
// are kept only for the switch itself: a catalog that kept them longer
// would list and admit them.
func unionRoutes(next *config.Config, retired []retiredRoutes, models bool) *config.Config {
	if len(retired) == 0 {
		return next
	}
	out := *next
	out.Providers = slices.Clone(next.Providers)
	out.Models = make([]config.Model, len(next.Models))
	for i, m := range next.Models {
		m.Providers = slices.Clone(m.Providers)
		out.Models[i] = m
	}
	// Newest first, so a pair retired twice keeps its latest settings.
	for i := len(retired) - 1; i >= 0; i-- {
		prev := retired[i].cfg
		for _, p := range prev.Providers {
			if _, ok := out.Provider(p.Name); !ok {
				out.Providers = append(out.Providers, p)
			}
		}
		for _, pm := range prev.Models {
			j := slices.IndexFunc(out.Models, func(m config.Model) bool { return m.ID == pm.ID })
			if j < 0 {
				if models {
					out.Models = append(out.Models, pm)
				}
				continue
			}
			m := &out.Models[j]
			for _, mp := range pm.Providers {
				if !slices.ContainsFunc(m.Providers, func(x config.ModelProvider) bool { return x.Provider == mp.Provider }) {
					mp.Priority, mp.Weight = math.MaxInt32, 0
					m.Providers = append(m.Providers, mp)
				}
			}
		}
	}
	return &out
}

// withoutDrained returns cfg with the drained providers removed from every
// model, refusing to leave a model without providers.
func withoutDrained(cfg *config.Config, drained []string) (*config.Config, error) {
	if len(drained) == 0 {
		return cfg, nil
	}
	out, err := clone(cfg)
	if err != nil {
		return nil, err
	}
	var empty []string
	for i := range out.Models {
		m := &out.Models[i]
		m.Providers = slices.DeleteFunc(m.Providers, func(mp config.ModelProvider) bool {
			return slices.Contains(drained, mp.Provider)
		})
		if len(m.Providers) == 0 {
			empty = append(empty, m.ID)
		}
	}
	if len(empty) > 0 {
		return nil, fmt.Errorf("controlplane: draining %v leaves no provider for %v: %w", drained, empty, ErrConflict)
	}
	return out, nil
}

// clone returns a deep copy of cfg, validated and with defaults applied, by
// a round trip through the configuration's own YAML form: a change made in
// memory passes exactly the checks a file does.
func clone(cfg *config.Config) (*config.Config, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("controlplane: encode configuration: %w", err)
	}
	out, err := config.Parse("<configuration change>", b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return out, nil
}

// Register registers ADS and the per-type LDS, RDS, CDS, EDS, SDS and RTDS
// services on g. Envoy uses ADS; the per-type services serve clients that
// subscribe to one type on its own stream.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, s.xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(g, s.xds)
	routeservice.RegisterRouteDiscoveryServiceServer(g, s.xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(g, s.xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(g, s.xds)
	secretservice.RegisterSecretDiscoveryServiceServer(g, s.xds)
	runtimeservice.RegisterRuntimeDiscoveryServiceServer(g, s.xds)
}

// Cache returns the snapshot cache, for inspection (GetSnapshot, status).
func (s *Server) Cache() cachev3.SnapshotCache { return s.cache }

// slogAdapter routes go-control-plane's logs to slog. Its info messages are
// per-request chatter (stale nonces), so they go to debug; its warnings
// include ADS holding back an answer during a routine snapshot change, so
// they go to info.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Debugf(format string, args ...any) { a.l.Debug(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Infof(format string, args ...any)  { a.l.Debug(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Warnf(format string, args ...any)  { a.l.Info(fmt.Sprintf(format, args...)) }
func (a slogAdapter) Errorf(format string, args ...any) { a.l.Error(fmt.Sprintf(format, args...)) }

// countChange records a configuration change's outcome in the reload
// metrics: "update" is the configuration file's (loaded or reloaded),
// anything else an admin API routing change.
func (s *Server) countChange(what string, err error) {
	source := "api"
	if what == "update" {
		source = "file"
	}
	if err != nil {
		s.reloads.Inc(source, "failure")
		return
	}
	s.reloads.Inc(source, "success")
	s.lastApplied.Store(time.Now().Unix())
}

// WritePrometheus writes the control plane's metrics: configuration
// changes by source and result, when one last took effect, and the
// snapshot version in force.
func (s *Server) WritePrometheus(w io.Writer) error {
	if err := s.reloads.WritePrometheus(w); err != nil {
		return err
	}
	if err := metrics.WriteGauge(w, "switchyard_config_last_reload_success_timestamp_seconds",
		"When a configuration change last took effect, in seconds since the Unix epoch.", float64(s.lastApplied.Load())); err != nil {
		return err
	}
	v, _ := strconv.ParseFloat(s.currentVersion(), 64)
	return metrics.WriteGauge(w, "switchyard_config_version", "The configuration snapshot version in force (1, 2, ...).", v)
}
