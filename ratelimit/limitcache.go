package ratelimit

import (
	"context"
	"sync"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/envoyproxy/ratelimit/src/config"
)

// limitCache remembers the configuration's answer (config.RateLimitConfig's
// GetLimit) per descriptor. GetLimit walks the configuration building
// strings as it goes, and for a descriptor with its own limit builds a
// fresh limit and its stats: a third of the limiter's allocations on every
// call, twice per request, for an answer that only depends on the loaded
// configuration, the domain and the descriptor's entries and limit. The
// cache is per loaded configuration (a new one starts over) and bounded.
// The limits it hands out are shared by concurrent calls, which only read
// them (the library's own service does the same with its configuration's
// limits).
type limitCache struct {
	mu     sync.RWMutex
	cfg    config.RateLimitConfig
	limits map[limitKey]*config.RateLimit
}

// maxCachedLimits bounds the cache: past it, it starts over.
const maxCachedLimits = 1 << 16

// maxKeyEntries is the most descriptor entries a cached key holds; longer
// descriptors are looked up each time.
const maxKeyEntries = 4

// limitKey is what GetLimit's answer depends on, besides the configuration.
type limitKey struct {
	domain   string
	n        int
	entries  [maxKeyEntries][2]string
	hasLimit bool
	perUnit  uint32
	unit     typev3.RateLimitUnit
}

// getLimit is cfg.GetLimit(ctx, domain, d), from the cache when it can be.
func (c *limitCache) getLimit(ctx context.Context, cfg config.RateLimitConfig, domain string, d *ratelimitv3.RateLimitDescriptor) *config.RateLimit {
	k, ok := keyOf(domain, d)
	if !ok {
		return cfg.GetLimit(ctx, domain, d)
	}
	c.mu.RLock()
	l, hit := c.limits[k]
	same := c.cfg == cfg
	c.mu.RUnlock()
	if hit && same {
		return l
	}
	l = cfg.GetLimit(ctx, domain, d)
	c.mu.Lock()
	if c.cfg != cfg || len(c.limits) >= maxCachedLimits {
		c.cfg, c.limits = cfg, make(map[limitKey]*config.RateLimit)
	}
	c.limits[k] = l
	c.mu.Unlock()
	return l
}

func keyOf(domain string, d *ratelimitv3.RateLimitDescriptor) (limitKey, bool) {
	es := d.GetEntries()
	if len(es) > maxKeyEntries {
		return limitKey{}, false
	}
	k := limitKey{domain: domain, n: len(es)}
	for i, e := range es {
		k.entries[i] = [2]string{e.GetKey(), e.GetValue()}
	}
	if l := d.GetLimit(); l != nil {
		if l.GetUnitMultiplier() != nil {
			return limitKey{}, false
		}
		k.hasLimit, k.perUnit, k.unit = true, l.GetRequestsPerUnit(), l.GetUnit()
	}
	return k, true
}
