package main

import (
	"context"
	"fmt"
	"math"
)

// The throughput phase: requests/s and gateway CPU per request at
// concurrency 16 against a fake upstream with no service time, so the
// gateway, not the upstream, bounds each system (the latency phase's fake
// answers after the service time, which caps every system near the same
// rate at concurrency 16). Interleaved rounds, as in the latency phase.
const (
	throughputConc     = 16
	throughputRounds   = 3
	throughputRequests = 5000 // per system per round
)

func runThroughput(ctx context.Context, o *options, systems []*system) map[string]*latencyCell {
	out := map[string]*latencyCell{}
	logf("throughput: concurrency %d against the fake without service time, %d rounds of %d requests per system",
		throughputConc, throughputRounds, throughputRequests)
	for _, s := range systems {
		if s.skip != "" || s.fast.url == "" {
			continue
		}
		out[s.name] = &latencyCell{}
		out[s.name].warmErrs += s.roundOn(ctx, s.fast, s.fastBodies, throughputConc, 500, 0).errs
	}
	for round := range throughputRounds {
		for _, s := range systems {
			cell := out[s.name]
			if cell == nil || ctx.Err() != nil {
				continue
			}
			var t0 int64
			if s.proc != nil {
				t0 = cpuTicks(s.proc.pid())
			}
			res := s.roundOn(ctx, s.fast, s.fastBodies, throughputConc, throughputRequests, round*throughputRequests)
			if s.proc != nil {
				cell.cpuTicks += cpuTicks(s.proc.pid()) - t0
			}
			cell.lat = append(cell.lat, res.lat...)
			cell.wall += res.wall
			cell.errs += res.errs
			if cell.firstErr == "" {
				cell.firstErr = res.firstErr
			}
		}
	}
	for _, s := range systems {
		if cell := out[s.name]; cell != nil {
			sm := summarize(cell.lat)
			logf("  %-15s c=%d fast upstream: %8.0f req/s  CPU %6.3f ms/req  p50 %7.3f ms  p99 %7.3f ms  errors %d", s.name, throughputConc,
				cell.rps(), cell.cpuPerRequest(s), ms(sm.P50), ms(sm.P99), cell.errs)
		}
	}
	return out
}

// rps is the cell's completed requests per second of its rounds' wall time.
func (c *latencyCell) rps() float64 {
	if c == nil || len(c.lat) == 0 || c.wall <= 0 {
		return math.NaN()
	}
	return float64(len(c.lat)) / c.wall.Seconds()
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// writeThroughput writes the throughput phase's table.
func (r *report) writeThroughput(w func(string, ...any)) {
	if r.throughput == nil {
		return
	}
	w("\n## 1b. Throughput against a fast upstream\n\n")
	w("Concurrency %d, %d interleaved rounds of %d non-streaming chat requests per system, against a fake upstream with "+
		"no service time (the same for all), so each system's own cost bounds it; the latency phase's fake "+
		"(%s service time) caps every system near the same rate at this concurrency. CPU is the gateway process's "+
		"user+system time per request (`/proc/PID/stat`); the load generator and the fake share the machine.\n\n",
		throughputConc, throughputRounds, throughputRequests, r.opts.serviceTime)
	w("| system | requests/s | × nginx | gateway CPU per request | p50 | p99 | errors |\n|---|---:|---:|---:|---:|---:|---:|\n")
	nginx := r.throughput["nginx"].rps()
	for _, s := range r.systems {
		cell := r.throughput[s.name]
		if cell == nil {
			continue
		}
		sm := summarize(cell.lat)
		x, c := "", "—"
		if v := cell.rps() / nginx; !math.IsNaN(v) && s.name != "direct" {
			x = f2(v) + "x"
		}
		if v := cell.cpuPerRequest(s); !math.IsNaN(v) {
			c = f3(v) + " ms"
		}
		w("| %s | %.0f | %s | %s | %.3f ms | %.3f ms | %d |\n", s.name, cell.rps(), x, c, ms(sm.P50), ms(sm.P99), cell.errs)
	}
}
