package dataplane

import (
	"errors"
	"io"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// Admission bounds, as Envoy's connection manager request_timeout and its
// overload manager give them: how long a client may take to send a body,
// how many requests one API key may have in flight, and how many bytes of
// request bodies the data plane holds at once.

// Defaults of the admission bounds (Options).
const (
	DefaultRequestBodyTimeout   = 60 * time.Second
	DefaultMaxRequestsPerKey    = 64
	DefaultMaxBodyBytesInFlight = 256 << 20
)

// admission is the DataPlane's shared admission state.
type admission struct {
	bodyTimeout time.Duration // 0: none
	perKey      int           // 0: no cap
	bytesCap    int64         // 0: no cap

	mu   sync.Mutex
	keys map[string]int // requests in flight per key bucket

	inFlight atomic.Int64 // bytes of request bodies held
	// peak is the most bytes held since memory was last handed back.
	peak     atomic.Int64
	lastFree atomic.Int64 // unix nanoseconds
}

func newAdmission(o Options) *admission {
	a := &admission{keys: map[string]int{}}
	switch {
	case o.RequestBodyTimeout == 0:
		a.bodyTimeout = DefaultRequestBodyTimeout
	case o.RequestBodyTimeout > 0:
		a.bodyTimeout = o.RequestBodyTimeout
	}
	switch {
	case o.MaxRequestsPerKey == 0:
		a.perKey = DefaultMaxRequestsPerKey
	case o.MaxRequestsPerKey > 0:
		a.perKey = o.MaxRequestsPerKey
	}
	switch {
	case o.MaxBodyBytesInFlight == 0:
		a.bytesCap = DefaultMaxBodyBytesInFlight
	case o.MaxBodyBytesInFlight > 0:
		a.bytesCap = o.MaxBodyBytesInFlight
	}
	return a
}

// keyBucket is the request's key as extproc authenticated it (its dynamic
// metadata from the request headers phase), per origin: the Responses
// service's calls for a key do not compete with the key's own requests.
// Batch lines are bounded by the batch runner's concurrency instead. ""
// means no cap applies (no key known).
func (s *requestState) keyBucket() string {
	md := s.meta.get(catalog.MetadataNamespace)
	if md == nil {
		return ""
	}
	f := md.GetFields()
	origin := f["origin"].GetStringValue()
	if origin == catalog.OriginBatch {
		return ""
	}
	id := f["key_id"].GetStringValue()
	if id == "" {
		return ""
	}
	return origin + "\x00" + id
}

// admitKey takes one of the key's request slots for the rest of the
// request; false (with the 429 sent) when the key has all of its slots in
// use. A client trickling bodies cannot hold more than the cap's worth of
// connections in the gateway's handlers.
func (s *requestState) admitKey() bool {
	a := s.d.adm
	if a.perKey == 0 {
		return true
	}
	bucket := s.keyBucket()
	if bucket == "" {
		return true
	}
	a.mu.Lock()
	n := a.keys[bucket]
	if n >= a.perKey {
		a.mu.Unlock()
		s.encode(s.localResponse(&apierror.Error{Status: http.StatusTooManyRequests, Type: apierror.TypeRequests,
			Code: "too_many_concurrent_requests", RetryAfter: 1,
			Message: "This API key has too many requests in flight at once. Wait for some to finish, then retry."},
			"too_many_concurrent_requests"))
		return false
	}
	a.keys[bucket] = n + 1
	a.mu.Unlock()
	s.cleanups = append(s.cleanups, func() {
		a.mu.Lock()
		if a.keys[bucket] <= 1 {
			delete(a.keys, bucket)
		} else {
			a.keys[bucket]--
		}
		a.mu.Unlock()
	})
	return true
}

// errOverloaded fails a body read that would take the data plane past its
// bytes-in-flight cap.
var errOverloaded = errors.New("dataplane: request bytes in flight over the cap")

func overloaded() *apierror.Error {
	e := apierror.Server(http.StatusServiceUnavailable, "gateway_overloaded",
		"The gateway is holding too many request bodies at once. Retry shortly.")
	e.RetryAfter = 1
	return e
}

// reserve takes n bytes of the in-flight cap for the request until it
// ends; false when they do not fit.
func (s *requestState) reserve(n int64) bool {
	a := s.d.adm
	if n <= 0 {
		return true
	}
	if a.bytesCap == 0 {
		return true
	}
	for {
		cur := a.inFlight.Load()
		if cur+n > a.bytesCap {
			return false
		}
		if a.inFlight.CompareAndSwap(cur, cur+n) {
			break
		}
	}
	if s.reserved == 0 {
		s.cleanups = append(s.cleanups, s.releaseBytes)
	}
	s.reserved += n
	if cur := a.inFlight.Load(); cur > a.peak.Load() {
		a.peak.Store(cur)
	}
	return true
}

// releaseBytes gives the request's reservation back. After a burst (the
// cap's quarter held at once, then nothing), the freed heap is returned to
// the operating system, at most every 10 s, rather than kept by the
// runtime for the next burst.
func (s *requestState) releaseBytes() {
	a := s.d.adm
	if s.reserved == 0 || a.bytesCap == 0 {
		return
	}
	left := a.inFlight.Add(-s.reserved)
	s.reserved = 0
	now := time.Now().UnixNano()
	if left == 0 && a.peak.Load() >= a.bytesCap/4 && now-a.lastFree.Load() > int64(10*time.Second) {
		a.lastFree.Store(now)
		a.peak.Store(0)
		go debug.FreeOSMemory()
	}
}

// readBody reads a request body the data plane must hold whole (for
// ext_proc, for retries), within limit, holding its bytes against the
// in-flight cap: a declared length up front, before any of it is read, a
// chunked body as it arrives. ok is false when the cap is reached
// (nothing more is read then).
func (s *requestState) readBody(r io.Reader, limit, declared int64) (buf []byte, over bool, err error) {
	if declared > 0 {
		if !s.reserve(min(declared, limit+1)) {
			return nil, false, errOverloaded
		}
		return readUpTo(r, limit, declared)
	}
	return readUpTo(&reservingReader{r: r, s: s}, limit, declared)
}

// reservingReader reserves what it reads.
type reservingReader struct {
	r io.Reader
	s *requestState
}

func (rr *reservingReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	if n > 0 && !rr.s.reserve(int64(n)) {
		return 0, errOverloaded
	}
	return n, err
}
