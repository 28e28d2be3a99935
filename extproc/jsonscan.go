package extproc

import (
	"math/bits"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// JSON scanning, without decoding and without allocating.
//
// A request body is read in ONE pass (parseChat, parseEmbeddings): the
// scanner validates the whole JSON text exactly as encoding/json.Valid does
// (structure, numbers, literals, string escapes and the control characters
// a string may not hold raw, nesting up to encoding/json's 10000 levels;
// like encoding/json it does not check UTF-8, which the provider's parser
// rejects or replaces) and, as it goes, calls back for the members and
// elements the gateway reads, so that validation, field lookup, duplicate
// detection and the token estimate need no second look at the body.
//
// A prompt of a million tokens is several megabytes in one string, so
// string contents are what a request's time is spent on. On amd64 with
// AVX2 or AVX-512, strings are checked 64 bytes at a time (jsonscan_amd64.s: the
// quote, backslash and control-character masks of a block, the escaped
// positions from the backslash runs, and the escape characters and \u hex
// digits checked by nibble lookups), about as fast as memchr; elsewhere a
// portable loop skips 8 plain bytes at a time.
//
// The iterator below walks members of a value already validated, without
// copying or unescaping: gjson's own accessors cost too much on such bodies
// (GetBytes copies every result, each Get rescans the document from the
// start, ForEach unescapes every string it returns).

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

// plainByte[c] reports whether c stands for itself inside a JSON string:
// not a quote, a backslash or a control character.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hexByte[c] reports whether c is a hexadecimal digit.
var hexByte = func() (t [256]bool) {
	for _, c := range []byte("0123456789abcdefABCDEF") {
		t[c] = true
	}
	return t
}()

// scanString validates the JSON string whose opening quote is at s[i] and
// returns the offset just past its closing quote, or -1 if it is not a
// valid string.
func scanString(s string, i int) int {
	i++
	// Most strings (keys, roles, names) end within a few bytes.
	for end := min(i+16, len(s)); i < end; i++ {
		if c := s[i]; !plainByte[c] {
			if c == '"' {
				return i + 1
			}
			break
		}
	}
	if len(s)-i >= 64 && useVector() {
		pos, consumed, state := scanStringVector(unsafe.StringData(s[i:]), len(s)-i, 0)
		switch {
		case pos >= 0:
			return i + pos + 1
		case pos == -1:
			return -1
		}
		// The rest is shorter than a block; the kernel says whether it
		// starts inside an escape.
		i += consumed
		if state&1 != 0 {
			if i = escapeEnd(s, i); i < 0 {
				return -1
			}
		}
		for n := bits.Len64(state >> 8); n > 0; n-- {
			if i >= len(s) || !hexByte[s[i]] {
				return -1
			}
			i++
		}
	}
	return scanStringTail(s, i)
}

// escapeEnd returns the offset just past the escape sequence whose
// character (after the backslash) is at s[i], or -1 if it is invalid.
func escapeEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 1
	case 'u':
		if i+5 > len(s) || !hexByte[s[i+1]] || !hexByte[s[i+2]] || !hexByte[s[i+3]] || !hexByte[s[i+4]] {
			return -1
		}
		return i + 5
	}
	return -1
}

const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// scanStringTail is scanString's portable loop, from s[i] inside a string
// (not inside an escape).
func scanStringTail(s string, i int) int {
	for {
		// Skip 8 plain bytes at a time: no quote, backslash or control
		// character among them (the classic has-zero-byte tests).
		for i+8 <= len(s) {
			x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
				uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
			q := x ^ (swarOnes * '"')
			b := x ^ (swarOnes * '\\')
			if ((q-swarOnes)&^q|(b-swarOnes)&^b|(x-swarOnes*0x20)&^x)&swarHigh != 0 {
				break
			}
			i += 8
		}
		for i < len(s) && plainByte[s[i]] {
			i++
		}
		if i >= len(s) {
			return -1
		}
		switch s[i] {
		case '"':
			return i + 1
		case '\\':
			if i = escapeEnd(s, i+1); i < 0 {
				return -1
			}
		default: // a control character
			return -1
		}
	}
}

