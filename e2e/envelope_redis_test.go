package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// TestFleetRedisCommandsPerRequest counts, on a real redis-server behind
// envoyproxy/ratelimit (the fleet's limiter), the Redis commands one
// admitted chat completion costs, non-streaming and streaming: the figure
// docs/operations.md ("Capacity envelope") gives. Admission reads both
// descriptors and then counts the request (two RLS calls, three
// descriptors), and the data plane charges the tokens at stream end (one
// call, one descriptor); envoyproxy/ratelimit's Redis cache sends INCRBY
// and EXPIRE per descriptor, one pipeline per call: 8 commands a request.
func TestFleetRedisCommandsPerRequest(t *testing.T) {
	sock := ratelimittest.Redis(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{gateway: func(o *gateway.Options) { o.RateLimitAddr = lis.Addr().String() }})
	ratelimittest.EnvoyRateLimit(t, lis, s.gw.XDSAddr(), sock, fixedClock{})
	ctx := context.Background()

	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			key, k := s.issue(t, keys.Spec{Name: "envelope", Tier: "free"})
			c := s.clientWith(key)
			if _, err := ratelimittest.RedisDo(sock, "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			const n = 5 // under the free tier's 10 RPM
			var tokens int64
			for i := range n {
				p := chatParams(fmt.Sprintf("request %d", i))
				if streaming {
					p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
					tokens += streamUsage(t, c.Chat.Completions.NewStreaming(ctx, p))
					continue
				}
				res, err := c.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				tokens += res.Usage.TotalTokens
			}
			// The charges land after the responses: wait until the
			// key's tokens counter in Redis holds them all (with GET and
			// KEYS, which the limiter never sends, so they are told apart).
			deadline := time.Now().Add(5 * time.Second)
			for {
				if got := tokensUsed(t, sock, k.LimitID()); got == tokens {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("tokens counter = %d, want %d", got, tokens)
				}
				time.Sleep(5 * time.Millisecond)
			}
			stats, err := ratelimittest.RedisCommandCalls(sock)
			if err != nil {
				t.Fatal(err)
			}
			limiter := map[string]int64{}
			var total int64
			for cmd, calls := range stats {
				if cmd == "get" || cmd == "keys" || cmd == "info" || strings.HasPrefix(cmd, "config") {
					continue // this test's own
				}
				limiter[cmd] = calls
				total += calls
			}
			t.Logf("%d requests: limiter's Redis commands %v (%.1f a request)", n, limiter, float64(total)/n)
			if limiter["incrby"] != 4*n || limiter["expire"] != 4*n || total != 8*n {
				t.Errorf("limiter's Redis commands for %d requests = %v, want incrby %d and expire %d only", n, limiter, 4*n, 4*n)
			}
		})
	}
}

// tokensUsed sums the tokens counters of limitID (envoyproxy/ratelimit's
// keys of its usage=tokens descriptor, one a window).
func tokensUsed(t *testing.T, sock, limitID string) int64 {
	t.Helper()
	v, err := ratelimittest.RedisDo(sock, "KEYS", "*usage_tokens*"+limitID+"*")
	if err != nil {
		t.Fatal(err)
	}
	ks, _ := v.([]any)
	var sum int64
	for _, k := range ks {
		v, err := ratelimittest.RedisDo(sock, "GET", k.(string))
		if err != nil {
			t.Fatal(err)
		}
		s, _ := v.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		sum += n
	}
	return sum
}
