package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnvoyBootstrapAndValidate(t *testing.T) {
	out, _, err := runCLI(t, "envoy", "bootstrap", "--config", "../../examples/production.yaml",
		"--xds", "switchyard-controlplane:18000", "--extproc", "unix:/run/switchyard/extproc.sock", "--readiness", "0.0.0.0:9902")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "# Envoy bootstrap for Switchyard") || !strings.Contains(out, "region: us") ||
		!strings.Contains(out, "path: /run/switchyard/extproc.sock") {
		t.Fatalf("bootstrap output:\n%s", out)
	}
	dir := t.TempDir()
	boot := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(boot, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _, err := runCLI(t, "envoy", "validate", "--bootstrap", boot, "--config", "../../examples/production.yaml")
	if err != nil || !strings.HasPrefix(got, "ok: ") {
		t.Fatalf("validate: %v\n%s", err, got)
	}
	if got, _, err := runCLI(t, "envoy", "validate"); err != nil || !strings.Contains(got, "rendered default bootstrap") {
		t.Fatalf("validate with defaults: %v\n%s", err, got)
	}

	// A bootstrap without the extproc cluster: every listener's ext_proc
	// filter references a cluster that does not exist.
	broken := strings.Replace(out, "name: switchyard_extproc", "name: somewhere_else", 1)
	broken = strings.Replace(broken, "cluster_name: switchyard_extproc", "cluster_name: somewhere_else", 1)
	if err := os.WriteFile(boot, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runCLI(t, "envoy", "validate", "--bootstrap", boot, "--config", "../../examples/production.yaml")
	if err == nil || !strings.Contains(err.Error(), `listener "public"`) || !strings.Contains(err.Error(), `gRPC cluster "switchyard_extproc" does not exist`) {
		t.Errorf("err = %v", err)
	}
	if err := os.WriteFile(boot, []byte(out+"\nnot_a_field: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "envoy", "validate", "--bootstrap", boot); err == nil || !strings.Contains(err.Error(), "not_a_field") {
		t.Errorf("unknown field: err = %v", err)
	}
}

func TestEnvoySnapshot(t *testing.T) {
	out, _, err := runCLI(t, "envoy", "snapshot", "--config", "../../examples/production.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 10 {
		t.Fatalf("only %d resources:\n%s", len(lines), out)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, `{"@type":"type.googleapis.com/`) {
			t.Errorf("line %d is not an Any: %.80s", i+1, l)
		}
	}
}

// TestControlPlaneAndExtProcSubcommands starts the two components as
// deploy/ runs them, extproc on a Unix socket, and waits for extproc to be
// ready, which needs the catalog from the control plane over xDS; a
// `switchyard dataplane` in Envoy's place serves the control plane's
// listener on its own address and reaches extproc through the socket.
func TestControlPlaneAndExtProcSubcommands(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	xds, cpHealth, epHealth, dpHealth, public := freePort(t), freePort(t), freePort(t), freePort(t), freePort(t)
	sock := filepath.Join(t.TempDir(), "extproc.sock")
	// The default configuration's providers' credentials.
	for _, env := range []string{"SWITCHYARD_FAKE_OPENAI_KEY", "SWITCHYARD_FAKE_ANTHROPIC_KEY", "SWITCHYARD_FAKE_GEMINI_KEY"} {
		t.Setenv(env, "test-key")
	}
	done := make(chan error, 3)
	var cpOut, epOut, dpOut lockedBuffer
	go func() {
		done <- run(ctx, []string{"controlplane", "--listen", xds, "--health", cpHealth, "--log-level", "warn"}, &cpOut, &cpOut)
	}()
	go func() {
		done <- run(ctx, []string{"extproc", "--xds", xds, "--listen", "unix:" + sock, "--data-dir", t.TempDir(),
			"--health", epHealth, "--log-level", "warn"}, &epOut, &epOut)
	}()
	go func() {
		done <- run(ctx, []string{"dataplane", "--xds", xds, "--extproc", "unix:" + sock, "--listen", public,
			"--health", dpHealth, "--log-level", "warn"}, &dpOut, &dpOut)
	}()
	healthy := func(addr string) bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(15 * time.Second)
	for !(healthy(cpHealth) && healthy(epHealth) && healthy(dpHealth)) {
		if time.Now().After(deadline) {
			t.Fatalf("not healthy in time\ncontrolplane: %s\nextproc: %s\ndataplane: %s", cpOut.String(), epOut.String(), dpOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("extproc socket: %v %v", fi.Mode(), err)
	}
	// extproc's metrics are served beside its health endpoint.
	if resp, err := http.Get("http://" + epHealth + "/metrics"); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "# TYPE switchyard_ratelimit_limited_total counter") {
			t.Errorf("extproc /metrics: %d %s", resp.StatusCode, b)
		}
	}
	// Through the data plane to extproc: an unknown key is refused there,
	// in the OpenAI error shape.
	req, _ := http.NewRequest(http.MethodPost, "http://"+public+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("authorization", "Bearer sk-not-a-key")
	req.Header.Set("content-type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Error(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), `"invalid_api_key"`) {
			t.Errorf("through the data plane: %d %s", resp.StatusCode, b)
		}
	}
	// The line follows readiness (the health endpoint may answer first).
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(dpOut.String(), "dataplane serving on "+public); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("dataplane output: %s", dpOut.String())
			break
		}
	}
	cancel()
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("exit: %v", err)
		}
	}
}
