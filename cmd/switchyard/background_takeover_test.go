package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// sseEvent is one Responses stream event as read off the wire.
type sseEvent struct {
	Type     string `json:"type"`
	Seq      int64  `json:"sequence_number"`
	Response struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	} `json:"response"`
	Delta string `json:"delta"`
}

// readSSE reads events from r until it ends or stop returns true.
func readSSE(t *testing.T, r io.Reader, stop func(sseEvent) bool) []sseEvent {
	t.Helper()
	var out []sseEvent
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev sseEvent
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		out = append(out, ev)
		if stop != nil && stop(ev) {
			return out
		}
	}
	return out
}

// TestBackgroundTakeoverSIGKILL: two `switchyard backends` processes on one
// PostgreSQL. A streamed background response created on the first, whose
// client has hung up, is SIGKILLed with its model call in flight; the
// second takes it over once the lease expires, runs it again and stores
// it, and a client resuming on the second with starting_after gets every
// later event, the first attempt's and the second's, without a gap or a
// repeat, to response.completed.
func TestBackgroundTakeoverSIGKILL(t *testing.T) {
	const token = "internal-token-for-background-takeover"
	t.Setenv("SY_TEST_PG_DSN", pgtest.DSN(t))
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	t.Setenv("SWITCHYARD_INTERNAL_TOKEN", token)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) + "\nstorage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_TEST_PG_DSN\n"
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}

	// The gateway stand-in: a fake OpenAI upstream that, while hold is
	// set, holds each request until its caller goes away.
	var hold atomic.Bool
	hold.Store(true)
	entered := make(chan struct{}, 4)
	calls := atomic.Int64{}
	up := fake.NewOpenAI(fake.Options{APIKey: token})
	// done ends the held request of the killed process, whose hang-up this
	// server may never notice (it does not read the request body).
	done := make(chan struct{})
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if hold.Load() {
			entered <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-done:
			}
			return
		}
		up.ServeHTTP(w, r)
	}))
	defer gw.Close()
	defer close(done)

	start := func(name string) (*exec.Cmd, string) {
		return startHelperBackends(t, dir, name, "--data-dir", filepath.Join(dir, name), "--gateway-url", gw.URL+"/v1",
			"--config", cfg, "--background-lease", "1s", "--log-level", "warn")
	}
	send := func(ctx context.Context, base, method, path, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(caller.OwnerHeader, "alice")
		req.Header.Set(caller.TierHeader, "standard")
		req.Header.Set(caller.TokenHeader, token)
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return resp
	}

	procA, a := start("a")
	ctx, hangUp := context.WithCancel(t.Context())
	resp := send(ctx, a, http.MethodPost, "/v1/responses", `{"model":"gpt-4o-mini","input":"survive SIGKILL","background":true,"stream":true}`)
	first := readSSE(t, resp.Body, func(ev sseEvent) bool { return ev.Type == "response.in_progress" })
	hangUp()
	resp.Body.Close()
	if len(first) != 3 || first[0].Type != "response.created" || first[0].Response.Status != "queued" {
		t.Fatalf("first events %+v", first)
	}
	id := first[0].Response.ID
	select {
	case <-entered:
	case <-time.After(60 * time.Second):
		t.Fatal("A never called the model")
	}
	if err := procA.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procA.Wait()
	hold.Store(false)
	_, b := start("b")

	resp = send(t.Context(), b, http.MethodGet, fmt.Sprintf("/v1/responses/%s?stream=true&starting_after=%d", id, first[2].Seq), "")
	rest := readSSE(t, resp.Body, nil)
	resp.Body.Close()
	var text strings.Builder
	for i, ev := range rest {
		if ev.Seq != first[2].Seq+1+int64(i) {
			t.Fatalf("resumed events %+v: a gap or a repeat at %d", rest, i)
		}
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	if len(rest) < 3 || rest[0].Type != "response.in_progress" || rest[len(rest)-1].Type != "response.completed" || text.Len() == 0 {
		t.Fatalf("resumed on B: %+v", rest)
	}
	var got struct {
		Status     string `json:"status"`
		Background bool   `json:"background"`
	}
	resp = send(t.Context(), b, http.MethodGet, "/v1/responses/"+id, "")
	err := json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || got.Status != "completed" || !got.Background {
		t.Errorf("get on B: %+v %v", got, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d model calls, want 2 (one per attempt)", n)
	}
}
