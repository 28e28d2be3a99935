// Package ratelimittest runs the fleet's rate limiter for tests: a private
// redis-server (installed with apt-get when missing and the tests run as
// root, as on a fresh Debian CI machine) and envoyproxy/ratelimit's service
// on its Redis store, configured over xDS from a Switchyard control plane
// exactly as CONFIG_TYPE=GRPC_XDS_SOTW configures the ratelimit binary.
package ratelimittest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
	"github.com/switchyard-ai/switchyard/ratelimit"
)

// EnvoyRateLimit serves envoyproxy/ratelimit's RLS service on lis, with its
// Redis store on the redis-server at the unix socket redisSock and its own
// xDS config provider reading the control plane at xdsAddr. It is assembled
// as the ratelimit binary's runner assembles it, minus the runner's signal
// handling and debug HTTP server, and returns once the first configuration
// has arrived; it stops when the test ends. clock drives the fixed windows
// (nil: the system clock).
func EnvoyRateLimit(t testing.TB, lis net.Listener, xdsAddr, redisSock string, clock ratelimit.Clock) {
	t.Helper()
	if clock == nil {
		clock = ratelimit.SystemClock{}
	}
	stop, err := serveEnvoyRateLimit(lis, xdsAddr, redisSock, clock, 4, "test-envoyproxy-ratelimit")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

var (
	redisOnce sync.Once
	redisBin  string
	redisErr  error
)

// Redis starts a private redis-server on a unix socket and returns
// the socket's path. A machine without redis-server gets it from apt-get
// when the test runs as root (a fresh Debian CI machine); otherwise the
// test is skipped, saying why, except in CI (CI set), where it fails: CI
// must never pass by checking less.
func Redis(t testing.TB) string {
	t.Helper()
	return StartRedis(t).Sock
}

// RedisServer is a private redis-server a test can stop and start again,
// to see what the limits do while Redis is down.
type RedisServer struct {
	// Sock is the unix socket it listens on, the same across restarts.
	Sock string
	t    testing.TB
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	out  *bytes.Buffer
}

// StartRedis is Redis, returning the server itself.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	redisOnce.Do(func() { redisBin, redisErr = findOrInstallRedis() })
	if redisErr != nil {
		testserver.Unavailable(t, "redis-server", "the conformance table does not run against envoyproxy/ratelimit's Redis store", redisErr)
	}
	// Unix socket paths are limited to about 100 bytes, which t.TempDir
	// can exceed.
	dir, err := os.MkdirTemp("", "sy-redis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	r := &RedisServer{Sock: filepath.Join(dir, "redis.sock"), t: t, dir: dir}
	t.Cleanup(r.Stop)
	r.Start()
	return r
}

// Start starts the server (again, after Stop) on the same socket, empty:
// it keeps nothing on disk, as the deployments' Redis does not. It returns
// once the socket accepts connections.
func (r *RedisServer) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.t.Fatal("ratelimittest: redis-server is already running")
	}
	r.out = &bytes.Buffer{}
	cmd := exec.Command(redisBin, "--port", "0", "--unixsocket", r.Sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", r.dir)
	cmd.Stdout, cmd.Stderr = r.out, r.out
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", r.Sock); err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server did not start:\n%s", r.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server (as a crash would: its counters are lost) and
// waits until it is gone and its socket removed, so the next connection
// attempt is refused. Stopping a stopped server does nothing.
func (r *RedisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill() // also ends a paused server
	_ = r.cmd.Wait()
	r.cmd = nil
	_ = os.Remove(r.Sock) // SIGKILL leaves the socket file behind
}

// Pause stops the server without ending it (SIGSTOP): connections stay
// open and commands hang, as with a Redis that is unreachable behind a
// network partition. Resume continues it with its counters intact. A test
// that fails while it is paused has it killed first thing in its cleanup,
// before the ratelimit service's cleanup waits for calls hung on it.
func (r *RedisServer) Pause() {
	r.t.Cleanup(r.Stop)
	r.signal(syscall.SIGSTOP)
}

// Resume continues a paused server (SIGCONT).
func (r *RedisServer) Resume() { r.signal(syscall.SIGCONT) }

func (r *RedisServer) signal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		r.t.Fatal("ratelimittest: redis-server is not running")
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("redis-server: %v: %v", sig, err)
	}
}

// Clock is a settable envoyproxy/ratelimit clock (Unix seconds), for tests
// that must not straddle a real minute boundary: every window the rate
// limit service computes comes from it.
type Clock struct{ now atomic.Int64 }

// NewClock returns a Clock at 18 s into a minute, so its windows reset 42 s
// later whatever the wall clock says.
func NewClock() *Clock {
	c := &Clock{}
	c.now.Store(1_800_000_000 - 1_800_000_000%60 + 18)
	return c
}

// UnixNow implements ratelimit.Clock.
func (c *Clock) UnixNow() int64 { return c.now.Load() }

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) { c.now.Add(int64(d / time.Second)) }

func findOrInstallRedis() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		return "", fmt.Errorf("not in PATH, and no apt-get to install it with")
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("not in PATH; install it (apt-get install redis-server) or run the tests as root to have them install it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	aptRun := func(args ...string) error {
		cmd := exec.CommandContext(ctx, apt, append([]string{"-o", "DPkg::Lock::Timeout=120", "-y", "-q"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = &log, &log
		return cmd.Run()
	}
	install := func() error { return aptRun("install", "--no-install-recommends", "redis-server") }
	// Another test binary of the same `go test ./...` may be installing it
	// at the same moment and hold apt's locks: look again, refresh the
	// package lists (a fresh machine may have none) and retry.
	for attempt := range 3 {
		if p, lerr := exec.LookPath("redis-server"); lerr == nil {
			return p, nil
		}
		if err = install(); err == nil {
			break
		}
		if attempt == 0 {
			if uerr := aptRun("update"); uerr != nil {
				err = fmt.Errorf("apt-get update: %w", uerr)
			}
		} else {
			time.Sleep(2 * time.Second)
		}
	}
	if err != nil {
		return "", fmt.Errorf("apt-get install redis-server: %w\n%s", err, log.String())
	}
	for _, p := range []string{"redis-server", "/usr/bin/redis-server", "/usr/sbin/redis-server"} {
		if p, err := exec.LookPath(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("apt-get installed redis-server but it is not in PATH\n%s", log.String())
}

// Restart kills the server (SIGKILL: its counters are lost, as with a
// crash of a Redis without persistence) and starts a new one on the same
// socket, returning once it accepts connections.
func (r *RedisServer) Restart(t testing.TB) {
	t.Helper()
	r.Stop()
	r.Start()
}
