package main

import (
	"context"
	"strconv"
	"strings"
)

// pprofTop returns `go tool pprof -top` by flat and by cumulative time.
func pprofTop(ctx context.Context, o *options, bin, file string) (top, cum string) {
	run := func(extra ...string) string {
		args := append([]string{"tool", "pprof", "-top"}, extra...)
		args = append(args, bin, file)
		out, err := output(ctx, o.root, nil, o.goBin, args...)
		if err != nil {
			return "pprof failed: " + err.Error() + ": " + lastLines(out, 3)
		}
		return trimPprof(out)
	}
	return run("-nodecount=15"), run("-cum", "-nodecount=25")
}

// trimPprof keeps the summary and table of pprof -top output.
func trimPprof(out string) string {
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, strings.TrimRight(l, " "))
	}
	return strings.TrimSpace(strings.Join(keep, "\n"))
}

// part is one component's share of a profile's samples.
type part struct {
	label string
	pct   float64 // cumulative (or, for syscalls, flat) percent of all samples
	fn    string  // the function it was read from
}

// components are where Switchyard's CPU goes, each read as the cumulative
// share of the named function (flat for the syscall leaf). Components
// nest (ext_proc client calls are inside the data plane's request
// handling), so shares do not add up to 100%.
var components = []struct {
	label, fn string
	flat      bool
}{
	{"data plane: client connection and request handling (until the response is sent)", "net/http.(*conn).serve", false},
	{"data plane: ext_proc filter round trips (inside the above; in process this is the ext_proc work itself)", dp + "(*processor).call", false},
	{"data plane: stream-done work after the response (token charge, access log)", dp + "(*DataPlane).runStreamDone", false},
	{"data plane: token charge at the end (rate limit call)", dp + "(*requestState).rateLimitStreamDone", false},
	{"data plane: access log", dp + "(*requestState).logAccess", false},
	{"data plane: upstream HTTP/1.1 round trip (the pool's, on the request's goroutine; inside the first line)", dp + "(*http1Pool).RoundTrip", false},
	{"data plane: upstream connection reads (net/http client: h2 and ALPN clusters)", "net/http.(*persistConn).readLoop", false},
	{"data plane: upstream connection writes (net/http client: h2 and ALPN clusters)", "net/http.(*persistConn).writeLoop", false},
	{"extproc: the ext_proc session's message handling (all phases)", "github.com/switchyard-ai/switchyard/extproc.(*Session).Handle", false},
	{"extproc server: the gRPC Process stream (all phases, gRPC receive and send included)", "github.com/switchyard-ai/switchyard/extproc.(*Server).Process", false},
	{"rate limiting: extproc's admission call", "github.com/switchyard-ai/switchyard/extproc.(*stream).admit", false},
	{"rate limiting: the embedded rate limit service", "github.com/switchyard-ai/switchyard/ratelimit.(*Server).ShouldRateLimit", false},
	{"gRPC transport: the ext_proc server's frame writer goroutine (grpc-go's loopyWriter)", "google.golang.org/grpc/internal/transport.(*loopyWriter).run", false},
	{"gRPC transport: the data plane's client frame reader (h2grpc)", "github.com/switchyard-ai/switchyard/internal/h2grpc.(*conn).read", false},
	{"gRPC transport: server frame reader", "google.golang.org/grpc/internal/transport.(*http2Server).HandleStreams", false},
	{"garbage collector (background mark)", "runtime.gcBgMarkWorker", false},
	{"Go scheduler: looking for work (runtime.findRunnable, incl. spinning)", "runtime.findRunnable", false},
	{"Go scheduler: futex sleeps and wake-ups (flat)", "runtime.futex", true},
	{"socket syscalls (flat time in the syscall itself)", "internal/runtime/syscall/linux.Syscall6", true},
}

// dp is the data plane's package path, as pprof names its functions.
const dp = "github.com/switchyard-ai/switchyard/envoy/dataplane."

// breakdown reads the components' shares from the whole cumulative table.
func breakdown(ctx context.Context, o *options, bin, file string) ([]part, string) {
	out, err := output(ctx, o.root, nil, o.goBin, "tool", "pprof", "-top", "-cum", "-nodecount=100000", bin, file)
	if err != nil {
		return nil, ""
	}
	flat, cum := map[string]float64{}, map[string]float64{}
	total := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Duration:") {
			total = strings.TrimSpace(l)
		}
		f := strings.Fields(l)
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") || !strings.HasSuffix(f[4], "%") {
			continue
		}
		name := strings.Join(f[5:], " ")
		name = strings.TrimSuffix(name, " (inline)")
		fp, err1 := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		cp, err2 := strconv.ParseFloat(strings.TrimSuffix(f[4], "%"), 64)
		if err1 != nil || err2 != nil {
			continue
		}
		flat[name] += fp
		cum[name] = max(cum[name], cp)
	}
	var parts []part
	for _, c := range components {
		v, ok := cum[c.fn]
		if c.flat {
			v, ok = flat[c.fn]
		}
		if ok {
			parts = append(parts, part{c.label, v, c.fn})
		}
	}
	return parts, total
}
