package batchestest

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/backends/batches"
)

// RunResults is the conformance suite of batches.Results. open returns an
// empty Results.
func RunResults(t *testing.T, open func(t *testing.T) batches.Results) {
	t.Run("RecordStream", func(t *testing.T) { testRecordStream(t, open(t)) })
	t.Run("ConcurrentRecord", func(t *testing.T) { testConcurrentRecord(t, open(t)) })
}

func resultLine(cid string, kind batches.ResultKind) []byte {
	return fmt.Appendf(nil, `{"id":"batch_req_%s","custom_id":%q,"kind":%d}`+"\n", cid, cid, kind)
}

func record(t *testing.T, res batches.Results, batch string, i int64, cid string, kind batches.ResultKind) {
	t.Helper()
	if err := res.Record(t.Context(), batch, batches.Result{Index: i, CustomID: cid, Kind: kind, Line: resultLine(cid, kind)}); err != nil {
		t.Fatalf("record %s/%s: %v", batch, cid, err)
	}
}

func stream(t *testing.T, res batches.Results, batch string, kind batches.ResultKind) string {
	t.Helper()
	rc, size, err := res.Stream(t.Context(), batch, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != size {
		t.Errorf("stream of %s kind %d: %d bytes, announced %d", batch, kind, len(b), size)
	}
	return string(b)
}

func recorded(t *testing.T, res batches.Results, batch string) map[string]batches.ResultKind {
	t.Helper()
	got := map[string]batches.ResultKind{}
	for r, err := range res.Recorded(t.Context(), batch) {
		if err != nil {
			t.Fatal(err)
		}
		// Recorded's lines may or may not keep their newline.
		if strings.TrimSuffix(string(r.Line), "\n") != strings.TrimSuffix(string(resultLine(r.CustomID, r.Kind)), "\n") {
			t.Errorf("recorded line of %s: %q", r.CustomID, r.Line)
		}
		got[r.CustomID] = r.Kind
	}
	return got
}

func testRecordStream(t *testing.T, res batches.Results) {
	ctx := t.Context()
	// Recorded in an order other than the input's.
	record(t, res, "batch_a", 2, "c", batches.ResultOutput)
	record(t, res, "batch_a", 0, "a", batches.ResultOutput)
	record(t, res, "batch_a", 1, "b", batches.ResultError)
	record(t, res, "batch_b", 0, "a", batches.ResultError)
	// A second record of a custom_id keeps one result.
	record(t, res, "batch_a", 0, "a", batches.ResultOutput)
	if err := res.Sync(ctx, "batch_a"); err != nil {
		t.Fatal(err)
	}
	got := recorded(t, res, "batch_a")
	want := map[string]batches.ResultKind{"a": batches.ResultOutput, "b": batches.ResultError, "c": batches.ResultOutput}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("recorded %v, want %v", got, want)
	}
	out := stream(t, res, "batch_a", batches.ResultOutput)
	lines := strings.SplitAfter(out, "\n")
	lines = lines[:len(lines)-1]
	slices.Sort(lines)
	if want := []string{string(resultLine("a", 1)), string(resultLine("c", 1))}; !slices.Equal(lines, want) && !slices.Equal(lines, []string{want[0], want[0], want[1]}) {
		// The local spool appends: a second record of a custom_id the
		// runner never makes may show twice there; a shared store keeps one.
		t.Errorf("output %q", out)
	}
	if e := stream(t, res, "batch_a", batches.ResultError); e != string(resultLine("b", 2)) {
		t.Errorf("errors %q", e)
	}
	if e := stream(t, res, "batch_b", batches.ResultError); e != string(resultLine("a", 2)) {
		t.Errorf("batch_b errors %q", e)
	}
	if err := res.Delete(ctx, "batch_a"); err != nil {
		t.Fatal(err)
	}
	if got := recorded(t, res, "batch_a"); len(got) != 0 {
		t.Errorf("after delete: %v", got)
	}
	if got := recorded(t, res, "batch_b"); len(got) != 1 {
		t.Errorf("deleting batch_a touched batch_b: %v", got)
	}
	if out := stream(t, res, "batch_none", batches.ResultOutput); out != "" {
		t.Errorf("unknown batch streams %q", out)
	}
}

func testConcurrentRecord(t *testing.T, res batches.Results) {
	const n = 600
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cid := fmt.Sprintf("line-%04d", i)
			kind := batches.ResultOutput
			if i%7 == 0 {
				kind = batches.ResultError
			}
			if err := res.Record(t.Context(), "batch_c", batches.Result{Index: int64(i), CustomID: cid, Kind: kind, Line: resultLine(cid, kind)}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := res.Sync(t.Context(), "batch_c"); err != nil {
		t.Fatal(err)
	}
	if got := recorded(t, res, "batch_c"); len(got) != n {
		t.Errorf("%d results recorded, want %d", len(got), n)
	}
	out := stream(t, res, "batch_c", batches.ResultOutput) + stream(t, res, "batch_c", batches.ResultError)
	if c := strings.Count(out, "\n"); c != n {
		t.Errorf("%d lines streamed, want %d", c, n)
	}
}
