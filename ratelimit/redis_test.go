package ratelimit_test

import (
	"net"
	"testing"

	"github.com/switchyard-ai/switchyard/ratelimit"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// redisBackend is the fleet's limiter: envoyproxy/ratelimit's service with
// its Redis store on a real redis-server, configured by its own xDS
// provider (what CONFIG_TYPE=GRPC_XDS_SOTW selects) from our control plane.
func redisBackend(t *testing.T, clock ratelimit.Clock, xdsAddr string) string {
	sock := ratelimittest.Redis(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ratelimittest.EnvoyRateLimit(t, lis, xdsAddr, sock, clock)
	return lis.Addr().String()
}
