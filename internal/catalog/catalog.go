// Package catalog owns the model catalog the control plane pushes to every
// extproc, and the naming contract between the routes the control plane
// generates and the headers extproc sets.
//
// The catalog travels over xDS as an RTDS resource (envoy.service.runtime.v3.Runtime)
// named RuntimeName whose layer is the catalog as a Struct: go-control-plane's
// snapshot cache serves only Envoy's resource types, and a Runtime layer is the
// one that carries free-form structured data. Envoy itself never subscribes to it.
package catalog

import (
	"encoding/json"
	"fmt"
	"strings"

	runtimev3 "github.com/envoyproxy/go-control-plane/envoy/service/runtime/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/config"
)

const (
	// RouteHeader carries the canonical model id chosen by extproc; model
	// routes match on it exactly.
	RouteHeader = "x-switchyard-model"
	// FirstHeader names the provider extproc's routing policy prefers for
	// the request's first attempt; the model's routes match it together
	// with RouteHeader, and the failover order behind it is the route's.
	// A value the data plane does not know falls through to the model's
	// default route.
	FirstHeader = "x-switchyard-first"
	// PhaseMetadata is the gRPC initial-metadata key that tells extproc
	// which ext_proc filter opened a Process stream: PhaseUpstream for the
	// per-attempt filter on provider clusters, absent for the listener's
	// (downstream) filter.
	PhaseMetadata = "x-switchyard-phase"
	// PhaseUpstream is PhaseMetadata's value on the upstream filter.
	PhaseUpstream = "upstream"
	// ProviderMetadata is the gRPC initial-metadata key naming the
	// provider whose cluster runs the upstream filter.
	ProviderMetadata = "x-switchyard-provider"
	// InternalHeaderPrefix marks headers that carry identity or routing inside
	// the gateway. Extproc strips every such header a client sends, so none can
	// be forged.
	InternalHeaderPrefix = "x-switchyard-"
	// MetadataNamespace is the dynamic metadata namespace extproc writes
	// (key id, model, provider, token usage) for access logs and rate limits.
	MetadataNamespace = "switchyard"

	// Caller headers (docs/backends-design.md). Extproc sets OwnerHeader,
	// KeyIDHeader, TierHeader and TokenHeader on requests to the backends;
	// a backend calling the gateway with the internal token names the owner
	// it acts for in OnBehalfOfHeader and why in OriginHeader.
	OwnerHeader      = InternalHeaderPrefix + "owner"
	KeyIDHeader      = InternalHeaderPrefix + "key-id"
	TierHeader       = InternalHeaderPrefix + "tier"
	TokenHeader      = InternalHeaderPrefix + "internal-token"
	OnBehalfOfHeader = InternalHeaderPrefix + "on-behalf-of"
	OriginHeader     = InternalHeaderPrefix + "origin"
	// Origins of a backend's call: a batch line (outside the requests per
	// minute, but paced by and charged to the tokens per minute) or the
	// Responses service (admitted and charged like any chat completion).
	OriginBatch     = "batch"
	OriginResponses = "responses"
	// PacedHeader is on a 429 the gateway gives a batch line because its
	// key's tokens per minute are spent for now: the batch runner waits for
	// retry-after and sends the line again, without counting an attempt.
	PacedHeader = InternalHeaderPrefix + "paced"
	// RuntimeName names the RTDS resource that carries the catalog.
	RuntimeName = "switchyard.catalog"
	// ExtProcCluster is the bootstrap cluster that reaches extproc over gRPC.
	ExtProcCluster = "switchyard_extproc"
	// XDSCluster is the bootstrap cluster that reaches the control plane.
	XDSCluster = "switchyard_xds"
	// ListenerRouteConfig is the RDS name every public listener uses.
	ListenerRouteConfig = "switchyard_routes"
)

// ClusterName is the CDS cluster (and EDS assignment) name of a provider.
func ClusterName(provider string) string { return "provider_" + provider }

// Catalog is what extproc needs to authenticate, validate and route requests.
type Catalog struct {
	Region    string                 `json:"region"`
	Providers []config.Provider      `json:"providers"`
	Models    []config.Model         `json:"models"`
	Tiers     map[string]config.Tier `json:"tiers"`

	models    map[string]*config.Model
	providers map[string]*config.Provider
}

// FromConfig builds the catalog from a validated configuration.
func FromConfig(c *config.Config) *Catalog {
	cat := &Catalog{Region: c.Region, Providers: c.Providers, Models: c.Models, Tiers: c.Tiers}
	cat.index()
	return cat
}

func (c *Catalog) index() {
	c.models = make(map[string]*config.Model, len(c.Models))
	for i := range c.Models {
		c.models[c.Models[i].ID] = &c.Models[i]
	}
	c.providers = make(map[string]*config.Provider, len(c.Providers))
	for i := range c.Providers {
		c.providers[c.Providers[i].Name] = &c.Providers[i]
	}
}

// Model returns the model with the given client-visible id.
func (c *Catalog) Model(id string) (*config.Model, bool) {
	m, ok := c.models[id]
	return m, ok
}

// Provider returns the named provider.
func (c *Catalog) Provider(name string) (*config.Provider, bool) {
	p, ok := c.providers[name]
	return p, ok
}

// Runtime encodes the catalog as the RTDS resource the control plane serves.
func (c *Catalog) Runtime() (*runtimev3.Runtime, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("catalog: encode: %w", err)
	}
	layer := &structpb.Struct{}
	if err := protojson.Unmarshal(b, layer); err != nil {
		return nil, fmt.Errorf("catalog: encode: %w", err)
	}
	return &runtimev3.Runtime{Name: RuntimeName, Layer: layer}, nil
}

// Decode reads a catalog from the RTDS resource.
func Decode(r *runtimev3.Runtime) (*Catalog, error) {
	if r.GetName() != RuntimeName {
		return nil, fmt.Errorf("catalog: runtime %q is not %q", r.GetName(), RuntimeName)
	}
	b, err := protojson.Marshal(r.GetLayer())
	if err != nil {
		return nil, fmt.Errorf("catalog: decode: %w", err)
	}
	var c Catalog
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("catalog: decode: %w", err)
	}
	c.index()
	return &c, nil
}

// IsInternalHeader reports whether a (lower-case) header name is reserved for
// the gateway's own use.
func IsInternalHeader(name string) bool { return strings.HasPrefix(name, InternalHeaderPrefix) }
