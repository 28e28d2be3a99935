package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// The rate limiter part of the fleet-mode figures: the same non-streaming
// chat load through two `switchyard run` processes, one with its embedded
// limiter (the default) and one reaching the fleet's limiter,
// envoyproxy/ratelimit (run inside this harness, as the tests assemble it)
// on a private redis-server, in interleaved rounds. It gives the
// requests/s a replica serves when its limits are shared, and the Redis
// commands and Redis CPU each request costs, read from the server (INFO
// commandstats and INFO cpu) over the measured rounds.

const (
	limiterConc   = 64
	limiterRounds = 10
	limiterPer    = 640 // requests per system per round
)

type limiterResult struct {
	Skip  string
	Conc  int
	Rows  []*limiterRow
	Redis struct {
		Requests int64            // requests of the fleet row over the measured rounds
		Calls    map[string]int64 // limiter's commands (this harness's own left out)
		CPU      float64          // redis-server user+system CPU seconds
	}
	Version string
}

type limiterRow struct {
	Label string
	sys   *system
	cell  latencyCell
}

func (r *limiterRow) reqPerSec() float64 {
	if r.cell.wall <= 0 {
		return math.NaN()
	}
	return float64(len(r.cell.lat)) / r.cell.wall.Seconds()
}

func (l *limiterResult) redisPerRequest() (cmds, cpuMicros float64) {
	if l.Redis.Requests == 0 {
		return math.NaN(), math.NaN()
	}
	var n int64
	for _, c := range l.Redis.Calls {
		n += c
	}
	return float64(n) / float64(l.Redis.Requests), l.Redis.CPU * 1e6 / float64(l.Redis.Requests)
}

// runLimiter measures the embedded limiter against the fleet's.
func runLimiter(ctx context.Context, o *options, tmp string) *limiterResult {
	res := &limiterResult{Conc: limiterConc}
	fakePort, _ := freePort()
	fake, err := startFake(ctx, o.bin, tmp, "fake-limiter", fakePort, o.serviceTime, 0)
	if err != nil {
		res.Skip = "not run: the fake upstream did not start: " + err.Error()
		return res
	}
	defer fake.stop()
	sock, stopRedis, err := ratelimittest.RunRedis()
	if err != nil {
		res.Skip = "not run: " + err.Error()
		return res
	}
	defer stopRedis()
	if info, err := ratelimittest.RedisInfo(sock, "server"); err == nil {
		res.Version = info["redis_version"]
	}

	start := func(name string, extra ...string) (*system, error) {
		port, _ := freePort()
		adminPort, _ := freePort()
		cfg := filepath.Join(tmp, name+".yaml")
		dir := filepath.Join(tmp, "data-"+name)
		if err := os.WriteFile(cfg, []byte(switchyardConfig(port, fakePort, fakePort, fakePort)), 0o644); err != nil {
			return nil, err
		}
		key, err := createKey(ctx, o.bin, cfg, dir)
		if err != nil {
			return nil, err
		}
		p, err := startSwitchyard(ctx, o.bin, cfg, dir, tmp, name, port, 0,
			append([]string{"--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort)}, extra...)...)
		if err != nil {
			return nil, err
		}
		s := &system{name: name, proc: p, burst: endpoint{fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port), bearer(key), "bench/chat"}}
		s.paced = s.burst
		s.prepare(limiterConc)
		return s, nil
	}
	embedded, err := start("switchyard-limiter-embedded")
	if err != nil {
		res.Skip = "not run: " + err.Error()
		return res
	}
	defer embedded.proc.stop()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		res.Skip = "not run: " + err.Error()
		return res
	}
	xdsPort, _ := freePort()
	fleet, err := start("switchyard-limiter-fleet", "--ratelimit-addr", lis.Addr().String(), "--xds-listen", fmt.Sprintf("127.0.0.1:%d", xdsPort))
	if err != nil {
		lis.Close()
		res.Skip = "not run: " + err.Error()
		return res
	}
	defer fleet.proc.stop()
	stopRLS, err := ratelimittest.ServeEnvoyRateLimit(lis, fmt.Sprintf("127.0.0.1:%d", xdsPort), sock)
	if err != nil {
		lis.Close()
		res.Skip = "not run: " + err.Error()
		return res
	}
	defer stopRLS()
	res.Rows = []*limiterRow{
		{Label: "embedded limiter (in process, the default)", sys: embedded},
		{Label: "fleet limiter (envoyproxy/ratelimit on Redis, over gRPC)", sys: fleet},
	}
	for _, r := range res.Rows {
		if _, err := doOneSimple(ctx, r.sys); err != nil {
			res.Skip = fmt.Sprintf("not run: %s: smoke request: %v", r.sys.name, err)
			return res
		}
	}
	// The fleet process serves unmetered until its limiter answers (the
	// bench tier's on_limiter_error is allow): check that Redis counts.
	if calls, err := ratelimittest.RedisCommandCalls(sock); err != nil || calls["incrby"] == 0 {
		res.Skip = fmt.Sprintf("not run: the fleet process's requests reach no Redis counter (%v, %v)", calls, err)
		return res
	}

	logf("limiter: concurrency %d, %d rounds of %d requests per process", limiterConc, limiterRounds, limiterPer)
	for _, r := range res.Rows {
		r.sys.round(ctx, limiterConc, 4*limiterConc, 0) // warm-up, discarded
	}
	cpu0, err := redisCPU(sock)
	if err == nil {
		_, err = ratelimittest.RedisDo(sock, "CONFIG", "RESETSTAT")
	}
	if err != nil {
		res.Skip = "not run: reading Redis's statistics: " + err.Error()
		return res
	}
	for round := range limiterRounds {
		for _, r := range res.Rows {
			if ctx.Err() != nil {
				return res
			}
			r.sys.round(ctx, limiterConc, limiterConc, round*7) // re-warm, discarded
			t0 := cpuTicks(r.sys.proc.pid())
			rr := r.sys.round(ctx, limiterConc, limiterPer, round*limiterPer)
			r.cell.cpuTicks += cpuTicks(r.sys.proc.pid()) - t0
			r.cell.lat = append(r.cell.lat, rr.lat...)
			r.cell.wall += rr.wall
			r.cell.errs += rr.errs
			if r.cell.firstErr == "" {
				r.cell.firstErr = rr.firstErr
			}
			if r.sys == fleet {
				res.Redis.Requests += int64(limiterPer + limiterConc)
			}
		}
	}
	// Stream-end charges follow the responses: wait until Redis's command
	// count stops moving before reading it.
	var calls map[string]int64
	for deadline, last := time.Now().Add(5*time.Second), int64(-1); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if calls, err = ratelimittest.RedisCommandCalls(sock); err != nil {
			break
		}
		if calls["incrby"] == last {
			break
		}
		last = calls["incrby"]
	}
	cpu1, err2 := redisCPU(sock)
	if err != nil || err2 != nil {
		res.Skip = fmt.Sprintf("not run: reading Redis's statistics: %v %v", err, err2)
		return res
	}
	res.Redis.Calls = map[string]int64{}
	for c, n := range calls {
		if c == "info" || strings.HasPrefix(c, "config") {
			continue // this harness's own
		}
		res.Redis.Calls[c] = n
	}
	res.Redis.CPU = cpu1 - cpu0
	for _, r := range res.Rows {
		sm := summarize(r.cell.lat)
		logf("  %-28s %8.0f req/s  p50 %7.3f ms  p99 %7.3f ms  CPU %6.3f ms/req  errors %d", r.sys.name, r.reqPerSec(),
			ms(sm.P50), ms(sm.P99), r.cell.cpuPerRequest(r.sys), r.cell.errs)
	}
	cmds, cpu := res.redisPerRequest()
	logf("  Redis: %.2f commands and %.1f µs of CPU per request (%v)", cmds, cpu, res.Redis.Calls)
	return res
}

