package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
)

func TestAdminAddressChoice(t *testing.T) {
	withAddr := &config.Config{Listeners: []config.Listener{{Name: "public", AdminAddress: "127.0.0.1:9555"}}}
	without := &config.Config{Listeners: []config.Listener{{Name: "public"}}}
	for _, tc := range []struct {
		flag    string
		flagSet bool
		cfg     *config.Config
		want    string
	}{
		{"", false, without, "127.0.0.1:0"},
		{"", false, withAddr, "127.0.0.1:9555"},
		{"127.0.0.1:9600", true, withAddr, "127.0.0.1:9600"},
		{"", true, withAddr, ""},
		{"off", true, without, ""},
	} {
		if got := adminAddress(tc.flag, tc.flagSet, tc.cfg); got != tc.want {
			t.Errorf("adminAddress(%q, %v, %v) = %q, want %q", tc.flag, tc.flagSet, tc.cfg.Listeners[0].AdminAddress, got, tc.want)
		}
	}
}

// startRun runs `switchyard run` with args until the test ends and
// returns the admin URL it prints, failing if it exits first.
func startRun(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"run", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, args...), pw, io.Discard)
		done <- err
		pw.CloseWithError(fmt.Errorf("run ended: %v", err))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Admin API at "); ok {
			go func() { _, _ = io.Copy(io.Discard, pr) }() // keep run's writes from blocking
			u, _, _ := strings.Cut(rest, "/admin/")
			return u
		}
	}
	t.Fatalf("no admin address printed: %v", sc.Err())
	return ""
}

// TestTwoGatewaysAdminPorts: two gateways with different configurations,
// neither naming an admin address, start side by side (each admin API on
// a free port, printed at start); a configured admin_address is used, and
// --admin-listen overrides it.
func TestTwoGatewaysAdminPorts(t *testing.T) {
	up := httptest.NewServer(fake.NewOpenAI(fake.Options{}))
	t.Cleanup(up.Close)
	writeConfig := func(model, admin string) string {
		y := "listeners:\n  - name: public\n    address: 127.0.0.1:18080\n"
		if admin != "" {
			y += "    admin_address: " + admin + "\n"
		}
		y += fmt.Sprintf("providers:\n  - {name: p, kind: openai, base_url: %q}\nmodels:\n  - {id: %s, providers: [{provider: p, upstream_model: m}]}\n",
			up.URL+"/v1", model)
		path := filepath.Join(t.TempDir(), "gw.yaml")
		if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	a := startRun(t, "--config", writeConfig("acme/one", ""))
	b := startRun(t, "--config", writeConfig("acme/two", ""))
	if a == b || a == "" || strings.HasSuffix(a, ":8081") {
		t.Errorf("admin APIs at %q and %q", a, b)
	}

	configured := freePort(t)
	if got := startRun(t, "--config", writeConfig("acme/three", configured)); got != "http://"+configured {
		t.Errorf("admin API at %q, want the configured %s", got, configured)
	}
	override := freePort(t)
	if got := startRun(t, "--config", writeConfig("acme/four", freePort(t)), "--admin-listen", override); got != "http://"+override {
		t.Errorf("admin API at %q, want the flag's %s", got, override)
	}
}
