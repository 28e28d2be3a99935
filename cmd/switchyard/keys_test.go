package main

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/keys"
)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestKeysLifecycleCLI(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	if _, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--tier", "enterprise", "--name", "big"); err == nil ||
		!strings.Contains(err.Error(), "no limits of its own") {
		t.Errorf("enterprise key without limits: err = %v", err)
	}
	if _, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--name", "x\x1b]0;owned\x07"); err == nil ||
		!strings.Contains(err.Error(), "control characters") {
		t.Errorf("name with control characters: err = %v", err)
	}
	if _, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--name", "x", "--models", "nope/none"); err == nil ||
		!strings.Contains(err.Error(), "not served") {
		t.Errorf("unknown model: err = %v", err)
	}
	out, _, err := runCLI(t, "keys", "create", "--data-dir", dir, "--tier", "enterprise", "--name", "big",
		"--rpm", "500", "--tpm", "900000", "--models", "demo/chat")
	if err != nil {
		t.Fatal(err)
	}
	secret := lastLine(out)
	store, err := keys.OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k, err := store.Lookup(ctx, secret)
	if err != nil || k.RPM != 500 || k.TPM != 900000 || len(k.Models) != 1 {
		t.Fatalf("created key = %+v, %v", k, err)
	}

	// show, by id and by secret; never the secret itself.
	for _, arg := range []string{k.ID, secret} {
		out, _, err := runCLI(t, "keys", "show", "--data-dir", dir, arg)
		if err != nil || !strings.Contains(out, k.ID) || !strings.Contains(out, "rpm 500 tpm 900000 models demo/chat") || strings.Contains(out, secret) {
			t.Errorf("show %.12s: %v\n%s", arg, err, out)
		}
	}

	// set-tier with the flags after the arguments.
	out, _, err = runCLI(t, "keys", "set-tier", "--data-dir", dir, k.ID, "standard", "--models", "*")
	if err != nil || !strings.Contains(out, "standard") || !regexp.MustCompile(`limits:\s+tier\n`).MatchString(out) {
		t.Errorf("set-tier: %v\n%s", err, out)
	}
	if k, _ = store.Get(ctx, k.ID); k.Tier != "standard" || k.RPM != 0 || k.Models != nil {
		t.Errorf("after set-tier: %+v", k)
	}
	if _, _, err := runCLI(t, "keys", "set-tier", "--data-dir", dir, k.ID); err == nil {
		t.Error("set-tier without a tier succeeded")
	}

	// rotate: the new key alone on the last line; the old one keeps working
	// for the grace period.
	out, _, err = runCLI(t, "keys", "rotate", "--data-dir", dir, "--grace", "1h", k.ID)
	if err != nil {
		t.Fatal(err)
	}
	newSecret := lastLine(out)
	if !strings.HasPrefix(newSecret, "sk-sy-") || newSecret == secret {
		t.Fatalf("rotate output:\n%s", out)
	}
	nk, err := store.Lookup(ctx, newSecret)
	if err != nil || nk.LimitID() != k.ID {
		t.Errorf("new key = %+v, %v", nk, err)
	}
	if _, err := store.Lookup(ctx, secret); err != nil {
		t.Errorf("old key stopped during its grace period: %v", err)
	}
	list, _, _ := runCLI(t, "keys", "list", "--data-dir", dir)
	if !strings.Contains(list, "rotated to "+nk.ID) {
		t.Errorf("list does not show the rotation:\n%s", list)
	}

	// rotate with no grace ends the key at once.
	if _, _, err := runCLI(t, "keys", "rotate", "--data-dir", dir, "--grace", "0s", newSecret); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Lookup(ctx, newSecret); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("key rotated without grace still works: %v", err)
	}

	if _, _, err := runCLI(t, "keys", "revoke", "--data-dir", dir, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Lookup(ctx, secret); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("revoked key works: %v", err)
	}
	if _, _, err := runCLI(t, "keys", "frobnicate", "--data-dir", dir); err == nil {
		t.Error("unknown subcommand accepted")
	}
}

func TestAdminToken(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(adminTokenEnv, "")
	tok, src, err := adminToken("", dir)
	if err != nil || len(tok) < 40 || !strings.Contains(src, "(new)") {
		t.Fatalf("generated token %q from %q: %v", tok, src, err)
	}
	again, src, err := adminToken("", dir)
	if err != nil || again != tok || strings.Contains(src, "(new)") {
		t.Errorf("second start: %q from %q (%v), want the same token from the file", again, src, err)
	}
	t.Setenv(adminTokenEnv, "from-the-environment-123")
	if tok, src, _ := adminToken("", dir); tok != "from-the-environment-123" || src != "$"+adminTokenEnv {
		t.Errorf("env token: %q from %q", tok, src)
	}
	t.Setenv(adminTokenEnv, "")
	if _, _, err := adminToken(dir+"/missing", dir); err == nil {
		t.Error("a missing --admin-token-file was accepted")
	}
	for _, tt := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"127.0.0.1:8081", false, true},
		{"[::1]:8081", false, true},
		{"localhost:8081", false, true},
		{"0.0.0.0:8081", false, false},
		{"0.0.0.0:8081", true, true},
		{"10.1.2.3:8081", false, false},
	} {
		if err := checkAdminAddr(tt.addr, tt.insecure); (err == nil) != tt.ok {
			t.Errorf("checkAdminAddr(%q, %v) = %v", tt.addr, tt.insecure, err)
		}
	}
}
