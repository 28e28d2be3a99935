package extproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// Limiter is the rate limit service (the RLS API); the client from
// rlsv3.NewRateLimitServiceClient satisfies it.
type Limiter interface {
	ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, opts ...grpc.CallOption) (*rlsv3.RateLimitResponse, error)
}

// DefaultLimiterTimeout bounds one admission call to the limiter. An answer
// that takes longer counts as the limiter being unreachable, and the key's
// tier's on_limiter_error decides.
const DefaultLimiterTimeout = 500 * time.Millisecond

// The limiter is down after limiterDownAfter failures in a row to reach it
// (one slow answer under load must not turn away everyone's requests).
// While it is down, one admission per DefaultLimiterProbeInterval asks it
// whether it is back; the others go straight to their tier's
// on_limiter_error instead of each waiting out the timeout.
const (
	limiterDownAfter            = 3
	DefaultLimiterProbeInterval = 250 * time.Millisecond
)

// errLimiterSkipped stands for the answer the limiter was not asked for
// while it is down (limiter.skip).
var errLimiterSkipped = errors.New("limiter down: not asked until the next probe")

// Token estimate constants (see estimatePromptTokens).
const (
	bytesPerToken     = 4
	tokensPerMessage  = 3
	minPromptEstimate = 1
)

var (
	errNoLimits = &apierror.Error{Status: http.StatusForbidden, Code: "rate_limits_not_configured",
		Message: "This API key has no rate limits configured for its tier, so it cannot be served. Ask your gateway administrator."}
	errLimiterDown = apierror.Server(http.StatusServiceUnavailable, "rate_limiter_unavailable",
		"The gateway cannot check your rate limits right now. Please retry shortly.")
)

// limiter is the Server's rate limiting state.
type limiter struct {
	rls     Limiter
	timeout time.Duration
	metrics *ratelimit.Metrics
	tiers   atomic.Pointer[map[string]config.Tier]
	errLog  throttle
	// batchLocks serialise the check and the reservation of batch lines of
	// one key (striped by its limit id), so lines racing for the last
	// tokens of a window cannot each pass the check and then all be
	// counted (admitBatchLine).
	batchLocks [64]sync.Mutex
	over       overLimit // keys refused until their window resets (overlimit.go)
	// down: the limiter's last limiterDownAfter answers (failures counts
	// them) were failures to reach it; until it answers again, only one
	// admission per probeEvery asks it (the one that moves nextProbe, Unix
	// nanoseconds).
	failures   atomic.Int32
	down       atomic.Bool
	nextProbe  atomic.Int64
	probeEvery time.Duration
	// local counts the requests of tiers with on_limiter_error local
	// while the limiter cannot decide: envoyproxy/ratelimit's service on
	// this process's memory (ratelimit.MemoryCache), each key's limits
	// divided by its tier's local_replicas.
	local *ratelimit.Server
}

// setTiers is called with every catalog extproc accepts.
func (l *limiter) setTiers(t map[string]config.Tier) {
	l.tiers.Store(&t)
	if l.local != nil {
		// Local calls carry every limit as an override; the domain's
		// configuration only has to be there.
		_ = l.local.SetConfig(ratelimit.BuildConfig(t))
	}
}

// localRLS is the local fallback as a Limiter.
type localRLS struct{ *ratelimit.Server }

func (l localRLS) ShouldRateLimit(ctx context.Context, in *rlsv3.RateLimitRequest, _ ...grpc.CallOption) (*rlsv3.RateLimitResponse, error) {
	return l.Server.ShouldRateLimit(ctx, in)
}

// localLimits are the limits the local fallback counts a key against:
// its limits divided by the tier's local_replicas, rounded up, always sent
// as overrides.
func localLimits(lim ratelimit.Limits, tier config.Tier) ratelimit.Limits {
	n := int64(max(tier.LocalReplicas, 1))
	return ratelimit.Limits{RPM: (lim.RPM + n - 1) / n, TPM: (lim.TPM + n - 1) / n, CustomRPM: true, CustomTPM: true}
}

