package controlplane

import (
	"fmt"
	"net/http"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/config"
)

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
	names := RouteClusterNames(cfg)
	for _, m := range cfg.Models {
		rs, err := modelRoutes(cfg, m, names)
		if err != nil {
			return nil, err
		}
		vh.Routes = append(vh.Routes, rs...)
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

// modelRoutes are a model's routes (docs/routing-design.md): one per
// provider, matching the model and extproc's first choice, to the aggregate
// cluster that tries that provider first; then the model's default route,
// for a first choice this route table does not know (during a change, an
// extproc ahead of the data plane), to the model's failover order. The
// path is not rewritten: the upstream ext_proc filter of the provider
// cluster the attempt goes to sets the provider's path, since an aggregate
// cluster's members have different base URLs.
func modelRoutes(cfg *config.Config, m config.Model, names RouteClusters) ([]*routev3.Route, error) {
	if len(m.Providers) == 0 {
		return nil, fmt.Errorf("controlplane: model %q has no provider", m.ID)
	}
	var out []*routev3.Route
	seen := map[string]bool{}
	for _, mp := range m.Providers {
		if _, ok := cfg.Provider(mp.Provider); !ok {
			return nil, fmt.Errorf("controlplane: model %q: unknown provider %q", m.ID, mp.Provider)
		}
		if seen[mp.Provider] {
			continue
		}
		seen[mp.Provider] = true
		out = append(out, modelRoute(cfg, m, ModelProviderRouteName(m.ID, mp.Provider), names.First[m.ID][mp.Provider],
			exactHeader(catalog.RouteHeader, m.ID), exactHeader(catalog.FirstHeader, mp.Provider)))
	}
	out = append(out, modelRoute(cfg, m, ModelRouteName(m.ID), names.Model[m.ID], exactHeader(catalog.RouteHeader, m.ID)))
	return out, nil
}

func exactHeader(name, value string) *routev3.HeaderMatcher {
	return &routev3.HeaderMatcher{
		Name:                 name,
		HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: exact(value)},
	}
}

func modelRoute(cfg *config.Config, m config.Model, name, cluster string, headers ...*routev3.HeaderMatcher) *routev3.Route {
	limits := &ratelimitv3.RateLimitPerRoute{RateLimits: []*routev3.RateLimit{TokenUsageRateLimit()}}
	return &routev3.Route{
		Name: name,
		Match: &routev3.RouteMatch{
			PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ModelRoutePrefix},
			Headers:       headers,
		},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			// The default 15 s covers the whole response, which a long
			// completion or an SSE stream exceeds; 0 disables it and the
			// model's idle_timeout catches stalled upstreams instead (the
			// retry policy's per_try_timeout the ones that send no head).
			Timeout:              durationpb.New(0),
			IdleTimeout:          durationpb.New(m.IdleTimeout),
			HostRewriteSpecifier: &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)},
			RetryPolicy:          RetryPolicy(m),
		}},
		// hits_addend and apply_on_stream_done work only in the ratelimit
		// filter's per-route configuration, not in RouteAction.rate_limits.
		TypedPerFilterConfig: map[string]*anypb.Any{FilterRateLimit: mustAny(limits)},
	}
}

// Retry policy settings of model routes (docs/routing-design.md).
const (
	// RetryOn retries failed connections, resets and 5xx, plus the
	// retriable status codes (429: a rate-limited provider is not failing,
	// so it is not a 5xx for outlier detection, but another provider may
	// have room).
	RetryOn = "connect-failure,reset,5xx,retriable-status-codes"
	// RetryHostPredicate never retries on a host already tried.
	RetryHostPredicate = "envoy.retry_host_predicates.previous_hosts"
	// RetryPriority moves each retry to a priority not tried yet: with an
	// aggregate cluster, whose priorities are its member clusters' in
	// order, that is the next provider.
	RetryPriority = "envoy.retry_priorities.previous_priorities"
	// HostSelectionRetryMaxAttempts bounds how often host selection tries
	// again when the predicate rejects a host.
	HostSelectionRetryMaxAttempts = 5
)

// RetryPolicy is a model route's retry policy: every provider is tried once
// (num_retries is providers - 1, at least 1), each attempt bounded by the
// model's first_byte_timeout until the response headers arrive. Envoy never
// retries once response headers went downstream.
func RetryPolicy(m config.Model) *routev3.RetryPolicy {
	providers := map[string]bool{}
	for _, mp := range m.Providers {
		providers[mp.Provider] = true
	}
	retries := max(len(providers)-1, 1)
	p := &routev3.RetryPolicy{
		RetryOn:              RetryOn,
		RetriableStatusCodes: []uint32{http.StatusTooManyRequests},
		NumRetries:           wrapperspb.UInt32(uint32(retries)),
		RetryHostPredicate: []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       RetryHostPredicate,
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{})},
		}},
		RetryPriority: &routev3.RetryPolicy_RetryPriority{
			Name: RetryPriority,
			ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAny(&previousprioritiesv3.PreviousPrioritiesConfig{
				// Exclude each priority as soon as it has been tried once.
				UpdateFrequency: 1,
			})},
		},
		HostSelectionRetryMaxAttempts: HostSelectionRetryMaxAttempts,
	}
	if m.FirstByteTimeout > 0 {
		p.PerTryTimeout = durationpb.New(m.FirstByteTimeout)
	}
	return p
}

// TokenUsageRateLimit charges a model request's tokens to the key's
// tokens-per-minute descriptor when the stream ends
// (docs/ratelimit-design.md): usage=tokens, tier, key_id, hits from the
// charge_tokens extproc writes at the end of the response (total_tokens
// less what admission reserved), and the key's own
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
			Format: "%DYNAMIC_METADATA(" + catalog.MetadataNamespace + ":charge_tokens)%",
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
