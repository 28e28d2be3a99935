package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// rawExchange writes a request by hand on a fresh connection to the
// gateway, half-closes it when asked (a client that sent all it will
// send), and reads the one response.
func rawExchange(t *testing.T, s *stack, raw string, halfClose bool) (*http.Response, []byte) {
	t.Helper()
	u, err := url.Parse(s.gw.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	raw = strings.ReplaceAll(raw, "KEY", s.key)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp, b
}

// openAIError checks the OpenAI error shape and returns its code.
func openAIError(t *testing.T, resp *http.Response, body []byte) string {
	t.Helper()
	var e struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Param   any     `json:"param"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if !strings.HasPrefix(resp.Header.Get("content-type"), "application/json") {
		t.Errorf("content-type %q, body %q", resp.Header.Get("content-type"), body)
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil || e.Error.Code == nil {
		t.Fatalf("not the OpenAI error shape: %q (%v)", body, err)
	}
	var keys map[string]map[string]json.RawMessage
	_ = json.Unmarshal(body, &keys)
	if _, ok := keys["error"]["param"]; !ok {
		t.Errorf("no param key in %s", body)
	}
	return *e.Error.Code
}

// accessStatus returns the status of the access log line for a request
// with this request id header value... lines are matched on the path and
// the response detail.
func accessLines(s *stack, path string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if !strings.Contains(line, `"msg":"access"`) {
			continue
		}
		m := map[string]any{}
		if json.Unmarshal([]byte(line), &m) == nil && m["path"] == path {
			out = append(out, m)
		}
	}
	return out
}

// A body that breaks its own framing (cut short of its Content-Length, a
// malformed chunk) or a request framed ambiguously (Content-Length with
// Transfer-Encoding, folded header lines) is the client's error: 400 in the
// OpenAI shape, with that status in the access log, on every path family.
func TestMalformedBodiesAre400(t *testing.T) {
	s := newStack(t, stackOptions{})
	paths := []struct{ path, contentType string }{
		{"/v1/chat/completions", "application/json"},
		{"/v1/embeddings", "application/json"},
		{"/v1/responses", "application/json"},
		{"/v1/files", "multipart/form-data; boundary=xyz"},
		{"/v1/batches", "application/json"},
	}
	bodies := []struct {
		name, framing, body string
		halfClose           bool
		code                string
	}{
		{name: "content-length larger than the body", framing: "Content-Length: 500\r\n",
			body: `{"model":"demo/chat","input":"hi"`, halfClose: true, code: "incomplete_request_body"},
		{name: "bad chunk size", framing: "Transfer-Encoding: chunked\r\n",
			body: "zz\r\n{\"model\":\"demo/chat\"}\r\n0\r\n\r\n", code: "malformed_request_body"},
		{name: "chunked body cut short", framing: "Transfer-Encoding: chunked\r\n",
			body: "40\r\n{\"model\":\"demo/chat\"", halfClose: true, code: "incomplete_request_body"},
		{name: "content-length and transfer-encoding", framing: "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
			body: "0\r\n\r\n", code: "invalid_request_framing"},
		{name: "obs-fold", framing: "X-Folded: one\r\n two\r\nContent-Length: 2\r\n",
			body: "{}", code: "invalid_request_framing"},
	}
	for _, p := range paths {
		for _, b := range bodies {
			t.Run(strings.TrimPrefix(p.path, "/v1/")+"/"+b.name, func(t *testing.T) {
				before := len(accessLines(s, p.path))
				raw := "POST " + p.path + " HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer KEY\r\n" +
					"Content-Type: " + p.contentType + "\r\n" + b.framing + "\r\n" + b.body
				resp, body := rawExchange(t, s, raw, b.halfClose)
				if resp.StatusCode != http.StatusBadRequest {
					t.Fatalf("status %d, body %q", resp.StatusCode, body)
				}
				if code := openAIError(t, resp, body); code != b.code {
					t.Errorf("code %q, want %q", code, b.code)
				}
				// The access log line is written once the handler is done.
				deadline := time.Now().Add(5 * time.Second)
				for len(accessLines(s, p.path)) == before && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				lines := accessLines(s, p.path)
				if len(lines) == before {
					t.Fatal("no access log line")
				}
				if st := lines[len(lines)-1]["status"]; st != float64(400) {
					t.Errorf("access log status %v, want 400", st)
				}
			})
		}
	}
}
