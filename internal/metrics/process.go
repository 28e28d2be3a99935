package metrics

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WriteProcess writes the Go runtime and process metrics under the names
// Prometheus' client libraries use (go_*, process_*), so the usual
// dashboards and alerts for Go services apply. The process_* families
// come from /proc/self and are left out where there is none.
func WriteProcess(w io.Writer) error {
	var b strings.Builder
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s %s\n", name, help, name, name, strconv.FormatFloat(v, 'g', -1, 64))
	}
	fmt.Fprintf(&b, "# HELP go_info Information about the Go environment.\n# TYPE go_info gauge\ngo_info{version=%q} 1\n", runtime.Version())
	samples := []metrics.Sample{
		{Name: "/sched/goroutines:goroutines"},
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/heap/goal:bytes"},
		{Name: "/sched/gomaxprocs:threads"},
	}
	metrics.Read(samples)
	val := func(i int) float64 {
		switch samples[i].Value.Kind() {
		case metrics.KindUint64:
			return float64(samples[i].Value.Uint64())
		case metrics.KindFloat64:
			return samples[i].Value.Float64()
		}
		return 0
	}
	gauge("go_goroutines", "Number of goroutines that currently exist.", val(0))
	counter("go_gc_cycles_total", "Completed GC cycles.", val(1))
	gauge("go_memstats_heap_alloc_bytes", "Bytes of allocated heap objects.", val(2))
	gauge("go_memstats_sys_bytes", "Bytes of memory obtained from the OS by the Go runtime.", val(3))
	counter("go_memstats_alloc_bytes_total", "Bytes allocated in the heap, ever.", val(4))
	gauge("go_gc_heap_goal_bytes", "Heap size target for the end of the GC cycle.", val(5))
	gauge("go_sched_gomaxprocs_threads", "GOMAXPROCS: threads that can run Go code at once.", val(6))
	gauge("go_threads", "Number of OS threads created.", float64(threadCount()))

	if p, ok := readProc(); ok {
		counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", p.cpuSeconds)
		gauge("process_resident_memory_bytes", "Resident memory size in bytes.", p.rss)
		gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", p.vsize)
		gauge("process_open_fds", "Number of open file descriptors.", p.openFDs)
		if p.maxFDs > 0 {
			gauge("process_max_fds", "Maximum number of open file descriptors.", p.maxFDs)
		}
		gauge("process_start_time_seconds", "Start time of the process since the Unix epoch in seconds.", p.start)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func threadCount() int {
	n, _ := runtime.ThreadCreateProfile(nil)
	return n
}

type procStats struct {
	cpuSeconds, rss, vsize, openFDs, maxFDs, start float64
}

// Clock ticks per second of /proc's times: USER_HZ is 100 on every Linux
// architecture Go supports.
const userHZ = 100

var bootTime = sync.OnceValue(func() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
})

// readProc reads the process figures from /proc/self (Linux).
func readProc() (procStats, bool) {
	var p procStats
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return p, false
	}
	// The command name (field 2) is parenthesised and may hold spaces:
	// fields are counted from after its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return p, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime 14, stime 15, starttime 22, vsize 23, rss 24.
	if len(f) < 22 {
		return p, false
	}
	num := func(field int) float64 { v, _ := strconv.ParseFloat(f[field-3], 64); return v }
	p.cpuSeconds = (num(14) + num(15)) / userHZ
	p.vsize = num(23)
	p.rss = num(24) * float64(os.Getpagesize())
	if bt := bootTime(); bt > 0 {
		p.start = bt + num(22)/userHZ
	} else {
		p.start = float64(processStart.Unix())
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		p.openFDs = float64(len(ents))
	}
	if lim, err := os.ReadFile("/proc/self/limits"); err == nil {
		for line := range strings.Lines(string(lim)) {
			if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
				if fs := strings.Fields(rest); len(fs) > 0 {
					p.maxFDs, _ = strconv.ParseFloat(fs[0], 64)
				}
			}
		}
	}
	return p, true
}

// processStart stands in for the start time when /proc/stat is unreadable.
var processStart = time.Now()
