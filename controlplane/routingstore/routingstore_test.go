package routingstore

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/controlplane"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The stores satisfy the control plane's seam.
var (
	_ controlplane.RoutingStore    = (*SQLiteStore)(nil)
	_ controlplane.RoutingStore    = (*PostgresStore)(nil)
	_ controlplane.RoutingNotifier = (*PostgresStore)(nil)
)

func TestSQLiteStore(t *testing.T) {
	dir := t.TempDir()
	runConformance(t, func(t *testing.T) controlplane.RoutingStore {
		s, err := OpenSQLite(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestPostgresStore(t *testing.T) {
	dsn := pgtest.DSN(t)
	runConformance(t, func(t *testing.T) controlplane.RoutingStore {
		s, err := OpenPostgres(context.Background(), dsn, pgdb.Pool{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// runConformance checks a RoutingStore; open returns a new handle on the
// same storage each call (another replica, or the same one restarted).
func runConformance(t *testing.T, open func(t *testing.T) controlplane.RoutingStore) {
	ctx := context.Background()
	a, b := open(t), open(t)

	ov, v, err := a.Load(ctx)
	if err != nil || v != 0 || len(ov.Drained) != 0 || len(ov.Models) != 0 {
		t.Fatalf("empty store: Load = %+v, %d, %v; want the empty overlay at version 0", ov, v, err)
	}

	want := controlplane.RoutingOverlay{
		Drained: []string{"a", "b"},
		Models: map[string]controlplane.ModelRouting{"v/m": {Routing: config.RoutingWeighted,
			FirstByteTimeout: 1500 * time.Millisecond, IdleTimeout: time.Minute,
			Providers: []config.ModelProvider{{Provider: "a", UpstreamModel: "x", Weight: 3, Priority: -1}, {Provider: "b", UpstreamModel: "y", Weight: 1}}}},
	}
	v1, err := a.Save(ctx, 0, want)
	if err != nil || v1 <= 0 {
		t.Fatalf("Save = %d, %v", v1, err)
	}
	t.Run("round trip through another handle and a reopen", func(t *testing.T) {
		for _, s := range []controlplane.RoutingStore{b, open(t)} {
			got, v, err := s.Load(ctx)
			if err != nil || v != v1 || !reflect.DeepEqual(got, want) {
				t.Fatalf("Load = %+v, %d, %v; want %+v, %d", got, v, err, want, v1)
			}
		}
	})
	t.Run("a save on an old version is stale and changes nothing", func(t *testing.T) {
		if _, err := b.Save(ctx, 0, controlplane.RoutingOverlay{}); !errors.Is(err, controlplane.ErrStale) {
			t.Fatalf("Save on version 0 = %v, want ErrStale", err)
		}
		if got, v, err := a.Load(ctx); err != nil || v != v1 || !reflect.DeepEqual(got, want) {
			t.Fatalf("after a stale save: %+v, %d, %v", got, v, err)
		}
	})
	t.Run("clearing", func(t *testing.T) {
		v2, err := b.Save(ctx, v1, controlplane.RoutingOverlay{})
		if err != nil || v2 <= v1 {
			t.Fatalf("Save = %d, %v; want a version after %d", v2, err, v1)
		}
		if got, v, err := a.Load(ctx); err != nil || v != v2 || len(got.Drained) != 0 || len(got.Models) != 0 {
			t.Fatalf("after clearing: %+v, %d, %v", got, v, err)
		}
	})
	t.Run("concurrent read-modify-writes through two handles lose nothing", func(t *testing.T) {
		const n = 16
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			s := a
			if i%2 == 1 {
				s = b
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("p%02d", i)
				for {
					ov, v, err := s.Load(ctx)
					if err != nil {
						errs <- err
						return
					}
					ov.Drained = append(ov.Drained, name)
					if _, err := s.Save(ctx, v, ov); errors.Is(err, controlplane.ErrStale) {
						continue
					} else if err != nil {
						errs <- err
					}
					return
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, _, err := a.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got.Drained)
		if len(got.Drained) != n || len(slices.Compact(slices.Clone(got.Drained))) != n {
			t.Fatalf("drained after %d concurrent additions: %v", n, got.Drained)
		}
	})
	t.Run("notify", func(t *testing.T) {
		n, ok := a.(controlplane.RoutingNotifier)
		if !ok {
			return // polled only
		}
		nctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch := n.Notify(nctx)
		select { // the first wake-up comes once listening
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no wake-up once listening")
		}
		_, v, err := b.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Save(ctx, v, controlplane.RoutingOverlay{Drained: []string{"z"}}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatal("a save through another handle was not announced within 2s")
		}
		cancel()
		for range ch { // closed when ctx ends
		}
	})
}
