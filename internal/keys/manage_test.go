package keys

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestWatchInvalidatesOnRemoteRevoke(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	gw, cli := openStore(t, dir), openStore(t, dir)
	c := NewCache(gw, 10, time.Hour) // the TTL alone would keep the key for an hour
	// The waits below are far under the TTL, so passing proves the watch;
	// they are generous because -race on a loaded 2-core machine once took
	// over a second. The 2 s fleet bound is asserted by the fleet tests.
	const within = 10 * time.Second
	go c.Watch(ctx, 10*time.Millisecond, func(err error) { t.Errorf("watch: %v", err) })

	secret, k := mustCreate(t, cli, "w", "free")
	// The creation itself is pushed, so a miss cached just before it does
	// not linger either.
	waitUntil(t, within, func() bool { _, err := c.Lookup(ctx, secret); return err == nil })
	if err := cli.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitUntil(t, within, func() bool { _, err := c.Lookup(ctx, secret); return errors.Is(err, ErrNotFound) })
	t.Logf("revocation seen after %v", time.Since(start))
}

func TestCacheRefusesExpiredKey(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	c := NewCache(s, 10, time.Hour)
	secret, k := mustCreate(t, s, "e", "free")
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rotate(ctx, k.ID, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// No Watch and no Invalidate: the cached entry predates the rotation, so
	// it alone cannot know about the grace period; a fresh lookup does.
	c.Invalidate()
	if got, err := c.Lookup(ctx, secret); err != nil || got.ExpiresAt.IsZero() {
		t.Fatalf("Lookup in grace = %+v, %v", got, err)
	}
	time.Sleep(60 * time.Millisecond)
	if _, err := c.Lookup(ctx, secret); !errors.Is(err, ErrNotFound) {
		t.Errorf("cached key past its grace period: err = %v, want ErrNotFound", err)
	}
}

func waitUntil(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestLookupOwner(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	c := NewCache(s, 10, time.Minute)
	_, first := mustCreate(t, s, "a", "free")
	_, other := mustCreate(t, s, "b", "free")

	got, err := c.LookupOwner(ctx, first.ID)
	if err != nil || got.ID != first.ID {
		t.Fatalf("LookupOwner(first) = %+v, %v", got, err)
	}
	// After a rotation the owner is still the first key's id, and the
	// newest key of the chain answers.
	_, rotated, err := s.Rotate(ctx, first.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c.Invalidate()
	if got, err = c.LookupOwner(ctx, first.ID); err != nil || got.ID != rotated.ID || got.LimitID() != first.ID {
		t.Fatalf("after rotate: %+v, %v; want %s", got, err, rotated.ID)
	}
	// The second key's id is not an owner of the first chain.
	if got, err = c.LookupOwner(ctx, other.ID); err != nil || got.ID != other.ID {
		t.Fatalf("other: %+v, %v", got, err)
	}
	// Revoking every key of the chain ends the owner.
	for _, id := range []string{first.ID, rotated.ID} {
		if err := s.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	c.Invalidate()
	if _, err := c.LookupOwner(ctx, first.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked owner: err = %v, want ErrNotFound", err)
	}
	if _, err := c.LookupOwner(ctx, ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty owner: err = %v", err)
	}
}

func TestKeyHelpers(t *testing.T) {
	if !(Key{}).AllowsModel("anything") {
		t.Error("a key without allow-list must allow every model")
	}
	k := Key{ID: "key_1", Models: []string{"a/b"}}
	if !k.AllowsModel("a/b") || k.AllowsModel("x/y") {
		t.Errorf("AllowsModel wrong for %v", k.Models)
	}
	if k.LimitID() != "key_1" {
		t.Errorf("LimitID = %q, want the key's own id", k.LimitID())
	}
	if k.Lineage = "key_0"; k.LimitID() != "key_0" {
		t.Errorf("LimitID = %q, want the chain's first id", k.LimitID())
	}
}

// notifyingStore is a SQLiteStore that also pushes changes, as a store with
// LISTEN/NOTIFY would: the test sends on ch after a write.
type notifyingStore struct {
	*SQLiteStore
	ch   chan struct{}
	read chan struct{} // told after every Version read
}

func (n notifyingStore) Notify(ctx context.Context) <-chan struct{} { return n.ch }

func (n notifyingStore) Version(ctx context.Context) (int64, error) {
	v, err := n.SQLiteStore.Version(ctx)
	select {
	case n.read <- struct{}{}:
	default:
	}
	return v, err
}

// TestWatchWokenByNotifier checks a Notifier's push reaches the cache
// without waiting for the poll (an hour here).
func TestWatchWokenByNotifier(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	gw := notifyingStore{SQLiteStore: openStore(t, dir), ch: make(chan struct{}, 1), read: make(chan struct{}, 1)}
	cli := openStore(t, dir)
	secret, k := mustCreate(t, cli, "n", "free")
	c := NewCache(gw, 10, time.Hour)
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	go c.Watch(ctx, time.Hour, func(err error) { t.Errorf("watch: %v", err) })
	<-gw.read // Watch has its starting version
	if err := cli.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	gw.ch <- struct{}{}
	select {
	case <-gw.read: // the notification made Watch read the version again
	case <-time.After(5 * time.Second):
		t.Fatal("the notification did not wake Watch")
	}
	waitUntil(t, 2*time.Second, func() bool {
		_, err := c.Lookup(ctx, secret)
		return errors.Is(err, ErrNotFound)
	})
}

func TestBudget(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k, err := s.Issue(ctx, Spec{Name: "capped", Tier: "free", MonthlyBudget: 50_000_000, BudgetAlertRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) || got.MonthlyBudget != 50_000_000 || got.AlertRatio() != 0.5 {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, k)
	}
	// A rotation keeps the budget; SetBudget changes the whole chain.
	_, next, err := s.Rotate(ctx, k.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if next.MonthlyBudget != 50_000_000 || next.BudgetAlertRatio != 0.5 {
		t.Fatalf("rotated key %+v lost its budget", next)
	}
	if _, err := s.SetBudget(ctx, next.ID, 7, 0); err != nil {
		t.Fatal(err)
	}
	old, err := s.Get(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if old.MonthlyBudget != 7 || old.AlertRatio() != DefaultBudgetAlertRatio {
		t.Fatalf("the old key of the chain: budget %d ratio %v, want 7 and the default", old.MonthlyBudget, old.AlertRatio())
	}
	if got, err := s.SetBudget(ctx, k.ID, 0, 0); err != nil || got.MonthlyBudget != 0 {
		t.Fatalf("removing the budget: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		budget int64
		ratio  float64
	}{{-1, 0}, {MaxMonthlyBudget + 1, 0}, {1, 1.5}, {1, -0.1}} {
		if _, err := s.SetBudget(ctx, k.ID, tc.budget, tc.ratio); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetBudget(%d, %v): %v, want ErrInvalid", tc.budget, tc.ratio, err)
		}
		if _, _, err := s.Issue(ctx, Spec{Name: "x", Tier: "free", MonthlyBudget: tc.budget, BudgetAlertRatio: tc.ratio}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Issue with budget %d ratio %v: %v, want ErrInvalid", tc.budget, tc.ratio, err)
		}
	}
}

// TestWatchDropsWhatWasCachedBeforeIt: a key cached, then revoked, before
// Watch's first read of the version is refused once Watch has started: the
// first version already includes the revocation, so no later change would
// drop the entry, and the TTL alone would keep it for an hour.
func TestWatchDropsWhatWasCachedBeforeIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	gw, cli := openStore(t, dir), openStore(t, dir)
	c := NewCache(gw, 10, time.Hour)
	secret, k := mustCreate(t, cli, "early", "free")
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := cli.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	go c.Watch(ctx, time.Hour, func(err error) { t.Errorf("watch: %v", err) })
	waitUntil(t, 10*time.Second, func() bool { _, err := c.Lookup(ctx, secret); return errors.Is(err, ErrNotFound) })
}
