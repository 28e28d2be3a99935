package main

import (
	"math"
	"testing"
)

func TestParseBenchAllocsChunk(t *testing.T) {
	tests := []struct {
		line string
		want float64 // NaN: not reported
	}{
		// A difference of two stream lengths: noise makes "none" slightly negative.
		{"BenchmarkGatewayStream/inprocess-2  164  7252266 ns/op  -0.03437 allocs/chunk  222790 B/op  1097 allocs/op", -0.03437},
		{"BenchmarkGatewayStream/loopback-grpc-2  90  12869332 ns/op  19.90 allocs/chunk  617747 B/op  7166 allocs/op", 19.90},
		{"BenchmarkFeed-2   1000000   1043 ns/op   150.2 MB/s   0 B/op   0 allocs/op", math.NaN()},
	}
	for _, tt := range tests {
		res := parseBench("./e2e", tt.line)
		if len(res) != 1 {
			t.Fatalf("%q: %d results", tt.line, len(res))
		}
		got := res[0].AllocsChunk
		if math.IsNaN(tt.want) != math.IsNaN(got) || (!math.IsNaN(got) && got != tt.want) {
			t.Errorf("%q: allocs/chunk %v, want %v", tt.line, got, tt.want)
		}
	}
}
