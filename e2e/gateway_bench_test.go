package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
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
//
// Besides time and allocations it reports what does not depend on how busy
// the machine is: the process's user+system CPU per request (getrusage; the
// client and the fake upstream are in the process too, the same for both
// modes) and its read and write system calls per request (/proc/self/io).
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
			cpu0, sys0 := processCPU(b), processSyscalls(b)
			b.ResetTimer()
			for range b.N {
				do()
			}
			b.StopTimer()
			cpu, sys := processCPU(b)-cpu0, processSyscalls(b)-sys0
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(sys)/float64(b.N), "syscalls/op")
		})
	}
}

// processCPU is the process's user+system CPU time so far.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processSyscalls is the process's read and write system calls so far
// (syscr + syscw of /proc/self/io), or 0 where that file does not exist.
func processSyscalls(tb testing.TB) int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	var n int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "syscr" && k != "syscw") {
			continue
		}
		c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		n += c
	}
	return n
}
