package anthropic

import (
	"strconv"

	"github.com/switchyard-ai/switchyard/internal/jsonquote"
)

// appendString appends s as a JSON string (jsonquote.Append).
func appendString(dst []byte, s string) []byte { return jsonquote.Append(dst, s) }

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
