package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMakeRunDefaults starts the real binary as `make run` does on a fresh
// clone: the relative default data directory (".data", resolved against the
// working directory), the demo key, nothing prepared beforehand. It runs as
// the current user and, when that is root, also as an unprivileged user,
// since newcomers run both. Only the ports differ from make run's (free
// ones), so the test never collides with a gateway already running here.
func TestMakeRunDefaults(t *testing.T) {
	bin := buildSwitchyard(t)
	t.Run("current user", func(t *testing.T) { runLikeMakeRun(t, bin, nil) })
	if os.Geteuid() != 0 {
		t.Logf("running as uid %d: the unprivileged run is this one; the root run needs root", os.Geteuid())
		return
	}
	t.Run("unprivileged user", func(t *testing.T) {
		runLikeMakeRun(t, bin, &syscall.Credential{Uid: 65534, Gid: 65534}) // nobody
	})
}

// buildSwitchyard builds the binary into a directory any user can read.
func buildSwitchyard(t *testing.T) string {
	t.Helper()
	dir := worldReadableTempDir(t)
	bin := filepath.Join(dir, "switchyard")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func worldReadableTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "switchyard-makerun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runLikeMakeRun(t *testing.T, bin string, cred *syscall.Credential) {
	// The clone: an empty working directory owned by the user who runs it.
	work := worldReadableTempDir(t)
	cfg := string(mustRead(t, "../../internal/config/default.yaml"))
	for _, port := range []string{"127.0.0.1:8091", "127.0.0.1:8092", "127.0.0.1:8093", "127.0.0.1:8094"} {
		cfg = strings.ReplaceAll(cfg, port, freePort(t))
	}
	if err := os.WriteFile(filepath.Join(work, "demo.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := os.Chown(work, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "--config", "demo.yaml", "--data-dir", ".data", "--demo-key",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()

	var baseURL, key string
	for baseURL == "" || key == "" {
		line, ok := <-lines
		if !ok {
			t.Fatalf("switchyard exited before serving: %v\nstderr:\n%s", <-exited, stderr.String())
		}
		if u, ok := strings.CutPrefix(line, "Switchyard is serving the OpenAI API at "); ok {
			baseURL = u
		}
		if k, ok := strings.CutPrefix(line, "Demo API key (tier standard): "); ok {
			key = k
		}
	}
	go func() {
		for range lines { // keep draining stdout
		}
	}()

	body := `{"model":"demo/chat","messages":[{"role":"user","content":"Hello!"}]}`
	req, _ := http.NewRequest("POST", baseURL+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var cc struct {
		Object string `json:"object"`
	}
	if res.StatusCode != 200 || json.Unmarshal(b, &cc) != nil || cc.Object != "chat.completion" {
		t.Fatalf("chat completion: %d %s", res.StatusCode, b)
	}
	for _, name := range []string{"switchyard.db", "files.db", "batches.db", "responses.db", "vectorstores.db", "admin.token"} {
		if _, err := os.Stat(filepath.Join(work, ".data", name)); err != nil {
			t.Errorf("the relative data directory has no %s: %v", name, err)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err != nil {
		t.Errorf("switchyard did not exit cleanly on SIGTERM: %v\nstderr:\n%s", err, stderr.String())
	}
	// A healthy start and stop logs nothing at WARN or above: such a line
	// must always mean something to the operator. Unprivileged, the one
	// that may is the code interpreter's, where the kernel refuses
	// unprivileged user namespaces (this machine allows them).
	warned := 0
	for _, line := range strings.Split(stderr.String(), "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Level == "INFO" || rec.Level == "DEBUG" {
			continue
		}
		if cred != nil && rec.Msg == "sandbox: code interpreter unavailable" {
			warned++
			continue
		}
		t.Errorf("a healthy run logged %s: %s", rec.Level, line)
	}
	if warned > 1 {
		t.Errorf("the code interpreter's unavailability was logged %d times, want at most once", warned)
	}
	if t.Failed() {
		fmt.Fprintf(os.Stderr, "stderr of the run:\n%s\n", stderr.String())
	}
}
