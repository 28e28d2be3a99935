// Package jsonquote owns writing Go strings as JSON string literals into
// byte slices, for the translators and services that build JSON bodies by
// appending rather than marshalling (no reflection, no intermediate values).
package jsonquote

import (
	"encoding/binary"
	"unicode/utf8"
	"unsafe"
)

const hexDigits = "0123456789abcdef"

// Append appends s as a JSON string, escaping as encoding/json does
// (without its HTML escaping, which API bodies do not need) and replacing
// invalid UTF-8 with U+FFFD, so the result is always valid JSON.
func Append(dst []byte, s string) []byte {
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
			dst = AppendEscape(append(dst, s[start:i]...), c)
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
// and neither '"' nor '\\': bytes Append copies as they are.
func plainWord(s string) bool {
	w := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(s), 8))
	hasZero := func(v uint64) uint64 { return (v - ones) & ^v & highs }
	below := (w - ones*0x20) & ^w & highs // some byte < 0x20 (or >= 0x80, caught next)
	return (w&highs)|below|hasZero(w^(ones*'"'))|hasZero(w^(ones*'\\')) == 0
}

// AppendEscape appends the JSON escape of the ASCII byte c, one of '"',
// '\\' or a control character.
func AppendEscape(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
}
