package ratelimit

import (
	"fmt"
	"slices"
	"sync"

	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"

	swconfig "github.com/switchyard-ai/switchyard/internal/config"
)

// BuildConfig returns the RateLimitConfig for the tiers: for every tier,
//
//	tier=<tier> → key_id → <RPM> per MINUTE
//	usage=tokens → tier=<tier> → key_id → <TPM> per MINUTE
//
// A tier limit of zero (per-key limits, as for enterprise) gets a key_id
// level without a rate_limit: such keys always send the descriptor-level
// limit override, and one that does not is refused by extproc before it
// reaches the limiter. No per-key entries ever live here, so the resource
// only changes when the tiers do.
func BuildConfig(tiers map[string]swconfig.Tier) *rlsconfv3.RateLimitConfig {
	names := make([]string, 0, len(tiers))
	for n := range tiers {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic resources: equal configs, equal snapshots
	keyLevel := func(limit int) []*rlsconfv3.RateLimitDescriptor {
		d := &rlsconfv3.RateLimitDescriptor{Key: EntryKeyID}
		if limit > 0 {
			d.RateLimit = &rlsconfv3.RateLimitPolicy{
				Unit:            rlsconfv3.RateLimitUnit_MINUTE,
				RequestsPerUnit: uint32(clampUint32(int64(limit))),
			}
		}
		return []*rlsconfv3.RateLimitDescriptor{d}
	}
	tokens := &rlsconfv3.RateLimitDescriptor{Key: EntryUsage, Value: UsageTokens}
	out := &rlsconfv3.RateLimitConfig{Name: ConfigName, Domain: Domain}
	for _, n := range names {
		t := tiers[n]
		out.Descriptors = append(out.Descriptors, &rlsconfv3.RateLimitDescriptor{
			Key: EntryTier, Value: n, Descriptors: keyLevel(t.RPM),
		})
		tokens.Descriptors = append(tokens.Descriptors, &rlsconfv3.RateLimitDescriptor{
			Key: EntryTier, Value: n, Descriptors: keyLevel(t.TPM),
		})
	}
	out.Descriptors = append(out.Descriptors, tokens)
	return out
}

// loadConfigs turns RateLimitConfig resources into envoyproxy/ratelimit's
// loaded configuration exactly as its xDS provider does
// (config.ConfigXdsProtoToYaml, then the loader), so an invalid resource is
// rejected here just as the fleet's ratelimit service would reject it.
func loadConfigs(resources []*rlsconfv3.RateLimitConfig, sm stats.Manager) (cfg config.RateLimitConfig, err error) {
	defer func() {
		// The loader reports configuration errors by panicking with a
		// config.RateLimitConfigError.
		if r := recover(); r != nil {
			if ce, ok := r.(config.RateLimitConfigError); ok {
				err = fmt.Errorf("ratelimit: invalid configuration: %w", ce)
				return
			}
			panic(r)
		}
	}()
	toLoad := make([]config.RateLimitConfigToLoad, 0, len(resources))
	for _, r := range resources {
		toLoad = append(toLoad, config.RateLimitConfigToLoad{Name: r.GetName(), ConfigYaml: config.ConfigXdsProtoToYaml(r)})
	}
	return config.NewRateLimitConfigLoaderImpl().Load(toLoad, sm, false), nil
}

// newStatsManager returns envoyproxy/ratelimit's stats manager over a store
// that keeps nothing: the service insists on one, and Switchyard exports
// its own counters (Metrics).
func newStatsManager() stats.Manager {
	return &cachedStats{Manager: stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), settings.Settings{})}
}

// maxCachedStats bounds cachedStats: past it the cache starts over (the
// store behind it already holds a counter per key it has seen).
const maxCachedStats = 1 << 16

// cachedStats remembers NewStats's answer per descriptor key. The library
// calls NewStats on every lookup of a descriptor that carries its own limit
// (a key with a custom RPM or TPM: every request of such a key, twice), and
// each call sanitises the key with a regular expression and looks up six
// counters by concatenated names: most of the limiter's cost per request.
// The Manager interface promises that calls with the same key are
// equivalent, so answering from a cache changes nothing.
type cachedStats struct {
	stats.Manager
	mu    sync.RWMutex
	byKey map[string]stats.RateLimitStats
}

func (c *cachedStats) NewStats(key string) stats.RateLimitStats {
	c.mu.RLock()
	st, ok := c.byKey[key]
	c.mu.RUnlock()
	if ok {
		return st
	}
	st = c.Manager.NewStats(key)
	c.mu.Lock()
	if c.byKey == nil || len(c.byKey) >= maxCachedStats {
		c.byKey = make(map[string]stats.RateLimitStats)
	}
	c.byKey[key] = st
	c.mu.Unlock()
	return st
}
