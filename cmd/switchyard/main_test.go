package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestKeysCreateAndList(t *testing.T) {
	dir := t.TempDir()
	out, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--tier", "standard", "--name", "ci")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	key := lines[len(lines)-1]
	if !strings.HasPrefix(key, "sk-sy-") || strings.ContainsAny(key, " \t") {
		t.Fatalf("last line %q is not the key alone", key)
	}
	list, _, err := runCLI(t, "keys", "list", "--data-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(list, key) || !strings.Contains(list, key[:12]) || !strings.Contains(list, "ci") || !strings.Contains(list, "standard") {
		t.Errorf("list output wrong (must show prefix, name, tier, never the key):\n%s", list)
	}
	if _, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--tier", "platinum", "--name", "x"); err == nil || !strings.Contains(err.Error(), "unknown tier") {
		t.Errorf("unknown tier: err = %v", err)
	}
	if _, _, err := runCLI(t, "keys", "revoke", "--data-dir", dir, key); err != nil {
		t.Errorf("revoke: %v", err)
	}
	list, _, _ = runCLI(t, "keys", "list", "--data-dir", dir)
	if !strings.Contains(list, "revoked") {
		t.Errorf("revoked key not shown as revoked:\n%s", list)
	}
}

func TestValidate(t *testing.T) {
	if out, _, err := runCLI(t, "validate"); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("default config: %v %s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src := strings.Replace(string(mustRead(t, "../../internal/config/default.yaml")), "provider: fake-openai", "provider: missing", 1)
	if err := os.WriteFile(bad, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCLI(t, "validate", "--config", bad)
	if err == nil || !regexp.MustCompile(`bad\.yaml:\d+: models\[0\]\.providers\[0\]\.provider: unknown provider "missing"`).MatchString(err.Error()) {
		t.Errorf("err = %v; want file, line and field", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// lockedBuffer lets the test read what `run` prints while it keeps running.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunPrintsWorkingCurl starts `switchyard run --demo-key` and executes the
// curl line it prints, exactly as printed.
func TestRunPrintsWorkingCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	// The embedded default with every demo upstream moved to a free port, so
	// the test never collides with a `make run` on this machine.
	cfg := string(mustRead(t, "../../internal/config/default.yaml"))
	for _, port := range []string{"127.0.0.1:8091", "127.0.0.1:8092", "127.0.0.1:8093", "127.0.0.1:8094"} {
		if !strings.Contains(cfg, port) {
			t.Fatalf("default config no longer uses %s; update this test", port)
		}
		cfg = strings.ReplaceAll(cfg, port, freePort(t))
	}
	path := filepath.Join(t.TempDir(), "demo.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SWITCHYARD_FAKE_OPENAI_KEY", "")
	t.Setenv("SWITCHYARD_FAKE_SEARCH_KEY", "")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"run", "--config", path, "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--demo-key"}, &out, &errOut)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	var curl string
	for curl == "" && time.Now().Before(deadline) {
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "curl ") {
				curl = strings.TrimSpace(line)
			}
		}
		select {
		case err := <-done:
			t.Fatalf("run exited early: %v\nstderr: %s", err, errOut.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if curl == "" {
		t.Fatalf("no curl line printed; stdout:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "/v1") {
		t.Errorf("no base URL printed:\n%s", out.String())
	}
	res, err := exec.Command("sh", "-c", curl).CombinedOutput()
	if err != nil {
		t.Fatalf("printed curl failed: %v\n%s", err, res)
	}
	if !strings.Contains(string(res), `"chat.completion"`) || !strings.Contains(string(res), "Hello!") {
		t.Errorf("curl output is not a chat completion: %s", res)
	}
}

func TestValidateCredentials(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "creds.yaml")
	src := strings.Replace(string(mustRead(t, "../../internal/config/default.yaml")), "base_url: http://127.0.0.1:8091/v1", "base_url: https://api.openai.example/v1", 1)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SWITCHYARD_FAKE_OPENAI_KEY", "")
	_, _, err := runCLI(t, "validate", "--config", cfg)
	if err == nil || !strings.Contains(err.Error(), "SWITCHYARD_FAKE_OPENAI_KEY") || !strings.Contains(err.Error(), `"fake-openai"`) {
		t.Errorf("validate with a provider's credential unset: %v; want it named", err)
	}
	if _, _, err := runCLI(t, "validate", "--config", cfg, "--skip-credentials"); err != nil {
		t.Errorf("validate --skip-credentials: %v", err)
	}
	t.Setenv("SWITCHYARD_FAKE_OPENAI_KEY", "sk-test")
	if out, _, err := runCLI(t, "validate", "--config", cfg); err != nil || !strings.Contains(out, "ok") {
		t.Errorf("validate with the credential set: %v %s", err, out)
	}
}

// A public listener without TLS fails at once, saying why, instead of after
// the wait for the data plane's first configuration.
func TestRunRefusesPlainPublicListenerAtOnce(t *testing.T) {
	// The check runs before anything starts (the old failure was "no xDS
	// configuration within 10s", after starting the demo upstreams on the
	// default config's fixed ports).
	_, _, err := runCLI(t, "run", "--data-dir", t.TempDir(), "--listen", "0.0.0.0:0", "--admin-listen", "")
	if err == nil || !strings.Contains(err.Error(), "plain HTTP on a non-loopback address") || !strings.Contains(err.Error(), "--insecure") {
		t.Fatalf("run on 0.0.0.0 without TLS: %v", err)
	}
}

func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		out, _, err := runCLI(t, arg)
		if err != nil || !strings.HasPrefix(out, "switchyard ") || !strings.Contains(out, "go1.") {
			t.Errorf("%s: %v %q", arg, err, out)
		}
	}
}
