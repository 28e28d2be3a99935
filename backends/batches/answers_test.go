package batches

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/files"
)

// largeAnswerGateway answers every line 200 with a JSON body of size bytes,
// delivered slowly, and records how many answers were being read past
// smallAnswer at once (a reader that got that far holds a large answer in
// memory).
type largeAnswerGateway struct {
	size          int
	announce      bool // send a Content-Length
	mu            sync.Mutex
	active, max   int
	large, closed int
}

func (g *largeAnswerGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	pad := g.size - len(`{"object":"chat.completion","pad":""}`)
	b := []byte(`{"object":"chat.completion","pad":"` + strings.Repeat("x", pad) + `"}`)
	h := http.Header{"Content-Type": {"application/json"}}
	cl := int64(-1)
	if g.announce {
		cl = int64(len(b))
		h.Set("Content-Length", strconv.Itoa(len(b)))
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, ContentLength: cl,
		Body: &slowBody{g: g, r: bytes.NewReader(b)}}, nil
}

type slowBody struct {
	g       *largeAnswerGateway
	r       *bytes.Reader
	pos     int
	counted bool
}

func (b *slowBody) Read(p []byte) (int, error) {
	if len(p) > 32<<10 {
		p = p[:32<<10]
	}
	n, err := b.r.Read(p)
	b.pos += n
	if b.pos > smallAnswer && !b.counted {
		b.counted = true
		b.g.mu.Lock()
		b.g.active++
		b.g.large++
		b.g.max = max(b.g.max, b.g.active)
		b.g.mu.Unlock()
	}
	if b.counted {
		time.Sleep(time.Millisecond)
	}
	return n, err
}

func (b *slowBody) Close() error {
	b.g.mu.Lock()
	defer b.g.mu.Unlock()
	b.g.closed++
	if b.counted {
		b.g.active--
		b.counted = false
	}
	return nil
}

// TestLargeAnswersCountedAgainstTheBudget: answers over smallAnswer are read
// only as far as the in-flight byte budget has room for them and their
// output lines, whatever the concurrency; every answer is still recorded
// whole, and the budget is all given back.
func TestLargeAnswersCountedAgainstTheBudget(t *testing.T) {
	const n, size = 12, 1 << 20
	for _, tc := range []struct {
		name     string
		announce bool
		want     int // most large answers in memory at once
	}{
		// 8 MiB holds three announced 1 MiB answers with their lines…
		{"content-length", true, 3},
		// …but only one of unknown length, counted at MaxResponseBytes.
		{"chunked", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := &largeAnswerGateway{size: size, announce: tc.announce}
			e := newEnv(t, envConfig{
				opts: Options{Concurrency: 8, MaxInFlightBytes: 8 << 20, MaxResponseBytes: 2 << 20},
				wrap: func(Gateway) Gateway { return gw },
			})
			e.run()
			id := e.create("alice", e.upload("alice", files.PurposeBatch, chatLines(n)), "/v1/chat/completions").ID
			b, raw := e.wait("alice", id, "finished", func(b batchView) bool { return Terminal(b.Status) })
			if b.Status != StatusCompleted || b.RequestCounts.Completed != n {
				t.Fatalf("%.300s", raw)
			}
			for _, l := range e.lines("alice", b.OutputFileID) {
				if l.Response == nil || len(l.Response.Body) != size {
					t.Fatalf("output line with a body of %d bytes, want %d", len(l.Response.Body), size)
				}
			}
			gw.mu.Lock()
			defer gw.mu.Unlock()
			if gw.large != n {
				t.Fatalf("%d large answers read, want %d", gw.large, n)
			}
			t.Logf("at most %d large answers at once", gw.max)
			if gw.max > tc.want {
				t.Errorf("%d answers of 1 MiB in memory at once under an 8 MiB budget, want at most %d", gw.max, tc.want)
			}
			if used := len(e.svc.answers.tokens); used != 0 {
				t.Errorf("%d units of the answers budget still held after the batch", used)
			}
		})
	}
}

// TestSmallAnswerLineAllocations: recording a small answer builds its line
// in a pooled buffer, the body compacted straight into it; the only
// allocations left are the ids and the usage lookup.
func TestSmallAnswerLineAllocations(t *testing.T) {
	dir := t.TempDir()
	res := newLocalResults(func(id string) string { return filepath.Join(dir, id) }, 1<<20)
	defer res.forget("b")
	r := &run{s: &Service{results: res}, b: Batch{ID: "b"}}
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],
	  "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}}`)
	l := pending{customID: `"req-1"`}
	allocs := testing.AllocsPerRun(200, func() {
		a := answer{status: 200, reqID: "req_abc", body: body}
		r.recordResponse(t.Context(), l, &a)
	})
	// Two ids (hex strings, each a buffer and a string) at most and the
	// usage lookup; before, the answer was copied into a compacted buffer
	// and again into the line.
	t.Logf("%.0f allocations per line", allocs)
	if allocs > 3 && !raceEnabled {
		t.Errorf("%.0f allocations per small answer recorded, want at most 3", allocs)
	}
	data, err := os.ReadFile(filepath.Join(dir, "b", spoolOutput))
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if !bytes.Contains(first, []byte(`"custom_id":"req-1","response":{"status_code":200,"request_id":"req_abc","body":{"id":"chatcmpl-1",`)) ||
		!bytes.HasSuffix(first, []byte(`"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}},"error":null}`)) {
		t.Errorf("line: %s", first)
	}
	if r.c.Completed == 0 || r.c.TotalTokens != 11*r.c.Completed {
		t.Errorf("counts %+v", r.c)
	}
}
