package dataplane

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

func compileStringMatcher(sm *matcherv3.StringMatcher) (*stringMatcher, error) {
	m := &stringMatcher{ignoreCase: sm.GetIgnoreCase()}
	norm := func(s string) *string {
		if m.ignoreCase {
			s = strings.ToLower(s)
		}
		return &s
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		m.exact = norm(p.Exact)
	case *matcherv3.StringMatcher_Prefix:
		m.prefix = norm(p.Prefix)
	case *matcherv3.StringMatcher_Suffix:
		m.suffix = norm(p.Suffix)
	case *matcherv3.StringMatcher_Contains:
		m.contains = norm(p.Contains)
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := compileFullRegex(p.SafeRegex.GetRegex())
		if err != nil {
			return nil, err
		}
		m.re = re
	default:
		return nil, fmt.Errorf("unsupported string matcher %T", p)
	}
	return m, nil
}

func compileHeaderMatcher(hm *routev3.HeaderMatcher) (*headerMatcher, error) {
	m := &headerMatcher{
		name:         strings.ToLower(hm.GetName()),
		invert:       hm.GetInvertMatch(),
		missingEmpty: hm.GetTreatMissingHeaderAsEmpty(),
	}
	var err error
	str := func(sm *matcherv3.StringMatcher) { m.str, err = compileStringMatcher(sm) }
	switch s := hm.GetHeaderMatchSpecifier().(type) {
	case nil:
		// No specifier: Envoy treats it as "present".
		t := true
		m.present = &t
	case *routev3.HeaderMatcher_PresentMatch:
		v := s.PresentMatch
		m.present = &v
	case *routev3.HeaderMatcher_ExactMatch:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s.ExactMatch}})
	case *routev3.HeaderMatcher_PrefixMatch:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s.PrefixMatch}})
	case *routev3.HeaderMatcher_SuffixMatch:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s.SuffixMatch}})
	case *routev3.HeaderMatcher_ContainsMatch:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: s.ContainsMatch}})
	case *routev3.HeaderMatcher_SafeRegexMatch:
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		str(&matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: s.SafeRegexMatch}})
	case *routev3.HeaderMatcher_StringMatch:
		str(s.StringMatch)
	case *routev3.HeaderMatcher_RangeMatch:
		m.isRange, m.rangeStart, m.rangeEnd = true, s.RangeMatch.GetStart(), s.RangeMatch.GetEnd()
	default:
		return nil, fmt.Errorf("header matcher %q: unsupported specifier %T", hm.GetName(), s)
	}
	if err != nil {
		return nil, fmt.Errorf("header matcher %q: %w", hm.GetName(), err)
	}
	return m, nil
}

// compileRouteTable compiles a RouteConfiguration. Cluster references are
// checked later, against the whole update.
func compileRouteTable(rc *routev3.RouteConfiguration) (*routeTable, error) {
	t := &routeTable{name: rc.GetName(), exact: map[string]*virtualHost{}}
	var err error
	if t.headers, err = compileHeaderOps(rc.GetRequestHeadersToAdd(), rc.GetRequestHeadersToRemove(),
		rc.GetResponseHeadersToAdd(), rc.GetResponseHeadersToRemove()); err != nil {
		return nil, fmt.Errorf("route config %q: %w", rc.GetName(), err)
	}
	seen := map[string]bool{}
	for _, v := range rc.GetVirtualHosts() {
		vh, err := compileVirtualHost(v)
		if err != nil {
			return nil, fmt.Errorf("route config %q: %w", rc.GetName(), err)
		}
		for _, d := range v.GetDomains() {
			d = strings.ToLower(d)
			if seen[d] {
				return nil, fmt.Errorf("route config %q: domain %q is in more than one virtual host", rc.GetName(), d)
			}
			seen[d] = true
			switch {
			case d == "*":
				t.any = vh
			case strings.HasPrefix(d, "*"):
				t.suffixes = append(t.suffixes, wildcardHost{d[1:], vh})
			case strings.HasSuffix(d, "*"):
				t.prefixes = append(t.prefixes, wildcardHost{d[:len(d)-1], vh})
			default:
				t.exact[d] = vh
			}
		}
	}
	longestFirst := func(w []wildcardHost) {
		sort.SliceStable(w, func(i, j int) bool { return len(w[i].affix) > len(w[j].affix) })
	}
	longestFirst(t.suffixes)
	longestFirst(t.prefixes)
	return t, nil
}

