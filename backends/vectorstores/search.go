package vectorstores

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// Scoring. A chunk's score for a query blends the cosine similarity of
// their embeddings (negative similarity counts as 0) with lexical overlap,
// the fraction of the query's distinct words that occur as words in the
// chunk (case-insensitive; a word is a run of letters and digits):
//
//	score = semanticWeight * max(0, cosine) + lexicalWeight * overlap
//
// so it lies in [0, 1], as OpenAI's scores do. The lexical part makes a
// chunk containing the query's words win over chunks that are merely close
// in embedding space, and keeps keyword search meaningful with embeddings
// that are not semantic (the fake provider's vectors are hashes of the
// text: unrelated texts score about 0 ± 0.03). A query without words
// (punctuation only) is scored by cosine alone. With several queries a
// chunk takes its best score.
const (
	semanticWeight = 0.7
	lexicalWeight  = 0.3
)

// searchParams is a validated search.
type searchParams struct {
	queries   []string
	max       int
	filter    *filter // nil: every file
	threshold float64 // results scoring below are dropped
}

// Search returns the n best chunks of owner's stores storeIDs for query
// (n is clamped to 1..MaxResults), best first. A store that is not the
// owner's (or does not exist) is an error matching ErrNotFound, naming it
// (*NotFoundError). Searching a store counts as activity: it moves its
// expires_after anchor.
func (s *Service) Search(ctx context.Context, owner string, storeIDs []string, query string, n int) ([]Result, error) {
	return s.search(ctx, owner, storeIDs, searchParams{queries: []string{query}, max: min(MaxResults, max(1, n))})
}

// CheckStores returns an error matching ErrNotFound (a *NotFoundError) for
// the first of storeIDs that is not a live store of owner, nil if all are.
func (s *Service) CheckStores(ctx context.Context, owner string, storeIDs []string) error {
	for _, id := range storeIDs {
		if _, err := s.getStore(ctx, owner, id); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) search(ctx context.Context, owner string, storeIDs []string, p searchParams) ([]Result, error) {
	ids := slices.Compact(slices.Sorted(slices.Values(storeIDs)))
	if err := s.CheckStores(ctx, owner, ids); err != nil {
		return nil, err
	}
	qvecs, err := s.embed(ctx, owner, p.queries)
	if err != nil {
		return nil, err
	}
	qterms := make([][]string, len(p.queries))
	for i, q := range p.queries {
		qterms[i] = distinct(terms(q))
	}
	top := &topK{k: p.max}
	for _, id := range ids {
		if err := s.scan(ctx, id, qvecs, qterms, p, top); err != nil {
			return nil, err
		}
		if err := s.touch(ctx, id); err != nil {
			s.log.Error("vectorstores: record store activity", "store", id, "err", err)
		}
	}
	return top.items, nil
}

// scan scores every chunk of the completed files of store id, reading them
// one row at a time: memory is the query vectors and the top k, whatever
// the store's size.
func (s *Service) scan(ctx context.Context, id string, qvecs [][]float32, qterms [][]string, p searchParams, top *topK) error {
	// The store's data keys, read before the scan: a scan holds its
	// connection, and the keys are few (one per file).
	keys, err := s.chunkKeys(ctx, id)
	if err != nil {
		return fmt.Errorf("vectorstores: search %s: %w", id, err)
	}
	var (
		mismatched int
		allowed    = map[string]bool{} // filter outcome per file
	)
	err = s.store.Scan(ctx, id, func(c ScannedChunk) error {
		// The text is opened only when scoring or a result needs it: a
		// search reads every chunk, and most score on the vector alone.
		// A chunk whose key is gone belongs to a file detached since the
		// scan began: skipped, as the next scan would not see it.
		text := c.Text
		opened, gone := c.Sealed == nil, false
		open := func() error {
			if opened {
				return nil
			}
			pt, err := keys.open(ctx, FileGen{c.FileID, c.Gen}, chunkField(c.Seq), c.Sealed)
			if errors.Is(err, envelope.ErrNoKey) {
				gone = true
				return nil
			}
			if err != nil {
				return err
			}
			text, opened = string(pt), true
			return nil
		}
		if p.filter != nil {
			ok, seen := allowed[c.FileID]
			if !seen {
				a := gjson.Result{}
				if c.Attributes != nil {
					a = gjson.ParseBytes(c.Attributes)
				}
				ok = p.filter.match(a)
				allowed[c.FileID] = ok
			}
			if !ok {
				return nil
			}
		}
		var words map[string]bool
		best := -1.0
		for i, q := range qvecs {
			cos, ok := dot(q, c.Vector)
			if !ok {
				mismatched++
				break
			}
			sc := semanticWeight * max(0, min(1, cos))
			if len(qterms[i]) == 0 {
				sc = max(0, min(1, cos))
			} else {
				if words == nil {
					if err := open(); err != nil {
						return err
					}
					if gone {
						break
					}
					words = wordSet(text)
				}
				hits := 0
				for _, t := range qterms[i] {
					if words[t] {
						hits++
					}
				}
				sc += lexicalWeight * float64(hits) / float64(len(qterms[i]))
			}
			best = max(best, sc)
		}
		if gone || best < 0 || best < p.threshold || !top.wants(best) {
			return nil
		}
		if err := open(); err != nil {
			return err
		}
		if gone {
			return nil
		}
		top.add(Result{FileID: c.FileID, Filename: c.Filename, Score: best, Text: text, Attributes: c.Attributes})
		return nil
	})
	if err != nil {
		return fmt.Errorf("vectorstores: search %s: %w", id, err)
	}
	if mismatched > 0 {
		s.log.Warn("vectorstores: chunks embedded with another model skipped; attach their files again",
			"store", id, "chunks", mismatched)
	}
	return nil
}

// topK keeps the k best results, best first (insertion: k is at most 50).
type topK struct {
	k     int
	items []Result
}

func (t *topK) wants(score float64) bool {
	return len(t.items) < t.k || score > t.items[len(t.items)-1].Score
}

func (t *topK) add(r Result) {
	i, _ := slices.BinarySearchFunc(t.items, r.Score, func(e Result, sc float64) int {
		switch {
		case e.Score > sc:
			return -1
		case e.Score < sc:
			return 1
		}
		return -1 // equal scores: the earlier result stays first
	})
	t.items = slices.Insert(t.items, i, r)
	if len(t.items) > t.k {
		t.items = t.items[:t.k]
	}
}

// terms splits text into lower-cased words: runs of letters and digits.
func terms(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

func distinct(ts []string) []string {
	slices.Sort(ts)
	return slices.Compact(ts)
}

func wordSet(text string) map[string]bool {
	ts := terms(text)
	m := make(map[string]bool, len(ts))
	for _, t := range ts {
		m[t] = true
	}
	return m
}
