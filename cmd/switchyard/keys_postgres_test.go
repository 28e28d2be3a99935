package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// `switchyard keys --config` with PostgreSQL storage manages the keys in
// the database every replica reads, not a data directory's.
func TestKeysCLIOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) + `
storage:
  metadata:
    kind: postgres
    dsn_env: SY_TEST_PG_DSN
`
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "unused")
	out, errOut, err := runCLI(t, "keys", "create", "--config", cfg, "--data-dir", dataDir, "--name", "fleet")
	if err != nil {
		t.Fatalf("keys create: %v\n%s", err, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	secret := lines[len(lines)-1]

	store, err := keys.OpenPostgres(context.Background(), dsn, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	k, err := store.Lookup(context.Background(), secret)
	if err != nil {
		t.Fatalf("the key the CLI created is not in PostgreSQL: %v", err)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the CLI touched --data-dir with PostgreSQL storage: %v", err)
	}
	if out, _, err := runCLI(t, "keys", "list", "--config", cfg); err != nil || !strings.Contains(out, k.ID) {
		t.Fatalf("keys list = %v\n%s", err, out)
	}
	if _, errOut, err := runCLI(t, "keys", "revoke", "--config", cfg, k.ID); err != nil {
		t.Fatalf("keys revoke: %v\n%s", err, errOut)
	}
	if _, err := store.Lookup(context.Background(), secret); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("Lookup after keys revoke: %v, want ErrNotFound", err)
	}
}