// scanLiteral validates true, false or null at s[i].
func scanLiteral(s string, i int) int {
	var lit string
	switch s[i] {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	default:
		lit = "null"
	}
	if !strings.HasPrefix(s[i:], lit) {
		return -1
	}
	return i + len(lit)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber validates the number at s[i] (JSON's grammar: no leading
// zeros, no leading '+' or '.', digits after '.' and 'e').
func scanNumber(s string, i int) int {
	if s[i] == '-' {
		i++
	}
	switch {
	case i >= len(s):
		return -1
	case s[i] == '0':
		i++
	case isDigit(s[i]):
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	default:
		return -1
	}
	if i < len(s) && s[i] == '.' {
		if i++; i >= len(s) || !isDigit(s[i]) {
			return -1
		}
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		if i++; i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return -1
		}
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	return i
}

// scanMemberKey validates the key and colon of an object member starting
// at s[i] and returns the offset of the member's value, or -1.
func scanMemberKey(s string, i int) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	if i = scanString(s, i); i < 0 {
		return -1
	}
	if i = skipSpace(s, i); i >= len(s) || s[i] != ':' {
		return -1
	}
	if i = skipSpace(s, i+1); i >= len(s) {
		return -1
	}
	return i
}

// scanValue validates the JSON value that starts at s[i] (no leading
// whitespace) and returns the offset just past it, or -1. d is the nesting
// depth an array or object starting at s[i] would have (1 at the top).
// Nesting is tracked without recursion, so no input can exhaust the stack.
func scanValue(s string, i, d int) int {
	if i >= len(s) {
		return -1
	}
	switch c := s[i]; {
	case c == '"':
		return scanString(s, i)
	case c == 't' || c == 'f' || c == 'n':
		return scanLiteral(s, i)
	case c != '{' && c != '[':
		return scanNumber(s, i)
	}
	// open containers, innermost last; a set bit is an object. Deeper
	// than 64 levels (never in a real request) spills to deep.
	var open uint64
	var deep []uint64
	top := 0
	isObj := func(k int) bool {
		if k < 64 {
			return open&(1<<k) != 0
		}
		return deep[(k-64)/64]&(1<<((k-64)%64)) != 0
	}
	for {
		// A value starts at s[i].
		if i >= len(s) {
			return -1
		}
		switch c := s[i]; c {
		case '{', '[':
			if d+top > maxNesting {
				return -1
			}
			obj := c == '{'
			if top < 64 {
				open = open&^(1<<top) | b2u(obj)<<top
			} else {
				k := top - 64
				if k/64 >= len(deep) {
					deep = append(deep, 0)
				}
				deep[k/64] = deep[k/64]&^(1<<(k%64)) | b2u(obj)<<(k%64)
			}
			top++
			if i = skipSpace(s, i+1); i >= len(s) {
				return -1
			}
			if (obj && s[i] == '}') || (!obj && s[i] == ']') {
				i++
				top--
				break // an empty container is a complete value
			}
			if obj {
				if i = scanMemberKey(s, i); i < 0 {
					return -1
				}
			}
			continue // its first member or element
		case '"':
			i = scanString(s, i)
		case 't', 'f', 'n':
			i = scanLiteral(s, i)
		default:
			i = scanNumber(s, i)
		}
		// A value ended at s[i]: close containers until the next value
		// starts.
		for {
			if i < 0 {
				return -1
			}
			if top == 0 {
				return i
			}
			if i = skipSpace(s, i); i >= len(s) {
				return -1
			}
			obj := isObj(top - 1)
			if s[i] == ',' {
				i = skipSpace(s, i+1)
				if obj {
					i = scanMemberKey(s, i)
				}
				if i < 0 {
					return -1
				}
				break
			}
			if (obj && s[i] == '}') || (!obj && s[i] == ']') {
				i++
				top--
				continue
			}
			return -1
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// scanObject validates the object whose '{' is at s[i], at nesting depth d,
// and returns the offset just past its '}', or -1. For each member it calls
// member with the key (unescaped) and the offset of the value; member must
// validate the value, at depth d+1 (scanValue or a walker of its own), and
// return the offset just past it, or -1.
func scanObject(s string, i, d int, member func(key string, v int) int) int {
	if d > maxNesting {
		return -1
	}
	if i = skipSpace(s, i+1); i < len(s) && s[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return -1
		}
		ke := scanString(s, i)
		if ke < 0 {
			return -1
		}
		key := s[i+1 : ke-1]
		if strings.IndexByte(key, '\\') >= 0 {
			// An escaped key ("mod\u0065l") means the same to the
			// provider's parser as the plain one, so it must to us too.
			key = gjson.Parse(s[i:ke]).Str
		}
		if i = skipSpace(s, ke); i >= len(s) || s[i] != ':' {
			return -1
		}
		if i = skipSpace(s, i+1); i >= len(s) {
			return -1
		}
		if i = member(key, i); i < 0 {
			return -1
		}
		if i = skipSpace(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// scanArray is scanObject for the array whose '[' is at s[i]: elem is
// called with each element's index and offset.
func scanArray(s string, i, d int, elem func(idx, v int) int) int {
	if d > maxNesting {
		return -1
	}
	if i = skipSpace(s, i+1); i < len(s) && s[i] == ']' {
		return i + 1
	}
	for idx := 0; ; idx++ {
		if i >= len(s) {
			return -1
		}
		if i = elem(idx, i); i < 0 {
			return -1
		}
		if i = skipSpace(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

// validJSON reports whether s is one JSON value with optional whitespace
// around it, as encoding/json.Valid does.
func validJSON(s string) bool {
	i := scanValue(s, skipSpace(s, 0), 1)
	return i >= 0 && skipSpace(s, i) == len(s)
}

// iter walks the members of one JSON object or the elements of one JSON
// array, in s, without copying or unescaping values. s must be valid JSON
// (the body was validated).
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
// at s[i], in JSON that was validated; the string scanner finds it fastest.
// Should it not be valid after all, the first quote not escaped ends it.
func skipString(s string, i int) int {
	if e := scanString(s, i); e >= 0 {
		return e
	}
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
// allocating, only if it has escapes); "" for other values.
func str(raw string) string {
	if len(raw) >= 2 && raw[0] == '"' && strings.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	return gjson.Parse(raw).Str
}
