package keys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// openStore opens a Store in dir and closes it when the test ends.
func openStore(t testing.TB, dir string) *SQLiteStore {
	t.Helper()
	s, err := OpenSQLite(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustCreate(t testing.TB, s *SQLiteStore, name, tier string) (string, Key) {
	t.Helper()
	secret, k, err := s.Create(context.Background(), name, tier)
	if err != nil {
		t.Fatalf("Create(%q, %q): %v", name, tier, err)
	}
	return secret, k
}

func TestNewSecret(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		s, err := newSecret()
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 49 || !strings.HasPrefix(s, "sk-sy-") || !wellFormedSecret(s) {
			t.Fatalf("newSecret() = %q: malformed", s)
		}
		if seen[s] {
			t.Fatalf("newSecret() repeated a secret")
		}
		seen[s] = true
	}
}

func TestHashSecret(t *testing.T) {
	for _, in := range []string{"", "short", strings.Repeat("x", secretLen), strings.Repeat("y", secretLen+1)} {
		if got, want := HashSecret(in), sha256.Sum256([]byte(in)); got != want {
			t.Errorf("HashSecret(%d bytes) = %x, want %x", len(in), got, want)
		}
	}
}

// TestSecretNotStored reads the raw database, WAL and shared-memory files and
// checks that no secret appears in them, only its hash.
func TestSecretNotStored(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	var secrets []string
	var hashes []string
	for _, name := range []string{"a", "b", "c"} {
		secret, _ := mustCreate(t, s, name, "free")
		secrets = append(secrets, secret)
		h := HashSecret(secret)
		hashes = append(hashes, hex.EncodeToString(h[:]))
	}
	// Revoke one by secret too, in case that path stored it somewhere.
	if err := s.Revoke(context.Background(), secrets[0]); err != nil {
		t.Fatal(err)
	}

	var all []byte
	for _, f := range []string{"switchyard.db", "switchyard.db-wal", "switchyard.db-shm"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	for i, secret := range secrets {
		// The display prefix is stored on purpose; the rest must not be.
		if bytes.Contains(all, []byte(secret)) || bytes.Contains(all, []byte(secret[displayPrefixLen:])) {
			t.Errorf("secret %d found in the database files", i)
		}
		// Sanity check that we read the files the data went to.
		if !bytes.Contains(all, []byte(hashes[i])) {
			t.Errorf("hash of secret %d not found in the database files", i)
		}
	}
}

func TestFilesAndPragmas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data")
	s := openStore(t, dir)
	mustCreate(t, s, "k", "free") // make sure the WAL exists

	checkMode := func(path string, want os.FileMode) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("mode of %s = %v, want %v", path, got, want)
		}
	}
	checkMode(dir, 0o700)
	for _, f := range []string{"switchyard.db", "switchyard.db-wal", "switchyard.db-shm"} {
		checkMode(filepath.Join(dir, f), 0o600)
	}

	ctx := context.Background()
	var mode string
	var timeout int
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || timeout != int(sqlitedb.BusyTimeout.Milliseconds()) {
		t.Errorf("journal_mode, busy_timeout = %q, %d; want wal, %d", mode, timeout, sqlitedb.BusyTimeout.Milliseconds())
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := OpenSQLite(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	secret, k := mustCreate(t, s, "persisted", "free")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, dir) // migrations must be a no-op the second time
	if got, err := s.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("Lookup after reopen = %+v, %v; want %+v", got, err, k)
	}
	var version int
	if err := s.db.QueryRowContext(ctx,
		`SELECT version FROM schema_versions WHERE component = 'keys'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version != len(migrations) {
		t.Errorf("schema version = %d, want %d", version, len(migrations))
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	if _, err := s.db.ExecContext(ctx,
		`UPDATE schema_versions SET version = 999 WHERE component = 'keys'`); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if s, err := OpenSQLite(ctx, dir); err == nil {
		s.Close()
		t.Fatal("Open succeeded on a database from a newer binary")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open error = %v, want one about a newer schema", err)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	if s, err := OpenSQLite(context.Background(), ""); err == nil {
		s.Close()
		t.Fatal("OpenSQLite(\"\") succeeded")
	}
}

func BenchmarkStoreLookup(b *testing.B) {
	s := openStore(b, b.TempDir())
	secret, _ := mustCreate(b, s, "bench", "free")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Lookup(ctx, secret); err != nil {
			b.Fatal(err)
		}
	}
}
