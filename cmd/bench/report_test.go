package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// syntheticReport is a report of made-up measurements: every gateway
// measured at each concurrency and in both stream modes, direct at 2 ms and
// each gateway a fixed amount above it.
func syntheticReport(conc []int, skip map[string]string) *report {
	o := &options{conc: conc, rounds: 2, requests: 10, streamRounds: 2, burstStreams: 2, pacedStreams: 2,
		chunkDelay: time.Millisecond, serviceTime: 2 * time.Millisecond, skipMicro: true}
	r := &report{opts: o, started: time.Now(), latency: map[string]map[int]*latencyCell{},
		streams: map[string]map[string]*streamCell{}}
	extra := map[string]time.Duration{"direct": 0, "nginx": 100 * time.Microsecond, "portkey": 3 * time.Millisecond,
		"switchyard": 300 * time.Microsecond, "switchyard-grpc": 700 * time.Microsecond}
	for _, m := range streamModes(o) {
		r.streams[m.name] = map[string]*streamCell{}
	}
	for _, name := range append([]string{"direct"}, gateways...) {
		s := &system{name: name, skip: skip[name]}
		r.systems = append(r.systems, s)
		if s.skip != "" {
			continue
		}
		r.latency[name] = map[int]*latencyCell{}
		for _, c := range conc {
			d := 2*time.Millisecond + extra[name]
			r.latency[name][c] = &latencyCell{lat: []time.Duration{d, d, d}, roundP50: []time.Duration{d, d}, wall: time.Second}
		}
		for _, m := range streamModes(o) {
			t := 2*time.Millisecond + extra[name]
			r.streams[m.name][name] = &streamCell{res: []streamResult{{ttfb: t, gap: time.Millisecond, total: 10 * t, events: 203}}}
		}
	}
	return r
}

func renderTargets(r *report) string {
	var b strings.Builder
	r.writeTargets(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	return b.String()
}

// TestTargetsSwitchyardGRPC checks the switchyard-grpc lines of the Targets
// section: one per concurrency ≤ 16 and percentile, and one per stream
// mode, with its own figures and a verdict, after switchyard's.
func TestTargetsSwitchyardGRPC(t *testing.T) {
	r := syntheticReport([]int{1, 16, 64}, nil)
	out := renderTargets(r)
	for _, want := range []string{
		"- p50 added ≤ 0.5 ms at concurrency 1: **met** — 0.300 ms, by 0.200 ms",
		"- " + grpcLabel + ", p50 added ≤ 0.5 ms at concurrency 1: **missed** — 0.700 ms, by 0.200 ms",
		"- " + grpcLabel + ", p99 added ≤ 1.0 ms at concurrency 16: **met** — 0.700 ms, by 0.300 ms",
		"- " + grpcLabel + ", back-to-back, added TTFB p50 ≤ 1 ms: **met** — 0.700 ms, by 0.300 ms",
		"- " + grpcLabel + ", paced, added TTFB p50 ≤ 1 ms: **met** — 0.700 ms, by 0.300 ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets lack %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "- "+grpcLabel+", p50 added") + strings.Count(out, "- "+grpcLabel+", p99 added"); n != 4 {
		t.Errorf("%d switchyard-grpc latency lines, want 4 (concurrency 1 and 16, p50 and p99)", n)
	}
	// The added-latency targets are for concurrency ≤ 16; concurrency 64
	// has only the performance issue's p99 ≤ 10 ms line.
	if strings.Contains(out, "ms at concurrency 64:") {
		t.Errorf("an added-latency target line for concurrency 64:\n%s", out)
	}
	for _, want := range []string{
		"**CPU per request (the performance issue)**",
		"- switchyard, added p99 at concurrency 64 ≤ 10 ms, no errors: **met**",
		"- added p50 at concurrency 1, in process ≤ 0.25 ms: **missed** — 0.300 ms, by 0.050 ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets lack %q:\n%s", want, out)
		}
	}
	if i, j := strings.Index(out, "- p50 added"), strings.Index(out, "- "+grpcLabel); i < 0 || j < i {
		t.Errorf("switchyard-grpc lines do not follow switchyard's")
	}
	if strings.Contains(out, "NaN") {
		t.Errorf("NaN in targets:\n%s", out)
	}

	r = syntheticReport([]int{1}, map[string]string{"switchyard-grpc": "not run: left out with -systems"})
	out = renderTargets(r)
	for _, want := range []string{
		"- " + grpcLabel + ", p50 ≤ 0.5 ms at concurrency 1: **not evaluated** (switchyard-grpc not run: left out with -systems)",
		"- " + grpcLabel + ", paced, added TTFB p50 ≤ 1 ms: **not evaluated** (switchyard-grpc not run: left out with -systems)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("targets lack %q:\n%s", want, out)
		}
	}
}

