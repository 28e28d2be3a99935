package ratelimittest_test

import (
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// TestStartRedisAndRedisDo: the redis-server started outside a test
// answers RedisDo's replies of every kind, and RedisCommandCalls counts
// them.
func TestStartRedisAndRedisDo(t *testing.T) {
	sock, stop, err := ratelimittest.RunRedis()
	if err != nil {
		testserver.Unavailable(t, "redis-server", "RedisDo is not checked against a real server", err)
	}
	defer stop()
	for _, tc := range []struct {
		args []string
		want any
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"INCRBY", "n", "5"}, int64(5)},
		{[]string{"KEYS", "k"}, []any{"k"}},
	} {
		got, err := ratelimittest.RedisDo(sock, tc.args...)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if a, ok := tc.want.([]any); ok {
			if g, ok := got.([]any); !ok || len(g) != len(a) || g[0] != a[0] {
				t.Errorf("%v = %#v, want %#v", tc.args, got, tc.want)
			}
		} else if got != tc.want {
			t.Errorf("%v = %#v, want %#v", tc.args, got, tc.want)
		}
	}
	if _, err := ratelimittest.RedisDo(sock, "NOSUCHCOMMAND"); err == nil {
		t.Error("an error reply is not an error")
	}
	calls, err := ratelimittest.RedisCommandCalls(sock)
	if err != nil || calls["get"] != 2 || calls["incrby"] != 1 || calls["set"] != 1 {
		t.Errorf("RedisCommandCalls = %v, %v; want get 2, incrby 1, set 1", calls, err)
	}
}
