package batches

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
)

// pacingGateway answers each line's first paced attempts with the
// gateway's paced 429 (the key's tokens per minute are spent), then passes
// it on; paced < 0 paces every attempt.
type pacingGateway struct {
	next  Gateway
	paced int

	mu       sync.Mutex
	attempts map[string]int
	sent     map[string]int // attempts that went through
}

func (g *pacingGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	if g.attempts == nil {
		g.attempts, g.sent = map[string]int{}, map[string]int{}
	}
	n := g.attempts[string(b)]
	g.attempts[string(b)] = n + 1
	pace := g.paced < 0 || n < g.paced
	if !pace {
		g.sent[string(b)]++
	}
	g.mu.Unlock()
	if pace {
		rec := httptest.NewRecorder()
		rec.Header().Set("content-type", "application/json")
		rec.Header().Set("retry-after", "7")
		rec.Header().Set(caller.PacedHeader, "tokens")
		rec.WriteHeader(http.StatusTooManyRequests)
		rec.WriteString(`{"error":{"message":"Rate limit reached for tokens per minute (TPM).","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`)
		return rec.Result(), nil
	}
	return g.next.Do(ctx, owner, origin, method, path, strings.NewReader(string(b)))
}

// pauses records the run's pauses; each ends when release says.
type pauses struct {
	n       atomic.Int64
	mu      sync.Mutex
	waits   []time.Duration
	release func() <-chan time.Time
}

func (p *pauses) after(d time.Duration) <-chan time.Time {
	p.n.Add(1)
	p.mu.Lock()
	p.waits = append(p.waits, d)
	p.mu.Unlock()
	return p.release()
}

func now() <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

// TestPacedLinesWait: lines the gateway paces wait for the window and are
// sent again, more times than MaxRetries allows retries, and each is
// recorded once.
func TestPacedLinesWait(t *testing.T) {
	const n = 20
	gw := &pacingGateway{paced: 5}
	p := &pauses{release: now}
	e := newEnv(t, envConfig{opts: Options{MaxRetries: 2, Concurrency: 4, After: p.after},
		wrap: func(g Gateway) Gateway { gw.next = g; return gw }})
	e.run()
	b := e.create("owner-1", e.upload("owner-1", "batch", chatLines(n)), "/v1/chat/completions")
	done, raw := e.waitStatus("owner-1", b.ID, StatusCompleted)
	if done.RequestCounts.Completed != n || done.RequestCounts.Failed != 0 {
		t.Fatalf("counts %+v: %s", done.RequestCounts, raw)
	}
	seen := map[string]int{}
	for _, l := range e.lines("owner-1", done.OutputFileID) {
		seen[l.CustomID]++
	}
	for i := range n {
		if id := fmt.Sprintf("req-%d", i); seen[id] != 1 {
			t.Errorf("%s recorded %d times", id, seen[id])
		}
	}
	gw.mu.Lock()
	for body, k := range gw.sent {
		if k != 1 {
			t.Errorf("a line reached the provider %d times: %s", k, body)
		}
	}
	gw.mu.Unlock()
	if p.n.Load() == 0 {
		t.Fatal("the run never paused")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.waits {
		if d != 7*time.Second {
			t.Errorf("paused for %s, want retry-after's 7s", d)
		}
	}
}

// TestCancelWhilePaused: a batch paused for its tokens is cancelled at
// once; the lines that waited have no result (they never ran).
func TestCancelWhilePaused(t *testing.T) {
	gw := &pacingGateway{paced: -1}
	never := make(chan time.Time)
	p := &pauses{release: func() <-chan time.Time { return never }}
	e := newEnv(t, envConfig{opts: Options{Concurrency: 4, After: p.after},
		wrap: func(g Gateway) Gateway { gw.next = g; return gw }})
	e.run()
	b := e.create("owner-1", e.upload("owner-1", "batch", chatLines(10)), "/v1/chat/completions")
	deadline := time.Now().Add(10 * time.Second)
	for p.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the run never paused")
		}
		time.Sleep(time.Millisecond)
	}
	if code, body, _ := e.call("owner-1", http.MethodPost, "/v1/batches/"+b.ID+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %s", code, body)
	}
	done, raw := e.waitStatus("owner-1", b.ID, StatusCancelled)
	if done.RequestCounts.Completed != 0 || done.RequestCounts.Failed != 0 {
		t.Fatalf("counts %+v: %s", done.RequestCounts, raw)
	}
	if p.n.Load() != 1 {
		t.Errorf("%d pauses, want 1 (lines refused together share it)", p.n.Load())
	}
}

// TestLineAllowance: the daily line allowance at create time, over a
// rolling 24 hours; a batch that failed validation does not count.
func TestLineAllowance(t *testing.T) {
	clk := newClock(time.Unix(1_800_000_000, 0))
	e := newEnv(t, envConfig{opts: Options{Now: clk.Now,
		LinesPerDay: func(string) (int64, bool) { return 5, true }}})
	e.run()
	create := func(content string) (int, []byte, http.Header) {
		id := e.upload("owner-1", "batch", content)
		return e.call("owner-1", http.MethodPost, "/v1/batches",
			fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, id))
	}
	wantRefused := func(code int, body []byte, status int, msg string) {
		t.Helper()
		if code != status || !strings.Contains(string(body), `"code":"batch_line_limit_exceeded"`) || !strings.Contains(string(body), msg) {
			t.Fatalf("got %d %s, want %d batch_line_limit_exceeded with %q", code, body, status, msg)
		}
	}

	code, body, _ := create(chatLines(6))
	wantRefused(code, body, http.StatusBadRequest, "more than 5 request lines")

	// Blank lines are not request lines; invalid ones are.
	code, body, _ = create("\n" + chatLine("a", "gpt-4o-mini", "x") + "\n\n" + "not json\n")
	if code != http.StatusOK {
		t.Fatalf("2 lines: %d %s", code, body)
	}
	failed := decode[batchView](t, body)
	e.waitStatus("owner-1", failed.ID, StatusFailed) // it never ran: its 2 lines do not count

	code, body, _ = create(chatLines(3))
	if code != http.StatusOK {
		t.Fatalf("3 lines: %d %s", code, body)
	}
	clk.Advance(time.Hour)
	code, body, h := create(chatLines(3))
	wantRefused(code, body, http.StatusTooManyRequests, "Limit 5, Used 3, Requested 3")
	if ra := h.Get("retry-after"); ra != fmt.Sprint(23*3600) {
		t.Errorf("retry-after = %q, want %d (when the 3 lines leave the window)", ra, 23*3600)
	}
	code, body, _ = create(chatLines(2))
	if code != http.StatusOK {
		t.Fatalf("2 more lines: %d %s", code, body)
	}
	// A day after the first batch, its lines have left the window.
	clk.Advance(23*time.Hour + time.Second)
	code, body, _ = create(chatLines(3))
	if code != http.StatusOK {
		t.Fatalf("3 lines a day later: %d %s", code, body)
	}
}
