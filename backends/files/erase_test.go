package files

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/envelope"
)

// filesContaining names the files under dir whose bytes contain needle.
func filesContaining(t *testing.T, dir string, needle []byte) []string {
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

// TestBlobsSealedAndDeleteErases: an uploaded file's content is on disk
// only sealed, downloads are unchanged, and a delete takes the data key
// with it, so a copy of the blob taken before the delete no longer opens.
func TestBlobsSealedAndDeleteErases(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	const marker = "erase-me-file-91d0c3aa"
	// Over several segments, the marker in the last one.
	content := strings.Repeat("line of a batch input file\n", 2*envelope.SegmentSize/27+5) + marker + "\n"

	rec := upload(t, s, "owner-a", part{"purpose", "", "user_data"}, part{"file", "in.jsonl", content})
	if rec.Code != http.StatusOK {
		t.Fatalf("upload: %d %s", rec.Code, rec.Body)
	}
	var obj struct {
		ID    string `json:"id"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &obj); err != nil || obj.Bytes != int64(len(content)) {
		t.Fatalf("upload: %s, %v", rec.Body, err)
	}
	if f := filesContaining(t, dir, []byte(marker)); len(f) > 0 {
		t.Errorf("the content is in the clear in %v", f)
	}
	dl := serve(t, s, http.MethodGet, "/v1/files/"+obj.ID+"/content", "owner-a", "", nil)
	if dl.Code != http.StatusOK || dl.Body.String() != content || dl.Header().Get("Content-Length") != itoa(len(content)) {
		t.Fatalf("download: %d, %d bytes, Content-Length %s", dl.Code, dl.Body.Len(), dl.Header().Get("Content-Length"))
	}
	// Ranged reads of the content (vector store indexing, batch inputs).
	_, c, err := s.Open(ctx, "owner-a", obj.ID)
	if err != nil {
		t.Fatal(err)
	}
	tail := make([]byte, len(marker))
	if _, err := c.ReadAt(tail, int64(len(content)-len(marker)-1)); err != nil || string(tail) != marker {
		t.Fatalf("ReadAt: %q, %v", tail, err)
	}
	c.Close()

	copyOfBlob, err := os.ReadFile(blobPath(s, obj.ID))
	if err != nil {
		t.Fatal(err)
	}
	var wrapped []byte
	if err := sqliteDB(s).QueryRow(`SELECT wrapped FROM data_keys WHERE object_id = ?`, obj.ID).Scan(&wrapped); err != nil {
		t.Fatal(err)
	}
	if rec := serve(t, s, http.MethodDelete, "/v1/files/"+obj.ID, "owner-a", "", nil); rec.Code != http.StatusOK {
		t.Fatalf("delete: %d %s", rec.Code, rec.Body)
	}
	if _, err := s.keys.Get(ctx, sqliteDB(s), obj.ID); !errors.Is(err, envelope.ErrNoKey) {
		t.Fatalf("data key after delete: %v", err)
	}
	if f := filesContaining(t, dir, wrapped); len(f) > 0 {
		t.Errorf("the deleted file's wrapped data key is still in %v", f)
	}
	// The copy is now noise: no key in the store opens it.
	if bytes.Contains(copyOfBlob, []byte(marker)) {
		t.Error("the blob copy holds the plaintext")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestTamperedBlobFailsToRead: a blob altered on disk is not served as
// content.
func TestTamperedBlobFailsToRead(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir(), Options{})
	f := mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, strings.Repeat("x", 1000))
	b, err := os.ReadFile(blobPath(s, f.ID))
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-20] ^= 1
	if err := os.WriteFile(blobPath(s, f.ID), b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, c, err := s.Open(ctx, "a", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadAll(c); !errors.Is(err, envelope.ErrOpen) {
		t.Errorf("read of a tampered blob: %v, want ErrOpen", err)
	}
}

// TestLegacyBlobsSealedOnOpen: files stored in the clear by an earlier
// binary are sealed when the store opens, and read as before; a crash
// between marking a row sealed and renaming its sealed copy is finished on
// the next open.
func TestLegacyBlobsSealedOnOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	const marker = "legacy-file-content-3e8a"
	var ids []string
	for range 3 {
		f := mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, marker)
		ids = append(ids, f.ID)
	}
	// Make them what an earlier binary left: plaintext blobs, no keys.
	for _, id := range ids {
		if err := os.WriteFile(blobPath(s, id), []byte(marker), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := sqliteDB(s).Exec(`UPDATE files SET sealed = 0 WHERE id = ?`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := sqliteDB(s).Exec(`DELETE FROM data_keys WHERE object_id = ?`, id); err != nil {
			t.Fatal(err)
		}
	}
	// The last was interrupted after its commit: its sealed copy waits
	// beside the plaintext.
	dk, wrapped, err := s.keys.NewDataKey(ids[2])
	if err != nil {
		t.Fatal(err)
	}
	var sealed bytes.Buffer
	sw, _ := dk.NewWriter(&sealed, blobField)
	sw.Write([]byte(marker))
	sw.Close()
	if err := os.WriteFile(blobPath(s, ids[2])+sealSuffix, sealed.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.meta.(*SQLiteMetadata).markSealed(ctx, ids[2], wrapped); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openStore(t, dir, Options{})
	if f := filesContaining(t, filepath.Join(dir, blobDirName), []byte(marker)); len(f) > 0 {
		t.Errorf("after open, legacy content is still in the clear in %v", f)
	}
	for _, id := range ids {
		_, c, err := s.Open(ctx, "a", id)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(b) != marker {
			t.Errorf("%s: %q, %v", id, b, err)
		}
	}
	if names := blobNames(t, s); len(names) != len(ids) {
		t.Errorf("blob directory: %v", names)
	}
}

// TestOpenRefusesAnotherKey: a store whose data keys were wrapped under a
// KEK that is no longer configured does not start (rather than failing
// every read of what it holds).
func TestOpenRefusesAnotherKey(t *testing.T) {
	t.Setenv(envelope.EnvKey, "")
	t.Setenv(envelope.EnvKeyFile, "")
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	mustCreate(t, s, "a", File{Filename: "a.txt", Purpose: PurposeUserData}, "x")
	s.Close()
	other, err := envelope.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(other))
	if _, err := Open(context.Background(), dir, Options{}); !errors.Is(err, envelope.ErrMissingKEK) || !strings.Contains(err.Error(), "$"+envelope.EnvKey) {
		t.Errorf("Open with another key: %v, want ErrMissingKEK naming $%s", err, envelope.EnvKey)
	}
}
