package e2e

import (
	"net/http"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/gateway"
)

// BenchmarkGatewayChatParallel is BenchmarkGatewayChat's loopback-grpc case
// with 16 requests in flight (8 per core on the 2-core machine), the
// concurrency of make bench's throughput phase: what it shows that the
// sequential one cannot is how the gRPC connection's writes and wake-ups
// behave with several streams at once.
func BenchmarkGatewayChatParallel(b *testing.B) {
	s := newStack(b, stackOptions{gateway: func(o *gateway.Options) { o.LoopbackGRPC = true }})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	sys0 := processSyscalls(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := benchChat(client, s); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(processSyscalls(b)-sys0)/float64(b.N), "syscalls/op")
}
