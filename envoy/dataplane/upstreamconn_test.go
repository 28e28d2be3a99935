package dataplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// closedAfter is a request body as net/http's server hands it over: n
// bytes, then EOF; once the handler has returned (closed is set), any read
// fails as a closed *http.body does.
type closedAfter struct {
	r      io.Reader
	closed *atomic.Bool
}

var errClosedBody = errors.New("http: invalid Read on closed Body")

func (c *closedAfter) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, errClosedBody
	}
	return c.r.Read(p)
}

// The upstream transport reads once more after the declared length; that
// read must not reach the server's body, which the finished handler has
// closed by then (a write error that closed the pooled upstream connection
// under the next response).
func TestIdleBodyEndsAtDeclaredLength(t *testing.T) {
	for _, tc := range []struct {
		name     string
		declared int64
		body     string
		wantErr  error // of the read after the body's bytes, once closed
	}{
		{name: "declared length", declared: 5, body: "hello", wantErr: io.EOF},
		{name: "empty body declared", declared: 0, body: "", wantErr: io.EOF},
		{name: "no declared length", declared: -1, body: "hello", wantErr: errClosedBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closed, complete, timedOut atomic.Bool
			var bad atomic.Pointer[apierror.Error]
			b := &idleBody{r: &closedAfter{r: strings.NewReader(tc.body), closed: &closed},
				remaining: tc.declared, complete: &complete, timedOut: &timedOut, bad: &bad}
			got, err := io.ReadAll(io.LimitReader(b, int64(len(tc.body))))
			if err != nil || string(got) != tc.body {
				t.Fatalf("read %q, %v", got, err)
			}
			closed.Store(true) // the handler returned
			n, err := b.Read(make([]byte, 16))
			if n != 0 || !errors.Is(err, tc.wantErr) {
				t.Errorf("read after the body: %d, %v; want 0, %v", n, err, tc.wantErr)
			}
			if tc.declared >= 0 && !complete.Load() {
				t.Error("the request is not marked complete")
			}
		})
	}
}

// An upstream may answer before it has read the whole request body (it
// streams events while the upload continues), as Envoy allows: the data
// plane must keep forwarding the body after the response head went
// downstream, not drain and close it under the transport.
func TestUpstreamBodyFullDuplex(t *testing.T) {
	e := newEnv(t)
	const part1, part2 = "first-half;", "second-half"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		first := make([]byte, len(part1))
		if _, err := io.ReadFull(r.Body, first); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "data: got %s\n\n", first)
		_ = rc.Flush()
		rest, err := io.ReadAll(r.Body)
		if err != nil {
			fmt.Fprintf(w, "data: error %v\n\n", err)
			return
		}
		fmt.Fprintf(w, "data: got %s\n\n", rest)
	}))
	t.Cleanup(up.Close)
	if err := e.dp.Apply(context.Background(), buildResources(t, up.URL, resOpts{noExtProc: true})); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	// A data plane that waits for the whole body before the response
	// head goes out would deadlock with this client: end it then.
	stop := context.AfterFunc(ctx, func() { _ = pw.CloseWithError(ctx.Err()) })
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url("/v1/chat/completions"), pr)
	req.ContentLength = int64(len(part1) + len(part2))
	req.Header.Set(catalog.RouteHeader, testModel)
	go func() { _, _ = io.WriteString(pw, part1) }()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: got "+part1+"\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	// Only now does the client send the rest of its body.
	go func() {
		_, _ = io.WriteString(pw, part2)
		_ = pw.Close()
	}()
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("rest of the stream: %v", err)
	}
	if want := "\ndata: got " + part2 + "\n\n"; string(rest) != want {
		t.Errorf("rest of the stream %q, want %q", rest, want)
	}
}

// rawRequests writes raw on one connection to the data plane and reads
// want responses (then the connection's end, when closing).
func rawRequests(t *testing.T, e *env, raw string, want int) ([]*http.Response, [][]byte) {
	t.Helper()
	c, err := net.Dial("tcp", e.dp.Addr(testListener).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var resps []*http.Response
	var bodies [][]byte
	for range want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", len(resps)+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("response %d body: %v", len(resps)+1, err)
		}
		resps, bodies = append(resps, resp), append(bodies, b)
	}
	return resps, bodies
}

func TestRequestFraming(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{noExtProc: true})
	ok := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + catalog.RouteHeader + ": " + testModel + "\r\nContent-Length: 4\r\n\r\nabcd"
	okChunked := "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n" + catalog.RouteHeader + ": " + testModel +
		"\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer-A: x\r\n\r\n"
	for _, tc := range []struct {
		name   string
		raw    string
		status []int
		code   string // of the last response
	}{
		{name: "keep-alive after length and chunked bodies", raw: ok + okChunked + ok, status: []int{200, 200, 200}},
		{name: "content-length and transfer-encoding",
			raw:    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			status: []int{400}, code: "invalid_request_framing"},
		{name: "obs-fold",
			raw:    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nX-A: one\r\n two\r\nContent-Length: 0\r\n\r\n",
			status: []int{400}, code: "invalid_request_framing"},
		{name: "smuggling after a good request",
			raw:    ok + "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
			status: []int{200, 400}, code: "invalid_request_framing"},
		{name: "headers too large",
			raw:    "GET /v1/models HTTP/1.1\r\nHost: gw\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n",
			status: []int{431}, code: "request_header_fields_too_large"},
		{name: "no host", raw: "GET /v1/models HTTP/1.1\r\n\r\n", status: []int{400}, code: "invalid_request"},
		{name: "bad request line", raw: "NOT A REQUEST\r\n\r\n", status: []int{400}, code: "invalid_request"},
		{name: "unsupported transfer-encoding",
			raw:    "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: gzip\r\n\r\n",
			status: []int{501}, code: "unsupported_transfer_encoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resps, bodies := rawRequests(t, e, tc.raw, len(tc.status))
			for i, resp := range resps {
				if resp.StatusCode != tc.status[i] {
					t.Errorf("response %d: status %d, want %d (%q)", i+1, resp.StatusCode, tc.status[i], bodies[i])
				}
			}
			if tc.code == "" {
				return
			}
			last, body := resps[len(resps)-1], bodies[len(bodies)-1]
			var eb struct {
				Error struct {
					Code, Type, Message string
				}
			}
			if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code != tc.code || eb.Error.Message == "" ||
				last.Header.Get("Content-Type") != "application/json" {
				t.Errorf("error body %q (%s), want code %s", body, last.Header.Get("Content-Type"), tc.code)
			}
			if !last.Close {
				t.Error("the connection stays open after a framing error")
			}
		})
	}
	// Every refusal has its access log line with its status. The line is
	// written as the connection's refusal ends, which the client can see
	// first: wait for it (bounded) rather than read the log once.
	statuses := func() []int {
		var out []int
		e.logs.mu.Lock()
		defer e.logs.mu.Unlock()
		for _, r := range e.logs.records {
			if r.Message == "access" {
				r.Attrs(func(a slog.Attr) bool {
					if a.Key == "status" {
						out = append(out, int(a.Value.Int64()))
					}
					return true
				})
			}
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, want := range []int{400, 431, 501} {
		for !slices.Contains(statuses(), want) {
			if time.Now().After(deadline) {
				t.Errorf("no access log line with status %d in %v", want, statuses())
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
