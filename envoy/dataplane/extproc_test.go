package dataplane

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

// apiError decodes an OpenAI error body, failing the test if it is not one.
func apiError(t *testing.T, resp *http.Response, body []byte) (code string) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("content-type = %q, want application/json", ct)
	}
	var e struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		t.Fatalf("body is not an OpenAI error: %s", body)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[k]; !ok {
			t.Errorf("error body lacks %q: %s", k, body)
		}
	}
	c, _ := e.Error["code"].(string)
	return c
}

func TestHeadersAndBodyFlow(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		switch {
		case req.GetRequestHeaders() != nil:
			return reply(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
				SetHeaders:    []*corev3.HeaderValueOption{setHeader("x-added", "1")},
				RemoveHeaders: []string{"authorization"},
			}}), nil
		case req.GetRequestBody() != nil:
			return routeToModel(testModel)(req)
		}
		return continueAll(req)
	})
	resp, body := e.post("/v1/chat/completions?x=1", `{"model":"m1"}`)
	if resp.StatusCode != 200 || string(body) != `{"ok":true}` {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
	if got, want := e.proc.messages(), []string{"request_headers", "request_body", "response_headers"}; !slices.Equal(got, want) {
		t.Errorf("messages = %v, want %v", got, want)
	}
	msgs := e.proc.all()
	rh := msgs[0].GetRequestHeaders()
	if rh.GetEndOfStream() {
		t.Error("request_headers end_of_stream = true for a request with a body")
	}
	for k, want := range map[string]string{
		":method": "POST", ":path": "/v1/chat/completions?x=1", ":scheme": "http",
		":authority": e.dp.Addr(testListener).String(), "content-type": "application/json",
		"x-forwarded-proto": "http", "x-forwarded-for": "127.0.0.1",
	} {
		if got, _ := headerValue(rh.GetHeaders(), k); got != want {
			t.Errorf("request header %s = %q, want %q", k, got, want)
		}
	}
	for _, h := range rh.GetHeaders().GetHeaders() {
		if h.GetKey() != strings.ToLower(h.GetKey()) || h.GetValue() != "" {
			t.Errorf("header %q: keys must be lower-case and values in raw_value only", h.GetKey())
		}
	}
	rid, ok := headerValue(rh.GetHeaders(), "x-request-id")
	if !ok || len(rid) != 36 {
		t.Errorf("x-request-id = %q, want a generated UUID", rid)
	}
	if b := msgs[1].GetRequestBody(); string(b.GetBody()) != `{"model":"m1"}` || !b.GetEndOfStream() {
		t.Errorf("request_body = %q eos=%v", b.GetBody(), b.GetEndOfStream())
	}
	if st, _ := headerValue(msgs[2].GetResponseHeaders().GetHeaders(), ":status"); st != "200" {
		t.Errorf("response_headers :status = %q", st)
	}
	up := e.up.last(t)
	if up.header.Get("X-Added") != "1" || up.header.Get("Authorization") != "" {
		t.Errorf("upstream headers: x-added=%q authorization=%q", up.header.Get("X-Added"), up.header.Get("Authorization"))
	}
	if up.header.Get("X-Request-Id") != rid || up.path != "/v1/chat/completions?x=1" {
		t.Errorf("upstream request id %q path %q", up.header.Get("X-Request-Id"), up.path)
	}
	if up.header.Get("User-Agent") != "Go-http-client/1.1" {
		// The client's own user agent passes through unchanged.
		t.Errorf("upstream user-agent = %q", up.header.Get("User-Agent"))
	}

	line := e.logs.access(t, 1)
	for k, want := range map[string]any{"method": "POST", "path": "/v1/chat/completions", "status": int64(200),
		"upstream_cluster": testCluster, "request_id": rid, "bytes_sent": int64(len(body))} {
		if line[k] != want {
			t.Errorf("access log %s = %v (%T), want %v", k, line[k], line[k], want)
		}
	}
	if _, ok := line["duration_ms"]; !ok {
		t.Error("access log lacks duration_ms")
	}
	if logs := e.logs.text(); strings.Contains(logs, "sk-test-secret") || strings.Contains(logs, `"model":"m1"`) || strings.Contains(logs, "x=1") {
		t.Errorf("logs leak a header value, the body or the query:\n%s", logs)
	}
}

