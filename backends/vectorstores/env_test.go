package vectorstores

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/caller"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

const (
	testToken   = "internal-test-token"
	ownerHeader = "x-test-owner"
	embedModel  = "demo/embed"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is the service against real components: the files store in a
// temporary directory and the fake OpenAI upstream for embeddings, called
// through the real onbehalf client.
type env struct {
	t     *testing.T
	files *files.Store
	svc   *Service
	srv   *httptest.Server
	clock *clock
}

// newEnv starts the service; opts, if given, adjust its Options.
func newEnv(t *testing.T, opts ...func(*Options)) *env {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	clk := &clock{t: time.Unix(1_750_000_000, 0)}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	fs, err := files.Open(ctx, dir, files.Options{Now: clk.Now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fs.Close() })
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", fake.KindOpenAI, fake.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	gw := onbehalf.New("http://"+addr.String()+"/v1", testToken)
	o := Options{DataDir: dir, Files: fs, Gateway: gw, EmbeddingModel: embedModel,
		Now: clk.Now, Logger: log, SweepInterval: time.Hour}
	for _, f := range opts {
		f(&o)
	}
	svc, err := New(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		if o := r.Header.Get(ownerHeader); o != "" {
			ctx = caller.With(ctx, caller.Caller{Owner: o})
		}
		svc.Handler().ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return &env{t: t, files: fs, svc: svc, srv: srv, clock: clk}
}

// upload stores a file for owner through the real files store.
func (e *env) upload(owner, filename, content string) string {
	e.t.Helper()
	f, err := e.files.Create(e.t.Context(), owner, files.File{Filename: filename, Purpose: files.PurposeAssistants},
		strings.NewReader(content), 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return f.ID
}

func (e *env) do(owner, method, path, body string) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if owner != "" {
		req.Header.Set(ownerHeader, owner)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// ok sends a request that must succeed and conform to schema.
func (e *env) ok(owner, method, path, body, schema string) gjson.Result {
	e.t.Helper()
	status, b := e.do(owner, method, path, body)
	if status != http.StatusOK {
		e.t.Fatalf("%s %s: status %d: %s", method, path, status, b)
	}
	schematest.Conforms(e.t, schema, b)
	return gjson.ParseBytes(b)
}

// wantError checks an OpenAI error answer's status and param.
func (e *env) wantError(owner, method, path, body string, status int, param string) gjson.Result {
	e.t.Helper()
	got, b := e.do(owner, method, path, body)
	if got != status {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, status, b)
	}
	schematest.Conforms(e.t, "ErrorResponse", b)
	if p := gjson.GetBytes(b, "error.param").Str; param != "" && p != param {
		e.t.Errorf("%s %s: param %q, want %q: %s", method, path, p, param, b)
	}
	return gjson.ParseBytes(b)
}

// createStore creates a store for owner with body and waits until its
// files are indexed.
func (e *env) createStore(owner, body string) gjson.Result {
	e.t.Helper()
	st := e.ok(owner, http.MethodPost, "/v1/vector_stores", body, "VectorStoreObject")
	return e.wait(owner, st.Get("id").Str)
}

// wait polls a store until no file is in progress.
func (e *env) wait(owner, id string) gjson.Result {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := e.ok(owner, http.MethodGet, "/v1/vector_stores/"+id, "", "VectorStoreObject")
		if st.Get("status").Str != StatusInProgress {
			return st
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("store %s still in progress: %s", id, st.Raw)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chunkCount counts the rows of the chunks table, reachable or not.
func (e *env) chunkCount() int {
	e.t.Helper()
	var n int
	if err := e.svc.testDB().QueryRowContext(e.t.Context(), `SELECT COUNT(*) FROM chunks`).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// testDB is the database under the service's SQLite store, for tests that
// look at what the implementation keeps.
func (s *Service) testDB() *sql.DB { return s.store.(*SQLiteStore).db }
