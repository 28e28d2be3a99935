package fake

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const hiBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
const streamBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":"one two three four five"}]}`

func TestFaultStatus(t *testing.T) {
	tests := []struct {
		name       string
		opts       Options
		headers    []string
		status     int
		typ        string
		retryAfter string
	}{
		{name: "503 header", headers: []string{HeaderStatus, "503"}, status: 503, typ: "server_error"},
		{name: "500 with retry-after", headers: []string{HeaderStatus, "500", HeaderRetryAfter, "7"}, status: 500, typ: "server_error", retryAfter: "7"},
		{name: "429", headers: []string{HeaderStatus, "429", HeaderRetryAfter, "1"}, status: 429, typ: "requests", retryAfter: "1"},
		{name: "400", headers: []string{HeaderStatus, "400"}, status: 400, typ: "invalid_request_error"},
		{name: "from options", opts: Options{Fault: Fault{Status: 502}}, status: 502, typ: "server_error"},
		{name: "header beats options", opts: Options{Fault: Fault{Status: 502}}, headers: []string{HeaderStatus, "504"}, status: 504, typ: "server_error"},
		// The fault comes before the body is read: a gateway sees the
		// same failure whatever it sends.
		{name: "before body checks", headers: []string{HeaderStatus, "503"}, status: 503, typ: "server_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.opts)
			body := hiBody
			if tt.name == "before body checks" {
				body = `not json`
			}
			resp := post(t, srv, body, tt.headers...)
			e := wantError(t, resp, tt.status, "fake_fault")
			if e.Error.Type != tt.typ {
				t.Errorf("type = %q, want %q", e.Error.Type, tt.typ)
			}
			if got := resp.Header.Get("retry-after"); got != tt.retryAfter {
				t.Errorf("retry-after = %q, want %q", got, tt.retryAfter)
			}
		})
	}
}

func TestFaultDelay(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		headers []string
		min     time.Duration
	}{
		{name: "header", headers: []string{HeaderDelayMS, "80"}, min: 80 * time.Millisecond},
		{name: "options fault", opts: Options{Fault: Fault{Delay: 80 * time.Millisecond}}, min: 80 * time.Millisecond},
		{name: "service time", opts: Options{ServiceTime: 50 * time.Millisecond}, min: 50 * time.Millisecond},
		{name: "service time plus header", opts: Options{ServiceTime: 50 * time.Millisecond}, headers: []string{HeaderDelayMS, "50"}, min: 100 * time.Millisecond},
		{name: "header overrides options", opts: Options{Fault: Fault{Delay: time.Hour}}, headers: []string{HeaderDelayMS, "0"}},
		{name: "delays errors too", headers: []string{HeaderDelayMS, "80", HeaderStatus, "500"}, min: 80 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.opts)
			start := time.Now()
			resp := post(t, srv, hiBody, tt.headers...)
			elapsed := time.Since(start)
			readBody(t, resp)
			if elapsed < tt.min {
				t.Errorf("answered after %v, want >= %v", elapsed, tt.min)
			}
			if elapsed > tt.min+5*time.Second {
				t.Errorf("answered after %v, want about %v", elapsed, tt.min)
			}
		})
	}
}