func TestRequestWithoutBodySendsHeadersOnly(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() != nil {
			return reply(req, &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(catalog.RouteHeader, testModel)}},
				ClearRouteCache: true,
			}), nil
		}
		return continueAll(req)
	})
	req, _ := http.NewRequest(http.MethodGet, e.url("/v1/models"), nil)
	resp, _ := e.do(req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got, want := e.proc.messages(), []string{"request_headers", "response_headers"}; !slices.Equal(got, want) {
		t.Fatalf("messages = %v, want %v (no request_body even in BUFFERED mode)", got, want)
	}
	if !e.proc.all()[0].GetRequestHeaders().GetEndOfStream() {
		t.Error("request_headers end_of_stream = false for a request without a body")
	}
}

func TestRouteCache(t *testing.T) {
	mutation := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(catalog.RouteHeader, testModel)}}
	tests := []struct {
		name       string
		headers    *extprocv3.CommonResponse // reply to request_headers
		body       *extprocv3.CommonResponse // reply to request_body
		wantStatus int
	}{
		{"header mutation and clear_route_cache in the body reply re-route",
			&extprocv3.CommonResponse{}, &extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}, 200},
		{"clear_route_cache without header_mutation is ignored",
			&extprocv3.CommonResponse{HeaderMutation: mutation}, &extprocv3.CommonResponse{ClearRouteCache: true}, 404},
		{"header_mutation without clear_route_cache keeps the cached route",
			&extprocv3.CommonResponse{}, &extprocv3.CommonResponse{HeaderMutation: mutation}, 404},
		{"an empty header_mutation makes clear_route_cache count",
			&extprocv3.CommonResponse{HeaderMutation: mutation}, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{}, ClearRouteCache: true}, 200},
		{"clear_route_cache in the headers reply",
			&extprocv3.CommonResponse{HeaderMutation: mutation, ClearRouteCache: true}, &extprocv3.CommonResponse{}, 200},
	}
	e := newEnv(t)
	e.apply(resOpts{})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.proc.reset()
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				switch {
				case req.GetRequestHeaders() != nil:
					return reply(req, tc.headers), nil
				case req.GetRequestBody() != nil:
					return reply(req, tc.body), nil
				}
				return continueAll(req)
			})
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantStatus == 404 {
				if code := apiError(t, resp, body); code != "unknown_url" {
					t.Errorf("code %q", code)
				}
				// The router's local reply runs through the response path.
				msgs := e.proc.all()
				last := msgs[len(msgs)-1]
				if st, _ := headerValue(last.GetResponseHeaders().GetHeaders(), ":status"); st != "404" {
					t.Errorf("last message %s :status %q, want response_headers 404", kindName(last), st)
				}
			}
		})
	}
}