func compileVirtualHost(v *routev3.VirtualHost) (*virtualHost, error) {
	if v.GetMatcher() != nil || len(v.GetRouteSpecifiers()) > 0 {
		return nil, fmt.Errorf("virtual host %q: matcher trees are not supported", v.GetName())
	}
	if v.GetRequireTls() != routev3.VirtualHost_NONE {
		return nil, fmt.Errorf("virtual host %q: require_tls is not supported", v.GetName())
	}
	vh := &virtualHost{name: v.GetName(), bodyLimit: int64(v.GetRequestBodyBufferLimit().GetValue())}
	if vh.bodyLimit == 0 {
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		vh.bodyLimit = int64(v.GetPerRequestBufferLimitBytes().GetValue())
	}
	var err error
	if vh.headers, err = compileHeaderOps(v.GetRequestHeadersToAdd(), v.GetRequestHeadersToRemove(),
		v.GetResponseHeadersToAdd(), v.GetResponseHeadersToRemove()); err != nil {
		return nil, fmt.Errorf("virtual host %q: %w", v.GetName(), err)
	}
	if vh.perFilter, err = compilePerFilter(v.GetTypedPerFilterConfig()); err != nil {
		return nil, fmt.Errorf("virtual host %q: %w", v.GetName(), err)
	}
	if vh.retry, err = compileRetryPolicy(v.GetRetryPolicy()); err != nil {
		return nil, fmt.Errorf("virtual host %q: %w", v.GetName(), err)
	}
	for i, r := range v.GetRoutes() {
		cr, err := compileRoute(r)
		if err != nil {
			name := r.GetName()
			if name == "" {
				name = "#" + strconv.Itoa(i)
			}
			return nil, fmt.Errorf("virtual host %q: route %s: %w", v.GetName(), name, err)
		}
		cr.vh = vh
		if cr.retry == nil && !cr.direct {
			// A route's own policy replaces the virtual host's entirely.
			cr.retry = vh.retry
		}
		vh.routes = append(vh.routes, cr)
	}
	return vh, nil
}

func compileRoute(r *routev3.Route) (*route, error) {
	m := r.GetMatch()
	if m == nil {
		return nil, errors.New("no match")
	}
	cr := &route{name: r.GetName(), caseSensitive: true, notFoundCode: 503}
	if m.GetCaseSensitive() != nil {
		cr.caseSensitive = m.GetCaseSensitive().GetValue()
	}
	switch p := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		cr.kind, cr.path = matchPrefix, p.Prefix
	case *routev3.RouteMatch_Path:
		cr.kind, cr.path = matchPath, p.Path
	case *routev3.RouteMatch_SafeRegex:
		re, err := compileFullRegex(p.SafeRegex.GetRegex())
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		cr.kind, cr.re = matchRegex, re
	case *routev3.RouteMatch_PathSeparatedPrefix:
		cr.kind, cr.path = matchSeparatedPrefix, p.PathSeparatedPrefix
		if !cr.caseSensitive {
			cr.path = strings.ToLower(cr.path)
		}
	default:
		return nil, fmt.Errorf("unsupported path specifier %T", p)
	}
	if m.GetRuntimeFraction() != nil || len(m.GetCookies()) > 0 || m.GetTlsContext() != nil ||
		len(m.GetDynamicMetadata()) > 0 || len(m.GetFilterState()) > 0 {
		return nil, errors.New("unsupported match criteria (runtime_fraction, cookies, tls_context, dynamic_metadata or filter_state)")
	}
	cr.grpc = m.GetGrpc() != nil
	for _, hm := range m.GetHeaders() {
		c, err := compileHeaderMatcher(hm)
		if err != nil {
			return nil, err
		}
		cr.headers = append(cr.headers, c)
	}
	for _, qm := range m.GetQueryParameters() {
		q := &queryMatcher{name: qm.GetName()}
		switch s := qm.GetQueryParameterMatchSpecifier().(type) {
		case *routev3.QueryParameterMatcher_StringMatch:
			sm, err := compileStringMatcher(s.StringMatch)
			if err != nil {
				return nil, fmt.Errorf("query matcher %q: %w", qm.GetName(), err)
			}
			q.str = sm
		case *routev3.QueryParameterMatcher_PresentMatch:
			q.present = s.PresentMatch
		default:
			return nil, fmt.Errorf("query matcher %q: unsupported specifier %T", qm.GetName(), s)
		}
		cr.query = append(cr.query, q)
	}

	var err error
	if cr.hdrOps, err = compileHeaderOps(r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove(),
		r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove()); err != nil {
		return nil, err
	}
	if cr.perFilter, err = compilePerFilter(r.GetTypedPerFilterConfig()); err != nil {
		return nil, err
	}
	cr.bodyLimit = int64(r.GetRequestBodyBufferLimit().GetValue())
	if cr.bodyLimit == 0 {
		//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
		cr.bodyLimit = int64(r.GetPerRequestBufferLimitBytes().GetValue())
	}

	switch a := r.GetAction().(type) {
	case *routev3.Route_DirectResponse:
		cr.direct = true
		cr.directStatus = int(a.DirectResponse.GetStatus())
		if cr.directStatus < 200 || cr.directStatus > 599 {
			return nil, fmt.Errorf("direct_response status %d", cr.directStatus)
		}
		if a.DirectResponse.GetBodyFormat() != nil {
			return nil, errors.New("direct_response body_format is not supported")
		}
		if b := a.DirectResponse.GetBody(); b != nil {
			if cr.directBody, err = readDataSource(b); err != nil {
				return nil, fmt.Errorf("direct_response body: %w", err)
			}
		}
	case *routev3.Route_Route:
		if err := compileRouteAction(cr, a.Route); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unsupported route action %T", a)
	}
	return cr, nil
}

