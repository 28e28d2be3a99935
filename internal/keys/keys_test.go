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
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

// openStore opens a Store in dir and closes it when the test ends.
func openStore(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("Open(%q): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustCreate(t testing.TB, s *Store, name, tier string) (string, Key) {
	t.Helper()
	secret, k, err := s.Create(context.Background(), name, tier)
	if err != nil {
		t.Fatalf("Create(%q, %q): %v", name, tier, err)
	}
	return secret, k
}

func TestCreateLookup(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	tests := []struct {
		desc               string
		name, tier         string
		wantName, wantTier string
	}{
		{"plain", "alice laptop", "free", "alice laptop", "free"},
		{"trimmed", "  padded  ", " pro ", "padded", "pro"},
		{"unicode", "ünïcödé 名前", "enterprise", "ünïcödé 名前", "enterprise"},
		{"max length in runes", strings.Repeat("é", maxNameLen), "free", strings.Repeat("é", maxNameLen), "free"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			before := time.Now()
			secret, k := mustCreate(t, s, tt.name, tt.tier)

			if !wellFormedSecret(secret) {
				t.Errorf("secret %q is not well formed", secret[:displayPrefixLen])
			}
			if !wellFormedID(k.ID) {
				t.Errorf("ID = %q, want key_ + 16 hex", k.ID)
			}
			if k.Prefix != secret[:12] || len(k.Prefix) != 12 {
				t.Errorf("Prefix = %q, want first 12 characters of the secret", k.Prefix)
			}
			if k.Name != tt.wantName || k.Tier != tt.wantTier {
				t.Errorf("Name, Tier = %q, %q; want %q, %q", k.Name, k.Tier, tt.wantName, tt.wantTier)
			}
			if k.CreatedAt.Before(before.Add(-time.Second)) || k.CreatedAt.After(time.Now().Add(time.Second)) {
				t.Errorf("CreatedAt = %v, want about now", k.CreatedAt)
			}
			if k.Revoked() {
				t.Errorf("new key is revoked: %v", k.RevokedAt)
			}

			got, err := s.Lookup(ctx, secret)
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if !reflect.DeepEqual(got, k) {
				t.Errorf("Lookup = %+v, want %+v", got, k)
			}
		})
	}
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
		if got, want := hashSecret(in), sha256.Sum256([]byte(in)); got != want {
			t.Errorf("hashSecret(%d bytes) = %x, want %x", len(in), got, want)
		}
	}
}

func TestCreateValidation(t *testing.T) {
	s := openStore(t, t.TempDir())
	tests := []struct {
		desc, name, tier string
		wantErr          string
	}{
		{"empty name", "", "free", "name must not be empty"},
		{"blank name", " \t\n", "free", "name must not be empty"},
		{"long name", strings.Repeat("a", maxNameLen+1), "free", "name must be at most 200 characters"},
		{"invalid UTF-8 name", "bad\xffname", "free", "name must be valid UTF-8"},
		{"escape sequence in name", "ok\x1b[2Jgone", "free", "name must not contain control characters"},
		{"newline in name", "line\nforged log line", "free", "name must not contain control characters"},
		{"NUL in name", "a\x00b", "free", "name must not contain control characters"},
		{"DEL in name", "a\x7fb", "free", "name must not contain control characters"},
		{"C1 control in name", "a\u009bb", "free", "name must not contain control characters"},
		{"bidi override in name", "admin\u202etxt.exe", "free", "name must not contain control characters"},
		{"control character in tier", "ok", "fr\tee", "tier must not contain control characters"},
		{"empty tier", "ok", "", "tier must not be empty"},
		{"blank tier", "ok", "   ", "tier must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			secret, k, err := s.Create(context.Background(), tt.name, tt.tier)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Create error = %v, want one containing %q", err, tt.wantErr)
			}
			if secret != "" || !reflect.DeepEqual(k, Key{}) {
				t.Errorf("Create returned %q, %+v alongside an error", secret, k)
			}
		})
	}
	if ks, err := s.List(context.Background()); err != nil || len(ks) != 0 {
		t.Errorf("List after rejected creates = %v, %v; want empty", ks, err)
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
		h := hashSecret(secret)
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

func TestList(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	if ks, err := s.List(ctx); err != nil || len(ks) != 0 {
		t.Fatalf("List on empty store = %v, %v", ks, err)
	}

	names := []string{"first", "second", "third"}
	secrets := make(map[string]string)
	created := make(map[string]Key)
	for _, n := range names {
		secret, k := mustCreate(t, s, n, "free")
		secrets[n], created[n] = secret, k
	}
	if err := s.Revoke(ctx, created["second"].ID); err != nil {
		t.Fatal(err)
	}

	ks, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantOrder := []string{"third", "second", "first"}
	if len(ks) != len(wantOrder) {
		t.Fatalf("List returned %d keys, want %d", len(ks), len(wantOrder))
	}
	for i, k := range ks {
		n := wantOrder[i]
		t.Run(n, func(t *testing.T) {
			want := created[n]
			if n == "second" {
				if !k.Revoked() {
					t.Errorf("revoked key listed as active")
				}
				want.RevokedAt = k.RevokedAt
			}
			if !reflect.DeepEqual(k, want) {
				t.Errorf("List[%d] = %+v, want %+v", i, k, want)
			}
			secret := secrets[n]
			if k.Prefix != secret[:12] {
				t.Errorf("Prefix = %q, want %q", k.Prefix, secret[:12])
			}
			for _, field := range []string{k.ID, k.Prefix, k.Name, k.Tier} {
				if strings.Contains(field, secret[displayPrefixLen:]) {
					t.Errorf("listed key exposes the secret")
				}
			}
		})
	}
}

func TestRevoke(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	tests := []struct {
		desc string
		arg  func(secret string, k Key) string
	}{
		{"by id", func(_ string, k Key) string { return k.ID }},
		{"by secret", func(secret string, _ Key) string { return secret }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			secret, k := mustCreate(t, s, tt.desc, "free")
			otherSecret, other := mustCreate(t, s, tt.desc+" bystander", "free")

			if err := s.Revoke(ctx, tt.arg(secret, k)); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if _, err := s.Lookup(ctx, secret); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup of revoked key: err = %v, want ErrNotFound", err)
			}
			if got, err := s.Lookup(ctx, otherSecret); err != nil || !reflect.DeepEqual(got, other) {
				t.Errorf("Lookup of other key = %+v, %v; want %+v", got, err, other)
			}

			first := revokedAt(t, s, k.ID)
			if first.IsZero() {
				t.Fatalf("List shows revoked key as active")
			}
			// Revoking again succeeds and keeps the original time.
			if err := s.Revoke(ctx, tt.arg(secret, k)); err != nil {
				t.Errorf("second Revoke: %v", err)
			}
			if again := revokedAt(t, s, k.ID); !again.Equal(first) {
				t.Errorf("second Revoke moved RevokedAt from %v to %v", first, again)
			}
		})
	}
}

