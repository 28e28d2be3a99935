package fake

// Prompt caching, as the vendors do it (see the package documentation):
// each fake keeps a bounded LRU of the prompt prefixes it has served, and
// reports and answers faster for the part of a prompt it has seen.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/maphash"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/tidwall/gjson"
)

// Defaults of CacheOptions.
const (
	defaultCacheMinTokens = 1024
	defaultCacheEntries   = 4096
	// anthropicLookback is how many blocks before a breakpoint Anthropic
	// looks for an earlier cached prefix.
	anthropicLookback = 20
)

// promptCache is one fake's cache of prompt prefixes, by hash.
type promptCache struct {
	opts CacheOptions
	seed maphash.Seed
	lru  *lru.Cache[uint64, struct{}]
}

// newPromptCache returns the cache opts describe, or nil when they leave
// caching off.
func newPromptCache(opts CacheOptions) *promptCache {
	if !opts.Enabled {
		return nil
	}
	if opts.MinTokens <= 0 {
		opts.MinTokens = defaultCacheMinTokens
	}
	if opts.Entries <= 0 {
		opts.Entries = defaultCacheEntries
	}
	l, err := lru.New[uint64, struct{}](opts.Entries)
	if err != nil { // only for a non-positive size
		panic(err)
	}
	return &promptCache{opts: opts, seed: maphash.MakeSeed(), lru: l}
}

// cachePoint is a prefix boundary of a prompt: the hash of everything up
// to it, the tokens up to it, and whether the request marks it as a
// breakpoint (Anthropic's cache_control).
type cachePoint struct {
	hash       uint64
	tokens     int
	breakpoint bool
}

// chain extends a prefix hash by one piece.
func (c *promptCache) chain(prev uint64, parts ...[]byte) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], prev)
	_, _ = h.Write(b[:])
	for _, p := range parts {
		binary.LittleEndian.PutUint64(b[:], uint64(len(p)))
		_, _ = h.Write(b[:])
		_, _ = h.Write(p)
	}
	return h.Sum64()
}

// openAIPoints are the prefixes of an OpenAI chat request, one per message:
// the model and tools, then the messages. Tokens are the fake's (words of
// each message's text, at least 1 a message), so the last point's count is
// the reply's prompt_tokens.
func (c *promptCache) openAIPoints(req *chatRequest, body []byte) []cachePoint {
	h := c.chain(0, []byte(req.Model), []byte(gjson.GetBytes(body, "tools").Raw))
	points := make([]cachePoint, 0, len(req.Messages))
	tokens := 0
	for i := range req.Messages {
		m := &req.Messages[i]
		h = c.chain(h, []byte(m.Role), bytes.TrimSpace(m.Content))
		tokens += max(1, len(strings.Fields(m.text())))
		points = append(points, cachePoint{hash: h, tokens: tokens})
	}
	return points
}

// automatic is OpenAI's caching: the longest prefix of at least MinTokens
// seen before is read from the cache. It returns the cached tokens.
func (c *promptCache) automatic(points []cachePoint) int {
	cached := 0
	for _, p := range points {
		if p.tokens >= c.opts.MinTokens && c.lru.Contains(p.hash) {
			cached = p.tokens
		}
	}
	return cached
}

// storeAutomatic remembers every prefix of at least MinTokens.
func (c *promptCache) storeAutomatic(points []cachePoint) {
	for _, p := range points {
		if p.tokens >= c.opts.MinTokens {
			c.lru.Add(p.hash, struct{}{})
		}
	}
}

// explicit is Anthropic's caching: only breakpoints are written, and a
// breakpoint reads the longest cached prefix at it or up to
// anthropicLookback blocks before it. It returns the tokens read and the
// tokens written (from the read prefix to the last cacheable breakpoint).
func (c *promptCache) explicit(points []cachePoint) (read, creation int) {
	last := -1
	for i, p := range points {
		if !p.breakpoint {
			continue
		}
		for j := i; j >= 0 && j >= i-anthropicLookback; j-- {
			if q := points[j]; q.tokens >= c.opts.MinTokens && q.tokens > read && c.lru.Contains(q.hash) {
				read = q.tokens
				break
			}
		}
		if p.tokens >= c.opts.MinTokens {
			last = i
		}
	}
	if last >= 0 && points[last].tokens > read {
		creation = points[last].tokens - read
	}
	return read, creation
}

