package keys

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// cliHelperEnv, when set, turns the test binary into a stand-in for
// "switchyard keys create/revoke" run against the data directory it names.
const cliHelperEnv = "SWITCHYARD_KEYS_TEST_CLI_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(cliHelperEnv); dir != "" {
		if err := cliHelper(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	// The Postgres runs share one throwaway cluster (pgtest).
	if err := pgtest.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// cliHelper creates ten keys, revoking every other one, and prints
// "<active|revoked> <secret>" per key.
func cliHelper(dir string) error {
	ctx := context.Background()
	s, err := OpenSQLite(ctx, dir)
	if err != nil {
		return err
	}
	defer s.Close()
	for i := range 10 {
		secret, k, err := s.Create(ctx, fmt.Sprint("cli ", i), "free")
		if err != nil {
			return err
		}
		state := "active"
		if i%2 == 1 {
			if err := s.Revoke(ctx, k.ID); err != nil {
				return err
			}
			state = "revoked"
		}
		fmt.Println(state, secret)
	}
	return nil
}

// TestCrossProcess runs CLI processes against the directory a gateway Store
// has open, while the gateway keeps reading and writing, so that locking is
// exercised across processes and not only across connections of one process.
func TestCrossProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts subprocesses")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Skip(err)
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	gw := openStore(t, dir)
	gwSecret, _ := mustCreate(t, gw, "gateway", "free")

	const procs = 3
	outs := make([]bytes.Buffer, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(exe, "-test.run=^$")
			cmd.Env = append(os.Environ(), cliHelperEnv+"="+dir)
			cmd.Stdout = &outs[i]
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("cli %d: %w: %s", i, err, stderr.Bytes())
			}
		})
	}
	// Meanwhile the gateway keeps serving and writing.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		if _, err := gw.Lookup(ctx, gwSecret); err != nil {
			t.Fatalf("gateway Lookup during CLI writes: %v", err)
		}
		if _, _, err := gw.Create(ctx, "gateway side", "free"); err != nil {
			t.Fatalf("gateway Create during CLI writes: %v", err)
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	n := 0
	for i := range outs {
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			state, secret, _ := strings.Cut(sc.Text(), " ")
			_, err := gw.Lookup(ctx, secret)
			switch {
			case state == "active" && err != nil:
				t.Errorf("CLI-created key: Lookup err = %v", err)
			case state == "revoked" && !errors.Is(err, ErrNotFound):
				t.Errorf("CLI-revoked key: Lookup err = %v, want ErrNotFound", err)
			}
			n++
		}
	}
	if n != procs*10 {
		t.Errorf("CLI processes reported %d keys, want %d", n, procs*10)
	}
}
