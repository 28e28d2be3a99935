package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// TestMain stops the PostgreSQL and S3 servers the fleet tests start.
func TestMain(m *testing.M) {
	testserver.Main(m, map[string]func() error{"pgtest": pgtest.Stop, "s3test": s3test.Stop})
}

// fleetPair starts two gateways, each with its own data directory and
// in-process backends, on one PostgreSQL database and one S3 bucket: two
// replicas of a fleet.
func fleetPair(t *testing.T) (a, b *stack) {
	t.Helper()
	storage := fleetStorageYAML(t)
	a = newStack(t, stackOptions{extraYAML: storage})
	b = newStack(t, stackOptions{extraYAML: storage})
	return a, b
}

// fleetStorageYAML is the storage section of a fleet on a new PostgreSQL
// database and S3 bucket, with the variables it names set and a data key
// every replica shares.
func fleetStorageYAML(t *testing.T) string {
	t.Helper()
	_, bucket := s3test.Bucket(t)
	t.Setenv("SY_E2E_PG_DSN", pgtest.DSN(t))
	t.Setenv("SY_E2E_S3_ACCESS", s3test.AccessKey)
	t.Setenv("SY_E2E_S3_SECRET", s3test.SecretKey)
	key := make([]byte, envelope.KeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(key))
	return fmt.Sprintf(`
storage:
  metadata:
    kind: postgres
    dsn_env: SY_E2E_PG_DSN
  blobs:
    kind: s3
    endpoint: %s
    bucket: %s
    region: us-east-1
    path_style: true
    access_key_env: SY_E2E_S3_ACCESS
    secret_key_env: SY_E2E_S3_SECRET
`, s3test.Endpoint(t), bucket)
}

// TestFleetFilesAcrossReplicas: a file uploaded through one replica is
// downloaded byte-identical through the other, and deleted through the
// other it is gone for the first.
func TestFleetFilesAcrossReplicas(t *testing.T) {
	a, b := fleetPair(t)
	ctx := context.Background()
	// One owner on both: the key store is shared, so a's key works on b.
	ca, cb := a.client(), b.client(option.WithAPIKey(a.key))
	content := make([]byte, 3<<20+17) // several sealed segments
	if _, err := rand.Read(content); err != nil {
		t.Fatal(err)
	}
	f, err := ca.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(bytes.NewReader(content), "data.bin", "application/octet-stream"),
		Purpose: openai.FilePurposeUserData,
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := cb.Files.Get(ctx, f.ID)
	if err != nil || got.Bytes != int64(len(content)) || got.Filename != "data.bin" {
		t.Fatalf("Get through the other replica = %+v, %v", got, err)
	}
	resp, err := cb.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, content) {
		t.Fatalf("content through the other replica: %d bytes (%v), want the %d uploaded", len(body), err, len(content))
	}
	if _, err := cb.Files.Delete(ctx, f.ID); err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := ca.Files.Get(ctx, f.ID); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("Get through the first replica after a delete through the other: %v, want 404", err)
	}
}

// TestFleetRevocationAcrossReplicas: a key revoked through one replica is
// refused by the other within 2 s, which was serving it from its cache.
func TestFleetRevocationAcrossReplicas(t *testing.T) {
	a, b := fleetPair(t)
	ctx := context.Background()
	cb := b.client()
	chat := func() error {
		_, err := cb.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "demo/chat",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		})
		return err
	}
	if err := chat(); err != nil {
		t.Fatalf("chat through the second replica before the revocation: %v", err)
	}
	if err := a.gw.Keys.Revoke(ctx, b.key); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	for {
		err := chat()
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusUnauthorized {
			t.Logf("refused %s after the revocation", time.Since(revoked))
			return
		}
		if err != nil {
			t.Fatalf("chat after the revocation: %v, want 401 or success", err)
		}
		if time.Since(revoked) > 2*time.Second {
			t.Fatal("the second replica still accepts the key 2s after its revocation through the first")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
