package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func mustFor(t testing.TB, name string) Tokenizer {
	t.Helper()
	tk, err := For(name)
	if err != nil {
		t.Fatalf("For(%q): %v", name, err)
	}
	return tk
}

func TestFor(t *testing.T) {
	for _, tt := range []struct{ name, want string }{
		{CL100KBase, CL100KBase},
		{O200KBase, O200KBase},
		{Estimate, Estimate},
		{"", Estimate},
	} {
		if got := mustFor(t, tt.name).Name(); got != tt.want {
			t.Errorf("For(%q).Name() = %q, want %q", tt.name, got, tt.want)
		}
	}
	for _, name := range []string{"gpt-4o", "p50k_base", "CL100K_BASE", "cl100k"} {
		if tk, err := For(name); err == nil {
			t.Errorf("For(%q) = %v, want an error", name, tk.Name())
		}
	}
	a, b := mustFor(t, CL100KBase), mustFor(t, CL100KBase)
	if a != b {
		t.Error("For returned two instances of cl100k_base; the BPE must load once")
	}
}

// TestCount checks counts (and, for the BPEs, token ids) against tiktoken's
// published values: the tiktoken README and OpenAI cookbook "How to count
// tokens with tiktoken" examples.
func TestCount(t *testing.T) {
	tests := []struct {
		text          string
		cl100k, o200k int
		cl100kIDs     []int
	}{
		{"", 0, 0, nil},
		{"hello world", 2, 2, []int{15339, 1917}},
		{"Hello World!", 3, 3, nil},
		{"tiktoken is great!", 6, 6, []int{83, 1609, 5963, 374, 2294, 0}},
		{"China is great!", 4, 4, []int{23078, 374, 2294, 0}},
		{"antidisestablishmentarianism", 6, 6, []int{519, 85342, 34500, 479, 8997, 2191}},
		{"2 + 2 = 4", 7, 7, []int{17, 489, 220, 17, 284, 220, 19}},
		{"お誕生日おめでとう", 9, 8, []int{33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699}},
		// Special-token spellings are ordinary text.
		{"<|endoftext|>", 7, 7, []int{27, 91, 8862, 728, 428, 91, 29}},
	}
	cl, o2 := mustFor(t, CL100KBase), mustFor(t, O200KBase)
	for _, tt := range tests {
		if got := cl.Count(tt.text); got != tt.cl100k {
			t.Errorf("cl100k_base Count(%q) = %d, want %d", tt.text, got, tt.cl100k)
		}
		if got := o2.Count(tt.text); got != tt.o200k {
			t.Errorf("o200k_base Count(%q) = %d, want %d", tt.text, got, tt.o200k)
		}
		if tt.cl100kIDs != nil {
			if got := cl.(*bpe).enc.EncodeOrdinary(tt.text); fmt.Sprint(got) != fmt.Sprint(tt.cl100kIDs) {
				t.Errorf("cl100k_base tokens of %q = %v, want %v", tt.text, got, tt.cl100kIDs)
			}
		}
	}
}

