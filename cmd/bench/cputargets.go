package main

import (
	"math"
	"strings"
)

// writeCPUTargets writes the performance issue's targets (CPU per request,
// throughput against nginx, latency at concurrency 1 and 64, memory, no
// allocation per relayed chunk), each met or missed by how much.
func (r *report) writeCPUTargets(w func(string, ...any)) {
	w("\n**CPU per request (the performance issue)**\n\n")
	rps := func(name string, c int) float64 {
		cell := r.latency[name][c]
		if cell == nil || len(cell.lat) == 0 || cell.wall <= 0 {
			return math.NaN()
		}
		return float64(len(cell.lat)) / cell.wall.Seconds()
	}
	cpu := func(name string, c int) float64 {
		cell := r.latency[name][c]
		if cell == nil {
			return math.NaN()
		}
		return cell.cpuPerRequest(r.sys(name))
	}
	// missed collects, per system and load, the missed targets that the
	// profile taken under that load explains (written after the list).
	missed := map[profileKey]bool{}
	atMost := func(label string, v, limit float64, unit string, why profileKey) {
		if math.IsNaN(v) {
			w("- %s ≤ %g %s: **not evaluated** (not measured in this run)\n", label, limit, unit)
			return
		}
		w("- %s ≤ %g %s: %s — %.3f %s, by %.3f %s\n", label, limit, unit, verdict(v <= limit), v, unit, math.Abs(limit-v), unit)
		missed[why] = missed[why] || v > limit
	}
	atLeast := func(label string, v, limit float64, why profileKey) {
		if math.IsNaN(v) {
			w("- %s ≥ %.2fx nginx: **not evaluated** (not measured in this run)\n", label, limit)
			return
		}
		w("- %s ≥ %.2fx nginx: %s — %.2fx\n", label, limit, verdict(v >= limit), v)
		missed[why] = missed[why] || v < limit
	}
	in1, in16 := profileKey{"switchyard", chatC1}, profileKey{"switchyard", chatC16}
	grpc1, grpc16 := profileKey{"switchyard-grpc", chatC1}, profileKey{"switchyard-grpc", chatC16}
	// Throughput and CPU per request come from the throughput phase (a
	// fast upstream, as the issue measured them) when it ran.
	fast := r.throughput != nil
	if fast {
		rps = func(name string, _ int) float64 { return r.throughput[name].rps() }
		cpu = func(name string, _ int) float64 {
			if c := r.throughput[name]; c != nil {
				return c.cpuPerRequest(r.sys(name))
			}
			return math.NaN()
		}
		w("  (concurrency 16 figures from section 1b, against the fake upstream without service time)\n\n")
	}
	nginx16 := rps("nginx", 16)
	atLeast("requests/s at concurrency 16, in process", rps("switchyard", 16)/nginx16, 0.25, in16)
	atLeast("requests/s at concurrency 16, over loopback gRPC", rps("switchyard-grpc", 16)/nginx16, 0.18, grpc16)
	if d := rps("direct", 16); !fast && !math.IsNaN(d) && nginx16 > 0.8*d {
		w("  (nginx here reaches %.0f%% of direct's %.0f req/s: the fake's %s service time, not nginx, bounds it, so these ratios are higher than against a faster upstream)\n",
			100*nginx16/d, d, r.opts.serviceTime)
	}
	atMost("gateway CPU per non-streaming request at concurrency 16, in process", cpu("switchyard", 16), 0.12, "ms", in16)
	atMost("gateway CPU per non-streaming request at concurrency 16, over loopback gRPC", cpu("switchyard-grpc", 16), 0.2, "ms", grpc16)
	p50 := r.added("switchyard", 1, 50)
	atMost("added p50 at concurrency 1, in process", p50, 0.25, "ms", in1)
	if n := r.added("nginx", 1, 50); !math.IsNaN(p50) && !math.IsNaN(n) && n > 0 {
		w("- added p50 at concurrency 1 ≤ 3.5x nginx's: %s — %.1fx (nginx %.3f ms)\n", verdict(p50 <= 3.5*n), p50/n, n)
		missed[in1] = missed[in1] || p50 > 3.5*n
	}
	atMost("added p99 at concurrency 1, in process", r.added("switchyard", 1, 99), 0.8, "ms", in1)
	atMost("added p50 at concurrency 1, over loopback gRPC", r.added("switchyard-grpc", 1, 50), 0.45, "ms", grpc1)
	for _, name := range []string{"switchyard", "switchyard-grpc"} {
		cell := r.latency[name][64]
		if cell == nil {
			w("- %s, added p99 at concurrency 64 ≤ 10 ms: **not evaluated** (not measured in this run)\n", name)
			continue
		}
		a := r.added(name, 64, 99)
		w("- %s, added p99 at concurrency 64 ≤ 10 ms, no errors: %s — %.3f ms, %d errors\n", name, verdict(a <= 10 && cell.errs == 0), a, cell.errs)
		// No profile at 64: the one at 16 is the nearest load.
		k := profileKey{name, chatC16}
		missed[k] = missed[k] || a > 10 || cell.errs > 0
	}
	for _, m := range r.memory {
		if strings.HasPrefix(m.phase, "64 concurrent") {
			mb := float64(m.mem.HWM) * 1024 / 1e6
			w("- peak RSS at 64 concurrent streams ≤ 100 MB: %s — %.1f MB (%.1f MiB)\n", verdict(mb <= 100), mb, float64(m.mem.HWM)/1024)
		}
	}
	for _, mode := range []string{"inprocess", "loopback-grpc"} {
		if x, ok := findMicro(r.micro, "BenchmarkGatewayStream/"+mode); ok && !math.IsNaN(x.AllocsChunk) {
			// The whole test process counts (client, upstream, runtime):
			// below one allocation per chunk is none made per chunk by
			// the relay itself.
			w("- no allocation per relayed SSE chunk (%s): %s — %.2f allocs/chunk\n", mode, verdict(x.AllocsChunk < 1), x.AllocsChunk)
			if x.AllocsChunk >= 1 && mode == "loopback-grpc" {
				w("  (what allocates per chunk over loopback gRPC is broken down in the hand-written notes below, from a memory profile)\n")
			}
		}
	}
	w("\n  Streaming TTFB (both modes) is under **Streaming** above.\n")
	for _, k := range []profileKey{in1, in16, grpc1, grpc16} {
		if missed[k] {
			dominates(w, "CPU profile of "+k.system+", "+k.title+", for the targets it misses above", r.profile(k.system, k.title), "")
		}
	}
}

// profileKey names a profile: the system and the load's title.
type profileKey struct{ system, title string }

// The titles of the non-streaming profiles (runProfiles).
const (
	chatC1  = "non-streaming chat, concurrency 1"
	chatC16 = "non-streaming chat, concurrency 16"
)
