package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/gateway"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
)

// fleetDSNEnv names the variable holding the test Postgres's DSN
// (storage.metadata.dsn_env).
const fleetDSNEnv = "SWITCHYARD_E2E_PG_DSN"

// TestResponsesAndVectorStoresAcrossReplicas: two gateways, each serving
// its backends in process, with storage.metadata.kind postgres on one
// database: a conversation started on one continues on the other with
// previous_response_id, and a vector store indexed through one (by exactly
// one replica) is searched through the other. The two share their data
// directory for what is not on Postgres in this branch (keys, files, the
// data key), standing in for the fleet's shared key and file stores.
func TestResponsesAndVectorStoresAcrossReplicas(t *testing.T) {
	// The package's TestMain stops the test Postgres.
	t.Setenv(fleetDSNEnv, pgtest.DSN(t))
	// Replicas of a fleet share the data key (files refuse to start without one).
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(make([]byte, envelope.KeySize)))
	extra := fmt.Sprintf(`  - id: demo/embed
    capabilities: [embeddings]
    context_window: 8191
    providers:
      - provider: fake-openai
        upstream_model: fake-embed-1
tools:
  file_search:
    embedding_model: demo/embed
storage:
  metadata:
    kind: postgres
    dsn_env: %s
`, fleetDSNEnv)
	a := newStack(t, stackOptions{extraYAML: extra})
	b := newStack(t, stackOptions{extraYAML: extra, gateway: func(o *gateway.Options) { o.DataDir = a.dataDir }})
	ctx := context.Background()
	ca := a.client()
	cb := b.client(option.WithAPIKey(a.key)) // one owner on both replicas

	// The first turn on a, the second on b.
	r1, err := ca.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello from replica a")},
	})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := cb.Responses.New(ctx, responses.ResponseNewParams{
		Model:              "demo/chat",
		PreviousResponseID: openai.String(r1.ID),
		Input:              responses.ResponseNewParamsInputUnion{OfString: openai.String("and on replica b")},
	})
	if err != nil {
		t.Fatalf("second turn on the other replica: %v", err)
	}
	if r2.OutputText() != "Echo: and on replica b" || r2.Usage.InputTokens <= r1.Usage.InputTokens {
		t.Errorf("r2: %q, input tokens %d after %d", r2.OutputText(), r2.Usage.InputTokens, r1.Usage.InputTokens)
	}
	// b's model call carried the turn a served.
	var carried bool
	for _, r := range b.upstream.all() {
		carried = carried || (strings.Contains(string(r.body), "hello from replica a") && strings.Contains(string(r.body), "and on replica b"))
	}
	if !carried {
		t.Error("the second turn's model call on b did not carry the first turn's input")
	}
	// Each replica reads what the other stored; a delete on one is seen by
	// the other.
	if got, err := ca.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{}); err != nil || got.OutputText() != r2.OutputText() {
		t.Errorf("get r2 on a: %v", err)
	}
	if err := cb.Responses.Delete(ctx, r2.ID); err != nil {
		t.Fatal(err)
	}
	_, err = ca.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	apiError(t, err, 404, "not_found")

	// A vector store created (and so indexed) through a, searched through b.
	embeds := func(s *stack) int {
		n := 0
		for _, r := range s.upstream.all() {
			if strings.Contains(string(r.body), `"fake-embed-1"`) {
				n++
			}
		}
		return n
	}
	doc := "Opening hours.\nThe depot opens at seven.\n\nA sample of the timetable: trains leave every ten minutes.\n"
	f, err := ca.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(strings.NewReader(doc), "timetable.txt", "text/plain"),
		Purpose: openai.FilePurposeAssistants,
	})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := ca.VectorStores.New(ctx, openai.VectorStoreNewParams{Name: openai.String("docs"), FileIDs: []string{f.ID}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for vs.Status != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("vector store still %s: %+v", vs.Status, vs.FileCounts)
		}
		time.Sleep(20 * time.Millisecond)
		if vs, err = cb.VectorStores.Get(ctx, vs.ID); err != nil { // polled on b
			t.Fatal(err)
		}
	}
	if vs.FileCounts.Completed != 1 {
		t.Fatalf("file counts %+v", vs.FileCounts)
	}
	// One small file, one chunk: one embeddings call, by one replica.
	if n := embeds(a) + embeds(b); n != 1 {
		t.Errorf("indexing made %d embeddings calls over both replicas, want 1", n)
	}
	// The state is in Postgres, not in the shared directory's SQLite.
	for _, db := range []string{"responses.db", "vectorstores.db"} {
		if _, err := os.Stat(filepath.Join(a.dataDir, db)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s in the data directory (%v): the SQLite store was used", db, err)
		}
	}
	pg, err := pgx.Connect(ctx, os.Getenv(fleetDSNEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	var rows, chunks int
	if err := pg.QueryRow(ctx, `SELECT (SELECT count(*) FROM responses), (SELECT count(*) FROM vector_store_chunks)`).Scan(&rows, &chunks); err != nil || rows != 1 || chunks != 1 {
		t.Errorf("Postgres holds %d responses and %d chunks (%v), want 1 and 1", rows, chunks, err)
	}
	for name, c := range map[string]openai.Client{"a": ca, "b": cb} {
		page, err := c.VectorStores.Search(ctx, vs.ID, openai.VectorStoreSearchParams{
			Query: openai.VectorStoreSearchParamsQueryUnion{OfString: openai.String("timetable sample")}})
		if err != nil {
			t.Fatalf("search on %s: %v", name, err)
		}
		if len(page.Data) == 0 || page.Data[0].FileID != f.ID || !strings.Contains(page.Data[0].Content[0].Text, "timetable") {
			t.Fatalf("search on %s: %+v", name, page.Data)
		}
	}
}
