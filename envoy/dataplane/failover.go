package dataplane

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	aggregatev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/aggregate/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
)

// Failover, as Envoy does it for the resources the control plane generates
// (docs/routing-design.md): aggregate clusters, the router's retry policy
// with the previous_hosts predicate and the previous_priorities retry
// priority, outlier detection, and the healthy panic threshold.

const (
	clusterTypeAggregate = "envoy.clusters.aggregate"
	predicatePrevHosts   = "envoy.retry_host_predicates.previous_hosts"
	priorityPrevious     = "envoy.retry_priorities.previous_priorities"
)

// Envoy's defaults.
const (
	defaultPanicThreshold     = 50.0
	defaultRetryBackoffBase   = 25 * time.Millisecond
	defaultConsecutive5xx     = 5
	defaultConsecutiveGateway = 5
	defaultOutlierInterval    = 10 * time.Second
	defaultBaseEjectionTime   = 30 * time.Second
	defaultMaxEjectionPercent = 10
	defaultMaxEjectionTime    = 300 * time.Second
	defaultFailPctThreshold   = 85
	defaultFailPctMinHosts    = 5
	defaultFailPctVolume      = 50
)

// ---- aggregate clusters ----

// compileAggregate reads an envoy.clusters.aggregate cluster. Its members
// are resolved against the whole update by resolveAggregates.
func compileAggregate(c *clusterv3.Cluster, out *cluster, from string) error {
	ct := c.GetClusterType()
	if ct.GetName() != clusterTypeAggregate {
		return fmt.Errorf("%s: cluster type %q is not supported", from, ct.GetName())
	}
	cfg := &aggregatev3.ClusterConfig{}
	if err := unmarshalTyped(ct.GetTypedConfig(), cfg); err != nil {
		return fmt.Errorf("%s: %s: %w", from, clusterTypeAggregate, err)
	}
	if err := cfg.ValidateAll(); err != nil {
		return fmt.Errorf("%s: %s: %w", from, clusterTypeAggregate, err)
	}
	if c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		// Envoy refuses the combination at load time.
		return fmt.Errorf("%s: an aggregate cluster needs lb_policy CLUSTER_PROVIDED, not %s", from, c.GetLbPolicy())
	}
	out.aggregate = slices.Clone(cfg.GetClusters())
	return nil
}

// resolveAggregates links every aggregate cluster to its members. A member
// the update does not define is a missing reference (the update waits for
// it); an aggregate member is refused (nesting them is not supported here).
func resolveAggregates(clusters map[string]*cluster, defined []*clusterv3.Cluster) error {
	var errs []error
	for _, c := range clusters {
		if c.aggregate == nil {
			continue
		}
		for _, name := range c.aggregate {
			m, ok := clusters[name]
			switch {
			case name == c.name:
				errs = append(errs, fmt.Errorf("cluster %q: an aggregate cluster cannot include itself", c.name))
			case ok && m.aggregate != nil:
				errs = append(errs, fmt.Errorf("cluster %q: member %q is an aggregate cluster, which is not supported", c.name, name))
			case ok:
				c.members = append(c.members, m)
			case !slices.ContainsFunc(defined, func(d *clusterv3.Cluster) bool { return d.GetName() == name }):
				errs = append(errs, &missingError{kind: "cluster", name: name, from: fmt.Sprintf("aggregate cluster %q", c.name)})
			}
		}
	}
	return errors.Join(errs...)
}

// ---- host selection ----

// level is one priority of a cluster's flattened priority set: for a plain
// cluster its own priorities in order; for an aggregate cluster the
// priorities of its members, member after member, as Envoy's aggregate
// load balancer sees them.
type level struct {
	c *cluster
	l *priorityLevel
}

func (c *cluster) flatLevels() []level {
	if c.aggregate == nil {
		out := make([]level, len(c.levels))
		for i, l := range c.levels {
			out[i] = level{c, l}
		}
		return out
	}
	var out []level
	for _, m := range c.members {
		for _, l := range m.levels {
			out = append(out, level{m, l})
		}
	}
	return out
}

