package vectorstores

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/tokenizer"
)

func chunkAll(t *testing.T, text string, tok tokenizer.Tokenizer, maxTokens, overlap int) []string {
	t.Helper()
	c := newChunker(strings.NewReader(text), tok, maxTokens, overlap, 0)
	var out []string
	for {
		s, ok, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, s)
	}
}

func TestChunker(t *testing.T) {
	cl, err := tokenizer.For(tokenizer.CL100KBase)
	if err != nil {
		t.Fatal(err)
	}
	words := func(n int) string {
		var sb strings.Builder
		for i := range n {
			fmt.Fprintf(&sb, "w%04d ", i)
		}
		return sb.String()
	}
	tests := []struct {
		name              string
		text              string
		max, overlap      int
		wantChunks        int // 0: do not check
		checkWordsInOrder bool
	}{
		{"empty", "", 100, 50, 0, false},
		{"whitespace only", " \n\t ", 100, 50, 0, false},
		{"one short chunk", "hello world", 100, 50, 1, true},
		{"auto sizes", words(2000), AutoChunkTokens, AutoOverlapTokens, 0, true},
		{"static no overlap", words(500), 100, 0, 0, true},
		{"static overlap", words(500), 100, 50, 0, true},
		{"text without spaces", strings.Repeat("abcdefghij", 2000), 100, 20, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chunks := chunkAll(t, tc.text, cl, tc.max, tc.overlap)
			if strings.TrimSpace(tc.text) == "" {
				if len(chunks) != 0 {
					t.Fatalf("chunks of blank text: %q", chunks)
				}
				return
			}
			if tc.wantChunks > 0 && len(chunks) != tc.wantChunks {
				t.Fatalf("%d chunks, want %d", len(chunks), tc.wantChunks)
			}
			for i, c := range chunks {
				if n := cl.Count(c); n > tc.max {
					t.Errorf("chunk %d: %d tokens > %d", i, n, tc.max)
				}
			}
			// Consecutive chunks of words share a tail/head of at most
			// overlap tokens, and close to it: a word is 2-3 tokens here.
			// (Text without spaces is periodic here: no telling the
			// overlap from the repetition.)
			for i := 1; tc.checkWordsInOrder && i < len(chunks); i++ {
				prev, cur := chunks[i-1], chunks[i]
				shared := 0
				for k := min(len(prev), len(cur)); k > 0; k-- {
					if strings.HasSuffix(prev, cur[:k]) {
						shared = k
						break
					}
				}
				n := cl.Count(cur[:shared])
				if tc.overlap == 0 && shared > 0 {
					t.Errorf("chunk %d repeats %q without overlap", i, cur[:shared])
				}
				if n > tc.overlap+1 {
					t.Errorf("chunk %d overlaps %d tokens > %d", i, n, tc.overlap)
				}
				if tc.overlap > 0 && n < tc.overlap-4 {
					t.Errorf("chunk %d overlaps only %d tokens of %d", i, n, tc.overlap)
				}
			}
			if tc.checkWordsInOrder {
				// Dropping each chunk's overlap gives back every word once,
				// in order.
				var got []string
				for _, c := range chunks {
					for _, w := range strings.Fields(c) {
						if len(got) == 0 || w > got[len(got)-1] {
							got = append(got, w)
						}
					}
				}
				if strings.Join(got, " ") != strings.Join(strings.Fields(tc.text), " ") {
					t.Errorf("words lost or reordered")
				}
			}
		})
	}
}

func TestChunkerErrors(t *testing.T) {
	est, _ := tokenizer.For(tokenizer.Estimate)
	tests := []struct {
		name     string
		text     string
		maxTotal int
		want     error
	}{
		{"invalid UTF-8", "ok \xff\xfe", 0, errNotText},
		{"too many tokens", strings.Repeat("word ", 100), 50, errTooManyTokens},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newChunker(strings.NewReader(tc.text), est, 100, 0, tc.maxTotal)
			var err error
			for {
				var ok bool
				if _, ok, err = c.Next(); err != nil || !ok {
					break
				}
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("err %v, want %v", err, tc.want)
			}
		})
	}
}