func TestDynamicMetadata(t *testing.T) {
	md := func() *structpb.Struct {
		s, _ := structpb.NewStruct(map[string]any{
			catalog.MetadataNamespace: map[string]any{"model": "m1", "prompt_tokens": 12, "key_id": "k1"},
			"other":                   map[string]any{"secret": "nope"},
		})
		return s
	}
	tests := []struct {
		name      string
		receiving []string
		wantModel bool
	}{
		{"kept for a receiving namespace", []string{catalog.MetadataNamespace}, true},
		{"dropped without a receiving namespace", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ep := defaultExtProc()
			ep.MetadataOptions.ReceivingNamespaces.Untyped = tc.receiving
			e.apply(resOpts{extProc: ep})
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				r, _ := routeToModel(testModel)(req)
				if req.GetResponseHeaders() != nil {
					r.DynamicMetadata = md()
				}
				return r, nil
			})
			if resp, _ := e.post("/v1/chat/completions", `{}`); resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			line := e.logs.access(t, 1)
			if tc.wantModel {
				if line["model"] != "m1" || line["prompt_tokens"] != int64(12) || line["key_id"] != "k1" {
					t.Errorf("access log metadata: %v", line)
				}
			} else if _, ok := line["model"]; ok {
				t.Errorf("metadata kept without a receiving namespace: %v", line)
			}
			if _, ok := line["secret"]; ok {
				t.Errorf("metadata of a non-receiving namespace reached the log: %v", line)
			}
		})
	}
}

func TestImmediateResponse(t *testing.T) {
	imm := func(code typev3.StatusCode, body string) *extprocv3.ProcessingResponse {
		ir := &extprocv3.ImmediateResponse{Body: []byte(body), Headers: &extprocv3.HeaderMutation{
			SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", "application/json"), setHeader("x-why", "auth")}}}
		if code != 0 {
			ir.Status = &typev3.HttpStatus{Code: code}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: ir}}
	}
	tests := []struct {
		name       string
		at         string
		code       typev3.StatusCode
		wantStatus int
		wantUp     int
		wantMsgs   []string
	}{
		{"on request headers", "request_headers", typev3.StatusCode_Unauthorized, 401, 0, []string{"request_headers"}},
		{"status unset means 200", "request_headers", 0, 200, 0, []string{"request_headers"}},
		{"on request body", "request_body", typev3.StatusCode_TooManyRequests, 429, 0, []string{"request_headers", "request_body"}},
		{"on response headers", "response_headers", typev3.StatusCode_BadGateway, 502, 1, []string{"request_headers", "request_body", "response_headers"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.apply(resOpts{})
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				if kindName(req) == tc.at {
					return imm(tc.code, `{"error":"stop"}`), nil
				}
				return routeToModel(testModel)(req)
			})
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != tc.wantStatus || string(body) != `{"error":"stop"}` || resp.Header.Get("X-Why") != "auth" ||
				resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
			}
			if n := len(e.up.requests()); n != tc.wantUp {
				t.Errorf("upstream saw %d requests, want %d", n, tc.wantUp)
			}
			if got := e.proc.messages(); !slices.Equal(got, tc.wantMsgs) {
				t.Errorf("messages = %v, want %v: processing ends with the immediate response", got, tc.wantMsgs)
			}
		})
	}
}

func TestRequestBodyOverBufferLimit(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{bufferLimit: 64})
	e.proc.setScript(routeToModel(testModel))
	resp, body := e.post("/v1/chat/completions", strings.Repeat("x", 65))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413", resp.StatusCode)
	}
	if code := apiError(t, resp, body); code != "request_too_large" {
		t.Errorf("code %q", code)
	}
	if got, want := e.proc.messages(), []string{"request_headers", "response_headers"}; !slices.Equal(got, want) {
		t.Errorf("messages = %v, want %v: no body message over the limit", got, want)
	}
	if len(e.up.requests()) != 0 {
		t.Error("the upstream was called")
	}
	// Exactly at the limit is fine.
	e.proc.reset()
	if resp, _ := e.post("/v1/chat/completions", strings.Repeat("x", 64)); resp.StatusCode != 200 {
		t.Errorf("at the limit: status %d", resp.StatusCode)
	}
}