// storeExplicit remembers the cacheable breakpoints.
func (c *promptCache) storeExplicit(points []cachePoint) {
	for _, p := range points {
		if p.breakpoint && p.tokens >= c.opts.MinTokens {
			c.lru.Add(p.hash, struct{}{})
		}
	}
}

// serviceTime is the delay before the first byte when cached of prompt
// tokens come from the cache: ServiceTime moved towards CachedServiceTime
// in proportion to the cached share.
func (c *promptCache) serviceTime(base time.Duration, cached, prompt int) time.Duration {
	if c == nil || cached <= 0 || prompt <= 0 {
		return base
	}
	share := float64(min(cached, prompt)) / float64(prompt)
	return base + time.Duration(share*float64(c.opts.CachedServiceTime-base))
}

// anthropicPoints are the prefixes of an Anthropic Messages request, one
// per block in Anthropic's cache order (tools, system, messages), with the
// blocks that carry cache_control as breakpoints. A block is hashed without
// its cache_control (moving a breakpoint does not change the prefix), and a
// string system prompt or message content as the one text block it stands
// for. Tokens are words of text blocks and tool_result contents; tools
// count none, as in the fake's prompt_tokens. It returns nil for a body it
// cannot read (the request is refused later anyway).
func (c *promptCache) anthropicPoints(body []byte) []cachePoint {
	var req struct {
		Model    string            `json:"model"`
		Tools    []json.RawMessage `json:"tools"`
		System   json.RawMessage   `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	var points []cachePoint
	h := c.chain(0, []byte(req.Model))
	tokens := 0
	add := func(role string, block json.RawMessage) bool {
		canon, words, bp, ok := anthropicBlockKey(block)
		if !ok {
			return false
		}
		h = c.chain(h, []byte(role), canon)
		tokens += words
		points = append(points, cachePoint{hash: h, tokens: tokens, breakpoint: bp})
		return true
	}
	for _, t := range req.Tools { // no "text": no tokens
		if !add("tool", t) {
			return nil
		}
	}
	blocks := func(role string, content json.RawMessage) bool {
		content = bytes.TrimSpace(content)
		if len(content) == 0 || string(content) == "null" {
			return true
		}
		if content[0] != '[' {
			text, err := json.Marshal(map[string]json.RawMessage{"type": json.RawMessage(`"text"`), "text": content})
			return err == nil && add(role, text)
		}
		var list []json.RawMessage
		if json.Unmarshal(content, &list) != nil {
			return false
		}
		for _, b := range list {
			if !add(role, b) {
				return false
			}
		}
		return true
	}
	if !blocks("system", req.System) {
		return nil
	}
	for _, m := range req.Messages {
		if !blocks(m.Role, m.Content) {
			return nil
		}
	}
	return points
}

// anthropicBlockKey returns a block without its cache_control, in a
// canonical form (keys sorted), its words, and whether it had cache_control.
func anthropicBlockKey(block json.RawMessage) (canon []byte, words int, breakpoint, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(block, &m) != nil {
		return nil, 0, false, false
	}
	_, breakpoint = m["cache_control"]
	delete(m, "cache_control")
	canon, err := json.Marshal(m)
	if err != nil {
		return nil, 0, false, false
	}
	var typ string
	_ = json.Unmarshal(m["type"], &typ)
	switch typ {
	case "text":
		var s string
		_ = json.Unmarshal(m["text"], &s)
		words = len(strings.Fields(s))
	case "tool_result":
		msg := chatMessage{Content: m["content"]}
		words = len(strings.Fields(msg.text()))
	}
	return canon, words, breakpoint, true
}
