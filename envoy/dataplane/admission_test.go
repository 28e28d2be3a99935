package dataplane

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// newEnvWith is newEnv with the data plane's options adjusted.
func newEnvWith(t *testing.T, adjust func(*Options)) *env {
	t.Helper()
	fp, addr := startProc(t)
	return buildEnv(t, fp, func(o *Options) {
		o.StaticClusters[catalog.ExtProcCluster] = addr
		adjust(o)
	})
}

// slowClient is a raw HTTP/1.1 client that sent a request head and part of
// its body, and holds the rest back.
type slowClient struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
}

func startSlow(t *testing.T, e *env, head, partial string) *slowClient {
	t.Helper()
	c, err := net.Dial("tcp", e.dp.Addr(testListener).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, head+partial); err != nil {
		t.Fatal(err)
	}
	return &slowClient{t: t, conn: c, br: bufio.NewReader(c)}
}

func (c *slowClient) send(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		c.t.Fatal(err)
	}
}

func (c *slowClient) response() (*http.Response, map[string]map[string]any) {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("no response: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	var body map[string]map[string]any
	_ = json.Unmarshal(b, &body)
	return resp, body
}

func chatHead(n int, extra string) string {
	return fmt.Sprintf("POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n%s: %s\r\n%sContent-Length: %d\r\n\r\n",
		catalog.RouteHeader, testModel, extra, n)
}

// The whole body must arrive within the request body timeout, however
// steadily it trickles: 408 in the OpenAI shape, on the buffered (ext_proc)
// path and on the path that streams the body upstream.
func TestRequestBodyTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    resOpts
	}{
		{name: "buffered for ext_proc"},
		{name: "streamed upstream", o: resOpts{noExtProc: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnvWith(t, func(o *Options) { o.RequestBodyTimeout = 150 * time.Millisecond })
			e.apply(tc.o)
			if tc.o.noExtProc {
				e.up.handler = func(w http.ResponseWriter, r *http.Request) {}
			}
			c := startSlow(t, e, chatHead(100, ""), `{"model":`)
			// The client keeps sending, a byte at a time, until answered:
			// the idle timeout (a minute) never strikes.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := io.WriteString(c.conn, " "); err != nil {
							return
						}
					}
				}
			}()
			resp, body := c.response()
			if resp.StatusCode != http.StatusRequestTimeout || body["error"]["code"] != "request_body_timeout" {
				t.Fatalf("status %d, body %v", resp.StatusCode, body)
			}
			if l := e.logs.access(t, 1); l["status"] != int64(408) || l["response_detail"] != "request_body_timeout" {
				t.Errorf("access log %v", l)
			}
		})
	}
}

// withKey is an ext_proc script that authenticates every request as key
// (its dynamic metadata in the request headers reply, as extproc does).
func withKey(key string) procScript {
	return func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		r := reply(req, &extprocv3.CommonResponse{})
		if req.GetRequestHeaders() != nil {
			r.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{
				catalog.MetadataNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
					"key_id": structpb.NewStringValue(key)}})}}
		}
		return r, nil
	}
}

// waitFor polls the data plane's admission state (not the clock) until
// cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (a *admission) slots(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.keys["\x00"+key]
}

// One key's requests in flight are capped: a key trickling bodies cannot
// hold the gateway's connections; the next request gets 429 with
// retry-after, and a slot frees when a request ends.
func TestRequestsPerKeyCap(t *testing.T) {
	e := newEnvWith(t, func(o *Options) { o.MaxRequestsPerKey = 2 })
	e.apply(resOpts{})
	e.proc.setScript(withKey("key_a"))
	body := `{"model":"m1"}`
	slow1 := startSlow(t, e, chatHead(len(body), ""), body[:3])
	slow2 := startSlow(t, e, chatHead(len(body), ""), body[:3])
	waitFor(t, "two slots taken", func() bool { return e.dp.adm.slots("key_a") == 2 })

	third := startSlow(t, e, chatHead(len(body), ""), body)
	resp, eb := third.response()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		eb["error"]["code"] != "too_many_concurrent_requests" || eb["error"]["type"] != "requests" {
		t.Fatalf("third request: %d retry-after %q %v", resp.StatusCode, resp.Header.Get("Retry-After"), eb)
	}
	// Another key is not affected.
	e.proc.setScript(withKey("key_b"))
	other := startSlow(t, e, chatHead(len(body), ""), body)
	if resp, eb := other.response(); resp.StatusCode != http.StatusOK {
		t.Fatalf("another key: %d %v", resp.StatusCode, eb)
	}
	e.proc.setScript(withKey("key_a"))
	// The slow ones finish; their slots come back.
	slow1.send(body[3:])
	slow2.send(body[3:])
	for _, c := range []*slowClient{slow1, slow2} {
		if resp, eb := c.response(); resp.StatusCode != http.StatusOK {
			t.Fatalf("slow request: %d %v", resp.StatusCode, eb)
		}
	}
	waitFor(t, "slots released", func() bool { return e.dp.adm.slots("key_a") == 0 })
	if resp, eb := startSlow(t, e, chatHead(len(body), ""), body).response(); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the slots came back: %d %v", resp.StatusCode, eb)
	}
}

// The bytes of request bodies held at once are capped: bodies that would
// take the total past it get 503 with retry-after before they are read;
// the others succeed.
func TestBodyBytesInFlightCap(t *testing.T) {
	const size = 300 << 10
	e := newEnvWith(t, func(o *Options) { o.MaxBodyBytesInFlight = 1 << 20 })
	e.apply(resOpts{})
	body := `{"model":"m1","pad":"` + strings.Repeat("x", size-len(`{"model":"m1","pad":""}`)) + `"}`
	// Three bodies fit (900 KiB of 1 MiB); each is held back mid-way.
	var held []*slowClient
	for range 3 {
		held = append(held, startSlow(t, e, chatHead(size, ""), body[:1000]))
	}
	waitFor(t, "three bodies reserved", func() bool { return e.dp.adm.inFlight.Load() == 3*size })
	// Two more do not fit.
	for range 2 {
		resp, eb := startSlow(t, e, chatHead(size, ""), body[:1000]).response()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
			eb["error"]["code"] != "gateway_overloaded" || eb["error"]["message"] == nil {
			t.Fatalf("excess body: %d retry-after %q %v", resp.StatusCode, resp.Header.Get("Retry-After"), eb)
		}
	}
	for _, c := range held {
		c.send(body[1000:])
	}
	for _, c := range held {
		if resp, eb := c.response(); resp.StatusCode != http.StatusOK {
			t.Fatalf("held body: %d %v", resp.StatusCode, eb)
		}
	}
	waitFor(t, "reservations released", func() bool { return e.dp.adm.inFlight.Load() == 0 })
}
