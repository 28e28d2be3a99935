package dataplane

import (
	"errors"
	"fmt"
	"time"

	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// Envoy's ratelimit filter defaults.
const defaultRateLimitTimeout = 20 * time.Millisecond

// rateLimitFilter is a compiled envoy.filters.http.ratelimit filter: the
// control plane puts it between ext_proc and the router to charge token usage
// when a model stream ends (docs/ratelimit-design.md). Compiling it only
// parses and keeps the configuration, so the data plane accepts every
// resource the control plane generates; the filter's behaviour (the RLS call
// at stream end, from the route's rateLimitPerRoute) lives in ratelimit.go.
type rateLimitFilter struct {
	name string
	// disabled is HttpFilter.disabled: the filter runs only where a route
	// enables it.
	disabled bool
	config   *ratelimitfilterv3.RateLimit
	domain   string
	// cluster is the rate limit service's gRPC cluster
	// (rate_limit_service.grpc_service.envoy_grpc.cluster_name); like
	// ext_proc's, a static cluster of the data plane's options.
	cluster     string
	timeout     time.Duration
	failureDeny bool
}

// compileRateLimit checks and keeps a ratelimit filter configuration. The
// rate limit service's cluster is not required to exist yet: a single node
// without a limiter still serves every request (the filter fails open and
// only charges usage after the response).
func compileRateLimit(name string, disabled bool, c *ratelimitfilterv3.RateLimit) (*rateLimitFilter, error) {
	if err := c.ValidateAll(); err != nil {
		return nil, err
	}
	eg := c.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
	if eg == nil {
		return nil, errors.New("rate_limit_service.grpc_service must use envoy_grpc")
	}
	f := &rateLimitFilter{
		name:        name,
		disabled:    disabled,
		config:      c,
		domain:      c.GetDomain(),
		cluster:     eg.GetClusterName(),
		timeout:     defaultRateLimitTimeout,
		failureDeny: c.GetFailureModeDeny(),
	}
	if t := c.GetTimeout(); t != nil {
		f.timeout = t.AsDuration()
	}
	return f, nil
}

// compileRateLimitPerRoute decodes a route's (or virtual host's)
// typed_per_filter_config entry for the ratelimit filter.
func compileRateLimitPerRoute(a *anypb.Any) (*ratelimitfilterv3.RateLimitPerRoute, error) {
	rl := &ratelimitfilterv3.RateLimitPerRoute{}
	if err := a.UnmarshalTo(rl); err != nil {
		return nil, err
	}
	if err := rl.ValidateAll(); err != nil {
		return nil, err
	}
	for i, r := range rl.GetRateLimits() {
		if f := r.GetHitsAddend().GetFormat(); f != "" {
			if _, _, ok := dynamicMetadataFormat(f); !ok {
				return nil, fmt.Errorf("rate_limits[%d].hits_addend.format %q: only %%DYNAMIC_METADATA(namespace:key)%% is supported", i, f)
			}
		}
	}
	return rl, nil
}

// dynamicMetadataFormat parses "%DYNAMIC_METADATA(ns:key)%", the one
// substitution format the hits addend uses.
func dynamicMetadataFormat(f string) (ns, key string, ok bool) {
	const pre, post = "%DYNAMIC_METADATA(", ")%"
	if len(f) <= len(pre)+len(post) || f[:len(pre)] != pre || f[len(f)-len(post):] != post {
		return "", "", false
	}
	inner := f[len(pre) : len(f)-len(post)]
	for i := 0; i < len(inner); i++ {
		if inner[i] == ':' {
			if i == 0 || i == len(inner)-1 {
				return "", "", false
			}
			return inner[:i], inner[i+1:], true
		}
	}
	return "", "", false
}
