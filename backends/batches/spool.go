package batches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/tidwall/gjson"
)

// The spool is the runner's local state, outside the Store: one directory
// DATA_DIR/batches/<id>/ per batch this process is running, holding
//
//   - input.jsonl, a snapshot of the input file (a copy out of the files
//     store, made when the batch is first read): scratch, it can always be
//     made again while the input file exists;
//   - output.jsonl and errors.jsonl, the results so far: the only copy of
//     them until finish turns them into batch_output files in the files
//     store. They are what makes a resumed batch skip the lines already
//     answered, and the Store's counts are checkpoints of them (synced
//     first, so the Store never counts a result the spool could lose).
//
// So the spool is durable only on this machine's disk: a batch resumes
// here, after a restart, and not on another replica. It is the local
// Results (localResults, results.go); fleet mode records results in
// PostgreSQL instead (PostgresResults) and keeps only the input snapshot
// here.

// Spool file names inside DATA_DIR/batches/<id>/.
const (
	spoolOutput = "output.jsonl"
	spoolErrors = "errors.jsonl"
)

// spoolFile is one of a running batch's result files. Lines are appended
// whole, one write each under the mutex, so concurrent workers never
// interleave; a crash can leave at most a partial last line, which
// openSpool cuts off.
type spoolFile struct {
	mu     sync.Mutex
	f      *os.File
	dirty  bool  // written since the last sync
	broken error // a failed write: the file may end in a partial line
}

// append writes one line (ending in a newline).
func (sf *spoolFile) append(line []byte) error {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.broken != nil {
		return sf.broken
	}
	if _, err := sf.f.Write(line); err != nil {
		// Writing after a short write would put a line after a fragment;
		// stop here and let openSpool cut the fragment on the next run.
		sf.broken = fmt.Errorf("write spool: %w", err)
		return sf.broken
	}
	sf.dirty = true
	return nil
}

// sync flushes the file to disk. The lock is not held during the fsync,
// which can take a while: workers keep appending meanwhile.
func (sf *spoolFile) sync() error {
	sf.mu.Lock()
	f := sf.f
	if !sf.dirty || sf.broken != nil || f == nil {
		sf.mu.Unlock()
		return nil
	}
	sf.dirty = false
	sf.mu.Unlock()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync spool: %w", err)
	}
	return nil
}

// spool is a batch's pair of result files.
type spool struct {
	out, errs *spoolFile
}

// spoolPath is batch id's spool directory.
func (s *Service) spoolPath(id string) string { return filepath.Join(s.spoolDir, id) }

// dropResults removes a finished batch's results and its local scratch
// (the input snapshot).
func (s *Service) dropResults(ctx context.Context, id string) {
	if err := s.results.Delete(context.WithoutCancel(ctx), id); err != nil {
		s.log.Warn("batches: removing a batch's results failed", "batch", id, "err", err)
	}
	if s.local == nil {
		if err := os.RemoveAll(s.spoolPath(id)); err != nil {
			s.log.Warn("batches: removing a spool directory failed", "batch", id, "err", err)
		}
	}
}

// sweepSpools removes spool directories left by batches that ended (or no
// longer exist) before their directory could be removed.
func (s *Service) sweepSpools(ctx context.Context) {
	entries, err := os.ReadDir(s.spoolDir)
	if err != nil {
		s.log.Warn("batches: listing spool directories failed", "err", err)
		return
	}
	for _, e := range entries {
		active, err := s.store.IsActive(ctx, e.Name())
		if err != nil || active {
			continue
		}
		if err := os.RemoveAll(s.spoolPath(e.Name())); err != nil {
			s.log.Warn("batches: removing a leftover spool directory failed", "batch", e.Name(), "err", err)
		}
	}
}

// content returns the file's results from the start, and their size.
func (sf *spoolFile) content() (io.Reader, int64, error) {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if sf.f == nil {
		return nil, 0, fmt.Errorf("spool: %w", errSpoolClosed)
	}
	fi, err := sf.f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	if _, err := sf.f.Seek(0, io.SeekStart); err != nil {
		return nil, 0, fmt.Errorf("spool: %w", err)
	}
	return io.LimitReader(sf.f, fi.Size()), fi.Size(), nil
}

// spoolState is what the spool files already hold: the custom_ids with a
// result (when asked for) and the counts and usage of those results.
type spoolState struct {
	done   map[idKey]struct{} // nil unless asked for
	counts Counts
}

