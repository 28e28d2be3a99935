package keys

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestIssueWithLimitsAndModels(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k, err := s.Issue(ctx, Spec{Name: "big co", Tier: "enterprise", RPM: 1000, TPM: 2_000_000, Models: []string{"a/b", "c/d"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Lookup(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, k) || got.RPM != 1000 || got.TPM != 2_000_000 || len(got.Models) != 2 {
		t.Errorf("Lookup = %+v, want %+v", got, k)
	}
	if !got.AllowsModel("a/b") || got.AllowsModel("x/y") {
		t.Errorf("AllowsModel wrong for %v", got.Models)
	}
	if (Key{}).AllowsModel("anything") != true {
		t.Error("a key without allow-list must allow every model")
	}
	if got.LimitID() != got.ID {
		t.Errorf("LimitID = %q, want the key's own id", got.LimitID())
	}

	for _, sp := range []Spec{
		{Name: "x", Tier: "free", RPM: -1},
		{Name: "x", Tier: "free", TPM: 1 << 33},
		{Name: "x", Tier: "free", Models: []string{""}},
	} {
		if _, _, err := s.Issue(ctx, sp); err == nil {
			t.Errorf("Issue(%+v) succeeded", sp)
		}
	}
}

func TestGet(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k := mustCreate(t, s, "shown", "free")
	for _, arg := range []string{k.ID, secret} {
		got, err := s.Get(ctx, arg)
		if err != nil || !reflect.DeepEqual(got, k) {
			t.Errorf("Get(%.12s) = %+v, %v; want %+v", arg, got, err, k)
		}
	}
	if err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, k.ID); err != nil || !got.Revoked() {
		t.Errorf("Get of revoked key = %+v, %v; want it, revoked", got, err)
	}
	for _, arg := range []string{"key_0000000000000000", "nonsense"} {
		if _, err := s.Get(ctx, arg); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) err = %v, want ErrNotFound", arg, err)
		}
	}
}

func TestRotate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	oldSecret, old, err := s.Issue(ctx, Spec{Name: "svc", Tier: "enterprise", RPM: 5, TPM: 50, Models: []string{"a/b"}})
	if err != nil {
		t.Fatal(err)
	}

	newSecret, k, err := s.Rotate(ctx, old.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if newSecret == oldSecret || k.ID == old.ID {
		t.Fatal("rotate returned the old key")
	}
	if k.Name != old.Name || k.Tier != old.Tier || k.RPM != 5 || k.TPM != 50 || !reflect.DeepEqual(k.Models, old.Models) {
		t.Errorf("new key %+v does not carry the old one's settings %+v", k, old)
	}
	if k.LimitID() != old.ID {
		t.Errorf("new key's LimitID = %q, want the old key's id %q", k.LimitID(), old.ID)
	}
	// Both work during the grace period.
	for _, sec := range []string{oldSecret, newSecret} {
		if _, err := s.Lookup(ctx, sec); err != nil {
			t.Errorf("Lookup during grace: %v", err)
		}
	}
	o, _ := s.Get(ctx, old.ID)
	if o.ReplacedBy != k.ID || o.ExpiresAt.Before(time.Now().Add(59*time.Minute)) || o.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("old key after rotate = %+v", o)
	}
	if _, _, err := s.Rotate(ctx, old.ID, time.Hour); err == nil || !strings.Contains(err.Error(), "already rotated") {
		t.Errorf("second rotate of the old key: err = %v", err)
	}

	// Rotating the new key with no grace ends it at once; the chain keeps
	// its first key's identity.
	third, k3, err := s.Rotate(ctx, newSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, newSecret); !errors.Is(err, ErrNotFound) {
		t.Errorf("key rotated with no grace still works: %v", err)
	}
	if _, err := s.Lookup(ctx, third); err != nil {
		t.Error(err)
	}
	if k3.LimitID() != old.ID {
		t.Errorf("LimitID of the third key = %q, want %q", k3.LimitID(), old.ID)
	}

	if _, _, err := s.Rotate(ctx, old.ID, -time.Second); err == nil {
		t.Error("negative grace accepted")
	}
	if err := s.Revoke(ctx, k3.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rotate(ctx, k3.ID, time.Hour); !errors.Is(err, ErrNotFound) {
		t.Errorf("rotate of a revoked key: err = %v, want ErrNotFound", err)
	}
}

func TestSetTierAndModelsFollowTheChain(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	_, old := mustCreate(t, s, "svc", "free")
	newSecret, k, err := s.Rotate(ctx, old.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.SetTier(ctx, newSecret, "enterprise", 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || got.Tier != "enterprise" || got.RPM != 100 || got.TPM != 1000 {
		t.Errorf("SetTier returned %+v", got)
	}
	o, _ := s.Get(ctx, old.ID)
	if o.Tier != "enterprise" || o.RPM != 100 {
		t.Errorf("the rotated-out key of the chain did not follow: %+v", o)
	}
	got, err = s.SetTier(ctx, old.ID, "standard", 0, 0)
	if err != nil || got.RPM != 0 || got.TPM != 0 || got.Tier != "standard" {
		t.Errorf("SetTier back to standard = %+v, %v", got, err)
	}

	if got, err = s.SetModels(ctx, k.ID, []string{"x/y"}); err != nil || !reflect.DeepEqual(got.Models, []string{"x/y"}) {
		t.Errorf("SetModels = %+v, %v", got, err)
	}
	if got, err = s.SetModels(ctx, k.ID, nil); err != nil || got.Models != nil {
		t.Errorf("SetModels(nil) = %+v, %v", got, err)
	}
	if _, err := s.SetTier(ctx, "key_0000000000000000", "free", 0, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetTier of unknown key: %v", err)
	}
}

// TestVersionCountsEveryWrite checks the change counter moves for every kind
// of write, including writes through another Store on the same directory
// (the CLI while a gateway runs).
func TestVersionCountsEveryWrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	gw, cli := openStore(t, dir), openStore(t, dir)
	v0, err := gw.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, k := mustCreate(t, cli, "a", "free")
	steps := []struct {
		name string
		do   func() error
	}{
		{"set-tier", func() error { _, err := cli.SetTier(ctx, k.ID, "standard", 0, 0); return err }},
		{"rotate", func() error { _, _, err := cli.Rotate(ctx, k.ID, time.Minute); return err }},
		{"revoke", func() error { return cli.Revoke(ctx, k.ID) }},
	}
	prev := v0
	v, _ := gw.Version(ctx)
	if v <= prev {
		t.Fatalf("create did not move the version (%d -> %d)", prev, v)
	}
	prev = v
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		v, err := gw.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v <= prev {
			t.Errorf("%s did not move the version (%d -> %d)", st.name, prev, v)
		}
		prev = v
	}
}

func TestWatchInvalidatesOnRemoteRevoke(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	gw, cli := openStore(t, dir), openStore(t, dir)
	c := NewCache(gw, 10, time.Hour) // the TTL alone would keep the key for an hour
	go c.Watch(ctx, 10*time.Millisecond, func(err error) { t.Errorf("watch: %v", err) })

	secret, k := mustCreate(t, cli, "w", "free")
	// The creation itself is pushed, so a miss cached just before it does
	// not linger either.
	waitUntil(t, time.Second, func() bool { _, err := c.Lookup(ctx, secret); return err == nil })
	if err := cli.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitUntil(t, time.Second, func() bool { _, err := c.Lookup(ctx, secret); return errors.Is(err, ErrNotFound) })
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
