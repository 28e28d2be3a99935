package vectorstores

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

// Chunking. A file is read as a stream of pieces: a run of whitespace and
// the word after it (" hello", "\n\n## Title"), which is where tiktoken's
// split patterns cut too, so a chunk's tokens are the sum of its pieces'
// tokens. A chunk is the longest run of pieces of at most maxTokens tokens;
// the next chunk starts with the longest tail of it of at most overlap
// tokens (OpenAI's chunk_overlap_tokens), so a passage cut by a chunk
// boundary is whole in one of the two chunks. Only one chunk's pieces are
// held in memory, whatever the file's size.

// maxPieceBytes cuts a run without whitespace (minified JSON, base64) into
// pieces of at most this many bytes, bounding memory and the tokenizer's
// work per piece (it is quadratic in a piece's length).
const maxPieceBytes = 1024

// errNotText is content that is not valid UTF-8.
var errNotText = errors.New("vectorstores: not valid UTF-8 text")

// errTooManyTokens is a file over MaxFileTokens.
var errTooManyTokens = errors.New("vectorstores: too many tokens")

type piece struct {
	text   string
	tokens int
}

// chunker cuts text read from a stream into overlapping chunks.
type chunker struct {
	rd        *bufio.Reader
	tok       tokenizer.Tokenizer
	maxTokens int
	overlap   int
	maxTotal  int // 0: no limit on the file's tokens

	window  []piece // the chunk being built, overlap first
	wTokens int
	fresh   int     // pieces of the window not yet part of an emitted chunk
	queue   []piece // pieces read ahead (an oversized piece split up)
	total   int
	eof     bool
	sb      strings.Builder
}

func newChunker(r io.Reader, tok tokenizer.Tokenizer, maxTokens, overlap, maxTotal int) *chunker {
	return &chunker{rd: bufio.NewReaderSize(r, 64<<10), tok: tok, maxTokens: maxTokens, overlap: overlap, maxTotal: maxTotal}
}

// readPiece reads the next piece: whitespace, then non-whitespace up to the
// next whitespace, at most maxPieceBytes. ok is false at the end.
func (c *chunker) readPiece() (string, bool, error) {
	c.sb.Reset()
	inWord := false
	for c.sb.Len() < maxPieceBytes {
		r, size, err := c.rd.ReadRune()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", false, err
		}
		if r == utf8.RuneError && size == 1 {
			return "", false, errNotText
		}
		if unicode.IsSpace(r) {
			if inWord {
				if err := c.rd.UnreadRune(); err != nil {
					return "", false, err
				}
				break
			}
		} else {
			inWord = true
		}
		c.sb.WriteRune(r)
	}
	if c.sb.Len() == 0 {
		return "", false, nil
	}
	return c.sb.String(), true, nil
}

// next returns the next piece, splitting one over maxTokens into pieces
// that fit (a piece alone can be that long only in text without spaces).
func (c *chunker) next() (piece, bool, error) {
	if len(c.queue) > 0 {
		p := c.queue[0]
		c.queue = c.queue[1:]
		return p, true, nil
	}
	if c.eof {
		return piece{}, false, nil
	}
	text, ok, err := c.readPiece()
	if err != nil || !ok {
		c.eof = !ok
		return piece{}, false, err
	}
	p := piece{text: text, tokens: c.tok.Count(text)}
	c.total += p.tokens
	if c.maxTotal > 0 && c.total > c.maxTotal {
		return piece{}, false, errTooManyTokens
	}
	if p.tokens <= c.maxTokens {
		return p, true, nil
	}
	for rest := text; rest != ""; {
		head, _ := c.tok.Truncate(rest, c.maxTokens)
		if head == "" { // a single rune over the limit cannot happen; never loop
			head = rest
		}
		c.queue = append(c.queue, piece{text: head, tokens: c.tok.Count(head)})
		rest = rest[len(head):]
	}
	return c.next()
}

// Next returns the next chunk's text (trimmed of surrounding whitespace; a
// chunk of whitespace only is skipped), or ok false at the end of the text.
func (c *chunker) Next() (string, bool, error) {
	for {
		var held *piece
		for {
			p, ok, err := c.next()
			if err != nil {
				return "", false, err
			}
			if !ok {
				break
			}
			if c.wTokens+p.tokens > c.maxTokens {
				held = &p
				break
			}
			c.window = append(c.window, p)
			c.wTokens += p.tokens
			c.fresh++
		}
		if c.fresh == 0 {
			return "", false, nil // the end: everything was emitted
		}
		var sb strings.Builder
		for _, p := range c.window {
			sb.WriteString(p.text)
		}
		text := strings.TrimSpace(sb.String())
		c.fresh = 0
		if held == nil {
			c.window, c.wTokens = nil, 0
		} else {
			c.keepOverlap(held.tokens)
			c.window = append(c.window, *held)
			c.wTokens += held.tokens
			c.fresh = 1
		}
		if text != "" {
			return text, true, nil
		}
	}
}

// keepOverlap drops the window's head, keeping the longest tail of at most
// overlap tokens that leaves room for a piece of next tokens and is shorter
// than the window, so every chunk adds something new.
func (c *chunker) keepOverlap(next int) {
	budget := min(c.overlap, c.maxTokens-next)
	start, kept := len(c.window), 0
	for start > 1 && kept+c.window[start-1].tokens <= budget {
		start--
		kept += c.window[start].tokens
	}
	c.window = append(c.window[:0], c.window[start:]...)
	c.wTokens = kept
}
