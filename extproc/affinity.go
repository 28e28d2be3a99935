package extproc

import (
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/switchyard-ai/switchyard/extproc/translate/anthropic"
	"github.com/switchyard-ai/switchyard/internal/config"
)

// Prompt cache affinity.
//
// Providers cache prompt prefixes: OpenAI automatically for prompts of 1024
// tokens or more (usage.prompt_tokens_details.cached_tokens), Gemini 2.5
// implicitly, Anthropic at the request's cache_control breakpoints. A cached
// prefix is billed at a fraction of the price and skips most of the prefill
// before the first token, but only on the provider that saw it: a policy
// that spreads one conversation's turns across providers (weighted, latency)
// pays full price and full latency on most turns.
//
// For a model with affinity (config.PromptCache.Affinity; by default the
// weighted and latency policies), the first choice among the candidates
// choose would consider (same tiers: home region, not cooling down) is made
// by rendezvous, or highest random weight, hashing of a cache key:
//
//   - the key is the request's prompt_cache_key when it is a non-empty
//     string, else a hash of the stable prompt prefix: the messages up to
//     and including the first user message (system and developer prompts
//     come first) and the tools. Every turn of a conversation carries the
//     same first messages, so all of them hash alike. Either is combined
//     with the key's owner (keys.Key.LimitID), so that two tenants sending
//     the same prompt are spread independently and no tenant can aim its
//     traffic at another's provider by choosing a prefix;
//   - each candidate scores hash(key, provider); the highest score wins.
//     Under the weighted policy the score is -weight/ln(u), u the hash
//     mapped into (0,1), which makes a provider win for weight/total of
//     the keys (weighted rendezvous hashing); a weight of 0 never wins
//     while another candidate has weight. Under the latency policy the
//     candidates are those whose estimate is within the model's
//     latency_tolerance of the best (exploration still comes first: a
//     provider with fewer than exploreSamples samples is chosen as pick
//     would). The priority policy is affine already and is unchanged.
//
// Rendezvous hashing moves as few keys as possible when the candidates
// change: a provider cooling down drops out of the tiers, and only its own
// keys move, each to its second-highest score, consistently, so the
// conversation warms one new cache rather than many; they come back when
// the cooldown ends. An ejected provider (the data plane's outlier
// detection) is skipped by the data plane's failover as for any request.
//
// The key is the same in every extproc (xxhash has no per-process seed), so
// gateway instances behind a load balancer agree on a conversation's
// provider. It is computed from spans the one-pass validation already found
// (chatRequest: messages, tools, prompt_cache_key, the end of the first user
// message), hashing the bytes in place (at most 36KB of a prefix: its start,
// its end and its length; hashBounded): no allocation, and nothing at all
// for models without affinity.

// setPromptCache sets m's prompt cache settings from its config.
func (r *modelRoute) setPromptCache(m *config.Model) {
	r.affinity = m.CacheAffinity() && len(m.Providers) > 1
	r.latencyTolerance = m.PromptCache.LatencyTolerance
	if r.latencyTolerance <= 0 {
		r.latencyTolerance = config.DefaultLatencyTolerance
	}
	r.anthropicOpts = anthropic.Options{DropUnsupported: m.DropUnsupported,
		NoCacheControl: !m.CacheBreakpoints(), CacheMinTokens: m.PromptCache.MinTokens}
}

// affinityKey returns the request's cache affinity key, or 0 when its model
// has no affinity.
func (st *stream) affinityKey(mr *modelRoute, body []byte, r *chatRequest) uint64 {
	if !mr.affinity {
		return 0
	}
	return cacheKey(st.key.LimitID(), body, r)
}

// Seeds that keep the kinds of key apart.
const (
	seedPrefix   = 0x9e3779b97f4a7c15
	seedCacheKey = 0xc2b2ae3d27d4eb4f
	seedTools    = 0x165667b19e3779f9
)

// cacheKey hashes the request's prompt_cache_key, or else its stable prefix,
// with owner. It is never 0.
func cacheKey(owner string, body []byte, r *chatRequest) uint64 {
	var h uint64
	if k := r.fields[fPromptCacheKey]; k.present() && body[k.start] == '"' && k.end-k.start > 2 {
		h = mix(xxhash.Sum64(body[k.start:k.end]) ^ seedCacheKey)
	} else {
		m := r.fields[fMessages]
		end := m.end
		if r.prefixEnd > m.start && r.prefixEnd < end {
			end = r.prefixEnd
		}
		h = mix(hashBounded(body[m.start:end]) ^ seedPrefix)
		if t := r.fields[fTools]; t.present() {
			h = mix(h ^ hashBounded(body[t.start:t.end]) ^ seedTools)
		}
	}
	h = mix(h ^ xxhash.Sum64String(owner))
	if h == 0 {
		h = 1
	}
	return h
}

// Bounds on the bytes cacheKey hashes of a prefix or of the tools.
const (
	hashHead = 32 << 10
	hashTail = 4 << 10
)

// hashBounded hashes b, or for a long b its length, its first hashHead and
// its last hashTail bytes: a megabytes prompt costs microseconds, not a
// millisecond. Two prefixes that agree on all of those are the same
// conversation's, or share thousands of tokens worth caching in one place.
func hashBounded(b []byte) uint64 {
	if len(b) <= hashHead+hashTail {
		return xxhash.Sum64(b)
	}
	return mix(xxhash.Sum64(b[:hashHead])^uint64(len(b))) ^ xxhash.Sum64(b[len(b)-hashTail:])
}

// mix is SplitMix64's finalizer: every bit of x affects every bit of the
// result.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// score is t's rendezvous hash for key.
func score(key uint64, t *target) uint64 {
	return mix(key ^ xxhash.Sum64String(t.provider.name))
}

// pickAffine is pick for a request with a cache affinity key: a non-empty
// candidate list in failover order.
func pickAffine(m *modelRoute, c []*target, key uint64) *target {
	if len(c) == 1 {
		return c[0]
	}
	switch m.policy {
	case policyWeighted:
		var best *target
		bestScore := math.Inf(-1)
		for _, t := range c {
			if t.weight <= 0 {
				continue
			}
			// u in (0,1): the top 53 bits, offset by half a step.
			u := (float64(score(key, t)>>11) + 0.5) / (1 << 53)
			if s := float64(t.weight) / -math.Log(u); s > bestScore {
				best, bestScore = t, s
			}
		}
		if best == nil {
			return c[0] // no weights: as pick
		}
		return best
	case policyLatency:
		var bestEst float64
		for i, t := range c {
			est, n := t.provider.health.estimate()
			if n < exploreSamples {
				return t // exploration first, as pick
			}
			if i == 0 || float64(est) < bestEst {
				bestEst = float64(est)
			}
		}
		limit := bestEst * (1 + m.latencyTolerance)
		var best *target
		var bestScore uint64
		for _, t := range c {
			if est, _ := t.provider.health.estimate(); float64(est) > limit {
				continue
			}
			if s := score(key, t); best == nil || s > bestScore {
				best, bestScore = t, s
			}
		}
		if best == nil { // estimates moved under us: as pick
			return pick(m.policy, c)
		}
		return best
	}
	return pick(m.policy, c)
}