// selection is the retry state host selection reads: the hosts and the
// flattened priorities earlier attempts went to.
type selection struct {
	hosts      []*endpoint
	priorities map[int]bool
	// From the retry policy: whether the predicate and the retry priority
	// are on, and how often a rejected host is picked again.
	prevHosts      bool
	prevPriorities bool
	maxHostTries   int
}

func (s *selection) attempted(ep *endpoint, priority int) {
	s.hosts = append(s.hosts, ep)
	if s.prevPriorities {
		if s.priorities == nil {
			s.priorities = map[int]bool{}
		}
		s.priorities[priority] = true
	}
}

// choose picks the host of the next attempt and the cluster it belongs to
// (a member, for an aggregate cluster), with its flattened priority.
//
// The priority is the first one with healthy hosts (EDS health and outlier
// detection both count) that previous_priorities has not excluded; when
// every priority with healthy hosts is excluded, the exclusions are
// dropped, as Envoy's previous_priorities does. When no priority has a
// healthy host, panic mode balances over every host, unless the healthy
// panic threshold is 0: then there is no host (Envoy: no_healthy_upstream).
// Within the priority, hosts go round robin (weighted while none is
// ejected), re-picking up to maxHostTries times a host the previous_hosts
// predicate rejects.
//
// Envoy spreads load across priorities by their health with the
// overprovisioning factor (1.4); with the one-host providers the control
// plane generates a priority is healthy or not, and this is the same.
func (c *cluster) choose(sel *selection, now time.Time) (*cluster, *endpoint, int) {
	levels := c.flatLevels()
	healthy := make([][]*endpoint, len(levels))
	found := false
	for i, lv := range levels {
		healthy[i] = lv.l.available(now)
		found = found || len(healthy[i]) > 0
	}
	if !found {
		if !c.panic {
			return nil, nil, 0
		}
		for i, lv := range levels {
			if len(lv.l.all) > 0 && lv.c.panic {
				return lv.c, lv.l.all[(lv.l.next.Add(1)-1)%uint64(len(lv.l.all))], i
			}
		}
		return nil, nil, 0
	}
	pick := -1
	for pass := 0; pass < 2 && pick < 0; pass++ {
		for i := range levels {
			if len(healthy[i]) > 0 && (pass == 1 || sel == nil || !sel.priorities[i]) {
				pick = i
				break
			}
		}
	}
	lv, hosts := levels[pick], healthy[pick]
	tries := 1
	if sel != nil && sel.prevHosts && sel.maxHostTries > 1 {
		tries = sel.maxHostTries
	}
	var ep *endpoint
	for range tries {
		ep = lv.l.pickFrom(hosts, lv.c.random)
		if sel == nil || !sel.prevHosts || !slices.Contains(sel.hosts, ep) {
			break
		}
	}
	return lv.c, ep, pick
}

// available returns the level's healthy hosts that outlier detection has
// not ejected.
func (l *priorityLevel) available(now time.Time) []*endpoint {
	ejected := false
	for _, e := range l.healthy {
		if e.health.isEjected(now) {
			ejected = true
			break
		}
	}
	if !ejected {
		return l.healthy
	}
	out := make([]*endpoint, 0, len(l.healthy))
	for _, e := range l.healthy {
		if !e.health.isEjected(now) {
			out = append(out, e)
		}
	}
	return out
}

// pickFrom picks among hosts, a subset of l.healthy: the weighted schedule
// when it is all of them, round robin over the subset otherwise.
func (l *priorityLevel) pickFrom(hosts []*endpoint, random bool) *endpoint {
	i := l.next.Add(1) - 1
	if random {
		i = rand.Uint64()
	}
	if len(hosts) == len(l.healthy) && len(l.sched) > 0 {
		return l.healthy[l.sched[i%uint64(len(l.sched))]]
	}
	return hosts[i%uint64(len(hosts))]
}

// ---- outlier detection ----

