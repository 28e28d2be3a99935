package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
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
	rc := dialRedis(t, sock)
	ctx := context.Background()

	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			key, k := s.issue(t, keys.Spec{Name: "envelope", Tier: "free"})
			c := s.clientWith(key)
			rc.do(t, "CONFIG", "RESETSTAT")
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
				if got := rc.tokensUsed(t, k.LimitID()); got == tokens {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("tokens counter = %d, want %d", got, tokens)
				}
				time.Sleep(5 * time.Millisecond)
			}
			stats := rc.commandStats(t)
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

// redisConn is a minimal RESP client for the test's own look at Redis.
type redisConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialRedis(t *testing.T, sock string) *redisConn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &redisConn{c: c, r: bufio.NewReader(c)}
}

// do sends a command and returns its reply: a string, an int64, nil or a
// []any.
func (rc *redisConn) do(t *testing.T, args ...string) any {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	_ = rc.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.c.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	v, err := rc.read()
	if err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
	return v
}

func (rc *redisConn) read() (any, error) {
	line, err := rc.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("%s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rc.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = rc.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected reply %q", line)
}

// tokensUsed sums the tokens counters of limitID (envoyproxy/ratelimit's
// keys of its usage=tokens descriptor, one a window).
func (rc *redisConn) tokensUsed(t *testing.T, limitID string) int64 {
	t.Helper()
	ks, _ := rc.do(t, "KEYS", "*usage_tokens*"+limitID+"*").([]any)
	var sum int64
	for _, k := range ks {
		v, _ := rc.do(t, "GET", k.(string)).(string)
		n, _ := strconv.ParseInt(v, 10, 64)
		sum += n
	}
	return sum
}

// commandStats is INFO commandstats: calls per command.
func (rc *redisConn) commandStats(t *testing.T) map[string]int64 {
	t.Helper()
	info, _ := rc.do(t, "INFO", "commandstats").(string)
	out := map[string]int64{}
	for _, l := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}
