package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// The routing overlay is the admin API's routing changes (drained
// providers, per-model routing overrides) kept apart from the
// configuration file, in a RoutingStore every control-plane replica shares:
// each replica serves its configuration file with the overlay on top,
// applies the overlay before its first snapshot (so a restart never serves
// a drained provider), and follows the store's changes
// (WatchRoutingStore). A change is made against the stored overlay with
// compare-and-set on its version, so two replicas changing it at once do
// not lose one another's change.

// RoutingOverlay is the admin API's routing changes on top of the
// configuration file.
type RoutingOverlay struct {
	// Drained are the providers taken out of every model's rotation.
	Drained []string `json:"drained,omitempty"`
	// Models are per-model routing overrides, by model ID: each replaces
	// the model's routing settings in the file as a whole.
	Models map[string]ModelRouting `json:"models,omitempty"`
}

// ModelRouting is a model's routing settings, as an override keeps them.
type ModelRouting struct {
	Routing          string                 `json:"routing,omitempty"`
	FirstByteTimeout time.Duration          `json:"first_byte_timeout,omitempty"`
	IdleTimeout      time.Duration          `json:"idle_timeout,omitempty"`
	Providers        []config.ModelProvider `json:"providers"`
}

func routingOf(m config.Model) ModelRouting {
	return ModelRouting{Routing: m.Routing, FirstByteTimeout: m.FirstByteTimeout, IdleTimeout: m.IdleTimeout,
		Providers: slices.Clone(m.Providers)}
}

func (r ModelRouting) applyTo(m *config.Model) {
	m.Routing, m.FirstByteTimeout, m.IdleTimeout = r.Routing, r.FirstByteTimeout, r.IdleTimeout
	m.Providers = slices.Clone(r.Providers)
}

func (r ModelRouting) equal(o ModelRouting) bool {
	return r.Routing == o.Routing && r.FirstByteTimeout == o.FirstByteTimeout && r.IdleTimeout == o.IdleTimeout &&
		slices.Equal(r.Providers, o.Providers)
}

// Clone returns a deep copy of o.
func (o RoutingOverlay) Clone() RoutingOverlay {
	out := RoutingOverlay{Drained: slices.Clone(o.Drained)}
	if len(o.Models) > 0 {
		out.Models = make(map[string]ModelRouting, len(o.Models))
		for id, m := range o.Models {
			m.Providers = slices.Clone(m.Providers)
			out.Models[id] = m
		}
	}
	return out
}

// ErrStale is a RoutingStore's answer to a Save whose expected version is
// no longer the stored one: another change came first.
var ErrStale = errors.New("routing overlay changed since it was read")

// RoutingStore keeps the routing overlay, shared by every control-plane
// replica. Versions start at 0 (nothing saved: the empty overlay) and only
// move forward. A store that can announce changes (PostgreSQL
// LISTEN/NOTIFY) also implements RoutingNotifier.
type RoutingStore interface {
	// Load returns the stored overlay and its version.
	Load(ctx context.Context) (RoutingOverlay, int64, error)
	// Save stores o if the stored version is still prev, and returns the
	// new version; ErrStale (wrapped) if it is not.
	Save(ctx context.Context, prev int64, o RoutingOverlay) (int64, error)
}

// RoutingNotifier is a RoutingStore that announces changes: the channel
// receives a value (coalesced) after changes, and is closed when ctx ends.
type RoutingNotifier interface {
	Notify(ctx context.Context) <-chan struct{}
}

// memoryRoutingStore keeps the overlay in the process: the default when no
// store is set, for a control plane without a data directory.
type memoryRoutingStore struct {
	mu      sync.Mutex
	overlay RoutingOverlay
	version int64
}

// Load implements RoutingStore.
func (m *memoryRoutingStore) Load(context.Context) (RoutingOverlay, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.overlay.Clone(), m.version, nil
}

