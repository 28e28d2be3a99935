package extproc

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	grpcmd "google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard-ai/switchyard/internal/catalog"
)

var logTimes = regexp.MustCompile(`time=\S+ `)

// inOrder is hs as a request (or response) headers message, its headers
// in name order, so that two runs send the same messages.
func inOrder(hs headers, response bool) *extprocv3.ProcessingRequest {
	m := &corev3.HeaderMap{}
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(hs[k])})
	}
	h := &extprocv3.HttpHeaders{Headers: m}
	if response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: h}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}}
}

// TestSessionKeepsNoHeaderBytes: a Session keeps nothing of a headers
// message's values past Handle, which internal/gateway's localSession
// relies on to hand the data plane's headers messages over without a copy
// (the data plane refills its headers message for the response). A
// request through both phases, its headers' raw values overwritten after
// each Handle, is answered exactly as one whose messages stay intact: the
// replies (compared once every message was handled, so a reply holding a
// view of a request's bytes shows too), the usage recorded and the log
// lines (at debug: request ids and the like).
func TestSessionKeepsNoHeaderBytes(t *testing.T) {
	completion := `{"id":"c","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":2,"total_tokens":10}}`
	scribble := func(m *extprocv3.ProcessingRequest) {
		var h *extprocv3.HttpHeaders
		switch r := m.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			h = r.RequestHeaders
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			h = r.ResponseHeaders
		default:
			return
		}
		for _, hv := range h.GetHeaders().GetHeaders() {
			for i := range hv.RawValue {
				hv.RawValue[i] = '#'
			}
		}
	}
	run := func(t *testing.T, overwrite bool) ([]*extprocv3.ProcessingResponse, []recorded, string) {
		srv, rec, logs := newTestServer(t, true)
		ctx := context.Background()
		var replies []*extprocv3.ProcessingResponse
		handle := func(ss *Session, m *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
			t.Helper()
			r, err := ss.Handle(ctx, m)
			if err != nil || r.GetImmediateResponse() != nil {
				t.Fatalf("Handle: %v, %v", r, err)
			}
			replies = append(replies, r)
			if overwrite {
				scribble(m)
			}
			return r
		}

		// The downstream phase: headers, body, response headers and body.
		down := srv.OpenSession(ctx, nil)
		req := headers{":method": "POST", ":path": chatPath, ":authority": "gateway.local", ":scheme": "https",
			"authorization": "Bearer " + goodKey, "content-type": "application/json", "x-request-id": "req-keep",
			"accept-encoding": "gzip"}
		r := handle(down, inOrder(req, false))
		req.apply(common(r).GetHeaderMutation())
		body := chatBody("openai/gpt-4o")
		r = handle(down, reqBody(body))
		req.apply(common(r).GetHeaderMutation())
		if bm := common(r).GetBodyMutation(); bm != nil {
			body = string(bm.GetBody())
		}
		provider := req[catalog.FirstHeader]
		if provider == "" {
			t.Fatalf("not routed: %v", req)
		}

		// The attempt's upstream phase, on the headers the downstream one set.
		up := srv.OpenSession(ctx, grpcmd.Pairs(catalog.PhaseMetadata, catalog.PhaseUpstream, catalog.ProviderMetadata, provider))
		r = handle(up, inOrder(req, false))
		if r.GetModeOverride().GetRequestBodyMode() != filterv3.ProcessingMode_NONE {
			handle(up, reqBody(body))
		}
		resp := headers{":status": "200", "content-type": "application/json", "x-request-id": "up-1"}
		r = handle(up, inOrder(resp, true))
		if r.GetModeOverride().GetResponseBodyMode() == filterv3.ProcessingMode_BUFFERED {
			handle(up, respBody(completion, true))
		}
		up.Close(ctx)

		resp = headers{":status": "200", "content-type": "application/json", "content-length": "200"}
		handle(down, inOrder(resp, true))
		handle(down, respBody(completion, true))
		down.Close(ctx)
		// The log lines of the request, without their times.
		return replies, rec.all(), logTimes.ReplaceAllString(logs.String(), "")
	}

	want, wantUsage, wantLogs := run(t, false)
	got, gotUsage, gotLogs := run(t, true)
	if len(got) != len(want) {
		t.Fatalf("%d replies with the headers overwritten, %d without", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("reply %d with the headers overwritten:\n got %v\nwant %v", i, got[i], want[i])
		}
	}
	if gotLogs != wantLogs {
		t.Errorf("logs with the headers overwritten:\n%s\nwithout:\n%s", gotLogs, wantLogs)
	}
	if len(wantUsage) != 1 || len(gotUsage) != 1 || gotUsage[0] != wantUsage[0] {
		t.Errorf("usage recorded %v with the headers overwritten, %v without", gotUsage, wantUsage)
	}
}
