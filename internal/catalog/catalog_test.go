package catalog

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
)

func TestRuntimeRoundTrip(t *testing.T) {
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := FromConfig(cfg).Runtime()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(rt)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := got.Model("demo/chat")
	if !ok {
		t.Fatal("demo/chat missing after round trip")
	}
	if m.ContextWindow != 1000000 || m.Providers[0].UpstreamModel != "fake-chat-1" {
		t.Errorf("model after round trip = %+v", m)
	}
	p, ok := got.Provider("fake-openai")
	if !ok || p.BaseURL != "http://127.0.0.1:8091/v1" || p.APIKeyEnv != "SWITCHYARD_FAKE_OPENAI_KEY" {
		t.Errorf("provider after round trip = %+v", p)
	}
	if got.Tiers["standard"].RPM != 60 {
		t.Errorf("tiers after round trip = %+v", got.Tiers)
	}
	if _, ok := got.Model("demo/none"); ok {
		t.Error("unknown model found")
	}
}

func TestDecodeRejectsOtherRuntime(t *testing.T) {
	rt, _ := FromConfig(&config.Config{}).Runtime()
	rt.Name = "other"
	if _, err := Decode(rt); err == nil {
		t.Fatal("decoded a runtime with the wrong name")
	}
}