func TestBodyRewriteContentLength(t *testing.T) {
	const newBody = `{"model":"upstream-name","stream_options":{"include_usage":true}}`
	tests := []struct {
		name       string
		headers    []*corev3.HeaderValueOption
		remove     []string
		clear      bool
		wantStatus int
		wantBody   string
	}{
		{"content-length updated", []*corev3.HeaderValueOption{setHeader("content-length", strconv.Itoa(len(newBody)))}, nil, false, 200, newBody},
		{"content-length removed", nil, []string{"content-length"}, false, 200, newBody},
		{"content-length left stale", nil, nil, false, 500, ""},
		{"clear_body needs content-length 0 or none", nil, []string{"content-length"}, true, 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.apply(resOpts{})
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				if req.GetRequestBody() == nil {
					return continueAll(req)
				}
				bm := &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(newBody)}}
				if tc.clear {
					bm = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
				}
				return reply(req, &extprocv3.CommonResponse{
					HeaderMutation: &extprocv3.HeaderMutation{
						SetHeaders:    append(tc.headers, setHeader(catalog.RouteHeader, testModel)),
						RemoveHeaders: tc.remove,
					},
					BodyMutation:    bm,
					ClearRouteCache: true,
				}), nil
			})
			resp, body := e.post("/v1/chat/completions", `{"model":"m1"}`)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantStatus != 200 {
				apiError(t, resp, body)
				if len(e.up.requests()) != 0 {
					t.Error("the upstream was called")
				}
				return
			}
			up := e.up.last(t)
			if string(up.body) != tc.wantBody {
				t.Errorf("upstream body %q, want %q", up.body, tc.wantBody)
			}
			if cl := up.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(tc.wantBody)) {
				t.Errorf("upstream content-length %s for %d bytes", cl, len(tc.wantBody))
			}
		})
	}
}

func TestProcessorFailures(t *testing.T) {
	testProcessorFailures(t, newEnv, nil)
}

// testProcessorFailures runs the failure cases on the ext_proc cluster
// newEnv makes (gRPC, or a LocalProcessor); check, if not nil, checks each
// case's env afterwards.
func testProcessorFailures(t *testing.T, newEnv func(*testing.T) *env, check func(*env)) {
	// stalled is closed when the test ends: a processor waiting on it never
	// answers in time, however slow the machine.
	stalled := make(chan struct{})
	t.Cleanup(func() { close(stalled) })
	tests := []struct {
		name       string
		config     func(*extprocfilterv3.ExternalProcessor)
		script     procScript
		wantStatus int
		wantCode   string
	}{
		{"message_timeout gives 504",
			func(c *extprocfilterv3.ExternalProcessor) { c.MessageTimeout = durationpb.New(50 * time.Millisecond) },
			func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				<-stalled
				return continueAll(req)
			}, 504, "ext_proc_message_timeout"},
		{"gRPC error gives 500",
			nil,
			func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			}, 500, "ext_proc_error"},
		{"status_on_error replaces 500",
			func(c *extprocfilterv3.ExternalProcessor) {
				c.StatusOnError = &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable}
			},
			func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return nil, status.Error(codes.Unavailable, "down")
			}, 503, "ext_proc_error"},
		{"spurious reply gives 500",
			nil,
			func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				// A response_headers reply to a request_headers message.
				return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}}, nil
			}, 500, "ext_proc_error"},
		{"an invalid mutation gives 500",
			nil,
			func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return reply(req, &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{
					SetHeaders: []*corev3.HeaderValueOption{setHeader("x-bad", "a\r\nb")}}}), nil
			}, 500, "ext_proc_error"},
		{"clean close continues without the processor",
			nil,
			func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) { return nil, nil },
			404, "unknown_url"}, // unprocessed: nothing set the routing header
		{"failure_mode_allow continues after a gRPC error",
			func(c *extprocfilterv3.ExternalProcessor) { c.FailureModeAllow = true },
			func(*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				return nil, status.Error(codes.Internal, "boom")
			}, 404, "unknown_url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ep := defaultExtProc()
			if tc.config != nil {
				tc.config(ep)
			}
			e.apply(resOpts{extProc: ep})
			e.proc.setScript(tc.script)
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if code := apiError(t, resp, body); code != tc.wantCode {
				t.Errorf("code %q, want %q", code, tc.wantCode)
			}
			// One stream, and no further message after the failure or close.
			if got := e.proc.messages(); len(got) != 1 {
				t.Errorf("messages = %v, want only request_headers", got)
			}
			if check != nil {
				check(e)
			}
		})
	}
}

