package main

import (
	"os"
	"runtime/debug"
)

// Garbage collector defaults for the serving subcommands (run, extproc,
// backends): each request allocates short-lived protobuf messages and
// buffers, and at Go's default GOGC=100 the collector took about a fifth of
// the CPU of a 50,000-line batch (pprof of `switchyard run`). A larger GOGC
// collects less often, and a soft memory limit keeps that from growing the
// heap without bound: near the limit the collector runs as often as it must.
// GOGC and GOMEMLIMIT in the environment win, as the runtime documents.
const (
	defaultGCPercent   = 400
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