func compileRouteAction(cr *route, a *routev3.RouteAction) error {
	switch c := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		cr.cluster = c.Cluster
	case *routev3.RouteAction_ClusterHeader:
		cr.clusterHeader = c.ClusterHeader
	case *routev3.RouteAction_WeightedClusters:
		for _, w := range c.WeightedClusters.GetClusters() {
			wc := weightedCluster{name: w.GetName(), header: w.GetClusterHeader(), weight: uint64(w.GetWeight().GetValue())}
			if wc.weight == 0 {
				continue
			}
			cr.weighted = append(cr.weighted, wc)
			cr.weightTotal += wc.weight
		}
		if cr.weightTotal == 0 {
			return errors.New("weighted_clusters: no cluster with a positive weight")
		}
	default:
		return fmt.Errorf("unsupported cluster specifier %T", c)
	}
	if a.GetClusterNotFoundResponseCode() == routev3.RouteAction_NOT_FOUND {
		cr.notFoundCode = 404
	} else if a.GetClusterNotFoundResponseCode() == routev3.RouteAction_INTERNAL_SERVER_ERROR {
		cr.notFoundCode = 500
	}
	cr.prefixRewrite = a.GetPrefixRewrite()
	if rr := a.GetRegexRewrite(); rr != nil {
		if cr.prefixRewrite != "" {
			return errors.New("prefix_rewrite and regex_rewrite are exclusive")
		}
		re, err := regexp.Compile(rr.GetPattern().GetRegex())
		if err != nil {
			return fmt.Errorf("regex_rewrite: %w", err)
		}
		cr.regexRewrite = re
		// RE2 substitutions are \1; Go's are ${1}.
		cr.regexSubst = regexp.MustCompile(`\\(\d+)`).ReplaceAllString(strings.ReplaceAll(rr.GetSubstitution(), "$", "$$"), "$${$1}")
	}
	if cr.prefixRewrite != "" && cr.kind == matchRegex {
		return errors.New("prefix_rewrite cannot be used with safe_regex")
	}
	if a.GetPathRewritePolicy() != nil || a.GetPathRewrite() != "" {
		return errors.New("path rewrite policies are not supported")
	}
	switch h := a.GetHostRewriteSpecifier().(type) {
	case nil:
	case *routev3.RouteAction_HostRewriteLiteral:
		cr.hostLiteral = h.HostRewriteLiteral
	case *routev3.RouteAction_AutoHostRewrite:
		cr.autoHost = h.AutoHostRewrite.GetValue()
	case *routev3.RouteAction_HostRewriteHeader:
		cr.hostHeader = strings.ToLower(h.HostRewriteHeader)
	default:
		return fmt.Errorf("unsupported host rewrite %T", h)
	}
	cr.timeout = defaultRouteTimeout
	if a.GetTimeout() != nil {
		cr.timeout = a.GetTimeout().AsDuration()
	}
	if a.GetIdleTimeout() != nil {
		cr.idleTimeout, cr.hasIdle = a.GetIdleTimeout().AsDuration(), true
	}
	var err error
	if cr.retry, err = compileRetryPolicy(a.GetRetryPolicy()); err != nil {
		return err
	}
	if len(a.GetUpgradeConfigs()) > 0 || a.GetInternalRedirectPolicy() != nil {
		return errors.New("upgrade_configs and internal redirects are not supported")
	}
	return nil
}