// outlierConfig is a compiled OutlierDetection: the consecutive-error
// detectors, the failure-percentage detector and ejection timing.
// Success-rate detection (a host against the cluster's mean) is not
// implemented: it needs several hosts with traffic, and provider clusters
// have one. Errors are not split by origin (split_external_local_origin_errors
// false, Envoy's default): a reset or connection failure counts as a 503.
type outlierConfig struct {
	consecutive5xx     uint32 // 0: off
	enforce5xx         uint32 // percent
	consecutiveGateway uint32
	enforceGateway     uint32
	// Failure percentage: a host whose answers in the last whole interval
	// were at least failPctThreshold percent failures, out of at least
	// failPctVolume, is ejected, when the cluster has failPctMinHosts hosts.
	failPctThreshold uint32
	failPctMinHosts  uint32
	failPctVolume    uint32
	enforceFailPct   uint32 // percent; 0 (Envoy's default): off
	interval         time.Duration
	baseEjection     time.Duration
	maxEjection      time.Duration
	// maxEjectionPercent of the cluster's hosts may be ejected at once;
	// alwaysEjectOne lets the first go even when one host is more.
	maxEjectionPercent uint32
	alwaysEjectOne     bool
}

func compileOutlier(od *clusterv3.OutlierDetection) *outlierConfig {
	if od == nil {
		return nil
	}
	u32 := func(v interface{ GetValue() uint32 }, isNil bool, def uint32) uint32 {
		if isNil {
			return def
		}
		return v.GetValue()
	}
	dur := func(d interface{ AsDuration() time.Duration }, isNil bool, def time.Duration) time.Duration {
		if isNil {
			return def
		}
		return d.AsDuration()
	}
	o := &outlierConfig{
		consecutive5xx:     u32(od.GetConsecutive_5Xx(), od.GetConsecutive_5Xx() == nil, defaultConsecutive5xx),
		enforce5xx:         u32(od.GetEnforcingConsecutive_5Xx(), od.GetEnforcingConsecutive_5Xx() == nil, 100),
		consecutiveGateway: u32(od.GetConsecutiveGatewayFailure(), od.GetConsecutiveGatewayFailure() == nil, defaultConsecutiveGateway),
		enforceGateway:     u32(od.GetEnforcingConsecutiveGatewayFailure(), od.GetEnforcingConsecutiveGatewayFailure() == nil, 0),
		failPctThreshold:   u32(od.GetFailurePercentageThreshold(), od.GetFailurePercentageThreshold() == nil, defaultFailPctThreshold),
		failPctMinHosts:    u32(od.GetFailurePercentageMinimumHosts(), od.GetFailurePercentageMinimumHosts() == nil, defaultFailPctMinHosts),
		failPctVolume:      u32(od.GetFailurePercentageRequestVolume(), od.GetFailurePercentageRequestVolume() == nil, defaultFailPctVolume),
		enforceFailPct:     u32(od.GetEnforcingFailurePercentage(), od.GetEnforcingFailurePercentage() == nil, 0),
		interval:           dur(od.GetInterval(), od.GetInterval() == nil, defaultOutlierInterval),
		baseEjection:       dur(od.GetBaseEjectionTime(), od.GetBaseEjectionTime() == nil, defaultBaseEjectionTime),
		maxEjection:        dur(od.GetMaxEjectionTime(), od.GetMaxEjectionTime() == nil, defaultMaxEjectionTime),
		maxEjectionPercent: u32(od.GetMaxEjectionPercent(), od.GetMaxEjectionPercent() == nil, defaultMaxEjectionPercent),
		alwaysEjectOne:     od.GetAlwaysEjectOneHost().GetValue(),
	}
	if o.maxEjection < o.baseEjection {
		o.maxEjection = o.baseEjection
	}
	return o
}

// hostHealth is outlier detection's state of one host of one cluster. It
// outlives configuration updates (DataPlane.hosts keeps it by cluster and
// address), so an update does not reset an ejection.
type hostHealth struct {
	mu           sync.Mutex
	consec5xx    uint32
	consecGW     uint32
	ejectedUntil time.Time
	ejections    int // Envoy's ejection time multiplier
	lastEjection time.Time
	// The failure-percentage detector's counts: of the interval numbered
	// bucket (time since the Unix epoch / interval), and of the one before.
	// Envoy swaps two such buckets on its interval timer; here the swap
	// happens on the first report or host pick after the interval ends.
	bucket    int64
	cur, last answerCounts
}

// answerCounts counts a host's answers in one interval.
type answerCounts struct{ total, ok uint64 }

func (h *hostHealth) isEjected(now time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return now.Before(h.ejectedUntil)
}

