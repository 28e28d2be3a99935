package keys

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

const (
	// DefaultCacheSize and DefaultCacheTTL are used by NewCache for a
	// non-positive size or ttl.
	DefaultCacheSize = 10_000
	DefaultCacheTTL  = 30 * time.Second

	// maxNegativeTTL caps how long a miss is remembered. Misses are cached
	// only to absorb repeats (a misconfigured client retrying a bad or
	// revoked key), which a few seconds already does; keeping them short
	// bounds how long a lookup made just before a key was created can
	// keep rejecting it.
	maxNegativeTTL = 5 * time.Second
)

// Source is what a Cache reads: the key store seen from the hot path. It is
// declared here, by its consumer; SQLiteStore implements it, and keystest
// checks any implementation's behaviour.
type Source interface {
	// LookupHash returns the active (neither revoked nor expired) key whose
	// secret hashes to h (HashSecret), or ErrNotFound.
	LookupHash(ctx context.Context, h [sha256.Size]byte) (Key, error)
	// LookupOwner returns the newest active key of the rotation chain whose
	// LimitID is owner, or ErrNotFound.
	LookupOwner(ctx context.Context, owner string) (Key, error)
	// Version is the store's change counter: it must move on every write
	// to any key (create, revoke, rotate, tier or model change), whichever
	// process or gateway makes it, and never move back. Watch polls it.
	Version(ctx context.Context) (int64, error)
}

// Notifier is optionally implemented by a Source that can push changes
// (Postgres LISTEN/NOTIFY, say) instead of being polled alone. Watch then
// reads Version as soon as a notification arrives, besides every poll
// interval: Version stays the truth, so a lost notification costs at most
// one interval.
type Notifier interface {
	// Notify returns a channel that receives a value (coalesced: it may be
	// buffered by one) after changes, until ctx ends.
	Notify(ctx context.Context) <-chan struct{}
}

// Cache answers lookups from a bounded LRU (golang-lru/v2 expirable) in front
// of a Source, caching both hits and misses (misses for a shorter time) so
// that a flood of bad keys cannot reach the database on every request. It is
// keyed by the SHA-256 of the secret, never the plain key, so a heap dump of
// the gateway does not hand out working credentials.
//
// Hits and misses live in separate LRUs so that a flood of distinct bad keys
// can only evict other misses, never the valid keys real clients are using.
//
// Entries are not updated when a key is revoked by another process (such as
// the CLI) until Invalidate is called, which Watch does whenever the store's
// change counter moves: run Watch in every process that serves requests, and
// a revocation anywhere reaches it within one poll interval. The TTL is
// only a backstop. A key past its ExpiresAt (the end of a rotation's grace
// period) is refused from the cache without any push.
//
// A Cache is safe for concurrent use.
type Cache struct {
	store  Source
	ttl    time.Duration
	hits   *expirable.LRU[[sha256.Size]byte, cached]
	misses *expirable.LRU[[sha256.Size]byte, struct{}]
	// owners caches LookupOwner (batch lines and responses call it per
	// request); invalidated with the rest.
	owners *expirable.LRU[string, cached]

	// mu and gen stop a lookup that read the database before an Invalidate
	// from caching that now stale answer after it: fills only happen if gen
	// is unchanged since the read began. The hit path does not take mu.
	mu  sync.Mutex
	gen uint64

	// outageGrace, when positive, keeps cached keys answering while the
	// store cannot be read, for at most this long after the last poll of
	// Watch that succeeded (verified, Unix nanoseconds of its start; 0
	// before the first). See WithOutageGrace.
	outageGrace time.Duration
	verified    atomic.Int64
}

// cached is a key as the cache holds it, with when it was read from the
// store: an entry older than the TTL is asked for again, and answers only
// when the store cannot (within the outage grace).
type cached struct {
	k  Key
	at time.Time
}

// CacheOption configures a Cache.
type CacheOption func(*Cache)

