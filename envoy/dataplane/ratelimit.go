package dataplane

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	metadatav3 "github.com/envoyproxy/go-control-plane/envoy/type/metadata/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// This file is the behaviour of Envoy's envoy.filters.http.ratelimit filter
// for the subset the control plane generates (docs/ratelimit-design.md): rate
// limits in the route's RateLimitPerRoute with apply_on_stream_done, whose
// descriptors are built when the stream ends from the actions generic_key,
// metadata (dynamic or route-entry metadata) and request_headers, with
// hits_addend as a number or "%DYNAMIC_METADATA(ns:key)%", and the limit
// override from dynamic metadata. The call is made once the response is
// complete (or the client gone), and its answer is ignored, as Envoy does for
// stream-done limits: it charges usage, it does not decide anything.
//
// Rate limits without apply_on_stream_done (checked on the request path),
// and other actions, are not implemented: such a limit produces no
// descriptor and is logged. The control plane generates neither; admission
// is extproc's own RLS call.

// rateLimitStreamDone makes the filter's stream-done call, if the
// connection manager has the filter and the request's final route has
// stream-done limits. It runs once the request has finished (finish, in
// stream.go), detached from the connection as in Envoy, bounded by the
// filter's timeout.
func (s *requestState) rateLimitStreamDone() {
	f := s.lis.hcm.rateLimit
	rt := s.route
	if f == nil || rt == nil {
		return
	}
	enabled := !f.disabled
	var per *perFilterConfig
	for _, pf := range []*perFilterConfig{rt.vh.perFilter[f.name], rt.perFilter[f.name]} {
		if pf != nil {
			enabled = !pf.disabled
			if pf.rateLimit != nil {
				per = pf
			}
		}
	}
	if !enabled || per == nil {
		return
	}
	domain := f.domain
	if d := per.rateLimit.GetDomain(); d != "" {
		domain = d
	}
	var (
		call        *rateLimitCall
		descriptors []*ratelimitv3.RateLimitDescriptor
	)
	for i, rl := range per.rateLimit.GetRateLimits() {
		if rl.GetStage().GetValue() != f.config.GetStage() {
			continue
		}
		if !rl.GetApplyOnStreamDone() {
			s.log.Debug("ratelimit filter: request-path rate limit not implemented; skipped", "route", rt.name, "index", i)
			continue
		}
		if d, ok := s.rateLimitDescriptor(rl); ok {
			if call == nil {
				call = &rateLimitCall{}
				descriptors = call.ds[:0]
			}
			descriptors = append(descriptors, d)
		}
	}
	if len(descriptors) == 0 {
		return
	}
	err := s.callRateLimit(f, domain, call, descriptors)
	if err != nil {
		s.log.Warn("ratelimit filter: stream-done call failed; usage not charged", "request_id", s.requestID,
			"cluster", f.cluster, "error", err)
		if h := s.d.opts.OnRateLimitError; h != nil {
			h(err)
		}
	}
}

// rateLimitCall is a stream-done call's request, response and room for
// its descriptors (the control plane's routes have one), allocated
// together.
type rateLimitCall struct {
	req  rlsv3.RateLimitRequest
	resp rlsv3.RateLimitResponse
	ds   [2]*ratelimitv3.RateLimitDescriptor
}

func (s *requestState) callRateLimit(f *rateLimitFilter, domain string, call *rateLimitCall, ds []*ratelimitv3.RateLimitDescriptor) error {
	conn, err := s.d.grpcConn(f.cluster)
	if err != nil {
		return err
	}
	// The request's own context may be cancelled already (a client that
	// went away still used the tokens); the filter's timeout bounds the call.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.r.Context()), f.timeout)
	defer cancel()
	// The call the generated client makes, without a client and an
	// options slice made for each call.
	call.req.Domain, call.req.Descriptors = domain, ds
	return conn.Invoke(ctx, rlsv3.RateLimitService_ShouldRateLimit_FullMethodName, &call.req, &call.resp, staticMethod...)
}

// staticMethod is the call option the generated clients pass: the method
// name is a constant, fit for metric labels.
var staticMethod = []grpc.CallOption{grpc.StaticMethod()}

