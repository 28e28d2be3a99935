package main

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/backends/conversations"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// TestDatakeyRotate: rotate adds a new primary KEK and rewraps the stored
// data keys under it; a store opened before keeps reading (it re-reads the
// key file), retire then drops the old KEK, and the content still opens
// with the new KEK alone.
func TestDatakeyRotate(t *testing.T) {
	t.Setenv(envelope.EnvKey, "")
	t.Setenv(envelope.EnvKeyFile, "")
	ctx := context.Background()
	dir := t.TempDir()
	store, err := files.Open(ctx, dir, files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	f, err := store.Create(ctx, "alice", files.File{Filename: "a.txt", Purpose: files.PurposeUserData}, strings.NewReader("kept across rotation"), 0)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, envelope.KeyFileName)
	before, err := envelope.ParseKeys(readFile(t, keyFile))
	if err != nil || len(before) != 1 {
		t.Fatalf("key file before: %d keys, %v", len(before), err)
	}
	oldID := envelope.KeyID(before[0])

	oldWrapped := wrappedKey(t, filepath.Join(dir, "files.db"), f.ID)

	out, _, err := runCLI(t, "datakey", "rotate", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "files.db: rewrapped 1 data key(s)") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	// The wrapping under the old KEK is gone from the database's files, so
	// a leaked old KEK opens nothing.
	for _, p := range []string{"files.db", "files.db-wal"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err == nil && bytes.Contains(b, oldWrapped) {
			t.Errorf("the old wrapping is still in %s", p)
		}
	}
	after, _ := envelope.ParseKeys(readFile(t, keyFile))
	if len(after) != 2 || envelope.KeyID(after[1]) != oldID {
		t.Fatalf("key file after rotate: %d keys", len(after))
	}
	newID := envelope.KeyID(after[0])
	out, _, err = runCLI(t, "datakey", "status", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "files.db: 1 under "+newID) {
		t.Fatalf("status: %v\n%s", err, out)
	}
	// The store opened before the rotation reads the rewrapped key.
	if got := readContent(t, store, f.ID); got != "kept across rotation" {
		t.Fatalf("running store after rotate: %q", got)
	}

	out, _, err = runCLI(t, "datakey", "retire", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "Retired 1 KEK(s)") || !strings.Contains(out, oldID) {
		t.Fatalf("retire: %v\n%s", err, out)
	}
	left, _ := envelope.ParseKeys(readFile(t, keyFile))
	if len(left) != 1 || envelope.KeyID(left[0]) != newID {
		t.Fatalf("key file after retire: %d keys", len(left))
	}
	reopened, err := files.Open(ctx, dir, files.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if got := readContent(t, reopened, f.ID); got != "kept across rotation" {
		t.Fatalf("after retire: %q", got)
	}

	// With the keys in the environment, rotate explains the manual steps.
	t.Setenv(envelope.EnvKey, envelope.EncodeKey(left[0]))
	if _, _, err := runCLI(t, "datakey", "rotate", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "datakey rewrap") {
		t.Errorf("rotate with $%s: %v", envelope.EnvKey, err)
	}
}

// wrappedKey reads object id's wrapped data key from the database at path.
func wrappedKey(t *testing.T, path, id string) []byte {
	t.Helper()
	db, err := sql.Open("sqlite", sqlitedb.DSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var w []byte
	if err := db.QueryRow(`SELECT wrapped FROM data_keys WHERE object_id = ?`, id).Scan(&w); err != nil {
		t.Fatal(err)
	}
	return w
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func readContent(t *testing.T, s *files.Store, id string) string {
	t.Helper()
	_, c, err := s.Open(context.Background(), "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDatakeyRotateConversations: rotation rewraps the data keys of
// conversations.db too (a conversation's and each item's).
func TestDatakeyRotateConversations(t *testing.T) {
	t.Setenv(envelope.EnvKey, "")
	t.Setenv(envelope.EnvKeyFile, "")
	ctx := context.Background()
	dir := t.TempDir()
	ring, err := envelope.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := conversations.OpenSQLiteStore(ctx, dir, ring)
	if err != nil {
		t.Fatal(err)
	}
	dk, w, _ := ring.NewDataKey("conv_1")
	idk, iw, _ := ring.NewDataKey(conversations.ItemKeyID("conv_1", "msg_1"))
	err = store.Create(ctx, conversations.Row{ID: "conv_1", Owner: "alice", CreatedAt: time.Now(), Metadata: dk.Seal("metadata", []byte("{}")), Key: w},
		[]conversations.ItemRow{{ID: "msg_1", Body: idk.Seal("item", []byte(`{"id":"msg_1"}`)), Key: iw}})
	store.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "datakey", "rotate", "--data-dir", dir)
	if err != nil || !strings.Contains(out, "conversations.db: rewrapped 2 data key(s)") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
}
