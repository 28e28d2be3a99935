package e2e

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/envoy/dataplane"
	"github.com/switchyard-ai/switchyard/internal/gateway"
)

// TestExtProcExchangesPerChat pins how many ext_proc messages a chat
// completion costs, counted by the data plane as Envoy's ext_proc
// statistics count them (streams opened, messages sent by kind), in both
// channel modes. Every exchange is a round trip on the request's path and
// most of extproc's CPU, so one more is a regression to look at, and one
// fewer a change to check against Envoy's behaviour (docs/benchmarks.md,
// "Issue 17"). For the one-provider OpenAI-kind model of the stack:
//
//   - downstream (the listener's filter, one stream per request): request
//     headers (authentication), request body (validation, admission,
//     routing), response headers (status, x-ratelimit-* headers, the
//     response body's mode), response body (usage, the model's name): one
//     message each, the response body one per relayed chunk when streamed;
//   - upstream (the provider cluster's filter, one stream per attempt): the
//     request headers only, since the downstream phase prepared the body for
//     the provider (a prepared attempt on a provider no model compares with
//     another skips the rest).
func TestExtProcExchangesPerChat(t *testing.T) {
	const chunks = 8
	for _, tc := range []struct {
		name     string
		loopback bool
	}{{"inprocess", false}, {"loopback-grpc", true}} {
		t.Run(tc.name, func(t *testing.T) {
			up := &lockstepSSE{next: make(chan struct{}, 1)}
			var streaming atomic.Bool
			s := newStack(t, stackOptions{
				gateway: func(o *gateway.Options) { o.LoopbackGRPC = tc.loopback },
				wrapUpstream: func(next http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if streaming.Load() {
							up.ServeHTTP(w, r)
							return
						}
						next.ServeHTTP(w, r)
					})
				},
			})
			c := s.client()
			ctx := context.Background()
			delta := func(f func()) (down, upstream dataplane.ExtProcStats) {
				d0, u0 := s.gw.Data.ExtProcStats()
				f()
				d1, u1 := s.gw.Data.ExtProcStats()
				return extProcDelta(d1, d0), extProcDelta(u1, u0)
			}

			down, upstream := delta(func() {
				if _, err := c.Chat.Completions.New(ctx, chatParams("count the exchanges")); err != nil {
					t.Fatal(err)
				}
			})
			want := dataplane.ExtProcStats{Streams: 1, RequestHeaders: 1, RequestBody: 1, ResponseHeaders: 1, ResponseBody: 1}
			if down != want {
				t.Errorf("non-streaming, downstream filter: %+v, want %+v", down, want)
			}
			if want := (dataplane.ExtProcStats{Streams: 1, RequestHeaders: 1}); upstream != want {
				t.Errorf("non-streaming, upstream filter: %+v, want %+v", upstream, want)
			}
			if n := down.Messages() + upstream.Messages(); n != 5 {
				t.Errorf("non-streaming: %d ext_proc messages, want 5", n)
			}

			// Streamed: the upstream writes each content chunk once the
			// client has read the one before, so each crosses the gateway
			// in a read, and a message, of its own; the tail (finish,
			// usage, [DONE]) is one more, and the end of the stream comes
			// with it or in an empty message of its own, depending on
			// whether the last read saw it.
			streaming.Store(true)
			down, upstream = delta(func() {
				p := chatParams("count the streamed exchanges")
				stream := c.Chat.Completions.NewStreaming(ctx, p, option.WithHeader("x-fake-chunks", strconv.Itoa(chunks)))
				content := 0
				for stream.Next() {
					ch := stream.Current()
					if len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
						content++
						up.next <- struct{}{}
					}
				}
				if err := stream.Err(); err != nil {
					t.Fatal(err)
				}
				if content != chunks {
					t.Fatalf("%d content chunks, want %d", content, chunks)
				}
			})
			body := down.ResponseBody
			down.ResponseBody = 0
			if want := (dataplane.ExtProcStats{Streams: 1, RequestHeaders: 1, RequestBody: 1, ResponseHeaders: 1}); down != want {
				t.Errorf("streaming, downstream filter: %+v (response body aside), want %+v", down, want)
			}
			if body != chunks+1 && body != chunks+2 {
				t.Errorf("streaming: %d response body messages for %d content chunks, want %d or %d", body, chunks, chunks+1, chunks+2)
			}
			if want := (dataplane.ExtProcStats{Streams: 1, RequestHeaders: 1}); upstream != want {
				t.Errorf("streaming, upstream filter: %+v, want %+v", upstream, want)
			}
		})
	}
}

func extProcDelta(a, b dataplane.ExtProcStats) dataplane.ExtProcStats {
	return dataplane.ExtProcStats{
		Streams:         a.Streams - b.Streams,
		RequestHeaders:  a.RequestHeaders - b.RequestHeaders,
		RequestBody:     a.RequestBody - b.RequestBody,
		ResponseHeaders: a.ResponseHeaders - b.ResponseHeaders,
		ResponseBody:    a.ResponseBody - b.ResponseBody,
	}
}
