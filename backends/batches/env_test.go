package batches

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// testToken is the bearer token the fake upstream demands; the runner's
// onbehalf client presents it, as it presents the internal token to the
// real gateway.
const testToken = "internal-token-for-tests"

// env is a batch service wired to a real files.Store and a real fake OpenAI
// upstream on a loopback port.
type env struct {
	t     *testing.T
	dir   string
	files *files.Store
	gw    Gateway
	opts  Options
	svc   *Service

	runCancel context.CancelFunc
	runDone   chan error
}

type envConfig struct {
	opts Options
	fake fake.Options
	// wrap, if set, wraps the gateway client (fault injection).
	wrap func(Gateway) Gateway
}

func newEnv(t *testing.T, cfg envConfig) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg.fake.APIKey = testToken
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", "openai", cfg.fake)
	if err != nil {
		t.Fatal(err)
	}
	var gw Gateway = onbehalf.New("http://"+addr.String()+"/v1", testToken)
	if cfg.wrap != nil {
		gw = cfg.wrap(gw)
	}
	dir := t.TempDir()
	fs, err := files.Open(ctx, dir, files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	if cfg.opts.Logger == nil {
		cfg.opts.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.opts.RetryBackoff == 0 {
		cfg.opts.RetryBackoff = time.Millisecond
	}
	if cfg.opts.ProgressInterval == 0 {
		cfg.opts.ProgressInterval = 20 * time.Millisecond
	}
	e := &env{t: t, dir: dir, files: fs, gw: gw, opts: cfg.opts}
	e.open()
	t.Cleanup(func() {
		e.stop()
		e.svc.Close()
	})
	return e
}

// open opens the service on the env's data directory (again, after close:
// a restart).
func (e *env) open() {
	e.t.Helper()
	opts := e.opts
	opts.DataDir, opts.Files, opts.Gateway = e.dir, e.files, e.gw
	svc, err := New(context.Background(), opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.svc = svc
}

// run starts the runner in the background.
func (e *env) run() {
	ctx, cancel := context.WithCancel(context.Background())
	e.runCancel = cancel
	e.runDone = make(chan error, 1)
	svc := e.svc
	go func() { e.runDone <- svc.Run(ctx) }()
}

// stop ends the runner and waits for it.
func (e *env) stop() {
	e.t.Helper()
	if e.runCancel == nil {
		return
	}
	e.runCancel()
	select {
	case err := <-e.runDone:
		if err != nil {
			e.t.Errorf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Fatal("Run did not return after its context ended")
	}
	e.runCancel = nil
}

// restart stops the runner, closes the database, reopens it and runs again.
func (e *env) restart() {
	e.t.Helper()
	e.stop()
	if err := e.svc.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
	e.run()
}

func (e *env) upload(owner, purpose, content string) string {
	e.t.Helper()
	f, err := e.files.Create(context.Background(), owner, files.File{Filename: "input.jsonl", Purpose: purpose},
		strings.NewReader(content), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return f.ID
}

// call sends a request to the handler as owner ("" for no caller).
func (e *env) call(owner, method, path, body string) (int, []byte, http.Header) {
	e.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if owner != "" {
		req = req.WithContext(caller.With(req.Context(), caller.Caller{Owner: owner}))
	}
	rec := httptest.NewRecorder()
	e.svc.Handler().ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes(), rec.Header()
}

// batchView is the Batch object as a client decodes it.
type batchView struct {
	ID               string `json:"id"`
	Object           string `json:"object"`
	Endpoint         string `json:"endpoint"`
	Model            string `json:"model"`
	Status           string `json:"status"`
	InputFileID      string `json:"input_file_id"`
	CompletionWindow string `json:"completion_window"`
	OutputFileID     string `json:"output_file_id"`
	ErrorFileID      string `json:"error_file_id"`
	Errors           *struct {
		Object string `json:"object"`
		Data   []struct {
			Code    string  `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
			Line    *int    `json:"line"`
		} `json:"data"`
	} `json:"errors"`
	CreatedAt     int64 `json:"created_at"`
	InProgressAt  int64 `json:"in_progress_at"`
	ExpiresAt     int64 `json:"expires_at"`
	FinalizingAt  int64 `json:"finalizing_at"`
	CompletedAt   int64 `json:"completed_at"`
	FailedAt      int64 `json:"failed_at"`
	ExpiredAt     int64 `json:"expired_at"`
	CancellingAt  int64 `json:"cancelling_at"`
	CancelledAt   int64 `json:"cancelled_at"`
	RequestCounts struct {
		Total, Completed, Failed int64
	} `json:"request_counts"`
	Usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
		TotalTokens  int64 `json:"total_tokens"`
	} `json:"usage"`
	Metadata map[string]string `json:"metadata"`
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// create creates a batch and fails the test unless it is accepted.
func (e *env) create(owner, fileID, endpoint string) batchView {
	e.t.Helper()
	code, body, _ := e.call(owner, http.MethodPost, "/v1/batches",
		fmt.Sprintf(`{"input_file_id":%q,"endpoint":%q,"completion_window":"24h"}`, fileID, endpoint))
	if code != http.StatusOK {
		e.t.Fatalf("create: %d %s", code, body)
	}
	return decode[batchView](e.t, body)
}

func (e *env) get(owner, id string) (batchView, []byte) {
	e.t.Helper()
	code, body, _ := e.call(owner, http.MethodGet, "/v1/batches/"+id, "")
	if code != http.StatusOK {
		e.t.Fatalf("get %s: %d %s", id, code, body)
	}
	return decode[batchView](e.t, body), body
}

// wait polls the batch until cond holds.
func (e *env) wait(owner, id string, what string, cond func(batchView) bool) (batchView, []byte) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, raw := e.get(owner, id)
		if cond(b) {
			return b, raw
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("batch %s: still not %s: %s", id, what, raw)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (e *env) waitStatus(owner, id string, status string) (batchView, []byte) {
	e.t.Helper()
	return e.wait(owner, id, status, func(b batchView) bool { return b.Status == status })
}

// resultLine is an output or error file line.
type resultLine struct {
	ID       string `json:"id"`
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		RequestID  string          `json:"request_id"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	raw string
}

// lines reads a batch_output file; "" reads as no lines.
func (e *env) lines(owner, fileID string) []resultLine {
	e.t.Helper()
	if fileID == "" {
		return nil
	}
	meta, f, err := e.files.Open(context.Background(), owner, fileID)
	if err != nil {
		e.t.Fatalf("open %s: %v", fileID, err)
	}
	defer f.Close()
	if meta.Purpose != files.PurposeBatchOutput {
		e.t.Errorf("file %s: purpose %q, want batch_output", fileID, meta.Purpose)
	}
	var out []resultLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		l := decode[resultLine](e.t, sc.Bytes())
		l.raw = sc.Text()
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// chatLine is an input line for /v1/chat/completions.
func chatLine(id, model, text string) string {
	b, _ := json.Marshal(map[string]any{
		"custom_id": id, "method": "POST", "url": "/v1/chat/completions",
		"body": map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}},
	})
	return string(b)
}

func chatLines(n int) string {
	var sb strings.Builder
	for i := range n {
		sb.WriteString(chatLine(fmt.Sprintf("req-%d", i), "gpt-4o-mini", fmt.Sprintf("line %d", i)))
		sb.WriteByte('\n')
	}
	return sb.String()
}

// flakyGateway fails the first attempts of every line: transport errors,
// then a 503 like a gateway with every provider down.
type flakyGateway struct {
	next Gateway
	// transport and unavailable are how many leading attempts of each body
	// fail each way; always makes every attempt a transport error.
	transport, unavailable int
	always                 bool

	mu       sync.Mutex
	attempts map[string]int
	calls    atomic.Int64
}

func (g *flakyGateway) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	g.calls.Add(1)
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	if origin != caller.OriginBatch {
		return nil, fmt.Errorf("origin %q, want %q", origin, caller.OriginBatch)
	}
	g.mu.Lock()
	if g.attempts == nil {
		g.attempts = map[string]int{}
	}
	n := g.attempts[string(b)]
	g.attempts[string(b)] = n + 1
	g.mu.Unlock()
	switch {
	case g.always || n < g.transport:
		return nil, errors.New("dial tcp 10.0.0.1:8080: connection refused")
	case n < g.transport+g.unavailable:
		rec := httptest.NewRecorder()
		rec.Header().Set("content-type", "application/json")
		rec.WriteHeader(http.StatusServiceUnavailable)
		rec.WriteString(`{"error":{"message":"All providers are unavailable.","type":"server_error","param":null,"code":"upstream_unavailable"}}`)
		return rec.Result(), nil
	}
	return g.next.Do(ctx, owner, origin, method, path, strings.NewReader(string(b)))
}

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