func revokedAt(t *testing.T, s *Store, id string) time.Time {
	t.Helper()
	ks, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.ID == id {
			return k.RevokedAt
		}
	}
	t.Fatalf("key %s not listed", id)
	return time.Time{}
}

func TestRevokeNotFound(t *testing.T) {
	s := openStore(t, t.TempDir())
	secret, _ := mustCreate(t, s, "real", "free")
	unknownSecret, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ desc, arg string }{
		{"unknown id", "key_0123456789abcdef"},
		{"unknown secret", unknownSecret},
		{"display prefix", secret[:12]},
		{"truncated secret", secret[:len(secret)-1]},
		{"uppercase id", "KEY_0123456789ABCDEF"},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := s.Revoke(context.Background(), tt.arg)
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Revoke: err = %v, want ErrNotFound", err)
			}
			// Echoing an ID is fine; anything that may be a secret is not.
			if !wellFormedID(tt.arg) && len(tt.arg) > displayPrefixLen &&
				strings.Contains(err.Error(), tt.arg[displayPrefixLen:]) {
				t.Errorf("error %q echoes a possible secret", err)
			}
		})
	}
	if _, err := s.Lookup(context.Background(), secret); err != nil {
		t.Errorf("real key affected by failed revocations: %v", err)
	}
}

func TestLookupNotFound(t *testing.T) {
	s := openStore(t, t.TempDir())
	secret, _ := mustCreate(t, s, "real", "free")
	unknown, err := newSecret()
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(secret)
	if flipped[20] == 'a' {
		flipped[20] = 'b'
	} else {
		flipped[20] = 'a'
	}
	tests := []struct{ desc, secret string }{
		{"empty", ""},
		{"prefix only", "sk-sy-"},
		{"display prefix", secret[:12]},
		{"unknown well-formed", unknown},
		{"one character changed", string(flipped)},
		{"trailing space", secret + " "},
		{"bearer included", "Bearer " + secret},
		{"bad alphabet", secret[:len(secret)-1] + "-"},
		{"key id", "key_0123456789abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if k, err := s.Lookup(context.Background(), tt.secret); !errors.Is(err, ErrNotFound) {
				t.Errorf("Lookup = %+v, %v; want ErrNotFound", k, err)
			}
		})
	}
}

// TestTwoStores simulates the CLI and a running gateway using the same data
// directory at once, starting from a directory that does not exist yet.
func TestTwoStores(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")

	var stores [2]*Store
	var errs [2]error
	var wg sync.WaitGroup
	for i := range stores {
		wg.Go(func() { stores[i], errs[i] = Open(ctx, dir) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	cli, gw := stores[0], stores[1]

	secret, k := mustCreate(t, cli, "from cli", "free")
	if got, err := gw.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("gateway Lookup of CLI-created key = %+v, %v; want %+v", got, err, k)
	}
	if err := gw.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Lookup(ctx, secret); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CLI Lookup of key revoked by the gateway: err = %v, want ErrNotFound", err)
	}

	// Concurrent writers and readers on both stores: busy_timeout must turn
	// lock contention into waiting, not errors.
	const perStore = 25
	errc := make(chan error, 4*perStore)
	for _, s := range stores {
		for i := range perStore {
			wg.Go(func() {
				secret, _, err := s.Create(ctx, "concurrent", "free")
				if err != nil {
					errc <- err
					return
				}
				if _, err := s.List(ctx); err != nil {
					errc <- err
				}
				other := stores[i%2]
				if _, err := other.Lookup(ctx, secret); err != nil {
					errc <- err
				}
			})
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	for i, s := range stores {
		ks, err := s.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 + 2*perStore; len(ks) != want {
			t.Errorf("store %d lists %d keys, want %d", i, len(ks), want)
		}
	}
}

func TestReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, dir)
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

	if s, err := Open(ctx, dir); err == nil {
		s.Close()
		t.Fatal("Open succeeded on a database from a newer binary")
	} else if !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open error = %v, want one about a newer schema", err)
	}
}

func TestOpenEmptyDir(t *testing.T) {
	if s, err := Open(context.Background(), ""); err == nil {
		s.Close()
		t.Fatal("Open(\"\") succeeded")
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
