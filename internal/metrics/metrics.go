// Package metrics owns Switchyard's Prometheus metrics: lock-free counter
// and histogram families written in the Prometheus text format, and the
// request metrics the data plane records for every request (performance
// monitoring: rates, latencies, tokens, by model, provider and status).
// They carry ids and counts only, never request or response content.
package metrics

import (
	"fmt"
	"io"
	"maps"
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
	m          series[atomic.Uint64]
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
	c.m.get(values, func() *atomic.Uint64 { return new(atomic.Uint64) }).Add(n)
}

// Value returns the counter with the given label values.
func (c *CounterVec) Value(values ...string) uint64 {
	if c == nil {
		return 0
	}
	if v := c.m.lookup(values); v != nil {
		return v.Load()
	}
	return 0
}

// WritePrometheus writes the family, one line per label set, sorted.
func (c *CounterVec) WritePrometheus(w io.Writer) error {
	if c == nil {
		return nil
	}
	var lines []string
	for k, v := range c.m.all() {
		lines = append(lines, c.name+labelSet(c.labels, k, "", "")+" "+strconv.FormatUint(v.Load(), 10)+"\n")
	}
	return writeFamily(w, c.name, c.help, "counter", lines)
}

// HistogramVec is a histogram with labels and fixed bucket bounds.
type HistogramVec struct {
	name, help string
	labels     []string
	bounds     []float64 // upper bounds, ascending; +Inf is implicit
	m          series[histogram]
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
	hist := h.m.get(values, func() *histogram { return &histogram{counts: make([]atomic.Uint64, len(h.bounds)+1)} })
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
	if x := h.m.lookup(values); x != nil {
		return x.count.Load()
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
	for k, hist := range h.m.all() {
		var b strings.Builder
		var cum uint64
		for i := range hist.counts {
			cum += hist.counts[i].Load()
			le := "+Inf"
			if i < len(h.bounds) {
				le = strconv.FormatFloat(h.bounds[i], 'g', -1, 64)
			}
			b.WriteString(h.name + "_bucket" + labelSet(h.labels, k, "le", le) + " " + strconv.FormatUint(cum, 10) + "\n")
		}
		b.WriteString(h.name + "_sum" + labelSet(h.labels, k, "", "") + " " +
			strconv.FormatFloat(math.Float64frombits(hist.sum.Load()), 'g', -1, 64) + "\n")
		b.WriteString(h.name + "_count" + labelSet(h.labels, k, "", "") + " " + strconv.FormatUint(hist.count.Load(), 10) + "\n")
		lines = append(lines, b.String())
	}
	return writeFamily(w, h.name, h.help, "histogram", lines)
}

// series holds a family's series by their label values joined with NUL.
// The map is replaced, never changed, when a series is added (rarely: label
// values are few), so a lookup takes no lock, and the key it looks up is
// built on the stack: a map index by string(bytes) does not allocate. The
// data plane records about ten series on every request.
type series[T any] struct {
	mu sync.Mutex // serialises additions
	m  atomic.Pointer[map[string]*T]
}

// appendKey appends the label values joined with NUL.
func appendKey(b []byte, values []string) []byte {
	for i, v := range values {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, v...)
	}
	return b
}

// get returns the series of values, adding the one mk makes if there is none.
func (s *series[T]) get(values []string, mk func() *T) *T {
	var arr [128]byte
	key := appendKey(arr[:0], values)
	if m := s.m.Load(); m != nil {
		if v, ok := (*m)[string(key)]; ok {
			return v
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.m.Load()
	if old != nil {
		if v, ok := (*old)[string(key)]; ok {
			return v
		}
	}
	next := make(map[string]*T, 1+lenOf(old))
	if old != nil {
		maps.Copy(next, *old)
	}
	v := mk()
	next[string(key)] = v
	s.m.Store(&next)
	return v
}

func lenOf[T any](m *map[string]*T) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// lookup returns the series of values, nil if there is none.
func (s *series[T]) lookup(values []string) *T {
	var arr [128]byte
	if m := s.m.Load(); m != nil {
		return (*m)[string(appendKey(arr[:0], values))]
	}
	return nil
}

// all is every series by its joined key.
func (s *series[T]) all() map[string]*T {
	if m := s.m.Load(); m != nil {
		return *m
	}
	return nil
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
