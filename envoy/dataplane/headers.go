package dataplane

import (
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Pseudo-header names, as Envoy's header map and ext_proc carry them.
const (
	hdrMethod    = ":method"
	hdrPath      = ":path"
	hdrAuthority = ":authority"
	hdrScheme    = ":scheme"
	hdrStatus    = ":status"
)

// headerField is one header entry; keys are lower-case.
type headerField struct{ key, value string }

// headerMap is an ordered, multi-valued header map with lower-case keys and
// pseudo-headers first, the shape of Envoy's HeaderMap. ext_proc sees and
// mutates this map, so repeated headers stay separate entries, as in Envoy.
type headerMap []headerField

func (h headerMap) get(key string) (string, bool) {
	for _, f := range h {
		if f.key == key {
			return f.value, true
		}
	}
	return "", false
}

func (h headerMap) value(key string) string {
	v, _ := h.get(key)
	return v
}

// joined returns every value of key joined by ",", the form Envoy's route
// header matchers compare against.
func (h headerMap) joined(key string) (string, bool) {
	var (
		vals  []string
		found bool
	)
	for _, f := range h {
		if f.key == key {
			vals = append(vals, f.value)
			found = true
		}
	}
	return strings.Join(vals, ","), found
}

func (h *headerMap) add(key, value string) { *h = append(*h, headerField{key, value}) }

// set replaces the first entry of key and drops the others, or appends one.
func (h *headerMap) set(key, value string) {
	out := (*h)[:0]
	done := false
	for _, f := range *h {
		if f.key != key {
			out = append(out, f)
			continue
		}
		if !done {
			out = append(out, headerField{key, value})
			done = true
		}
	}
	if !done {
		out = append(out, headerField{key, value})
	}
	*h = out
}

func (h *headerMap) del(key string) {
	out := (*h)[:0]
	for _, f := range *h {
		if f.key != key {
			out = append(out, f)
		}
	}
	*h = out
}

func (h headerMap) clone() headerMap { return append(headerMap(nil), h...) }

// contentLength is the declared content-length, 0 when absent or invalid.
func (h headerMap) contentLength() int64 {
	n, err := strconv.ParseInt(h.value("content-length"), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// httpHeader converts the map into an http.Header without pseudo-headers and
// without hop-by-hop headers, which never cross the proxy.
func (h headerMap) httpHeader() http.Header {
	out := make(http.Header, len(h))
	h.addTo(out)
	return out
}

// addTo adds the map's headers but pseudo-headers and hop-by-hop headers to
// out, under canonical names. The values of names out does not have yet
// share one block (each slice capped at its length, so that appending to
// one never writes over another).
func (h headerMap) addTo(out http.Header) {
	var block []string
	for _, f := range h {
		if strings.HasPrefix(f.key, ":") || isHopByHop(f.key, f.value) {
			continue
		}
		k := canonicalKey(f.key)
		if cur, ok := out[k]; ok {
			out[k] = append(cur, f.value)
			continue
		}
		if block == nil {
			block = make([]string, 0, len(h))
		}
		block = append(block, f.value)
		n := len(block)
		out[k] = block[n-1 : n : n]
	}
}

// canonicalKeys caches textproto.CanonicalMIMEHeaderKey's answers that
// cost it an allocation: lower-case names outside net/textproto's own table
// of common headers (x-ratelimit-*, x-request-id and the like), which every
// response and upstream request carries. It keeps the first
// maxCanonicalKeys such names and stops growing there: names come from
// clients and upstreams. The map is replaced, never changed, when a name
// is added, so the lookups (a score per request, from every core) take no
// lock.
var canonicalKeys struct {
	mu sync.Mutex // serialises additions
	m  atomic.Pointer[map[string]string]
}

const maxCanonicalKeys = 1024

func canonicalKey(k string) string {
	if m := canonicalKeys.m.Load(); m != nil {
		if c, ok := (*m)[k]; ok {
			return c
		}
	}
	c := textproto.CanonicalMIMEHeaderKey(k)
	if c == k {
		return c // already canonical, or not a valid name: no allocation
	}
	canonicalKeys.mu.Lock()
	defer canonicalKeys.mu.Unlock()
	old := canonicalKeys.m.Load()
	var n int
	if old != nil {
		if c, ok := (*old)[k]; ok {
			return c // added meanwhile
		}
		n = len(*old)
	}
	if n < maxCanonicalKeys {
		next := make(map[string]string, n+1)
		if old != nil {
			maps.Copy(next, *old)
		}
		// A copy: k may share memory with a much larger buffer.
		next[strings.Clone(k)] = c
		canonicalKeys.m.Store(&next)
	}
	return c
}

// appendHTTPHeader appends hdr to h with lower-case keys in a stable
// (sorted) order, so ext_proc sees the same message for the same request.
func (h *headerMap) appendHTTPHeader(hdr http.Header) {
	var arr [32]string // the usual request or response has far fewer names
	keys := arr[:0]
	for k := range hdr {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		lk := lowerKey(k)
		for _, v := range hdr[k] {
			h.add(lk, v)
		}
	}
}

// lowerKeys maps the canonical names of the headers every request and
// response carries to their lower-case form, which strings.ToLower would
// allocate anew for each. It is never written after init.
var lowerKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control", "Connection",
		"Content-Encoding", "Content-Length", "Content-Type", "Date", "Etag", "Expect", "Host",
		"Keep-Alive", "Last-Modified", "Location", "Openai-Organization", "Openai-Processing-Ms",
		"Openai-Project", "Openai-Version", "Origin", "Referer", "Retry-After", "Server",
		"Set-Cookie", "Traceparent", "Tracestate", "Transfer-Encoding", "User-Agent", "Vary",
		"X-Api-Key", "X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id",
		"X-Ratelimit-Limit-Requests", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Requests",
		"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
	} {
		m[k] = strings.ToLower(k)
	}
	return m
}()

func lowerKey(k string) string {
	if lk, ok := lowerKeys[k]; ok {
		return lk
	}
	return strings.ToLower(k)
}

// stripHopByHop removes connection-specific headers, and the headers the
// connection header names, as Envoy's codecs do before any filter runs.
func (h *headerMap) stripHopByHop() {
	var named []string
	for _, f := range *h {
		if f.key == "connection" {
			for _, n := range strings.Split(f.value, ",") {
				if n = strings.ToLower(strings.TrimSpace(n)); n != "" && n != "close" && n != "keep-alive" {
					named = append(named, n)
				}
			}
		}
	}
	out := (*h)[:0]
	for _, f := range *h {
		if isHopByHop(f.key, f.value) || containsString(named, f.key) {
			continue
		}
		out = append(out, f)
	}
	*h = out
}

// isHopByHop reports connection-specific headers. "te: trailers" is the one
// te value Envoy forwards.
func isHopByHop(key, value string) bool {
	switch key {
	case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "http2-settings":
		return true
	case "te":
		return !strings.EqualFold(strings.TrimSpace(value), "trailers")
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// validHeaderName reports whether name is a valid (lower-case) header name or
// a pseudo-header name.
func validHeaderName(name string) bool {
	n := strings.TrimPrefix(name, ":")
	if n == "" {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue rejects the bytes that would split or end a header.
func validHeaderValue(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00")
}
