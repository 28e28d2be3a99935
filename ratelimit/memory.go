package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"
	"github.com/envoyproxy/ratelimit/src/utils"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Clock is envoyproxy/ratelimit's time source: Unix seconds. Fixed windows
// are computed from it, so tests inject one to keep window boundaries away.
type Clock interface{ UnixNow() int64 }

// SystemClock reads the wall clock.
type SystemClock struct{}

// UnixNow returns the current Unix time in seconds.
func (SystemClock) UnixNow() int64 { return time.Now().Unix() }

// MemoryCache is envoyproxy/ratelimit's counter store interface
// (limiter.RateLimitCache) over counters in this process's memory, for a
// single node. It has the Redis store's exact semantics: cache keys as
// limiter.CacheKeyGenerator makes them (domain, entries, with a limit's
// shared-threshold patterns, and window start), hits as
// utils.GetHitsAddends reads them (per-descriptor hits_addend, zero meaning
// check only), an increment-then-compare per key as Redis INCRBY does, and
// the descriptor statuses (limit, remaining, duration until reset, shadow
// mode) as limiter.BaseRateLimiter.GetResponseDescriptorStatus answers
// them without a local cache. It builds them itself rather than through
// those functions, which allocate a key string, a LimitInfo, a status and
// a duration per descriptor on every call (three calls a request); the
// library's per-limit statistics, which they also count, go nowhere here
// (newStatsManager's null sink). TestMemoryCacheMatchesLibrary holds the
// two to the same answers.
//
// Counters live until their window ends. A MemoryCache is safe for
// concurrent use; all increments of one call happen under one lock, so
// concurrent requests see a total order, as they would on one Redis.
type MemoryCache struct {
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
	return newMemoryCache(clock)
}

func newMemoryCache(clock Clock) *MemoryCache {
	return &MemoryCache{clock: clock, counters: map[string]*counter{}}
}

// DoLimit implements limiter.RateLimitCache.
func (c *MemoryCache) DoLimit(_ context.Context, req *rlsv3.RateLimitRequest, limits []*config.RateLimit) []*rlsv3.RateLimitResponse_DescriptorStatus {
	n := len(req.Descriptors)
	if len(limits) != n {
		panic("ratelimit: DoLimit with a limit per descriptor expected") // as the library asserts
	}
	// Per-descriptor scratch on the stack for Switchyard's calls (up to
	// two descriptors).
	var hitsBuf, afterBuf [4]uint64
	hits, after := hitsBuf[:0], afterBuf[:0]
	if n > len(hitsBuf) {
		hits, after = make([]uint64, 0, n), make([]uint64, 0, n)
	}
	hits, after = hits[:n], after[:n]
	for i, d := range req.Descriptors {
		if d.HitsAddend != nil {
			hits[i] = d.HitsAddend.Value
		} else {
			hits[i] = max(1, uint64(req.HitsAddend))
		}
	}
	now := c.clock.UnixNow()
	var keyBuf [256]byte

	c.mu.Lock()
	c.sweepLocked(now)
	for i, l := range limits {
		if l == nil { // no limit applies to this descriptor
			continue
		}
		div := utils.UnitToDivider(l.Limit.Unit)
		key := appendCacheKey(keyBuf[:0], req.Domain, req.Descriptors[i], l, now/div*div)
		e := c.counters[string(key)] // no allocation for the lookup
		if e == nil {
			e = &counter{expires: now/div*div + div}
			c.counters[string(key)] = e
		}
		e.n += hits[i]
		after[i] = e.n
	}
	c.mu.Unlock()

	// The statuses, their durations and the list in one block.
	now = c.clock.UnixNow() // as the library reads the clock again for the reset
	var (
		cells []statusCell
		out   []*rlsv3.RateLimitResponse_DescriptorStatus
	)
	if n <= len(statusBlock{}.cells) {
		b := &statusBlock{}
		cells, out = b.cells[:n], b.out[:n]
	} else {
		cells, out = make([]statusCell, n), make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	for i, l := range limits {
		st := &cells[i].s
		out[i] = st
		if l == nil {
			st.Code = rlsv3.RateLimitResponse_OK
			continue
		}
		overLimit := uint64(l.Limit.RequestsPerUnit)
		st.CurrentLimit = l.Limit
		if after[i] > overLimit {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			if l.ShadowMode {
				st.Code = rlsv3.RateLimitResponse_OK
			}
		} else {
			st.Code, st.LimitRemaining = rlsv3.RateLimitResponse_OK, uint32(overLimit-after[i])
		}
		div := utils.UnitToDivider(l.Limit.Unit)
		cells[i].reset.Seconds = div - now%div
		st.DurationUntilReset = &cells[i].reset
	}
	return out
}

// statusBlock is DoLimit's answer to a call of up to two descriptors
// (Switchyard's calls), allocated together.
type statusBlock struct {
	cells [2]statusCell
	out   [2]*rlsv3.RateLimitResponse_DescriptorStatus
}

// statusCell is a descriptor status and its duration until reset.
type statusCell struct {
	s     rlsv3.RateLimitResponse_DescriptorStatus
	reset durationpb.Duration
}

// appendCacheKey appends limiter.CacheKeyGenerator's key (with no prefix)
// for descriptor d under limit l in the window starting at windowStart.
func appendCacheKey(b []byte, domain string, d *ratelimitv3.RateLimitDescriptor, l *config.RateLimit, windowStart int64) []byte {
	b = append(b, domain...)
	b = append(b, '_')
	for i, e := range d.Entries {
		b = append(b, e.Key...)
		b = append(b, '_')
		v := e.Value
		if i < len(l.ShareThresholdKeyPattern) && l.ShareThresholdKeyPattern[i] != "" {
			v = l.ShareThresholdKeyPattern[i]
		}
		b = append(b, v...)
		b = append(b, '_')
	}
	return strconv.AppendInt(b, windowStart, 10)
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
