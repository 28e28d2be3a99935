package e2e

import (
	"bytes"
	"io"
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
	body := []byte(`{"model":"demo/chat","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say something short about proxies."}],"max_tokens":32}`)
	url := s.gw.BaseURL() + "/chat/completions"
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: tr}
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	sys0 := processSyscalls(b)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(processSyscalls(b)-sys0)/float64(b.N), "syscalls/op")
}
