package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

// gateStreams holds every event stream of the upstream after n writes until
// release is closed (or the request ends): a stream certainly in flight
// when the test acts.
func gateStreams(n int, release <-chan struct{}) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(&gateWriter{ResponseWriter: w, left: n, release: release, ctx: r.Context()}, r)
		})
	}
}

type gateWriter struct {
	http.ResponseWriter
	left    int
	release <-chan struct{}
	ctx     context.Context
}

func (w *gateWriter) Write(p []byte) (int, error) {
	if strings.HasPrefix(w.Header().Get("content-type"), "text/event-stream") {
		if w.left == 0 {
			select {
			case <-w.release:
			case <-w.ctx.Done():
				return 0, w.ctx.Err()
			}
		}
		w.left--
	}
	return w.ResponseWriter.Write(p)
}

func (w *gateWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// drainStack is a stack with the admin listener (for the probes) whose
// upstream streams stop after two writes until release is closed.
func drainStack(t *testing.T, release <-chan struct{}) *stack {
	return newStack(t, stackOptions{
		wrapUpstream: gateStreams(2, release),
		gateway: func(o *gateway.Options) {
			o.AdminListen, o.AdminToken = "127.0.0.1:0", "test-admin-token-0123456789abcdef"
		},
	})
}

func probe(t *testing.T, s *stack, path string) int {
	t.Helper()
	resp, err := http.Get(s.gw.AdminURL() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// startDrain begins a shutdown with ctx and waits until readiness is off.
func startDrain(t *testing.T, s *stack, ctx context.Context) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.gw.Shutdown(ctx) }()
	waitFor(t, 10*time.Second, "readiness off during the drain", func() bool { return probe(t, s, "/readyz") == http.StatusServiceUnavailable })
	if code := probe(t, s, "/healthz"); code != http.StatusOK {
		t.Errorf("liveness during the drain = %d, want 200", code)
	}
	return done
}

// TestShutdownDrainsStreams: SIGTERM's drain lets a stream in flight finish
// whole, while new connections are refused and readiness is false.
func TestShutdownDrainsStreams(t *testing.T) {
	release := make(chan struct{})
	s := drainStack(t, release)
	if code := probe(t, s, "/readyz"); code != http.StatusOK {
		t.Fatalf("readiness before the drain = %d", code)
	}
	c := s.client()
	stream := c.Chat.Completions.NewStreaming(context.Background(), chatParams("drain me"), option.WithHeader(fake.HeaderChunks, "8"))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	done := startDrain(t, s, context.Background())

	u, _ := url.Parse(s.gw.BaseURL())
	waitFor(t, 10*time.Second, "the public listener to stop accepting", func() bool {
		c, err := net.Dial("tcp", u.Host)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	close(release)
	var text strings.Builder
	finished := false
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
			finished = finished || c.FinishReason != ""
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("the drained stream ended with %v", err)
	}
	if !finished || len(strings.Fields(text.String())) < 7 {
		t.Errorf("the drained stream is not whole: finished=%v text=%q", finished, text.String())
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestShutdownGraceEndsStreamsWithAnError: a stream still running when the
// grace period ends gets an error event the SDK raises, and the access log
// marks it as cut.
func TestShutdownGraceEndsStreamsWithAnError(t *testing.T) {
	s := drainStack(t, make(chan struct{})) // never released
	c := s.client()
	stream := c.Chat.Completions.NewStreaming(context.Background(), chatParams("cut me"), option.WithHeader(fake.HeaderChunks, "8"))
	defer stream.Close()
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	ctx, endGrace := context.WithCancel(context.Background())
	done := startDrain(t, s, ctx)
	endGrace()
	for stream.Next() {
	}
	// openai-go raises an SSE error event as "received error while
	// streaming: <the error object>".
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), `"code":"gateway_shutdown"`) {
		t.Fatalf("stream error = %v, want the SDK to raise gateway_shutdown", stream.Err())
	}
	if err := <-done; err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want the grace period's end reported", err)
	}
	var cutLogged bool
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"access"`) && strings.Contains(line, `"gateway_shutdown"`) && strings.Contains(line, `"level":"ERROR"`) {
			cutLogged = true
		}
	}
	if !cutLogged {
		t.Errorf("no ERROR access log line with gateway_shutdown:\n%s", s.logs.String())
	}
}
