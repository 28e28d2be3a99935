package extproc

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// withScanners runs f with each string scanner the machine has: the vector
// ones (AVX-512, AVX2) and the portable loop.
func withScanners(t testing.TB, f func(name string)) {
	has512, has2 := useAVX512, useAVX2
	defer func() { useAVX512, useAVX2 = has512, has2 }()
	if has512 {
		useAVX512, useAVX2 = true, has2
		f("avx512")
	}
	if has2 {
		useAVX512, useAVX2 = false, true
		f("avx2")
	}
	useAVX512, useAVX2 = false, false
	f("portable")
}

// scanAll returns scanString(s, i) as each scanner sees it, the portable
// loop's last.
func scanAll(t testing.TB, s string, i int) (names []string, ends []int) {
	withScanners(t, func(name string) {
		names, ends = append(names, name), append(ends, scanString(s, i))
	})
	return names, ends
}

// sameScan fails unless every scanner ends s's string at the same place.
func sameScan(t testing.TB, s string, i int) int {
	t.Helper()
	names, ends := scanAll(t, s, i)
	port := ends[len(ends)-1]
	for k := range ends {
		if ends[k] != port {
			t.Fatalf("scanString(%q) = %d with %s, %d portable", s, ends[k], names[k], port)
		}
	}
	return port
}