// TestSVGFourGateways checks that the plot has a bar per gateway and
// concurrency, each gateway in its own colour and in the legend.
func TestSVGFourGateways(t *testing.T) {
	r := syntheticReport([]int{1, 16, 64}, nil)
	svg := r.svg()
	colors := map[string]bool{}
	for _, name := range gateways {
		c := seriesColors[name]
		if c == "" || colors[c] {
			t.Errorf("%s has no colour of its own (%q)", name, c)
		}
		colors[c] = true
		if n := strings.Count(svg, `fill="`+c+`"><title>`+name+" "); n != 2*3 {
			t.Errorf("%s: %d bars, want 6", name, n)
		}
		if !strings.Contains(svg, `font-size="13">`+name+"</text>") {
			t.Errorf("%s not in the legend", name)
		}
	}
	if strings.Contains(svg, "NaN") {
		t.Error("NaN in the SVG")
	}
}

// The microbenchmarks name packages by path: every one must exist, or
// make bench reports a failure instead of a number.
func TestMicroSpecPackagesExist(t *testing.T) {
	for _, s := range microSpecs {
		if _, err := os.Stat(filepath.Join("../..", s.pkg)); err != nil {
			t.Errorf("microbenchmark package %s: %v", s.pkg, err)
		}
	}
}

func TestCompareFigures(t *testing.T) {
	before := []figure{
		{Name: "added p50", Value: 0.40, Unit: "ms"},
		{Name: "rps", Value: 5000, Unit: "req/s", Higher: true},
		{Name: "allocs", Value: 0, Unit: "allocs/op"},
		{Name: "steady", Value: 10, Unit: "ms"},
		{Name: "gone", Value: 1, Unit: "ms"},
	}
	now := []figure{
		{Name: "added p50", Value: 0.50, Unit: "ms"},            // 25% worse: flagged
		{Name: "rps", Value: 3900, Unit: "req/s", Higher: true}, // 22% worse: flagged
		{Name: "allocs", Value: 2, Unit: "allocs/op"},           // from none: flagged
		{Name: "steady", Value: 11.9, Unit: "ms"},               // 19% worse: not flagged
		{Name: "new", Value: 100, Unit: "ms"},                   // not compared
	}
	regs := compareFigures(before, now)
	var names []string
	for _, g := range regs {
		names = append(names, g.Name)
	}
	if got, want := strings.Join(names, ","), "allocs,added p50,rps"; got != want {
		t.Errorf("flagged %q, want %q (worst first)", got, want)
	}
	if len(compareFigures(nil, now)) != 0 {
		t.Error("flagged figures without an earlier run")
	}
}

func TestFiguresRoundTrip(t *testing.T) {
	r := syntheticReport([]int{1, 16}, nil)
	fs := r.figures()
	if len(fs) == 0 {
		t.Fatal("no figures from a report with measurements")
	}
	path := filepath.Join(t.TempDir(), "benchmarks.json")
	if err := writeFigures(path, fs); err != nil {
		t.Fatal(err)
	}
	back, err := readFigures(path)
	if err != nil || len(back) != len(fs) {
		t.Fatalf("read back %d figures (%v), wrote %d", len(back), err, len(fs))
	}
	if regs := compareFigures(back, fs); len(regs) != 0 {
		t.Errorf("a run compared with itself flagged %v", regs)
	}
}

func TestHandNotes(t *testing.T) {
	doc := "# Benchmarks\n\n## Compared\n\n" + notesBegin + "\n## Notes\n\nwhat changed\n" + notesEnd + "\n\n## CPU profiles\n"
	if got, want := handNotes(doc), notesBegin+"\n## Notes\n\nwhat changed\n"+notesEnd; got != want {
		t.Errorf("handNotes = %q, want %q", got, want)
	}
	for _, d := range []string{"# Benchmarks\n", notesBegin + "\nunterminated"} {
		if got := handNotes(d); got != "" {
			t.Errorf("handNotes(%q) = %q, want none", d, got)
		}
	}
}