// Outcomes reported to outlier detection besides response codes. Envoy
// (split_external_local_origin_errors false) counts a failed connection
// and a reset as 503 and a timeout as 504: all are gateway failures. A
// reset after the response head (a stream cut mid-way) is reported too, as
// Envoy's router does: the head's status already counted as an answer.
const (
	outcomeConnectFailure = http.StatusServiceUnavailable
	outcomeReset          = http.StatusServiceUnavailable
	outcomeTimeout        = http.StatusGatewayTimeout
)

// report records the outcome of a request to ep, a host of c, and ejects
// the host when a consecutive-error detector trips: for base_ejection_time
// times the number of ejections in a row (decremented for each interval
// the host stayed in since), at most max_ejection_time, unless
// max_ejection_percent of c's hosts are ejected already. The ejection ends
// by itself: the host is probed back in.
func (c *cluster) report(ep *endpoint, code int, now time.Time, log *slog.Logger) {
	od, h := c.outlier, ep.health
	if od == nil || h == nil {
		return
	}
	h.mu.Lock()
	if now.Before(h.ejectedUntil) {
		h.mu.Unlock()
		return // an answer from before the ejection
	}
	failPct := c.rotate(h, now)
	failed := code >= 500
	if od.enforceFailPct > 0 {
		h.cur.total++
		if !failed {
			h.cur.ok++
		}
	}
	trip := ""
	if failed {
		h.consec5xx++
		if od.consecutive5xx > 0 && h.consec5xx >= od.consecutive5xx {
			h.consec5xx = 0
			if enforced(od.enforce5xx) {
				trip = "consecutive_5xx"
			}
		}
	} else {
		h.consec5xx = 0
	}
	if code == http.StatusBadGateway || code == http.StatusServiceUnavailable || code == http.StatusGatewayTimeout {
		h.consecGW++
		if od.consecutiveGateway > 0 && h.consecGW >= od.consecutiveGateway {
			h.consecGW = 0
			if trip == "" && enforced(od.enforceGateway) {
				trip = "consecutive_gateway_failure"
			}
		}
	} else {
		h.consecGW = 0
	}
	if trip == "" && failPct >= 0 {
		trip = "failure_percentage"
	}
	h.mu.Unlock()
	if trip != "" {
		c.eject(ep, now, trip, code, failPct, log)
	}
}

// sweep runs the failure-percentage detector for c's hosts whose interval
// has ended since their last report, as Envoy's interval timer does: a
// host that answered its last requests badly is ejected before it is
// picked again, not on its next answer.
func (c *cluster) sweep(l *priorityLevel, now time.Time, log *slog.Logger) {
	od := c.outlier
	if od == nil || od.enforceFailPct == 0 || od.interval <= 0 {
		return
	}
	idx := now.UnixNano() / int64(od.interval)
	for _, ep := range l.all {
		h := ep.health
		if h == nil {
			continue
		}
		h.mu.Lock()
		if h.bucket == idx || now.Before(h.ejectedUntil) {
			h.mu.Unlock()
			continue
		}
		failPct := c.rotate(h, now)
		h.mu.Unlock()
		if failPct >= 0 {
			c.eject(ep, now, "failure_percentage", 0, failPct, log)
		}
	}
}

// sweepAll sweeps every host c may pick: its own, or its members'.
func (c *cluster) sweepAll(now time.Time, log *slog.Logger) {
	if c.aggregate == nil {
		for _, l := range c.levels {
			c.sweep(l, now, log)
		}
		return
	}
	for _, m := range c.members {
		for _, l := range m.levels {
			m.sweep(l, now, log)
		}
	}
}

// rotate moves h's counts to the interval now is in, with h.mu held, and
// returns the failure percentage of the interval that just ended when the
// failure-percentage detector trips on it, -1 otherwise.
func (c *cluster) rotate(h *hostHealth, now time.Time) float64 {
	od := c.outlier
	if od.enforceFailPct == 0 || od.interval <= 0 {
		return -1
	}
	idx := now.UnixNano() / int64(od.interval)
	if idx == h.bucket {
		return -1
	}
	if idx == h.bucket+1 {
		h.last = h.cur
	} else {
		h.last = answerCounts{} // a whole interval without answers
	}
	h.cur, h.bucket = answerCounts{}, idx
	if h.last.total == 0 || h.last.total < uint64(od.failPctVolume) || c.hostCount() < int(od.failPctMinHosts) {
		return -1
	}
	pct := 100 - float64(h.last.ok)*100/float64(h.last.total)
	if pct < float64(od.failPctThreshold) || !enforced(od.enforceFailPct) {
		return -1
	}
	return pct
}

