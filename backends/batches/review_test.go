package batches

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// TestInputDeletedMidRunSurvivesRestart: once a batch has started, it owns
// its input. Deleting (or expiring) the input file and then restarting the
// runner must neither fail the batch nor lose the lines not yet sent: every
// line ends with exactly one result.
func TestInputDeletedMidRunSurvivesRestart(t *testing.T) {
	const n = 300
	e := newEnv(t, envConfig{
		opts: Options{Concurrency: 4},
		fake: fake.Options{Fault: fake.Fault{Delay: 10 * time.Millisecond}},
	})
	e.run()
	input := e.upload("alice", files.PurposeBatch, chatLines(n))
	id := e.create("alice", input, "/v1/chat/completions").ID
	e.wait("alice", id, "partly done", func(b batchView) bool { return b.RequestCounts.Completed >= 20 })
	if err := e.files.Delete(context.Background(), "alice", input); err != nil {
		t.Fatal(err)
	}
	e.restart()
	b, raw := e.wait("alice", id, "finished", func(b batchView) bool { return Terminal(b.Status) })
	if b.Status != StatusCompleted || b.RequestCounts.Total != n || b.RequestCounts.Completed != n || b.RequestCounts.Failed != 0 {
		t.Fatalf("after the input was deleted and the runner restarted: %s", raw)
	}
	seen := map[string]int{}
	for _, l := range e.lines("alice", b.OutputFileID) {
		seen[l.CustomID]++
	}
	for i := range n {
		if c := seen[fmt.Sprintf("req-%d", i)]; c != 1 {
			t.Errorf("req-%d has %d results", i, c)
		}
	}
	// The spool goes just after the batch turns terminal.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err := os.Stat(filepath.Join(e.dir, "batches", id))
		if os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spool directory (and its input snapshot) left behind: %v", err)
		}
	}
}

// concurrencyGateway records the most lines it had in flight at once.
type concurrencyGateway struct {
	next          Gateway
	mu            sync.Mutex
	inFlight, max int
}

func (g *concurrencyGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	g.mu.Lock()
	g.inFlight++
	g.max = max(g.max, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	time.Sleep(20 * time.Millisecond)
	return g.next.Do(ctx, owner, origin, method, path, body)
}

// TestInFlightBudgetCountsCustomIDs: a line in flight holds its custom_id as
// well as its body, so the in-flight byte budget must count both. Lines with
// 200 KB custom_ids and tiny bodies under a 256 KiB budget may go one at a
// time only.
func TestInFlightBudgetCountsCustomIDs(t *testing.T) {
	gw := &concurrencyGateway{}
	e := newEnv(t, envConfig{
		opts: Options{MaxInFlightBytes: 4 * budgetUnit},
		wrap: func(g Gateway) Gateway { gw.next = g; return gw },
	})
	e.run()
	var sb strings.Builder
	for i := range 6 {
		sb.WriteString(chatLine(fmt.Sprintf("%06d-%s", i, strings.Repeat("x", 200_000)), "m", "hi"))
		sb.WriteByte('\n')
	}
	id := e.create("alice", e.upload("alice", files.PurposeBatch, sb.String()), "/v1/chat/completions").ID
	b, raw := e.wait("alice", id, "finished", func(b batchView) bool { return Terminal(b.Status) })
	if b.Status != StatusCompleted || b.RequestCounts.Completed != 6 {
		t.Fatalf("%.300s", raw)
	}
	if gw.max > 1 {
		t.Errorf("%d lines with 200 KB custom_ids in flight at once under a 256 KiB budget", gw.max)
	}
}

// TestHead: HEAD is answered wherever GET is, like GET (an unknown batch is
// the same 404).
func TestHead(t *testing.T) {
	e := newEnv(t, envConfig{})
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(1)), "/v1/chat/completions").ID
	for _, tt := range []struct {
		owner, path string
		status      int
	}{
		{"alice", "/v1/batches", 200},
		{"alice", "/v1/batches/" + id, 200},
		{"bob", "/v1/batches/" + id, 404},
	} {
		if code, body, _ := e.call(tt.owner, http.MethodHead, tt.path, ""); code != tt.status {
			t.Errorf("HEAD %s as %s: %d %s", tt.path, tt.owner, code, body)
		}
	}
}

// gatedGateway holds every request until open is closed.
type gatedGateway struct {
	next     Gateway
	open     chan struct{}
	inFlight atomic.Int64
}

