package jsonlog

import (
	"math"
	"slices"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// AppendStructValue appends v as slog.Any encodes v.AsInterface(): a
// string as slog escapes it, anything else as encoding/json encodes it
// without HTML escaping (nested strings with encoding/json's escapes). It
// reports false, with buf unchanged, for what encoding/json cannot encode
// (NaN, infinities), which the caller leaves to slog's path.
func AppendStructValue(buf []byte, v *structpb.Value) ([]byte, bool) {
	if s, ok := v.GetKind().(*structpb.Value_StringValue); ok {
		return AppendStringValue(buf, s.StringValue), true
	}
	n := len(buf)
	buf, ok := appendStructValue(buf, v)
	if !ok {
		return buf[:n], false
	}
	return buf, true
}

func appendStructValue(buf []byte, v *structpb.Value) ([]byte, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return appendJSONString(buf, k.StringValue), true
	case *structpb.Value_NumberValue:
		return appendJSONFloat(buf, k.NumberValue)
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(buf, k.BoolValue), true
	case *structpb.Value_StructValue:
		fields := k.StructValue.GetFields()
		var arr [16]string
		keys := arr[:0]
		for key := range fields {
			keys = append(keys, key)
		}
		slices.Sort(keys) // encoding/json sorts a map's keys
		buf = append(buf, '{')
		for i, key := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, key)
			buf = append(buf, ':')
			var ok bool
			if buf, ok = appendStructValue(buf, fields[key]); !ok {
				return buf, false
			}
		}
		return append(buf, '}'), true
	case *structpb.Value_ListValue:
		buf = append(buf, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				buf = append(buf, ',')
			}
			var ok bool
			if buf, ok = appendStructValue(buf, e); !ok {
				return buf, false
			}
		}
		return append(buf, ']'), true
	}
	// Null, or no kind: AsInterface gives nil.
	return append(buf, "null"...), true
}

// appendJSONFloat formats f as encoding/json does (ES6 number to string).
func appendJSONFloat(buf []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return buf, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	buf = strconv.AppendFloat(buf, f, format, -1, 64)
	if format == 'e' {
		// e-07 to e-7, as encoding/json writes it.
		if n := len(buf); n >= 4 && buf[n-4] == 'e' && buf[n-3] == '-' && buf[n-2] == '0' {
			buf[n-2] = buf[n-1]
			buf = buf[:n-1]
		}
	}
	return buf, true
}

// appendJSONString appends s quoted as encoding/json quotes it without
// HTML escaping: as AppendStringValue, and backspace and form feed as \b
// and \f.
func appendJSONString(buf []byte, s string) []byte {
	const hex = "0123456789abcdef"
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch b {
			case '"', '\\':
				buf = append(buf, '\\', b)
			case '\b':
				buf = append(buf, '\\', 'b')
			case '\f':
				buf = append(buf, '\\', 'f')
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