func TestCleanCloseKeepsRequestFlowing(t *testing.T) {
	// The processor routes on the headers, then closes on the body: the
	// request continues, routed, without further processing.
	e := newEnv(t)
	e.apply(resOpts{})
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if req.GetRequestHeaders() != nil {
			return reply(req, &extprocv3.CommonResponse{
				HeaderMutation:  &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader(catalog.RouteHeader, testModel)}},
				ClearRouteCache: true,
			}), nil
		}
		return nil, nil
	})
	resp, body := e.post("/v1/chat/completions", `{"a":1}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	if got := e.proc.messages(); !slices.Equal(got, []string{"request_headers", "request_body"}) {
		t.Errorf("messages = %v", got)
	}
	if string(e.up.last(t).body) != `{"a":1}` {
		t.Errorf("upstream body %q", e.up.last(t).body)
	}
}

// sseUpstream sends two events, the second only after release is closed.
func sseUpstream(release <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		_, _ = io.WriteString(w, "data: two\n\n")
	}
}

func TestStreamedSSEModeOverride(t *testing.T) {
	e := newEnv(t)
	e.apply(resOpts{})
	release := make(chan struct{})
	e.up.handler = sseUpstream(release)
	var roundTrips atomic.Int32
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		switch {
		case req.GetResponseHeaders() != nil:
			r := reply(req, &extprocv3.CommonResponse{})
			r.ModeOverride = &extprocfilterv3.ProcessingMode{ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
			return r, nil
		case req.GetResponseBody() != nil:
			roundTrips.Add(1)
			b := req.GetResponseBody().GetBody()
			return reply(req, &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: bytes.ToUpper(b)}}}), nil
		}
		return routeToModel(testModel)(req)
	})
	req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "" {
		t.Fatalf("status %d content-length %q", resp.StatusCode, resp.Header.Get("Content-Length"))
	}
	rd := bufio.NewReader(resp.Body)
	// The first event arrives, processed, while the upstream still holds the
	// second: the proxy forwards and flushes chunk by chunk.
	line, err := rd.ReadString('\n')
	if err != nil || line != "DATA: ONE\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	if n := roundTrips.Load(); n != 1 {
		t.Errorf("%d response_body round trips before the second chunk, want 1", n)
	}
	close(release)
	rest, err := io.ReadAll(rd)
	if err != nil || string(rest) != "\nDATA: TWO\n\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	var bodies []*extprocv3.HttpBody
	for _, m := range e.proc.all() {
		if b := m.GetResponseBody(); b != nil {
			bodies = append(bodies, b)
		}
	}
	if len(bodies) < 2 || !bodies[len(bodies)-1].GetEndOfStream() {
		t.Fatalf("response_body messages: %v", bodies)
	}
	for _, b := range bodies[:len(bodies)-1] {
		if b.GetEndOfStream() {
			t.Error("end_of_stream before the last chunk")
		}
	}
}

func TestStreamedTimeoutAfterHeadersResets(t *testing.T) {
	e := newEnv(t)
	ep := defaultExtProc()
	ep.MessageTimeout = durationpb.New(100 * time.Millisecond)
	e.apply(resOpts{extProc: ep})
	release := make(chan struct{})
	defer close(release)
	e.up.handler = sseUpstream(release)
	e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		switch {
		case req.GetResponseHeaders() != nil:
			r := reply(req, &extprocv3.CommonResponse{})
			r.ModeOverride = &extprocfilterv3.ProcessingMode{ResponseBodyMode: extprocfilterv3.ProcessingMode_STREAMED}
			return r, nil
		case req.GetResponseBody() != nil:
			<-release // no answer before the message timeout
		}
		return routeToModel(testModel)(req)
	})
	req, _ := http.NewRequest(http.MethodPost, e.url("/v1/chat/completions"), strings.NewReader(`{}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("the stream ended cleanly; want a reset after the message timeout")
	}
	if d := e.logs.access(t, 1)["response_detail"]; d != "ext_proc_message_timeout" {
		t.Errorf("response_detail %v", d)
	}
}