// Save implements RoutingStore.
func (m *memoryRoutingStore) Save(_ context.Context, prev int64, o RoutingOverlay) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if prev != m.version {
		return 0, fmt.Errorf("controlplane: save routing overlay at version %d, stored %d: %w", prev, m.version, ErrStale)
	}
	m.overlay, m.version = o.Clone(), m.version+1
	return m.version, nil
}

// overlayState is the Server's view of its RoutingStore.
type overlayState struct {
	store RoutingStore
	// file is the configuration as loaded from the file (Update), which
	// the overlay goes on top of.
	file    *config.Config
	overlay RoutingOverlay
	version int64 // of overlay; 0 before the first Load
	loaded  bool
	// failed is the last stored version that could not be applied, so it
	// is reported once.
	failed int64
}

// maxSaveAttempts bounds a change's compare-and-set retries when other
// replicas keep changing the overlay at the same time.
const maxSaveAttempts = 8

// SetRoutingStore makes store keep the routing overlay; call it before the
// first Update, which loads the overlay. Without one the overlay is kept
// in memory and lost when the process ends.
func (s *Server) SetRoutingStore(store RoutingStore) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ov.store = store
}

// Overlay returns the routing overlay in force and its version.
func (s *Server) Overlay() (RoutingOverlay, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ov.overlay.Clone(), s.ov.version
}

func (s *Server) storeLocked() RoutingStore {
	if s.ov.store == nil {
		s.ov.store = &memoryRoutingStore{}
	}
	return s.ov.store
}

// loadOverlayLocked reads the overlay once, before the first snapshot.
func (s *Server) loadOverlayLocked(ctx context.Context) error {
	if s.ov.loaded {
		return nil
	}
	ov, v, err := s.storeLocked().Load(ctx)
	if err != nil {
		return fmt.Errorf("controlplane: load routing overlay: %w", err)
	}
	s.ov.overlay, s.ov.version, s.ov.loaded = ov, v, true
	return nil
}

// applyOverlay returns file with the overlay's model overrides applied,
// and the drained providers of the overlay it has. Entries naming a model
// or provider file does not have, or that no longer validate against it
// (a drain that would leave a model without providers), are left out and
// described in skipped: a reloaded file never fails because of them.
func applyOverlay(file *config.Config, ov RoutingOverlay) (base *config.Config, drained, skipped []string, err error) {
	base, err = clone(file)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, id := range slices.Sorted(maps.Keys(ov.Models)) {
		i := slices.IndexFunc(base.Models, func(m config.Model) bool { return m.ID == id })
		if i < 0 {
			skipped = append(skipped, fmt.Sprintf("model %q: not in the configuration", id))
			continue
		}
		mr := ov.Models[id]
		if j := slices.IndexFunc(mr.Providers, func(mp config.ModelProvider) bool {
			_, ok := base.Provider(mp.Provider)
			return !ok
		}); j >= 0 {
			skipped = append(skipped, fmt.Sprintf("model %q: provider %q not in the configuration", id, mr.Providers[j].Provider))
			continue
		}
		cand := *base
		cand.Models = slices.Clone(base.Models)
		mr.applyTo(&cand.Models[i])
		next, err := clone(&cand)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("model %q: %v", id, err))
			continue
		}
		base = next
	}
	for _, p := range ov.Drained {
		if _, ok := base.Provider(p); !ok {
			skipped = append(skipped, fmt.Sprintf("drained provider %q: not in the configuration", p))
			continue
		}
		if slices.Contains(drained, p) {
			continue
		}
		if _, err := withoutDrained(base, append(slices.Clone(drained), p)); err != nil {
			skipped = append(skipped, fmt.Sprintf("drained provider %q: %v", p, err))
			continue
		}
		drained = append(drained, p)
	}
	slices.Sort(drained)
	return base, drained, skipped, nil
}

// applyOverlayLocked is applyOverlay, logging what it skipped.
func (s *Server) applyOverlayLocked(file *config.Config, ov RoutingOverlay) (*config.Config, []string, error) {
	base, drained, skipped, err := applyOverlay(file, ov)
	for _, sk := range skipped {
		s.logger.Warn("routing overlay entry skipped: it does not apply to the configuration file in force (clear it with the admin API)", "entry", sk)
	}
	return base, drained, err
}

