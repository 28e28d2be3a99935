// Package tokenizer owns counting and truncating text in model tokens: a real
// BPE tokenizer where the model's tokenizer is known, a documented estimate
// otherwise.
//
// The BPE tokenizers are OpenAI's tiktoken encodings (cl100k_base for
// GPT-4, GPT-3.5 and the text-embedding-3 / ada-002 models; o200k_base for
// GPT-4o, GPT-4.1 and later), implemented by github.com/pkoukk/tiktoken-go with
// the BPE ranks embedded in the binary by github.com/pkoukk/tiktoken-go-loader,
// so nothing is downloaded at run time. Each encoding is loaded once, on the
// first For that names it, and then kept for the life of the process (measured
// on a 2-core Xeon: cl100k_base 0.12-0.25 s and about 11 MiB of heap,
// o200k_base 0.3-0.5 s and about 23 MiB; see TestLoadCost); after that a
// Tokenizer is safe for concurrent use.
//
// Counting is not free. tiktoken-go runs the encoding's split regexp with a
// backtracking engine, about 2 MB/s per core on prose and code (4 ms and
// 12,000 allocations for 8 KB; see BenchmarkCount). Worse, its byte-pair merge
// is quadratic in the length of one split piece, and a piece is a whole run
// of letters, of spaces, or of text without spaces: 16 KB of one repeated
// letter takes 0.4 s, 64 KB 10 s, and CJK text without spaces behaves alike.
// This package therefore never hands tiktoken a piece longer than maxRun:
// text is encoded in segments cut just before a space that follows a
// non-space (a piece boundary in every tiktoken split pattern, so ordinary
// text counts exactly), and a run longer than maxRun without such a boundary
// is cut at a rune boundary. Only those pathological runs can count slightly
// differently from tiktoken; the cost becomes linear in the text.
//
// Text is counted as ordinary text: a special-token spelling such as
// "<|endoftext|>" in the input counts as the tokens of its characters, as the
// OpenAI API treats user content. Text that is not valid UTF-8 is first made
// valid by replacing each invalid byte with U+FFFD (as Go's []rune conversion
// does); Count and Truncate both work on that text, and Truncate never returns
// invalid UTF-8.
//
// Importing this package points tiktoken-go's process-wide BPE loader at the
// embedded, offline data (tiktoken.SetBpeLoader, in init, before any goroutine
// can race with it), so other users of tiktoken-go in the same binary never
// fetch ranks over the network either.
package tokenizer

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// Tokenizer counts and truncates text in one model family's tokens.
type Tokenizer interface {
	// Count returns the number of tokens in text; 0 for "".
	Count(text string) int
	// Truncate returns the longest prefix of text that is at most max tokens
	// (cut on a token boundary), and whether it cut. A max below 1 gives ""
	// (cut unless text was already empty). The prefix is always valid UTF-8:
	// a cut never splits a rune, even where a BPE token boundary would.
	Truncate(text string, max int) (string, bool)
	// Name is the name For knows the tokenizer by.
	Name() string
}

// Names accepted by For.
const (
	// CL100KBase is OpenAI's cl100k_base encoding (GPT-4, GPT-3.5-turbo,
	// text-embedding-3-small/large, text-embedding-ada-002).
	CL100KBase = "cl100k_base"
	// O200KBase is OpenAI's o200k_base encoding (GPT-4o, GPT-4.1, o-series).
	O200KBase = "o200k_base"
	// Estimate is the fallback where the model's tokenizer is unknown: a token
	// per 4 bytes of UTF-8, rounded up, the usual rule of thumb for English
	// (it undercounts CJK text and code; treat it as an estimate). "" means
	// the same.
	Estimate = "estimate"
)

func init() {
	tiktoken.SetBpeLoader(loader.NewOfflineLoader())
}

// encodings holds the lazily loaded BPE tokenizers by name.
var encodings = map[string]*bpe{
	CL100KBase: newBPE(CL100KBase),
	O200KBase:  newBPE(O200KBase),
}

// For returns the tokenizer by name: CL100KBase or O200KBase (loading its BPE
// ranks on first use), or Estimate / "" for the byte estimate. An unknown name
// is an error.
func For(name string) (Tokenizer, error) {
	switch name {
	case Estimate, "":
		return estimate{}, nil
	}
	b, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("tokenizer: unknown tokenizer %q (want %s, %s or %s)", name, CL100KBase, O200KBase, Estimate)
	}
	if err := b.ensure(); err != nil {
		return nil, err
	}
	return b, nil
}

// bpe is a tiktoken encoding, loaded on first use.
type bpe struct {
	name     string
	once     sync.Once
	enc      *tiktoken.Tiktoken
	err      error
	loadTime time.Duration // how long the load took, for tests and benchmarks
}

