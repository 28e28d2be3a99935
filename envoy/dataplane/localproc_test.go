package dataplane

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// localProc serves a fakeProc's script as a LocalProcessor: each session
// runs the script on the caller's goroutine for every message, as the
// embedded gateway's extproc does, and gives up when its context ends, as
// extproc's calls (key lookups, the rate limit call) do.
type localProc struct {
	f *fakeProc

	mu     sync.Mutex
	opened int
	closed int
	mds    []metadata.MD
	// closes gets a value for every session closed.
	closes chan struct{}
}

func (l *localProc) OpenSession(_ context.Context, md metadata.MD) ExtProcSession {
	l.mu.Lock()
	l.opened++
	l.mds = append(l.mds, md.Copy())
	l.mu.Unlock()
	l.f.mu.Lock()
	l.f.streams++
	l.f.mu.Unlock()
	return &localSession{l: l}
}

func (l *localProc) counts() (opened, closed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opened, l.closed
}

type localSession struct {
	l      *localProc
	closes int
}

func (s *localSession) Handle(ctx context.Context, req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
	// The data plane reuses its messages once Handle returns: what the
	// session keeps, it copies (as the embedded gateway's does).
	req = proto.Clone(req).(*extprocv3.ProcessingRequest)
	script := s.l.f.record(req)
	type result struct {
		resp *extprocv3.ProcessingResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := script(req)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *localSession) Close(context.Context) {
	s.closes++
	s.l.mu.Lock()
	s.l.closed++
	s.l.mu.Unlock()
	s.l.closes <- struct{}{}
}

// waitClosed waits for n sessions to be closed.
func (l *localProc) waitClosed(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for range n {
		select {
		case <-l.closes:
		case <-timeout:
			o, c := l.counts()
			t.Fatalf("sessions opened %d, closed %d; want %d closed", o, c, n)
		}
	}
}

// newLocalEnv is newEnv with the ext_proc cluster served by a
// LocalProcessor running the same scripts.
func newLocalEnv(t *testing.T) *env {
	t.Helper()
	fp := &fakeProc{}
	return buildEnv(t, fp, func(o *Options) {
		o.LocalProcessors = map[string]LocalProcessor{catalog.ExtProcCluster: &localProc{f: fp, closes: make(chan struct{}, 16)}}
	})
}

func (e *env) local() *localProc { return e.opts.LocalProcessors[catalog.ExtProcCluster].(*localProc) }

// TestLocalProcessorFailures: a LocalProcessor fails a request as a gRPC
// server does (the same cases as TestProcessorFailures), its session is
// closed once, and a Handle blocked past message_timeout is cut by its
// context.
func TestLocalProcessorFailures(t *testing.T) {
	testProcessorFailures(t, newLocalEnv, func(e *env) {
		e.local().waitClosed(t, 1)
		if o, c := e.local().counts(); o != 1 || c != 1 {
			t.Errorf("sessions opened %d, closed %d; want 1 and 1", o, c)
		}
	})
}

// TestLocalProcessorFlow: a request through a LocalProcessor makes the
// exchanges a gRPC processor sees, in one session opened with the filter's
// initial metadata, closed once the request is over.
func TestLocalProcessorFlow(t *testing.T) {
	e := newLocalEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(routeToModel(testModel))
	resp, body := e.post("/v1/chat/completions", `{"model":"m1"}`)
	if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if got, want := e.proc.messages(), []string{"request_headers", "request_body", "response_headers"}; !slices.Equal(got, want) {
		t.Errorf("messages = %v, want %v", got, want)
	}
	l := e.local()
	l.waitClosed(t, 1)
	if o, c := l.counts(); o != 1 || c != 1 {
		t.Errorf("sessions opened %d, closed %d; want 1 and 1", o, c)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if got := l.mds[0].Get(catalog.PhaseMetadata); len(got) != 0 {
		t.Errorf("downstream session metadata %v, want no phase", l.mds[0])
	}
	if down, _ := e.dp.ExtProcStats(); down.Streams != 1 || down.Messages() != 3 {
		t.Errorf("ExtProcStats downstream %+v, want 1 stream and 3 messages", down)
	}
}

// TestLocalProcessorClientGone: a client that hangs up while its request's
// Handle is running cancels the Handle's context, and the session is still
// closed (extproc charges what it saw in Close).
func TestLocalProcessorClientGone(t *testing.T) {
	e := newLocalEnv(t)
	e.apply(resOpts{extProc: defaultExtProc()})
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if req.GetRequestBody() != nil {
			close(entered)
			<-release
		}
		return continueAll(req)
	})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	<-errc
	e.local().waitClosed(t, 1)
	if o, c := e.local().counts(); o != 1 || c != 1 {
		t.Errorf("sessions opened %d, closed %d; want 1 and 1", o, c)
	}
}