func TestModeOverrideRules(t *testing.T) {
	respBuffered := &extprocfilterv3.ProcessingMode{ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
	bothBuffered := &extprocfilterv3.ProcessingMode{
		RequestBodyMode:  extprocfilterv3.ProcessingMode_BUFFERED,
		ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED,
	}
	tests := []struct {
		name       string
		allow      bool
		at         string // the message whose reply carries mode_override
		mode       *extprocfilterv3.ProcessingMode
		wantMsgs   []string
		wantStatus int
	}{
		{"honoured in the response_headers reply", true, "response_headers", respBuffered,
			[]string{"request_headers", "request_body", "response_headers", "response_body"}, 200},
		{"honoured in the request_headers reply", true, "request_headers", bothBuffered,
			[]string{"request_headers", "request_body", "response_headers", "response_body"}, 200},
		// The override replaces the whole mode: the request body reverts to
		// NONE, so the body is never seen and nothing routes the request.
		{"replaces the whole mode", true, "request_headers", respBuffered,
			[]string{"request_headers", "response_headers", "response_body"}, 404},
		{"ignored without allow_mode_override", false, "response_headers", respBuffered,
			[]string{"request_headers", "request_body", "response_headers"}, 200},
		{"ignored in a body reply", true, "request_body", respBuffered,
			[]string{"request_headers", "request_body", "response_headers"}, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ep := defaultExtProc()
			ep.AllowModeOverride = tc.allow
			e.apply(resOpts{extProc: ep})
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				r, _ := routeToModel(testModel)(req)
				if kindName(req) == tc.at {
					r.ModeOverride = tc.mode
				}
				return r, nil
			})
			if resp, body := e.post("/v1/chat/completions", `{}`); resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if got := e.proc.messages(); !slices.Equal(got, tc.wantMsgs) {
				t.Errorf("messages = %v, want %v", got, tc.wantMsgs)
			}
		})
	}
}

func TestBufferedResponseMutation(t *testing.T) {
	const newBody = `{"rewritten":true,"usage":{"total_tokens":3}}`
	tests := []struct {
		name       string
		setLength  bool
		wantStatus int
	}{
		{"content-length updated", true, 200},
		{"stale content-length is a local error", false, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.apply(resOpts{})
			e.proc.setScript(func(req *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
				switch {
				case req.GetResponseHeaders() != nil:
					r := reply(req, &extprocv3.CommonResponse{})
					r.ModeOverride = &extprocfilterv3.ProcessingMode{ResponseBodyMode: extprocfilterv3.ProcessingMode_BUFFERED}
					return r, nil
				case req.GetResponseBody() != nil:
					if string(req.GetResponseBody().GetBody()) != `{"ok":true}` || !req.GetResponseBody().GetEndOfStream() {
						t.Errorf("response_body %q", req.GetResponseBody().GetBody())
					}
					hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("x-usage", "3")}}
					if tc.setLength {
						hm.SetHeaders = append(hm.SetHeaders, setHeader("content-length", strconv.Itoa(len(newBody))))
					}
					return reply(req, &extprocv3.CommonResponse{HeaderMutation: hm,
						BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(newBody)}}}), nil
				}
				return routeToModel(testModel)(req)
			})
			resp, body := e.post("/v1/chat/completions", `{}`)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantStatus != 200 {
				apiError(t, resp, body)
				return
			}
			if string(body) != newBody || resp.ContentLength != int64(len(newBody)) || resp.Header.Get("X-Usage") != "3" {
				t.Errorf("got %q (length %d) x-usage=%q", body, resp.ContentLength, resp.Header.Get("X-Usage"))
			}
		})
	}
}

