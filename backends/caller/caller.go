// Package caller owns who is calling a backend: the caller headers extproc
// sets after authenticating a key, the internal token that proves a request
// came through extproc, and the caller carried in the request context.
// docs/backends-design.md is the contract.
package caller

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// The caller headers and origins, named in catalog (the contract extproc
// shares); see docs/backends-design.md.
const (
	OwnerHeader      = catalog.OwnerHeader
	KeyIDHeader      = catalog.KeyIDHeader
	TierHeader       = catalog.TierHeader
	TokenHeader      = catalog.TokenHeader
	OnBehalfOfHeader = catalog.OnBehalfOfHeader
	OriginHeader     = catalog.OriginHeader

	OriginBatch     = catalog.OriginBatch
	OriginResponses = catalog.OriginResponses
	// PacedHeader marks the gateway's 429 for a batch line that must wait
	// for its key's tokens per minute.
	PacedHeader = catalog.PacedHeader
)

// Caller is the authenticated client of a backend request.
type Caller struct {
	// Owner is what a backend's resources belong to: the key's LimitID, the
	// first key of its rotation chain, so a rotated key keeps its files.
	Owner string
	KeyID string
	Tier  string
}

type ctxKey struct{}

// From returns the caller Require put in ctx.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

// Of returns the caller of r, from its context. Without one (a handler
// mounted without Require) it answers 401, as Require would, and reports
// false: a backend never serves a request it cannot attribute to an owner.
func Of(w http.ResponseWriter, r *http.Request) (Caller, bool) {
	c, ok := From(r.Context())
	if !ok || c.Owner == "" {
		errNoGateway.Write(w)
		return Caller{}, false
	}
	return c, true
}

// errNoGateway answers a request that did not come through extproc.
var errNoGateway = apierror.InvalidAPIKey("The request did not come through the gateway's authentication.")

// With returns ctx carrying c (tests of handlers use it to skip Require).
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// ValidToken compares a presented token with the internal one in constant
// time; an empty internal token matches nothing.
func ValidToken(internal, presented string) bool {
	return internal != "" && subtle.ConstantTimeCompare([]byte(internal), []byte(presented)) == 1
}

// Require admits only requests that came through extproc: the internal
// token must match and an owner must be named. Anything else is a request
// that reached the backend around the gateway (a misconfigured network), so
// it is refused with 401 and logged without its content.
func Require(token string, log *slog.Logger, next http.Handler) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		owner := r.Header.Get(OwnerHeader)
		if !ValidToken(token, r.Header.Get(TokenHeader)) || owner == "" {
			log.Warn("backend request without a valid gateway token refused", "method", r.Method, "path", r.URL.Path,
				"remote", r.RemoteAddr)
			errNoGateway.Write(w)
			return
		}
		c := Caller{Owner: owner, KeyID: r.Header.Get(KeyIDHeader), Tier: r.Header.Get(TierHeader)}
		next.ServeHTTP(w, r.WithContext(With(r.Context(), c)))
	})
}
