package e2e

import (
	"bytes"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/gateway"
)

// BenchmarkGatewayChat is one non-streaming chat completion at a time
// through the whole in-process stack (data plane, extproc, rate limits) to a
// fake upstream that answers at once: the gateway's own cost per request,
// without a load generator or an upstream sharing the measurement. With
// -cpuprofile it says where that cost goes.
func BenchmarkGatewayChat(b *testing.B) {
	for _, tc := range []struct {
		name     string
		loopback bool
	}{{"inprocess", false}, {"loopback-grpc", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s := newStack(b, stackOptions{gateway: func(o *gateway.Options) { o.LoopbackGRPC = tc.loopback }})
			body := []byte(`{"model":"demo/chat","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say something short about proxies."}],"max_tokens":32}`)
			client := &http.Client{}
			url := s.gw.BaseURL() + "/chat/completions"
			do := func() {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+s.key)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			do()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				do()
			}
			// The process's user+system CPU time per request (client, fake
			// and gateway together): unlike ns/op, it does not grow when
			// other work on the machine delays this benchmark's goroutines.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the user+system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
