package envelope

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/internal/sqlitedb"
)

func testKeyring(t *testing.T, n int) (*Keyring, [][]byte) {
	t.Helper()
	var keys [][]byte
	for range n {
		k, err := NewKey()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	k, err := NewKeyring(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return k, keys
}

func TestSealOpen(t *testing.T) {
	ring, _ := testKeyring(t, 1)
	dk, w, err := ring.NewDataKey("resp_1")
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("the prompt")
	sealed := dk.Seal("body", msg)
	if len(sealed) != len(msg)+SealOverhead || bytes.Contains(sealed, msg) {
		t.Fatalf("sealed %d bytes (want %d), plaintext visible: %v", len(sealed), len(msg)+SealOverhead, bytes.Contains(sealed, msg))
	}
	// The key as unwrapped from storage opens it.
	dk2, err := ring.Unwrap("resp_1", w)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dk2.Open("body", sealed); err != nil || string(got) != string(msg) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if got, err := dk2.Open("body", dk2.Seal("body", nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %q, %v", got, err)
	}

	other, wOther, err := ring.NewDataKey("resp_2")
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Clone(sealed)
	tampered[len(tampered)-1] ^= 1
	for name, f := range map[string]func() error{
		"tampered":             func() error { _, err := dk.Open("body", tampered); return err },
		"another field":        func() error { _, err := dk.Open("input", sealed); return err },
		"another object's key": func() error { _, err := other.Open("body", sealed); return err },
		"short":                func() error { _, err := dk.Open("body", sealed[:10]); return err },
		// A wrapped key copied to another object's row does not unwrap.
		"wrapped key moved": func() error { _, err := ring.Unwrap("resp_2", w); return err },
		"wrapped key tampered": func() error {
			bad := bytes.Clone(wOther)
			bad[len(bad)-3] ^= 0x40
			_, err := ring.Unwrap("resp_2", bad)
			return err
		},
	} {
		if err := f(); !errors.Is(err, ErrOpen) {
			t.Errorf("%s: err = %v, want ErrOpen", name, err)
		}
	}
	stranger, _ := testKeyring(t, 1)
	if _, err := stranger.Unwrap("resp_1", w); !errors.Is(err, ErrUnknownKEK) {
		t.Errorf("another keyring: err = %v, want ErrUnknownKEK", err)
	}
}

func TestRotationRewrap(t *testing.T) {
	old, oldKeys := testKeyring(t, 1)
	dk, w, err := old.NewDataKey("file-1")
	if err != nil {
		t.Fatal(err)
	}
	sealed := dk.Seal("blob", []byte("secret"))
	newKey, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := NewKeyring(newKey, oldKeys[0])
	if err != nil {
		t.Fatal(err)
	}
	if rotated.PrimaryID() != KeyID(newKey) || rotated.PrimaryID() == old.PrimaryID() {
		t.Fatalf("primary %s", rotated.PrimaryID())
	}
	nw, changed, err := rotated.RewrapKey("file-1", w)
	if err != nil || !changed {
		t.Fatalf("RewrapKey: changed %v, %v", changed, err)
	}
	if id, _ := WrappedKEKID(nw); id != rotated.PrimaryID() {
		t.Fatalf("rewrapped under %s", id)
	}
	if _, changed, _ := rotated.RewrapKey("file-1", nw); changed {
		t.Error("a key under the primary was rewrapped again")
	}
	// With the old KEK dropped, the rewrapped key still opens the content,
	// which was never re-encrypted; the old wrapping no longer does.
	onlyNew, err := NewKeyring(newKey)
	if err != nil {
		t.Fatal(err)
	}
	dk2, err := onlyNew.Unwrap("file-1", nw)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := dk2.Open("blob", sealed); err != nil || string(got) != "secret" {
		t.Fatalf("after rotation: %q, %v", got, err)
	}
	if _, err := onlyNew.Unwrap("file-1", w); !errors.Is(err, ErrUnknownKEK) {
		t.Errorf("old wrapping under the new keyring: %v", err)
	}
}

func TestKeysTableAndRewrap(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := sqlitedb.Open(ctx, path, "test", []string{KeysMigration})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old, oldKeys := testKeyring(t, 1)
	const n = rewrapBatch + 7 // more than one rewrap transaction
	sealed := map[string][]byte{}
	for i := range n {
		id := "obj-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		dk, err := old.Create(ctx, db, id)
		if err != nil {
			t.Fatal(err)
		}
		sealed[id] = dk.Seal("f", []byte(id))
	}
	newKey, _ := NewKey()
	rotated, _ := NewKeyring(newKey, oldKeys[0])
	got, err := rotated.Rewrap(ctx, db)
	if err != nil || got != n {
		t.Fatalf("Rewrap = %d, %v; want %d", got, err, n)
	}
	inUse, err := KEKsInUse(ctx, db)
	if err != nil || len(inUse) != 1 || inUse[rotated.PrimaryID()] != n {
		t.Fatalf("KEKs in use: %v, %v", inUse, err)
	}
	onlyNew, _ := NewKeyring(newKey)
	if err := onlyNew.Check(ctx, db); err != nil {
		t.Errorf("Check after rewrap: %v", err)
	}
	if err := old.Check(ctx, db); !errors.Is(err, ErrMissingKEK) || !strings.Contains(err.Error(), onlyNew.PrimaryID()) {
		t.Errorf("Check with the old KEK alone: %v, want ErrMissingKEK naming %s", err, onlyNew.PrimaryID())
	}
	for id, s := range sealed {
		dk, err := onlyNew.Get(ctx, db, id)
		if err != nil {
			t.Fatal(err)
		}
		if pt, err := dk.Open("f", s); err != nil || string(pt) != id {
			t.Fatalf("%s: %q, %v", id, pt, err)
		}
	}
	if err := Delete(ctx, db, "obj-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := onlyNew.Get(ctx, db, "obj-a"); !errors.Is(err, ErrNoKey) {
		t.Errorf("deleted key: %v", err)
	}
	if err := DeletePrefix(ctx, db, "obj-b"); err != nil {
		t.Fatal(err)
	}
	inUse, _ = KEKsInUse(ctx, db)
	want := n - 1 - (n/26 + 1) // obj-a, and every obj-b...
	if inUse[onlyNew.PrimaryID()] != want {
		t.Errorf("after deletes: %v, want %d", inUse, want)
	}
}

// sealStream seals pt in writes of the given size.
func sealStream(t *testing.T, dk *DataKey, pt []byte, write int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := dk.NewWriter(&buf, "blob")
	if err != nil {
		t.Fatal(err)
	}
	for p := pt; len(p) > 0; {
		c := min(write, len(p))
		if _, err := w.Write(p[:c]); err != nil {
			t.Fatal(err)
		}
		p = p[c:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestStreamRoundTrip(t *testing.T) {
	ring, _ := testKeyring(t, 1)
	dk, _, _ := ring.NewDataKey("file-1")
	for _, size := range []int{0, 1, SegmentSize - 1, SegmentSize, SegmentSize + 1, 3*SegmentSize + 17} {
		pt := make([]byte, size)
		rand.Read(pt)
		for _, write := range []int{1000, SegmentSize, 1 << 20} {
			ct := sealStream(t, dk, pt, write)
			if int64(len(ct)) != SealedSize(int64(size)) {
				t.Fatalf("size %d: sealed %d bytes, SealedSize says %d", size, len(ct), SealedSize(int64(size)))
			}
			r, err := dk.NewReader(bytes.NewReader(ct), int64(len(ct)), "blob")
			if err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			if r.Size() != int64(size) {
				t.Fatalf("Size = %d, want %d", r.Size(), size)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, pt) {
				t.Fatalf("size %d: read %d bytes, %v", size, len(got), err)
			}
			// Ranged reads across segment boundaries.
			if size > 10 {
				off := int64(size) / 2
				part := make([]byte, min(size-int(off), SegmentSize+5))
				if n, err := r.ReadAt(part, off); n != len(part) || (err != nil && err != io.EOF) || !bytes.Equal(part, pt[off:off+int64(len(part))]) {
					t.Fatalf("size %d: ReadAt(%d) = %d, %v", size, off, n, err)
				}
				if _, err := r.Seek(off, io.SeekStart); err != nil {
					t.Fatal(err)
				}
				rest, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(rest, pt[off:]) {
					t.Fatalf("size %d: read after Seek: %v", size, err)
				}
			}
		}
	}
}

func TestStreamTamperAndTruncation(t *testing.T) {
	ring, _ := testKeyring(t, 1)
	dk, _, _ := ring.NewDataKey("file-1")
	pt := bytes.Repeat([]byte("0123456789abcdef"), 3*SegmentSize/16+100) // 4 segments
	ct := sealStream(t, dk, pt, 4096)
	full := SegmentSize + tagSize
	read := func(ct []byte, key *DataKey, field string) error {
		r, err := key.NewReader(bytes.NewReader(ct), int64(len(ct)), field)
		if err != nil {
			return err
		}
		_, err = io.ReadAll(r)
		return err
	}
	flip := func(i int) []byte { c := bytes.Clone(ct); c[i] ^= 1; return c }
	other, _, _ := ring.NewDataKey("file-2")
	// Swapping two segments: each is sealed with its index.
	swapped := bytes.Clone(ct)
	copy(swapped[headerSize:], ct[headerSize+full:headerSize+2*full])
	copy(swapped[headerSize+full:], ct[headerSize:headerSize+full])
	for _, c := range []struct {
		name  string
		ct    []byte
		key   *DataKey
		field string
		want  error
	}{
		{"intact", ct, dk, "blob", nil},
		{"bit flipped in a segment", flip(headerSize + full + 5), dk, "blob", ErrOpen},
		{"bit flipped in the salt", flip(10), dk, "blob", ErrOpen},
		{"segments swapped", swapped, dk, "blob", ErrOpen},
		{"cut at a segment boundary", ct[:headerSize+2*full], dk, "blob", ErrTruncated},
		{"cut inside a segment", ct[:headerSize+2*full+100], dk, "blob", ErrOpen},
		{"cut to its tag", ct[:headerSize+2*full+tagSize], dk, "blob", ErrTruncated},
		{"extended", append(bytes.Clone(ct), make([]byte, 40)...), dk, "blob", ErrOpen},
		{"another object's key", ct, other, "blob", ErrOpen},
		{"another field", ct, dk, "output", ErrOpen},
	} {
		err := read(c.ct, c.key, c.field)
		if (c.want == nil && err != nil) || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvKey, "")
	t.Setenv(EnvKeyFile, "")
	// Generated once into the data directory, private, then reused.
	k1, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi, err)
	}
	k2, err := Load(dir)
	if err != nil || k2.PrimaryID() != k1.PrimaryID() || k2.Source() != filepath.Join(dir, KeyFileName) {
		t.Fatalf("second Load: %v, %v", k2, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data directory holds %d entries, want only the key file", len(entries))
	}

	a, _ := NewKey()
	b, _ := NewKey()
	t.Setenv(EnvKey, EncodeKey(a)+", "+EncodeKey(b))
	k, err := Load(dir)
	if err != nil || k.PrimaryID() != KeyID(a) || len(k.IDs()) != 2 || k.Source() != "$"+EnvKey {
		t.Fatalf("from $%s: %v, %v", EnvKey, k, err)
	}
	t.Setenv(EnvKey, "c2hvcnQ=")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short key: %v", err)
	}
	t.Setenv(EnvKey, "")
	kf := filepath.Join(t.TempDir(), "kek")
	if err := WriteKeyFile(kf, [][]byte{b, a}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvKeyFile, kf)
	if k, err := Load(dir); err != nil || k.PrimaryID() != KeyID(b) || len(k.IDs()) != 2 {
		t.Fatalf("from $%s: %v, %v", EnvKeyFile, k, err)
	}
	t.Setenv(EnvKeyFile, filepath.Join(dir, "missing"))
	if _, err := Load(dir); err == nil {
		t.Error("a missing key file named by the environment was not an error")
	}
}

// TestReloadOnUnknownKEK: a running keyring loaded from a key file reads
// data keys that a rotation (another process) rewrapped under a KEK added
// to the file after it started.
func TestReloadOnUnknownKEK(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvKey, "")
	t.Setenv(EnvKeyFile, "")
	running, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	path, err := KeyFile(dir)
	if err != nil || path != filepath.Join(dir, KeyFileName) {
		t.Fatalf("KeyFile = %q, %v", path, err)
	}
	old, err := ParseKeys(mustRead(t, path))
	if err != nil {
		t.Fatal(err)
	}
	newKey, _ := NewKey()
	if err := WriteKeyFile(path, [][]byte{newKey, old[0]}); err != nil {
		t.Fatal(err)
	}
	rotated, err := Load(dir)
	if err != nil || rotated.PrimaryID() != KeyID(newKey) {
		t.Fatalf("rotated: %v, %v", rotated, err)
	}
	dk, w, err := rotated.NewDataKey("resp_9")
	if err != nil {
		t.Fatal(err)
	}
	dk2, err := running.Unwrap("resp_9", w)
	if err != nil {
		t.Fatalf("the running keyring did not pick up the new KEK: %v", err)
	}
	if pt, err := dk2.Open("f", dk.Seal("f", []byte("x"))); err != nil || string(pt) != "x" {
		t.Fatalf("open: %q, %v", pt, err)
	}
	if running.PrimaryID() != KeyID(newKey) {
		t.Errorf("after the reload the primary is %s, want the new key's", running.PrimaryID())
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// BenchmarkStream measures sealing and opening a blob stream.
func BenchmarkStream(b *testing.B) {
	ring, _ := NewKeyring(make([]byte, KeySize))
	dk, _, _ := ring.NewDataKey("file-bench")
	pt := make([]byte, 8<<20)
	var ct bytes.Buffer
	b.Run("seal", func(b *testing.B) {
		b.SetBytes(int64(len(pt)))
		for b.Loop() {
			ct.Reset()
			w, _ := dk.NewWriter(&ct, "blob")
			w.Write(pt)
			w.Close()
		}
	})
	b.Run("open", func(b *testing.B) {
		b.SetBytes(int64(len(pt)))
		for b.Loop() {
			r, err := dk.NewReader(bytes.NewReader(ct.Bytes()), int64(ct.Len()), "blob")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
