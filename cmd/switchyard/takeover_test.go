package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// helperEnv makes the test binary a `switchyard backends` process
// (TestHelperBackends) with the \x1f-separated arguments it holds.
const helperEnv = "SY_HELPER_BACKENDS_ARGS"

// TestHelperBackends is not a test: it is the body of the backends
// processes TestBatchTakeoverSIGKILL starts (the test binary run again with
// helperEnv set); without it, it returns at once.
func TestHelperBackends(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		return
	}
	err := run(context.Background(), append([]string{"backends"}, strings.Split(args, "\x1f")...), os.Stdout, os.Stderr)
	fmt.Fprintln(os.Stderr, "backends:", err)
	os.Exit(1)
}

// TestBatchTakeoverSIGKILL: two `switchyard backends` processes on one
// PostgreSQL (and one data directory, for the files store). A batch of 200
// lines created on the first is killed with SIGKILL halfway, with lines in
// flight; the second takes it over when the lease expires and completes it:
// one output line per custom_id, and only the lines in flight on the killed
// process reached the vendor twice.
func TestBatchTakeoverSIGKILL(t *testing.T) {
	const n = 200
	const token = "internal-token-for-takeover"
	t.Setenv("SY_TEST_PG_DSN", pgtest.DSN(t))
	// Replicas of a fleet share the data key (files refuse to start without one).
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	t.Setenv("SWITCHYARD_INTERNAL_TOKEN", token)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) + "\nstorage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_TEST_PG_DSN\n"
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}

	// The gateway stand-in: counts each line's requests (by its message,
	// "line N"); while hold is set, it answers the first n/2 and holds the
	// others open until their caller goes away.
	var (
		mu     sync.Mutex
		counts = map[string]int{}
		held   = map[string]bool{}
		sent   int
		hold   atomic.Bool
		heldCh = make(chan int, n)
	)
	hold.Store(true)
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		key := req.Messages[0].Content
		mu.Lock()
		counts[key]++
		sent++
		if hold.Load() && sent > n/2 {
			held[key] = true
			c := len(held)
			mu.Unlock()
			select {
			case heldCh <- c:
			default:
			}
			<-r.Context().Done()
			return
		}
		mu.Unlock()
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok %s"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, key)
	}))
	defer vendor.Close()

	start := func(name string) (*exec.Cmd, string) {
		return startHelperBackends(t, dir, name, "--data-dir", dir, "--gateway-url", vendor.URL+"/v1",
			"--config", cfg, "--batch-lease", "1s", "--log-level", "warn")
	}
	call := func(base, method, path, ctype string, body io.Reader) []byte {
		t.Helper()
		req, err := http.NewRequest(method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(caller.OwnerHeader, "alice")
		req.Header.Set(caller.TierHeader, "standard")
		req.Header.Set(caller.TokenHeader, token)
		if ctype != "" {
			req.Header.Set("content-type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, b, err)
		}
		return b
	}

	procA, a := start("a")
	var input strings.Builder
	for i := range n {
		fmt.Fprintf(&input, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt-4o-mini","messages":[{"role":"user","content":"line %d"}]}}`+"\n", i, i)
	}
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("purpose", "batch")
	fw, _ := mw.CreateFormFile("file", "input.jsonl")
	_, _ = io.WriteString(fw, input.String())
	_ = mw.Close()
	var file struct{ ID string }
	if err := json.Unmarshal(call(a, http.MethodPost, "/v1/files", mw.FormDataContentType(), &form), &file); err != nil {
		t.Fatal(err)
	}
	var batch struct {
		ID string `json:"id"`
	}
	body := fmt.Sprintf(`{"input_file_id":%q,"endpoint":"/v1/chat/completions","completion_window":"24h"}`, file.ID)
	if err := json.Unmarshal(call(a, http.MethodPost, "/v1/batches", "application/json", strings.NewReader(body)), &batch); err != nil {
		t.Fatal(err)
	}

	// Halfway, with lines in flight (the runner's concurrency, 64, once
	// they have all started), A is killed.
	deadline := time.After(60 * time.Second)
	for h := 0; h < 64; {
		select {
		case h = <-heldCh:
		case <-deadline:
			t.Fatal("A never had its lines in flight")
		}
	}
	if err := procA.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procA.Wait()
	hold.Store(false)
	_, b := start("b")

	var got struct {
		Status       string `json:"status"`
		OutputFileID string `json:"output_file_id"`
		ErrorFileID  string `json:"error_file_id"`
		Counts       struct {
			Total, Completed, Failed int
		} `json:"request_counts"`
	}
	until := time.Now().Add(90 * time.Second)
	for got.Status != "completed" {
		if time.Now().After(until) {
			t.Fatalf("batch still %q on B", got.Status)
		}
		time.Sleep(20 * time.Millisecond) // polling for the batch to complete
		if err := json.Unmarshal(call(b, http.MethodGet, "/v1/batches/"+batch.ID, "", nil), &got); err != nil {
			t.Fatal(err)
		}
	}
	if got.Counts.Completed != n || got.Counts.Failed != 0 || got.ErrorFileID != "" {
		t.Errorf("request_counts %+v, error file %q", got.Counts, got.ErrorFileID)
	}
	out := call(b, http.MethodGet, "/v1/files/"+got.OutputFileID+"/content", "", nil)
	perID := map[string]int{}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	for _, l := range lines {
		var r struct {
			CustomID string `json:"custom_id"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("output line %q: %v", l, err)
		}
		perID[r.CustomID]++
	}
	if len(lines) != n {
		t.Errorf("%d output lines, want %d", len(lines), n)
	}
	for i := range n {
		if c := perID[fmt.Sprintf("req-%d", i)]; c != 1 {
			t.Errorf("req-%d: %d output lines, want 1", i, c)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for i := range n {
		key := fmt.Sprintf("line %d", i)
		switch c := counts[key]; {
		case c == 1:
		case c == 2 && held[key]:
			twice++
		default:
			t.Errorf("%s reached the vendor %d times (in flight on A: %v)", key, c, held[key])
		}
	}
	t.Logf("%d lines sent twice; %d were in flight on the killed process", twice, len(held))
	if twice > 64 || len(held) > 64 {
		t.Errorf("%d lines sent twice, %d in flight on A: want at most the concurrency, 64", twice, len(held))
	}
}

// startHelperBackends starts a `switchyard backends` process (this test
// binary re-run as TestHelperBackends) on free ports with args after
// --listen and --health, logging to dir/name.log (shown if the test
// fails), killed when the test ends. It returns once /healthz answers 200,
// with the process and its base URL.
func startHelperBackends(t *testing.T, dir, name string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	addr, health := freePort(t), freePort(t)
	args = append([]string{"--listen", addr, "--health", health}, args...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperBackends$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, "\x1f"))
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s's log:\n%s", name, b)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + health + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd, "http://" + addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never became ready", name)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness
	}
}