// rateLimitDescriptor builds one rate limit's descriptor. ok is false when
// Envoy would produce none: an action without a value and no default, an
// unsupported action, or hits that do not resolve to a positive number
// (nothing to charge).
func (s *requestState) rateLimitDescriptor(rl *routev3.RateLimit) (*ratelimitv3.RateLimitDescriptor, bool) {
	// The descriptor, its hits and its entries in three allocations (the
	// entries and their pointers sized for every action, so that appending
	// never moves them): built for every request that ends.
	actions := rl.GetActions()
	b := &descriptorParts{}
	d := &b.d
	entries := make([]ratelimitv3.RateLimitDescriptor_Entry, 0, len(actions))
	d.Entries = make([]*ratelimitv3.RateLimitDescriptor_Entry, 0, len(actions))
	for _, a := range actions {
		var (
			key, value string
			ok         bool
		)
		switch act := a.GetActionSpecifier().(type) {
		case *routev3.RateLimit_Action_GenericKey_:
			key, value, ok = act.GenericKey.GetDescriptorKey(), act.GenericKey.GetDescriptorValue(), true
			if key == "" {
				key = "generic_key"
			}
		case *routev3.RateLimit_Action_Metadata:
			m := act.Metadata
			key = m.GetDescriptorKey()
			value, ok = s.metadataString(m.GetMetadataKey(), m.GetSource())
			if !ok && m.GetDefaultValue() != "" {
				value, ok = m.GetDefaultValue(), true
			}
			if !ok && m.GetSkipIfAbsent() {
				continue // the entry is left out; the descriptor stays
			}
		case *routev3.RateLimit_Action_RequestHeaders_:
			rh := act.RequestHeaders
			key = rh.GetDescriptorKey()
			value, ok = s.headers.joined(strings.ToLower(rh.GetHeaderName()))
			if !ok && rh.GetSkipIfAbsent() {
				continue
			}
		default:
			s.log.Debug("ratelimit filter: action not implemented; descriptor skipped", "action", fmt.Sprintf("%T", act))
			return nil, false
		}
		if !ok {
			return nil, false
		}
		entries = append(entries, ratelimitv3.RateLimitDescriptor_Entry{Key: key, Value: value})
		d.Entries = append(d.Entries, &entries[len(entries)-1])
	}
	if len(d.Entries) == 0 {
		return nil, false
	}
	if ha := rl.GetHitsAddend(); ha != nil {
		hits, ok := uint64(0), false
		switch {
		case ha.GetFormat() != "":
			hits, ok = s.metadataHits(ha.GetFormat())
		case ha.GetNumber() != nil:
			hits, ok = ha.GetNumber().GetValue(), true
		}
		if !ok || hits == 0 {
			return nil, false
		}
		b.hits.Value = hits
		d.HitsAddend = &b.hits
	}
	if dm := rl.GetLimit().GetDynamicMetadata(); dm != nil {
		if o, ok := limitOverride(s.metadataValue(dm.GetMetadataKey())); ok {
			d.Limit = o
		}
	}
	return d, true
}

// descriptorParts are a stream-done descriptor and its hits, allocated
// together.
type descriptorParts struct {
	d    ratelimitv3.RateLimitDescriptor
	hits wrapperspb.UInt64Value
}

// metadataValue follows a metadata key's path through the request's
// dynamic metadata. It walks the namespace's fields in place (a Value
// wrapping the namespace is made only for a path-less key).
func (s *requestState) metadataValue(mk *metadatav3.MetadataKey) *structpb.Value {
	ns := s.meta.get(mk.GetKey())
	if ns == nil {
		return nil
	}
	path := mk.GetPath()
	if len(path) == 0 {
		return structpb.NewStructValue(ns)
	}
	fields := ns.GetFields()
	var v *structpb.Value
	for i, seg := range path {
		if i > 0 {
			st := v.GetStructValue()
			if st == nil {
				return nil
			}
			fields = st.GetFields()
		}
		if v = fields[seg.GetKey()]; v == nil {
			return nil
		}
	}
	return v
}

// metadataString is a metadata action's value: dynamic metadata, or the
// route's own metadata (not kept by this data plane: always absent).
func (s *requestState) metadataString(mk *metadatav3.MetadataKey, src routev3.RateLimit_Action_MetaData_Source) (string, bool) {
	if src != routev3.RateLimit_Action_MetaData_DYNAMIC {
		return "", false
	}
	switch v := s.metadataValue(mk).GetKind().(type) {
	case *structpb.Value_StringValue:
		return v.StringValue, v.StringValue != ""
	case *structpb.Value_NumberValue:
		return strconv.FormatFloat(v.NumberValue, 'f', -1, 64), true
	case *structpb.Value_BoolValue:
		return strconv.FormatBool(v.BoolValue), true
	}
	return "", false
}

// metadataHits resolves a hits_addend format, "%DYNAMIC_METADATA(ns:key)%",
// to a count.
func (s *requestState) metadataHits(format string) (uint64, bool) {
	ns, key, ok := dynamicMetadataFormat(format)
	if !ok {
		return 0, false
	}
	md := s.meta.get(ns)
	if md == nil {
		return 0, false
	}
	switch v := md.GetFields()[key].GetKind().(type) {
	case *structpb.Value_NumberValue:
		if v.NumberValue < 0 || v.NumberValue > math.MaxUint64 || v.NumberValue != math.Trunc(v.NumberValue) {
			return 0, false
		}
		return uint64(v.NumberValue), true
	case *structpb.Value_StringValue:
		n, err := strconv.ParseUint(v.StringValue, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// limitOverride reads {requests_per_unit, unit} from dynamic metadata, the
// shape of Envoy's RateLimit.Override.DynamicMetadata; anything else is no
// override.
func limitOverride(v *structpb.Value) (*ratelimitv3.RateLimitDescriptor_RateLimitOverride, bool) {
	f := v.GetStructValue().GetFields()
	n, unit := f["requests_per_unit"].GetNumberValue(), f["unit"].GetStringValue()
	u, known := typev3.RateLimitUnit_value[strings.ToUpper(unit)]
	if !known || u == int32(typev3.RateLimitUnit_UNKNOWN) || n < 1 || n > math.MaxUint32 || n != math.Trunc(n) {
		return nil, false
	}
	return &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(n), Unit: typev3.RateLimitUnit(u)}, true
}