// eject takes ep out of rotation after a detector tripped, unless
// max_ejection_percent forbids it.
func (c *cluster) eject(ep *endpoint, now time.Time, detector string, code int, failPct float64, log *slog.Logger) {
	if !c.mayEject(now) {
		return
	}
	od, h := c.outlier, ep.health
	h.mu.Lock()
	if now.Before(h.ejectedUntil) {
		h.mu.Unlock()
		return // ejected meanwhile by another report
	}
	if h.ejections > 0 && !h.lastEjection.IsZero() && od.interval > 0 {
		// Envoy lowers the multiplier by one for every interval the host
		// spent in rotation since it came back.
		back := h.ejectedUntil
		if now.After(back) {
			h.ejections = max(0, h.ejections-int(now.Sub(back)/od.interval))
		}
	}
	h.ejections++
	d := min(od.baseEjection*time.Duration(h.ejections), od.maxEjection)
	h.ejectedUntil = now.Add(d)
	h.lastEjection = now
	h.consec5xx, h.consecGW = 0, 0
	h.mu.Unlock()
	attrs := []any{"cluster", c.name, "host", ep.addr, "for", d.String(), "detector", detector}
	if code != 0 {
		attrs = append(attrs, "status", code)
	}
	if failPct >= 0 {
		attrs = append(attrs, "failure_percent", failPct)
	}
	log.Info("outlier detection ejected host", attrs...)
}

// hostCount is the number of c's hosts, every priority.
func (c *cluster) hostCount() int {
	n := 0
	for _, l := range c.levels {
		n += len(l.all)
	}
	return n
}

// mayEject applies max_ejection_percent to c's hosts, as Envoy does: one
// more ejection may not take the ejected share over it, unless
// always_eject_one_host lets the first one go.
func (c *cluster) mayEject(now time.Time) bool {
	total, ejected := 0, 0
	for _, l := range c.levels {
		for _, e := range l.all {
			total++
			if e.health.isEjected(now) {
				ejected++
			}
		}
	}
	if ejected == 0 && c.outlier.alwaysEjectOne {
		return true
	}
	return total > 0 && (ejected+1)*100 <= total*int(c.outlier.maxEjectionPercent)
}

func enforced(percent uint32) bool {
	return percent >= 100 || (percent > 0 && rand.Uint32N(100) < percent)
}

// ---- retry policy ----

// retryPolicy is a compiled RetryPolicy (route or virtual host).
type retryPolicy struct {
	// The retry_on conditions.
	on5xx, onGatewayError, onConnectFailure, onReset bool
	onRetriable4xx, onRefusedStream, onStatusCodes   bool
	statusCodes                                      []int // retriable_status_codes
	numRetries                                       int
	perTry                                           time.Duration // 0: none
	// prevHosts is the previous_hosts predicate, re-picking a tried host up
	// to maxHostTries times; prevPriorities the previous_priorities retry
	// priority.
	prevHosts               bool
	maxHostTries            int
	prevPriorities          bool
	backoffBase, backoffMax time.Duration
}

