package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// promtool returns the path of Prometheus' promtool (Debian package
// prometheus; `make test-deps` installs it). Without it the test skips and
// says why; in CI (CI set) it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed: CI must check the metrics and alert rules (make test-deps installs it)")
		}
		t.Skip("SKIPPED: promtool not installed (apt-get install prometheus, or make test-deps as root)")
	}
	return p
}

// checkMetrics runs `promtool check metrics` on an exposition.
func checkMetrics(t *testing.T, tool, what string, exposition []byte) {
	t.Helper()
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics, %s: %v\n%s", what, err, out)
	}
}

// getMetrics reads url's /metrics, with a bearer token when token is set.
func getMetrics(t *testing.T, url, token string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// waitHealthy polls addr's /healthz until it answers 200.
func waitHealthy(t *testing.T, addr string, logs *lockedBuffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy in time\n%s", addr, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRunWithChat starts `switchyard run` on the default configuration (demo
// upstreams on free ports) with a demo key and an admin listener, sends one
// chat completion through it, and returns the admin API's URL and token.
func startRunWithChat(t *testing.T) (adminURL, adminTok string) {
	t.Helper()
	cfg := string(mustRead(t, "../../internal/config/default.yaml"))
	for _, port := range []string{"127.0.0.1:8091", "127.0.0.1:8092", "127.0.0.1:8093", "127.0.0.1:8094"} {
		cfg = strings.ReplaceAll(cfg, port, freePort(t))
	}
	path := filepath.Join(t.TempDir(), "demo.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SWITCHYARD_FAKE_OPENAI_KEY", "")
	t.Setenv("SWITCHYARD_FAKE_SEARCH_KEY", "")
	adminTok = "admin-token-for-the-metrics-test"
	t.Setenv(adminTokenEnv, adminTok)
	admin := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
			"--admin-listen", admin, "--demo-key", "--log-level", "warn"}, &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	curl := regexp.MustCompile(`curl -s (\S+) -H 'Authorization: Bearer (\S+)'.* -d '(.*)'`)
	deadline := time.Now().Add(15 * time.Second)
	var m []string
	for m == nil {
		m = curl.FindStringSubmatch(out.String())
		if m != nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run exited early: %v\nstderr: %s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no demo key printed:\n%s", out.String())
		}
	}
	req, _ := http.NewRequest(http.MethodPost, m[1], strings.NewReader(m[3]))
	req.Header.Set("Authorization", "Bearer "+m[2])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("chat completion: %d %s", resp.StatusCode, b)
	}
	// The data plane records a request once its response is sent: wait
	// for it to show.
	adminURL = "http://" + admin
	for !bytes.Contains(getMetrics(t, adminURL+"/metrics", adminTok), []byte("\ngen_ai_client_token_usage_bucket{")) {
		if time.Now().After(deadline) {
			t.Fatal("the chat completion is not in the metrics")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return adminURL, adminTok
}

// TestMetricsExposition checks /metrics of `switchyard run`'s admin
// listener and of each split component: the families each must serve, and
// `promtool check metrics` finds nothing wrong with any of them.
func TestMetricsExposition(t *testing.T) {
	tool := promtool(t)
	adminURL, adminTok := startRunWithChat(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	xds, cpHealth, epHealth, beHealth := freePort(t), freePort(t), freePort(t), freePort(t)
	for _, env := range []string{"SWITCHYARD_FAKE_OPENAI_KEY", "SWITCHYARD_FAKE_ANTHROPIC_KEY", "SWITCHYARD_FAKE_GEMINI_KEY"} {
		t.Setenv(env, "test-key")
	}
	t.Setenv("SWITCHYARD_INTERNAL_TOKEN", "internal-token-for-the-metrics-test")
	done := make(chan error, 3)
	var logs lockedBuffer
	go func() {
		done <- run(ctx, []string{"controlplane", "--listen", xds, "--health", cpHealth, "--log-level", "warn"}, &logs, &logs)
	}()
	go func() {
		done <- run(ctx, []string{"extproc", "--xds", xds, "--listen", freePort(t), "--data-dir", t.TempDir(),
			"--health", epHealth, "--log-level", "warn"}, &logs, &logs)
	}()
	go func() {
		done <- run(ctx, []string{"backends", "--listen", freePort(t), "--data-dir", t.TempDir(),
			"--gateway-url", "http://127.0.0.1:1/v1", "--health", beHealth, "--log-level", "warn"}, &logs, &logs)
	}()
	for _, a := range []string{cpHealth, epHealth, beHealth} {
		waitHealthy(t, a, &logs)
	}

	for _, c := range []struct {
		what, url, token string
		want             []string
	}{
		{"run admin", adminURL + "/metrics", adminTok, []string{
			"switchyard_requests_total", "gen_ai_client_token_usage_bucket", "gen_ai_server_request_duration_seconds_bucket",
			"gen_ai_server_time_to_first_token_seconds_bucket", "switchyard_added_latency_seconds_bucket",
			"switchyard_config_reloads_total", "switchyard_batches", "go_goroutines", "process_resident_memory_bytes"}},
		{"controlplane", "http://" + cpHealth + "/metrics", "", []string{
			"switchyard_build_info", "switchyard_config_reloads_total", "switchyard_config_version", "go_goroutines", "process_cpu_seconds_total"}},
		{"extproc", "http://" + epHealth + "/metrics", "", []string{"switchyard_build_info", "go_goroutines", "process_open_fds"}},
		{"backends", "http://" + beHealth + "/metrics", "", []string{
			"switchyard_build_info", "switchyard_batches", "switchyard_batch_lines_pending", "go_goroutines"}},
	} {
		b := getMetrics(t, c.url, c.token)
		for _, name := range c.want {
			if !regexp.MustCompile(`(?m)^` + name + `[{ ]`).Match(b) {
				t.Errorf("%s: no sample of %s in\n%s", c.what, name, b)
			}
		}
		checkMetrics(t, tool, c.what, b)
	}
	cancel()
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("exit: %v", err)
		}
	}
}