// jsonCases are documents the scanner must judge as encoding/json.Valid
// does. Strings of 64 bytes and more take the vector path.
var jsonCases = func() []string {
	long := strings.Repeat("abcdefgh", 20) // 160 bytes
	c := []string{
		``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1`, `-1`, `01`, `-`, `1.`, `.5`, `1.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`,
		`+1`, `0x10`, `1.5e3.2`, `true`, `false`, `null`, `tru`, `nul`, `nulll`, `True`, `truefalse`, `[true false]`,
		`{"a":1}`, `{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":}`, `{a:1}`, `{'a':1}`, `{"a":1 "b":2}`, `{"a":1}}`,
		`{"a":1}{}`, `[1,2,3]`, `[1,,2]`, `[1,]`, `[,1]`, `[`, `]`, `[1}`, `{"a":[}`, `{"a":{"b":[1,{"c":null}]}}`,
		"\t{ \"a\" :\n[ 1 , 2 ]\r}\n", "\v{}", "{}\x00", `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\u"`,
		`"\x"`, `"\'"`, `"\/"`, `"\b\f\n\r\t\"\\"`, `"\"`, `"\\"`, `"\\\"`, `"\\\\"`, `"a` + "\n" + `b"`, "\"\x1f\"",
		"\"\x7f\"", "\"\xff\xfe\"", `"unterminated`, `"é"`, `{"a":"b"`, `{"a":"b\"}`, `["\\",1]`, `["\\\",1]`,
		`{"model":"x","messages":[{"role":"user","content":"hi"}]}`,
	}
	// Long strings, with their edge cases at every offset around the
	// vector blocks' boundaries.
	for _, tail := range []string{
		`"`, `\""`, `\\"`, `\\\""`, `\n"`, `\u00e9"`, `\u00e"`, `\u00ex"`, `\x"`, "\x01\"", `\`, `\u`, `\u12`, `\"`,
		`\\\\\\\\\"`, `\\\\\\\\"`,
	} {
		for n := 50; n < 140; n++ {
			c = append(c, `"`+long[:n]+tail, `["`+long[:n]+tail+`]`, `{"k":"`+long[:n]+tail+`}`)
		}
	}
	return c
}()

func TestScanMatchesEncodingJSON(t *testing.T) {
	withScanners(t, func(name string) {
		for _, c := range jsonCases {
			if got, want := validJSON(c), json.Valid([]byte(c)); got != want {
				t.Errorf("%s: validJSON(%q) = %v, encoding/json says %v", name, c, got, want)
			}
		}
	})
}

func TestScanNesting(t *testing.T) {
	for _, n := range []int{1, 63, 64, 65, 200, maxNesting, maxNesting + 1} {
		for _, open := range []string{"[", `{"a":`, `[{"a":`} {
			closer := map[string]string{"[": "]", `{"a":`: "}", `[{"a":`: "}]"}[open]
			doc := strings.Repeat(open, n) + "1" + strings.Repeat(closer, n)
			if got, want := validJSON(doc), json.Valid([]byte(doc)); got != want {
				t.Errorf("%d levels of %s: validJSON = %v, encoding/json says %v", n, open, got, want)
			}
		}
	}
	// The top-level walkers count their own level.
	deep := `{"messages":` + strings.Repeat("[", maxNesting-1) + strings.Repeat("]", maxNesting-1) + `}`
	if _, e := parseChat([]byte(deep)); e == nil || e.Code == "invalid_json" {
		t.Errorf("%d levels: %v, want a valid document (refused for its content)", maxNesting, e)
	}
	deep = `{"messages":` + strings.Repeat("[", maxNesting) + strings.Repeat("]", maxNesting) + `}`
	if _, e := parseChat([]byte(deep)); e == nil || e.Code != "invalid_json" {
		t.Errorf("%d levels: %v, want invalid_json", maxNesting+1, e)
	}
}

// TestScanStringDifferential holds the vector and portable string scanners
// to the same answers, on strings dense with the bytes that matter, at all
// alignments and lengths around the 64-byte blocks.
func TestScanStringDifferential(t *testing.T) {
	if !useVector() {
		t.Skip("no vector scanner on this machine")
	}
	atoms := []string{`a`, `b`, ` `, `é`, `\"`, `\\`, `\n`, `\t`, `\/`, `\u00e9`, `\uD83D`, `"`, `\`, `\u0`, `\x`, "\x01", "\x1f", `u`, `0`, `F`}
	weights := []int{40, 10, 10, 3, 4, 4, 4, 2, 1, 2, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2}
	var total int
	for _, w := range weights {
		total += w
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func() string {
		n := rnd.IntN(total)
		for i, w := range weights {
			if n < w {
				return atoms[i]
			}
			n -= w
		}
		return atoms[0]
	}
	for iter := 0; iter < 20000; iter++ {
		var b strings.Builder
		b.WriteString(strings.Repeat(" ", rnd.IntN(4)))
		b.WriteByte('"')
		for n := rnd.IntN(400); b.Len() < n; {
			a := pick()
			if a == `"` && rnd.IntN(4) != 0 {
				continue // keep most strings long
			}
			b.WriteString(a)
		}
		if rnd.IntN(8) != 0 {
			b.WriteByte('"')
		}
		b.WriteString(strings.Repeat("x", rnd.IntN(70)))
		s := b.String()
		start := strings.IndexByte(s, '"')
		end := sameScan(t, s, start)
		// And as encoding/json sees the string on its own.
		if end >= 0 {
			if !json.Valid([]byte(s[start:end])) {
				t.Fatalf("scanString(%q) accepted %q, which encoding/json refuses", s, s[start:end])
			}
		} else if q := s[start:]; json.Valid([]byte(q)) {
			t.Fatalf("scanString(%q) refused a valid string", s)
		}
	}
}

// TestScanStringEveryByte puts every byte value after a backslash, in each
// digit of a \u escape and on its own, at offsets around the vector
// blocks' boundaries.
func TestScanStringEveryByte(t *testing.T) {
	pad := strings.Repeat("p", 140)
	for c := 0; c < 256; c++ {
		b := string(rune(c))
		if c >= 0x80 {
			b = string([]byte{byte(c)})
		}
		for _, mid := range []string{`\` + b, `\u` + b + `0a0`, `\u0` + b + `a0`, `\u0a` + b + `0`, `\u0a0` + b, b, `\\` + b, `\\\` + b} {
			for n := 55; n < 133; n++ {
				s := `"` + pad[:n] + mid + `x"` + pad[:70]
				end := sameScan(t, s, 0)
				if want := json.Valid([]byte(s[:strings.LastIndexByte(s, '"')+1])); (end >= 0) != want && !strings.Contains(mid, `"`) {
					t.Fatalf("scanString(%q) = %d, encoding/json says valid %v", s, end, want)
				}
			}
		}
	}
}

