// Package ratelimit owns Switchyard's rate limiting: the descriptor scheme
// shared by every caller of the limiter (docs/ratelimit-design.md), the
// envoyproxy/ratelimit RateLimitConfig built from the configured tiers, the
// in-process counter store that lets `switchyard run` use envoyproxy/ratelimit's
// own service logic without Redis, and the Server that embeds that service on
// a gRPC server of ours.
//
// Fleet and single node run the same code: envoyproxy/ratelimit's service
// (service.NewService) decides; only its counter store differs (Redis in the
// fleet, MemoryCache on one node), and both take their descriptors from the
// control plane over xDS (resourcev3.RateLimitConfigType). Callers speak the
// RLS API (envoy.service.ratelimit.v3) over real gRPC in both modes.
package ratelimit

import (
	"math"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

// The descriptor scheme (docs/ratelimit-design.md). Entry order matters:
// envoyproxy/ratelimit walks its configuration tree in order.
const (
	// Domain is the ratelimit domain of every Switchyard descriptor.
	Domain = "switchyard"
	// ConfigName is the name of the RateLimitConfig xDS resource.
	ConfigName = "switchyard"

	EntryTier  = "tier"
	EntryKeyID = "key_id"
	EntryUsage = "usage"
	// UsageTokens is the value of the usage entry of the tokens descriptor.
	UsageTokens = "tokens"

	// Dynamic metadata fields in catalog.MetadataNamespace that the data
	// plane's ratelimit filter reads when a stream ends.
	MetaKeyID       = "key_id"
	MetaTier        = "tier"
	MetaTotalTokens = "total_tokens"
	MetaTPMLimit    = "tpm_limit"
)

// Limits are the per-minute limits that apply to one key.
type Limits struct {
	RPM, TPM int64
	// Custom reports which of the two come from the key rather than its
	// tier; those travel as descriptor limit overrides.
	CustomRPM, CustomTPM bool
}

// KeyLimits returns the limits of k in the given tiers. ok is false when
// the key's tier is unknown or a limit would be zero (a tier that expects
// per-key limits, and a key that has none): such a key has no defined
// limits and must not be served.
func KeyLimits(tiers map[string]config.Tier, k *keys.Key) (l Limits, ok bool) {
	t, known := tiers[k.Tier]
	if !known {
		return Limits{}, false
	}
	l = Limits{RPM: int64(t.RPM), TPM: int64(t.TPM)}
	if k.RPM > 0 {
		l.RPM, l.CustomRPM = k.RPM, true
	}
	if k.TPM > 0 {
		l.TPM, l.CustomTPM = k.TPM, true
	}
	return l, l.RPM > 0 && l.TPM > 0
}

// RequestsDescriptor is the requests-per-minute descriptor of a key:
// tier, key_id. hits is how many requests to count (1 for admission).
func RequestsDescriptor(tier, keyID string, l Limits, hits uint64) *ratelimitv3.RateLimitDescriptor {
	b := &requestsBlock{}
	b.entries = [2]ratelimitv3.RateLimitDescriptor_Entry{{Key: EntryTier, Value: tier}, {Key: EntryKeyID, Value: keyID}}
	b.ptrs = [2]*ratelimitv3.RateLimitDescriptor_Entry{&b.entries[0], &b.entries[1]}
	return b.fill(b.ptrs[:], l.CustomRPM, l.RPM, hits)
}

// TokensDescriptor is the tokens-per-minute descriptor of a key:
// usage=tokens, tier, key_id. hits is how many tokens to charge; 0 only
// reads the counter ("check only", as at admission).
func TokensDescriptor(tier, keyID string, l Limits, hits uint64) *ratelimitv3.RateLimitDescriptor {
	b := &tokensBlock{}
	b.entries = [3]ratelimitv3.RateLimitDescriptor_Entry{{Key: EntryUsage, Value: UsageTokens}, {Key: EntryTier, Value: tier}, {Key: EntryKeyID, Value: keyID}}
	b.ptrs = [3]*ratelimitv3.RateLimitDescriptor_Entry{&b.entries[0], &b.entries[1], &b.entries[2]}
	return b.fill(b.ptrs[:], l.CustomTPM, l.TPM, hits)
}

// descriptorBlock holds a descriptor and the messages it points to in one
// allocation (a descriptor is built for each of a request's three rate
// limit calls, and field by field it was six allocations). The parts are
// never copied, only pointed to; the block lives as long as any of them.
type descriptorBlock struct {
	d     ratelimitv3.RateLimitDescriptor
	hits  wrapperspb.UInt64Value
	limit ratelimitv3.RateLimitDescriptor_RateLimitOverride
}

type requestsBlock struct {
	descriptorBlock
	ptrs    [2]*ratelimitv3.RateLimitDescriptor_Entry
	entries [2]ratelimitv3.RateLimitDescriptor_Entry
}

type tokensBlock struct {
	descriptorBlock
	ptrs    [3]*ratelimitv3.RateLimitDescriptor_Entry
	entries [3]ratelimitv3.RateLimitDescriptor_Entry
}

func (b *descriptorBlock) fill(entries []*ratelimitv3.RateLimitDescriptor_Entry, custom bool, limit int64, hits uint64) *ratelimitv3.RateLimitDescriptor {
	b.d.Entries = entries
	b.hits.Value = hits
	b.d.HitsAddend = &b.hits
	if custom {
		b.limit.RequestsPerUnit, b.limit.Unit = clampUint32(limit), typev3.RateLimitUnit_MINUTE
		b.d.Limit = &b.limit
	}
	return &b.d
}

// TPMLimitMetadata is the value of MetaTPMLimit for a key with a custom
// TPM: the shape Envoy's ratelimit action limit override reads from dynamic
// metadata.
func TPMLimitMetadata(tpm int64) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"requests_per_unit": structpb.NewNumberValue(float64(clampUint32(tpm))),
		"unit":              structpb.NewStringValue(typev3.RateLimitUnit_MINUTE.String()),
	}})
}

func clampUint32(n int64) uint32 {
	switch {
	case n < 0:
		return 0
	case n > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}
