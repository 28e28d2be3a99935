package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
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
			client := &http.Client{}
			do := func() {
				if err := benchChat(client, s); err != nil {
					b.Fatal(err)
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

// benchChatBody is the benchmarks' non-streaming chat request.
var benchChatBody = []byte(`{"model":"demo/chat","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Say something short about proxies."}],"max_tokens":32}`)

// benchChat sends one benchChatBody through s's gateway and reads the
// answer, which must be a 200.
func benchChat(client *http.Client, s *stack) error {
	req, _ := http.NewRequest(http.MethodPost, s.gw.BaseURL()+"/chat/completions", bytes.NewReader(benchChatBody))
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// lockstepSSE is an upstream answering every request with an event stream
// of x-fake-chunks content chunks, then a usage chunk and [DONE], from
// bytes made once (it allocates nothing per chunk). It writes each chunk
// only once the client has read the one before (next), so every chunk
// crosses the gateway on its own: one read, one ext_proc exchange, one
// write and flush each, as with a model producing tokens slower than the
// gateway relays them.
type lockstepSSE struct{ next chan struct{} }

var (
	sseChunk = []byte(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake-chat-1","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	sseTail  = []byte(`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake-chat-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"chatcmpl-b","object":"chat.completion.chunk","created":1,"model":"fake-chat-1","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":256,"total_tokens":276}}` + "\n\n" +
		"data: [DONE]\n\n")
)

func (u *lockstepSSE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	n, _ := strconv.Atoi(r.Header.Get("x-fake-chunks"))
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for range n {
		_, _ = w.Write(sseChunk)
		_ = rc.Flush()
		select {
		case <-u.next:
		case <-r.Context().Done():
			return
		}
	}
	_, _ = w.Write(sseTail)
}

// BenchmarkGatewayStream is one streamed chat completion at a time through
// the whole in-process stack, relaying sseChunks content chunks one at a
// time (lockstepSSE): each read from the upstream, sent through ext_proc
// (response body STREAMED: extproc reads usage from the stream), written
// and flushed to the client. allocs/chunk is what one more chunk costs in
// heap allocations: the difference between a stream of sseChunks chunks
// and one of none, per chunk (whole process, runtime.MemStats.Mallocs;
// the client's reading and the upstream allocate nothing per chunk).
func BenchmarkGatewayStream(b *testing.B) {
	const sseChunks = 256
	for _, tc := range []struct {
		name     string
		loopback bool
	}{{"inprocess", false}, {"loopback-grpc", true}} {
		b.Run(tc.name, func(b *testing.B) {
			up := &lockstepSSE{next: make(chan struct{}, 1)}
			s := newStack(b, stackOptions{wrapUpstream: func(http.Handler) http.Handler { return up },
				gateway: func(o *gateway.Options) { o.LoopbackGRPC = tc.loopback }})
			body := []byte(`{"model":"demo/chat","stream":true,"messages":[{"role":"user","content":"Say something long about proxies."}]}`)
			client := &http.Client{Timeout: time.Minute} // a broken relay fails rather than hangs
			url := s.gw.BaseURL() + "/chat/completions"
			br := bufio.NewReaderSize(nil, 64<<10)
			do := func(chunks int) uint64 {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+s.key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("x-fake-chunks", strconv.Itoa(chunks))
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				before := ms.Mallocs
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				if resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
				br.Reset(resp.Body)
				content, done := 0, false
				for !done {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatalf("after %d content events: %v", content, err)
					}
					switch {
					case bytes.Contains(line, []byte(`"content":"word "`)):
						content++
						if content <= chunks {
							up.next <- struct{}{}
						}
					case bytes.Equal(line, []byte("data: [DONE]\n")):
						done = true
					}
				}
				resp.Body.Close()
				runtime.ReadMemStats(&ms)
				if content != chunks {
					b.Fatalf("%d content events relayed, want %d", content, chunks)
				}
				return ms.Mallocs - before
			}
			do(0)
			do(sseChunks)
			b.ReportAllocs()
			b.ResetTimer()
			var extra float64
			for range b.N {
				base := do(0)
				extra += float64(do(sseChunks)) - float64(base)
			}
			b.StopTimer()
			b.ReportMetric(extra/float64(b.N)/sseChunks, "allocs/chunk")
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
