package extproc

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// The rate limit is decided in the request body phase (it needs the
// prompt's token estimate), so a key already over its limit would still
// have its whole body read and held before its 429. overLimit remembers
// keys the limiter refused because a per-minute limit was used up, until
// the limit's window resets, and the request headers phase refuses their
// requests from the headers alone. A change of the key's limits (or its
// tier's) forgets the entry.

// maxOverLimit bounds the remembered keys; past it the memory starts over.
const maxOverLimit = 1 << 16

type overLimit struct {
	m sync.Map // limit id -> *overEntry
	n atomic.Int64
}

type overEntry struct {
	until     time.Time
	lim       ratelimit.Limits
	typ, what string
	limit     int64
	// headers are the refusal's x-ratelimit-* headers (shared, never
	// modified: the reset values are rewritten on a copy).
	headers []*corev3.HeaderValueOption
}

func (o *overLimit) remember(id string, e *overEntry) {
	if _, loaded := o.m.Swap(id, e); !loaded && o.n.Add(1) > maxOverLimit {
		o.m.Clear()
		o.n.Store(0)
	}
}

// check returns the refusal of a key still over a limit.
func (o *overLimit) check(id string, lim ratelimit.Limits, now time.Time) *overEntry {
	v, ok := o.m.Load(id)
	if !ok {
		return nil
	}
	e := v.(*overEntry)
	if !now.Before(e.until) || e.lim != lim {
		o.m.CompareAndDelete(id, v)
		return nil
	}
	return e
}

// rememberOverLimit notes a refusal whose limit is used up (not merely
// too small for this request's estimate).
func (st *stream) rememberOverLimit(typ, what string, limit, used int64, wait int64) {
	if used < limit || st.limits.local {
		// The local fallback's refusals are this replica's alone, and
		// must not outlive the fleet limiter's return.
		return
	}
	l := &st.srv.limits
	var tiers map[string]config.Tier
	if p := l.tiers.Load(); p != nil {
		tiers = *p
	}
	lim, ok := ratelimit.KeyLimits(tiers, &st.key)
	if !ok {
		return
	}
	l.over.remember(st.key.LimitID(), &overEntry{until: time.Now().Add(time.Duration(wait) * time.Second),
		lim: lim, typ: typ, what: what, limit: limit, headers: st.limits.headers})
}

// refuseOverLimit is the request headers phase's 429 for a key still over
// a per-minute limit, or nil.
func (st *stream) refuseOverLimit() *extprocv3.ProcessingResponse {
	l := &st.srv.limits
	if l.rls == nil || st.origin == catalog.OriginBatch {
		return nil
	}
	var tiers map[string]config.Tier
	if p := l.tiers.Load(); p != nil {
		tiers = *p
	}
	lim, ok := ratelimit.KeyLimits(tiers, &st.key)
	if !ok {
		return nil // the body phase answers it
	}
	now := time.Now()
	e := l.over.check(st.key.LimitID(), lim, now)
	if e == nil {
		return nil
	}
	wait := int64((e.until.Sub(now) + time.Second - 1) / time.Second)
	l.metrics.Limited.Inc(e.typ, st.key.Tier)
	st.srv.log.Info("extproc: rate limited on headers", "request_id", st.requestID, "key_id", st.key.ID, "tier", st.key.Tier, "type", e.typ)
	headers := make([]*corev3.HeaderValueOption, 0, len(e.headers))
	reset := (time.Duration(wait) * time.Second).String()
	for _, h := range e.headers {
		switch h.GetHeader().GetKey() {
		case "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens":
			h = setHeader(h.GetHeader().GetKey(), reset)
		}
		headers = append(headers, h)
	}
	st.limits.headers = headers
	return immediateWith(&apierror.Error{
		Status: http.StatusTooManyRequests, Type: e.typ, Code: "rate_limit_exceeded", RetryAfter: int(wait),
		Message: fmt.Sprintf("Rate limit reached for %s on API key %s: Limit %d, Used %d. "+
			"The limit resets in %s; please try again then.",
			e.what, st.key.ID, e.limit, e.limit, time.Duration(wait)*time.Second),
	}, headers)
}