// limitState is one request's rate limiting state.
type limitState struct {
	// headers are the x-ratelimit-* headers for the response.
	headers []*corev3.HeaderValueOption
	// usagePublished: the usage went out as dynamic metadata, for the data
	// plane's stream-end charge (publishUsageEarly, or the body's end).
	usagePublished bool
	// metered: the limiter admitted the request, so its tokens are owed
	// to the key's TPM; lim and estimate are the key's limits and the
	// prompt estimate admission compared with its remaining tokens.
	metered  bool
	lim      ratelimit.Limits
	estimate int64
	// reserved is what admission charged already (a batch line's
	// estimate); the charges at the end add the rest.
	reserved int64
	// local: the limiter could not decide and the tier's
	// on_limiter_error local admitted the request on this replica's
	// counters (lim is then the divided limits); its tokens are charged
	// there when it ends (chargeLocal).
	local bool
}

// admit charges the request to its key's requests-per-minute limit and
// checks that the key's remaining tokens cover the request's prompt
// estimate (estimateFn, called only when there is a limiter:
// estimatePromptTokens or the embeddings' estimate), with the two
// descriptors of the shared scheme (docs/ratelimit-design.md). The tokens
// themselves are charged when the response ends, by the data plane's
// ratelimit filter, from the total_tokens this server publishes (or by
// chargeUnreported). It returns the reply that refuses the request, or nil
// to go on; either way the headers for the client are kept for the
// response.
//
// It takes two limiter calls. The first only reads both counters
// (hits_addend 0): a key already over its RPM, or whose remaining tokens
// do not cover the estimate, is refused without touching either. Only then
// does the second count the request (requests hits_addend 1), whose
// increment-then-compare decides RPM exactly however many requests race.
// One call counting the request while checking the tokens would spend a
// request slot on every request refused for tokens, as the RLS API has no
// conditional increment (and the fleet's stock ratelimit service none
// either).
func (st *stream) admit(ctx context.Context, estimateFn func() int64) *extprocv3.ProcessingResponse {
	l := &st.srv.limits
	if l.rls == nil {
		return nil
	}
	var tiers map[string]config.Tier
	if p := l.tiers.Load(); p != nil {
		tiers = *p
	}
	lim, ok := ratelimit.KeyLimits(tiers, &st.key)
	if !ok {
		st.srv.log.Warn("extproc: key has no rate limits", "request_id", st.requestID, "key_id", st.key.ID, "tier", st.key.Tier)
		return immediate(errNoLimits)
	}
	estimate := estimateFn()
	if st.origin == catalog.OriginBatch {
		return st.admitBatchLine(ctx, l.rls, tiers[st.key.Tier], lim, estimate)
	}
	return st.admitOn(ctx, l.rls, tiers[st.key.Tier], lim, estimate)
}

// admitOn is admit's decision on the limiter rls: the fleet's, or the
// local fallback (st.limits.local set).
func (st *stream) admitOn(ctx context.Context, rls Limiter, tier config.Tier, lim ratelimit.Limits, estimate int64) *extprocv3.ProcessingResponse {
	l := &st.srv.limits
	id := st.key.LimitID()
	check, err := l.call(ctx, rls,
		ratelimit.RequestsDescriptor(st.key.Tier, id, lim, 0),
		ratelimit.TokensDescriptor(st.key.Tier, id, lim, 0))
	if err != nil {
		return st.limiterFailed(ctx, err, tier, lim, estimate)
	}
	rq, tk := check[0], check[1]
	tokensLeft := int64(tk.GetLimitRemaining())
	if tk.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		tokensLeft = 0
	}
	if rq.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT && tokensLeft >= estimate {
		counted, err := l.call(ctx, rls, ratelimit.RequestsDescriptor(st.key.Tier, id, lim, 1))
		if err != nil {
			return st.limiterFailed(ctx, err, tier, lim, estimate)
		}
		rq = counted[0]
	}
	requestsLeft := int64(rq.GetLimitRemaining())
	switch {
	case rq.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT:
		st.limits.headers = rateLimitHeaders(rq, tk, 0, tokensLeft)
		l.metrics.Limited.Inc(apierror.TypeRequests, st.key.Tier)
		limit := int64(rq.GetCurrentLimit().GetRequestsPerUnit())
		return st.tooMany(apierror.TypeRequests, "requests per minute (RPM)", limit, limit, 1, rq)
	case tokensLeft < estimate:
		st.limits.headers = rateLimitHeaders(rq, tk, requestsLeft, tokensLeft)
		l.metrics.Limited.Inc(apierror.TypeTokens, st.key.Tier)
		limit := int64(tk.GetCurrentLimit().GetRequestsPerUnit())
		return st.tooMany(apierror.TypeTokens, "tokens per minute (TPM)", limit, limit-tokensLeft, estimate, tk)
	}
	// An admitted request's estimate is shown as spent already, as OpenAI
	// does, though it is only charged (at its real size) when it ends.
	st.limits.headers = rateLimitHeaders(rq, tk, requestsLeft, tokensLeft-estimate)
	st.limits.metered, st.limits.lim, st.limits.estimate = true, lim, estimate
	return nil
}

