package soak

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// The rate limit service runs as a process of its own, as a fleet runs
// envoyproxy/ratelimit, so the schedule can SIGKILL it: the test binary
// started again with these variables set serves it instead of running
// tests (TestMain).
const (
	rlsListenEnv = "SY_SOAK_RLS_LISTEN" // its gRPC address
	rlsHealthEnv = "SY_SOAK_RLS_HEALTH" // answers 200 once it serves
	rlsXDSEnv    = "SY_SOAK_RLS_XDS"    // the control plane
	rlsRedisEnv  = "SY_SOAK_RLS_REDIS"  // redis-server's unix socket
)

// serveRLSProcess is the rate limit service process's main: it serves until
// it is killed (it never returns), or exits 1 when it cannot start.
func serveRLSProcess() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "rate limit service:", err)
		os.Exit(1)
	}
	lis, err := net.Listen("tcp", os.Getenv(rlsListenEnv))
	if err != nil {
		fail(err)
	}
	if _, err := ratelimittest.ServeEnvoyRateLimit(lis, os.Getenv(rlsXDSEnv), os.Getenv(rlsRedisEnv)); err != nil {
		fail(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	fail(http.ListenAndServe(os.Getenv(rlsHealthEnv), mux))
}

// startRLS starts the rate limit service process on a fixed address, so a
// restart comes back where the gateways look for it.
func (f *fleet) startRLS() {
	bin, err := os.Executable()
	if err != nil {
		f.t.Fatal(err)
	}
	f.rlsAddr = freePort(f.t)
	health := freePort(f.t)
	p := f.newProc("ratelimit", "http://"+health+"/healthz", "-test.run=^$")
	p.bin = bin
	p.env = append(append([]string(nil), f.env...), rlsListenEnv+"="+f.rlsAddr, rlsHealthEnv+"="+health,
		rlsXDSEnv+"="+f.xdsAddr, rlsRedisEnv+"="+f.redis.Sock)
	p.logf = filepath.Join(f.dir, "ratelimit.log")
	p.start()
	p.waitReady(time.Minute)
	f.rls = p
}
