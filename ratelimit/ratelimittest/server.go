package ratelimittest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/ratelimit/src/provider"
	"github.com/envoyproxy/ratelimit/src/redis"
	rlservice "github.com/envoyproxy/ratelimit/src/service"
	"github.com/envoyproxy/ratelimit/src/settings"
	"github.com/envoyproxy/ratelimit/src/stats"
	gostats "github.com/lyft/gostats"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"

	"github.com/switchyard-ai/switchyard/ratelimit"
)

// The servers of this file are the fleet limiter outside a test binary
// (cmd/bench's fleet-mode figures): the same redis-server and
// envoyproxy/ratelimit assembly as Redis and EnvoyRateLimit, owned by the
// caller, who stops them.

// RunRedis starts a private redis-server on a unix socket (installing
// it as Redis does when missing) and returns the socket's path and a
// function that stops it and removes its directory.
func RunRedis() (sock string, stop func(), err error) {
	redisOnce.Do(func() { redisBin, redisErr = findOrInstallRedis() })
	if redisErr != nil {
		return "", nil, fmt.Errorf("redis-server: %w", redisErr)
	}
	dir, err := os.MkdirTemp("", "sy-redis")
	if err != nil {
		return "", nil, err
	}
	sock = filepath.Join(dir, "redis.sock")
	var out bytes.Buffer
	cmd := exec.Command(redisBin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			return sock, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("redis-server did not start:\n%s", out.String())
		}
	}
}

// ServeEnvoyRateLimit serves envoyproxy/ratelimit's RLS service on lis
// with its Redis store on the redis-server at redisSock (a pool of 10
// connections, the ratelimit binary's default) and its configuration over
// xDS from the control plane at xdsAddr, as EnvoyRateLimit does on the
// system clock. It returns once the first configuration has arrived, with
// a function that stops it.
func ServeEnvoyRateLimit(lis net.Listener, xdsAddr, redisSock string) (stop func(), err error) {
	return serveEnvoyRateLimit(lis, xdsAddr, redisSock, ratelimit.SystemClock{}, 10, "switchyard-envoyproxy-ratelimit")
}

// serveEnvoyRateLimit assembles envoyproxy/ratelimit's service: settings
// for CONFIG_TYPE=GRPC_XDS_SOTW, the fixed-window Redis cache on a pool of
// poolSize connections, and the xDS provider as node nodeID.
func serveEnvoyRateLimit(lis net.Listener, xdsAddr, redisSock string, clock ratelimit.Clock, poolSize int, nodeID string) (stop func(), err error) {
	logrus.SetLevel(logrus.WarnLevel)
	s := settings.NewSettings()
	s.ConfigType = "GRPC_XDS_SOTW"
	s.ConfigGrpcXdsServerUrl = xdsAddr
	s.ConfigGrpcXdsNodeId = nodeID
	s.ConfigGrpcXdsServerConnectRetryInterval = 100 * time.Millisecond
	s.XdsClientBackoffInitialInterval = 100 * time.Millisecond
	s.XdsClientBackoffMaxInterval = time.Second
	sm := stats.NewStatManager(gostats.NewStore(gostats.NewNullSink(), false), s)
	store := gostats.NewStore(gostats.NewNullSink(), false)
	client := redis.NewClientImpl(store.Scope("redis"), false, "", "unix", "single", redisSock, poolSize,
		0, 0, nil, false, nil, 5*time.Second, "", "")
	cache := redis.NewFixedRateLimitCacheImpl(client, nil, clock, rand.New(rand.NewSource(1)), 0, nil, 0.8, "", sm, false)
	prov := provider.NewXdsGrpcSotwProvider(s, sm)
	started := make(chan rlservice.RateLimitServiceServer, 1)
	// Without forceStart, NewService waits for the first configuration from
	// the provider, as the ratelimit binary does.
	go func() { started <- rlservice.NewService(cache, prov, sm, nil, clock, false, false, false) }()
	var svc rlservice.RateLimitServiceServer
	select {
	case svc = <-started:
	case <-time.After(15 * time.Second):
		go prov.Stop()
		_ = client.Close()
		return nil, fmt.Errorf("envoyproxy/ratelimit got no configuration over xDS from %s in 15s", xdsAddr)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, svc)
	go func() { _ = g.Serve(lis) }()
	return func() {
		g.Stop()
		go prov.Stop()
		_ = client.Close()
	}, nil
}

// RedisDo sends one command to the redis-server at the unix socket sock
// on a connection of its own and returns the reply: a string (simple or
// bulk), an int64, nil (a null bulk) or a []any. An error reply is an
// error. For looking at the limiter's Redis (INFO commandstats, a key's
// counter), not for load.
func RedisDo(sock string, args ...string) (any, error) {
	c, err := net.DialTimeout("unix", sock, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, fmt.Errorf("redis: empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, fmt.Errorf("redis: %s", line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$', '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("redis: bad reply %q", line)
		}
		if n < 0 {
			return nil, nil
		}
		if line[0] == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, err
			}
			return string(buf[:n]), nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}

// RedisInfo reads an INFO section as its fields (name: value).
func RedisInfo(sock, section string) (map[string]string, error) {
	v, err := RedisDo(sock, "INFO", section)
	if err != nil {
		return nil, err
	}
	s, _ := v.(string)
	out := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(l), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = val
		}
	}
	return out, nil
}

// RedisCommandCalls is INFO commandstats as calls per command (names as
// Redis gives them, e.g. incrby, config|resetstat).
func RedisCommandCalls(sock string) (map[string]int64, error) {
	info, err := RedisInfo(sock, "commandstats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for k, v := range info {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if n, ok := strings.CutPrefix(f, "calls="); ok {
				out[name], _ = strconv.ParseInt(n, 10, 64)
			}
		}
	}
	return out, nil
}