// FuzzScanJSON checks the scanner against encoding/json on any input, with
// either string scanner, and parseChat's view of a request's members
// against encoding/json's.
//
//	go test -run '^$' -fuzz FuzzScanJSON -fuzztime 60s ./extproc/
func FuzzScanJSON(f *testing.F) {
	// The short cases, and the long ones at a few offsets (the fuzzer
	// moves them).
	for i, c := range jsonCases {
		if len(c) < 60 || i%29 == 0 {
			f.Add([]byte(c))
		}
	}
	f.Add([]byte(chatBody("openai/gpt-4o", `"stream":true`, `"temperature":0.5`, `"stop":["a","b"]`)))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + strings.Repeat(`ab\"c\\d\n`, 12) + `"}]}],"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}],"model":"n"}`))
	f.Add([]byte(`{"mod\u0065l":"m","messages":[{"role":"user","content":"` + strings.Repeat("x\\u00e9", 20) + `"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		want := json.Valid(data)
		withScanners(t, func(name string) {
			if got := validJSON(string(data)); got != want {
				t.Fatalf("%s: validJSON(%q) = %v, encoding/json says %v", name, data, got, want)
			}
			r, e := parseChat(data)
			if !want {
				if e == nil || e.Code != "invalid_json" {
					t.Fatalf("%s: parseChat(%q) = %v on invalid JSON", name, data, e)
				}
				return
			}
			if e != nil && e.Code == "invalid_json" {
				t.Fatalf("%s: parseChat(%q) says invalid JSON", name, data)
			}
			var members map[string]json.RawMessage
			if json.Unmarshal(data, &members) != nil || (e != nil && strings.HasPrefix(e.Message, "Duplicate key")) {
				return
			}
			for f, fn := range fieldNames {
				sp := r.fields[f]
				raw, ok := members[fn]
				if ok != sp.present() || (ok && !bytes.Equal(raw, data[sp.start:sp.end])) {
					t.Fatalf("%s: parseChat(%q) member %s = %q (present %v), encoding/json %q (present %v)",
						name, data, fn, data[sp.start:sp.end], sp.present(), raw, ok)
				}
			}
		})
	})
}

// FuzzScanString holds the vector and portable string scanners to each
// other and to encoding/json on string contents at any offset from the
// vector blocks.
//
//	go test -run '^$' -fuzz FuzzScanString -fuzztime 60s ./extproc/
func FuzzScanString(f *testing.F) {
	f.Add(uint8(0), []byte(`abc\"def\\"`))
	f.Add(uint8(61), []byte(`\u00e9\uD83D\uDE00\n\t\/"`))
	f.Add(uint8(63), []byte(`\\\\\\x\u12"`+"\x01"+`"`))
	f.Fuzz(func(t *testing.T, offset uint8, contents []byte) {
		s := `"` + strings.Repeat("a", int(offset)) + string(contents) + strings.Repeat(" ", 64)
		end := sameScan(t, s, 0)
		if end >= 0 {
			if !json.Valid([]byte(s[:end])) {
				t.Fatalf("accepted %q, which encoding/json refuses", s[:end])
			}
			return
		}
		// Refused: no prefix ending in a quote is a valid string.
		for i := 1; i < len(s); i++ {
			if s[i] == '"' && json.Valid([]byte(s[:i+1])) {
				t.Fatalf("refused %q, but %q is a valid string", s, s[:i+1])
			}
		}
	})
}

func BenchmarkScanString(b *testing.B) {
	body := benchBody(b, 8<<20)
	s := string(body)
	start := strings.Index(s, `"content":`) + len(`"content":`)
	withScanners(b, func(name string) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if scanString(s, start) < 0 {
					b.Fatal("invalid")
				}
			}
		})
	})
}

func TestScanStringEnds(t *testing.T) {
	if a, b := scanString(`"a\"b" tail`, 0), scanString(`"a\qb"`, 0); a != 6 || b != -1 {
		t.Errorf("scanString = %d, %d; want 6, -1", a, b)
	}
}
