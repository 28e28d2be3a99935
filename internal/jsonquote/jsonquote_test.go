package jsonquote

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestAppend compares Append with encoding/json (HTML escaping off) on
// tricky and random strings, at every alignment of the word-at-a-time fast
// path.
func TestAppend(t *testing.T) {
	cases := []string{"", "plain", `"quoted"`, `back\slash`, "nl\n tab\t cr\r nul\x00 esc\x1b del\x7f",
		"é 😀 日本", "bad \xff\xfe utf8", "\u2028\u2029", "<html>&amp;</html>", strings.Repeat("QUJD+/==", 9) + "\n",
		"0123456\x80", "abcdefgh\"", "abcdefg\\"}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("abcXYZ019+/= \"\\\n\t\x01\x1f\x7f\xc3\xa9\xe2\x80\xa8\xff")
	for range 2000 {
		b := make([]byte, r.IntN(40))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte('a' + r.IntN(26))
			}
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		for pad := range 8 { // shift the string against the 8-byte words
			s := strings.Repeat("p", pad) + c
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(s); err != nil {
				t.Fatal(err)
			}
			got := Append([]byte("x"), s)
			if string(got[1:]) != strings.TrimSuffix(want.String(), "\n") {
				t.Fatalf("Append(%q) = %s, want %s", s, got[1:], want.String())
			}
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	s := strings.Repeat("QUJD", 1<<18) // 1 MiB of base64
	dst := make([]byte, 0, len(s)+2)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		dst = Append(dst[:0], s)
	}
}