// checkLocked validates base without drained the way setLocked does,
// without serving it: a change is checked before it is stored.
func (s *Server) checkLocked(base *config.Config, drained []string) error {
	eff, err := withoutDrained(base, drained)
	if err != nil {
		return err
	}
	if eff.Backends == nil && s.DefaultBackends != nil {
		b := *s.DefaultBackends
		eff.Backends = &b
	}
	for _, region := range config.Regions {
		if _, err := buildRegion(eff, eff, region, "check"); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return nil
}

// errUnchanged, from an edit, means the overlay needs no change.
var errUnchanged = errors.New("unchanged")

// changeOverlayLocked makes a change to the stored overlay: it reads the
// overlay, lets edit derive the next one from it and the configuration it
// gives (edit returns errUnchanged for none), checks the result, stores it
// if nobody stored another version meanwhile (else starts again from the
// newer one), and serves it.
func (s *Server) changeOverlayLocked(ctx context.Context, what string,
	edit func(ov *RoutingOverlay, base *config.Config, drained []string) error) (string, error) {
	if s.base == nil || s.ov.file == nil {
		return "", errors.New("controlplane: no configuration yet")
	}
	store := s.storeLocked()
	for attempt := 1; ; attempt++ {
		ov, prev, err := store.Load(ctx)
		if err != nil {
			s.countChange(what, err)
			return "", fmt.Errorf("controlplane: load routing overlay: %w", err)
		}
		base, drained, stale, err := applyOverlay(s.ov.file, ov)
		if err != nil {
			s.countChange(what, err)
			return "", err
		}
		next := ov.Clone()
		if err := edit(&next, base, drained); errors.Is(err, errUnchanged) {
			if prev <= s.ov.version {
				return s.currentVersion(), nil
			}
			// Another replica's change this one has not applied yet.
			return s.applyStoredLocked(ctx, ov, prev, "routing store")
		} else if err != nil {
			s.countChange(what, err)
			return "", err
		}
		// Entries the file already made stale (skipped, logged) do not block
		// other changes; a change must not add one.
		nbase, ndrained, skipped, err := applyOverlay(s.ov.file, next)
		if i := slices.IndexFunc(skipped, func(sk string) bool { return !slices.Contains(stale, sk) }); err == nil && i >= 0 {
			err = fmt.Errorf("%w: %s", ErrInvalid, skipped[i])
		}
		if err == nil {
			err = s.checkLocked(nbase, ndrained)
		}
		if err != nil {
			s.countChange(what, err)
			return "", err
		}
		v, err := store.Save(ctx, prev, next)
		if errors.Is(err, ErrStale) && attempt < maxSaveAttempts {
			continue
		}
		if err != nil {
			s.countChange(what, err)
			return "", fmt.Errorf("controlplane: save routing overlay: %w", err)
		}
		return s.applyStoredLocked(ctx, next, v, what)
	}
}

// applyStoredLocked serves the file with the stored overlay ov (version v).
func (s *Server) applyStoredLocked(ctx context.Context, ov RoutingOverlay, v int64, what string) (string, error) {
	base, drained, err := s.applyOverlayLocked(s.ov.file, ov)
	if err != nil {
		return "", err
	}
	version, err := s.setLocked(ctx, base, drained, what)
	if err != nil {
		return "", err
	}
	s.ov.overlay, s.ov.version = ov, v
	return version, nil
}

// modifyOverlay is Modify on the overlay: change edits a copy of the
// configuration in force, and the models whose routing it changed become
// overrides. Changes to anything but models' routing settings are refused.
func (s *Server) modifyOverlay(ctx context.Context, what string, change func(*config.Config) error) (string, error) {
	return s.changeOverlayLocked(ctx, what, func(ov *RoutingOverlay, base *config.Config, _ []string) error {
		edited, err := clone(base)
		if err != nil {
			return err
		}
		if err := change(edited); err != nil {
			return err
		}
		next, err := clone(edited)
		if err != nil {
			return err
		}
		if len(next.Models) != len(base.Models) {
			return fmt.Errorf("%w: a routing change cannot add or remove models", ErrInvalid)
		}
		changed := false
		for i, m := range next.Models {
			if m.ID != base.Models[i].ID {
				return fmt.Errorf("%w: a routing change cannot add, remove or reorder models", ErrInvalid)
			}
			if r := routingOf(m); !r.equal(routingOf(base.Models[i])) {
				if ov.Models == nil {
					ov.Models = map[string]ModelRouting{}
				}
				ov.Models[m.ID] = r
				changed = true
			}
		}
		// Only routing settings live in the overlay: anything else the change
		// made would be lost, so it is refused.
		check := *next
		check.Models = slices.Clone(next.Models)
		for i := range check.Models {
			routingOf(base.Models[i]).applyTo(&check.Models[i])
		}
		a, errA := yaml.Marshal(&check)
		b, errB := yaml.Marshal(base)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			return fmt.Errorf("%w: a routing change can only change models' routing, timeouts and providers", ErrInvalid)
		}
		if !changed {
			return errUnchanged
		}
		return nil
	})
}

