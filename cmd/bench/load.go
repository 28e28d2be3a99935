package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The load generator: closed-loop workers over keep-alive connections, each
// taking the next request of a fixed sequence until the round's count is
// done.

// endpoint is where one system serves chat completions, and what a request
// to it carries.
type endpoint struct {
	url    string
	header http.Header
	model  string
}

// system is one way of reaching the fake upstream.
type system struct {
	name   string
	burst  endpoint // the fake that streams chunks back to back
	paced  endpoint // the fake that streams chunks ChunkDelay apart
	fast   endpoint // the fake without service time (the throughput phase)
	client *http.Client
	// skip, when set, says why this system was not measured.
	skip string
	// proc is the gateway's process (nil for direct), for its CPU time.
	proc *proc
	// bodies is the request sequence for this system (same content for all
	// systems, only the model name differs); streamBodies the stream request.
	bodies      [][]byte
	fastBodies  [][]byte
	streamBody  []byte
	pacedStream []byte
}

func newClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: conc,
		// Shorter than any server's keep-alive timeout (Portkey's is 5 s),
		// so the client never reuses a connection the server is closing.
		IdleConnTimeout:    4 * time.Second,
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
	}, Timeout: 2 * time.Minute}
}

// streamChunks is the length of the measured streams, in content chunks.
const streamChunks = 200

// chatBody is request i of the sequence: about 1 KB, a short conversation.
// A stream request's user message has streamChunks-1 words, so that the
// fake's natural reply ("Echo: " and the message) is streamChunks chunks
// even through a gateway that does not forward the x-fake-chunks header
// sent with it.
func chatBody(model string, i int, stream bool) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	filler := strings.Repeat("Summarise the benchmark results in one paragraph, please. ", 12)
	req := map[string]any{
		"model": model,
		"messages": []msg{
			{"system", "You are a helpful assistant."},
			{"user", fmt.Sprintf("Request %d. %s", i, filler)},
		},
		"temperature": 0.7,
		"max_tokens":  64,
	}
	if stream {
		words := strings.Fields(strings.Repeat(filler, 20))[:streamChunks-1]
		req["messages"] = []msg{{"system", "You are a helpful assistant."}, {"user", strings.Join(words, " ")}}
		req["max_tokens"] = 4 * streamChunks
		req["stream"] = true
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

const sequenceLen = 64

func (s *system) prepare(maxConc int) {
	s.client = newClient(maxConc)
	s.bodies = make([][]byte, sequenceLen)
	s.fastBodies = make([][]byte, sequenceLen)
	for i := range s.bodies {
		s.bodies[i] = chatBody(s.burst.model, i, false)
		s.fastBodies[i] = chatBody(s.fast.model, i, false)
	}
	s.streamBody = chatBody(s.burst.model, 0, true)
	s.pacedStream = chatBody(s.paced.model, 0, true)
}

// roundResult is one round of one system at one concurrency.
type roundResult struct {
	lat      []time.Duration
	wall     time.Duration
	errs     int
	firstErr string
}

// doOne sends one non-streaming request and reads the whole answer; the
// latency runs from just before the request is written to the last byte.
func doOne(ctx context.Context, c *http.Client, ep endpoint, body []byte, buf *bytes.Buffer) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	for k, v := range ep.header {
		req.Header[k] = v
	}
	buf.Reset()
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = buf.ReadFrom(resp.Body)
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d: %s", resp.StatusCode, clip(buf.String(), 200))
	}
	if buf.Len() == 0 || !bytes.Contains(buf.Bytes(), []byte(`"chat.completion"`)) {
		return 0, fmt.Errorf("not a chat completion: %s", clip(buf.String(), 200))
	}
	return d, nil
}

func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// round sends n requests of s's sequence with conc workers.
func (s *system) round(ctx context.Context, conc, n, offset int) roundResult {
	return s.roundOn(ctx, s.burst, s.bodies, conc, n, offset)
}

// roundOn is a round against ep with its request sequence.
func (s *system) roundOn(ctx context.Context, ep endpoint, bodies [][]byte, conc, n, offset int) roundResult {
	var next atomic.Int64
	lat := make([]time.Duration, n)
	ok := make([]bool, n)
	var mu sync.Mutex
	var res roundResult
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			var buf bytes.Buffer
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				d, err := doOne(ctx, s.client, ep, bodies[(offset+i)%len(bodies)], &buf)
				if err != nil {
					mu.Lock()
					res.errs++
					if res.firstErr == "" {
						res.firstErr = err.Error()
					}
					mu.Unlock()
					continue
				}
				lat[i], ok[i] = d, true
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	for i, d := range lat {
		if ok[i] {
			res.lat = append(res.lat, d)
		}
	}
	return res
}

// streamResult is one streamed response as the client saw it.
type streamResult struct {
	ttfb   time.Duration // request start to the first complete SSE event
	gap    time.Duration // mean time between events, first to last
	total  time.Duration
	events int
}

// doStream sends a streaming request and timestamps each SSE event as the
// read that completes it returns.
func doStream(ctx context.Context, c *http.Client, ep endpoint, body []byte) (streamResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return streamResult{}, err
	}
	for k, v := range ep.header {
		req.Header[k] = v
	}
	req.Header.Set("x-fake-chunks", strconv.Itoa(streamChunks))
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return streamResult{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return streamResult{}, fmt.Errorf("status %d: %s", resp.StatusCode, clip(string(b), 200))
	}
	buf := make([]byte, 64<<10)
	var first, last time.Time
	var r streamResult
	prevNL := false
	tail := make([]byte, 0, 64)
	for {
		n, rerr := resp.Body.Read(buf)
		now := time.Now()
		for _, ch := range buf[:n] {
			if ch == '\n' {
				if prevNL {
					r.events++
					if r.events == 1 {
						first = now
					}
					last = now
				}
				prevNL = true
			} else if ch != '\r' {
				prevNL = false
			}
		}
		if n > 0 {
			tail = append(tail, buf[:n]...)
			if len(tail) > 64 {
				tail = append(tail[:0], tail[len(tail)-64:]...)
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return r, rerr
		}
	}
	if !bytes.Contains(tail, []byte("data: [DONE]")) {
		return r, fmt.Errorf("stream ended without [DONE] after %d events", r.events)
	}
	if r.events < 2 {
		return r, fmt.Errorf("stream had %d events", r.events)
	}
	r.ttfb = first.Sub(t0)
	r.gap = last.Sub(first) / time.Duration(r.events-1)
	r.total = last.Sub(t0)
	return r, nil
}
