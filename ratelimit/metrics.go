package ratelimit

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Metrics counts rate-limiting outcomes, exported in the Prometheus text
// format by the admin listener's /metrics. Create it with NewMetrics.
type Metrics struct {
	// Limited counts requests refused with 429, by type (requests or
	// tokens) and tier.
	Limited *CounterVec
	// LimiterErrors counts admissions the limiter could not decide (it was
	// unreachable, failed, or had no limit for the key's tier), by tier and
	// the action the tier's failure mode took (allowed or denied).
	LimiterErrors *CounterVec
	// ChargeErrors counts token charges at stream end that failed, so those
	// tokens were not counted against the key.
	ChargeErrors *CounterVec
}

// NewMetrics returns zeroed counters.
func NewMetrics() *Metrics {
	return &Metrics{
		Limited: NewCounterVec("switchyard_ratelimit_limited_total",
			"Requests refused with 429 by the rate limits.", "type", "tier"),
		LimiterErrors: NewCounterVec("switchyard_ratelimit_limiter_errors_total",
			"Admissions the rate limiter could not decide, by the action the tier's on_limiter_error took.", "tier", "action"),
		ChargeErrors: NewCounterVec("switchyard_ratelimit_charge_errors_total",
			"Token usage charges at stream end that failed (those tokens were not counted).", "source"),
	}
}

// WritePrometheus writes every counter in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	if m == nil {
		return nil
	}
	for _, c := range []*CounterVec{m.Limited, m.LimiterErrors, m.ChargeErrors} {
		if err := c.WritePrometheus(w); err != nil {
			return err
		}
	}
	return nil
}

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
	var b strings.Builder
	fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n", c.name, c.help, c.name)
	var lines []string
	c.m.Range(func(k, v any) bool {
		values := strings.Split(k.(string), "\x00")
		var l strings.Builder
		l.WriteString(c.name)
		if len(c.labels) > 0 {
			l.WriteByte('{')
			for i, name := range c.labels {
				if i > 0 {
					l.WriteByte(',')
				}
				val := ""
				if i < len(values) {
					val = values[i]
				}
				fmt.Fprintf(&l, "%s=%q", name, val)
			}
			l.WriteByte('}')
		}
		fmt.Fprintf(&l, " %d\n", v.(*atomic.Uint64).Load())
		lines = append(lines, l.String())
		return true
	})
	slices.Sort(lines)
	for _, l := range lines {
		b.WriteString(l)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