// metricNameRE finds Switchyard's, the GenAI conventions' and the Go
// runtime's metric names in a PromQL expression.
var metricNameRE = regexp.MustCompile(`\b(?:switchyard|gen_ai|go|process)_[a-z0-9_]+\b`)

// exposedNames are the names queries can use on an exposition: every
// family its TYPE lines declare, with a histogram's _bucket, _sum and
// _count, and the label names of its samples.
func exposedNames(exposition []byte) map[string]bool {
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`[{,]([a-z_]+)="`).FindAllSubmatch(exposition, -1) {
		names[string(m[1])] = true
	}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)$`).FindAllSubmatch(exposition, -1) {
		n := string(m[1])
		names[n] = true
		if string(m[2]) == "histogram" {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
}

// TestDashboardAndAlertRules validates deploy/'s Grafana dashboard and
// Prometheus alert rules: the rules pass `promtool check rules`; every
// dashboard query is valid PromQL (checked as a recording rule, Grafana's
// variables filled in); and every metric either names is one a running
// gateway exposes.
func TestDashboardAndAlertRules(t *testing.T) {
	tool := promtool(t)
	const rulesPath = "../../deploy/prometheus/alerts.yaml"
	if out, err := exec.Command(tool, "check", "rules", rulesPath).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
	// The example scrape configuration, with the rules beside it and the
	// admin token file it names.
	promDir := t.TempDir()
	for name, content := range map[string][]byte{
		"prometheus.yaml":        mustRead(t, "../../deploy/prometheus/prometheus.yaml"),
		"alerts.yaml":            mustRead(t, rulesPath),
		"switchyard-admin.token": []byte("token\n"),
	} {
		if err := os.WriteFile(filepath.Join(promDir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command(tool, "check", "config", filepath.Join(promDir, "prometheus.yaml")).CombinedOutput(); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}

	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(mustRead(t, "../../deploy/grafana/switchyard.json"), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	fill := strings.NewReplacer("$__rate_interval", "5m", "$__range", "1h", "$instance", ".*")
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			q, _ := json.Marshal(fill.Replace(tg.Expr))
			fmt.Fprintf(&rules, "      - record: dashboard:query:%d\n        expr: %s\n", len(exprs), q)
		}
	}
	for _, v := range dash.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	if len(exprs) < 15 {
		t.Fatalf("the dashboard has only %d queries", len(exprs))
	}
	dashRules := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	if err := os.WriteFile(dashRules, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(tool, "check", "rules", dashRules).CombinedOutput(); err != nil {
		t.Errorf("dashboard queries are not valid PromQL: %v\n%s", err, out)
	}

	adminURL, adminTok := startRunWithChat(t)
	exposed := exposedNames(getMetrics(t, adminURL+"/metrics", adminTok))
	for what, text := range map[string]string{"dashboard": strings.Join(exprs, "\n"), "alert rules": string(mustRead(t, rulesPath))} {
		for _, name := range metricNameRE.FindAllString(text, -1) {
			if !exposed[name] {
				t.Errorf("%s query uses %s, which the gateway does not expose (as a metric or label)", what, name)
			}
		}
	}
}
