package keys

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// blinkingSource is a Source that can be made unreachable, as a database
// that blinks; failures counts the Version reads that failed meanwhile.
type blinkingSource struct {
	Source
	down     atomic.Bool
	failures chan struct{}
	polls    atomic.Int32 // successful Version reads
}

var errDown = errors.New("database unreachable")

func (b *blinkingSource) LookupHash(ctx context.Context, h [sha256.Size]byte) (Key, error) {
	if b.down.Load() {
		return Key{}, errDown
	}
	return b.Source.LookupHash(ctx, h)
}

func (b *blinkingSource) Version(ctx context.Context) (int64, error) {
	if b.down.Load() {
		select {
		case b.failures <- struct{}{}:
		default:
		}
		return 0, errDown
	}
	defer b.polls.Add(1)
	return b.Source.Version(ctx)
}

// TestCacheOutageGrace: with an outage grace, a cached key keeps working
// while the store cannot be read, past its TTL too, until the grace after
// the last successful poll ends; then lookups go to the store and fail.
// Without one, the first failed poll drops the cache.
func TestCacheOutageGrace(t *testing.T) {
	for _, tt := range []struct {
		name  string
		grace time.Duration
	}{
		{"no grace", 0},
		{"grace", 300 * time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := openStore(t, t.TempDir())
			secret, _ := mustCreate(t, s, "cached", "free")
			src := &blinkingSource{Source: s, failures: make(chan struct{}, 1)}
			const ttl = 100 * time.Millisecond
			c := NewCache(src, 10, ttl, WithOutageGrace(tt.grace))
			go c.Watch(ctx, 10*time.Millisecond, nil)
			// Cache the key once Watch has handled its first poll (which
			// drops what was cached before it): its second has begun.
			for src.polls.Load() < 2 {
				time.Sleep(time.Millisecond)
			}
			if _, err := c.Lookup(ctx, secret); err != nil {
				t.Fatal(err)
			}
			filled := time.Now()
			// Wait for a successful poll, then take the store down and
			// wait for Watch to see it fail twice (the second failure
			// comes after the first one was handled).
			for c.verified.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			src.down.Store(true)
			downAt := time.Now()
			for range 2 {
				select {
				case <-src.failures:
				case <-time.After(5 * time.Second):
					t.Fatal("Watch did not poll the store")
				}
			}
			_, err := c.Lookup(ctx, secret)
			if tt.grace == 0 {
				if !errors.Is(err, errDown) {
					t.Fatalf("Lookup after a failed poll without grace: err = %v, want the store's error", err)
				}
				return
			}
			if time.Since(downAt) < tt.grace && err != nil {
				t.Fatalf("Lookup of a cached key within the grace: %v", err)
			}
			// Its TTL ends during the outage: it still answers.
			time.Sleep(time.Until(filled.Add(ttl + 10*time.Millisecond)))
			if _, err := c.Lookup(ctx, secret); time.Since(downAt) < tt.grace && err != nil {
				t.Fatalf("Lookup of a cached key past its TTL within the grace: %v", err)
			}
			// Past the grace the cache stops answering: bounded wait.
			deadline := downAt.Add(tt.grace + 2*time.Second)
			for {
				_, err := c.Lookup(ctx, secret)
				if errors.Is(err, errDown) {
					if since := time.Since(downAt); since < tt.grace-20*time.Millisecond {
						t.Fatalf("the cache stopped answering %s into a %s grace", since, tt.grace)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the cache kept answering past the outage grace")
				}
				time.Sleep(5 * time.Millisecond)
			}
			// Back up: the key answers again.
			src.down.Store(false)
			if _, err := c.Lookup(ctx, secret); err != nil {
				t.Fatalf("Lookup once the store is back: %v", err)
			}
		})
	}
}
