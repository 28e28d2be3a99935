package dataplane

import (
	"math/rand/v2"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
)

// defaultRouteTimeout is RouteAction.timeout when unset: Envoy bounds the
// whole response by 15 s unless the route says otherwise (0 disables it).
const defaultRouteTimeout = 15 * time.Second

// routeTable is a compiled RouteConfiguration.
type routeTable struct {
	name     string
	exact    map[string]*virtualHost
	suffixes []wildcardHost // "*.example.com": longest suffix first
	prefixes []wildcardHost // "example.*": longest prefix first
	any      *virtualHost   // "*"
	headers  headerOps
}

type wildcardHost struct {
	affix string
	vh    *virtualHost
}

// headerOps are the headers_to_add/remove of one level of the route table.
type headerOps struct {
	reqAdd     []*corev3.HeaderValueOption
	reqRemove  []string
	respAdd    []*corev3.HeaderValueOption
	respRemove []string
}

type virtualHost struct {
	name      string
	routes    []*route
	headers   headerOps
	perFilter map[string]*perFilterConfig
	bodyLimit int64
	retry     *retryPolicy // routes without their own use this one
}

// perFilterConfig is one typed_per_filter_config entry, decoded when it is an
// ExtProcPerRoute or a RateLimitPerRoute (bare or inside a FilterConfig
// wrapper).
type perFilterConfig struct {
	disabled  bool
	extProc   *extprocfilterv3.ExtProcPerRoute
	rateLimit *ratelimitfilterv3.RateLimitPerRoute
}

type pathMatchKind int

const (
	matchPrefix pathMatchKind = iota
	matchPath
	matchRegex
	matchSeparatedPrefix
)

type route struct {
	name          string
	vh            *virtualHost
	kind          pathMatchKind
	path          string
	re            *regexp.Regexp
	caseSensitive bool
	headers       []*headerMatcher
	query         []*queryMatcher
	grpc          bool

	// Exactly one of direct and a cluster specifier is set.
	direct        bool
	directStatus  int
	directBody    []byte
	cluster       string
	clusterHeader string
	weighted      []weightedCluster
	weightTotal   uint64
	notFoundCode  int

	prefixRewrite string
	regexRewrite  *regexp.Regexp
	regexSubst    string
	hostLiteral   string
	hostHeader    string
	autoHost      bool
	timeout       time.Duration // 0: none
	idleTimeout   time.Duration // 0: the connection manager's stream_idle_timeout
	hasIdle       bool

	hdrOps    headerOps
	perFilter map[string]*perFilterConfig
	bodyLimit int64
	// retry is the route's retry policy, else its virtual host's; nil: no
	// retries.
	retry *retryPolicy
}

type weightedCluster struct {
	name, header string
	weight       uint64
}

// match returns the first route of the matching virtual host that matches
// the request headers, or nil.
func (t *routeTable) match(h headerMap) *route {
	vh := t.virtualHost(strings.ToLower(h.value(hdrAuthority)))
	if vh == nil {
		return nil
	}
	path := h.value(hdrPath)
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	for _, r := range vh.routes {
		if r.matches(path, h) {
			return r
		}
	}
	return nil
}

// virtualHost picks the virtual host in Envoy's order: exact domain, then the
// longest suffix wildcard, then the longest prefix wildcard, then "*".
func (t *routeTable) virtualHost(host string) *virtualHost {
	if vh, ok := t.exact[host]; ok {
		return vh
	}
	for _, w := range t.suffixes {
		if len(host) > len(w.affix) && strings.HasSuffix(host, w.affix) {
			return w.vh
		}
	}
	for _, w := range t.prefixes {
		if len(host) > len(w.affix) && strings.HasPrefix(host, w.affix) {
			return w.vh
		}
	}
	return t.any
}

