// Command bench is Switchyard's benchmark harness (make bench). It measures,
// on loopback against the fake upstream (switchyard fake) with a fixed
// service time, the latency Switchyard adds over a direct call side by side
// with nginx (the floor for any proxy) and the Portkey gateway (a peer);
// streaming time to first byte and gaps between chunks; the hot-path
// microbenchmarks; the gateway's peak RSS; once the gateway serves
// /v1/batches, a 50,000-line batch; and multi-turn conversations against
// two fakes with prompt caches, with and without cache affinity
// (promptcache.go). It writes docs/benchmarks.md and an SVG plot of added
// latency.
//
// It installs what it needs (nginx from Debian, the Portkey gateway from npm
// into a cache directory) and reports a reference that could not run rather
// than dropping it.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type options struct {
	root, bin, goBin, out, svg, cache string
	serviceTime, chunkDelay           time.Duration
	conc                              []int
	rounds, requests                  int
	streamRounds, burstStreams        int
	pacedStreams                      int
	profileSecs                       int
	skipMicro, keep                   bool
	// systems and phases restrict a run (quick probes while working on the
	// hot path); make bench runs everything.
	systems, phases map[string]bool
}

// listFlag parses a comma-separated list into a set.
func listFlag(v string) map[string]bool {
	m := map[string]bool{}
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			m[f] = true
		}
	}
	return m
}

var startTime = time.Now()

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "[bench %6.1fs] %s\n", time.Since(startTime).Seconds(), fmt.Sprintf(format, a...))
}

func main() {
	var o options
	var concFlag string
	flag.StringVar(&o.root, "root", ".", "repository root")
	flag.StringVar(&o.bin, "bin", "bin/switchyard", "the switchyard binary under test (make build)")
	flag.StringVar(&o.goBin, "go", "go", "the go command, for the microbenchmarks and pprof")
	flag.StringVar(&o.out, "out", "docs/benchmarks.md", "markdown report to write")
	flag.StringVar(&o.svg, "svg", "docs/benchmarks-latency.svg", "SVG plot to write")
	flag.StringVar(&o.cache, "cache", "cmd/bench/.cache", "directory for the npm-installed peer (not committed)")
	flag.DurationVar(&o.serviceTime, "service-time", 2*time.Millisecond, "the fake upstream's fixed service time")
	flag.DurationVar(&o.chunkDelay, "chunk-delay", time.Millisecond, "the paced fake's pause between streamed chunks")
	flag.StringVar(&concFlag, "concurrency", "1,16,64", "concurrency levels for the non-streaming latency runs")
	flag.IntVar(&o.rounds, "rounds", 20, "interleaved rounds per concurrency level (short rounds spread machine noise over all systems)")
	flag.IntVar(&o.requests, "requests", 150, "measured requests per system per round (at least 5 x concurrency)")
	flag.IntVar(&o.streamRounds, "stream-rounds", 5, "interleaved rounds of the streaming runs")
	flag.IntVar(&o.burstStreams, "burst-streams", 20, "streams per system per round, chunks back to back")
	flag.IntVar(&o.pacedStreams, "paced-streams", 4, "streams per system per round, chunks chunk-delay apart")
	flag.IntVar(&o.profileSecs, "profile-seconds", 5, "length of each CPU profile of switchyard under load")
	flag.BoolVar(&o.skipMicro, "skip-micro", false, "skip the go test microbenchmarks")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (configs, logs, profiles)")
	systemsFlag := flag.String("systems", strings.Join(gateways, ","), "the systems to measure besides direct (a quick probe: switchyard)")
	phasesFlag := flag.String("phases", "latency,streaming,throughput,profiles,memory,batch,promptcache,storage", "the phases to run besides the microbenchmarks (-skip-micro)")
	flag.Parse()
	o.systems, o.phases = listFlag(*systemsFlag), listFlag(*phasesFlag)
	for _, f := range strings.Split(concFlag, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			fmt.Fprintf(os.Stderr, "bench: bad -concurrency %q\n", concFlag)
			os.Exit(2)
		}
		o.conc = append(o.conc, c)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := 0
	func() {
		defer stopAll()
		if err := benchmark(ctx, &o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			code = 1
		}
	}()
	os.Exit(code)
}

// requestsFor is the measured requests per system per round at conc.
func (o *options) requestsFor(conc int) int { return max(o.requests, 5*conc) }