// redisCPU is redis-server's user+system CPU seconds (INFO cpu).
func redisCPU(sock string) (float64, error) {
	info, err := ratelimittest.RedisInfo(sock, "cpu")
	if err != nil {
		return 0, err
	}
	var total float64
	for _, k := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(strings.TrimSpace(info[k]), 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %q", k, info[k])
		}
		total += v
	}
	return total, nil
}

// write is the limiter part of the fleet-mode section.
func (l *limiterResult) write(w func(string, ...any)) {
	if l == nil {
		return
	}
	w("### Rate limiter: embedded and fleet\n\n")
	if l.Skip != "" {
		w("**%s.**\n\n", l.Skip)
		return
	}
	w("The latency runs' non-streaming chat requests (section 1; fake service time as there) at concurrency %d, %d interleaved rounds of %d requests per process, ", l.Conc, limiterRounds, limiterPer)
	w("through two `switchyard run` processes on embedded storage: one with its embedded limiter, one with `--ratelimit-addr` to envoyproxy/ratelimit ")
	w("(the library at the version in go.mod, assembled as `ratelimit/ratelimittest` does, with a Redis pool of 10 connections, the ratelimit binary's default; ")
	w("configured over xDS from that process's control plane) on a private redis-server %s over a unix socket. ", l.Version)
	w("envoyproxy/ratelimit runs inside this harness, so its CPU is not in the gateway's figure. Redis figures are read from the server over the fleet process's measured rounds and their re-warm requests.\n\n")
	w("| limiter | throughput req/s | p50 ms | p99 ms | gateway CPU ms/request | requests | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range l.Rows {
		sm := summarize(r.cell.lat)
		w("| %s | %.0f | %.3f | %.3f | %.3f | %d | %d |\n", r.Label, r.reqPerSec(), ms(sm.P50), ms(sm.P99), r.cell.cpuPerRequest(r.sys), len(r.cell.lat), r.cell.errs)
	}
	cmds, cpu := l.redisPerRequest()
	var calls []string
	for c, n := range l.Redis.Calls {
		calls = append(calls, fmt.Sprintf("%s %d", c, n))
	}
	slices.Sort(calls)
	w("\nRedis, over %d requests of the fleet process: **%.2f commands per request** (%s) and **%.1f µs of Redis CPU per request** (INFO cpu, user + system).\n\n",
		l.Redis.Requests, cmds, strings.Join(calls, ", "), cpu)
}

// figures are the limiter part's comparable numbers.
func (l *limiterResult) figures() []figure {
	if l == nil || l.Skip != "" {
		return nil
	}
	var fs []figure
	add := func(name string, v float64, unit string, higher bool) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v != 0 {
			fs = append(fs, figure{Name: storageFigurePrefix + name, Value: v, Unit: unit, Higher: higher})
		}
	}
	for i, key := range []string{"embedded limiter", "fleet limiter"} {
		if i < len(l.Rows) {
			r := l.Rows[i]
			add(fmt.Sprintf("%s throughput, concurrency %d", key, l.Conc), r.reqPerSec(), "req/s", true)
			add(fmt.Sprintf("%s CPU per request, concurrency %d", key, l.Conc), r.cell.cpuPerRequest(r.sys), "ms", false)
		}
	}
	cmds, cpu := l.redisPerRequest()
	add("fleet limiter Redis commands per request", cmds, "commands", false)
	add("fleet limiter Redis CPU per request", cpu, "µs", false)
	return fs
}
