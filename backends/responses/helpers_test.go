package responses

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/testing/apischema/schematest"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

const testToken = "internal-test-token"

// ownerHeader names the owner in test requests; the test middleware turns
// it into the caller extproc would have authenticated.
const ownerHeader = "x-test-owner"

// recorder is a Gateway that records what the service sends and the
// contexts it sends it with, delegating to the real onbehalf client.
type recorder struct {
	gw *onbehalf.Client

	mu     sync.Mutex
	bodies [][]byte
	ctxs   []context.Context
	owners []string
	origin []string
}

func (r *recorder) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.bodies = append(r.bodies, b)
	r.ctxs = append(r.ctxs, ctx)
	r.owners = append(r.owners, owner)
	r.origin = append(r.origin, origin)
	r.mu.Unlock()
	return r.gw.Do(ctx, owner, origin, method, path, bytes.NewReader(b))
}

func (r *recorder) last(t *testing.T) gjson.Result {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.bodies) == 0 {
		t.Fatal("no request reached the gateway")
	}
	return gjson.ParseBytes(r.bodies[len(r.bodies)-1])
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.bodies)
}

// faultTransport adds x-fake-* headers to the requests the onbehalf client
// sends, so a test can make the fake upstream fail or stream slowly.
type faultTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	hdr  map[string]string
}

func (f *faultTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	if len(f.hdr) > 0 {
		req = req.Clone(req.Context())
		for k, v := range f.hdr {
			req.Header.Set(k, v)
		}
	}
	f.mu.Unlock()
	return f.base.RoundTrip(req)
}

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

type env struct {
	t      *testing.T
	svc    *Service
	srv    *httptest.Server
	rec    *recorder
	faults *faultTransport
	clock  *clock
}

type envOptions struct {
	fake   fake.Options
	search Searcher
}

