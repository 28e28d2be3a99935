package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// figure is one number make bench keeps (docs/benchmarks.json) so that the
// next run can compare itself with the last committed one.
type figure struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	// Higher: a larger value is better (throughput); otherwise smaller is.
	Higher bool `json:"higher_is_better,omitempty"`
}

// regressionLimit is how much worse than the last committed run a figure
// may be before it is flagged.
const regressionLimit = 0.20

// figures collects the run's comparable numbers: switchyard's added latency
// and throughput, its CPU per request, the streaming TTFB it adds, batch
// throughput, peak memory and the microbenchmarks' time and allocations.
func (r *report) figures() []figure {
	var fs []figure
	add := func(name string, v float64, unit string, higher bool) {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			fs = append(fs, figure{Name: name, Value: v, Unit: unit, Higher: higher})
		}
	}
	for _, name := range []string{"switchyard", "switchyard-grpc"} {
		for _, c := range r.opts.conc {
			for _, pct := range []float64{50, 99} {
				add(fmt.Sprintf("%s added latency p%.0f, concurrency %d", name, pct, c), r.added(name, c, pct), "ms", false)
			}
			cell := r.latency[name][c]
			if cell == nil || cell.wall <= 0 || len(cell.lat) == 0 {
				continue
			}
			add(fmt.Sprintf("%s throughput, concurrency %d", name, c), float64(len(cell.lat))/cell.wall.Seconds(), "req/s", true)
			add(fmt.Sprintf("%s CPU per request, concurrency %d", name, c), cell.cpuPerRequest(r.sys(name)), "ms", false)
		}
	}
	for _, name := range []string{"switchyard", "switchyard-grpc"} {
		if cell := r.throughput[name]; cell != nil {
			add(fmt.Sprintf("%s throughput, fast upstream, concurrency %d", name, throughputConc), cell.rps(), "req/s", true)
			add(fmt.Sprintf("%s CPU per request, fast upstream, concurrency %d", name, throughputConc), cell.cpuPerRequest(r.sys(name)), "ms", false)
		}
	}
	if r.batch.Ran {
		add("batch lines per second", r.batch.LinesPerSec, "lines/s", true)
		add("batch peak RSS", float64(r.batch.PeakRSSKiB)/1024, "MiB", false)
	}
	for _, m := range r.memory {
		add(fmt.Sprintf("peak RSS, %s", m.phase), float64(m.mem.HWM)/1024, "MiB", false)
	}
	fs = append(fs, r.storage.figures()...)
	for _, m := range r.micro {
		add(fmt.Sprintf("micro %s %s time", m.Pkg, m.Name), m.NsOp, "ns/op", false)
		add(fmt.Sprintf("micro %s %s allocations", m.Pkg, m.Name), m.Allocs, "allocs/op", false)
	}
	return fs
}

// regression is a figure worse than before by more than regressionLimit.
type regression struct {
	figure
	Before float64
	Worse  float64 // the fraction worse: 0.25 is 25% worse
}

// compareFigures returns the figures of now that are more than the limit
// worse than the same figure in before, worst first. Figures only one run
// has are not compared; a zero before is compared only when now is not.
func compareFigures(before, now []figure) []regression {
	prev := make(map[string]figure, len(before))
	for _, f := range before {
		prev[f.Name] = f
	}
	var out []regression
	for _, f := range now {
		p, ok := prev[f.Name]
		if !ok || p.Unit != f.Unit {
			continue
		}
		var worse float64
		switch {
		case f.Higher && p.Value > 0:
			worse = (p.Value - f.Value) / p.Value
		case !f.Higher && p.Value > 0:
			worse = (f.Value - p.Value) / p.Value
		case !f.Higher && p.Value <= 0 && f.Value > 0:
			// From nothing to something (allocations appearing): always
			// worth a look, whatever the ratio.
			worse = math.Inf(1)
		}
		if worse > regressionLimit {
			out = append(out, regression{figure: f, Before: p.Value, Worse: worse})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Worse > out[j].Worse })
	return out
}

// figuresPath is where the figures beside the report are kept.
func figuresPath(out string) string { return strings.TrimSuffix(out, ".md") + ".json" }

// committedFigures reads the figures of the last committed run: the file
// as HEAD has it (a run not committed yet may have rewritten the working
// copy), else the working copy.
func committedFigures(root, path string) ([]figure, error) {
	rel, err := filepath.Rel(root, path)
	if err == nil {
		cmd := exec.Command("git", "show", "HEAD:"+filepath.ToSlash(rel))
		cmd.Dir = root
		if b, err := cmd.Output(); err == nil {
			return parseFigures(path, b)
		}
	}
	return readFigures(path)
}

func readFigures(path string) ([]figure, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return parseFigures(path, b)
}

func parseFigures(path string, b []byte) ([]figure, error) {
	var fs []figure
	if err := json.Unmarshal(b, &fs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fs, nil
}

func writeFigures(path string, fs []figure) error {
	b, err := json.MarshalIndent(fs, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// writeRegressions is the report's comparison with the last committed run.
func writeRegressions(w func(string, ...any), before []figure, regs []regression) {
	w("## Compared with the last committed run\n\n")
	switch {
	case len(before) == 0:
		w("No earlier figures (`docs/benchmarks.json`): nothing to compare with.\n\n")
		return
	case len(regs) == 0:
		w("No figure is more than %.0f%% worse than in the last committed run.\n\n", regressionLimit*100)
		return
	}
	w("**%d figure(s) more than %.0f%% worse than in the last committed run** (machine noise moves latency figures too: compare with nginx's row of the same run before acting):\n\n", len(regs), regressionLimit*100)
	w("| figure | before | now | worse by |\n|---|---:|---:|---:|\n")
	for _, g := range regs {
		by := "new"
		if !math.IsInf(g.Worse, 1) {
			by = fmt.Sprintf("%.0f%%", g.Worse*100)
		}
		w("| %s | %.3f %s | %.3f %s | %s |\n", mdEscape(g.Name), g.Before, g.Unit, g.Value, g.Unit, by)
	}
	w("\n")
}
