package extproc

import (
	"context"
	"encoding/json"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// BenchmarkRequestPhase is the whole request side of one chat completion as
// extproc sees it: the request-headers message (header clean-up and key
// authentication, here against an in-memory key table) followed by the
// buffered request body (parse, validate, route, rewrite), on a fresh stream
// per request as in production. make bench reads its 8MB case against the
// 2 ms target and compares allocs/op across sizes; the bodies' message counts
// differ (a long conversation at 100KB, one huge prompt at 8MB), so each case
// reports its count as the "messages" metric.
func BenchmarkRequestPhase(b *testing.B) {
	srv, _, _ := newTestServer(b, true)
	ctx := context.Background()
	headers := chatHeaders(goodKey).GetRequestHeaders()
	for _, sz := range []struct {
		name string
		size int
	}{{"1KB", 1 << 10}, {"100KB", 100 << 10}, {"8MB", 8 << 20}} {
		body := benchBody(b, sz.size)
		var parsed struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(body, &parsed); err != nil {
			b.Fatal(err)
		}
		msg := &extprocv3.HttpBody{Body: body, EndOfStream: true}
		b.Run(sz.name, func(b *testing.B) {
			phase := func() {
				st := newStream(srv)
				if r := st.requestHeaders(ctx, headers); r.GetRequestHeaders() == nil {
					b.Fatalf("headers rejected: %v", r)
				}
				if r := st.requestBody(ctx, msg); r.GetRequestBody() == nil {
					b.Fatalf("body rejected: %v", r)
				}
			}
			phase()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				phase()
			}
			b.ReportMetric(float64(len(parsed.Messages)), "messages")
		})
	}
}
