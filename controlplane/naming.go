package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// Aggregate cluster names (docs/routing-design.md): route_<model> is a
// model's failover order, route_<model>_<provider> the same order with that
// provider first. Model ids and provider names are sanitized so the names
// are safe in Envoy's stat names (no "/", ":" or "."), which is lossy: two
// pairs that sanitize alike would share a cluster, so every name produced by
// more than one pair gets a hash of its pair appended, keeping the common
// case readable and every case unambiguous.

// RouteClusterPrefix starts every aggregate cluster's name.
const RouteClusterPrefix = "route_"

// RouteClusters names the aggregate clusters of one configuration.
type RouteClusters struct {
	// Model maps a model id to the cluster of its default route.
	Model map[string]string
	// First maps a model id and a provider name to the cluster of the route
	// that tries that provider first.
	First map[string]map[string]string
}

// RouteClusterNames returns the aggregate cluster names of cfg's models.
func RouteClusterNames(cfg *config.Config) RouteClusters {
	type pair struct{ model, provider string }
	names := map[pair]string{}
	count := map[string]int{}
	add := func(p pair, name string) {
		names[p] = name
		count[name]++
	}
	for _, m := range cfg.Models {
		add(pair{m.ID, ""}, RouteClusterPrefix+sanitize(m.ID))
		for _, mp := range m.Providers {
			if _, dup := names[pair{m.ID, mp.Provider}]; dup {
				continue // a provider listed twice: config validation's to report
			}
			add(pair{m.ID, mp.Provider}, RouteClusterPrefix+sanitize(m.ID)+"_"+sanitize(mp.Provider))
		}
	}
	out := RouteClusters{Model: map[string]string{}, First: map[string]map[string]string{}}
	for p, name := range names {
		if count[name] > 1 {
			sum := sha256.Sum256([]byte(p.model + "\x00" + p.provider))
			name += "_" + hex.EncodeToString(sum[:4])
		}
		if p.provider == "" {
			out.Model[p.model] = name
			continue
		}
		if out.First[p.model] == nil {
			out.First[p.model] = map[string]string{}
		}
		out.First[p.model][p.provider] = name
	}
	return out
}

// sanitize keeps lower-case letters, digits and "-", lower-cases upper-case
// letters and turns everything else into "_".
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			b.WriteRune(r)
		case r >= 'A' && r <= 'Z':
			b.WriteRune(r + ('a' - 'A'))
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
