package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The hot-path microbenchmarks are the packages' own Benchmark functions,
// run with go test -bench -benchmem and parsed here.

type microSpec struct {
	pkg   string
	regex string
	what  string
}

var microSpecs = []microSpec{
	{"./extproc", "^(BenchmarkRequestPhase|BenchmarkRequestBody|BenchmarkSSEChunk)$",
		"extproc: request phase (headers: auth; body: parse, validate, route, rewrite) and the body phase alone; per SSE chunk of the response"},
	{"./internal/sse", "^BenchmarkFeed$", "sse: splitting one chunk into events"},
	{"./internal/keys", "^BenchmarkCacheLookup$", "keys: hot-path key lookup (LRU hit)"},
	{"./envoy/dataplane", "^(BenchmarkProxyPassthrough|BenchmarkProxyExtProc)$", "dataplane: a 1 KiB request through the proxy alone, and with the ext_proc round trips (in-process, parallel)"},
	{"./internal/inprocgrpc", "^BenchmarkProcessExchange$", "inprocgrpc: one ext_proc stream of 5 request-headers exchanges, over loopback TCP gRPC and on the in-process channel"},
	{"./ratelimit", "^BenchmarkShouldRateLimit$", "ratelimit: one admission call (requests and tokens descriptors), for a key on its tier's limits and for one with limits of its own"},
	{"./e2e", "^(BenchmarkGatewayChat|BenchmarkGatewayStream)$", "e2e: one chat completion at a time through the whole in-process gateway (data plane, extproc, rate limits, access log) to a fake that answers at once, with the in-process channel and with loopback gRPC (cpu-ns/op: the process's CPU time per request, client and fake included); and one 256-chunk stream at a time, each chunk relayed on its own (allocs/chunk: heap allocations per relayed SSE chunk)"},
}

type microResult struct {
	Pkg, Name   string
	NsOp        float64
	MBs         float64
	BOp, Allocs float64
	Messages    float64 // the "messages" metric, when the benchmark reports it
	CPUNsOp     float64 // the "cpu-ns/op" metric (process CPU time per op)
	// AllocsChunk is the "allocs/chunk" metric (NaN: not reported). It is
	// the difference between two stream lengths, so noise can make it
	// slightly negative: no allocation per chunk.
	AllocsChunk float64
	Iter        int64
}

// runMicro runs every spec; a failing package is reported, not fatal.
func runMicro(ctx context.Context, goBin, root string) (res []microResult, cmds []string, failures []string) {
	for _, s := range microSpecs {
		args := []string{"test", "-run", "^$", "-bench", s.regex, "-benchmem", "-count", "1", "-benchtime", "1s", s.pkg}
		cmds = append(cmds, goBin+" "+shellJoin(args))
		logf("go %s", strings.Join(args, " "))
		out, err := goTest(ctx, goBin, root, args...)
		parsed := parseBench(s.pkg, out)
		if err != nil || len(parsed) == 0 {
			failures = append(failures, fmt.Sprintf("%s: %v: %s", s.pkg, err, lastLines(out, 5)))
		}
		res = append(res, parsed...)
	}
	return res, cmds, failures
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " ^$|()*") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// parseBench reads `go test -bench` output lines such as
// "BenchmarkFeed-2   1000000   1043 ns/op   150.2 MB/s   0 B/op   0 allocs/op".
func parseBench(pkg, out string) []microResult {
	var res []microResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		it, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		r := microResult{Pkg: pkg, Name: trimProcs(f[0]), Iter: it, AllocsChunk: math.NaN()}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.NsOp = v
			case "MB/s":
				r.MBs = v
			case "B/op":
				r.BOp = v
			case "allocs/op":
				r.Allocs = v
			case "messages":
				r.Messages = v
			case "cpu-ns/op":
				r.CPUNsOp = v
			case "allocs/chunk":
				r.AllocsChunk = v
			}
		}
		res = append(res, r)
	}
	return res
}

// trimProcs drops the -GOMAXPROCS suffix of a benchmark name.
func trimProcs(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			return name[:i]
		}
	}
	return name
}

func findMicro(res []microResult, name string) (microResult, bool) {
	for _, r := range res {
		if r.Name == name {
			return r, true
		}
	}
	return microResult{}, false
}

// goTest runs go test, retrying a few times when the package does not build:
// other people edit the tree while the benchmark runs, and a half-saved
// change should not cost the run its microbenchmarks.
func goTest(ctx context.Context, goBin, root string, args ...string) (string, error) {
	var out string
	var err error
	for attempt := 1; ; attempt++ {
		out, err = output(ctx, root, nil, goBin, args...)
		if err == nil || attempt == 4 || ctx.Err() != nil ||
			!(strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]")) {
			return out, err
		}
		logf("go test: the package does not build right now (%s); retrying in 20s", lastLines(out, 1))
		select {
		case <-ctx.Done():
			return out, err
		case <-time.After(20 * time.Second):
		}
	}
}