// admitBatchLine admits a batch line. Batch lines are outside the
// requests per minute (a batch has its own allowance of lines a day,
// checked when it is created) but draw from the key's tokens per minute,
// so a running batch cannot spend more than the key's TPM: the line's
// prompt estimate is reserved on the tokens counter at admission (the rest
// of its usage is charged when it ends: charge_tokens), and a line whose
// estimate the remaining tokens do not cover is refused with 429 tokens and
// PacedHeader. The batch runner then waits for the window to reset
// (retry-after) and sends it again: lines wait, they do not fail. A line
// larger than the whole TPM could never be admitted, so its 429 is not
// marked paced and the runner's retries end it.
//
// The check (hits 0) and the reservation are made under a per-key lock:
// without it, lines waking together at a window's start would all pass the
// check, and those the reservation then refused would still be counted,
// using up the window for nothing. (A client request of the key charged
// between the two calls can still make the reservation fail; that line
// waits for the next window.)
func (st *stream) admitBatchLine(ctx context.Context, rls Limiter, tier config.Tier, lim ratelimit.Limits, estimate int64) *extprocv3.ProcessingResponse {
	resp, err := st.batchLineOn(ctx, rls, lim, estimate)
	if err != nil {
		// Out of the key's lock: the local fallback takes it again.
		return st.limiterFailed(ctx, err, tier, lim, estimate)
	}
	return resp
}

// batchLineOn is admitBatchLine's decision on rls, under the key's lock;
// an error means rls could not decide.
func (st *stream) batchLineOn(ctx context.Context, rls Limiter, lim ratelimit.Limits, estimate int64) (*extprocv3.ProcessingResponse, error) {
	l := &st.srv.limits
	id := st.key.LimitID()
	mu := &l.batchLocks[stripe(id, len(l.batchLocks))]
	mu.Lock()
	defer mu.Unlock()
	check, err := l.call(ctx, rls, ratelimit.TokensDescriptor(st.key.Tier, id, lim, 0))
	if err != nil {
		return nil, err
	}
	tk := check[0]
	tokensLeft := int64(tk.GetLimitRemaining())
	if tk.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		tokensLeft = 0
	}
	if tokensLeft >= estimate {
		reserved, err := l.call(ctx, rls, ratelimit.TokensDescriptor(st.key.Tier, id, lim, uint64(estimate)))
		if err != nil {
			return nil, err
		}
		if tk = reserved[0]; tk.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			st.limits.metered, st.limits.lim, st.limits.estimate, st.limits.reserved = true, lim, estimate, estimate
			return nil, nil
		}
		tokensLeft = 0
	}
	l.metrics.Limited.Inc(apierror.TypeTokens, st.key.Tier)
	limit := int64(tk.GetCurrentLimit().GetRequestsPerUnit())
	st.limits.headers = nil
	if estimate <= limit {
		st.limits.headers = []*corev3.HeaderValueOption{setHeader(catalog.PacedHeader, apierror.TypeTokens)}
	}
	return st.tooMany(apierror.TypeTokens, "tokens per minute (TPM)", limit, limit-tokensLeft, estimate, tk), nil
}

