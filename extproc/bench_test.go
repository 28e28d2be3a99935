package extproc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// benchBody returns a valid chat request of about size bytes. Small bodies
// are a conversation; the large one is a single huge user message (a
// long-context prompt), with the escapes real text has.
func benchBody(tb testing.TB, size int) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	line := "The quick brown fox said \"hello\" to the lazy dog.\n\tIt replied: C:\\path\\to\\file — ok.\n"
	var msgs []msg
	if size <= 200<<10 {
		msgs = append(msgs, msg{"system", "You are a helpful assistant."})
		for i := 0; len(msgs) < 2 || estimate(msgs) < size; i++ {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			msgs = append(msgs, msg{role, strings.Repeat(line, 3)})
		}
	} else {
		msgs = []msg{{"user", strings.Repeat(line, size/len(line))}}
	}
	b, err := json.Marshal(map[string]any{
		"model": "openai/gpt-4o", "messages": msgs, "temperature": 0.7, "max_tokens": 1024,
		"stream": true, "user": "bench",
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func estimate[T any](msgs []T) int {
	b, _ := json.Marshal(msgs)
	return len(b)
}

func BenchmarkRequestBody(b *testing.B) {
	srv := newBenchServer(b)
	ctx := context.Background()
	for _, sz := range []struct {
		name string
		size int
	}{{"1KB", 1 << 10}, {"100KB", 100 << 10}, {"8MB", 8 << 20}} {
		body := benchBody(b, sz.size)
		b.Run(sz.name, func(b *testing.B) {
			st := newStream(srv)
			st.op, st.key, st.ownsBody = opChat, testKeys()[goodKey], true
			bodies := newBodies(body) // as in BenchmarkRequestPhase
			msg := &extprocv3.HttpBody{Body: bodies.get(b), EndOfStream: true}
			if r := st.requestBody(ctx, msg); r.GetRequestBody() == nil {
				b.Fatalf("rejected: %v", r)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				msg.Body = bodies.get(b)
				st.requestBody(ctx, msg)
			}
		})
	}
}

func BenchmarkSSEChunk(b *testing.B) {
	srv := newBenchServer(b)
	ctx := context.Background()
	whole := []byte(contentEvent)
	half := len(contentEvent) / 2
	for _, bc := range []struct {
		name   string
		drop   bool
		chunks [][]byte
	}{
		// Client asked for usage: chunks are read, never changed.
		{"keep", false, [][]byte{whole}},
		// Gateway asked for usage: whole-event chunks still pass unchanged.
		{"drop", true, [][]byte{whole}},
		// Events split across chunks while only reading.
		{"keep-split", false, [][]byte{whole[:half], whole[half:]}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			st := newStream(srv)
			st.routed, st.kind, st.sse.drop = true, respSSE, bc.drop
			msgs := make([]*extprocv3.HttpBody, len(bc.chunks))
			for i, c := range bc.chunks {
				msgs[i] = &extprocv3.HttpBody{Body: c}
			}
			var n int64
			for _, c := range bc.chunks {
				n += int64(len(c))
			}
			b.SetBytes(n)
			b.ReportAllocs()
			for b.Loop() {
				for _, m := range msgs {
					if r := st.responseBody(ctx, m); r.GetResponseBody().GetResponse().GetBodyMutation() != nil {
						b.Fatal("chunk mutated")
					}
				}
			}
		})
	}
}
