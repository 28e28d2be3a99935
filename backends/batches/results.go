package batches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidwall/gjson"
)

// Results keeps each running batch's line results durably as they
// complete: what makes a resumed batch (on this replica or, with a shared
// implementation, on another) skip the lines already answered, and what
// the output and error files are assembled from when the batch ends. The
// local implementation is the spool (spool.go, one node); PostgresResults
// keeps them in the shared database. resultstest... is the conformance
// suite (RunResults in batchestest).
//
// A Record that returned nil is durable once Sync returns (the Store's
// counts are checkpoints of the results, written after a Sync). Recording
// the same custom_id twice keeps one of the two.
type Results interface {
	// Record records one line's result: a whole JSONL line (ending in a
	// newline) of the output (ResultOutput) or error (ResultError) file.
	Record(ctx context.Context, batchID string, r Result) error
	// Sync makes every Record so far durable.
	Sync(ctx context.Context, batchID string) error
	// Recorded yields the results recorded for the batch (Line set, with
	// or without its newline, valid until the next iteration).
	Recorded(ctx context.Context, batchID string) iter.Seq2[Result, error]
	// Stream returns the lines of one kind, concatenated, and their total
	// size: the content of the batch's output or error file.
	Stream(ctx context.Context, batchID string, kind ResultKind) (io.ReadCloser, int64, error)
	// Delete removes the batch's results (and any local scratch).
	Delete(ctx context.Context, batchID string) error
}

// ResultKind says which file a result belongs in.
type ResultKind int16

// Result kinds.
const (
	ResultOutput ResultKind = 1
	ResultError  ResultKind = 2
)

// Result is one line's result.
type Result struct {
	// Index is the line's position among the input's request lines (-1
	// where an implementation does not keep it).
	Index    int64
	CustomID string
	Kind     ResultKind
	Line     []byte
}

// recordedState reads what is recorded for a batch: the custom_ids with a
// result (when withDone) and the counts and usage of those results.
func recordedState(ctx context.Context, res Results, id string, withDone bool) (spoolState, error) {
	var st spoolState
	if withDone {
		st.done = map[idKey]struct{}{}
	}
	for r, err := range res.Recorded(ctx, id) {
		if err != nil {
			return st, err
		}
		if st.done != nil {
			st.done[keyOf(r.CustomID)] = struct{}{}
		}
		if r.Kind == ResultOutput {
			st.counts.Completed++
			st.counts.addUsage(gjson.GetBytes(r.Line, "response.body.usage"))
		} else {
			st.counts.Failed++
		}
	}
	return st, nil
}

// localResults is the spool as Results: output.jsonl and errors.jsonl in
// the batch's spool directory, opened on first use and kept open until
// Delete (or Close).
type localResults struct {
	dir     func(id string) string
	maxLine int

	mu     sync.Mutex
	spools map[string]*spool
}

// NewLocalResults is the spool as a Results on its own, for tests and the
// conformance suite: each batch's files in dir/<batch id>/.
func NewLocalResults(dir string) Results {
	return newLocalResults(func(id string) string { return filepath.Join(dir, id) }, 64<<20)
}

func newLocalResults(dir func(string) string, maxLine int) *localResults {
	return &localResults{dir: dir, maxLine: maxLine, spools: map[string]*spool{}}
}

// open returns batch id's open spool, opening it (which cuts off a partial
// last line) on first use.
func (l *localResults) open(id string) (*spool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp, ok := l.spools[id]; ok {
		return sp, nil
	}
	sp, _, err := openSpoolDir(l.dir(id), l.maxLine, false)
	if err != nil {
		return nil, err
	}
	l.spools[id] = sp
	return sp, nil
}

func (l *localResults) Record(_ context.Context, id string, r Result) error {
	sp, err := l.open(id)
	if err != nil {
		return err
	}
	if r.Kind == ResultOutput {
		return sp.out.append(r.Line)
	}
	return sp.errs.append(r.Line)
}

func (l *localResults) Sync(_ context.Context, id string) error {
	sp, err := l.open(id)
	if err != nil {
		return err
	}
	return sp.sync()
}

func (l *localResults) Recorded(_ context.Context, id string) iter.Seq2[Result, error] {
	return func(yield func(Result, error) bool) {
		sp, err := l.open(id)
		if err != nil {
			yield(Result{}, err)
			return
		}
		for _, p := range []struct {
			sf   *spoolFile
			kind ResultKind
		}{{sp.out, ResultOutput}, {sp.errs, ResultError}} {
			if err := p.sf.sync(); err != nil {
				yield(Result{}, err)
				return
			}
			rd, _, err := p.sf.content()
			if err != nil {
				yield(Result{}, err)
				return
			}
			lr := newLineReader(rd, l.maxLine)
			for {
				line, _, _, err := lr.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					yield(Result{}, fmt.Errorf("spool: %w", err))
					return
				}
				r := Result{Index: -1, CustomID: gjson.GetBytes(line, "custom_id").Str, Kind: p.kind, Line: line}
				if !yield(r, nil) {
					return
				}
			}
		}
	}
}

func (l *localResults) Stream(_ context.Context, id string, kind ResultKind) (io.ReadCloser, int64, error) {
	sp, err := l.open(id)
	if err != nil {
		return nil, 0, err
	}
	sf := sp.out
	if kind == ResultError {
		sf = sp.errs
	}
	rd, size, err := sf.content()
	if err != nil {
		return nil, 0, err
	}
	return io.NopCloser(rd), size, nil
}

// Delete closes the spool files and removes the batch's spool directory
// (input snapshot included).
func (l *localResults) Delete(_ context.Context, id string) error {
	l.mu.Lock()
	if sp, ok := l.spools[id]; ok {
		sp.close()
		delete(l.spools, id)
	}
	l.mu.Unlock()
	if err := os.RemoveAll(l.dir(id)); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// forget closes batch id's spool files without removing them (its run
// stopped here; it resumes from them later).
func (l *localResults) forget(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sp, ok := l.spools[id]; ok {
		sp.close()
		delete(l.spools, id)
	}
}
