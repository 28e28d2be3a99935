package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// `switchyard backends` with storage.metadata.kind postgres keeps stored
// responses and vector stores in PostgreSQL: it migrates their schemas at
// start and creates no SQLite database for them.
func TestBackendsCommandUsesPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	// Replicas of a fleet share the data key (files refuse to start without one).
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	t.Setenv(gateway.InternalTokenEnv, strings.Repeat("t", 32))
	cfg := filepath.Join(t.TempDir(), "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) +
		"\nstorage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_TEST_PG_DSN\n"
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- cmdBackends(ctx, []string{"--listen", "127.0.0.1:0", "--data-dir", dataDir, "--config", cfg,
			"--gateway-url", "http://127.0.0.1:9/v1"}, w, io.Discard)
		w.Close()
	}()
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "backends serving on") {
	}
	go io.Copy(io.Discard, out)
	versions, err := func() (map[string]int64, error) {
		pool, err := pgdb.Open(ctx, dsn, "probe", nil, pgdb.Pool{})
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		return pgdb.SchemaVersions(ctx, pool)
	}()
	if err != nil {
		t.Fatal(err)
	}
	if versions["responses"] < 1 || versions["vectorstores"] < 1 || versions["conversations"] < 1 {
		t.Errorf("schema versions %v: the responses, conversations and vector stores were not opened on PostgreSQL", versions)
	}
	for _, db := range []string{"responses.db", "vectorstores.db", "conversations.db"} {
		if _, err := os.Stat(filepath.Join(dataDir, db)); err == nil {
			t.Errorf("%s created: the SQLite store was used", db)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("backends: %v", err)
	}
}
