package anthropic

import (
	"encoding/binary"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// bytesString views b as a string without copying, so gjson can parse it
// without copying every value it returns (gjson.GetBytes does copy). b must
// not change while the string is in use.
func bytesString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string, escaping as encoding/json does
// (without its HTML escaping) and replacing invalid UTF-8 with U+FFFD.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		// Long runs needing no escapes (base64 image data, plain text) are
		// skipped eight bytes at a time.
		for i+8 <= len(s) && plainWord(s[i:i+8]) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but end lines in JavaScript;
		// encoding/json escapes them, and so do we.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u202`...)
			dst = append(dst, hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Word-at-a-time byte tests (see "Bit Twiddling Hacks": hasless, haszero).
const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainWord reports whether the 8 bytes of s are all ASCII, at least 0x20,
// and neither '"' nor '\\': bytes appendString copies as they are.
func plainWord(s string) bool {
	w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	below := (w - ones*0x20) & ^w & highs // some byte < 0x20 (or >= 0x80, caught next)
	return (w&highs)|below|hasZero(w^(ones*'"'))|hasZero(w^(ones*'\\')) == 0
}

// appendInt appends n in decimal.
func appendInt(dst []byte, n int64) []byte { return strconv.AppendInt(dst, n, 10) }

// appendJoinedStrings appends the JSON string that is the concatenation of
// the JSON string literals raws, without decoding them: a JSON string's
// escapes never span its quotes, so the inner parts can simply be abutted.
func appendJoinedStrings(dst []byte, raws []string) []byte {
	if len(raws) == 1 {
		return append(dst, raws[0]...)
	}
	dst = append(dst, '"')
	for _, r := range raws {
		dst = append(dst, r[1:len(r)-1]...)
	}
	return append(dst, '"')
}
