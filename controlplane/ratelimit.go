package controlplane

import (
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// RateLimitConfig is the RateLimitConfig resource (resourcev3.RateLimitConfigType,
// named ratelimit.ConfigName) that envoyproxy/ratelimit loads over xDS with
// CONFIG_TYPE=GRPC_XDS_SOTW, and that the single node's embedded ratelimit
// service loads the same way: the tiers' limits in the descriptor scheme of
// docs/ratelimit-design.md. It changes only when the tiers do, so a tier
// change in the configuration reaches every ratelimit service live.
func RateLimitConfig(cfg *config.Config) types.Resource {
	return ratelimit.BuildConfig(cfg.Tiers)
}
