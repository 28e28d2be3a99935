package ratelimit

import (
	"context"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"
	"github.com/envoyproxy/ratelimit/src/stats"
	"github.com/envoyproxy/ratelimit/src/utils"
)

// Clock is envoyproxy/ratelimit's time source: Unix seconds. Fixed windows
// are computed from it, so tests inject one to keep window boundaries away.
type Clock interface{ UnixNow() int64 }

// SystemClock reads the wall clock.
type SystemClock struct{}

// UnixNow returns the current Unix time in seconds.
func (SystemClock) UnixNow() int64 { return time.Now().Unix() }

// nearLimitRatio only feeds envoyproxy/ratelimit's near_limit statistic;
// 0.8 is its default.
const nearLimitRatio = 0.8

// MemoryCache is envoyproxy/ratelimit's counter store interface
// (limiter.RateLimitCache) over counters in this process's memory, for a
// single node. It has the Redis store's exact semantics because it reuses
// the same pieces: cache keys from limiter.BaseRateLimiter (domain, entries
// and window start), hits from utils.GetHitsAddends (per-descriptor
// hits_addend, zero meaning check only), an increment-then-compare per key
// as Redis INCRBY does, and the descriptor statuses (limit, remaining,
// duration until reset) from BaseRateLimiter.GetResponseDescriptorStatus.
//
// Counters live until their window ends. A MemoryCache is safe for
// concurrent use; all increments of one call happen under one lock, so
// concurrent requests see a total order, as they would on one Redis.
type MemoryCache struct {
	base  *limiter.BaseRateLimiter
	clock Clock

	mu        sync.Mutex
	counters  map[string]*counter
	lastSweep int64
}

type counter struct {
	n       uint64
	expires int64 // Unix seconds: the end of the counter's window
}

// NewMemoryCache returns an empty store. A nil clock means SystemClock.
func NewMemoryCache(clock Clock) *MemoryCache {
	if clock == nil {
		clock = SystemClock{}
	}
	return newMemoryCache(clock, newStatsManager())
}

func newMemoryCache(clock Clock, sm stats.Manager) *MemoryCache {
	return &MemoryCache{
		base:     limiter.NewBaseRateLimit(clock, nil, 0, nil, nearLimitRatio, "", sm),
		clock:    clock,
		counters: map[string]*counter{},
	}
}

// DoLimit implements limiter.RateLimitCache.
func (c *MemoryCache) DoLimit(_ context.Context, req *rlsv3.RateLimitRequest, limits []*config.RateLimit) []*rlsv3.RateLimitResponse_DescriptorStatus {
	hits := utils.GetHitsAddends(req)
	keys := c.base.GenerateCacheKeys(req, limits, hits)
	now := c.clock.UnixNow()
	after := make([]uint64, len(keys))

	c.mu.Lock()
	c.sweepLocked(now)
	for i, k := range keys {
		if k.Key == "" { // no limit applies to this descriptor
			continue
		}
		e := c.counters[k.Key]
		if e == nil {
			div := utils.UnitToDivider(limits[i].Limit.Unit)
			e = &counter{expires: now/div*div + div}
			c.counters[k.Key] = e
		}
		e.n += hits[i]
		after[i] = e.n
	}
	c.mu.Unlock()

	out := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(keys))
	for i, k := range keys {
		var info *limiter.LimitInfo
		if k.Key != "" {
			info = limiter.NewRateLimitInfo(limits[i], after[i]-hits[i], after[i], 0, 0)
		}
		out[i] = c.base.GetResponseDescriptorStatus(k.Key, info, false, hits[i])
	}
	return out
}

// sweepLocked drops counters whose window has ended, at most once a second.
func (c *MemoryCache) sweepLocked(now int64) {
	if now == c.lastSweep {
		return
	}
	c.lastSweep = now
	for k, e := range c.counters {
		if e.expires <= now {
			delete(c.counters, k)
		}
	}
}

// Len returns the number of live counters.
func (c *MemoryCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.counters)
}

// Flush implements limiter.RateLimitCache; increments are synchronous, so
// there is nothing to wait for.
func (c *MemoryCache) Flush() {}

var _ limiter.RateLimitCache = (*MemoryCache)(nil)