func (g *gatedGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	g.inFlight.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.next.Do(ctx, owner, origin, method, path, body)
}

// TestWindowEndsWithEveryLineInFlight: when the completion window ends while
// the last lines are in flight and they then all answer, every line has a
// result: the batch is completed, not expired.
func TestWindowEndsWithEveryLineInFlight(t *testing.T) {
	clk := newClock(time.Now())
	gw := &gatedGateway{open: make(chan struct{})}
	e := newEnv(t, envConfig{
		opts: Options{Now: clk.Now, Concurrency: 4},
		wrap: func(g Gateway) Gateway { gw.next = g; return gw },
	})
	e.run()
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(3)), "/v1/chat/completions").ID
	deadline := time.Now().Add(10 * time.Second)
	for gw.inFlight.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the lines were never sent")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(24*time.Hour + time.Second)
	time.Sleep(10 * e.opts.ProgressInterval) // the runner notices the window has ended
	close(gw.open)
	b, raw := e.wait("alice", id, "finished", func(b batchView) bool { return Terminal(b.Status) })
	if b.Status != StatusCompleted || b.RequestCounts.Completed != 3 || b.ErrorFileID != "" {
		t.Errorf("every line answered, yet: %s", raw)
	}
}

// bigAnswerGateway answers every line 200 with a body of size bytes.
type bigAnswerGateway struct {
	size  int
	calls atomic.Int64
}

func (g *bigAnswerGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	g.calls.Add(1)
	rec := httptest.NewRecorder()
	rec.Header().Set("content-type", "application/json")
	rec.WriteHeader(http.StatusOK)
	rec.WriteString(`{"object":"chat.completion","pad":"` + strings.Repeat("x", g.size) + `"}`)
	return rec.Result(), nil
}

// TestResponseTooLargeNotRetried: an answer over MaxResponseBytes is the
// same answer every time, and each attempt is a model call the owner pays
// for, so it is recorded as response_too_large after one attempt.
func TestResponseTooLargeNotRetried(t *testing.T) {
	gw := &bigAnswerGateway{size: 4096}
	e := newEnv(t, envConfig{
		opts: Options{MaxResponseBytes: 1024, MaxRetries: 3},
		wrap: func(Gateway) Gateway { return gw },
	})
	e.run()
	id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(2)), "/v1/chat/completions").ID
	b, raw := e.wait("alice", id, "finished", func(b batchView) bool { return Terminal(b.Status) })
	if b.Status != StatusCompleted || b.RequestCounts.Failed != 2 || b.RequestCounts.Completed != 0 {
		t.Fatalf("%s", raw)
	}
	for _, l := range e.lines("alice", b.ErrorFileID) {
		if l.Error == nil || l.Error.Code != "response_too_large" {
			t.Errorf("error line: %s", l.raw)
		}
	}
	if got := gw.calls.Load(); got != 2 {
		t.Errorf("%d gateway calls for 2 lines whose answers are too large, want 2 (no retries)", got)
	}
}

// unlinkingFiles opens the input and then deletes its name, as a delete
// racing the batch's first read would: the snapshot cannot be a link and
// must be copied from the open handle.
type unlinkingFiles struct {
	FileStore
	path string
}

func (u unlinkingFiles) Open(ctx context.Context, owner, id string) (files.File, files.Content, error) {
	f, err := os.Open(u.path)
	if err != nil {
		return files.File{}, nil, err
	}
	os.Remove(u.path)
	return files.File{ID: id, Owner: owner}, f, nil
}

func TestInputSnapshotCopiesWhenTheBlobIsGone(t *testing.T) {
	dir := t.TempDir()
	content := chatLines(50)
	src := filepath.Join(dir, "blob")
	if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &Service{files: unlinkingFiles{path: src}, spoolDir: filepath.Join(dir, "batches")}
	b := Batch{ID: "batch_1", Owner: "alice", InputFileID: "file-x"}
	f, err := s.openInput(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != content {
		t.Fatalf("snapshot holds %d bytes, want %d", len(got), len(content))
	}
	// Later reads use the snapshot, not the (gone) input file.
	f, err = s.openInput(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(f)
	f.Close()
	if string(got) != content {
		t.Fatalf("second read: %d bytes", len(got))
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "batches", "batch_1")); len(entries) != 1 {
		t.Errorf("spool directory holds %d entries, want only the snapshot", len(entries))
	}
}
