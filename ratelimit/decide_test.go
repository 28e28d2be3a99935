package ratelimit

import (
	"context"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// TestDecideMatchesService sends one sequence of calls to two servers on
// the same clock and configuration, one answering through decide and one
// through envoyproxy/ratelimit's own entry point, and requires the same
// answer to every call: statuses, overall codes and errors.
func TestDecideMatchesService(t *testing.T) {
	now := int64(1_800_000_018)
	clock := clockFunc(func() int64 { return now })
	tiers := map[string]config.Tier{"free": {RPM: 3, TPM: 100}, "enterprise": {}}
	newServer := func(direct, configured bool) *Server {
		s := NewServer(Options{Clock: clock})
		s.direct = direct
		if configured {
			if err := s.SetConfig(BuildConfig(tiers)); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	req := func(ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: ds}
	}
	free := Limits{RPM: 3, TPM: 100}
	custom := Limits{RPM: 1, TPM: 10, CustomRPM: true, CustomTPM: true}
	calls := []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{RequestsDescriptor("free", "a", free, 1)}}},
		{"no descriptors", req()},
		{"request 1", req(RequestsDescriptor("free", "a", free, 1))},
		{"request 2 with an estimate", req(RequestsDescriptor("free", "a", free, 1), TokensDescriptor("free", "a", free, 40))},
		{"request 3", req(RequestsDescriptor("free", "a", free, 1))},
		{"request 4: over RPM", req(RequestsDescriptor("free", "a", free, 1), TokensDescriptor("free", "a", free, 1))},
		{"another key", req(RequestsDescriptor("free", "b", free, 1))},
		{"tokens over TPM", req(TokensDescriptor("free", "b", free, 500))},
		{"custom limits", req(RequestsDescriptor("enterprise", "c", custom, 1), TokensDescriptor("enterprise", "c", custom, 5))},
		{"custom limits again: over", req(RequestsDescriptor("enterprise", "c", custom, 1), TokensDescriptor("enterprise", "c", custom, 5))},
		{"enterprise without limits", req(RequestsDescriptor("enterprise", "d", Limits{}, 1))},
		{"unknown tier", req(RequestsDescriptor("gold", "e", Limits{}, 1))},
		{"zero hits", req(TokensDescriptor("free", "a", free, 0))},
	}
	for _, configured := range []bool{true, false} {
		direct, library := newServer(true, configured), newServer(false, configured)
		if !direct.direct || library.direct {
			t.Fatal("servers not set up as asked")
		}
		for _, c := range calls {
			got, gotErr := direct.ShouldRateLimit(context.Background(), c.req)
			want, wantErr := library.ShouldRateLimit(context.Background(), c.req)
			if status.Code(gotErr) != status.Code(wantErr) || status.Convert(gotErr).Message() != status.Convert(wantErr).Message() {
				t.Errorf("configured=%v %s: error %v, library %v", configured, c.name, gotErr, wantErr)
			}
			if !proto.Equal(got, want) {
				t.Errorf("configured=%v %s:\n got %v\nwant %v", configured, c.name, got, want)
			}
		}
	}
	// What BuildConfig never produces, but a fleet's own configuration may:
	// unlimited descriptors, one limit replacing another, shadow mode.
	policy := func(n uint32) *rlsconfv3.RateLimitPolicy {
		return &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: n}
	}
	special := &rlsconfv3.RateLimitConfig{Name: "special", Domain: Domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "u", RateLimit: &rlsconfv3.RateLimitPolicy{Unlimited: true}},
		{Key: "p", Value: "x", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 1, Name: "narrow"}},
		{Key: "q", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MINUTE, RequestsPerUnit: 5,
			Replaces: []*rlsconfv3.RateLimitReplace{{Name: "narrow"}}}},
		{Key: "s", ShadowMode: true, RateLimit: policy(1)},
	}}
	entry := func(k, v string) *ratelimitv3.RateLimitDescriptor {
		return &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: k, Value: v}}}
	}
	direct, library := NewServer(Options{Clock: clock}), NewServer(Options{Clock: clock})
	library.direct = false
	for _, s := range []*Server{direct, library} {
		if err := s.SetConfig(special); err != nil {
			t.Fatal(err)
		}
	}
	var overLimit int
	for i, r := range []*rlsv3.RateLimitRequest{
		req(entry("u", "1")), req(entry("u", "1")),
		req(entry("p", "x")), req(entry("p", "x")),
		req(entry("p", "x"), entry("q", "y")), req(entry("p", "x"), entry("q", "y")),
		req(entry("s", "1")), req(entry("s", "1")), req(entry("s", "1"), entry("p", "x")),
	} {
		got, gotErr := direct.ShouldRateLimit(context.Background(), r)
		want, wantErr := library.ShouldRateLimit(context.Background(), r)
		if gotErr != nil || wantErr != nil {
			t.Fatalf("special call %d: %v, library %v", i, gotErr, wantErr)
		}
		if !proto.Equal(got, want) {
			t.Errorf("special call %d:\n got %v\nwant %v", i, got, want)
		}
		if got.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			overLimit++
		}
	}
	if overLimit == 0 {
		t.Error("no special call was over its limit: the comparison proved little")
	}

	// The sequence reached both answers, so the comparison meant something.
	s := newServer(true, true)
	var codes []rlsv3.RateLimitResponse_Code
	for range 4 {
		r, err := s.ShouldRateLimit(context.Background(), req(RequestsDescriptor("free", "z", free, 1)))
		if err != nil {
			t.Fatal(err)
		}
		codes = append(codes, r.GetOverallCode())
	}
	if codes[2] != rlsv3.RateLimitResponse_OK || codes[3] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("4 calls on a 3 RPM tier answered %v", codes)
	}
}

