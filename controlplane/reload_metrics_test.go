package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// TestReloadMetrics checks the configuration change counters: file reloads
// that apply, that do not parse and that do not validate, and admin API
// changes that apply and that are refused.
func TestReloadMetrics(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "switchyard.yaml")
	srv := New(nil)
	if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(twoRegions, "{provider: a, upstream_model: x, priority: 1}", "{provider: a, upstream_model: x, priority: -1}", 1)
	for i, c := range []struct {
		content string
		applied bool
	}{
		{moved, true},
		{moved + "\n  - this is: [not valid\n", false},
		{strings.Replace(moved, "{provider: b, upstream_model: y}", "{provider: nobody, upstream_model: y}", 1), false},
	} {
		if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := srv.pollFile(ctx, path); got != c.applied {
			t.Fatalf("file %d applied = %v, want %v", i, got, c.applied)
		}
	}
	if _, err := srv.Modify(ctx, "test", func(cfg *config.Config) error {
		cfg.Models[0].Providers[0].Provider = "nobody"
		return nil
	}); err == nil {
		t.Fatal("an invalid change was applied")
	}
	if _, err := srv.Drain(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	var b strings.Builder
	if err := srv.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"# TYPE switchyard_config_reloads_total counter",
		`switchyard_config_reloads_total{source="file",result="success"} 2`, // the start and one reload
		`switchyard_config_reloads_total{source="file",result="failure"} 2`,
		`switchyard_config_reloads_total{source="api",result="success"} 1`,
		`switchyard_config_reloads_total{source="api",result="failure"} 1`,
		"switchyard_config_version 3",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing %q in\n%s", line, b.String())
		}
	}
	if strings.Contains(b.String(), "switchyard_config_last_reload_success_timestamp_seconds 0\n") {
		t.Error("no time of the last successful change")
	}
}
