package responses

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/switchyard-ai/switchyard/backends/onbehalf"
)

// tricklingUpstream answers every chat completion 200 with an event stream
// that stays alive but never finishes: after the first content chunk (when
// streaming), only SSE keepalive comments, until the client goes away.
// headersFirst false holds the headers back as well.
func tricklingUpstream(t *testing.T, headersFirst bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the request whole: the server notices the client leaving
		// (and ends r's context) only then.
		_, _ = io.Copy(io.Discard, r.Body)
		if !headersFirst {
			<-r.Context().Done()
			return
		}
		w.Header().Set("content-type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fl := w.(http.Flusher)
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`+"\n\n")
		fl.Flush()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				fmt.Fprint(w, ": keepalive\n\n")
				fl.Flush()
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestStepTimeout: an upstream that never finishes ends the response at
// StepTimeout, in the documented shape: 504 upstream_timeout when nothing
// was streamed yet, response.failed once the stream began.
func TestStepTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	newSvc := func(t *testing.T, headersFirst bool) *httptest.Server {
		up := tricklingUpstream(t, headersFirst)
		svc, err := New(t.Context(), Options{DataDir: t.TempDir(), Gateway: onbehalf.New(up.URL+"/v1", testToken),
			Logger: testLogger(t), StepTimeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		srv := httptest.NewServer(withCaller(svc.Handler()))
		t.Cleanup(srv.Close)
		return srv
	}
	post := func(t *testing.T, srv *httptest.Server, body string) (*http.Response, time.Duration) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/responses", strings.NewReader(body))
		req.Header.Set(ownerHeader, "alice")
		req.Header.Set("content-type", "application/json")
		start := time.Now()
		c := &http.Client{Timeout: 20 * timeout}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("the response was held past %s: %v", 20*timeout, err)
		}
		return resp, time.Since(start)
	}
	check504 := func(t *testing.T, resp *http.Response, took time.Duration) {
		t.Helper()
		defer resp.Body.Close()
		b := readAll(t, resp)
		wantError(t, resp.StatusCode, b, http.StatusGatewayTimeout, "")
		if c := gjson.GetBytes(b, "error.code").Str; c != "upstream_timeout" {
			t.Errorf("error code %q, want upstream_timeout: %s", c, b)
		}
		if took < timeout {
			t.Errorf("answered after %s, before the %s deadline", took, timeout)
		}
	}

	t.Run("non-streaming", func(t *testing.T) {
		srv := newSvc(t, true)
		resp, took := post(t, srv, `{"model":"m","input":"hi"}`)
		check504(t, resp, took)
	})
	t.Run("streaming, no headers yet", func(t *testing.T) {
		srv := newSvc(t, false)
		resp, took := post(t, srv, `{"model":"m","input":"hi","stream":true}`)
		check504(t, resp, took)
	})
	t.Run("streaming", func(t *testing.T) {
		srv := newSvc(t, true)
		resp, _ := post(t, srv, `{"model":"m","input":"hi","stream":true}`)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		evs := readEvents(t, resp.Body)
		checkEvents(t, evs)
		last := evs[len(evs)-1]
		if last.name != "response.failed" || last.data.Get("response.status").Str != "failed" ||
			last.data.Get("response.error.code").Str != "server_error" ||
			!strings.Contains(last.data.Get("response.error.message").Str, "did not finish") {
			t.Fatalf("last event %s", last.raw)
		}
		// What arrived before the deadline is kept, marked incomplete.
		if got := outputText(last.data.Get("response")); got != "Hel" {
			t.Errorf("output text %q, want the part that arrived", got)
		}
	})
}
