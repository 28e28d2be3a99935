package metrics

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCounterVec(t *testing.T) {
	c := NewCounterVec("x_total", "Things.", "a", "b")
	c.Inc("1", "2")
	c.Add(4, "1", "2")
	c.Inc("q\"uote", "")
	var b strings.Builder
	if err := c.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	want := "# HELP x_total Things.\n# TYPE x_total counter\n" +
		"x_total{a=\"1\",b=\"2\"} 5\n" +
		"x_total{a=\"q\\\"uote\",b=\"\"} 1\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if c.Value("1", "2") != 5 || c.Value("nope", "") != 0 {
		t.Errorf("values %d %d", c.Value("1", "2"), c.Value("nope", ""))
	}
}

func TestHistogramVec(t *testing.T) {
	h := NewHistogramVec("lat_seconds", "Latency.", []float64{0.1, 1}, "m")
	for _, v := range []float64{0.05, 0.1, 0.5, 3} {
		h.Observe(v, "m1")
	}
	var b strings.Builder
	if err := h.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	// Buckets are cumulative and inclusive (le): 0.1 falls in le=0.1.
	for _, line := range []string{
		`lat_seconds_bucket{m="m1",le="0.1"} 2`,
		`lat_seconds_bucket{m="m1",le="1"} 3`,
		`lat_seconds_bucket{m="m1",le="+Inf"} 4`,
		`lat_seconds_sum{m="m1"} 3.65`,
		`lat_seconds_count{m="m1"} 4`,
		"# TYPE lat_seconds histogram",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("missing %q in\n%s", line, b.String())
		}
	}
}

func TestHistogramConcurrent(t *testing.T) {
	h := NewHistogramVec("h", "H.", []float64{1}, "m")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				h.Observe(0.5, "m")
			}
		})
	}
	wg.Wait()
	if h.Count("m") != 8000 {
		t.Errorf("count %d", h.Count("m"))
	}
	var b strings.Builder
	_ = h.WritePrometheus(&b)
	if !strings.Contains(b.String(), `h_sum{m="m"} 4000`+"\n") {
		t.Errorf("sum lost updates:\n%s", b.String())
	}
}

func TestRequests(t *testing.T) {
	m := NewRequests()
	for _, r := range []Request{
		{Model: "demo/chat", Provider: "p", Status: 200, Duration: 20 * time.Millisecond, TimeToFirstByte: 5 * time.Millisecond,
			PromptTokens: 10, CompletionTokens: 3, Cached: 8, Attempts: 2},
		{Model: "demo/chat", Provider: "p", Status: 429, Duration: time.Millisecond},
		{Model: "/v1/files", Status: 404, Duration: time.Millisecond},
		{Model: "demo/chat", Provider: "p", Origin: "batch", Status: 503, Duration: time.Second},
	} {
		m.Observe(r)
	}
	if got := m.Total.Value("demo/chat", "p", "", "2xx"); got != 1 {
		t.Errorf("2xx = %d", got)
	}
	if m.Total.Value("demo/chat", "p", "", "429") != 1 || m.Total.Value("/v1/files", "", "", "4xx") != 1 ||
		m.Total.Value("demo/chat", "p", "batch", "5xx") != 1 {
		t.Error("status classes wrong")
	}
	if m.Tokens.Value("demo/chat", "p", "cached") != 8 || m.Tokens.Value("demo/chat", "p", "prompt") != 10 {
		t.Error("tokens wrong")
	}
	if m.Retries.Value("demo/chat") != 1 || m.TTFB.Count("demo/chat", "p") != 1 || m.Duration.Count("demo/chat", "p") != 3 {
		t.Error("retries or histograms wrong")
	}
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil || !strings.Contains(b.String(), "switchyard_request_duration_seconds_bucket") {
		t.Errorf("exposition: %v\n%s", err, b.String())
	}
}