// BenchmarkShouldRateLimit is one admission call (requests and tokens
// descriptors) of a key on its tier's limits and of a key with limits of
// its own (descriptor-level overrides), on the in-memory counter store.
func BenchmarkShouldRateLimit(b *testing.B) {
	tiers := map[string]config.Tier{"free": {RPM: 1 << 30, TPM: 1 << 30}, "enterprise": {}}
	for _, tc := range []struct {
		name   string
		tier   string
		limits Limits
	}{
		{"tier", "free", Limits{RPM: 1 << 30, TPM: 1 << 30}},
		{"custom", "enterprise", Limits{RPM: 1 << 30, TPM: 1 << 30, CustomRPM: true, CustomTPM: true}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := NewServer(Options{})
			if err := s.SetConfig(BuildConfig(tiers)); err != nil {
				b.Fatal(err)
			}
			req := &rlsv3.RateLimitRequest{Domain: Domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{
				RequestsDescriptor(tc.tier, "k", tc.limits, 1), TokensDescriptor(tc.tier, "k", tc.limits, 40)}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				r, err := s.ShouldRateLimit(ctx, req)
				if err != nil || r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					b.Fatal(r, err)
				}
			}
		})
	}
}

// TestDecideAfterConfigChange: decide's cached limits belong to the
// configuration they came from; a new configuration's limits apply at once.
func TestDecideAfterConfigChange(t *testing.T) {
	now := int64(1_800_000_018)
	s := NewServer(Options{Clock: clockFunc(func() int64 { return now })})
	if !s.direct {
		t.Fatal("decide is not in use")
	}
	call := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		r, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{RequestsDescriptor("free", "a", Limits{RPM: 1, TPM: 1}, 1)}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetOverallCode()
	}
	if err := s.SetConfig(BuildConfig(map[string]config.Tier{"free": {RPM: 1, TPM: 100}})); err != nil {
		t.Fatal(err)
	}
	if got := []rlsv3.RateLimitResponse_Code{call(), call()}; got[0] != rlsv3.RateLimitResponse_OK || got[1] != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("at 1 RPM: %v", got)
	}
	if err := s.SetConfig(BuildConfig(map[string]config.Tier{"free": {RPM: 10, TPM: 100}})); err != nil {
		t.Fatal(err)
	}
	if got := call(); got != rlsv3.RateLimitResponse_OK {
		t.Errorf("third request at 10 RPM: %v", got)
	}
	if err := s.SetConfig(BuildConfig(map[string]config.Tier{"gold": {RPM: 10, TPM: 100}})); err != nil {
		t.Fatal(err)
	}
	// The tier is gone: no limit applies, as the library answers.
	for range 20 {
		if got := call(); got != rlsv3.RateLimitResponse_OK {
			t.Fatalf("with the tier gone: %v", got)
		}
	}
}
