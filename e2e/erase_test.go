package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// dataDirContaining lists the files under dir whose bytes hold needle.
func dataDirContaining(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestContentAtRestAndErasure: through the gateway with openai-go, a
// stored response's prompt and an uploaded file's content are nowhere in
// the data directory in the clear, the API returns them unchanged, and
// after the SDK deletes them their data keys are gone from the databases.
func TestContentAtRestAndErasure(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	c := s.client()
	const promptMarker = "erase-prompt-e2e-6d1f0b"
	const fileMarker = "erase-file-e2e-a83c55"

	r, err := c.Responses.New(ctx, responses.ResponseNewParams{
		Model: "demo/chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(promptMarker)},
	})
	if err != nil {
		t.Fatal(err)
	}
	content := []byte(`{"note":"` + fileMarker + `"}` + "\n")
	f, err := c.Files.New(ctx, openai.FileNewParams{
		File:    openai.File(bytes.NewReader(content), "notes.jsonl", "application/jsonl"),
		Purpose: openai.FilePurposeUserData,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{promptMarker, fileMarker} {
		if found := dataDirContaining(t, s.dataDir, []byte(m)); len(found) > 0 {
			t.Errorf("%q is in the clear in %v", m, found)
		}
	}
	items, err := c.Responses.InputItems.List(ctx, r.ID, responses.InputItemListParams{})
	if err != nil || len(items.Data) != 1 || !bytes.Contains([]byte(items.Data[0].RawJSON()), []byte(promptMarker)) {
		t.Fatalf("input items: %+v, %v", items, err)
	}
	dl, err := c.Files.Content(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(dl.Body)
	dl.Body.Close()
	if !bytes.Equal(got, content) {
		t.Fatalf("content = %q", got)
	}

	if err := c.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if d, err := c.Files.Delete(ctx, f.ID); err != nil || !d.Deleted {
		t.Fatalf("delete file: %+v, %v", d, err)
	}
	for db, id := range map[string]string{"responses.db": r.ID, "files.db": f.ID} {
		if n := dataKeys(t, filepath.Join(s.dataDir, db), id); n != 0 {
			t.Errorf("%s: %d data keys for %s after the delete", db, n, id)
		}
	}
}

// dataKeys counts the data keys of object id in the database at path.
func dataKeys(t *testing.T, path, id string) int {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitedb.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM data_keys WHERE object_id = ?`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
