package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
)

// onlyAB is twoRegions without provider c and model m2.
const onlyAB = `
region: us
listeners: [{name: public, address: 127.0.0.1:8080}]
providers:
  - {name: a, kind: openai, base_url: http://127.0.0.1:9001/v1, region: us}
  - {name: b, kind: openai, base_url: http://127.0.0.1:9002/v1, region: asia}
models:
  - id: v/m1
    providers:
      - {provider: a, upstream_model: x, priority: 1}
      - {provider: b, upstream_model: x, priority: 0}
`

func modelProviders(cfg *config.Config, model string) []string {
	for _, m := range cfg.Models {
		if m.ID == model {
			var out []string
			for _, mp := range m.Providers {
				out = append(out, mp.Provider)
			}
			return out
		}
	}
	return nil
}

// TestOverlayAcrossReloads: the overlay stays on top of every reloaded
// file; entries naming a provider or model the file no longer has are
// logged and skipped, not fatal, and apply again when the file has them.
func TestOverlayAcrossReloads(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	srv := New(slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Drain(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(*config.Config){
		func(c *config.Config) {
			c.Models[0].Providers = []config.ModelProvider{{Provider: "a", UpstreamModel: "x"}, {Provider: "c", UpstreamModel: "x"}}
		},
		func(c *config.Config) { c.Models[1].Routing = config.RoutingWeighted },
	} {
		if _, err := srv.Modify(ctx, "test", func(c *config.Config) error { change(c); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		file        string
		wantM1      []string
		wantDrained []string
		wantSkipped int
	}{
		{onlyAB, []string{"a", "b"}, nil, 3}, // c's drain, m1's override naming c, m2's override
		{twoRegions, []string{"a"}, []string{"c"}, 0},
	}
	for i, st := range steps {
		logs.Reset()
		if _, err := srv.Update(ctx, parse(t, st.file)); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		if got := modelProviders(srv.Config(), "v/m1"); !slices.Equal(got, st.wantM1) {
			t.Errorf("reload %d: m1 served by %v, want %v", i, got, st.wantM1)
		}
		if _, drained := srv.BaseConfig(); !slices.Equal(drained, st.wantDrained) {
			t.Errorf("reload %d: drained %v, want %v", i, drained, st.wantDrained)
		}
		if got := strings.Count(logs.String(), "routing overlay entry skipped"); got != st.wantSkipped {
			t.Errorf("reload %d: %d entries skipped, want %d; logs:\n%s", i, got, st.wantSkipped, logs.String())
		}
	}
	if ov, _ := srv.Overlay(); len(ov.Models) != 2 || !slices.Equal(ov.Drained, []string{"c"}) {
		t.Errorf("the overlay lost entries across reloads: %+v", ov)
	}
	// Entries a file made stale do not block other changes.
	if _, err := srv.Update(ctx, parse(t, onlyAB)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Modify(ctx, "weighted m1", func(c *config.Config) error { c.Models[0].Routing = config.RoutingWeighted; return nil }); err != nil {
		t.Fatalf("a change while the overlay has entries the file made stale: %v", err)
	}
	if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ClearOverrides(ctx, "v/m1"); err != nil {
		t.Fatal(err)
	}
	if got := modelProviders(srv.Config(), "v/m1"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("after clearing m1's override: %v, want the file's a, b without the drained c", got)
	}
}

// TestOverlayConcurrentReplicas: two servers on one store, each changing
// its own model many times at once: no change is lost, and after reading
// the store both serve the last of each.
func TestOverlayConcurrentReplicas(t *testing.T) {
	ctx := context.Background()
	store := &memoryRoutingStore{}
	var replicas [2]*Server
	for i := range replicas {
		replicas[i] = New(nil)
		replicas[i].SetRoutingStore(store)
		if _, err := replicas[i].Update(ctx, parse(t, twoRegions)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, srv := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 1; j <= n; j++ {
				_, err := srv.Modify(ctx, "test", func(c *config.Config) error {
					c.Models[i].FirstByteTimeout = time.Duration(j) * time.Second
					return nil
				})
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ov, v, _ := store.Load(ctx)
	if v != 2*n {
		t.Errorf("store at version %d after %d changes", v, 2*n)
	}
	for _, srv := range replicas {
		srv.applyIfNewer(ctx, ov, v)
		var got []string
		for _, m := range srv.Config().Models {
			got = append(got, fmt.Sprint(m.ID, " ", m.FirstByteTimeout))
		}
		if want := []string{"v/m1 20s", "v/m2 20s"}; !slices.Equal(got, want) {
			t.Errorf("served %v, want %v", got, want)
		}
	}
}

// TestWatchRoutingStorePolls: without notifications, a replica following
// the store by polling serves another replica's drain at its next poll.
func TestWatchRoutingStorePolls(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := &memoryRoutingStore{}
	a, b := New(nil), New(nil)
	for _, srv := range []*Server{a, b} {
		srv.SetRoutingStore(store)
		if _, err := srv.Update(ctx, parse(t, twoRegions)); err != nil {
			t.Fatal(err)
		}
	}
	go b.WatchRoutingStore(ctx, 20*time.Millisecond)
	if _, err := a.Drain(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !slices.Equal(modelProviders(b.Config(), "v/m1"), []string{"a", "b"}) {
		if time.Now().After(deadline) {
			t.Fatalf("replica b serves m1 with %v 2s after the drain, want a, b", modelProviders(b.Config(), "v/m1"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
