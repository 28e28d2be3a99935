// Package metrics owns Switchyard's Prometheus metrics: lock-free counter
// and histogram families written in the Prometheus text format, and the
// request metrics the data plane records for every request (performance
// monitoring: rates, latencies, tokens, by model, provider and status).
// They carry ids and counts only, never request or response content.
package metrics

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// CounterVec is a monotonic counter with labels.
type CounterVec struct {
	name, help string
	labels     []string
	m          sync.Map // joined label values -> *atomic.Uint64
}

// NewCounterVec returns a counter family; label names are fixed here and
// values are given, in the same order, to Inc.
func NewCounterVec(name, help string, labels ...string) *CounterVec {
	return &CounterVec{name: name, help: help, labels: labels}
}

// Inc adds one to the counter with the given label values.
func (c *CounterVec) Inc(values ...string) { c.Add(1, values...) }

// Add adds n to the counter with the given label values.
func (c *CounterVec) Add(n uint64, values ...string) {
	if c == nil {
		return
	}
	key := strings.Join(values, "\x00")
	v, ok := c.m.Load(key)
	if !ok {
		v, _ = c.m.LoadOrStore(key, new(atomic.Uint64))
	}
	v.(*atomic.Uint64).Add(n)
}

// Value returns the counter with the given label values.
func (c *CounterVec) Value(values ...string) uint64 {
	if c == nil {
		return 0
	}
	if v, ok := c.m.Load(strings.Join(values, "\x00")); ok {
		return v.(*atomic.Uint64).Load()
	}
	return 0
}

// WritePrometheus writes the family, one line per label set, sorted.
func (c *CounterVec) WritePrometheus(w io.Writer) error {
	if c == nil {
		return nil
	}
	var lines []string
	c.m.Range(func(k, v any) bool {
		lines = append(lines, c.name+labelSet(c.labels, k.(string), "", "")+" "+strconv.FormatUint(v.(*atomic.Uint64).Load(), 10)+"\n")
		return true
	})
	return writeFamily(w, c.name, c.help, "counter", lines)
}

// HistogramVec is a histogram with labels and fixed bucket bounds.
type HistogramVec struct {
	name, help string
	labels     []string
	bounds     []float64 // upper bounds, ascending; +Inf is implicit
	m          sync.Map  // joined label values -> *histogram
}

type histogram struct {
	counts []atomic.Uint64 // per bucket (not cumulative), then +Inf
	sum    atomic.Uint64   // float64 bits
	count  atomic.Uint64
}

// NewHistogramVec returns a histogram family with the given bucket upper
// bounds (ascending).
func NewHistogramVec(name, help string, bounds []float64, labels ...string) *HistogramVec {
	return &HistogramVec{name: name, help: help, labels: labels, bounds: bounds}
}

// Observe records v for the given label values.
func (h *HistogramVec) Observe(v float64, values ...string) {
	if h == nil {
		return
	}
	key := strings.Join(values, "\x00")
	x, ok := h.m.Load(key)
	if !ok {
		x, _ = h.m.LoadOrStore(key, &histogram{counts: make([]atomic.Uint64, len(h.bounds)+1)})
	}
	hist := x.(*histogram)
	i, _ := slices.BinarySearch(h.bounds, v) // first bound >= v: buckets are le
	hist.counts[i].Add(1)
	hist.count.Add(1)
	for {
		old := hist.sum.Load()
		if hist.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			break
		}
	}
}

// Count returns how many values were observed for the label values.
func (h *HistogramVec) Count(values ...string) uint64 {
	if x, ok := h.m.Load(strings.Join(values, "\x00")); ok {
		return x.(*histogram).count.Load()
	}
	return 0
}

// WritePrometheus writes the family: cumulative buckets, sum and count per
// label set.
func (h *HistogramVec) WritePrometheus(w io.Writer) error {
	if h == nil {
		return nil
	}
	var lines []string
	h.m.Range(func(k, x any) bool {
		hist := x.(*histogram)
		var b strings.Builder
		var cum uint64
		for i := range hist.counts {
			cum += hist.counts[i].Load()
			le := "+Inf"
			if i < len(h.bounds) {
				le = strconv.FormatFloat(h.bounds[i], 'g', -1, 64)
			}
			b.WriteString(h.name + "_bucket" + labelSet(h.labels, k.(string), "le", le) + " " + strconv.FormatUint(cum, 10) + "\n")
		}
		b.WriteString(h.name + "_sum" + labelSet(h.labels, k.(string), "", "") + " " +
			strconv.FormatFloat(math.Float64frombits(hist.sum.Load()), 'g', -1, 64) + "\n")
		b.WriteString(h.name + "_count" + labelSet(h.labels, k.(string), "", "") + " " + strconv.FormatUint(hist.count.Load(), 10) + "\n")
		lines = append(lines, b.String())
		return true
	})
	return writeFamily(w, h.name, h.help, "histogram", lines)
}

// labelSet renders {name="value",...}, with an extra label when extraName
// is set; "" when there are no labels at all.
func labelSet(names []string, joined, extraName, extraValue string) string {
	if len(names) == 0 && extraName == "" {
		return ""
	}
	values := strings.Split(joined, "\x00")
	var b strings.Builder
	b.WriteByte('{')
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		v := ""
		if i < len(values) {
			v = values[i]
		}
		fmt.Fprintf(&b, "%s=%q", name, v)
	}
	if extraName != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", extraName, extraValue)
	}
	b.WriteByte('}')
	return b.String()
}

func writeFamily(w io.Writer, name, help, typ string, lines []string) error {
	slices.Sort(lines)
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	for _, l := range lines {
		b.WriteString(l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteGauge writes a family of one unlabelled gauge.
func WriteGauge(w io.Writer, name, help string, v float64) error {
	return writeFamily(w, name, help, "gauge", []string{name + " " + strconv.FormatFloat(v, 'g', -1, 64) + "\n"})
}