func TestEstimateCount(t *testing.T) {
	est := mustFor(t, Estimate)
	for _, tt := range []struct {
		text string
		want int
	}{
		{"", 0},
		{"a", 1},
		{"abcd", 1},
		{"abcde", 2},
		{"hello world", 3},  // 11 bytes
		{"お誕生日", 3},         // 12 bytes
		{"é", 1},            // 2 bytes
		{"\xff", 1},         // one invalid byte reads as U+FFFD: 3 bytes
		{"abcd\xff\xfe", 3}, // 4 + 2*3 bytes
	} {
		if got := est.Count(tt.text); got != tt.want {
			t.Errorf("estimate Count(%q) = %d, want %d", tt.text, got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		tok  string
		text string
		max  int
		want string
		cut  bool
	}{
		{CL100KBase, "hello world", 2, "hello world", false},
		{CL100KBase, "hello world", 100, "hello world", false},
		{CL100KBase, "hello world", 1, "hello", true},
		{CL100KBase, "hello world", 0, "", true},
		{CL100KBase, "hello world", -3, "", true},
		{CL100KBase, "", 0, "", false},
		{CL100KBase, "", 5, "", false},
		{CL100KBase, "tiktoken is great!", 3, "tiktoken", true},
		{CL100KBase, "tiktoken is great!", 5, "tiktoken is great", true},
		{CL100KBase, "tiktoken is great!", 6, "tiktoken is great!", false},
		// 誕 is split over tokens 2 and 3 (45918, 243): a cut after token
		// 2 would split it, so it backs off to token 1.
		{CL100KBase, "お誕生日おめでとう", 1, "お", true},
		{CL100KBase, "お誕生日おめでとう", 2, "お", true},
		{CL100KBase, "お誕生日おめでとう", 3, "お誕", true},
		{CL100KBase, "お誕生日おめでとう", 4, "お誕生", true},
		{CL100KBase, "お誕生日おめでとう", 8, "お誕生日おめで", true},
		{CL100KBase, "お誕生日おめでとう", 9, "お誕生日おめでとう", false},
		{O200KBase, "hello world", 1, "hello", true},
		{O200KBase, "お誕生日おめでとう", 2, "お", true},
		{O200KBase, "お誕生日おめでとう", 3, "お誕", true},
		// Estimate: 4 bytes a token, never splitting a rune.
		{Estimate, "hello world", 3, "hello world", false},
		{Estimate, "hello world", 2, "hello wo", true},
		{Estimate, "hello world", 0, "", true},
		{Estimate, "", 0, "", false},
		{Estimate, "お誕生日", 3, "お誕生日", false},
		{Estimate, "お誕生日", 2, "お誕", true}, // 8 bytes allowed: 6 fit
		{Estimate, "お誕生日", 1, "お", true},  // 4 bytes allowed: お is 3, お誕 6
		{Estimate, "aお誕", 1, "aお", true},
		{Estimate, "😀😀", 1, "😀", true},
		{Estimate, "a😀", 1, "a", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%s/%d", tt.tok, tt.text, tt.max), func(t *testing.T) {
			tk := mustFor(t, tt.tok)
			got, cut := tk.Truncate(tt.text, tt.max)
			if got != tt.want || cut != tt.cut {
				t.Errorf("Truncate(%q, %d) = %q, %v; want %q, %v", tt.text, tt.max, got, cut, tt.want, tt.cut)
			}
		})
	}
}

// samples mixes scripts, emoji (4-byte runes, several tokens each), combining
// marks, whitespace runs and code.
var samples = []string{
	"The quick brown fox jumps over the lazy dog.",
	"お誕生日おめでとう！今日はいい天気ですね。",
	"Привет, мир! Как дела?",
	"emoji 😀🎉👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵 end",
	"e\u0301le\u0300ve café naïve",
	"func main() {\n\tfmt.Println(\"hi\")\n}\n\n\n   trailing   ",
	"مرحبا بالعالم 你好世界 안녕하세요",
	"<|endoftext|> special <|fim_prefix|>",
}

// TestTruncateProperties checks, for every tokenizer, sample and max, that
// the result is a valid UTF-8 prefix within max tokens, that cut says
// whether it is shorter, and that no cut happens when the text fits.
func TestTruncateProperties(t *testing.T) {
	for _, name := range []string{CL100KBase, O200KBase, Estimate} {
		tk := mustFor(t, name)
		for _, text := range samples {
			n := tk.Count(text)
			prev := ""
			for limit := -1; limit <= n+1; limit++ {
				got, cut := tk.Truncate(text, limit)
				switch {
				case !utf8.ValidString(got):
					t.Errorf("%s Truncate(%q, %d) = %q: invalid UTF-8", name, text, limit, got)
				case !strings.HasPrefix(text, got):
					t.Errorf("%s Truncate(%q, %d) = %q: not a prefix", name, text, limit, got)
				case tk.Count(got) > max(limit, 0):
					t.Errorf("%s Truncate(%q, %d) = %q: %d tokens", name, text, limit, got, tk.Count(got))
				case cut != (got != text):
					t.Errorf("%s Truncate(%q, %d) = %q, cut %v", name, text, limit, got, cut)
				case limit >= n && cut:
					t.Errorf("%s Truncate(%q, %d) cut a text of %d tokens", name, text, limit, n)
				case len(got) < len(prev):
					t.Errorf("%s Truncate(%q, %d) = %q, shorter than at %d: %q", name, text, limit, got, limit-1, prev)
				}
				prev = got
			}
		}
	}
}

// TestEstimateTruncateLongest checks the estimate keeps the longest prefix:
// one more rune would exceed max.
func TestEstimateTruncateLongest(t *testing.T) {
	est := mustFor(t, Estimate)
	for _, text := range samples {
		for max := 1; max <= est.Count(text); max++ {
			got, cut := est.Truncate(text, max)
			if !cut {
				continue
			}
			_, size := utf8.DecodeRuneInString(text[len(got):])
			if est.Count(text[:len(got)+size]) <= max {
				t.Errorf("Truncate(%q, %d) = %q: the next rune still fits", text, max, got)
			}
		}
	}
}

// TestTruncateBPEBoundary checks a BPE cut lands on a token boundary: the
// prefix's tokens are the first tokens of the whole text.
func TestTruncateBPEBoundary(t *testing.T) {
	for _, name := range []string{CL100KBase, O200KBase} {
		tk := mustFor(t, name).(*bpe)
		for _, text := range samples {
			all := tk.enc.EncodeOrdinary(text)
			for max := 1; max < len(all); max++ {
				got, _ := tk.Truncate(text, max)
				pre := tk.enc.EncodeOrdinary(got)
				if fmt.Sprint(pre) != fmt.Sprint(all[:len(pre)]) {
					t.Errorf("%s Truncate(%q, %d) = %q: tokens %v are not a prefix of %v", name, text, max, got, pre, all)
				}
			}
		}
	}
}

func TestInvalidUTF8(t *testing.T) {
	const bad = "ok \xff\xfe then \xe3\x81 more" // stray bytes and a truncated rune
	for _, name := range []string{CL100KBase, O200KBase, Estimate} {
		tk := mustFor(t, name)
		valid := strings.Map(func(r rune) rune { return r }, bad) // each bad byte -> U+FFFD
		if got, want := tk.Count(bad), tk.Count(valid); got != want {
			t.Errorf("%s Count(invalid) = %d, Count(repaired) = %d", name, got, want)
		}
		for max := 0; max <= tk.Count(bad)+1; max++ {
			got, cut := tk.Truncate(bad, max)
			if !utf8.ValidString(got) || !strings.HasPrefix(valid, got) {
				t.Errorf("%s Truncate(invalid, %d) = %q", name, max, got)
			}
			if cut != (got != valid) {
				t.Errorf("%s Truncate(invalid, %d) = %q, cut %v", name, max, got, cut)
			}
		}
	}
}

// TestConcurrentLoad loads fresh copies of both BPEs from many goroutines at
// once, counting and truncating as soon as each is ready; run with -race.
func TestConcurrentLoad(t *testing.T) {
	want := map[string]int{CL100KBase: 9, O200KBase: 8}
	fresh := map[string]*bpe{CL100KBase: newBPE(CL100KBase), O200KBase: newBPE(O200KBase)}
	var wg sync.WaitGroup
	for i := range 16 {
		for name, b := range fresh {
			wg.Go(func() {
				if err := b.ensure(); err != nil {
					t.Error(err)
					return
				}
				if got := b.Count("お誕生日おめでとう"); got != want[name] {
					t.Errorf("%s Count = %d, want %d", name, got, want[name])
				}
				if got, _ := b.Truncate(samples[i%len(samples)], 3); !utf8.ValidString(got) {
					t.Errorf("%s Truncate gave invalid UTF-8 %q", name, got)
				}
			})
		}
	}
	wg.Wait()
}

// TestConcurrentUse shares the package tokenizers between goroutines.
func TestConcurrentUse(t *testing.T) {
	text := strings.Join(samples, " ")
	var wg sync.WaitGroup
	for _, name := range []string{CL100KBase, O200KBase, Estimate} {
		ref := mustFor(t, name).Count(text)
		for range 8 {
			wg.Go(func() {
				tk, err := For(name)
				if err != nil {
					t.Error(err)
					return
				}
				for range 20 {
					if got := tk.Count(text); got != ref {
						t.Errorf("%s Count = %d, want %d", name, got, ref)
						return
					}
					if got, _ := tk.Truncate(text, ref/2); tk.Count(got) > ref/2 {
						t.Errorf("%s Truncate over budget", name)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestLoadCost reports how long loading each BPE took (run with -v; slower
// under -race). The numbers are informational, not asserted.
func TestLoadCost(t *testing.T) {
	for _, name := range []string{CL100KBase, O200KBase} {
		mustFor(t, name)
		t.Logf("%s: loaded in %v", name, encodings[name].loadTime)
	}
}

// text8K is about 8 KB of mixed English prose and code.
var text8K = func() string {
	const para = "The gateway counts prompt tokens before it routes a request, so limits apply to what the model sees. " +
		"func count(s string) int { return len(strings.Fields(s)) } // 42 words, 3.14 ratio\n"
	var sb strings.Builder
	for sb.Len() < 8<<10 {
		sb.WriteString(para)
	}
	return sb.String()[:8<<10]
}()

func BenchmarkCount(b *testing.B) {
	for _, name := range []string{CL100KBase, O200KBase, Estimate} {
		b.Run(name, func(b *testing.B) {
			tk := mustFor(b, name)
			b.ReportAllocs()
			b.SetBytes(int64(len(text8K)))
			n := 0
			for b.Loop() {
				n = tk.Count(text8K)
			}
			b.ReportMetric(float64(n), "tokens")
		})
	}
}

func BenchmarkTruncate(b *testing.B) {
	for _, name := range []string{CL100KBase, O200KBase, Estimate} {
		b.Run(name, func(b *testing.B) {
			tk := mustFor(b, name)
			limit := tk.Count(text8K) / 2
			b.ReportAllocs()
			b.SetBytes(int64(len(text8K)))
			for b.Loop() {
				tk.Truncate(text8K, limit)
			}
		})
	}
}

// FuzzTruncate checks Truncate's promises on arbitrary input, valid UTF-8 or
// not: valid UTF-8 out, a prefix of the repaired text, within max tokens, cut
// reported exactly, and no cut when the text fits.
func FuzzTruncate(f *testing.F) {
	for _, s := range samples {
		f.Add(s, 3)
	}
	f.Add("ok \xff\xfe then \xe3\x81 more", 2)
	f.Add("", 0)
	toks := []Tokenizer{mustFor(f, CL100KBase), mustFor(f, O200KBase), mustFor(f, Estimate)}
	f.Fuzz(func(t *testing.T, text string, limit int) {
		limit %= 64
		valid := string([]rune(text)) // each invalid byte -> U+FFFD
		for _, tk := range toks {
			got, cut := tk.Truncate(text, limit)
			if !utf8.ValidString(got) || !strings.HasPrefix(valid, got) {
				t.Fatalf("%s Truncate(%q, %d) = %q: not a valid prefix", tk.Name(), text, limit, got)
			}
			if n := tk.Count(got); n > max(limit, 0) {
				t.Fatalf("%s Truncate(%q, %d) = %q: %d tokens", tk.Name(), text, limit, got, n)
			}
			if cut != (got != valid) {
				t.Fatalf("%s Truncate(%q, %d) = %q, cut %v", tk.Name(), text, limit, got, cut)
			}
			if limit >= 0 && tk.Count(text) <= limit && cut {
				t.Fatalf("%s Truncate(%q, %d) cut a text of %d tokens", tk.Name(), text, limit, tk.Count(text))
			}
		}
	})
}

// TestPathologicalRunsAreLinear: a long run without spaces used to make
// tiktoken's merge quadratic (64 KB of one letter took ~10 s).
func TestPathologicalRunsAreLinear(t *testing.T) {
	tk, err := For(CL100KBase)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{strings.Repeat("a", 1<<20), strings.Repeat("誕", 1<<18), strings.Repeat(" ", 1<<20)} {
		// Before segmenting, the first of these alone took minutes.
		if n := tk.Count(text); n == 0 {
			t.Fatal("count 0")
		}
		cut, ok := tk.Truncate(text, 1000)
		if !ok || tk.Count(cut) > 1000 || !utf8.ValidString(cut) {
			t.Fatalf("truncate: ok=%v count=%d", ok, tk.Count(cut))
		}
	}
}

// TestSegmentingIsExactOnProse: segment cuts fall on piece boundaries, so
// ordinary text counts exactly as one tiktoken call does.
func TestSegmentingIsExactOnProse(t *testing.T) {
	tk, err := For(CL100KBase)
	if err != nil {
		t.Fatal(err)
	}
	b := tk.(*bpe)
	prose := strings.Repeat("The quick brown fox, jumps over 1234 lazy dogs!  Again?\n", 400)
	if got, want := tk.Count(prose), len(b.enc.EncodeOrdinary(prose)); got != want {
		t.Fatalf("segmented count %d, tiktoken %d", got, want)
	}
}
