package responses

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/onbehalf"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// gate is a Gateway that can hold model calls: while held, each call
// reports itself on entered and waits for release (or its context, which
// it then reports on abandoned).
type gate struct {
	next      Gateway
	held      atomic.Bool
	calls     atomic.Int64
	entered   chan struct{}
	abandoned chan struct{}
	release   chan struct{}
	once      sync.Once
}

func newGate(next Gateway, held bool) *gate {
	g := &gate{next: next, entered: make(chan struct{}, 16), abandoned: make(chan struct{}, 16), release: make(chan struct{})}
	g.held.Store(held)
	return g
}

func (g *gate) Do(ctx context.Context, owner, origin, method, path string, body io.Reader) (*http.Response, error) {
	g.calls.Add(1)
	if g.held.Load() {
		g.entered <- struct{}{}
		select {
		case <-g.release:
		case <-ctx.Done():
			g.abandoned <- struct{}{}
			return nil, ctx.Err()
		}
	}
	return g.next.Do(ctx, owner, origin, method, path, body)
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// fakeGateway is the onbehalf client to a fresh fake OpenAI upstream.
func fakeGateway(t *testing.T) Gateway {
	t.Helper()
	_, addr, err := fake.Start(t.Context(), "127.0.0.1:0", fake.KindOpenAI, fake.Options{APIKey: testToken})
	if err != nil {
		t.Fatal(err)
	}
	return onbehalf.New("http://"+addr.String()+"/v1", testToken)
}

type bgEnv struct {
	svc    *Service
	srv    *httptest.Server
	gate   *gate
	closed bool
}

// newBgEnv serves a Service with opts (DataDir a temporary one unless
// set) whose model calls go through g; fast leases and claims.
func newBgEnv(t *testing.T, g *gate, opts Options) *bgEnv {
	t.Helper()
	if opts.DataDir == "" && opts.Store == nil {
		opts.DataDir = t.TempDir()
	}
	opts.Gateway = g
	opts.Logger = testLogger(t)
	if opts.Background.Lease == 0 {
		opts.Background.Lease = time.Second
	}
	opts.Background.ClaimInterval = 20 * time.Millisecond
	opts.Background.PollInterval = 20 * time.Millisecond
	svc, err := New(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	e := &bgEnv{svc: svc, gate: g}
	e.srv = httptest.NewServer(withCaller(svc.Handler()))
	t.Cleanup(e.close)
	return e
}

func (e *bgEnv) close() {
	if !e.closed {
		e.closed = true
		e.srv.Close()
		_ = e.svc.Close()
	}
}

func (e *bgEnv) client(owner string) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.srv.URL+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithHeader(ownerHeader, owner), option.WithMaxRetries(0))
}

