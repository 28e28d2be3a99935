package fake

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
)

// Options configures a fake upstream.
type Options struct {
	// APIKey, if set, must be presented as "Authorization: Bearer <APIKey>";
	// otherwise the fake answers 401 invalid_api_key.
	APIKey string
	// ServiceTime is a fixed delay before the first byte of every response,
	// standing in for model latency in benchmarks.
	ServiceTime time.Duration
	// ChunkDelay is the pause between streamed events.
	ChunkDelay time.Duration
	// Fault is applied to every request; the zero value injects nothing.
	// Each x-fake-* request header overrides the matching field.
	Fault Fault
	// PromptCache models the vendor's prompt caching (OpenAI and Anthropic
	// fakes; see the package documentation). The zero value leaves it off,
	// and replies as they always were.
	PromptCache CacheOptions
}

// CacheOptions configures a fake's prompt cache.
type CacheOptions struct {
	// Enabled turns the cache on.
	Enabled bool
	// MinTokens is the shortest prefix cached, in the fake's tokens
	// (words); 0 means 1024, as OpenAI and most Anthropic models.
	MinTokens int
	// Entries bounds the prefixes remembered (least recently used go
	// first); 0 means 4096.
	Entries int
	// CachedServiceTime is the delay before the first byte of a reply
	// whose whole prompt was cached, instead of ServiceTime: a partly
	// cached prompt waits ServiceTime moved towards it in proportion to
	// the cached share of its tokens (prefill dominates time to first
	// byte). Zero answers a fully cached prompt at once. Fault delays come
	// on top, unchanged.
	CachedServiceTime time.Duration
}

// Fault describes an injected failure.
type Fault struct {
	// Status, if non-zero, is answered (400-599) with an OpenAI error body
	// whose code is "fake_fault".
	Status int
	// Delay is added to ServiceTime before the first byte.
	Delay time.Duration
	// CutAfterChunks, if positive, aborts a stream after that many events.
	CutAfterChunks int
	// StallAfterChunks, if positive, stops a stream after that many events
	// and holds it open, sending nothing more, until the client goes away:
	// an upstream that hangs mid-stream.
	StallAfterChunks int
}

// Request headers that inject faults and shape replies. They take precedence
// over Options.Fault.
const (
	// HeaderStatus makes the fake answer with this status (400-599) and an
	// OpenAI error body with code "fake_fault" (type server_error for 5xx,
	// requests for 429, invalid_request_error otherwise).
	HeaderStatus = "x-fake-status"
	// HeaderRetryAfter adds a retry-after header (seconds) to an injected
	// error. It has no effect without a status fault.
	HeaderRetryAfter = "x-fake-retry-after"
	// HeaderDelayMS delays the first byte of the response by this many
	// milliseconds, on top of Options.ServiceTime. The wait ends early if the
	// client goes away.
	HeaderDelayMS = "x-fake-delay-ms"
	// HeaderCutAfter aborts a stream after this many events (chunks, counting
	// [DONE]): the connection is dropped without a clean end, so the client
	// sees a truncated stream. 0 cuts right after the response headers. A
	// value at or above the stream's length leaves it intact. Ignored for
	// non-streaming requests.
	HeaderCutAfter = "x-fake-cut-after"
	// HeaderStallAfter stops a stream after this many events (counted as
	// for HeaderCutAfter; 0 stalls right after the response headers) and
	// holds the connection open, sending nothing more, until the client
	// goes away. Ignored for non-streaming requests.
	HeaderStallAfter = "x-fake-stall-after"
	// HeaderChunks sets the text reply to exactly this many words, padding
	// with deterministic filler or truncating, so a stream has exactly this
	// many content chunks per choice (before stop and max_tokens apply).
	// It does not affect tool calls.
	HeaderChunks = "x-fake-chunks"
)

// fault is the effective fault for one request: Options.Fault overlaid with
// the request headers.
type fault struct {
	status     int
	retryAfter int
	delay      time.Duration
	cutAfter   int // -1: never
	stallAfter int // -1: never
	chunks     int // -1: natural length
}

// parseFault merges opts with the x-fake-* headers of r. A malformed header is
// a 400 naming it, so a typo in a test fails loudly instead of silently
// injecting nothing.
func parseFault(opts Fault, r *http.Request) (fault, *apierror.Error) {
	f := fault{status: opts.Status, delay: opts.Delay, cutAfter: -1, stallAfter: -1, chunks: -1}
	if opts.CutAfterChunks > 0 {
		f.cutAfter = opts.CutAfterChunks
	}
	if opts.StallAfterChunks > 0 {
		f.stallAfter = opts.StallAfterChunks
	}
	var err *apierror.Error
	header := func(name string, min, max int, set func(int)) {
		s := r.Header.Get(name)
		if s == "" || err != nil {
			return
		}
		n, perr := strconv.Atoi(s)
		if perr != nil || n < min || n > max {
			err = apierror.InvalidParam(name, "Invalid %s header %q: expected an integer from %d to %d.", name, s, min, max)
			return
		}
		set(n)
	}
	header(HeaderStatus, 400, 599, func(n int) { f.status = n })
	header(HeaderRetryAfter, 0, 1<<31-1, func(n int) { f.retryAfter = n })
	header(HeaderDelayMS, 0, 1<<31-1, func(n int) { f.delay = time.Duration(n) * time.Millisecond })
	header(HeaderCutAfter, 0, 1<<31-1, func(n int) { f.cutAfter = n })
	header(HeaderStallAfter, 0, 1<<31-1, func(n int) { f.stallAfter = n })
	header(HeaderChunks, 0, 1<<20, func(n int) { f.chunks = n })
	return f, err
}

// interrupt applies the stream faults before the event numbered sent (from
// 0): a cut aborts the handler, so net/http drops the connection without a
// clean end (everything before it is flushed already); a stall waits for
// the client to go away and reports true, meaning send nothing more.
func (f fault) interrupt(ctx context.Context, sent int) (stop bool) {
	switch sent {
	case f.cutAfter:
		panic(http.ErrAbortHandler)
	case f.stallAfter:
		<-ctx.Done()
		return true
	}
	return false
}

// statusError is the error body for an injected status.
func (f fault) statusError() *apierror.Error {
	e := &apierror.Error{
		Status:     f.status,
		Code:       "fake_fault",
		Message:    "Injected fault: status " + strconv.Itoa(f.status) + ".",
		RetryAfter: f.retryAfter,
	}
	switch {
	case f.status >= 500:
		e.Type = apierror.TypeServer
	case f.status == http.StatusTooManyRequests:
		e.Type = apierror.TypeRequests
	}
	return e
}

// sleep waits for d or until ctx is done, reporting ctx's error in that case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
