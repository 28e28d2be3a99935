package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/backends/batches"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
)

// TestDatakeyPostgres: on fleet storage, datakey rewrap --config rewraps
// every data key in PostgreSQL (a file's, a stored response's, a vector
// store file's, a running batch's results') under the new primary KEK while
// a replica runs and writes; status then shows only the new KEK; and a
// replica started with the new KEK alone reads all of it back (its stores
// refuse to start while any data key needs a KEK they lack).
func TestDatakeyPostgres(t *testing.T) {
	bin := buildSwitchyard(t)
	dsn := pgtest.DSN(t)
	_, bucket := s3test.Bucket(t)
	oldKEK, newKEK := make([]byte, envelope.KeySize), make([]byte, envelope.KeySize)
	_, _ = rand.Read(oldKEK)
	_, _ = rand.Read(newKEK)
	oldID, newID := envelope.KeyID(oldKEK), envelope.KeyID(newKEK)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	t.Setenv("SY_TEST_S3_ACCESS", s3test.AccessKey)
	t.Setenv("SY_TEST_S3_SECRET", s3test.SecretKey)
	cfg := string(mustRead(t, "../../internal/config/default.yaml"))
	for _, port := range []string{"127.0.0.1:8091", "127.0.0.1:8092", "127.0.0.1:8093", "127.0.0.1:8094"} {
		cfg = strings.ReplaceAll(cfg, port, freePort(t))
	}
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg+fmt.Sprintf(fleetStorage, s3test.Endpoint(t), bucket)), 0o600); err != nil {
		t.Fatal(err)
	}

	// A replica on the old KEK stores one of each kind.
	g := startDatakeyGateway(t, bin, cfgPath, envelope.EncodeKey(oldKEK))
	content := []byte("The lighthouse keeper counts ships at dawn. Rotation keeps this sentence readable.")
	fileID := g.upload(t, "notes.txt", "assistants", content)
	var resp struct{ ID string }
	g.call(t, http.MethodPost, "/responses", `{"model":"demo/chat","input":"remember the lighthouse"}`, &resp)
	var vs struct{ ID string }
	g.call(t, http.MethodPost, "/vector_stores", `{"name":"notes","file_ids":["`+fileID+`"]}`, &vs)
	for deadline := time.Now().Add(30 * time.Second); ; {
		var st struct {
			FileCounts struct{ Completed, Failed int } `json:"file_counts"`
		}
		g.call(t, http.MethodGet, "/vector_stores/"+vs.ID, "", &st)
		if st.FileCounts.Completed == 1 {
			break
		}
		if st.FileCounts.Failed > 0 || time.Now().After(deadline) {
			t.Fatalf("vector store file not indexed: %+v", st.FileCounts)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A running batch's sealed results (the batches tables exist: the
	// replica migrated them).
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	oldRing, _ := envelope.NewKeyring(oldKEK)
	line := []byte(`{"id":"batch_req_1","custom_id":"a","response":{"status_code":200}}`)
	if err := batches.NewPostgresResults(pool, oldRing).Record(context.Background(), "batch_rot",
		batches.Result{Index: 0, CustomID: "a", Kind: batches.ResultOutput, Line: line}); err != nil {
		t.Fatal(err)
	}

	// Rewrap with the new KEK first, while the replica runs (and keeps
	// writing under the old one until it restarts).
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(newKEK)+","+envelope.EncodeKey(oldKEK))
	out, _, err := runCLI(t, "datakey", "rewrap", "--config", cfgPath, "--data-dir", t.TempDir())
	if err != nil {
		t.Fatalf("rewrap: %v\n%s", err, out)
	}
	for _, want := range []string{"files: rewrapped ", "responses: rewrapped 1 ", "vectorstores/vector_store_files: rewrapped 1 ",
		"batches/batch_result_keys: rewrapped 1 "} {
		if !strings.Contains(out, want) {
			t.Errorf("rewrap output lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, "datakey", "status", "--config", cfgPath, "--data-dir", t.TempDir())
	if err != nil || strings.Contains(out, "under "+oldID) || !strings.Contains(out, "responses: 1 under "+newID) ||
		!strings.Contains(out, "batches/batch_result_keys: 1 under "+newID) {
		t.Fatalf("status after rewrap (old %s, new %s): %v\n%s", oldID, newID, err, out)
	}
	// Idempotent: a second run finds nothing to do.
	if out, _, err = runCLI(t, "datakey", "rewrap", "--config", cfgPath, "--data-dir", t.TempDir()); err != nil ||
		strings.Count(out, "rewrapped 0 ") != 4 {
		t.Fatalf("second rewrap: %v\n%s", err, out)
	}

	// A replica with the new KEK alone reads everything back.
	g.stop(t)
	key := g.key // the key store is shared: the first replica's key owns the objects
	g = startDatakeyGateway(t, bin, cfgPath, envelope.EncodeKey(newKEK))
	g.key = key
	if got := g.raw(t, http.MethodGet, "/files/"+fileID+"/content", ""); !bytes.Equal(got, content) {
		t.Fatalf("file content after rotation: %q", got)
	}
	var items struct{ Data []json.RawMessage }
	g.call(t, http.MethodGet, "/responses/"+resp.ID+"/input_items", "", &items)
	if len(items.Data) == 0 || !strings.Contains(string(items.Data[0]), "remember the lighthouse") {
		t.Fatalf("stored response input after rotation: %s", items.Data)
	}
	var hits struct {
		Data []struct {
			Content []struct{ Text string }
		}
	}
	g.call(t, http.MethodPost, "/vector_stores/"+vs.ID+"/search", `{"query":"lighthouse keeper"}`, &hits)
	if len(hits.Data) == 0 || len(hits.Data[0].Content) == 0 || !strings.Contains(hits.Data[0].Content[0].Text, "lighthouse") {
		t.Fatalf("vector store search after rotation: %+v", hits)
	}
	newRing, _ := envelope.NewKeyring(newKEK)
	for r, err := range batches.NewPostgresResults(pool, newRing).Recorded(context.Background(), "batch_rot") {
		if err != nil || !bytes.Equal(r.Line, line) {
			t.Fatalf("batch result after rotation: %q, %v", r.Line, err)
		}
	}
}

// datakeyGateway is a `switchyard run` replica of the fleet configuration.
type datakeyGateway struct {
	base, key string
	stopped   bool
	cmd       *exec.Cmd
	exited    chan error
	stderr    *lockedBuffer
}

func startDatakeyGateway(t *testing.T, bin, cfgPath, kek string) *datakeyGateway {
	t.Helper()
	g := &datakeyGateway{exited: make(chan error, 1), stderr: &lockedBuffer{}}
	g.cmd = exec.Command(bin, "run", "--config", cfgPath, "--data-dir", t.TempDir(), "--demo-key",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	g.cmd.Env = append(os.Environ(), envelope.EnvKey+"="+kek)
	g.cmd.Stderr = g.stderr
	stdout, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		g.exited <- g.cmd.Wait()
	}()
	t.Cleanup(func() { g.stop(t) })
	for g.base == "" || g.key == "" {
		line, ok := <-lines
		if !ok {
			t.Fatalf("switchyard run exited before serving: %v\n%s", <-g.exited, g.stderr.String())
		}
		if u, ok := strings.CutPrefix(line, "Switchyard is serving the OpenAI API at "); ok {
			g.base = u
		}
		if k, ok := strings.CutPrefix(line, "Demo API key (tier standard): "); ok {
			g.key = k
		}
	}
	go func() {
		for range lines {
		}
	}()
	return g
}

func (g *datakeyGateway) stop(t *testing.T) {
	if g.stopped {
		return
	}
	g.stopped = true
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(30 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
		t.Errorf("switchyard run did not stop on SIGTERM in 30s")
	}
}

func (g *datakeyGateway) raw(t *testing.T, method, path, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, g.base+path, strings.NewReader(body))
	req.Header.Set("authorization", "Bearer "+g.key)
	req.Header.Set("content-type", "application/json")
	status, b := do(t, req)
	if status != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, status, b)
	}
	return b
}