// newEnv starts a fake OpenAI upstream, the service pointed at it through a
// real onbehalf client, and an HTTP server for the handler.
func newEnv(t *testing.T, eo envOptions) *env {
	t.Helper()
	ctx := t.Context()
	eo.fake.APIKey = testToken
	_, addr, err := fake.Start(ctx, "127.0.0.1:0", fake.KindOpenAI, eo.fake)
	if err != nil {
		t.Fatal(err)
	}
	gw := onbehalf.New("http://"+addr.String()+"/v1", testToken)
	ft := &faultTransport{base: gw.HTTP.Transport}
	gw.HTTP = &http.Client{Transport: ft}
	rec := &recorder{gw: gw}
	clk := &clock{t: time.Unix(1_750_000_000, 0)}
	svc, err := New(ctx, Options{DataDir: t.TempDir(), Gateway: rec, Search: eo.search, Now: clk.Now, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := svc.Close(); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(withCaller(svc.Handler()))
	t.Cleanup(srv.Close)
	return &env{t: t, svc: svc, srv: srv, rec: rec, faults: ft, clock: clk}
}

// withOwner is what caller.Require does for an authenticated request.
func withOwner(ctx context.Context, owner string) context.Context {
	return caller.With(ctx, caller.Caller{Owner: owner})
}

// testLogger sends the service's logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fault sets x-fake-* headers on every later upstream request.
func (e *env) fault(kv ...string) {
	e.faults.mu.Lock()
	defer e.faults.mu.Unlock()
	e.faults.hdr = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		e.faults.hdr[kv[i]] = kv[i+1]
	}
}

// do sends a request as owner ("" for none) and returns status and body.
func (e *env) do(owner, method, path, body string) (int, []byte) {
	e.t.Helper()
	resp := e.send(owner, method, path, body)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (e *env) send(owner, method, path, body string) *http.Response {
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
	req.Header.Set("content-type", "application/json")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// create posts a body as owner and requires 200 and a conforming Response.
func (e *env) create(owner, body string) gjson.Result {
	e.t.Helper()
	status, b := e.do(owner, http.MethodPost, "/v1/responses", body)
	if status != http.StatusOK {
		e.t.Fatalf("create: status %d: %s", status, b)
	}
	conforms(e.t, "Response", b)
	return gjson.ParseBytes(b)
}

type event struct {
	name string
	data gjson.Result
	raw  string
}

// stream posts a streamed create and reads every event.
func (e *env) stream(owner, body string) (*http.Response, []event) {
	e.t.Helper()
	resp := e.send(owner, http.MethodPost, "/v1/responses", body)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	return resp, readEvents(e.t, resp.Body)
}

func readEvents(t *testing.T, r io.Reader) []event {
	t.Helper()
	var evs []event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var name string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			d := strings.TrimPrefix(line, "data: ")
			if !json.Valid([]byte(d)) {
				t.Fatalf("event %s: invalid JSON %s", name, d)
			}
			evs = append(evs, event{name: name, data: gjson.Parse(d), raw: d})
		case line == "":
			name = ""
		default:
			t.Fatalf("unexpected stream line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return evs
}

// eventSchemas maps event types to their OpenAI component schemas.
var eventSchemas = map[string]string{
	"response.created":                       "ResponseCreatedEvent",
	"response.in_progress":                   "ResponseInProgressEvent",
	"response.completed":                     "ResponseCompletedEvent",
	"response.incomplete":                    "ResponseIncompleteEvent",
	"response.failed":                        "ResponseFailedEvent",
	"response.output_item.added":             "ResponseOutputItemAddedEvent",
	"response.output_item.done":              "ResponseOutputItemDoneEvent",
	"response.content_part.added":            "ResponseContentPartAddedEvent",
	"response.content_part.done":             "ResponseContentPartDoneEvent",
	"response.output_text.delta":             "ResponseTextDeltaEvent",
	"response.output_text.done":              "ResponseTextDoneEvent",
	"response.output_text.annotation.added":  "ResponseOutputTextAnnotationAddedEvent",
	"response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
	"response.function_call_arguments.done":  "ResponseFunctionCallArgumentsDoneEvent",
	"response.web_search_call.in_progress":   "ResponseWebSearchCallInProgressEvent",
	"response.web_search_call.searching":     "ResponseWebSearchCallSearchingEvent",
	"response.web_search_call.completed":     "ResponseWebSearchCallCompletedEvent",
	"error":                                  "ResponseErrorEvent",
}

// checkEvents checks what every Responses stream must satisfy: the event
// name matches the data's type, sequence numbers count up from 0, every
// event conforms to its schema, and the stream opens with created and
// in_progress.
func checkEvents(t *testing.T, evs []event) {
	t.Helper()
	if len(evs) < 3 {
		t.Fatalf("only %d events", len(evs))
	}
	for i, ev := range evs {
		if ev.name != ev.data.Get("type").Str {
			t.Errorf("event %d: name %q, type %q", i, ev.name, ev.data.Get("type").Str)
		}
		if got := ev.data.Get("sequence_number"); got.Type != gjson.Number || got.Int() != int64(i) {
			t.Errorf("event %d (%s): sequence_number %s", i, ev.name, got.Raw)
		}
		schema, ok := eventSchemas[ev.name]
		if !ok {
			t.Errorf("event %d: unexpected type %q", i, ev.name)
			continue
		}
		conforms(t, schema, []byte(ev.raw))
	}
	if evs[0].name != "response.created" || evs[1].name != "response.in_progress" {
		t.Errorf("stream starts with %s, %s", evs[0].name, evs[1].name)
	}
}

func types(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.name
	}
	return out
}

// wantError checks an OpenAI error answer.
func wantError(t *testing.T, status int, body []byte, wantStatus int, param string) {
	t.Helper()
	if status != wantStatus {
		t.Fatalf("status %d, want %d: %s", status, wantStatus, body)
	}
	conforms(t, "ErrorResponse", body)
	if got := gjson.GetBytes(body, "error.param"); param != "" && got.Str != param {
		t.Errorf("param %s, want %q: %s", got.Raw, param, body)
	}
}

// conforms fails the test if doc does not validate against the named
// component schema; a no-op without the spec (TestSpecAvailable says so).
func conforms(t testing.TB, schema string, doc []byte) {
	t.Helper()
	if v := schematest.Validator(t); v != nil {
		if err := v.Validate(schema, doc); err != nil {
			t.Errorf("%s: %v\ndocument: %s", schema, err, doc)
		}
	}
}
