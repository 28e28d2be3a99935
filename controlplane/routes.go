package controlplane

import (
	"fmt"
	"net/url"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/apierror"
	"github.com/switchyard-ai/switchyard/catalog"
	"github.com/switchyard-ai/switchyard/config"
)

// prefixRewrite returns the prefix_rewrite that maps ModelRoutePrefix onto a
// provider's base URL path, or "" when the path already is /v1. OpenAI-style
// base URLs end in the API version, so a request for /v1/chat/completions
// goes to <base path>/chat/completions.
func prefixRewrite(baseURL string) (string, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return "", fmt.Errorf("base_url: %w", err)
	}
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p+"/" == ModelRoutePrefix {
		return "", nil
	}
	return p + "/", nil
}

// buildRoutes is the one route configuration every listener uses. First
// match wins, so the order is: the backends' paths (they are never model
// requests, and extproc never sets the routing header for them), the model
// routes keyed on the header extproc sets, then the catch-all 404.
func buildRoutes(cfg *config.Config) (*routev3.RouteConfiguration, error) {
	vh := &routev3.VirtualHost{Name: VirtualHostName, Domains: []string{"*"}}
	if cfg.Backends != nil {
		for _, p := range BackendPaths {
			vh.Routes = append(vh.Routes, backendRoute(cfg, p))
		}
	}
	for _, m := range cfg.Models {
		r, err := modelRoute(cfg, m)
		if err != nil {
			return nil, err
		}
		vh.Routes = append(vh.Routes, r)
	}
	vh.Routes = append(vh.Routes, notFoundRoute())
	return &routev3.RouteConfiguration{
		Name:         catalog.ListenerRouteConfig,
		VirtualHosts: []*routev3.VirtualHost{vh},
	}, nil
}

// BackendExtProcMode is the ext_proc mode on the backends' routes: request
// headers only, so the key is still checked (and internal headers stripped)
// while uploads of any size stream through unbuffered. An override replaces
// the whole mode, so every field is spelled out.
func BackendExtProcMode() *extprocv3.ProcessingMode {
	return &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SKIP,
		RequestBodyMode:     extprocv3.ProcessingMode_NONE,
		ResponseBodyMode:    extprocv3.ProcessingMode_NONE,
		RequestTrailerMode:  extprocv3.ProcessingMode_SKIP,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
}

func backendRoute(cfg *config.Config, path string) *routev3.Route {
	override := &extprocv3.ExtProcPerRoute{Override: &extprocv3.ExtProcPerRoute_Overrides{
		Overrides: &extprocv3.ExtProcOverrides{ProcessingMode: BackendExtProcMode()},
	}}
	return &routev3.Route{
		Name: BackendRouteName(path),
		// path_separated_prefix matches /v1/files and /v1/files/..., not
		// /v1/filesystem.
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: path}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: BackendsCluster},
			// Uploads and batch downloads can take longer than the default
			// 15 s; the idle timeout catches a stalled transfer instead.
			Timeout:     durationpb.New(0),
			IdleTimeout: durationpb.New(cfg.Limits.StreamIdleTimeout),
		}},
		TypedPerFilterConfig: map[string]*anypb.Any{FilterExtProc: mustAny(override)},
	}
}

func modelRoute(cfg *config.Config, m config.Model) (*routev3.Route, error) {
	if len(m.Providers) == 0 {
		return nil, fmt.Errorf("controlplane: model %q has no provider", m.ID)
	}
	p, ok := cfg.Provider(m.Providers[0].Provider)
	if !ok {
		return nil, fmt.Errorf("controlplane: model %q: unknown provider %q", m.ID, m.Providers[0].Provider)
	}
	rewrite, err := prefixRewrite(p.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("controlplane: provider %q: %w", p.Name, err)
	}
	limits := &ratelimitv3.RateLimitPerRoute{RateLimits: []*routev3.RateLimit{TokenUsageRateLimit()}}
	return &routev3.Route{
		Name: ModelRouteName(m.ID),
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ModelRoutePrefix},
			Headers: []*routev3.HeaderMatcher{{
				Name: catalog.RouteHeader,
				HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Exact{Exact: m.ID},
				}},
			}},
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: catalog.ClusterName(p.Name)},
			// The default 15 s covers the whole response, which a long
			// completion or an SSE stream exceeds; 0 disables it and
			// idle_timeout catches stalled upstreams instead.
			Timeout:              durationpb.New(0),
			IdleTimeout:          durationpb.New(cfg.Limits.StreamIdleTimeout),
			HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
			PrefixRewrite:        rewrite,
		}},
		// hits_addend and apply_on_stream_done work only in the ratelimit
		// filter's per-route configuration, not in RouteAction.rate_limits.
		TypedPerFilterConfig: map[string]*anypb.Any{FilterRateLimit: mustAny(limits)},
	}, nil
}

// TokenUsageRateLimit charges a model request's tokens to the key's
// tokens-per-minute descriptor when the stream ends
// (docs/ratelimit-design.md): usage=tokens, tier, key_id, hits from the
// total_tokens extproc writes at the end of the response, and the key's own
// limit when extproc sets tpm_limit (enterprise keys).
func TokenUsageRateLimit() *routev3.RateLimit {
	md := func(descriptor, key string) *routev3.RateLimit_Action {
		return &routev3.RateLimit_Action{ActionSpecifier: &routev3.RateLimit_Action_Metadata{
			Metadata: &routev3.RateLimit_Action_MetaData{
				DescriptorKey: descriptor,
				MetadataKey:   metadataKey(key),
				Source:        routev3.RateLimit_Action_MetaData_DYNAMIC,
			},
		}}
	}
	return &routev3.RateLimit{
		ApplyOnStreamDone: true,
		Actions: []*routev3.RateLimit_Action{
			{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{GenericKey: &routev3.RateLimit_Action_GenericKey{
				DescriptorKey: "usage", DescriptorValue: "tokens",
			}}},
			md("tier", "tier"),
			md("key_id", "key_id"),
		},
		HitsAddend: &routev3.RateLimit_HitsAddend{
			Format: "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":total_tokens)%",
		},
		Limit: &routev3.RateLimit_Override{OverrideSpecifier: &routev3.RateLimit_Override_DynamicMetadata_{
			DynamicMetadata: &routev3.RateLimit_Override_DynamicMetadata{MetadataKey: metadataKey("tpm_limit")},
		}},
	}
}

func metadataKey(key string) *metadatav3.MetadataKey {
	return &metadatav3.MetadataKey{
		Key:  catalog.MetadataNamespace,
		Path: []*metadatav3.MetadataKey_PathSegment{{Segment: &metadatav3.MetadataKey_PathSegment_Key{Key: key}}},
	}
}

// notFoundRoute answers every request no other route took with OpenAI's 404.
// Before extproc has set the routing header only this route (and the
// backends') can match, so an unauthenticated request never reaches a
// provider.
func notFoundRoute() *routev3.Route {
	notFound := apierror.NotFound("this path")
	var headers []*corev3.HeaderValueOption
	for k, v := range notFound.Headers() {
		headers = append(headers, &corev3.HeaderValueOption{
			Header:       &corev3.HeaderValue{Key: k, Value: v},
			AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
		})
	}
	return &routev3.Route{
		Name:  NotFoundRouteName,
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_DirectResponse{DirectResponse: &routev3.DirectResponseAction{
			Status: uint32(notFound.Status),
			Body:   &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: string(notFound.JSON())}},
		}},
		ResponseHeadersToAdd: headers,
	}
}
