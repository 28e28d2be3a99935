package extproc

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// The downstream phase chooses the provider of a request's first attempt
// (catalog.FirstHeader); Envoy's router fails over from there in the
// order of the model's aggregate cluster. The choice is made from what this
// extproc has seen of each provider in its upstream phase (upstream.go):
// time to first byte and retry-after cooldowns. It is per process: every
// extproc learns on its own, which needs no coordination and is what the
// latency each gateway instance sees is about anyway.

// routingPolicy is a model's config.Model.Routing.
type routingPolicy uint8

const (
	policyPriority routingPolicy = iota
	policyWeighted
	policyLatency
)

func parsePolicy(s string) routingPolicy {
	switch s {
	case config.RoutingWeighted:
		return policyWeighted
	case config.RoutingLatency:
		return policyLatency
	}
	return policyPriority
}

// Latency estimator parameters (see providerHealth).
const (
	// ewmaAlpha is the weight of a new time-to-first-byte sample.
	ewmaAlpha = 0.3
	// exploreSamples is how many samples a provider needs before the
	// latency policy trusts its estimate; until then it is tried first.
	exploreSamples = 3
	// maxCooldown caps a provider's retry-after, so a malformed or absurd
	// value cannot take it out of first choice for a day. Failover still
	// reaches a cooling provider; only first choices avoid it.
	maxCooldown = 10 * time.Minute
)

// providerHealth is what the upstream phase has learnt about one provider.
// It outlives catalogs (keyed by provider name), so a route change does not
// forget a provider's latency or cooldown.
//
// The latency estimator is an exponentially weighted moving average (alpha
// ewmaAlpha) of the provider's time to first byte: from the moment the
// upstream phase has the request body (just before the request is sent) to
// the moment it sees the response headers. An attempt that fails (5xx,
// 429, or no response headers at all: connect failure, reset, per-try
// timeout) counts as a sample of the model's first_byte_timeout, so a
// failing provider looks as slow as the slowest acceptable one. A provider
// with fewer than exploreSamples samples has no trustworthy estimate and is
// preferred (exploration), which also brings a recovered or new provider
// back into the comparison.
type providerHealth struct {
	mu      sync.Mutex // serialises updates; reads use the atomics
	ewma    atomic.Int64
	samples atomic.Int64
	// cooldownUntil is a Unix time in nanoseconds before which the
	// provider asked (retry-after on 429 or 503) not to be sent requests.
	cooldownUntil atomic.Int64
}

// observe adds a time-to-first-byte sample.
func (h *providerHealth) observe(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.samples.Load() == 0 {
		h.ewma.Store(int64(d))
	} else {
		old := float64(h.ewma.Load())
		h.ewma.Store(int64(ewmaAlpha*float64(d) + (1-ewmaAlpha)*old))
	}
	h.samples.Add(1)
}

// estimate returns the current estimate and the number of samples it rests on.
func (h *providerHealth) estimate() (time.Duration, int64) {
	return time.Duration(h.ewma.Load()), h.samples.Load()
}

// coolDown keeps the provider out of first choices for d (from now),
// unless it is already cooling down for longer.
func (h *providerHealth) coolDown(now time.Time, d time.Duration) {
	until := now.Add(min(d, maxCooldown)).UnixNano()
	for {
		cur := h.cooldownUntil.Load()
		if cur >= until || h.cooldownUntil.CompareAndSwap(cur, until) {
			return
		}
	}
}

func (h *providerHealth) cooling(now int64) bool { return now < h.cooldownUntil.Load() }

// healthOf returns the named provider's health, creating it on first use.
func (s *Server) healthOf(name string) *providerHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.health[name]
	if !ok {
		h = &providerHealth{}
		s.health[name] = h
	}
	return h
}

// createdAt is the "created" time GET /v1/models reports for a model: when
// this process first saw the model in a catalog. It stays put across
// catalog updates (a route change does not make a model new), and as the
// catalog carries no timestamp of its own it is the most stable value
// available without one.
func (s *Server) createdAt(model string, now time.Time) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.created[model]
	if !ok {
		c = now.Unix()
		s.created[model] = c
	}
	return c
}

// choose returns the provider for the first attempt of a request for op on
// m, or nil when none of m's providers can serve op.
//
// Candidates are tiered: the home region's providers that are not cooling
// down, then the other region's that are not, then, when every provider
// is cooling down, all of them (the normal order applies and the router's
// failover deals with refusals). Within the first non-empty tier the
// model's policy decides:
//
//   - priority: the first in failover order;
//   - weighted: random, in proportion to weight (a weight of 0 is never
//     chosen while another candidate has weight);
//   - latency: the first with fewer than exploreSamples samples, else the
//     lowest estimate.
func choose(m *modelRoute, op operation, now time.Time) *target {
	return chooseKeyed(m, op, now, 0)
}

// chooseKeyed is choose for a request with a cache affinity key (0 for
// none): the model's policy then picks the candidate by rendezvous hashing
// of the key (affinity.go).
func chooseKeyed(m *modelRoute, op operation, now time.Time, key uint64) *target {
	n := now.UnixNano()
	for tier := range 3 {
		var cands [8]*target // no allocation for models with up to 8 providers
		c := cands[:0]
		for i := range m.targets {
			t := &m.targets[i]
			if !t.provider.kind.serves(op) {
				continue
			}
			switch tier {
			case 0:
				if !t.home || t.provider.health.cooling(n) {
					continue
				}
			case 1:
				if t.home || t.provider.health.cooling(n) {
					continue
				}
			}
			c = append(c, t)
		}
		if len(c) > 0 {
			if key != 0 {
				return pickAffine(m, c, key)
			}
			return pick(m.policy, c)
		}
	}
	return nil
}

// pick applies a policy to a non-empty candidate list in failover order.
func pick(p routingPolicy, c []*target) *target {
	switch p {
	case policyWeighted:
		total := 0
		for _, t := range c {
			total += max(t.weight, 0)
		}
		if total == 0 {
			return c[0]
		}
		r := rand.IntN(total)
		for _, t := range c {
			if r -= max(t.weight, 0); r < 0 {
				return t
			}
		}
	case policyLatency:
		var best *target
		var bestEst time.Duration
		for _, t := range c {
			est, n := t.provider.health.estimate()
			if n < exploreSamples {
				return t
			}
			if best == nil || est < bestEst {
				best, bestEst = t, est
			}
		}
		return best
	}
	return c[0]
}

// retryAfter reads a provider's retry-after (seconds or an HTTP date) or
// retry-after-ms header value; ok is false when there is none or it is
// malformed.
func retryAfter(value string, ms bool, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if n, err := strconv.ParseFloat(value, 64); err == nil {
		unit := time.Second
		if ms {
			unit = time.Millisecond
		}
		switch d := n * float64(unit); {
		case !(d > 0): // zero, negative or NaN: no wait asked
			return 0, false
		case d >= float64(maxCooldown):
			return maxCooldown, true
		default:
			return time.Duration(d), true
		}
	}
	if ms {
		return 0, false
	}
	t, err := http.ParseTime(value)
	if err != nil || !t.After(now) {
		return 0, false
	}
	return t.Sub(now), true
}
