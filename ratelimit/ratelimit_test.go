package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/keys"
)

func TestBuildConfig(t *testing.T) {
	got := dump(BuildConfig(map[string]config.Tier{
		"standard":   {RPM: 60, TPM: 200000},
		"free":       {RPM: 10, TPM: 40000},
		"enterprise": {},
	}))
	want := `domain switchyard
  tier=enterprise
    key_id
  tier=free
    key_id: 10/MINUTE
  tier=standard
    key_id: 60/MINUTE
  usage=tokens
    tier=enterprise
      key_id
    tier=free
      key_id: 40000/MINUTE
    tier=standard
      key_id: 200000/MINUTE
`
	if got != want {
		t.Errorf("config:\n%s\nwant:\n%s", got, want)
	}
	// envoyproxy/ratelimit's own loader accepts it.
	if _, err := loadConfigs([]*rlsconfv3.RateLimitConfig{BuildConfig(map[string]config.Tier{"free": {RPM: 1, TPM: 1}})}, newStatsManager()); err != nil {
		t.Fatal(err)
	}
}

func TestKeyLimits(t *testing.T) {
	tiers := map[string]config.Tier{"free": {RPM: 10, TPM: 40000}, "enterprise": {}}
	for _, tt := range []struct {
		name string
		key  keys.Key
		want Limits
		ok   bool
	}{
		{"tier limits", keys.Key{Tier: "free"}, Limits{RPM: 10, TPM: 40000}, true},
		{"custom RPM only", keys.Key{Tier: "free", RPM: 100}, Limits{RPM: 100, TPM: 40000, CustomRPM: true}, true},
		{"enterprise with both", keys.Key{Tier: "enterprise", RPM: 5, TPM: 6}, Limits{RPM: 5, TPM: 6, CustomRPM: true, CustomTPM: true}, true},
		{"enterprise missing TPM", keys.Key{Tier: "enterprise", RPM: 5}, Limits{RPM: 5, CustomRPM: true}, false},
		{"unknown tier", keys.Key{Tier: "gold", RPM: 5, TPM: 5}, Limits{}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := KeyLimits(tiers, &tt.key)
			if got != tt.want || ok != tt.ok {
				t.Errorf("KeyLimits = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestMemoryCacheDropsEndedWindows(t *testing.T) {
	now := int64(600)
	s := NewServer(Options{Clock: clockFunc(func() int64 { return now })})
	if err := s.SetConfig(BuildConfig(map[string]config.Tier{"free": {RPM: 10, TPM: 100}})); err != nil {
		t.Fatal(err)
	}
	mc := s.cache.(*MemoryCache)
	call := func(key string) {
		_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: Domain,
			Descriptors: []*ratelimitv3.RateLimitDescriptor{RequestsDescriptor("free", key, Limits{}, 1)}})
		if err != nil {
			t.Fatal(err)
		}
	}
	call("a")
	call("b")
	if mc.Len() != 2 {
		t.Fatalf("%d counters, want 2", mc.Len())
	}
	now = 660 // the next window
	call("c")
	if mc.Len() != 1 {
		t.Errorf("%d counters after the window ended, want 1", mc.Len())
	}
}

type clockFunc func() int64

func (f clockFunc) UnixNow() int64 { return f() }

func TestServerWithoutConfig(t *testing.T) {
	s := NewServer(Options{})
	if s.Ready() {
		t.Fatal("ready before any configuration")
	}
	_, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{RequestsDescriptor("free", "k", Limits{}, 1)}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("err = %v, want Unavailable", err)
	}
}

func TestConfigHandlerRejectsInvalid(t *testing.T) {
	s := NewServer(Options{})
	good := BuildConfig(map[string]config.Tier{"free": {RPM: 1, TPM: 1}})
	if err := s.ConfigHandler(context.Background(), "1", map[string]proto.Message{ConfigName: good}); err != nil {
		t.Fatal(err)
	}
	bad := &rlsconfv3.RateLimitConfig{Name: "bad", Domain: Domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "k", RateLimit: &rlsconfv3.RateLimitPolicy{RequestsPerUnit: 1}}, // no unit
	}}
	err := s.ConfigHandler(context.Background(), "2", map[string]proto.Message{"bad": bad})
	if err == nil || !strings.Contains(err.Error(), "invalid rate limit unit") {
		t.Errorf("err = %v, want the loader's complaint", err)
	}
	// The previous configuration stays in force.
	resp, err := s.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: Domain,
		Descriptors: []*ratelimitv3.RateLimitDescriptor{RequestsDescriptor("free", "k", Limits{}, 1)}})
	if err != nil || resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 1 {
		t.Errorf("after a rejected update: %v, %v", resp, err)
	}
}

func TestMetricsPrometheusText(t *testing.T) {
	m := NewMetrics()
	m.Limited.Inc("requests", "free")
	m.Limited.Inc("requests", "free")
	m.Limited.Inc("tokens", "standard")
	m.LimiterErrors.Inc("free", "denied")
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"# TYPE switchyard_ratelimit_limited_total counter",
		`switchyard_ratelimit_limited_total{type="requests",tier="free"} 2`,
		`switchyard_ratelimit_limited_total{type="tokens",tier="standard"} 1`,
		`switchyard_ratelimit_limiter_errors_total{tier="free",action="denied"} 1`,
		"# TYPE switchyard_ratelimit_charge_errors_total counter",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing %q in:\n%s", line, b.String())
		}
	}
}

// dump renders a RateLimitConfig as an indented tree.
func dump(c *rlsconfv3.RateLimitConfig) string {
	var b strings.Builder
	var walk func(ds []*rlsconfv3.RateLimitDescriptor, depth int)
	walk = func(ds []*rlsconfv3.RateLimitDescriptor, depth int) {
		for _, d := range ds {
			fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), d.GetKey())
			if d.GetValue() != "" {
				fmt.Fprintf(&b, "=%s", d.GetValue())
			}
			if rl := d.GetRateLimit(); rl != nil {
				fmt.Fprintf(&b, ": %d/%s", rl.GetRequestsPerUnit(), rl.GetUnit())
			}
			b.WriteByte('\n')
			walk(d.GetDescriptors(), depth+1)
		}
	}
	fmt.Fprintf(&b, "domain %s\n", c.GetDomain())
	walk(c.GetDescriptors(), 1)
	return b.String()
}