func bgParams(text string) responses.ResponseNewParams {
	return responses.ResponseNewParams{Model: "m", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
}

// poll gets id until its status is want, as a client polls.
func poll(t *testing.T, c openai.Client, id string, want responses.ResponseStatus) *responses.Response {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(20 * time.Second)
	for {
		r, err := c.Responses.Get(t.Context(), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("poll %s: %v", id, err)
		}
		if r.Status == want {
			return r
		}
		if r.Status != responses.ResponseStatusQueued && r.Status != responses.ResponseStatusInProgress {
			t.Fatalf("poll %s: status %s, want %s", id, r.Status, want)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("poll %s: still %s", id, r.Status)
		}
	}
}

func apiStatus(t *testing.T, err error, status int, param string) {
	t.Helper()
	var ae *openai.Error
	if !errors.As(err, &ae) || ae.StatusCode != status || (param != "" && ae.Param != param) {
		t.Errorf("got %v, want %d (param %q)", err, status, param)
	}
}

// TestBackgroundPollToCompleted: a background create answers queued at
// once (the model call held until then); polling sees it finish with the
// output and usage a foreground response has, stored like one.
func TestBackgroundPollToCompleted(t *testing.T) {
	e := newBgEnv(t, newGate(fakeGateway(t), true), Options{})
	c := e.client("alice")
	r, err := c.Responses.New(t.Context(), bgParams("in the background"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != responses.ResponseStatusQueued || !r.Background || len(r.Output) != 0 {
		t.Fatalf("create: status %s background %v output %d", r.Status, r.Background, len(r.Output))
	}
	waitFor(t, e.gate.entered, "the model call")
	if got := poll(t, c, r.ID, responses.ResponseStatusInProgress); !got.Background {
		t.Errorf("in progress: %+v", got)
	}
	bob := e.client("bob")
	if _, err := bob.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{}); err == nil {
		t.Error("bob sees alice's background response")
	}
	e.gate.open()
	done := poll(t, c, r.ID, responses.ResponseStatusCompleted)
	if done.OutputText() != "Echo: in the background" || done.Usage.TotalTokens == 0 || !done.Background || done.CompletedAt == 0 {
		t.Errorf("completed: text %q usage %+v", done.OutputText(), done.Usage)
	}
	// Stored as a foreground response is: a next turn continues from it,
	// its input items are listed.
	next, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: "m", PreviousResponseID: openai.String(r.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("and then?")}})
	if err != nil || next.Usage.InputTokens <= done.Usage.InputTokens {
		t.Errorf("next turn: %v %+v", err, next)
	}
	items, err := c.Responses.InputItems.List(t.Context(), r.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 {
		t.Errorf("input items: %v %+v", err, items)
	}
	if e.gate.calls.Load() != 2 {
		t.Errorf("%d model calls, want 2", e.gate.calls.Load())
	}
}

// TestBackgroundRefusals: background requires store; stream=true on GET
// only for streamed background responses; a bound on unfinished runs per
// owner (429).
func TestBackgroundRefusals(t *testing.T) {
	e := newBgEnv(t, newGate(fakeGateway(t), true), Options{Background: BackgroundOptions{MaxPerOwner: 2}})
	c := e.client("alice")
	p := bgParams("x")
	p.Store = openai.Bool(false)
	_, err := c.Responses.New(t.Context(), p)
	apiStatus(t, err, http.StatusBadRequest, "background")

	fg := e.gate
	fg.held.Store(false)
	plain, err := c.Responses.New(t.Context(), responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("foreground")}})
	if err != nil {
		t.Fatal(err)
	}
	fg.held.Store(true)
	s := c.Responses.GetStreaming(t.Context(), plain.ID, responses.ResponseGetParams{})
	for s.Next() {
	}
	apiStatus(t, s.Err(), http.StatusBadRequest, "stream")
	_, err = c.Responses.Cancel(t.Context(), plain.ID)
	apiStatus(t, err, http.StatusBadRequest, "response_id")
	_, err = c.Responses.Cancel(t.Context(), "resp_unknown")
	apiStatus(t, err, http.StatusNotFound, "")

	var ids []string
	for range 2 {
		r, err := c.Responses.New(t.Context(), bgParams("held"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	_, err = c.Responses.New(t.Context(), bgParams("one too many"))
	apiStatus(t, err, http.StatusTooManyRequests, "")
	// Another owner has a bound of its own; a finished run frees a place.
	bob := e.client("bob")
	if _, err := bob.Responses.New(t.Context(), bgParams("bob's")); err != nil {
		t.Errorf("bob: %v", err)
	}
	if _, err := c.Responses.Cancel(t.Context(), ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Responses.New(t.Context(), bgParams("after a cancel")); err != nil {
		t.Errorf("after a cancel: %v", err)
	}
	// A streamed GET of a non-streamed background response.
	s = c.Responses.GetStreaming(t.Context(), ids[1], responses.ResponseGetParams{})
	for s.Next() {
	}
	apiStatus(t, s.Err(), http.StatusBadRequest, "stream")
}

// TestBackgroundCancel: cancelling a run in progress stops its model call
// at once and leaves it cancelled; cancelling again, or a finished one,
// answers it as it is.
func TestBackgroundCancel(t *testing.T) {
	e := newBgEnv(t, newGate(fakeGateway(t), true), Options{})
	c := e.client("alice")
	r, err := c.Responses.New(t.Context(), bgParams("cancel me"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.gate.entered, "the model call")
	got, err := c.Responses.Cancel(t.Context(), r.ID)
	if err != nil || got.Status != responses.ResponseStatusCancelled || got.ID != r.ID {
		t.Fatalf("cancel: %v %+v", err, got)
	}
	waitFor(t, e.gate.abandoned, "the model call to be abandoned")
	for range 2 {
		if again, err := c.Responses.Cancel(t.Context(), r.ID); err != nil || again.Status != responses.ResponseStatusCancelled {
			t.Errorf("cancel again: %v %+v", err, again)
		}
		if g, err := c.Responses.Get(t.Context(), r.ID, responses.ResponseGetParams{}); err != nil || g.Status != responses.ResponseStatusCancelled {
			t.Errorf("get: %v %+v", err, g)
		}
	}
	bob := e.client("bob")
	if _, err := bob.Responses.Cancel(t.Context(), r.ID); err == nil {
		t.Error("bob cancelled alice's response")
	}

	e.gate.held.Store(false)
	done, err := c.Responses.New(t.Context(), bgParams("finish first"))
	if err != nil {
		t.Fatal(err)
	}
	poll(t, c, done.ID, responses.ResponseStatusCompleted)
	if got, err := c.Responses.Cancel(t.Context(), done.ID); err != nil || got.Status != responses.ResponseStatusCompleted ||
		got.OutputText() != "Echo: finish first" {
		t.Errorf("cancel a completed one: %v %+v", err, got)
	}
	// Deleting one in progress stops it too.
	e.gate.held.Store(true)
	del, err := c.Responses.New(t.Context(), bgParams("delete me"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.gate.entered, "the model call")
	if err := c.Responses.Delete(t.Context(), del.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, e.gate.abandoned, "the deleted run's model call to be abandoned")
	if _, err := c.Responses.Get(t.Context(), del.ID, responses.ResponseGetParams{}); err == nil {
		t.Error("a deleted background response is still there")
	}
}

// streamEvents reads s to its end: each event's sequence number and type,
// and the text deltas.
type streamed struct {
	seqs  []int64
	types []string
	text  strings.Builder
	final *responses.Response
	id    string // from response.created
}

func readStream(t *testing.T, s interface {
	Next() bool
	Current() responses.ResponseStreamEventUnion
	Err() error
}, stopAfter string) *streamed {
	t.Helper()
	out := &streamed{}
	for s.Next() {
		ev := s.Current()
		out.seqs = append(out.seqs, ev.SequenceNumber)
		out.types = append(out.types, ev.Type)
		switch ev.Type {
		case "response.created":
			out.id = ev.AsResponseCreated().Response.ID
		case "response.output_text.delta":
			out.text.WriteString(ev.Delta)
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			out.final = &r
		}
		if ev.Type == stopAfter {
			return out
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return out
}

// contiguous fails unless seqs run from first, one by one.
func contiguous(t *testing.T, seqs []int64, first int64) {
	t.Helper()
	for i, n := range seqs {
		if n != first+int64(i) {
			t.Fatalf("sequence numbers %v, want from %d without gaps or repeats", seqs, first)
		}
	}
}

// TestBackgroundStreamResume: a streamed background response whose client
// hangs up goes on; the stream resumes with starting_after, from any
// event, with no gap and no repeat, to the end.
func TestBackgroundStreamResume(t *testing.T) {
	e := newBgEnv(t, newGate(fakeGateway(t), true), Options{})
	c := e.client("alice")
	ctx, hangUp := context.WithCancel(t.Context())
	s := c.Responses.NewStreaming(ctx, bgParams("resume this stream please"))
	first := readStream(t, s, "response.in_progress")
	hangUp()
	s.Close()
	if fmt.Sprint(first.types) != "[response.created response.queued response.in_progress]" {
		t.Fatalf("first events %v", first.types)
	}
	contiguous(t, first.seqs, 0)
	waitFor(t, e.gate.entered, "the model call")
	e.gate.open() // the model answers after the client has gone

	id := first.id
	{
		r := readStream(t, c.Responses.GetStreaming(t.Context(), id, responses.ResponseGetParams{StartingAfter: openai.Int(2)}), "")
		contiguous(t, r.seqs, 3)
		if r.final == nil || r.final.Status != "completed" || r.text.String() != "Echo: resume this stream please" ||
			r.final.OutputText() != r.text.String() || r.final.Usage.TotalTokens == 0 {
			t.Fatalf("resumed: types %v text %q final %+v", r.types, r.text.String(), r.final)
		}
		if r.final.ID != id {
			t.Errorf("final id %s, created %s", r.final.ID, id)
		}
		// From further on, and from the start, the same events.
		for _, after := range []int64{5, 0} {
			again := readStream(t, c.Responses.GetStreaming(t.Context(), id, responses.ResponseGetParams{StartingAfter: openai.Int(after)}), "")
			contiguous(t, again.seqs, after+1)
			if again.seqs[len(again.seqs)-1] != r.seqs[len(r.seqs)-1] || again.final == nil {
				t.Errorf("after %d: %v", after, again.seqs)
			}
		}
		// Past the end: nothing, at once.
		last := r.seqs[len(r.seqs)-1]
		if end := readStream(t, c.Responses.GetStreaming(t.Context(), id, responses.ResponseGetParams{StartingAfter: openai.Int(last)}), ""); len(end.seqs) != 0 {
			t.Errorf("after the last event: %v", end.seqs)
		}
	}
	if got, err := c.Responses.Get(t.Context(), id, responses.ResponseGetParams{}); err != nil || got.Status != "completed" {
		t.Errorf("get: %v %+v", err, got)
	}
}

// TestBackgroundConformsToTheSpec checks the bodies and events of
// background responses against OpenAI's schemas: queued, in progress and
// cancelled Responses, a streamed run's events (response.queued among
// them), and the error event that ends a cancelled run's stream.
func TestBackgroundConformsToTheSpec(t *testing.T) {
	e := newBgEnv(t, newGate(fakeGateway(t), true), Options{})
	do := func(method, path, body string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(ownerHeader, "alice")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, b
	}
	checkSeq := func(evs []event, first int64) {
		t.Helper()
		for i, ev := range evs {
			if ev.name != ev.data.Get("type").Str || ev.data.Get("sequence_number").Int() != first+int64(i) {
				t.Errorf("event %d: %s %s", i, ev.name, ev.raw)
			}
			schema := eventSchemas[ev.name]
			if ev.name == "response.queued" {
				schema = "ResponseQueuedEvent"
			}
			if schema == "" {
				t.Errorf("unexpected event %s", ev.name)
				continue
			}
			conforms(t, schema, []byte(ev.raw))
		}
	}

	// A streamed run, whole; then resumed after event 3.
	e.gate.held.Store(false)
	status, b := do(http.MethodPost, "/v1/responses", `{"model":"m","input":"spec","background":true,"stream":true}`)
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, b)
	}
	evs := readEvents(t, bytes.NewReader(b))
	checkSeq(evs, 0)
	if len(evs) < 5 || evs[0].name != "response.created" || evs[1].name != "response.queued" || evs[2].name != "response.in_progress" ||
		evs[len(evs)-1].name != "response.completed" || evs[0].data.Get("response.status").Str != "queued" {
		t.Errorf("streamed background events: %v", types(evs))
	}
	id := evs[0].data.Get("response.id").Str
	status, b = do(http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after=3", "")
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, b)
	}
	if resumed := readEvents(t, bytes.NewReader(b)); len(resumed) != len(evs)-4 {
		t.Errorf("resumed after 3: %v of %v", types(resumed), types(evs))
	} else {
		checkSeq(resumed, 4)
	}
	status, b = do(http.MethodGet, "/v1/responses/"+id+"?stream=true&starting_after=x", "")
	wantError(t, status, b, http.StatusBadRequest, "starting_after")

	// Queued, in progress, cancelled.
	e.gate.held.Store(true)
	status, b = do(http.MethodPost, "/v1/responses", `{"model":"m","input":"spec","background":true}`)
	if status != http.StatusOK {
		t.Fatalf("%d %s", status, b)
	}
	conforms(t, "Response", b)
	id = gjson.GetBytes(b, "id").Str
	waitFor(t, e.gate.entered, "the model call")
	_, b = do(http.MethodGet, "/v1/responses/"+id, "")
	if gjson.GetBytes(b, "status").Str != "in_progress" {
		t.Errorf("in progress: %s", b)
	}
	conforms(t, "Response", b)
	_, b = do(http.MethodPost, "/v1/responses/"+id+"/cancel", "")
	if gjson.GetBytes(b, "status").Str != "cancelled" {
		t.Errorf("cancelled: %s", b)
	}
	conforms(t, "Response", b)
	waitFor(t, e.gate.abandoned, "the cancelled run's model call to end")

	// A streamed run cancelled while its client reads: the stream ends
	// with an error event.
	c := e.client("alice")
	st := c.Responses.NewStreaming(t.Context(), bgParams("spec"))
	defer st.Close()
	var last responses.ResponseStreamEventUnion
	for st.Next() {
		last = st.Current()
		conforms(t, map[string]string{"response.queued": "ResponseQueuedEvent"}[last.Type]+eventSchemas[last.Type], []byte(last.RawJSON()))
		if last.Type == "response.in_progress" {
			break
		}
	}
	id = last.Response.ID
	waitFor(t, e.gate.entered, "the model call")
	if _, err := c.Responses.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	var rest []string
	for st.Next() {
		last = st.Current()
		rest = append(rest, last.Type)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(rest) != "[error]" || last.Code != "response_cancelled" || last.SequenceNumber != 3 {
		t.Errorf("after the cancel: %v %s", rest, last.RawJSON())
	}
	conforms(t, "ResponseErrorEvent", []byte(last.RawJSON()))
}
