package main

import (
	"testing"
	"time"
)

// Tests of the benchmark harness (make test must not run benchmarks).

func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i))
	}
	for _, c := range []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{7}, 50, 7},
		{[]time.Duration{7}, 99, 7},
		{[]time.Duration{1, 2}, 50, 1},
		{[]time.Duration{1, 2, 3}, 50, 2},
		{[]time.Duration{1, 2, 3, 4}, 50, 2},
		{hundred, 50, 50},
		{hundred, 99, 99},
		{hundred, 100, 100},
		{hundred, 0, 1},
		{hundred, 99.5, 100},
		{hundred[:10], 99, 10},
	} {
		if got := percentile(c.in, c.p); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.in, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := summarize([]time.Duration{5, 1, 4, 2, 3})
	if s.N != 5 || s.Min != 1 || s.Max != 5 || s.P50 != 3 || s.Mean != 3 || s.P99 != 5 {
		t.Fatalf("summarize = %+v", s)
	}
	if (summarize(nil) != summary{}) {
		t.Fatal("summarize(nil) is not zero")
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median = %v", m)
	}
}