// WithOutageGrace makes the cache keep answering from what it holds for up
// to d after Watch last read the store's change counter, instead of
// dropping everything at the first failed poll: hits, including ones past
// their TTL (kept up to d longer for this), answer while lookups in the
// store fail, so a store that blinks fails no request whose key was
// cached. The price is the bound: a key revoked while this process cannot
// read the store is honoured for at most d after its revocation (the last
// successful poll saw the state before it). Past d, lookups go to the
// store (and fail while it is down). Without it (the default), the first
// failed poll drops the cache.
func WithOutageGrace(d time.Duration) CacheOption {
	return func(c *Cache) { c.outageGrace = max(d, 0) }
}

// fresh reports whether cached entries may answer: always without an
// outage grace or before Watch first succeeds, else while the last
// successful poll is within the grace.
func (c *Cache) fresh() bool {
	if c.outageGrace <= 0 {
		return true
	}
	v := c.verified.Load()
	return v == 0 || time.Since(time.Unix(0, v)) <= c.outageGrace
}

// NewCache returns a Cache of up to size hits and size misses in front of s.
// Hits are kept for ttl, misses for the shorter of ttl/2 and five seconds.
// A non-positive size or ttl selects DefaultCacheSize or DefaultCacheTTL:
// the cache must stay bounded in both, or a revoked key would be accepted
// forever.
//
// Each Cache runs two background goroutines that expire entries; they are
// never stopped, so create one Cache per process, not per request.
func NewCache(s Source, size int, ttl time.Duration, opts ...CacheOption) *Cache {
	if size <= 0 {
		size = DefaultCacheSize
	}
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	negTTL := min(ttl/2, maxNegativeTTL)
	if negTTL <= 0 {
		negTTL = ttl // ttl of 1ns; expirable treats 0 as "never expire"
	}
	c := &Cache{store: s, ttl: ttl}
	for _, o := range opts {
		o(c)
	}
	// Past ttl an entry is only a fallback for the outage grace.
	keep := ttl + c.outageGrace
	c.hits = expirable.NewLRU[[sha256.Size]byte, cached](size, nil, keep)
	c.misses = expirable.NewLRU[[sha256.Size]byte, struct{}](size, nil, negTTL)
	c.owners = expirable.NewLRU[string, cached](size, nil, keep)
	return c
}

// answer reports whether e may answer now: whether it is within its TTL
// (first) or, when the store has just failed, within the outage grace.
func (c *Cache) answer(e cached, storeFailed bool) bool {
	if !c.fresh() {
		return false
	}
	age := time.Since(e.at)
	return age < c.ttl || (storeFailed && c.outageGrace > 0 && age < c.ttl+c.outageGrace)
}

// Lookup returns the active key whose secret is secret, from the cache
// when possible, else from the Source (by the secret's hash). Errors other
// than ErrNotFound (the database being unavailable, say) are not cached.
func (c *Cache) Lookup(ctx context.Context, secret string) (Key, error) {
	if !wellFormedSecret(secret) {
		return Key{}, ErrNotFound
	}
	h := HashSecret(secret)
	e, hit, answered, err := c.fromCache(h)
	switch {
	case answered && err != nil:
		return Key{}, err
	case answered:
		return e.k, nil
	}

	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()

	k, err := c.store.LookupHash(ctx, h)
	switch {
	case err == nil:
		c.fill(gen, func() { c.hits.Add(h, cached{k: k, at: time.Now()}) })
	case errors.Is(err, ErrNotFound):
		c.fill(gen, func() {
			c.hits.Remove(h)
			c.misses.Add(h, struct{}{})
		})
	case hit && c.answer(e, true):
		// The store is unreachable: the entry Watch has kept valid
		// answers, within the outage grace.
		return e.k, nil
	}
	return k, err
}

// Cached is Lookup answered from the cache alone: answered is false when
// Lookup would have to ask the Source. A caller that bounds the Source's
// lookups with a timeout need not make one for a cached key.
func (c *Cache) Cached(secret string) (k Key, answered bool, err error) {
	if !wellFormedSecret(secret) {
		return Key{}, true, ErrNotFound
	}
	e, _, answered, err := c.fromCache(HashSecret(secret))
	if !answered || err != nil {
		return Key{}, answered, err
	}
	return e.k, true, nil
}

