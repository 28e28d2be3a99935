package dataplane

import "testing"

// TestCheckHeadDecisions: the framing check's decision on each complete
// request head (what net/http is handed, which framing follows, or the
// refusal), for the cases TestRequestFraming does not send whole.
func TestCheckHeadDecisions(t *testing.T) {
	const both = "The request has both Content-Length and Transfer-Encoding."
	for _, tc := range []struct {
		name, head string
		state      int
		remaining  int64
		reason     string
	}{
		{name: "content-length", head: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", state: fsBody, remaining: 5},
		{name: "bare LF line ends", head: "POST / HTTP/1.1\nHost: a\nContent-Length: 3\n\n", state: fsBody, remaining: 3},
		{name: "content-length 0", head: "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", state: fsHead},
		{name: "no body", head: "GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", state: fsHead},
		{name: "equal content-lengths", head: "POST / HTTP/1.1\r\nContent-Length: 7\r\ncontent-length:  7 \r\n\r\n", state: fsBody, remaining: 7},
		{name: "differing content-lengths", head: "POST / HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 8\r\n\r\n", state: fsPass},
		{name: "negative content-length", head: "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", state: fsPass},
		{name: "chunked, any case", head: "POST / HTTP/1.1\r\ntransfer-ENCODING: Chunked\r\n\r\n", state: fsChunkSize},
		{name: "two transfer-encodings", head: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", state: fsPass},
		{name: "gzip transfer-encoding", head: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", state: fsPass},
		{name: "both, mixed case", head: "POST /v1/x?q=1 HTTP/1.1\r\ncontent-LENGTH: 5\r\nTransfer-Encoding: chunked\r\n\r\n", state: fsRejected, reason: both},
		{name: "obs-fold", head: "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n\tfolded\r\n\r\n", state: fsRejected,
			reason: "The request has a folded header line (obs-fold), which this gateway does not accept."},
		{name: "a line without a colon", head: "GET / HTTP/1.1\r\nbogus\r\nContent-Length: 2\r\n\r\n", state: fsBody, remaining: 2},
		{name: "lone empty line", head: "\r\n", state: fsHead},
		{name: "HTTP/2 preface", head: "PRI * HTTP/2.0\r\n\r\n", state: fsPass},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &framingConn{token: "t", head: []byte(tc.head)}
			c.checkHead()
			if c.state != tc.state || c.remaining != tc.remaining || c.reason != tc.reason {
				t.Fatalf("state %d remaining %d reason %q, want %d %d %q", c.state, c.remaining, c.reason, tc.state, tc.remaining, tc.reason)
			}
			want := tc.head
			if tc.reason != "" {
				want = "GET / HTTP/1.1\r\nHost: switchyard\r\n" + framingHeader + ": t\r\n\r\n"
			}
			if string(c.pending) != want {
				t.Errorf("handed to net/http %q, want %q", c.pending, want)
			}
			if len(c.head) != 0 {
				t.Errorf("head left %q", c.head)
			}
		})
	}
	// A refused request is logged as the client sent it.
	c := &framingConn{token: "t", head: []byte("PUT /v1/files/f?x=1 HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n")}
	c.checkHead()
	if reason, method, path := c.refused(); reason == "" || method != "PUT" || path != "/v1/files/f" {
		t.Errorf("refused %q %q %q", reason, method, path)
	}
}
