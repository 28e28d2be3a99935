package ratelimit

import (
	"context"
	"maps"
	"slices"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
	"github.com/envoyproxy/ratelimit/src/limiter"
	"github.com/envoyproxy/ratelimit/src/utils"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// libraryCache is MemoryCache as it was built from envoyproxy/ratelimit's
// own pieces (limiter.BaseRateLimiter's cache keys and descriptor
// statuses, utils.GetHitsAddends), without expiry: the reference
// TestMemoryCacheMatchesLibrary holds MemoryCache to.
type libraryCache struct {
	base     *limiter.BaseRateLimiter
	counters map[string]uint64
}

func (c *libraryCache) DoLimit(req *rlsv3.RateLimitRequest, limits []*config.RateLimit) []*rlsv3.RateLimitResponse_DescriptorStatus {
	hits := utils.GetHitsAddends(req)
	keys := c.base.GenerateCacheKeys(req, limits, hits)
	out := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(keys))
	for i, k := range keys {
		var info *limiter.LimitInfo
		if k.Key != "" {
			c.counters[k.Key] += hits[i]
			info = limiter.NewRateLimitInfo(limits[i], c.counters[k.Key]-hits[i], c.counters[k.Key], 0, 0)
		}
		out[i] = c.base.GetResponseDescriptorStatus(k.Key, info, false, hits[i])
	}
	return out
}

// TestMemoryCacheMatchesLibrary sends one sequence of calls to MemoryCache
// and to libraryCache on the same clock and limits, and requires the same
// statuses to every call and the same counter keys: limits per minute and
// per hour, shadow mode, a shared-threshold pattern, descriptors without a
// limit, per-descriptor and request-level hits (zero: check only), across
// a window boundary.
func TestMemoryCacheMatchesLibrary(t *testing.T) {
	now := int64(1_800_000_018)
	clock := clockFunc(func() int64 { return now })
	sm := newStatsManager()
	limit := func(name string, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, shadow bool, share ...string) *config.RateLimit {
		return &config.RateLimit{FullKey: name, Stats: sm.NewStats(name), ShadowMode: shadow, ShareThresholdKeyPattern: share,
			Limit: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit}}
	}
	perMin := limit("m", 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, false)
	perHour := limit("h", 100, rlsv3.RateLimitResponse_RateLimit_HOUR, false)
	shadow := limit("s", 1, rlsv3.RateLimitResponse_RateLimit_MINUTE, true)
	shared := limit("w", 2, rlsv3.RateLimitResponse_RateLimit_MINUTE, false, "", "key*")
	desc := func(hits *uint64, kv ...string) *ratelimitv3.RateLimitDescriptor {
		d := &ratelimitv3.RateLimitDescriptor{}
		for i := 0; i < len(kv); i += 2 {
			d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		if hits != nil {
			d.HitsAddend = wrapperspb.UInt64(*hits)
		}
		return d
	}
	n := func(v uint64) *uint64 { return &v }
	type call struct {
		req     *rlsv3.RateLimitRequest
		limits  []*config.RateLimit
		advance int64
	}
	req := func(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: ds, HitsAddend: hits}
	}
	var calls []call
	for range 5 {
		calls = append(calls,
			call{req: req(0, desc(n(1), "tier", "free", "key_id", "a"), desc(n(40), "usage", "tokens", "key_id", "a")), limits: []*config.RateLimit{perMin, perHour}},
			call{req: req(0, desc(n(0), "usage", "tokens", "key_id", "a")), limits: []*config.RateLimit{perHour}},
			call{req: req(2, desc(nil, "tier", "free", "key_id", "b")), limits: []*config.RateLimit{shadow}},
			call{req: req(0, desc(nil, "tier", "free", "key_id", "c")), limits: []*config.RateLimit{nil}},
			call{req: req(0, desc(n(1), "tier", "free", "key_id", "key1"), desc(n(1), "tier", "free", "key_id", "key2")), limits: []*config.RateLimit{shared, shared}, advance: 13},
		)
	}
	mem := NewMemoryCache(clock)
	lib := &libraryCache{base: limiter.NewBaseRateLimit(clock, nil, 0, nil, 0.8, "", sm), counters: map[string]uint64{}}
	for i, c := range calls {
		got := mem.DoLimit(context.Background(), c.req, c.limits)
		want := lib.DoLimit(c.req, c.limits)
		if len(got) != len(want) {
			t.Fatalf("call %d: %d statuses, library %d", i, len(got), len(want))
		}
		for j := range got {
			if !proto.Equal(got[j], want[j]) {
				t.Errorf("call %d, descriptor %d:\n got %v\nwant %v", i, j, got[j], want[j])
			}
		}
		now += c.advance
		if i == 4 {
			// Within the first window both stores hold the same keys
			// (MemoryCache then sweeps the ended windows' counters).
			mem.mu.Lock()
			gotKeys := slices.Sorted(maps.Keys(mem.counters))
			mem.mu.Unlock()
			if wantKeys := slices.Sorted(maps.Keys(lib.counters)); !slices.Equal(gotKeys, wantKeys) {
				t.Errorf("counter keys:\n got %q\nwant %q", gotKeys, wantKeys)
			}
		}
	}
}
