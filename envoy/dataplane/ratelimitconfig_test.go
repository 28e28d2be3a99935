package dataplane

import (
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestCompileRateLimit(t *testing.T) {
	svc := func(g *corev3.GrpcService) *ratelimitconfv3.RateLimitServiceConfig {
		return &ratelimitconfv3.RateLimitServiceConfig{GrpcService: g, TransportApiVersion: corev3.ApiVersion_V3}
	}
	envoyGrpc := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: "rls"}}}
	f, err := compileRateLimit("rl", false, &ratelimitfilterv3.RateLimit{Domain: "d", RateLimitService: svc(envoyGrpc)})
	if err != nil {
		t.Fatal(err)
	}
	if f.cluster != "rls" || f.domain != "d" || f.timeout != defaultRateLimitTimeout || f.failureDeny {
		t.Errorf("filter = %+v", f)
	}
	f, err = compileRateLimit("rl", true, &ratelimitfilterv3.RateLimit{Domain: "d", RateLimitService: svc(envoyGrpc),
		Timeout: durationpb.New(time.Second), FailureModeDeny: true})
	if err != nil || f.timeout != time.Second || !f.failureDeny || !f.disabled {
		t.Errorf("filter = %+v, %v", f, err)
	}
	google := &corev3.GrpcService{TargetSpecifier: &corev3.GrpcService_GoogleGrpc_{GoogleGrpc: &corev3.GrpcService_GoogleGrpc{TargetUri: "x", StatPrefix: "x"}}}
	if _, err := compileRateLimit("rl", false, &ratelimitfilterv3.RateLimit{Domain: "d", RateLimitService: svc(google)}); err == nil {
		t.Error("google_grpc accepted")
	}
	if _, err := compileRateLimit("rl", false, &ratelimitfilterv3.RateLimit{Domain: "d"}); err == nil {
		t.Error("missing rate_limit_service accepted")
	}
}

func TestCompileRateLimitPerRoute(t *testing.T) {
	rl := func(format string) *ratelimitfilterv3.RateLimitPerRoute {
		return &ratelimitfilterv3.RateLimitPerRoute{RateLimits: []*routev3.RateLimit{{
			ApplyOnStreamDone: true,
			Actions: []*routev3.RateLimit_Action{{ActionSpecifier: &routev3.RateLimit_Action_GenericKey_{
				GenericKey: &routev3.RateLimit_Action_GenericKey{DescriptorKey: "usage", DescriptorValue: "tokens"}}}},
			HitsAddend: &routev3.RateLimit_HitsAddend{Format: format},
		}}}
	}
	got, err := compileRateLimitPerRoute(mustAny(t, rl("%DYNAMIC_METADATA(switchyard:total_tokens)%")))
	if err != nil || !got.GetRateLimits()[0].GetApplyOnStreamDone() {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := compileRateLimitPerRoute(mustAny(t, rl("%BYTES_RECEIVED%"))); err == nil || !strings.Contains(err.Error(), "DYNAMIC_METADATA") {
		t.Errorf("err = %v", err)
	}
}

func TestDynamicMetadataFormat(t *testing.T) {
	tests := []struct {
		in      string
		ns, key string
		ok      bool
	}{
		{"%DYNAMIC_METADATA(switchyard:total_tokens)%", "switchyard", "total_tokens", true},
		{"%DYNAMIC_METADATA(a:b:c)%", "a", "b:c", true},
		{"%DYNAMIC_METADATA(nokey)%", "", "", false},
		{"%DYNAMIC_METADATA(:k)%", "", "", false},
		{"%DYNAMIC_METADATA()%", "", "", false},
		{"DYNAMIC_METADATA(a:b)", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		ns, key, ok := dynamicMetadataFormat(tt.in)
		if ns != tt.ns || key != tt.key || ok != tt.ok {
			t.Errorf("%q: got %q %q %v", tt.in, ns, key, ok)
		}
	}
}
