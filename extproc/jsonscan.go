package extproc

import (
	"strings"

	"github.com/tidwall/gjson"
)

// The request body is validated by gjson.ValidBytes first; the helpers here
// then walk it assuming it is well-formed. They exist because gjson's own
// accessors cost too much on the bodies this gateway carries (a 1M-token
// prompt is several megabytes in one string): GetBytes/GetManyBytes copy
// every result (the whole messages array), each Get rescans the document
// from the start (an absent key scans all of it), and ForEach and Get
// unescape every string value they return, copying a huge message content.
// Walking members once, noting only where each value lies, reads the body
// in a single pass without allocating; gjson then parses the few small
// values that matter.

// iter walks the members of one JSON object or the elements of one JSON
// array, in s, without copying or unescaping values.
type iter struct {
	s        string
	i        int    // where scanning resumes
	idx      int    // index of the current member or element, from 0
	key      string // current member's key, unescaped; "" in arrays
	val, end int    // the current value is s[val:end]
	obj      bool
}

// newIter returns an iterator over the object or array that starts at
// s[start] ('{' or '[').
func newIter(s string, start int) iter {
	return iter{s: s, i: start + 1, idx: -1, obj: s[start] == '{'}
}

// next advances to the next member or element and reports whether there
// was one.
func (it *iter) next() bool {
	s := it.s
	i := skipSpace(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipSpace(s, i+1)
	}
	if i >= len(s) || s[i] == '}' || s[i] == ']' {
		it.i = i
		return false
	}
	if it.obj {
		if s[i] != '"' {
			return false
		}
		ke := skipString(s, i)
		it.key = s[i+1 : ke-1]
		if strings.IndexByte(it.key, '\\') >= 0 {
			// An escaped key ("mod\u0065l") means the same to the provider's
			// parser as the plain one, so it must to us too.
			it.key = gjson.Parse(s[i:ke]).Str
		}
		i = skipSpace(s, ke)
		if i >= len(s) || s[i] != ':' {
			return false
		}
		i = skipSpace(s, i+1)
		if i >= len(s) {
			return false
		}
	}
	it.val, it.end = i, skipValue(s, i)
	it.i = it.end
	it.idx++
	return true
}

// raw returns the current value's JSON text.
func (it *iter) raw() string { return it.s[it.val:it.end] }

func skipSpace(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset just past the string whose opening quote is
// at s[i]. It jumps from quote to quote with IndexByte (vectorised), since
// message contents are the bulk of a request.
func skipString(s string, i int) int {
	i++
	for {
		j := strings.IndexByte(s[i:], '"')
		if j < 0 {
			return len(s)
		}
		i += j
		// The quote is escaped iff an odd number of backslashes precede it.
		k := i
		for s[k-1] == '\\' {
			k--
		}
		if (i-k)%2 == 0 {
			return i + 1
		}
		i++
	}
}

// skipValue returns the offset just past the value that starts at s[i].
func skipValue(s string, i int) int {
	switch s[i] {
	case '"':
		return skipString(s, i)
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i = skipString(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(s)
	}
	for i < len(s) { // number, true, false, null
		switch s[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// isNull reports whether a raw value is absent or JSON null; OpenAI treats
// both alike for optional parameters.
func isNull(raw string) bool { return raw == "" || raw == "null" }

// str returns the value of a raw JSON string (unescaping, and so
// allocating, only if it has escapes).
func str(raw string) string { return gjson.Parse(raw).Str }