func newBPE(name string) *bpe { return &bpe{name: name} }

func (b *bpe) ensure() error {
	b.once.Do(func() {
		start := time.Now()
		enc, err := tiktoken.GetEncoding(b.name)
		b.loadTime = time.Since(start)
		if err != nil {
			b.err = fmt.Errorf("tokenizer: load %s: %w", b.name, err)
			return
		}
		b.enc = enc
	})
	return b.err
}

func (b *bpe) Name() string { return b.name }

// maxRun bounds the bytes tiktoken merges in one piece (see the package doc).
const maxRun = 256

// segmentSize is how much text is encoded at once: large enough that the
// per-call overhead vanishes, small enough to cut quickly.
const segmentSize = 4096

// nextSegment returns the end of the segment that starts at text[0]: the
// last piece boundary before segmentSize bytes, or a forced cut once maxRun
// bytes pass without one.
func nextSegment(text string) int {
	if len(text) <= maxRun {
		return len(text)
	}
	lastCut, sinceCut := 0, 0
	for i := 1; i < len(text); i++ {
		if text[i] == ' ' && text[i-1] != ' ' {
			lastCut, sinceCut = i, 0
			if i >= segmentSize {
				return i
			}
			continue
		}
		sinceCut++
		if sinceCut >= maxRun && utf8.RuneStart(text[i]) {
			if lastCut > 0 {
				return lastCut
			}
			return i
		}
	}
	return len(text)
}

func (b *bpe) Count(text string) int {
	text = validUTF8(text)
	n := 0
	for len(text) > 0 {
		end := nextSegment(text)
		n += len(b.enc.EncodeOrdinary(text[:end]))
		text = text[end:]
	}
	return n
}

func (b *bpe) Truncate(text string, max int) (string, bool) {
	text = validUTF8(text)
	if max < 1 {
		return "", text != ""
	}
	if len(text) <= max {
		// Every token is at least one byte.
		return text, false
	}
	// Whole segments while they fit; the one that does not is cut inside.
	kept := 0
	for rest := text; len(rest) > 0; {
		end := nextSegment(rest)
		n := len(b.enc.EncodeOrdinary(rest[:end]))
		if n > max {
			prefix, _ := b.truncateSegment(rest[:end], max)
			return text[:kept+len(prefix)], true
		}
		max -= n
		kept += end
		rest = rest[end:]
	}
	return text, false
}

// truncateSegment cuts one segment (at most a few KB, no long piece).
func (b *bpe) truncateSegment(text string, max int) (string, bool) {
	if max < 1 {
		return "", text != ""
	}
	toks := b.enc.EncodeOrdinary(text)
	if len(toks) <= max {
		return text, false
	}
	// Byte-level BPE tokens concatenate to exactly the text's bytes, so the
	// first n tokens decode to text[:end(n)]. Walk back from max tokens to
	// the nearest boundary that is also a rune boundary (a multibyte
	// character can span tokens). Re-encoding a prefix is not guaranteed to
	// give the same tokens (BPE is not prefix-stable), so the candidate is
	// checked and, in the rare case it counts more, the walk continues.
	n := max
	end := len(b.enc.Decode(toks[:n]))
	for n > 0 {
		if utf8.RuneStart(text[end]) && len(b.enc.EncodeOrdinary(text[:end])) <= max {
			return text[:end], true
		}
		n--
		end -= len(b.enc.Decode(toks[n : n+1]))
	}
	return "", true
}

// estimate is the bytes/4 rule.
type estimate struct{}

func (estimate) Name() string { return Estimate }

func (estimate) Count(text string) int {
	n := len(text)
	if !utf8.ValidString(text) {
		n = len(validUTF8(text))
	}
	return (n + 3) / 4
}

func (estimate) Truncate(text string, max int) (string, bool) {
	text = validUTF8(text)
	if max < 1 {
		return "", text != ""
	}
	// ceil(n/4) <= max exactly when n <= 4*max; the division avoids
	// overflowing 4*max.
	if (len(text)+3)/4 <= max {
		return text, false
	}
	end := 4 * max // < len(text) here, so no overflow
	for end > 0 && !utf8.RuneStart(text[end]) {
		end--
	}
	return text[:end], true
}

// validUTF8 returns text with each byte that is not part of a valid UTF-8
// encoding replaced by U+FFFD, as string([]rune(text)) does and as tiktoken
// sees the text; valid text is returned as is, without copying.
func validUTF8(text string) string {
	if utf8.ValidString(text) {
		return text
	}
	var sb strings.Builder
	sb.Grow(len(text) + 8)
	for _, r := range text {
		sb.WriteRune(r) // an invalid byte reads as one utf8.RuneError
	}
	return sb.String()
}