func TestBuildInfo(t *testing.T) {
	b := Build{Version: "v1.2.3", Revision: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26.8"}
	if got, want := b.String(), "switchyard v1.2.3 (0123456789ab, modified) go1.26.8"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	var w strings.Builder
	if err := b.WritePrometheus(&w); err != nil {
		t.Fatal(err)
	}
	want := "# HELP switchyard_build_info The running build: module version, VCS revision and Go version.\n" +
		"# TYPE switchyard_build_info gauge\n" +
		`switchyard_build_info{goversion="go1.26.8",revision="0123456789abcdef0123-modified",version="v1.2.3"} 1` + "\n"
	if w.String() != want {
		t.Errorf("exposition =\n%s\nwant\n%s", w.String(), want)
	}
	if ReadBuild().GoVersion == "" {
		t.Error("ReadBuild found no Go version in a test binary")
	}
}

// TestGenAIFamilies checks the GenAI semantic-convention families: their
// Prometheus names and labels, which requests they count, and the added
// latency.
func TestGenAIFamilies(t *testing.T) {
	m := NewRequests()
	m.Observe(Request{Model: "gpt-x", Provider: "p1", Operation: "chat", Status: 200,
		Duration: 2 * time.Second, TimeToFirstByte: 500 * time.Millisecond, PromptTokens: 10, CompletionTokens: 4,
		Upstream: 1990 * time.Millisecond, Stream: true})
	m.Observe(Request{Model: "gpt-x", Provider: "p1", Operation: "chat", Status: 503, Duration: time.Second, Upstream: -1})
	m.Observe(Request{Model: "/v1/files", Status: 200, Duration: time.Millisecond, Upstream: -1}) // not a model request
	var b strings.Builder
	if err := m.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, line := range []string{
		"# TYPE gen_ai_client_token_usage histogram",
		`gen_ai_client_token_usage_sum{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x",gen_ai_token_type="input"} 10`,
		`gen_ai_client_token_usage_sum{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x",gen_ai_token_type="output"} 4`,
		`gen_ai_server_request_duration_seconds_count{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x",error_type=""} 1`,
		`gen_ai_server_request_duration_seconds_count{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x",error_type="503"} 1`,
		`gen_ai_server_time_to_first_token_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x"} 0.5`,
		// (2 s - 0.5 s) over the 3 tokens after the first.
		`gen_ai_server_time_per_output_token_seconds_sum{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x"} 0.5`,
		`gen_ai_client_token_usage_bucket{gen_ai_operation_name="chat",gen_ai_provider_name="p1",gen_ai_request_model="gpt-x",gen_ai_token_type="input",le="16"} 1`,
		`switchyard_added_latency_seconds_count{model="gpt-x",provider="p1"} 1`,
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %q", line)
		}
	}
	if strings.Contains(out, `gen_ai_request_model="/v1/files"`) {
		t.Error("a request that is not a model request is in the gen_ai families")
	}
	// The added latency is the duration less the upstream wait: 10 ms.
	if !strings.Contains(out, `switchyard_added_latency_seconds_bucket{model="gpt-x",provider="p1",le="0.01"} 1`) {
		t.Errorf("added latency not 10 ms:\n%s", out)
	}
}

func TestWriteProcess(t *testing.T) {
	var b strings.Builder
	if err := WriteProcess(&b); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_info", "go_threads",
		"process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"} {
		if !strings.Contains(b.String(), "\n"+name+" ") && !strings.Contains(b.String(), "\n"+name+"{") {
			t.Errorf("no %s in\n%s", name, b.String())
		}
	}
}

// TestSeriesAddedConcurrently: series created at the same time from many
// goroutines (the map of series is replaced on each addition) lose neither
// a series nor an update, while the families are being written.
func TestSeriesAddedConcurrently(t *testing.T) {
	h := NewHistogramVec("h", "H.", []float64{1}, "model", "provider")
	c := NewCounterVec("c", "C.", "model", "provider")
	const series, perSeries, goroutines = 50, 20, 8
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range series * perSeries {
				m := "model-" + strconv.Itoa((i+g)%series)
				h.Observe(0.5, m, "p")
				c.Inc(m, "p")
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			var b strings.Builder
			_ = h.WritePrometheus(&b)
			_ = c.WritePrometheus(&b)
		}
	})
	wg.Wait()
	for i := range series {
		m := "model-" + strconv.Itoa(i)
		if got := h.Count(m, "p"); got != goroutines*perSeries {
			t.Errorf("histogram %s count %d, want %d", m, got, goroutines*perSeries)
		}
		if got := c.Value(m, "p"); got != goroutines*perSeries {
			t.Errorf("counter %s = %d, want %d", m, got, goroutines*perSeries)
		}
	}
	var b strings.Builder
	_ = c.WritePrometheus(&b)
	if n := strings.Count(b.String(), "\nc{"); n != series {
		t.Errorf("%d counter lines, want %d:\n%s", n, series, b.String())
	}
}
