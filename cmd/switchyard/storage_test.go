package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
)

// TestMain stops the PostgreSQL and versitygw servers the storage tests
// start (see pgtest and s3test).
func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range []func() error{pgtest.Stop, s3test.Stop} {
		if err := stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

const fleetStorage = `
storage:
  metadata:
    kind: postgres
    dsn_env: SY_TEST_PG_DSN
  blobs:
    kind: s3
    endpoint: %s
    bucket: %s
    region: us-east-1
    path_style: true
    access_key_env: SY_TEST_S3_ACCESS
    secret_key_env: SY_TEST_S3_SECRET
`

// validate --check-connections reaches the real PostgreSQL and S3 store,
// reports the schema versions, and names the wrong setting when a check
// fails.
func TestValidateCheckConnections(t *testing.T) {
	dsn := pgtest.DSN(t)
	_, bucket := s3test.Bucket(t)
	pool, err := pgdb.Open(context.Background(), dsn, "keys", []string{"CREATE TABLE k (id text)"}, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()

	writeConfig := func(bucket string) string {
		p := filepath.Join(t.TempDir(), "fleet.yaml")
		src := string(mustRead(t, "../../internal/config/default.yaml")) + fmt.Sprintf(fleetStorage, s3test.Endpoint(t), bucket)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := writeConfig(bucket)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	t.Setenv("SY_TEST_S3_ACCESS", s3test.AccessKey)
	t.Setenv("SY_TEST_S3_SECRET", s3test.SecretKey)

	out, _, err := runCLI(t, "validate", "--config", cfg, "--check-connections")
	if err != nil {
		t.Fatalf("validate --check-connections: %v\n%s", err, out)
	}
	t.Logf("validate --check-connections:\n%s", out)
	for _, want := range []string{"storage.metadata: postgres ok", "PostgreSQL 1", "schema versions: keys 1", fmt.Sprintf("storage.blobs: s3 ok (bucket %q", bucket), ": ok ("} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	for _, tc := range []struct {
		name    string
		cfg     string
		env     map[string]string
		args    []string
		want    []string
		notWant string
	}{
		{"DSN variable unset", cfg, map[string]string{"SY_TEST_PG_DSN": ""}, nil,
			[]string{"storage.metadata.dsn_env: environment variable SY_TEST_PG_DSN is not set"}, ""},
		{"missing database", cfg, map[string]string{"SY_TEST_PG_DSN": dsn + " dbname=no_such_db password=hunter2"}, nil,
			[]string{"storage.metadata.dsn_env (the DSN in $SY_TEST_PG_DSN)", "no_such_db", "does not exist"}, "hunter2"},
		{"unreachable server", cfg, map[string]string{"SY_TEST_PG_DSN": "host=127.0.0.1 port=1 user=x dbname=y connect_timeout=2"}, nil,
			[]string{"storage.metadata.dsn_env", "check the DSN's host and port"}, ""},
		{"DSN does not parse", cfg, map[string]string{"SY_TEST_PG_DSN": "postgres://u:hunter2@h:notaport/db"}, nil,
			[]string{"storage.metadata.dsn_env", "does not parse"}, "hunter2"},
		{"missing bucket", writeConfig("no-such-bucket"), nil, nil,
			[]string{"storage.blobs.bucket: bucket \"no-such-bucket\" does not exist"}, ""},
		{"wrong secret", cfg, map[string]string{"SY_TEST_S3_SECRET": "sekrit-9f3a"}, nil,
			[]string{"storage.blobs.access_key_env/secret_key_env ($SY_TEST_S3_ACCESS/$SY_TEST_S3_SECRET)", "refused"}, "sekrit-9f3a"},
		{"unset secret with --skip-credentials", cfg, map[string]string{"SY_TEST_S3_SECRET": ""}, []string{"--skip-credentials"},
			[]string{"storage.blobs.access_key_env/secret_key_env", "not set"}, ""},
		{"unreachable store", writeConfig(bucket), nil, nil, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "unreachable store" {
				p := filepath.Join(t.TempDir(), "down.yaml")
				src := string(mustRead(t, "../../internal/config/default.yaml")) + fmt.Sprintf(fleetStorage, "http://127.0.0.1:1", bucket)
				if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
					t.Fatal(err)
				}
				tc.cfg = p
				tc.want = []string{"storage.blobs.endpoint (http://127.0.0.1:1): cannot reach the store"}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := runCLI(t, append([]string{"validate", "--config", tc.cfg, "--check-connections"}, tc.args...)...)
			if err == nil {
				t.Fatal("validate succeeded")
			}
			t.Logf("%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error shows the secret %q:\n%v", tc.notWant, err)
			}
		})
	}
}

// Without --check-connections, validate connects to nothing.
func TestValidateFleetConfigWithoutConnecting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fleet.yaml")
	src := string(mustRead(t, "../../internal/config/default.yaml")) + fmt.Sprintf(fleetStorage, "http://127.0.0.1:1", "b-1")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SY_TEST_PG_DSN", "host=127.0.0.1 port=1")
	t.Setenv("SY_TEST_S3_ACCESS", "a")
	t.Setenv("SY_TEST_S3_SECRET", "s")
	if out, _, err := runCLI(t, "validate", "--config", p); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("validate: %v %s", err, out)
	}
}