func (r *route) matches(path string, h headerMap) bool {
	switch r.kind {
	case matchPrefix:
		if len(path) < len(r.path) {
			return false
		}
		if r.caseSensitive {
			if !strings.HasPrefix(path, r.path) {
				return false
			}
		} else if !strings.EqualFold(path[:len(r.path)], r.path) {
			return false
		}
	case matchPath:
		if r.caseSensitive && path != r.path || !r.caseSensitive && !strings.EqualFold(path, r.path) {
			return false
		}
	case matchRegex:
		if !r.re.MatchString(path) {
			return false
		}
	case matchSeparatedPrefix:
		p := path
		if !r.caseSensitive {
			p = strings.ToLower(p)
		}
		if p != r.path && !strings.HasPrefix(p, r.path+"/") {
			return false
		}
	}
	if r.grpc && !strings.HasPrefix(h.value("content-type"), "application/grpc") {
		return false
	}
	for _, m := range r.headers {
		if !m.matches(h) {
			return false
		}
	}
	if len(r.query) > 0 {
		q := ""
		if p := h.value(hdrPath); strings.IndexByte(p, '?') >= 0 {
			q = p[strings.IndexByte(p, '?')+1:]
			if i := strings.IndexByte(q, '#'); i >= 0 {
				q = q[:i]
			}
		}
		vals, _ := url.ParseQuery(q)
		for _, m := range r.query {
			if !m.matches(vals) {
				return false
			}
		}
	}
	return true
}

// pickCluster resolves the cluster specifier for this request. ok is false
// when a cluster_header names no cluster.
func (r *route) pickCluster(h headerMap) (string, bool) {
	switch {
	case r.cluster != "":
		return r.cluster, true
	case r.clusterHeader != "":
		v, ok := h.get(strings.ToLower(r.clusterHeader))
		return v, ok && v != ""
	case len(r.weighted) > 0:
		n := rand.Uint64N(r.weightTotal)
		for _, w := range r.weighted {
			if n < w.weight {
				if w.header != "" {
					v, ok := h.get(strings.ToLower(w.header))
					return v, ok && v != ""
				}
				return w.name, true
			}
			n -= w.weight
		}
	}
	return "", false
}

// rewritePath applies prefix_rewrite or regex_rewrite to the :path value,
// keeping the query string.
func (r *route) rewritePath(p string) string {
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	switch {
	case r.prefixRewrite != "" && (r.kind == matchPrefix || r.kind == matchSeparatedPrefix):
		if len(path) >= len(r.path) {
			path = r.prefixRewrite + path[len(r.path):]
		}
	case r.prefixRewrite != "" && r.kind == matchPath:
		path = r.prefixRewrite
	case r.regexRewrite != nil:
		path = r.regexRewrite.ReplaceAllString(path, r.regexSubst)
	}
	return path + query
}

// headerMatcher is a compiled routev3.HeaderMatcher.
type headerMatcher struct {
	name         string
	invert       bool
	missingEmpty bool
	present      *bool
	str          *stringMatcher
	rangeStart   int64
	rangeEnd     int64
	isRange      bool
}

// matches follows Envoy's HeaderUtility::matchHeaders, including its rule
// that a missing header fails every matcher but present_match, even inverted.
func (m *headerMatcher) matches(h headerMap) bool {
	v, ok := h.joined(m.name)
	if !ok && m.missingEmpty {
		v, ok = "", true
	}
	if !ok {
		if m.present == nil {
			return false
		}
		if m.invert {
			return *m.present
		}
		return !*m.present
	}
	var res bool
	switch {
	case m.present != nil:
		res = *m.present
	case m.isRange:
		n, err := strconv.ParseInt(v, 10, 64)
		res = err == nil && n >= m.rangeStart && n < m.rangeEnd
	default:
		res = m.str.match(v)
	}
	return res != m.invert
}

type queryMatcher struct {
	name    string
	present bool
	str     *stringMatcher
}

func (m *queryMatcher) matches(vals url.Values) bool {
	v, ok := vals[m.name]
	if m.str == nil {
		return ok == m.present
	}
	return ok && len(v) > 0 && m.str.match(v[0])
}

// stringMatcher is a compiled matcherv3.StringMatcher.
type stringMatcher struct {
	exact, prefix, suffix, contains *string
	re                              *regexp.Regexp
	ignoreCase                      bool
}

func (m *stringMatcher) match(v string) bool {
	if m.re != nil {
		return m.re.MatchString(v)
	}
	if m.ignoreCase {
		v = strings.ToLower(v)
	}
	switch {
	case m.exact != nil:
		return v == *m.exact
	case m.prefix != nil:
		return strings.HasPrefix(v, *m.prefix)
	case m.suffix != nil:
		return strings.HasSuffix(v, *m.suffix)
	case m.contains != nil:
		return strings.Contains(v, *m.contains)
	}
	return false
}