func (g *datakeyGateway) call(t *testing.T, method, path, body string, out any) {
	t.Helper()
	if err := json.Unmarshal(g.raw(t, method, path, body), out); err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
}

func (g *datakeyGateway) upload(t *testing.T, name, purpose string, content []byte) string {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("purpose", purpose)
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(content)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, g.base+"/files", &body)
	req.Header.Set("authorization", "Bearer "+g.key)
	req.Header.Set("content-type", mw.FormDataContentType())
	var f struct{ ID string }
	if status, b := do(t, req); status != http.StatusOK || json.Unmarshal(b, &f) != nil || f.ID == "" {
		t.Fatalf("upload: %d %s", status, b)
	}
	return f.ID
}

// TestDatakeyPostgresPagesAndLockedRows: rewrap goes through more rows than
// one transaction takes, skips a row a replica holds locked rather than
// waiting for it, says so, and a second run finishes it.
func TestDatakeyPostgresPagesAndLockedRows(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	store, err := batches.OpenPostgresStore(ctx, dsn, pgdb.Pool{}) // creates the batches tables
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(cfgPath, append(mustRead(t, "../../internal/config/default.yaml"),
		"\nstorage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_TEST_PG_DSN\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	oldKEK, newKEK := make([]byte, envelope.KeySize), make([]byte, envelope.KeySize)
	_, _ = rand.Read(oldKEK)
	_, _ = rand.Read(newKEK)
	oldRing, _ := envelope.NewKeyring(oldKEK)
	const n = 2*pgRewrapBatch + 50
	old := batches.NewPostgresResults(store.Pool(), oldRing)
	for i := range n {
		if err := old.Record(ctx, fmt.Sprintf("batch_%d", i), batches.Result{CustomID: "a", Kind: batches.ResultOutput, Line: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	// A replica's transaction holds one row.
	tx, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM batch_result_keys WHERE batch_id = 'batch_7' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	t.Setenv(envelope.EnvKey, envelope.EncodeKey(newKEK)+","+envelope.EncodeKey(oldKEK))
	oldID := envelope.KeyID(oldKEK)
	out, _, err := runCLI(t, "datakey", "rewrap", "--config", cfgPath)
	if err != nil || !strings.Contains(out, fmt.Sprintf("batches/batch_result_keys: rewrapped %d ", n-1)) ||
		!strings.Contains(out, "batches/batch_result_keys: still 1 under "+oldID) {
		t.Fatalf("rewrap with a row locked: %v\n%s", err, out)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCLI(t, "datakey", "rewrap", "--config", cfgPath)
	if err != nil || !strings.Contains(out, "batches/batch_result_keys: rewrapped 1 ") || strings.Contains(out, "still") {
		t.Fatalf("second rewrap: %v\n%s", err, out)
	}
	newRing, _ := envelope.NewKeyring(newKEK)
	fresh := batches.NewPostgresResults(store.Pool(), newRing)
	for i := range n {
		for r, err := range fresh.Recorded(ctx, fmt.Sprintf("batch_%d", i)) {
			if err != nil || string(r.Line) != `{"n":1}` {
				t.Fatalf("batch_%d after rewrap: %q, %v", i, r.Line, err)
			}
		}
	}
}

// TestDatakeyPostgresRotateRetire: with a key file, rotate adds a KEK and
// rewraps the fleet's data keys under it, status counts them per table,
// and retire drops the old KEK only once no row in PostgreSQL uses it.
func TestDatakeyPostgresRotateRetire(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	t.Setenv("SY_TEST_PG_DSN", dsn)
	store, err := batches.OpenPostgresStore(ctx, dsn, pgdb.Pool{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfgPath := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(cfgPath, append(mustRead(t, "../../internal/config/default.yaml"),
		"\nstorage:\n  metadata:\n    kind: postgres\n    dsn_env: SY_TEST_PG_DSN\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	oldKEK := make([]byte, envelope.KeySize)
	_, _ = rand.Read(oldKEK)
	keyFile := filepath.Join(t.TempDir(), "kek")
	if err := envelope.WriteKeyFile(keyFile, [][]byte{oldKEK}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envelope.EnvKey, "")
	t.Setenv(envelope.EnvKeyFile, keyFile)
	oldRing, _ := envelope.NewKeyring(oldKEK)
	if err := batches.NewPostgresResults(store.Pool(), oldRing).Record(ctx, "batch_r", batches.Result{CustomID: "a", Kind: batches.ResultOutput, Line: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	oldID := envelope.KeyID(oldKEK)
	dir := t.TempDir()

	out, _, err := runCLI(t, "datakey", "rotate", "--config", cfgPath, "--data-dir", dir)
	if err != nil || !strings.Contains(out, "batches/batch_result_keys: rewrapped 1 ") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	keys, err := envelope.ParseKeys(readFile(t, keyFile))
	if err != nil || len(keys) != 2 || envelope.KeyID(keys[1]) != oldID {
		t.Fatalf("key file after rotate: %d keys, %v", len(keys), err)
	}
	newID := envelope.KeyID(keys[0])
	if out, _, err = runCLI(t, "datakey", "status", "--config", cfgPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "batches/batch_result_keys: 1 under "+newID) {
		t.Fatalf("status: %v\n%s", err, out)
	}
	// A row written under the old KEK meanwhile (a replica not yet
	// restarted) keeps it from being retired.
	if err := batches.NewPostgresResults(store.Pool(), oldRing).Record(ctx, "batch_late", batches.Result{CustomID: "a", Kind: batches.ResultOutput, Line: []byte(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	if out, _, err = runCLI(t, "datakey", "retire", "--config", cfgPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "Retired 0 KEK(s)") || !strings.Contains(out, "Kept "+oldID) {
		t.Fatalf("retire with a row still under the old KEK: %v\n%s", err, out)
	}
	if out, _, err = runCLI(t, "datakey", "rewrap", "--config", cfgPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "batches/batch_result_keys: rewrapped 1 ") {
		t.Fatalf("rewrap: %v\n%s", err, out)
	}
	if out, _, err = runCLI(t, "datakey", "retire", "--config", cfgPath, "--data-dir", dir); err != nil ||
		!strings.Contains(out, "Retired 1 KEK(s)") || !strings.Contains(out, oldID) {
		t.Fatalf("retire: %v\n%s", err, out)
	}
	keys, _ = envelope.ParseKeys(readFile(t, keyFile))
	if len(keys) != 1 || envelope.KeyID(keys[0]) != newID {
		t.Fatalf("key file after retire: %d keys", len(keys))
	}
	newRing, _ := envelope.NewKeyring(keys[0])
	for _, id := range []string{"batch_r", "batch_late"} {
		for r, err := range batches.NewPostgresResults(store.Pool(), newRing).Recorded(ctx, id) {
			if err != nil || len(r.Line) == 0 {
				t.Fatalf("%s with the new KEK alone: %q, %v", id, r.Line, err)
			}
		}
	}
}
