// Package testserver holds what the real-server test helpers (pgtest,
// s3test, ratelimittest's Redis) share: the rule for a server that cannot
// be had, and the TestMain that stops what the tests started.
package testserver

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// Unavailable reports that the server what could not be started: the test
// fails in CI (CI set), where checking less must never pass, and skips
// elsewhere, saying why (the named check does not run against the server).
func Unavailable(t testing.TB, what, check string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not available in CI: %v", what, err)
	}
	t.Skipf("SKIP: %s is not available, so %s: %v", what, check, err)
}

// Main runs the package's tests, then each stop (the servers the tests
// started), and exits with the tests' status, or 1 when a stop failed.
// Call it from TestMain.
func Main(m *testing.M, stops map[string]func() error) {
	code := m.Run()
	for name, stop := range stops {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Stop ends a server process the way it shuts down cleanly (sig), kills it
// after grace, waits for it (done closes when it has exited), and removes
// its directory. log is its output, quoted when it had to be killed.
func Stop(name string, p *os.Process, done <-chan struct{}, sig os.Signal, grace time.Duration, log fmt.Stringer, dir string) error {
	_ = p.Signal(sig)
	var err error
	select {
	case <-done:
	case <-time.After(grace):
		_ = p.Kill()
		<-done
		err = fmt.Errorf("%s did not stop in %v; killed it\n%s", name, grace, log.String())
	}
	if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// Buffer collects a server process's output while it runs: a bytes.Buffer
// safe for the process's writer and the test's reads at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
