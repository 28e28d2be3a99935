package main

import (
	"slices"
	"time"
)

// summary describes one sample of durations.
type summary struct {
	N    int
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	Min  time.Duration
	Max  time.Duration
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of an
// ascending slice: the smallest value with at least p% of the sample at or
// below it. An empty slice gives 0.
func percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	// rank = ceil(p/100 * n), computed in integers where possible so that
	// p99 of 100 values is the 99th value, not the 100th through rounding.
	r := p / 100 * float64(n)
	rank := int(r)
	if float64(rank) < r-1e-9 {
		rank++
	}
	if rank < 1 {
		rank = 1
	}
	if rank > n {
		rank = n
	}
	return sorted[rank-1]
}

// summarize sorts a copy of d and describes it.
func summarize(d []time.Duration) summary {
	if len(d) == 0 {
		return summary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return summary{
		N:    len(s),
		Mean: sum / time.Duration(len(s)),
		P50:  percentile(s, 50),
		P90:  percentile(s, 90),
		P99:  percentile(s, 99),
		Min:  s[0],
		Max:  s[len(s)-1],
	}
}

// median of a float sample (0 if empty).
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms renders a duration in milliseconds as a float.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
