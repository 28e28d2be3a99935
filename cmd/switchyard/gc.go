package main

import (
	"os"
	"runtime/debug"
)

// Garbage collector defaults for the serving subcommands (run, extproc,
// backends): each request allocates short-lived protobuf messages and
// buffers, and at Go's default GOGC=100 the collector took about a fifth of
// the CPU of a 50,000-line batch (pprof of `switchyard run`). A larger GOGC
// collects less often, but the heap then peaks at (1 + GOGC/100) times the
// live heap between collections, and that peak is the process's RSS.
// Measured with cmd/bench (gateway CPU per request at concurrency 16 from
// /proc/<pid>/stat, and VmHWM after 64 concurrent paced 200-chunk streams;
// means of 3 to 9 runs on a shared 2-core machine, where CPU figures move by
// about 0.03 ms): GOGC=400 0.261 ms, 98.8 MiB (up to 101.2); 300 0.281 ms,
// 94.6 MiB; 250 0.247 ms, 89.8 MiB (up to 96.2); 200 0.291 ms, 80.7 MiB (up
// to 83.5); 100 0.363 ms, 75 MiB. 200 keeps 64 streams under 100 MB in every
// run for a CPU cost within that noise; 250 did not always. The soft memory
// limit keeps the heap from growing without bound: near it the collector
// runs as often as it must; it never came into play in those runs.
// GOGC and GOMEMLIMIT in the environment win, as the runtime documents.
const (
	defaultGCPercent   = 200
	defaultMemoryLimit = 1 << 30 // bytes; a soft limit, not a cap
)

func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(defaultGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(defaultMemoryLimit)
	}
}