// ClearOverrides removes the routing override of model, or of every model
// when model is "": the configuration file's routing applies again.
// Drained providers stay drained (Undrain them).
func (s *Server) ClearOverrides(ctx context.Context, model string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	what := "clear overrides"
	if model != "" {
		what += " of " + model
	}
	return s.changeOverlayLocked(ctx, what, func(ov *RoutingOverlay, _ *config.Config, _ []string) error {
		if model == "" {
			if len(ov.Models) == 0 {
				return errUnchanged
			}
			ov.Models = nil
			return nil
		}
		if _, ok := ov.Models[model]; !ok {
			return errUnchanged
		}
		delete(ov.Models, model)
		return nil
	})
}

// DefaultRoutingPoll is how often WatchRoutingStore reads the store when
// nothing announces a change (and, with a RoutingNotifier, as a fallback).
const DefaultRoutingPoll = time.Second

// routingPollTimeout bounds one read of the store by WatchRoutingStore.
const routingPollTimeout = 5 * time.Second

// WatchRoutingStore applies the stored overlay whenever it changes, until
// ctx ends: at each notification of a RoutingNotifier and every interval
// (DefaultRoutingPoll if 0). A store that cannot be read is logged, and the
// overlay in force stays.
func (s *Server) WatchRoutingStore(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultRoutingPoll
	}
	s.mu.Lock()
	store := s.storeLocked()
	s.mu.Unlock()
	var wake <-chan struct{}
	if n, ok := store.(RoutingNotifier); ok {
		wake = n.Notify(ctx)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case _, ok := <-wake:
			if !ok {
				wake = nil
			}
		}
		lctx, cancel := context.WithTimeout(ctx, routingPollTimeout)
		ov, v, err := store.Load(lctx)
		cancel()
		if err != nil {
			if !failing && ctx.Err() == nil {
				s.logger.Warn("routing store unreadable: the routing overlay in force stays", "error", err)
			}
			failing = true
			continue
		}
		if failing {
			s.logger.Info("routing store readable again")
		}
		failing = false
		s.applyIfNewer(ctx, ov, v)
	}
}

// applyIfNewer serves the stored overlay ov (version v) unless this
// replica already serves it or a later one.
func (s *Server) applyIfNewer(ctx context.Context, ov RoutingOverlay, v int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v <= s.ov.version || v == s.ov.failed || s.ov.file == nil {
		return
	}
	version, err := s.applyStoredLocked(ctx, ov, v, "routing store")
	if err != nil {
		s.ov.failed = v
		s.logger.Error("stored routing overlay refused: the previous one stays in force", "overlay_version", v, "error", err)
		return
	}
	s.logger.Info("routing overlay applied from the store", "overlay_version", v, "version", version)
}