// openSpoolDir opens (creating) the spool files in dir and reads what they
// hold. Everything after the last complete, well-formed line (a line cut
// short by a crash) is truncated away, so the files hold whole results only
// and those lines' custom_ids are sent again. withDone asks for the set of
// custom_ids done.
func openSpoolDir(dir string, maxLine int, withDone bool) (*spool, spoolState, error) {
	var st spoolState
	if withDone {
		st.done = map[idKey]struct{}{}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, st, fmt.Errorf("spool: %w", err)
	}
	sp := &spool{}
	for _, name := range []string{spoolOutput, spoolErrors} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			sp.close()
			return nil, st, fmt.Errorf("spool: %w", err)
		}
		sf := &spoolFile{f: f}
		if name == spoolOutput {
			sp.out = sf
		} else {
			sp.errs = sf
		}
		if err := scanSpool(f, maxLine, name == spoolOutput, &st); err != nil {
			sp.close()
			return nil, st, fmt.Errorf("spool %s: %w", name, err)
		}
	}
	return sp, st, nil
}

// scanSpool reads f's result lines into st and truncates f after the last
// good one.
func scanSpool(f *os.File, maxLine int, output bool, st *spoolState) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	lr := newLineReader(f, maxLine)
	var good int64
	for {
		line, tooLong, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if tooLong || !complete || !gjson.ValidBytes(line) {
			break
		}
		cid := gjson.GetBytes(line, "custom_id")
		if cid.Type != gjson.String {
			break
		}
		if st.done != nil {
			st.done[keyOf(cid.Str)] = struct{}{}
		}
		if output {
			st.counts.Completed++
			st.counts.addUsage(gjson.GetBytes(line, "response.body.usage"))
		} else {
			st.counts.Failed++
		}
		good = lr.off
	}
	st2, err := f.Stat()
	if err != nil {
		return err
	}
	if st2.Size() != good {
		if err := f.Truncate(good); err != nil {
			return err
		}
	}
	return nil
}

// addUsage adds a response's usage object: chat completions and embeddings
// (prompt_tokens, completion_tokens) or responses (input_tokens,
// output_tokens). One pass over its keys: it runs for every result.
func (c *Counts) addUsage(u gjson.Result) {
	if !u.IsObject() {
		return
	}
	var in, out, total int64
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "input_tokens", "prompt_tokens":
			in += v.Int()
		case "output_tokens", "completion_tokens":
			out += v.Int()
		case "total_tokens":
			total += v.Int()
		case "input_tokens_details", "prompt_tokens_details":
			c.CachedTokens += v.Get("cached_tokens").Int()
		case "output_tokens_details", "completion_tokens_details":
			c.ReasoningTokens += v.Get("reasoning_tokens").Int()
		}
		return true
	})
	if total == 0 {
		total = in + out
	}
	c.InputTokens += in
	c.OutputTokens += out
	c.TotalTokens += total
}

func (sp *spool) sync() error {
	return errors.Join(sp.out.sync(), sp.errs.sync())
}

// close closes the files; it may be called more than once.
func (sp *spool) close() {
	for _, sf := range []*spoolFile{sp.out, sp.errs} {
		if sf == nil {
			continue
		}
		sf.mu.Lock()
		if sf.f != nil {
			_ = sf.f.Close()
			sf.f = nil
			sf.broken = errSpoolClosed
		}
		sf.mu.Unlock()
	}
}

var errSpoolClosed = errors.New("spool closed")

// spoolInput is the batch's own copy of its input file, made when it is
// first read: the content copied out of the files store (where it is
// sealed). From then on the batch reads only this, so deleting or expiring
// the input file cannot fail a batch after a restart or leave lines
// unsent; the copy goes with the spool directory when the batch ends.
const spoolInput = "input.jsonl"

// openInput returns batch b's input: its snapshot in the spool directory,
// made now from the files store if there is none yet. It is an error
// wrapping files.ErrNotFound when there is no snapshot and the input file is
// gone.
func (s *Service) openInput(ctx context.Context, b Batch) (*os.File, error) {
	dir := s.spoolPath(b.ID)
	dst := filepath.Join(dir, spoolInput)
	f, err := os.Open(dst)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open input snapshot: %w", err)
	}
	_, in, err := s.files.Open(ctx, b.Owner, b.InputFileID)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("input snapshot: %w", err)
	}
	// A copy, not a link to the blob: the blob is sealed. The open handle
	// reads the whole content even if the file is deleted meanwhile.
	if err := copyInput(in, dst); err != nil {
		return nil, err
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("input snapshot: %w", err)
	}
	return os.Open(dst)
}

// copyInput copies in to dst through a temporary file, fsynced before it is
// renamed into place, so dst is always whole.
func copyInput(in io.Reader, dst string) error {
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("input snapshot: %w", err)
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("input snapshot: %w", err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