func TestPerRouteProcessingMode(t *testing.T) {
	tests := []struct {
		name     string
		override *extprocfilterv3.ExtProcPerRoute
		want     []string
	}{
		{"overrides replace the whole mode", &extprocfilterv3.ExtProcPerRoute{Override: &extprocfilterv3.ExtProcPerRoute_Overrides{
			Overrides: &extprocfilterv3.ExtProcOverrides{ProcessingMode: &extprocfilterv3.ProcessingMode{ResponseHeaderMode: extprocfilterv3.ProcessingMode_SKIP}}}},
			// request headers revert to the default (SEND); the body to NONE
			[]string{"request_headers"}},
		{"disabled", &extprocfilterv3.ExtProcPerRoute{Override: &extprocfilterv3.ExtProcPerRoute_Disabled{Disabled: true}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rt := filesRoute(t, tc.override)
			e.apply(resOpts{routes: defaultRoutes(t, rt)})
			resp, body := e.post("/v1/files", `file content`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, body)
			}
			if got := e.proc.messages(); !slices.Equal(got, tc.want) {
				t.Errorf("messages = %v, want %v", got, tc.want)
			}
			if string(e.up.last(t).body) != "file content" {
				t.Errorf("upstream body %q", e.up.last(t).body)
			}
		})
	}
}

// filesRoute is an upload route that overrides ext_proc, listed before the
// model routes as the control plane does.
func filesRoute(t testing.TB, override *extprocfilterv3.ExtProcPerRoute) *routev3.Route {
	return &routev3.Route{
		Name:  "files",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v1/files"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: testCluster},
			Timeout:          durationpb.New(0),
		}},
		TypedPerFilterConfig: perFilterAny(t, override),
	}
}

func perFilterAny(t testing.TB, override *extprocfilterv3.ExtProcPerRoute) map[string]*anypb.Any {
	if override == nil {
		return nil
	}
	return map[string]*anypb.Any{"envoy.filters.http.ext_proc": mustAny(t, override)}
}

// TestHeadersMessageReused: a processor refills one headers message for
// each of its headers messages; each must carry exactly its own headers,
// kind and end_of_stream, whether it has more or fewer headers (or longer
// values) than the one before, and nothing a previous one was given.
func TestHeadersMessageReused(t *testing.T) {
	p := &processor{f: &extProcFilter{}}
	for i, tc := range []struct {
		h             headerMap
		eos, response bool
	}{
		{headerMap{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"authorization", "Bearer sk-a"},
			{"content-type", "application/json"}, {"x-request-id", "abc"}}, false, false},
		{headerMap{{":status", "200"}, {"content-type", "text/event-stream; a value longer than any before it"}}, true, true},
		{headerMap{{":status", "503"}, {"a", "1"}, {"b", "2"}, {"c", "3"}, {"a", "4"}, {"e", ""}, {"f", "6"}}, false, true},
		{headerMap{{":method", "GET"}}, true, false},
	} {
		got := p.headersRequest(tc.h, tc.eos, tc.response)
		hm := &corev3.HeaderMap{}
		for _, f := range tc.h {
			hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: f.key, RawValue: []byte(f.value)})
		}
		hh := &extprocv3.HttpHeaders{Headers: hm, EndOfStream: tc.eos}
		want := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: hh}}
		if tc.response {
			want = &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: hh}}
		}
		if !proto.Equal(got, want) {
			t.Errorf("message %d = %v, want %v", i, got, want)
		}
		// What exchange adds to a message (forwarded metadata) stays with it.
		got.MetadataContext = newCoreMetadata()
	}
}