func benchmark(ctx context.Context, o *options) error {
	r := &report{opts: o, started: time.Now().UTC(), command: "make bench", argv: "go run ./bench " + strings.Join(os.Args[1:], " ")}
	if abs, err := filepath.Abs(o.bin); err == nil {
		o.bin = abs
	}
	if _, err := os.Stat(o.bin); err != nil {
		return fmt.Errorf("switchyard binary: %v (run make build)", err)
	}
	for _, p := range []*string{&o.cache, &o.out, &o.svg} {
		if !filepath.IsAbs(*p) {
			*p = filepath.Join(o.root, *p)
		}
	}
	tmp, err := os.MkdirTemp("", "switchyard-bench-")
	if err != nil {
		return err
	}
	if o.keep {
		logf("temporary directory %s kept", tmp)
	} else {
		defer os.RemoveAll(tmp)
	}
	if *onlyFlag != "" {
		return runOnly(ctx, o, tmp)
	}
	r.machine = readMachine(ctx, o)

	// The upstreams.
	b := &bench{ctx: ctx, o: o, r: r, tmp: tmp}
	b.fakePort, _ = freePort()
	b.pacedPort, _ = freePort()
	b.fastPort, _ = freePort()
	logf("starting the fake upstreams (service time %s; paced chunk delay %s; and one without service time)", o.serviceTime, o.chunkDelay)
	if _, err := startFake(ctx, o.bin, tmp, "fake", b.fakePort, o.serviceTime, 0); err != nil {
		return err
	}
	if _, err := startFake(ctx, o.bin, tmp, "fake-paced", b.pacedPort, o.serviceTime, o.chunkDelay); err != nil {
		return err
	}
	if _, err := startFake(ctx, o.bin, tmp, "fake-fast", b.fastPort, 0, 0); err != nil {
		return err
	}
	direct := &system{name: "direct",
		burst: endpoint{fakeBase(b.fakePort) + "/chat/completions", bearer(fakeKey), "fake-chat-1"},
		paced: endpoint{fakeBase(b.pacedPort) + "/chat/completions", bearer(fakeKey), "fake-chat-1"},
		fast:  endpoint{fakeBase(b.fastPort) + "/chat/completions", bearer(fakeKey), "fake-chat-1"}}
	nginx, portkey := b.startNginx(), b.startPortkey()
	sy, err := b.startSwitchyard()
	if err != nil {
		return err
	}
	syg, err := b.startSwitchyardGRPC()
	if err != nil {
		return err
	}
	r.systems = []*system{direct, nginx, portkey, sy, syg}
	maxConc := 1
	for _, c := range o.conc {
		maxConc = max(maxConc, c)
	}
	smokeTest(ctx, r.systems, max(maxConc, 64))
	if direct.skip != "" {
		return fmt.Errorf("the fake upstream itself does not answer: %s", direct.skip)
	}

	if o.phases["latency"] {
		r.latency = runLatency(ctx, o, r.systems)
	}
	if o.phases["streaming"] {
		r.streams = runStreaming(ctx, o, r.systems)
	}
	if o.phases["throughput"] {
		r.throughput = runThroughput(ctx, o, r.systems)
	}
	if o.phases["profiles"] && syg.proc != nil && syg.skip == "" {
		// Its misses are explained by its own profile, taken before it
		// stops.
		r.profiles = append(r.profiles, runProfiles(ctx, o, syg, b.pprofGRPCPort, b.tmp)...)
	}
	// The later phases run on switchyard alone.
	if syg.proc != nil {
		syg.proc.stop()
	}
	b.runSwitchyardPhases(sy, maxConc)
	if o.phases["promptcache"] {
		// Its own fakes and switchyard, after the others have stopped
		// loading the machine.
		r.promptCache = runPromptCache(ctx, o, tmp)
	}
	if o.phases["storage"] {
		// Embedded and fleet storage, on their own fake and switchyards.
		r.storage = runStorage(ctx, o, tmp)
		r.machine.versions = append(r.machine.versions, r.storage.Versions...)
	}
	stopAll()
	if ctx.Err() != nil {
		return ctx.Err()
	}

	if !o.skipMicro {
		r.micro, r.microCmds, r.microFailures = runMicro(ctx, o.goBin, o.root)
		r.microProfile = profileMicro(ctx, o, tmp)
	}
	r.elapsed = time.Since(startTime)
	return r.write()
}