// fromCache is Lookup's answer from the cache for the hash h, if the
// cache has one (answered: e.k, or err). e and hit are the cached entry
// when there is one, Lookup's fallback if the Source then fails.
func (c *Cache) fromCache(h [sha256.Size]byte) (e cached, hit, answered bool, err error) {
	e, hit = c.hits.Get(h)
	if hit {
		if e.k.Expired(time.Now()) {
			c.hits.Remove(h)
			return cached{}, false, true, ErrNotFound
		}
		if c.answer(e, false) {
			return e, true, true, nil
		}
	} else if _, ok := c.misses.Get(h); ok {
		return cached{}, false, true, ErrNotFound
	}
	return e, hit, false, nil
}

func (c *Cache) fill(gen uint64, add func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen == gen {
		add()
	}
}

// Invalidate drops every cached hit and miss, so the next lookup of each key
// consults the Source. Call it after revoking a key.
func (c *Cache) Invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.hits.Purge()
	c.misses.Purge()
	c.owners.Purge()
}

// LookupOwner is Source.LookupOwner answered from the cache when possible;
// only found keys are cached.
func (c *Cache) LookupOwner(ctx context.Context, owner string) (Key, error) {
	e, hit := c.owners.Get(owner)
	if hit {
		if e.k.Expired(time.Now()) {
			c.owners.Remove(owner)
			hit = false
		} else if c.answer(e, false) {
			return e.k, nil
		}
	}
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	k, err := c.store.LookupOwner(ctx, owner)
	switch {
	case err == nil:
		c.fill(gen, func() { c.owners.Add(owner, cached{k: k, at: time.Now()}) })
	case errors.Is(err, ErrNotFound):
		c.fill(gen, func() { c.owners.Remove(owner) })
	case hit && c.answer(e, true):
		return e.k, nil
	}
	return k, err
}

// DefaultWatchInterval is how often Watch polls the store's change counter.
// Revocations reach a process within this plus one SQLite read, well inside
// the two seconds the gateway promises.
const DefaultWatchInterval = 250 * time.Millisecond

// pollTimeout bounds one read of the change counter by Watch.
const pollTimeout = 5 * time.Second

// Watch polls the store's change counter every interval (non-positive:
// DefaultWatchInterval) until ctx is done, and invalidates the cache
// whenever the counter moves. A failed poll also invalidates it, unless
// an outage grace is set (WithOutageGrace): a process that cannot see
// changes must not keep answering from what may be a stale view for
// longer than that, so lookups go to the store (and fail there, visibly,
// if it is broken). Each poll is bounded by pollTimeout, so a store that
// hangs counts as failing. onError, if not nil, is told about failed polls.
//
// A Source that is also a Notifier wakes Watch early; the poll stays, as
// the backstop for lost notifications. Polling one integer is a few
// microseconds of SQLite work; SQLite offers no cross-process notification,
// and a counter maintained by triggers cannot be forgotten by any writer.
func (c *Cache) Watch(ctx context.Context, interval time.Duration, onError func(error)) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	var notify <-chan struct{}
	if n, ok := c.store.(Notifier); ok {
		notify = n.Notify(ctx)
	}
	poll := func() (int64, error) {
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		defer cancel()
		v, err := c.store.Version(pctx)
		if err == nil {
			c.verified.Store(start.UnixNano())
		}
		return v, err
	}
	last, err := poll()
	if err != nil && onError != nil {
		onError(err)
	}
	if err == nil {
		// Entries cached before this first read of the version may predate
		// a change it already includes; no later version change would
		// drop them.
		c.Invalidate()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case _, ok := <-notify:
			if !ok {
				notify = nil // closed: polling alone from now on
			}
		}
		v, err := poll()
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			if onError != nil {
				onError(err)
			}
			if c.outageGrace <= 0 {
				c.Invalidate()
			}
		case v != last:
			last = v
			c.Invalidate()
		}
	}
}