func compileHeaderOps(reqAdd []*corev3.HeaderValueOption, reqRemove []string, respAdd []*corev3.HeaderValueOption, respRemove []string) (headerOps, error) {
	for _, list := range [][]*corev3.HeaderValueOption{reqAdd, respAdd} {
		for _, o := range list {
			v := o.GetHeader().GetValue() + string(o.GetHeader().GetRawValue())
			// Envoy expands %COMMAND% formatters in these values; only static
			// values are supported here, so refuse what would be sent verbatim.
			if strings.Contains(v, "%") {
				return headerOps{}, fmt.Errorf("header %q: formatted header values are not supported", o.GetHeader().GetKey())
			}
			if !validHeaderName(o.GetHeader().GetKey()) || !validHeaderValue(v) {
				return headerOps{}, fmt.Errorf("invalid header %q", o.GetHeader().GetKey())
			}
		}
	}
	lower := func(in []string) []string {
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = strings.ToLower(s)
		}
		return out
	}
	return headerOps{reqAdd: reqAdd, reqRemove: lower(reqRemove), respAdd: respAdd, respRemove: lower(respRemove)}, nil
}

func compilePerFilter(m map[string]*anypb.Any) (map[string]*perFilterConfig, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := map[string]*perFilterConfig{}
	for name, a := range m {
		pf := &perFilterConfig{}
		msg := a
		if a.MessageIs(&routev3.FilterConfig{}) {
			fc := &routev3.FilterConfig{}
			if err := a.UnmarshalTo(fc); err != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: %w", name, err)
			}
			pf.disabled = fc.GetDisabled()
			msg = fc.GetConfig()
		}
		if msg != nil && msg.MessageIs(&extprocfilterv3.ExtProcPerRoute{}) {
			ep := &extprocfilterv3.ExtProcPerRoute{}
			if err := msg.UnmarshalTo(ep); err != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: %w", name, err)
			}
			if err := ep.ValidateAll(); err != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: %w", name, err)
			}
			o := ep.GetOverrides()
			if o.GetGrpcService() != nil || o.GetMetadataOptions() != nil || len(o.GetGrpcInitialMetadata()) > 0 ||
				//lint:ignore SA1019 Envoy still honours this deprecated field, so the data plane reads it as Envoy does
				o.GetFailureModeAllow() != nil || o.GetAsyncMode() || len(o.GetRequestAttributes()) > 0 ||
				len(o.GetResponseAttributes()) > 0 || o.GetProcessingRequestModifier() != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: only overrides.processing_mode is supported", name)
			}
			if pm := o.GetProcessingMode(); pm != nil {
				if err := checkMode(pm); err != nil {
					return nil, fmt.Errorf("typed_per_filter_config %q: %w", name, err)
				}
			}
			pf.extProc = ep
		}
		if msg != nil && msg.MessageIs(&ratelimitfilterv3.RateLimitPerRoute{}) {
			rl, err := compileRateLimitPerRoute(msg)
			if err != nil {
				return nil, fmt.Errorf("typed_per_filter_config %q: %w", name, err)
			}
			pf.rateLimit = rl
		}
		out[name] = pf
	}
	return out, nil
}

// clusterRefs lists the clusters a route table names statically.
func (t *routeTable) clusterRefs() []string {
	var out []string
	seen := map[*virtualHost]bool{}
	add := func(vh *virtualHost) {
		if vh == nil || seen[vh] {
			return
		}
		seen[vh] = true
		for _, r := range vh.routes {
			if r.cluster != "" {
				out = append(out, r.cluster)
			}
			for _, w := range r.weighted {
				if w.name != "" {
					out = append(out, w.name)
				}
			}
		}
	}
	for _, vh := range t.exact {
		add(vh)
	}
	for _, w := range t.suffixes {
		add(w.vh)
	}
	for _, w := range t.prefixes {
		add(w.vh)
	}
	add(t.any)
	return out
}
