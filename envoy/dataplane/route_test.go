package dataplane

import (
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestRouteMatching(t *testing.T) {
	action := func(cluster string) *routev3.Route_Route {
		return &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster}}}
	}
	exact := func(v string) *matcherv3.StringMatcher {
		return &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: v}}
	}
	rc := &routev3.RouteConfiguration{Name: "r", VirtualHosts: []*routev3.VirtualHost{
		{Name: "exact", Domains: []string{"api.example.com"}, Routes: []*routev3.Route{
			{Name: "exact-host", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: action("x")}}},
		{Name: "suffix", Domains: []string{"*.example.com"}, Routes: []*routev3.Route{
			{Name: "suffix-host", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: action("x")}}},
		{Name: "any", Domains: []string{"*"}, Routes: []*routev3.Route{
			{Name: "path", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v1/models"}}, Action: action("x")},
			{Name: "regex", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: `/v1/batches/[a-z0-9_]+`}}}, Action: action("x")},
			{Name: "separated", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/v1/files"}}, Action: action("x")},
			{Name: "nocase", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/V1/EMB"}, CaseSensitive: wrapperspb.Bool(false)}, Action: action("x")},
			{Name: "header-exact", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}, Headers: []*routev3.HeaderMatcher{
				{Name: "x-switchyard-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact("m1")}}}}, Action: action("x")},
			{Name: "header-prefix", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}, Headers: []*routev3.HeaderMatcher{
				//lint:ignore SA1019 covers a deprecated Envoy field that Envoy, and so the data plane, still honours
				{Name: "x-switchyard-model", HeaderMatchSpecifier: &routev3.HeaderMatcher_PrefixMatch{PrefixMatch: "vendor/"}}}}, Action: action("x")},
			{Name: "header-absent-inverted", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}, Headers: []*routev3.HeaderMatcher{
				{Name: "x-other", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact("no")}, InvertMatch: true}}}, Action: action("x")},
			{Name: "header-present", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/"}, Headers: []*routev3.HeaderMatcher{
				{Name: "x-flag", HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}}}, Action: action("x")},
			{Name: "query", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/q"}, QueryParameters: []*routev3.QueryParameterMatcher{
				{Name: "debug", QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_PresentMatch{PresentMatch: true}}}}, Action: action("x")},
			{Name: "catch-all", Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}, Action: action("x")},
		}},
	}}
	table, err := compileRouteTable(rc)
	if err != nil {
		t.Fatal(err)
	}
	req := func(host, path string, hdrs ...string) headerMap {
		h := headerMap{{":authority", host}, {":path", path}, {":method", "GET"}}
		for i := 0; i+1 < len(hdrs); i += 2 {
			h.add(hdrs[i], hdrs[i+1])
		}
		return h
	}
	tests := []struct {
		name string
		h    headerMap
		want string
	}{
		{"exact domain wins", req("API.example.com", "/x"), "exact-host"},
		{"suffix wildcard", req("eu.example.com", "/x"), "suffix-host"},
		{"path ignores the query", req("gw", "/v1/models?limit=1"), "path"},
		{"path is exact", req("gw", "/v1/models/x"), "catch-all"},
		{"safe_regex is a full match", req("gw", "/v1/batches/batch_1"), "regex"},
		{"safe_regex does not match a longer path", req("gw", "/v1/batches/batch_1/cancel"), "catch-all"},
		{"path_separated_prefix exact", req("gw", "/v1/files"), "separated"},
		{"path_separated_prefix segment", req("gw", "/v1/files/f1/content"), "separated"},
		{"path_separated_prefix is not a string prefix", req("gw", "/v1/filesystem"), "catch-all"},
		{"case-insensitive prefix", req("gw", "/v1/embeddings"), "nocase"},
		{"exact header", req("gw", "/v1/chat", "x-switchyard-model", "m1"), "header-exact"},
		{"prefix header", req("gw", "/v1/chat", "x-switchyard-model", "vendor/model"), "header-prefix"},
		{"inverted matcher fails on a missing header", req("gw", "/v1/chat"), "catch-all"},
		{"inverted matcher passes on another value", req("gw", "/v1/chat", "x-other", "yes"), "header-absent-inverted"},
		{"present matcher", req("gw", "/v1/chat", "x-flag", ""), "header-present"},
		{"query parameter present", req("gw", "/q?debug"), "query"},
		{"query parameter absent", req("gw", "/q?x=1"), "catch-all"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := table.match(tc.h)
			if r == nil || r.name != tc.want {
				got := "<nil>"
				if r != nil {
					got = r.name
				}
				t.Errorf("matched %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRewritePath(t *testing.T) {
	tests := []struct {
		name string
		r    *route
		in   string
		want string
	}{
		{"prefix rewrite keeps the rest and the query", &route{kind: matchPrefix, path: "/v1/", prefixRewrite: "/openai/v1/"}, "/v1/chat?a=b", "/openai/v1/chat?a=b"},
		{"path rewrite", &route{kind: matchPath, path: "/v1/models", prefixRewrite: "/models"}, "/v1/models?x", "/models?x"},
		{"no rewrite", &route{kind: matchPrefix, path: "/"}, "/a?b", "/a?b"},
	}
	for _, tc := range tests {
		if got := tc.r.rewritePath(tc.in); got != tc.want {
			t.Errorf("%s: %q -> %q, want %q", tc.name, tc.in, got, tc.want)
		}
	}
	// regex_rewrite uses RE2 \1 substitutions.
	r := &routev3.Route{Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "c"},
			RegexRewrite: &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: `^/v1/(\w+)$`}, Substitution: `/api/\1/$x`}}}}
	cr, err := compileRoute(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := cr.rewritePath("/v1/chat?q"); got != "/api/chat/$x?q" {
		t.Errorf("regex rewrite: %q", got)
	}
}
