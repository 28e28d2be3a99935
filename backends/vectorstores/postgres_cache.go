package vectorstores

import (
	"container/list"
	"sync"
)

// vecCache is a replica's cache of stores' searchable chunks (sealed text,
// vectors, file names and attributes) for PostgresStore.Scan, keyed by
// store id and version: a write to a store's chunks changes its version,
// so an entry is never served for a version other than the one it was
// read at. Its size is bounded by max bytes over every store, the least
// recently searched store evicted first; a store larger than max is never
// cached. A nil *vecCache caches nothing.
//
// The envelope: an entry costs about chunkOverhead plus the chunk's sealed
// text (its plaintext + 28 bytes) plus 4 × dimensions bytes per chunk, for
// 1536 dimensions and 800-token chunks (~3.2 KB of text) about 10 KB: the
// 256 MiB default holds some 26,000 chunks, a quarter of a store at
// DefaultMaxStoreChunks.
type vecCache struct {
	max int64

	mu   sync.Mutex
	used int64
	lru  *list.List // of *cacheEntry, most recent first
	byID map[string]*list.Element
}

type cacheEntry struct {
	store   string
	version int64
	chunks  []ScannedChunk
	size    int64
}

// chunkOverhead approximates a cached chunk's memory beyond its byte
// slices: the ScannedChunk struct, slice headers and the id strings.
const chunkOverhead = 160

func newVecCache(max int64) *vecCache {
	return &vecCache{max: max, lru: list.New(), byID: map[string]*list.Element{}}
}

func chunkSize(c ScannedChunk) int64 {
	return chunkOverhead + int64(len(c.FileID)+len(c.Filename)+len(c.Attributes)+len(c.Sealed)+len(c.Vector))
}

// get returns store's chunks cached at version.
func (c *vecCache) get(store string, version int64) ([]ScannedChunk, bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[store]
	if !ok {
		return nil, false
	}
	e := el.Value.(*cacheEntry)
	if e.version != version {
		c.remove(el)
		return nil, false
	}
	c.lru.MoveToFront(el)
	return e.chunks, true
}

// drop forgets store (deleted).
func (c *vecCache) drop(store string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[store]; ok {
		c.remove(el)
	}
}

func (c *vecCache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*cacheEntry)
	delete(c.byID, e.store)
	c.used -= e.size
}

// put caches e, evicting the least recently used stores to make room.
func (c *vecCache) put(e *cacheEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byID[e.store]; ok {
		if el.Value.(*cacheEntry).version > e.version {
			return // a newer read won
		}
		c.remove(el)
	}
	for c.used+e.size > c.max && c.lru.Len() > 0 {
		c.remove(c.lru.Back())
	}
	c.byID[e.store] = c.lru.PushFront(e)
	c.used += e.size
}

// cacheFill collects a store's chunks as a scan reads them, giving up once
// they exceed the cache's bound.
type cacheFill struct {
	c       *vecCache
	e       *cacheEntry
	stopped bool
}

func (c *vecCache) filler(store string, version int64) *cacheFill {
	return &cacheFill{c: c, e: &cacheEntry{store: store, version: version}, stopped: c == nil}
}

func (f *cacheFill) add(ch ScannedChunk) {
	if f.stopped {
		return
	}
	f.e.size += chunkSize(ch)
	if f.e.size > f.c.max {
		f.stopped, f.e.chunks = true, nil
		return
	}
	f.e.chunks = append(f.e.chunks, ch)
}

// done caches what was collected, the whole store.
func (f *cacheFill) done() {
	if !f.stopped {
		f.c.put(f.e)
	}
}