// stripe picks one of n locks for s (FNV-1a).
func stripe(s string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return int(h % uint32(n))
}

// call makes one admission call to rls, bounded by the limiter timeout,
// and returns the statuses of ds once checkAnswer accepts them. While the
// fleet's limiter is down it is asked only by the probe (skip).
func (l *limiter) call(ctx context.Context, rls Limiter, ds ...*ratelimitv3.RateLimitDescriptor) ([]*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	_, local := rls.(localRLS)
	if !local && l.skip() {
		return nil, errLimiterSkipped
	}
	cctx := ctx
	if m, ok := rls.(inMemoryLimiter); !ok || !m.InMemory() {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	resp, err := rls.ShouldRateLimit(cctx, limitRequest(ds))
	if !local {
		switch {
		case err == nil:
			l.failures.Store(0)
			l.down.Store(false)
		case ctx.Err() == nil && l.failures.Add(1) >= limiterDownAfter: // not merely the request going away
			l.nextProbe.Store(time.Now().Add(l.probeEvery).UnixNano())
			l.down.Store(true)
		}
	}
	if err == nil {
		err = checkAnswer(resp, len(ds))
	}
	if err != nil {
		return nil, err
	}
	return resp.GetStatuses(), nil
}

// inMemoryLimiter is a Limiter that can say it answers from this
// process's memory (ratelimit.Server on its MemoryCache: the embedded
// service, the local fallback). Such a call cannot hang, so it is made
// without the limiter timeout's context and timer (two calls a request).
type inMemoryLimiter interface{ InMemory() bool }

// limitRequest is the RLS request for ds, allocated with its descriptor
// list (admission's calls have one or two), so that ds, copied, stays the
// caller's.
func limitRequest(ds []*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	b := &struct {
		req rlsv3.RateLimitRequest
		ds  [2]*ratelimitv3.RateLimitDescriptor
	}{}
	b.req.Domain = ratelimit.Domain
	if len(ds) <= len(b.ds) {
		b.req.Descriptors = b.ds[:copy(b.ds[:], ds)]
	} else {
		b.req.Descriptors = slices.Clone(ds)
	}
	return &b.req
}

// skip reports whether an admission should not ask the limiter: it is down
// and this is not the probe, the one admission per probeEvery that asks.
// Its answer ends the outage (call), or starts the next interval.
func (l *limiter) skip() bool {
	if !l.down.Load() {
		return false
	}
	next := l.nextProbe.Load()
	now := time.Now().UnixNano()
	return now < next || !l.nextProbe.CompareAndSwap(next, now+int64(l.probeEvery))
}

// chargeUnreported charges the key's tokens per minute for a request that
// ended without its usage reaching the data plane's stream-end charge: the
// client hung up or the upstream reset before the usage event (or before
// the response began), so the data plane found no total_tokens to charge.
// Without it a client could spend unbounded prompt tokens by abandoning
// every stream. The charge is the usage if it was seen, otherwise the
// prompt estimate plus the completion relayed so far (its text bytes at
// the same four bytes per token). An upstream error answer (4xx, 5xx)
// generated nothing and is not charged. It runs once, when the ext_proc
// stream ends (finish).
func (st *stream) chargeUnreported(ctx context.Context) {
	lm := &st.limits
	if !lm.metered || lm.usagePublished || !st.routed || (st.status >= 300 && !st.haveUsage) {
		return
	}
	if !st.haveUsage {
		completion := (st.sse.generated + bytesPerToken - 1) / bytesPerToken
		st.setUsage(Usage{PromptTokens: lm.estimate, CompletionTokens: completion})
	}
	hits := st.usage.TotalTokens - lm.reserved
	if hits <= 0 {
		return
	}
	l := &st.srv.limits
	// The client may be gone; the tokens were spent all the same.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.timeout)
	defer cancel()
	_, err := l.rls.ShouldRateLimit(cctx, &rlsv3.RateLimitRequest{
		Domain:      ratelimit.Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{ratelimit.TokensDescriptor(st.key.Tier, st.key.LimitID(), lm.lim, uint64(hits))},
	})
	if err != nil {
		l.metrics.ChargeErrors.Inc("extproc")
		if n, ok := l.errLog.allow(); ok {
			st.srv.log.Warn("extproc: charging an unfinished response failed; usage not charged", "request_id", st.requestID,
				"key_id", st.key.ID, "tokens", hits, "error", err, "suppressed_since_last", n)
		}
		return
	}
	st.srv.log.Debug("extproc: unfinished response charged", "request_id", st.requestID, "key_id", st.key.ID,
		"status", st.status, "tokens", hits)
}

// chargeLocal charges the tokens of a request the local fallback admitted
// to this replica's counters, when it ends: its usage, or, if none was
// seen, the prompt estimate plus the completion relayed so far (as
// chargeUnreported counts it), minus what admission reserved. (The data
// plane's stream-end charge goes to the fleet's limiter, which was down.)
func (st *stream) chargeLocal(ctx context.Context) {
	lm := &st.limits
	if !lm.local || !lm.metered || !st.routed || (st.status >= 300 && !st.haveUsage) {
		return
	}
	total := st.usage.TotalTokens
	if !st.haveUsage {
		total = lm.estimate + (st.sse.generated+bytesPerToken-1)/bytesPerToken
	}
	hits := total - lm.reserved
	if hits <= 0 {
		return
	}
	l := &st.srv.limits
	if _, err := l.local.ShouldRateLimit(context.WithoutCancel(ctx), &rlsv3.RateLimitRequest{
		Domain:      ratelimit.Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{ratelimit.TokensDescriptor(st.key.Tier, st.key.LimitID(), lm.lim, uint64(hits))},
	}); err != nil {
		st.srv.log.Warn("extproc: charging the local rate limiter failed", "request_id", st.requestID, "key_id", st.key.ID, "error", err)
	}
}

// checkAnswer rejects an answer that does not decide both descriptors: a
// missing status, or a descriptor the limiter has no limit for (a tier it
// has not been configured with yet), which would otherwise silently mean
// "unlimited".
func checkAnswer(resp *rlsv3.RateLimitResponse, n int) error {
	st := resp.GetStatuses()
	if len(st) != n {
		return fmt.Errorf("limiter answered %d statuses for %d descriptors", len(st), n)
	}
	for i, s := range st {
		if s.GetCurrentLimit() == nil || s.GetCurrentLimit().GetRequestsPerUnit() == 0 {
			return fmt.Errorf("limiter has no limit for descriptor %d (is its configuration current?)", i)
		}
	}
	return nil
}

// tooMany is the 429 for the limit that status reports over.
func (st *stream) tooMany(typ, what string, limit, used, requested int64, s *rlsv3.RateLimitResponse_DescriptorStatus) *extprocv3.ProcessingResponse {
	wait := resetSeconds(s)
	e := &apierror.Error{
		Status: http.StatusTooManyRequests, Type: typ, Code: "rate_limit_exceeded", RetryAfter: int(wait),
		Message: fmt.Sprintf("Rate limit reached for %s on API key %s: Limit %d, Used %d, Requested %d. "+
			"The limit resets in %s; please try again then.",
			what, st.key.ID, limit, used, requested, time.Duration(wait)*time.Second),
	}
	st.srv.log.Info("extproc: rate limited", "request_id", st.requestID, "key_id", st.key.ID, "tier", st.key.Tier, "type", typ)
	st.rememberOverLimit(typ, what, limit, used, wait)
	return immediateWith(e, st.limits.headers)
}

// limiterFailed applies the tier's on_limiter_error when the limiter could
// not decide: deny answers 503; local decides on this replica's counters
// against the key's limits divided by the tier's local_replicas; allow
// serves the request unmetered, with only the limit headers (the
// remaining counts are unknown). A failure of the local fallback itself
// answers 503.
func (st *stream) limiterFailed(ctx context.Context, err error, tier config.Tier, lim ratelimit.Limits, estimate int64) *extprocv3.ProcessingResponse {
	l := &st.srv.limits
	if st.limits.local {
		st.srv.log.Error("extproc: local rate limiter failed", "request_id", st.requestID, "error", err)
		return immediate(errLimiterDown, "retry-after", "1")
	}
	mode := tier.OnLimiterError
	if mode == config.LimiterLocal && l.local == nil {
		mode = config.LimiterDeny
	}
	var action string
	switch mode {
	case config.LimiterAllow:
		action = "allowed"
	case config.LimiterLocal:
		action = "local"
	default: // deny, or unset (no catalog tier)
		mode, action = config.LimiterDeny, "denied"
	}
	if ctx.Err() == nil { // not merely Envoy going away
		l.metrics.LimiterErrors.Inc(st.key.Tier, action)
		if n, ok := l.errLog.allow(); ok {
			st.srv.log.Warn("extproc: rate limiter unavailable", "request_id", st.requestID, "tier", st.key.Tier,
				"action", action, "error", err, "suppressed_since_last", n)
		}
	}
	switch mode {
	case config.LimiterDeny:
		return immediate(errLimiterDown, "retry-after", "1")
	case config.LimiterLocal:
		st.limits.local = true
		if st.origin == catalog.OriginBatch {
			return st.admitBatchLine(ctx, localRLS{l.local}, tier, localLimits(lim, tier), estimate)
		}
		return st.admitOn(ctx, localRLS{l.local}, tier, localLimits(lim, tier), estimate)
	}
	st.limits.headers = []*corev3.HeaderValueOption{
		setHeader("x-ratelimit-limit-requests", strconv.FormatInt(lim.RPM, 10)),
		setHeader("x-ratelimit-limit-tokens", strconv.FormatInt(lim.TPM, 10)),
	}
	return nil
}

// rateLimitHeaders are OpenAI's six x-ratelimit-* headers, as setHeader
// makes them but allocated together (every response carries them): the
// options and values in one block, the values' bytes in one buffer.
func rateLimitHeaders(rq, tk *rlsv3.RateLimitResponse_DescriptorStatus, requestsLeft, tokensLeft int64) []*corev3.HeaderValueOption {
	names := [...]string{"x-ratelimit-limit-requests", "x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
		"x-ratelimit-limit-tokens", "x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}
	var ends [len(names)]int
	buf := make([]byte, 0, 96)
	buf = strconv.AppendUint(buf, uint64(rq.GetCurrentLimit().GetRequestsPerUnit()), 10)
	ends[0] = len(buf)
	buf = strconv.AppendInt(buf, max(requestsLeft, 0), 10)
	ends[1] = len(buf)
	buf = append(buf, (time.Duration(resetSeconds(rq)) * time.Second).String()...)
	ends[2] = len(buf)
	buf = strconv.AppendUint(buf, uint64(tk.GetCurrentLimit().GetRequestsPerUnit()), 10)
	ends[3] = len(buf)
	buf = strconv.AppendInt(buf, max(tokensLeft, 0), 10)
	ends[4] = len(buf)
	buf = append(buf, (time.Duration(resetSeconds(tk)) * time.Second).String()...)
	ends[5] = len(buf)
	parts := new(struct {
		opts [len(names)]corev3.HeaderValueOption
		vals [len(names)]corev3.HeaderValue
		ptrs [len(names)]*corev3.HeaderValueOption
	})
	start := 0
	for i, name := range names {
		v := &parts.vals[i]
		v.Key, v.RawValue = name, buf[start:ends[i]:ends[i]]
		start = ends[i]
		o := &parts.opts[i]
		o.Header, o.AppendAction = v, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		parts.ptrs[i] = o
	}
	return parts.ptrs[:]
}

// resetSeconds is when the descriptor's window ends, in whole seconds (at
// least 1, the smallest useful retry-after).
func resetSeconds(s *rlsv3.RateLimitResponse_DescriptorStatus) int64 {
	d := s.GetDurationUntilReset()
	secs := d.GetSeconds()
	if d.GetNanos() > 0 {
		secs++
	}
	return max(secs, 1)
}

// withLimitHeaders adds the admission's x-ratelimit-* headers to a
// response headers reply.
func (st *stream) withLimitHeaders(resp *extprocv3.ProcessingResponse) *extprocv3.ProcessingResponse {
	rh := resp.GetResponseHeaders()
	if len(st.limits.headers) == 0 || rh == nil {
		return resp
	}
	if rh.Response == nil {
		rh.Response = &extprocv3.CommonResponse{}
	}
	if rh.Response.HeaderMutation == nil {
		rh.Response.HeaderMutation = &extprocv3.HeaderMutation{}
	}
	hm := rh.Response.HeaderMutation
	if hm.SetHeaders == nil {
		// The request's own headers, never modified once built: the
		// reply may hold them as they are (clipped, so nothing appends
		// into them).
		hm.SetHeaders = slices.Clip(st.limits.headers)
	} else {
		hm.SetHeaders = append(hm.SetHeaders, st.limits.headers...)
	}
	return resp
}

// publishUsageEarly returns the reply for a chunk of an event stream that
// is not the last one, carrying the usage as dynamic metadata if this chunk
// completed the usage event. Usage is otherwise published with the stream's
// last message, but SDKs close the connection as soon as they read
// "data: [DONE]", which can end the request before that last (often empty)
// message is processed; the stream-end charge then finds no total_tokens
// and the tokens would go uncounted. The usage event precedes [DONE], and
// its reply is applied before the chunk reaches the client.
func (st *stream) publishUsageEarly(resp *extprocv3.ProcessingResponse, out []byte, replace bool) *extprocv3.ProcessingResponse {
	if !st.sse.seen || st.limits.usagePublished {
		return resp
	}
	st.limits.usagePublished = true
	st.setUsage(st.sse.usage)
	var cr *extprocv3.CommonResponse
	if replace {
		cr = &extprocv3.CommonResponse{BodyMutation: bodyMutation(out)}
	}
	r := responseBodyReply(cr) // not the reused replies: this one carries metadata
	r.DynamicMetadata = usageMetadata(st.usage, st.limits.reserved)
	return r
}

// limitMetadata adds what the data plane's ratelimit filter needs beyond
// key_id and tier: the key's own TPM when it has one, as the limit override
// of the stream-end charge.
func (st *stream) limitMetadata(fields map[string]*structpb.Value) {
	if st.key.ID != st.key.LimitID() {
		// key_id names the rotation chain the limits are counted on; keep
		// the key actually used visible in the access log too.
		fields["api_key_id"] = structpb.NewStringValue(st.key.ID)
	}
	if st.key.TPM > 0 {
		fields[ratelimit.MetaTPMLimit] = ratelimit.TPMLimitMetadata(st.key.TPM)
	}
}

// immediateWith is immediate with extra headers already in mutation form.
func immediateWith(e *apierror.Error, extra []*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	resp := immediate(e)
	hm := resp.GetImmediateResponse().GetHeaders()
	hm.SetHeaders = append(hm.SetHeaders, extra...)
	return resp
}

// estimatePromptTokens is the cheap prompt estimate admission compares with
// the key's remaining tokens: the bytes of the messages' text (string
// contents, text parts, names, tool call names and arguments) divided by
// four, rounded up, plus three tokens per message for the chat framing. Four
// bytes per token is the usual rule of thumb for English text with BPE
// tokenizers. Images, audio and files are not estimated: they are charged
// at their real cost when the response ends. The raw JSON lengths are used
// without unescaping, which slightly overcounts escaped text. parseChat
// counts the text as it validates the messages, so this reads nothing.
func estimatePromptTokens(_ []byte, req *chatRequest) int64 {
	est := (req.textBytes+bytesPerToken-1)/bytesPerToken + tokensPerMessage*req.messages
	return max(est, minPromptEstimate)
}

// throttle lets one event through per second and counts the others, so a
// limiter outage at thousands of requests per second logs once a second.
type throttle struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int64
}

func (t *throttle) allow() (suppressed int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	if now.Sub(t.last) < time.Second {
		t.suppressed++
		return 0, false
	}
	n := t.suppressed
	t.last, t.suppressed = now, 0
	return n, true
}