// bench is what starting the systems shares: the run's options and report,
// its temporary directory and the fake upstreams' ports.
type bench struct {
	ctx                           context.Context
	o                             *options
	r                             *report
	tmp                           string
	fakePort, pacedPort, fastPort int

	// Switchyard's port, profile port, data directory and key, for the
	// phases run on it alone.
	syPort, pprofPort int
	dataDir, key      string
	// The profile port of switchyard-grpc (0 when it does not run).
	pprofGRPCPort int
}

func fakeBase(port int) string { return fmt.Sprintf("http://127.0.0.1:%d/v1", port) }

func bearer(k string) http.Header {
	return http.Header{"Authorization": {"Bearer " + k}, "Content-Type": {"application/json"}}
}

// startNginx starts nginx, the floor, in front of the fake upstreams.
func (b *bench) startNginx() *system {
	nginx := &system{name: "nginx"}
	if !b.o.systems["nginx"] {
		nginx.skip = "not run: left out with -systems"
	} else if bin, v, err := ensureNginx(b.ctx); err != nil {
		nginx.skip = "not run: could not install nginx: " + err.Error()
	} else {
		b.r.machine.versions = append(b.r.machine.versions, kv{"nginx", v})
		p1, _ := freePort()
		p2, _ := freePort()
		logf("starting nginx %s", v)
		p3, _ := freePort()
		if p, err := startNginx(b.ctx, bin, filepath.Join(b.tmp, "nginx"), []int{p1, p2, p3}, []int{b.fakePort, b.pacedPort, b.fastPort}); err != nil {
			nginx.skip = "not run: nginx did not start: " + err.Error()
		} else {
			nginx.proc = p
			nginx.burst = endpoint{fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", p1), bearer(fakeKey), "fake-chat-1"}
			nginx.paced = endpoint{fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", p2), bearer(fakeKey), "fake-chat-1"}
			nginx.fast = endpoint{fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", p3), bearer(fakeKey), "fake-chat-1"}
		}
	}
	return nginx
}

// startPortkey starts the Portkey gateway, the peer.
func (b *bench) startPortkey() *system {
	portkey := &system{name: "portkey"}
	if !b.o.systems["portkey"] {
		portkey.skip = "not run: left out with -systems"
	} else if dir, v, err := ensurePortkey(b.ctx, b.o.cache); err != nil {
		portkey.skip = "not run: could not install " + portkeySpec + ": " + err.Error()
	} else {
		b.r.machine.versions = append(b.r.machine.versions, kv{"portkey gateway", v + " (" + portkeyPackage +
			" from npm, with @hono/node-server " + honoNodeServerPin + ": see Systems)"})
		port, _ := freePort()
		logf("starting the Portkey gateway %s", v)
		if p, err := startPortkey(b.ctx, dir, b.tmp, port); err != nil {
			portkey.skip = "not run: the Portkey gateway did not start: " + err.Error()
		} else {
			portkey.proc = p
			h := func(up int) http.Header {
				x := bearer(fakeKey)
				x.Set("x-portkey-provider", "openai")
				x.Set("x-portkey-custom-host", fakeBase(up))
				return x
			}
			url := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
			portkey.burst = endpoint{url, h(b.fakePort), "fake-chat-1"}
			portkey.paced = endpoint{url, h(b.pacedPort), "fake-chat-1"}
			portkey.fast = endpoint{url, h(b.fastPort), "fake-chat-1"}
		}
	}
	return portkey
}

// startSwitchyard starts switchyard run with its profile endpoint.
func (b *bench) startSwitchyard() (*system, error) {
	sy := &system{name: "switchyard"}
	b.syPort, _ = freePort()
	b.pprofPort, _ = freePort()
	cfgPath := filepath.Join(b.tmp, "switchyard.yaml")
	b.dataDir = filepath.Join(b.tmp, "data")
	if err := os.WriteFile(cfgPath, []byte(switchyardConfig(b.syPort, b.fakePort, b.pacedPort, b.fastPort)), 0o644); err != nil {
		return nil, err
	}
	b.r.syConfig = switchyardConfig(b.syPort, b.fakePort, b.pacedPort, b.fastPort)
	var err error
	if !b.o.systems["switchyard"] {
		sy.skip = "not run: left out with -systems"
	} else if b.key, err = createKey(b.ctx, b.o.bin, cfgPath, b.dataDir); err != nil {
		sy.skip = "not run: " + err.Error()
	} else {
		logf("starting switchyard run")
		if sy.proc, err = startSwitchyard(b.ctx, b.o.bin, cfgPath, b.dataDir, b.tmp, "switchyard", b.syPort, b.pprofPort); err != nil {
			sy.proc = nil
			sy.skip = "not run: switchyard did not start: " + err.Error()
		} else {
			base := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", b.syPort)
			sy.burst = endpoint{base, bearer(b.key), "bench/chat"}
			sy.paced = endpoint{base, bearer(b.key), "bench/paced"}
			sy.fast = endpoint{base, bearer(b.key), "bench/fast"}
		}
	}
	return sy, nil
}

// startSwitchyardGRPC starts switchyard with --loopback-grpc: its data plane
// reaches ext_proc and the rate limit service over loopback TCP gRPC, as
// Envoy reaches an ext_proc server in a deployment (`switchyard run` by
// default uses an in-process channel). A second process, on its own port,
// data directory, key, admin port and profile endpoint; the same
// configuration but for the listener. It runs alongside switchyard in the
// latency and streaming phases only.
func (b *bench) startSwitchyardGRPC() (*system, error) {
	syg := &system{name: "switchyard-grpc"}
	if !b.o.systems["switchyard-grpc"] {
		syg.skip = "not run: left out with -systems"
		return syg, nil
	}
	if !b.o.phases["latency"] && !b.o.phases["streaming"] && !b.o.phases["throughput"] {
		syg.skip = "not run: measured only in the latency, streaming and throughput phases, left out with -phases"
		return syg, nil
	}
	port, _ := freePort()
	adminPort, _ := freePort()
	cfg := filepath.Join(b.tmp, "switchyard-grpc.yaml")
	dir := filepath.Join(b.tmp, "data-grpc")
	if err := os.WriteFile(cfg, []byte(switchyardConfig(port, b.fakePort, b.pacedPort, b.fastPort)), 0o644); err != nil {
		return nil, err
	}
	k, err := createKey(b.ctx, b.o.bin, cfg, dir)
	if err != nil {
		syg.skip = "not run: " + err.Error()
		return syg, nil
	}
	logf("starting switchyard run --loopback-grpc")
	b.pprofGRPCPort, _ = freePort()
	if syg.proc, err = startSwitchyard(b.ctx, b.o.bin, cfg, dir, b.tmp, "switchyard-grpc", port, b.pprofGRPCPort,
		"--loopback-grpc", "--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort)); err != nil {
		syg.proc = nil
		syg.skip = "not run: switchyard --loopback-grpc did not start: " + err.Error()
		return syg, nil
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
	syg.burst = endpoint{base, bearer(k), "bench/chat"}
	syg.paced = endpoint{base, bearer(k), "bench/paced"}
	syg.fast = endpoint{base, bearer(k), "bench/fast"}
	return syg, nil
}

// smokeTest sends one request to each system that runs, so a misconfigured
// system is reported rather than measured as errors; conns is the most
// connections a system will be asked for.
func smokeTest(ctx context.Context, systems []*system, conns int) {
	for _, s := range systems {
		if s.skip != "" {
			logf("%s: %s", s.name, s.skip)
			continue
		}
		s.prepare(conns)
		if _, err := doOneSimple(ctx, s); err != nil {
			s.skip = "not run: smoke request failed: " + err.Error()
			logf("%s: %s", s.name, s.skip)
		}
	}
}

// runSwitchyardPhases runs the phases measured on switchyard alone (profiles,
// memory, batch), then stops it.
func (b *bench) runSwitchyardPhases(sy *system, maxConc int) {
	ctx, o, r := b.ctx, b.o, b.r
	syProc := sy.proc
	switch {
	case syProc == nil || sy.skip != "":
		r.batch = batchResult{Skip: "not run: switchyard did not run"}
		return
	case !o.phases["profiles"] && !o.phases["memory"] && !o.phases["batch"]:
		syProc.stop()
		r.batch = batchResult{Skip: "not run: left out with -phases"}
		return
	}
	if o.phases["profiles"] {
		r.profiles = append(r.profiles, runProfiles(ctx, o, sy, b.pprofPort, b.tmp)...)
	}
	if m, err := readMem(syProc.pid()); err == nil {
		r.memory = append(r.memory, memRow{"process of the latency, streaming and profile runs (non-streaming up to concurrency " + strconv.Itoa(maxConc) + ")", m, 0, 0})
	}
	if !o.phases["batch"] {
		r.batch = batchResult{Skip: "not run: left out with -phases"}
	} else if ok, why := probeBatches(ctx, fmt.Sprintf("http://127.0.0.1:%d", b.syPort), b.key); ok {
		r.batchImplemented = true
	} else {
		r.batch = batchNotRun(why)
		logf("batch: %s", r.batch.Skip)
	}
	syProc.stop()
	cfgFor := func(port int) string { return switchyardConfig(port, b.fakePort, b.pacedPort, b.fastPort) }
	if o.phases["memory"] {
		r.memory = append(r.memory, runMemory(ctx, o, sy, cfgFor, b.dataDir, b.tmp)...)
	}
	if r.batchImplemented {
		r.batch = runBatchPhase(ctx, o, cfgFor, b.dataDir, b.key, b.tmp)
	}
}

// doOneSimple is a single non-streaming request, as a smoke test.
func doOneSimple(ctx context.Context, s *system) (time.Duration, error) {
	res := s.round(ctx, 1, 1, 0)
	if res.errs > 0 {
		return 0, fmt.Errorf("%s", res.firstErr)
	}
	return res.lat[0], nil
}

// latencyCell is one system at one concurrency, over all rounds.
type latencyCell struct {
	lat      []time.Duration
	roundP50 []time.Duration
	wall     time.Duration
	errs     int
	firstErr string
	warmErrs int
	cpuTicks int64 // the gateway's CPU time over the measured rounds
}

// cpuPerRequest is the gateway's CPU time per measured request, in ms
// (NaN for direct).
func (c *latencyCell) cpuPerRequest(s *system) float64 {
	n := len(c.lat) + c.errs
	if s.proc == nil || n == 0 {
		return math.NaN()
	}
	return float64(c.cpuTicks) * 1000 / ticksPerSecond / float64(n)
}

// runLatency sends the same request sequence to every system in
// interleaved rounds (A B C D A B C D ...) at each concurrency.
func runLatency(ctx context.Context, o *options, systems []*system) map[string]map[int]*latencyCell {
	out := map[string]map[int]*latencyCell{}
	for _, s := range systems {
		out[s.name] = map[int]*latencyCell{}
	}
	for _, c := range o.conc {
		n := o.requestsFor(c)
		logf("latency: concurrency %d, %d rounds of %d requests per system", c, o.rounds, n)
		for _, s := range systems {
			if s.skip != "" {
				continue
			}
			out[s.name][c] = &latencyCell{}
			w := s.round(ctx, c, max(100, 4*c), 0) // warm-up, discarded
			out[s.name][c].warmErrs += w.errs
		}
		for round := range o.rounds {
			for _, s := range systems {
				if s.skip != "" || ctx.Err() != nil {
					continue
				}
				cell := out[s.name][c]
				// Re-warm the connections (a server may have closed idle
				// ones while the others ran); discarded.
				cell.warmErrs += s.round(ctx, c, c, round*7).errs
				var t0 int64
				if s.proc != nil {
					t0 = cpuTicks(s.proc.pid())
				}
				res := s.round(ctx, c, n, round*n)
				if s.proc != nil {
					cell.cpuTicks += cpuTicks(s.proc.pid()) - t0
				}
				cell.lat = append(cell.lat, res.lat...)
				cell.roundP50 = append(cell.roundP50, summarize(res.lat).P50)
				cell.wall += res.wall
				cell.errs += res.errs
				if cell.firstErr == "" {
					cell.firstErr = res.firstErr
				}
			}
		}
		for _, s := range systems {
			if cell := out[s.name][c]; cell != nil {
				sm := summarize(cell.lat)
				logf("  %-15s c=%-3d p50 %7.3f ms  p99 %7.3f ms  %8.0f req/s  CPU %6.3f ms/req  errors %d", s.name, c, ms(sm.P50), ms(sm.P99),
					float64(len(cell.lat))/cell.wall.Seconds(), cell.cpuPerRequest(s), cell.errs)
			}
		}
	}
	return out
}

// streamCell is one system's streams in one mode.
type streamCell struct {
	res      []streamResult
	errs     int
	firstErr string
}

type streamMode struct {
	name, desc string
	paced      bool
	perRound   int
}

func streamModes(o *options) []streamMode {
	return []streamMode{
		{"back-to-back", "200-chunk streams from the fake with no pause between chunks: the gap is the per-chunk cost of the path", false, o.burstStreams},
		{"paced", fmt.Sprintf("200-chunk streams from the fake with %s between chunks (a fast model's token rate)", o.chunkDelay), true, o.pacedStreams},
	}
}

func runStreaming(ctx context.Context, o *options, systems []*system) map[string]map[string]*streamCell {
	out := map[string]map[string]*streamCell{}
	for _, m := range streamModes(o) {
		out[m.name] = map[string]*streamCell{}
		logf("streaming (%s): %d rounds of %d streams per system, concurrency 1", m.name, o.streamRounds, m.perRound)
		for round := 0; round <= o.streamRounds; round++ {
			for _, s := range systems {
				if s.skip != "" || ctx.Err() != nil {
					continue
				}
				ep, body := s.burst, s.streamBody
				if m.paced {
					ep, body = s.paced, s.pacedStream
				}
				cell := out[m.name][s.name]
				if cell == nil {
					cell = &streamCell{}
					out[m.name][s.name] = cell
				}
				// The first stream of each round re-warms the connection;
				// round 0 is all warm-up.
				_, _ = doStream(ctx, s.client, ep, body)
				if round == 0 {
					continue
				}
				for range m.perRound {
					res, err := doStream(ctx, s.client, ep, body)
					if err != nil {
						cell.errs++
						if cell.firstErr == "" {
							cell.firstErr = err.Error()
						}
						continue
					}
					cell.res = append(cell.res, res)
				}
			}
		}
		for _, s := range systems {
			if cell := out[m.name][s.name]; cell != nil {
				t, g := streamStats(cell)
				logf("  %-15s %s: TTFB p50 %7.3f ms  mean gap %7.4f ms  errors %d", s.name, m.name, ms(t.P50), ms(g.Mean), cell.errs)
			}
		}
	}
	return out
}

func streamStats(c *streamCell) (ttfb, gap summary) {
	var t, g []time.Duration
	for _, r := range c.res {
		t = append(t, r.ttfb)
		g = append(g, r.gap)
	}
	return summarize(t), summarize(g)
}

// profileOut is a CPU profile's top lines.
type profileOut struct {
	system                string // switchyard or switchyard-grpc
	title, load, top, cum string
	parts                 []part
	total                 string
	err                   string
}

// runProfiles takes CPU profiles of a running switchyard (sy) under
// non-streaming load at concurrency 1 and 16 and under back-to-back
// streams.
func runProfiles(ctx context.Context, o *options, sy *system, pprofPort int, tmp string) []profileOut {
	var out []profileOut
	loads := []struct {
		name, title, load string
		run               func(ctx context.Context)
	}{
		{"chat-c1", chatC1, "one request at a time, the latency runs' requests", func(ctx context.Context) {
			for ctx.Err() == nil {
				sy.round(ctx, 1, 50, 0)
			}
		}},
		{"chat-c16", chatC16, "16 concurrent requests, the latency runs' requests", func(ctx context.Context) {
			for ctx.Err() == nil {
				sy.round(ctx, 16, 320, 0)
			}
		}},
		{"stream", "streaming", "4 concurrent back-to-back 200-chunk streams", func(ctx context.Context) {
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for ctx.Err() == nil {
						_, _ = doStream(ctx, sy.client, sy.burst, sy.streamBody)
					}
				})
			}
			wg.Wait()
		}},
	}
	for _, l := range loads {
		logf("profiling %s for %ds under %s load", sy.name, o.profileSecs, l.title)
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { l.run(lctx); close(done) }()
		time.Sleep(300 * time.Millisecond)
		file := filepath.Join(tmp, "cpu-"+sy.name+"-"+l.name+".pprof")
		err := fetch(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/cpu?seconds=%d", pprofPort, o.profileSecs), file)
		cancel()
		<-done
		p := profileOut{system: sy.name, title: l.title, load: l.load}
		if err != nil {
			p.err = err.Error()
		} else {
			p.top, p.cum = pprofTop(ctx, o, o.bin, file)
			p.parts, p.total = breakdown(ctx, o, o.bin, file)
		}
		out = append(out, p)
	}
	return out
}

func fetch(ctx context.Context, url, file string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profileMicro profiles the extproc request phase on the 8 MB body.
func profileMicro(ctx context.Context, o *options, tmp string) string {
	file := filepath.Join(tmp, "cpu-extproc-8mb.pprof")
	bin := filepath.Join(tmp, "extproc.test")
	logf("profiling BenchmarkRequestPhase/8MB")
	out, err := goTest(ctx, o.goBin, o.root, "test", "-run", "^$", "-bench", "^BenchmarkRequestPhase$/^8MB$",
		"-benchtime", "30x", "-cpuprofile", file, "-o", bin, "./extproc")
	if err != nil {
		return "profile failed: " + err.Error() + ": " + lastLines(out, 3)
	}
	top, _ := pprofTop(ctx, o, bin, file)
	return top
}

// memRow is a peak RSS reading.
type memRow struct {
	phase   string
	mem     memStatus
	streams int
	elapsed time.Duration
}

// runMemory starts a fresh switchyard per phase (VmHWM only ever grows) and
// reads its peak RSS after 1 and after 64 concurrent paced streams.
func runMemory(ctx context.Context, o *options, sy *system, cfgFor func(port int) string, dataDir, tmp string) []memRow {
	var rows []memRow
	for _, conc := range []int{1, 64} {
		if ctx.Err() != nil {
			break
		}
		port, _ := freePort()
		name := fmt.Sprintf("switchyard-mem-%d", conc)
		cfg := filepath.Join(tmp, name+".yaml")
		if err := os.WriteFile(cfg, []byte(cfgFor(port)), 0o644); err != nil {
			rows = append(rows, memRow{phase: fmt.Sprintf("%d concurrent streams: not run: %v", conc, err)})
			continue
		}
		p, err := startSwitchyard(ctx, o.bin, cfg, dataDir, tmp, name, port, 0)
		if err != nil {
			rows = append(rows, memRow{phase: fmt.Sprintf("%d concurrent streams: not run: %v", conc, err)})
			continue
		}
		idle, _ := readMem(p.pid())
		if conc == 1 {
			rows = append(rows, memRow{"fresh process, idle (after start)", idle, 0, 0})
		}
		ep := sy.paced
		ep.url = fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port)
		client := newClient(conc)
		perWorker := 3
		if conc == 1 {
			perWorker = 20
		}
		logf("memory: %d concurrent paced streams x %d on a fresh switchyard", conc, perWorker)
		var wg sync.WaitGroup
		var mu sync.Mutex
		errs := 0
		start := time.Now()
		for range conc {
			wg.Go(func() {
				for range perWorker {
					if _, err := doStream(ctx, client, ep, sy.pacedStream); err != nil {
						mu.Lock()
						errs++
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		m, err := readMem(p.pid())
		phase := fmt.Sprintf("%d concurrent stream(s), %d paced 200-chunk streams in all", conc, conc*perWorker)
		if errs > 0 {
			phase += fmt.Sprintf(" (%d failed)", errs)
		}
		if err != nil {
			phase += ": " + err.Error()
		}
		rows = append(rows, memRow{phase, m, conc * perWorker, el})
		logf("  VmHWM %.1f MiB (idle %.1f MiB) after %s", float64(m.HWM)/1024, float64(idle.HWM)/1024, el.Round(time.Millisecond))
		p.stop()
	}
	return rows
}

// runBatchPhase runs the batch on a fresh switchyard, once /v1/batches exists.
func runBatchPhase(ctx context.Context, o *options, cfgFor func(port int) string, dataDir, key, tmp string) batchResult {
	port, _ := freePort()
	cfg := filepath.Join(tmp, "switchyard-batch.yaml")
	if err := os.WriteFile(cfg, []byte(cfgFor(port)), 0o644); err != nil {
		return batchResult{Ran: true, Status: "failed: " + err.Error()}
	}
	p, err := startSwitchyard(ctx, o.bin, cfg, dataDir, tmp, "switchyard-batch", port, 0)
	if err != nil {
		return batchResult{Ran: true, Status: "failed: switchyard did not start: " + err.Error()}
	}
	defer p.stop()
	logf("batch: %d lines through /v1/batches", batchLines)
	return runBatch(ctx, fmt.Sprintf("http://127.0.0.1:%d", port), key, p, tmp)
}
