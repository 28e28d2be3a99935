package dataplane

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
	"github.com/switchyard-ai/switchyard/internal/sse"
)

// accessLevel is the level of the n-th access log line.
func (h *logCapture) accessLevel(t *testing.T, n int) slog.Level {
	t.Helper()
	h.access(t, n) // waits for it
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Message == "access" {
			if n--; n == 0 {
				return r.Level
			}
		}
	}
	t.Fatal("access line vanished")
	return 0
}

// TestCutEventStream: an event stream whose upstream stalls past the route's
// idle_timeout, or goes away, after the response started ends with an
// OpenAI error event and a clean end, and the access log says so; other
// bodies are reset, as Envoy does.
func TestCutEventStream(t *testing.T) {
	const first = "data: {\"n\":1}\n\n"
	stall := func(before string, contentType string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", contentType)
			_, _ = io.WriteString(w, before)
			w.(http.Flusher).Flush()
			<-r.Context().Done() // stalls until the gateway gives up
		}
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		// events are the data of the events the client gets, error last.
		events    []string
		code      string
		flags     string
		wantReset bool
	}{
		{name: "stall between events", handler: stall(first, "text/event-stream; charset=utf-8"),
			events: []string{`{"n":1}`}, code: "stream_idle_timeout", flags: "SI"},
		{name: "stall after the head", handler: stall("", "text/event-stream"),
			code: "stream_idle_timeout", flags: "SI"},
		{name: "stall inside an event", handler: stall(first+"data: {\"n\":", "text/event-stream"),
			events: []string{`{"n":1}`, `{"n":`}, code: "stream_idle_timeout", flags: "SI"},
		{name: "CRLF events", handler: stall("data: {\"n\":1}\r\n\r\n", "text/event-stream"),
			events: []string{`{"n":1}`}, code: "stream_idle_timeout", flags: "SI"},
		{name: "upstream goes away", handler: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, first)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}, events: []string{`{"n":1}`}, code: "upstream_reset_after_response_started", flags: "UC"},
		{name: "JSON body is reset", handler: stall(`{"partial":`, "application/json"),
			wantReset: true, code: "stream_idle_timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.up.handler = tc.handler
			rt := modelRoute(testModel, testCluster)
			rt.Match = &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
			rt.GetRoute().IdleTimeout = durationpb.New(150 * time.Millisecond)
			e.apply(resOpts{noExtProc: true, routes: &routev3.RouteConfiguration{Name: catalog.ListenerRouteConfig,
				VirtualHosts: []*routev3.VirtualHost{{Name: "vh", Domains: []string{"*"}, Routes: []*routev3.Route{rt}}}}})

			req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			body, err := io.ReadAll(resp.Body)
			line := e.logs.access(t, 1)
			if line["status"] != int64(200) || line["response_detail"] != tc.code {
				t.Errorf("access log %v", line)
			}
			if tc.wantReset {
				if err == nil {
					t.Errorf("a cut JSON body ended cleanly: %q", body)
				}
				return
			}
			if err != nil {
				t.Fatalf("the cut stream did not end cleanly: %v (read %q)", err, body)
			}
			var got []sse.Event
			if err := new(sse.Splitter).Feed(body, true, func(ev sse.Event) error {
				got = append(got, sse.Event{Name: []byte(string(ev.Name)), Data: []byte(string(ev.Data))})
				return nil
			}); err != nil {
				t.Fatalf("%q: %v", body, err)
			}
			if len(got) != len(tc.events)+1 {
				t.Fatalf("events %q, want %d and an error", body, len(tc.events))
			}
			for i, want := range tc.events {
				if string(got[i].Data) != want {
					t.Errorf("event %d = %q, want %q", i, got[i].Data, want)
				}
			}
			last := got[len(got)-1]
			var ev struct {
				Error struct {
					Message, Type, Code string
					Param               *string
				}
			}
			if string(last.Name) != "error" || json.Unmarshal(last.Data, &ev) != nil || ev.Error.Code != tc.code ||
				ev.Error.Type != "server_error" || ev.Error.Message == "" || !strings.Contains(string(last.Data), `"param":null`) {
				t.Errorf("last event %s %s, want an OpenAI error %s", last.Name, last.Data, tc.code)
			}
			if line["response_flags"] != tc.flags {
				t.Errorf("response_flags %v, want %s", line["response_flags"], tc.flags)
			}
			if lvl := e.logs.accessLevel(t, 1); lvl != slog.LevelError {
				t.Errorf("access log level %v, want ERROR", lvl)
			}
		})
	}
}
