package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/config"
)

// decide is the service's decision, step for step as envoyproxy/ratelimit's
// shouldRateLimitWorker makes it, with the same configuration, counters and
// global shadow and quota modes, minus its entry point's trace span: that
// renders the whole request as protobuf text on every call, even with
// tracing off, and a CPU profile of `make bench` showed it costing more
// than the decision itself on every request's admission. The response
// headers and dynamic metadata the library adds on request (its
// LIMIT_RESPONSE_HEADERS_ENABLED and RESPONSE_DYNAMIC_METADATA settings)
// are not reproduced: with either set, calls go through the library.
// TestDecideMatchesService holds the two to the same answers.
func (s *Server) decide(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	switch {
	case req.GetDomain() == "":
		return nil, errors.New("rate limit domain must not be empty")
	case len(req.GetDescriptors()) == 0:
		return nil, errors.New("rate limit descriptor list must not be empty")
	}
	cfg, globalShadow, globalQuota := s.svc.GetCurrentConfig()
	if cfg == nil {
		return nil, errors.New("no rate limit configuration loaded")
	}
	n := len(req.Descriptors)
	// One allocation for the answer, its statuses and the limits of a call
	// of up to two descriptors (Switchyard's calls; larger ones get their
	// own slices). The answer keeps the limits alive with it: pointers to
	// the configuration's, which it holds anyway.
	blk := &decision{}
	resp := &blk.resp
	var limits []*config.RateLimit
	if n <= len(blk.limits) {
		limits, resp.Statuses = blk.limits[:n], blk.statuses[:n]
	} else {
		limits = make([]*config.RateLimit, n)
		resp.Statuses = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
	}
	unlimited := make([]bool, n)
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		l := s.limits.getLimit(ctx, cfg, req.Domain, d)
		if l == nil {
			continue
		}
		for _, r := range l.Replaces {
			if replaced == nil {
				replaced = map[string]bool{}
			}
			replaced[r] = true
		}
		if l.Unlimited {
			unlimited[i] = true
			continue
		}
		limits[i] = l
	}
	for i, l := range limits {
		if l != nil && l.Name != "" && replaced[l.Name] {
			limits[i] = nil
		}
	}
	statuses := s.cache.DoLimit(ctx, req, limits)
	if len(statuses) != n {
		return nil, fmt.Errorf("ratelimit: the counter store answered %d statuses for %d descriptors", len(statuses), n)
	}
	overall := rlsv3.RateLimitResponse_OK
	for i, st := range statuses {
		switch {
		case unlimited[i]:
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: math.MaxUint32}
		case st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT && (globalQuota || limits[i] != nil && limits[i].QuotaMode):
			// Quota mode: the violation is counted, the answer stays OK.
			resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
				CurrentLimit: st.GetCurrentLimit(), LimitRemaining: st.GetLimitRemaining()}
		default:
			resp.Statuses[i] = st
			if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				overall = st.GetCode()
			}
		}
	}
	if overall == rlsv3.RateLimitResponse_OVER_LIMIT && globalShadow {
		overall = rlsv3.RateLimitResponse_OK
	}
	resp.OverallCode = overall
	return resp, nil
}

// decision is decide's answer and scratch in one block.
type decision struct {
	resp     rlsv3.RateLimitResponse
	statuses [2]*rlsv3.RateLimitResponse_DescriptorStatus
	limits   [2]*config.RateLimit
}