// TestFaultDelayCancel checks that a delayed handler returns as soon as the
// client gives up, rather than sleeping out the delay.
func TestFaultDelayCancel(t *testing.T) {
	returned := make(chan time.Time, 1)
	h := NewOpenAI(Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		returned <- time.Now()
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions", strings.NewReader(hiBody))
	req.Header.Set(HeaderDelayMS, "60000")
	start := time.Now()
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("request succeeded with status %d despite the client timeout", resp.StatusCode)
	}
	select {
	case at := <-returned:
		if d := at.Sub(start); d > 5*time.Second {
			t.Errorf("handler returned after %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler still sleeping after the client left")
	}
}

func TestFaultCutAfter(t *testing.T) {
	// streamBody yields: role, 6 words, finish, [DONE] = 9 events.
	tests := []struct {
		name    string
		opts    Options
		headers []string
		events  int // received before the cut; -1 for an intact stream
	}{
		{name: "header", headers: []string{HeaderCutAfter, "3"}, events: 3},
		{name: "zero cuts after headers", headers: []string{HeaderCutAfter, "0"}, events: 0},
		{name: "just before DONE", headers: []string{HeaderCutAfter, "8"}, events: 8},
		{name: "past the end", headers: []string{HeaderCutAfter, "9"}, events: -1},
		{name: "options", opts: Options{Fault: Fault{CutAfterChunks: 2}}, events: 2},
		{name: "header beats options", opts: Options{Fault: Fault{CutAfterChunks: 2}}, headers: []string{HeaderCutAfter, "5"}, events: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newServer(t, tt.opts)
			resp := post(t, srv, streamBody, tt.headers...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			s := readSSE(t, resp)
			if tt.events < 0 {
				if !s.clean || len(s.data) != 9 || s.data[8] != "[DONE]" {
					t.Fatalf("want an intact stream of 9 events, got %d, clean %v, err %v", len(s.data), s.clean, s.err)
				}
				return
			}
			if s.clean || !errors.Is(s.err, io.ErrUnexpectedEOF) {
				t.Errorf("stream ended clean=%v err=%v, want an abrupt cut (unexpected EOF)", s.clean, s.err)
			}
			if len(s.data) != tt.events {
				t.Errorf("got %d events before the cut, want %d: %q", len(s.data), tt.events, s.data)
			}
			s.chunks(t) // what did arrive is well-formed
		})
	}
}

func TestFaultCutAfterIgnoredWithoutStream(t *testing.T) {
	srv := newServer(t, Options{})
	resp := post(t, srv, hiBody, HeaderCutAfter, "0")
	if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

func TestChunkDelay(t *testing.T) {
	srv := newServer(t, Options{ChunkDelay: 20 * time.Millisecond})
	start := time.Now()
	s := readSSE(t, post(t, srv, streamBody))
	elapsed := time.Since(start)
	if !s.clean || len(s.data) != 9 {
		t.Fatalf("stream: %d events, clean %v, err %v", len(s.data), s.clean, s.err)
	}
	// Delays sit between events: 8 gaps.
	if want := 8 * 20 * time.Millisecond; elapsed < want {
		t.Errorf("stream took %v, want >= %v", elapsed, want)
	}
}

// TestFaultStallAfter checks that a stalled stream sends its first events,
// then nothing, and holds the connection until the client gives up.
func TestFaultStallAfter(t *testing.T) {
	tests := []struct {
		kind, path, body string
		opts             Options
		headers          []string
		events           int
	}{
		{kind: KindOpenAI, path: "/v1/chat/completions", body: streamBody, headers: []string{HeaderStallAfter, "3"}, events: 3},
		{kind: KindOpenAI, path: "/v1/chat/completions", body: streamBody, opts: Options{Fault: Fault{StallAfterChunks: 2}}, events: 2},
		{kind: KindOpenAI, path: "/v1/chat/completions", body: streamBody, headers: []string{HeaderStallAfter, "0"}, events: 0},
		{kind: KindAnthropic, path: "/v1/messages", body: `{"model":"m","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"one two three"}]}`,
			headers: []string{HeaderStallAfter, "2", "anthropic-version", "2023-06-01"}, events: 2},
		{kind: KindGemini, path: "/v1beta/models/m:streamGenerateContent?alt=sse", body: `{"contents":[{"role":"user","parts":[{"text":"one two three"}]}]}`,
			opts: Options{Fault: Fault{StallAfterChunks: 1}}, events: 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.kind, tt.events), func(t *testing.T) {
			h, err := Handler(tt.kind, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			returned := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(returned)
				h.ServeHTTP(w, r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("content-type", "application/json")
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			// Read the events the fake sends before stalling (a blank line
			// ends each), then give up as a client would.
			r := bufio.NewReader(resp.Body)
			for n := 0; n < tt.events; {
				line, err := r.ReadString('\n')
				if err != nil {
					t.Fatalf("after %d events: %v", n, err)
				}
				if strings.TrimRight(line, "\r\n") == "" {
					n++
				}
			}
			select {
			case <-returned:
				t.Fatal("the handler returned instead of stalling")
			default:
			}
			cancel()
			<-returned // the stall ends when the client goes away
			if rest, err := io.ReadAll(r); err == nil || strings.Contains(string(rest), "data:") {
				t.Errorf("after the stall: %q, %v; want nothing more and an error", rest, err)
			}
		})
	}
}
