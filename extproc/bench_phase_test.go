package extproc

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
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
//
// Each request gets its body as Process does (bodies), and the server logs
// at the production default level, info.
func BenchmarkRequestPhase(b *testing.B) {
	srv := newBenchServer(b)
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
		msg := &extprocv3.HttpBody{EndOfStream: true}
		bodies := newBodies(body)
		b.Run(sz.name, func(b *testing.B) {
			phase := func() {
				st := newStream(srv)
				st.ownsBody = true // as Process
				if r := st.requestHeaders(ctx, headers); r.GetRequestHeaders() == nil {
					b.Fatalf("headers rejected: %v", r)
				}
				if r := st.requestBody(ctx, msg); r.GetRequestBody() == nil {
					b.Fatalf("body rejected: %v", r)
				}
			}
			msg.Body = bodies.get(b)
			phase()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				msg.Body = bodies.get(b)
				phase()
			}
			b.ReportMetric(float64(len(parsed.Messages)), "messages")
		})
	}
}

// newBenchServer is a server with the test catalog that logs as production
// does by default: at info, here to nowhere.
func newBenchServer(b *testing.B) *Server {
	srv, _, _ := newTestServer(b, false)
	srv.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	// A long-context model: the 8 MB prompt (about 2.3M tokens by the
	// estimate) must be routed, not refused for the default window.
	c := testCatalog()
	for i := range c.Models {
		c.Models[i].ContextWindow = 4_000_000
	}
	if err := srv.SetCatalog(c); err != nil {
		b.Fatal(err)
	}
	return srv
}

// bodies hands out a request body as gRPC request messages hold it: each in
// a buffer of its own (protobuf copies bytes fields out of the receive
// buffer) with the capacity append gives it, the size class or page above
// its length, which the stream may edit in place (request.go, rewrite).
// They are made in batches of up to 8 MB with the benchmark's timer
// stopped: making them is gRPC's work, not extproc's.
type bodies struct {
	body []byte
	bufs [][]byte
	next int
}

func newBodies(body []byte) *bodies {
	bs := &bodies{body: body, bufs: make([][]byte, max(1, (8<<20)/len(body)))}
	for i := range bs.bufs {
		bs.bufs[i] = append([]byte(nil), body...)
	}
	return bs
}

// get returns a fresh copy of the body.
func (bs *bodies) get(b *testing.B) []byte {
	if bs.next == len(bs.bufs) {
		b.StopTimer()
		for i, buf := range bs.bufs {
			bs.bufs[i] = append(buf[:0], bs.body...)
		}
		bs.next = 0
		b.StartTimer()
	}
	bs.next++
	return bs.bufs[bs.next-1]
}