func compileRetryPolicy(p *routev3.RetryPolicy) (*retryPolicy, error) {
	if p == nil {
		return nil, nil
	}
	rp := &retryPolicy{numRetries: 1, maxHostTries: 1, backoffBase: defaultRetryBackoffBase}
	for _, on := range strings.Split(p.GetRetryOn(), ",") {
		switch strings.TrimSpace(on) {
		case "":
		case "5xx":
			rp.on5xx = true
		case "gateway-error":
			rp.onGatewayError = true
		case "connect-failure":
			rp.onConnectFailure = true
		case "reset":
			rp.onReset = true
		case "retriable-4xx":
			rp.onRetriable4xx = true
		case "refused-stream":
			rp.onRefusedStream = true
		case "retriable-status-codes":
			rp.onStatusCodes = true
		case "envoy-ratelimited":
			// Only Envoy's own rate limiting sets x-envoy-ratelimited; this
			// data plane never does, so there is nothing to retry.
		default:
			return nil, fmt.Errorf("retry_on %q is not supported", on)
		}
	}
	for _, code := range p.GetRetriableStatusCodes() {
		rp.statusCodes = append(rp.statusCodes, int(code))
	}
	if n := p.GetNumRetries(); n != nil {
		rp.numRetries = int(n.GetValue())
	}
	if d := p.GetPerTryTimeout(); d != nil {
		rp.perTry = d.AsDuration()
	}
	if p.GetPerTryIdleTimeout() != nil || len(p.GetRetriableHeaders()) > 0 || len(p.GetRetriableRequestHeaders()) > 0 ||
		p.GetRateLimitedRetryBackOff() != nil || len(p.GetRetryOptionsPredicates()) > 0 {
		return nil, errors.New("retry policy: per_try_idle_timeout, retriable headers, rate_limited_retry_back_off and retry_options_predicates are not supported")
	}
	for _, hp := range p.GetRetryHostPredicate() {
		if hp.GetName() != predicatePrevHosts && !hp.GetTypedConfig().MessageIs(&previoushostsv3.PreviousHostsPredicate{}) {
			return nil, fmt.Errorf("retry host predicate %q is not supported", hp.GetName())
		}
		rp.prevHosts = true
	}
	if rp.prevHosts && p.GetHostSelectionRetryMaxAttempts() > 1 {
		rp.maxHostTries = int(min(p.GetHostSelectionRetryMaxAttempts(), 100))
	}
	if pr := p.GetRetryPriority(); pr != nil {
		cfg := &previousprioritiesv3.PreviousPrioritiesConfig{}
		if err := unmarshalTyped(pr.GetTypedConfig(), cfg); err != nil {
			return nil, fmt.Errorf("retry priority %q: %w", pr.GetName(), err)
		}
		if err := cfg.ValidateAll(); err != nil {
			return nil, fmt.Errorf("retry priority %q: %w", pr.GetName(), err)
		}
		if cfg.GetUpdateFrequency() != 1 {
			// Excluding a priority only after several attempts on it is not
			// implemented; the control plane uses 1.
			return nil, fmt.Errorf("retry priority %q: update_frequency %d is not supported (only 1)", pr.GetName(), cfg.GetUpdateFrequency())
		}
		rp.prevPriorities = true
	}
	if b := p.GetRetryBackOff(); b != nil {
		rp.backoffBase = b.GetBaseInterval().AsDuration()
		rp.backoffMax = b.GetMaxInterval().AsDuration()
	}
	if rp.backoffMax == 0 {
		rp.backoffMax = 10 * rp.backoffBase
	}
	return rp, nil
}

// failKind is how an attempt failed before it produced response headers.
type failKind int

const (
	failNone failKind = iota
	failConnect
	failReset
	failPerTryTimeout
)

func (k failKind) String() string {
	switch k {
	case failConnect:
		return "connect_failure"
	case failReset:
		return "reset"
	case failPerTryTimeout:
		return "per_try_timeout"
	}
	return "none"
}

// retriable reports whether the policy retries an attempt that failed with
// kind, or answered status.
func (p *retryPolicy) retriable(kind failKind, status int) bool {
	switch kind {
	case failConnect:
		return p.onConnectFailure || p.on5xx || p.onGatewayError
	case failReset:
		return p.onReset || p.on5xx || p.onGatewayError || p.onRefusedStream
	case failPerTryTimeout:
		return p.on5xx || p.onGatewayError
	}
	switch {
	case p.on5xx && status >= 500:
		return true
	case p.onGatewayError && (status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout):
		return true
	case p.onRetriable4xx && status == http.StatusConflict:
		return true
	case p.onStatusCodes && slices.Contains(p.statusCodes, status):
		return true
	}
	return false
}

// backoff is Envoy's jittered exponential back-off before retry n (1, 2,
// ...): random in [0, base*2^(n-1)), at most max.
func (p *retryPolicy) backoff(n int) time.Duration {
	ceil := p.backoffBase << min(n-1, 20)
	if ceil <= 0 || ceil > p.backoffMax {
		ceil = p.backoffMax
	}
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil)
}
