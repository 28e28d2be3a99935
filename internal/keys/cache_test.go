package keys

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
)

// The cache tests close the Store to prove an answer came from the cache: a
// lookup that reaches a closed Store fails with an error other than
// ErrNotFound.

func TestCacheHit(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k := mustCreate(t, s, "cached", "free")
	c := NewCache(s, 10, time.Minute)

	if got, err := c.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("first Lookup = %+v, %v; want %+v", got, err, k)
	}
	s.Close()
	if got, err := c.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("cached Lookup with the store closed = %+v, %v; want %+v", got, err, k)
	}
}

func TestCacheMiss(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(s, 10, time.Minute)

	tests := []struct {
		desc, secret string
	}{
		{"unknown", unknown},
		{"malformed", "Bearer undefined"},
		{"empty", ""},
	}
	for _, tt := range tests {
		if _, err := c.Lookup(ctx, tt.secret); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: Lookup err = %v, want ErrNotFound", tt.desc, err)
		}
	}
	s.Close()
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			// Unknown keys come from the negative cache; malformed ones
			// never reach the database at all.
			if _, err := c.Lookup(ctx, tt.secret); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup with the store closed: err = %v, want ErrNotFound", err)
			}
		})
	}
}

func TestCacheErrorsNotCached(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(s, 10, time.Minute)
	s.Close()
	for i := range 2 {
		_, err := c.Lookup(ctx, unknown)
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Fatalf("Lookup %d on a closed store: err = %v, want a database error", i, err)
		}
	}
}

func TestCacheMissesExpireSooner(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps")
	}
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, _ := mustCreate(t, s, "cached", "free")
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(s, 10, 2*time.Second) // misses are kept for 1s

	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, unknown); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	s.Close()
	time.Sleep(1300 * time.Millisecond)

	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Errorf("hit expired before its TTL: %v", err)
	}
	if _, err := c.Lookup(ctx, unknown); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("miss still cached after the negative TTL: err = %v", err)
	}
}

func TestCacheInvalidate(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k := mustCreate(t, s, "to revoke", "free")
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(s, 10, time.Minute)

	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, unknown); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	// Documented staleness: the cache does not know about the revocation yet.
	if _, err := c.Lookup(ctx, secret); err != nil {
		t.Fatalf("cached Lookup before Invalidate: %v", err)
	}

	c.Invalidate()
	if _, err := c.Lookup(ctx, secret); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup of revoked key after Invalidate: err = %v, want ErrNotFound", err)
	}

	// Misses are dropped too: with the store closed, the unknown key must
	// go to the database (and fail) rather than be answered from the cache.
	c.Invalidate()
	s.Close()
	if _, err := c.Lookup(ctx, unknown); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("miss survived Invalidate: err = %v", err)
	}
}

func TestCacheBounded(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	const size = 4
	c := NewCache(s, size, time.Minute)
	var secrets []string
	for range 2 * size {
		secret, _ := mustCreate(t, s, "k", "free")
		secrets = append(secrets, secret)
		if _, err := c.Lookup(ctx, secret); err != nil {
			t.Fatal(err)
		}
		unknown, err := newSecret()
		if err != nil {
			t.Fatal(err)
		}
		c.Lookup(ctx, unknown)
	}
	if n := c.hits.Len(); n != size {
		t.Errorf("hits.Len() = %d, want %d", n, size)
	}
	if n := c.misses.Len(); n != size {
		t.Errorf("misses.Len() = %d, want %d", n, size)
	}
	// A flood of misses must not have evicted the most recent hits.
	s.Close()
	for _, secret := range secrets[len(secrets)-size:] {
		if _, err := c.Lookup(ctx, secret); err != nil {
			t.Errorf("recent hit evicted: %v", err)
		}
	}
}

// TestCacheConcurrent is mainly for the race detector.
func TestCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	secret, k := mustCreate(t, s, "shared", "free")
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	c := NewCache(s, 100, time.Minute)

	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				if i == 0 && j%20 == 0 {
					c.Invalidate()
				}
				if got, err := c.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
					t.Errorf("Lookup = %+v, %v", got, err)
					return
				}
				if _, err := c.Lookup(ctx, unknown); !errors.Is(err, ErrNotFound) {
					t.Errorf("Lookup of unknown key: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkCacheLookup(b *testing.B) {
	s := openStore(b, b.TempDir())
	secret, _ := mustCreate(b, s, "bench", "free")
	c := NewCache(s, 1000, time.Minute)
	ctx := context.Background()
	if _, err := c.Lookup(ctx, secret); err != nil { // warm
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Lookup(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
}
