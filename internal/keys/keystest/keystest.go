// Package keystest is the conformance suite of key store implementations:
// every behaviour the gateway's consumers (keys.Cache, the admin API, the
// CLI) rely on. An implementation passes Run, and RunShared when several
// processes or gateways share its storage (every implementation does in a
// deployment: the CLI writes while gateways read).
//
//	func TestConformance(t *testing.T) {
//		keystest.Run(t, func(t *testing.T) keystest.Store { return openEmpty(t) })
//	}
package keystest

import (
	"context"
	"crypto/rand"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/keys"
)

// Store is the whole contract of a key store: the union of what its
// consumers declare (keys.Source for the Cache, admin.KeyStore for the admin
// API and the CLI) plus Lookup by secret.
type Store interface {
	keys.Source
	Issue(ctx context.Context, sp keys.Spec) (string, keys.Key, error)
	Lookup(ctx context.Context, secret string) (keys.Key, error)
	List(ctx context.Context) ([]keys.Key, error)
	Get(ctx context.Context, idOrSecret string) (keys.Key, error)
	Revoke(ctx context.Context, idOrSecret string) error
	Rotate(ctx context.Context, idOrSecret string, grace time.Duration) (string, keys.Key, error)
	SetTier(ctx context.Context, idOrSecret, tier string, rpm, tpm int64) (keys.Key, error)
	SetModels(ctx context.Context, idOrSecret string, models []string) (keys.Key, error)
}

var (
	secretRE = regexp.MustCompile(`^sk-sy-[0-9A-Za-z]{43}$`)
	idRE     = regexp.MustCompile(`^key_[0-9a-f]{16}$`)
)

const displayPrefixLen = 12

// Run runs the suite; open returns a new, empty store, closed by the test's
// cleanup.
func Run(t *testing.T, open func(t *testing.T) Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"CreateLookup", testCreateLookup},
		{"CreateValidation", testCreateValidation},
		{"IssueWithLimitsAndModels", testIssueWithLimitsAndModels},
		{"LookupHash", testLookupHash},
		{"LookupNotFound", testLookupNotFound},
		{"List", testList},
		{"Get", testGet},
		{"Revoke", testRevoke},
		{"RevokeNotFound", testRevokeNotFound},
		{"Rotate", testRotate},
		{"RotateGraceEnds", testRotateGraceEnds},
		{"SetTierAndModelsFollowTheChain", testSetTierAndModelsFollowTheChain},
		{"LookupOwner", testLookupOwner},
		{"VersionCountsEveryWrite", testVersionCountsEveryWrite},
		{"ConcurrentCreates", testConcurrentCreates},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// RunShared runs the checks of two handles on one storage (the CLI and a
// running gateway, or two gateways): open returns two new handles on the
// same new, empty storage.
func RunShared(t *testing.T, open func(t *testing.T) (Store, Store)) {
	t.Run("WritesSeenByTheOther", func(t *testing.T) { testShared(t, open) })
	t.Run("VersionMovesForTheOther", func(t *testing.T) { testSharedVersion(t, open) })
}

func mustIssue(t *testing.T, s Store, name, tier string) (string, keys.Key) {
	t.Helper()
	secret, k, err := s.Issue(context.Background(), keys.Spec{Name: name, Tier: tier})
	if err != nil {
		t.Fatalf("Issue(%q, %q): %v", name, tier, err)
	}
	return secret, k
}

// randomSecret is a well-formed secret no store issued.
func randomSecret(t *testing.T) string {
	t.Helper()
	const alph = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 43)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = alph[int(b[i])%len(alph)]
	}
	return "sk-sy-" + string(b)
}

func testCreateLookup(t *testing.T, s Store) {
	ctx := context.Background()
	tests := []struct {
		desc               string
		name, tier         string
		wantName, wantTier string
	}{
		{"plain", "alice laptop", "free", "alice laptop", "free"},
		{"trimmed", "  padded  ", " pro ", "padded", "pro"},
		{"unicode", "ünïcödé 名前", "enterprise", "ünïcödé 名前", "enterprise"},
		{"max length in runes", strings.Repeat("é", 200), "free", strings.Repeat("é", 200), "free"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			before := time.Now()
			secret, k := mustIssue(t, s, tt.name, tt.tier)
			if !secretRE.MatchString(secret) {
				t.Errorf("secret %.12s… is not sk-sy- and 43 base62 characters", secret)
			}
			if !idRE.MatchString(k.ID) {
				t.Errorf("ID = %q, want key_ + 16 hex", k.ID)
			}
			if k.Prefix != secret[:displayPrefixLen] {
				t.Errorf("Prefix = %q, want the first 12 characters of the secret", k.Prefix)
			}
			if k.Name != tt.wantName || k.Tier != tt.wantTier {
				t.Errorf("Name, Tier = %q, %q; want %q, %q", k.Name, k.Tier, tt.wantName, tt.wantTier)
			}
			if k.CreatedAt.Before(before.Add(-time.Second)) || k.CreatedAt.After(time.Now().Add(time.Second)) {
				t.Errorf("CreatedAt = %v, want about now", k.CreatedAt)
			}
			if k.Revoked() || !k.ExpiresAt.IsZero() || k.Lineage != "" || k.ReplacedBy != "" {
				t.Errorf("new key %+v is not plainly active", k)
			}
			got, err := s.Lookup(ctx, secret)
			if err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			// Exactly what Issue returned, CreatedAt to the nanosecond.
			if !reflect.DeepEqual(got, k) {
				t.Errorf("Lookup = %+v, want %+v", got, k)
			}
		})
	}
}

func testCreateValidation(t *testing.T, s Store) {
	ctx := context.Background()
	tests := []struct {
		desc    string
		sp      keys.Spec
		wantErr string
	}{
		{"empty name", keys.Spec{Name: "", Tier: "free"}, "name must not be empty"},
		{"blank name", keys.Spec{Name: " \t\n", Tier: "free"}, "name must not be empty"},
		{"long name", keys.Spec{Name: strings.Repeat("a", 201), Tier: "free"}, "name must be at most 200 characters"},
		{"invalid UTF-8 name", keys.Spec{Name: "bad\xffname", Tier: "free"}, "name must be valid UTF-8"},
		{"escape sequence in name", keys.Spec{Name: "ok\x1b[2Jgone", Tier: "free"}, "name must not contain control characters"},
		{"newline in name", keys.Spec{Name: "line\nforged log line", Tier: "free"}, "name must not contain control characters"},
		{"NUL in name", keys.Spec{Name: "a\x00b", Tier: "free"}, "name must not contain control characters"},
		{"DEL in name", keys.Spec{Name: "a\x7fb", Tier: "free"}, "name must not contain control characters"},
		{"C1 control in name", keys.Spec{Name: "a\u009bb", Tier: "free"}, "name must not contain control characters"},
		{"bidi override in name", keys.Spec{Name: "admin\u202etxt.exe", Tier: "free"}, "name must not contain control characters"},
		{"control character in tier", keys.Spec{Name: "ok", Tier: "fr\tee"}, "tier must not contain control characters"},
		{"empty tier", keys.Spec{Name: "ok", Tier: ""}, "tier must not be empty"},
		{"blank tier", keys.Spec{Name: "ok", Tier: "   "}, "tier must not be empty"},
		{"negative rpm", keys.Spec{Name: "x", Tier: "free", RPM: -1}, "custom limits"},
		{"tpm over uint32", keys.Spec{Name: "x", Tier: "free", TPM: 1 << 33}, "custom limits"},
		{"empty model", keys.Spec{Name: "x", Tier: "free", Models: []string{""}}, "model must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			secret, k, err := s.Issue(ctx, tt.sp)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, keys.ErrInvalid) {
				t.Fatalf("Issue error = %v, want ErrInvalid containing %q", err, tt.wantErr)
			}
			if secret != "" || !reflect.DeepEqual(k, keys.Key{}) {
				t.Errorf("Issue returned %q, %+v alongside an error", secret, k)
			}
		})
	}
	if ks, err := s.List(ctx); err != nil || len(ks) != 0 {
		t.Errorf("List after rejected creates = %v, %v; want empty", ks, err)
	}
}

func testIssueWithLimitsAndModels(t *testing.T, s Store) {
	ctx := context.Background()
	secret, k, err := s.Issue(ctx, keys.Spec{Name: "big co", Tier: "enterprise", RPM: 1000, TPM: 2_000_000, Models: []string{"a/b", "c/d"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Lookup(ctx, secret)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, k) || got.RPM != 1000 || got.TPM != 2_000_000 || !reflect.DeepEqual(got.Models, []string{"a/b", "c/d"}) {
		t.Errorf("Lookup = %+v, want %+v with the limits and models", got, k)
	}
	if got.LimitID() != got.ID {
		t.Errorf("LimitID = %q, want the key's own id", got.LimitID())
	}
	// No allow-list is nil, not an empty slice, whatever was passed.
	_, k, err = s.Issue(ctx, keys.Spec{Name: "all", Tier: "free", Models: []string{}})
	if err != nil || k.Models != nil {
		t.Fatalf("Issue with empty models = %+v, %v; want Models nil", k, err)
	}
	if got, err := s.Get(ctx, k.ID); err != nil || got.Models != nil || got.RPM != 0 || got.TPM != 0 {
		t.Errorf("Get = %+v, %v; want no models and no custom limits", got, err)
	}
}

func testLookupHash(t *testing.T, s Store) {
	ctx := context.Background()
	secret, k := mustIssue(t, s, "hashed", "free")
	got, err := s.LookupHash(ctx, keys.HashSecret(secret))
	if err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("LookupHash = %+v, %v; want %+v", got, err, k)
	}
	if _, err := s.LookupHash(ctx, keys.HashSecret(randomSecret(t))); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("LookupHash of an unknown hash: err = %v, want ErrNotFound", err)
	}
	if err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LookupHash(ctx, keys.HashSecret(secret)); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("LookupHash of a revoked key: err = %v, want ErrNotFound", err)
	}
}

func testLookupNotFound(t *testing.T, s Store) {
	secret, _ := mustIssue(t, s, "real", "free")
	flipped := []byte(secret)
	if flipped[20] == 'a' {
		flipped[20] = 'b'
	} else {
		flipped[20] = 'a'
	}
	tests := []struct{ desc, secret string }{
		{"empty", ""},
		{"prefix only", "sk-sy-"},
		{"display prefix", secret[:displayPrefixLen]},
		{"unknown well-formed", randomSecret(t)},
		{"one character changed", string(flipped)},
		{"trailing space", secret + " "},
		{"bearer included", "Bearer " + secret},
		{"bad alphabet", secret[:len(secret)-1] + "-"},
		{"key id", "key_0123456789abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if k, err := s.Lookup(context.Background(), tt.secret); !errors.Is(err, keys.ErrNotFound) {
				t.Errorf("Lookup = %+v, %v; want ErrNotFound", k, err)
			}
		})
	}
}

func testList(t *testing.T, s Store) {
	ctx := context.Background()
	if ks, err := s.List(ctx); err != nil || len(ks) != 0 {
		t.Fatalf("List on empty store = %v, %v", ks, err)
	}
	names := []string{"first", "second", "third"}
	secrets := make(map[string]string)
	created := make(map[string]keys.Key)
	for _, n := range names {
		secret, k := mustIssue(t, s, n, "free")
		secrets[n], created[n] = secret, k
	}
	if err := s.Revoke(ctx, created["second"].ID); err != nil {
		t.Fatal(err)
	}
	ks, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Newest first, revoked ones included.
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
			for _, field := range []string{k.ID, k.Prefix, k.Name, k.Tier} {
				if strings.Contains(field, secret[displayPrefixLen:]) {
					t.Errorf("listed key exposes the secret")
				}
			}
		})
	}
}

func testGet(t *testing.T, s Store) {
	ctx := context.Background()
	secret, k := mustIssue(t, s, "shown", "free")
	for _, arg := range []string{k.ID, secret} {
		got, err := s.Get(ctx, arg)
		if err != nil || !reflect.DeepEqual(got, k) {
			t.Errorf("Get(%.12s) = %+v, %v; want %+v", arg, got, err, k)
		}
	}
	if err := s.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, k.ID); err != nil || !got.Revoked() {
		t.Errorf("Get of revoked key = %+v, %v; want it, revoked", got, err)
	}
	for _, arg := range []string{"key_0000000000000000", "nonsense", randomSecret(t)} {
		if _, err := s.Get(ctx, arg); !errors.Is(err, keys.ErrNotFound) {
			t.Errorf("Get(%.12s) err = %v, want ErrNotFound", arg, err)
		}
	}
}

func revokedAt(t *testing.T, s Store, id string) time.Time {
	t.Helper()
	k, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return k.RevokedAt
}

func testRevoke(t *testing.T, s Store) {
	ctx := context.Background()
	tests := []struct {
		desc string
		arg  func(secret string, k keys.Key) string
	}{
		{"by id", func(_ string, k keys.Key) string { return k.ID }},
		{"by secret", func(secret string, _ keys.Key) string { return secret }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			secret, k := mustIssue(t, s, tt.desc, "free")
			otherSecret, other := mustIssue(t, s, tt.desc+" bystander", "free")
			if err := s.Revoke(ctx, tt.arg(secret, k)); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if _, err := s.Lookup(ctx, secret); !errors.Is(err, keys.ErrNotFound) {
				t.Errorf("Lookup of revoked key: err = %v, want ErrNotFound", err)
			}
			if got, err := s.Lookup(ctx, otherSecret); err != nil || !reflect.DeepEqual(got, other) {
				t.Errorf("Lookup of other key = %+v, %v; want %+v", got, err, other)
			}
			first := revokedAt(t, s, k.ID)
			if first.IsZero() {
				t.Fatalf("revoked key shows as active")
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

func testRevokeNotFound(t *testing.T, s Store) {
	secret, _ := mustIssue(t, s, "real", "free")
	tests := []struct{ desc, arg string }{
		{"unknown id", "key_0123456789abcdef"},
		{"unknown secret", randomSecret(t)},
		{"display prefix", secret[:displayPrefixLen]},
		{"truncated secret", secret[:len(secret)-1]},
		{"uppercase id", "KEY_0123456789ABCDEF"},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := s.Revoke(context.Background(), tt.arg)
			if !errors.Is(err, keys.ErrNotFound) {
				t.Fatalf("Revoke: err = %v, want ErrNotFound", err)
			}
			// Echoing an ID is fine; anything that may be a secret is not.
			if !idRE.MatchString(tt.arg) && len(tt.arg) > displayPrefixLen &&
				strings.Contains(err.Error(), tt.arg[displayPrefixLen:]) {
				t.Errorf("error %q echoes a possible secret", err)
			}
		})
	}
	if _, err := s.Lookup(context.Background(), secret); err != nil {
		t.Errorf("real key affected by failed revocations: %v", err)
	}
}

func testRotate(t *testing.T, s Store) {
	ctx := context.Background()
	oldSecret, old, err := s.Issue(ctx, keys.Spec{Name: "svc", Tier: "enterprise", RPM: 5, TPM: 50, Models: []string{"a/b"}})
	if err != nil {
		t.Fatal(err)
	}
	newSecret, k, err := s.Rotate(ctx, old.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if newSecret == oldSecret || k.ID == old.ID || !secretRE.MatchString(newSecret) {
		t.Fatal("rotate returned the old key or a malformed one")
	}
	if k.Name != old.Name || k.Tier != old.Tier || k.RPM != 5 || k.TPM != 50 || !reflect.DeepEqual(k.Models, old.Models) {
		t.Errorf("new key %+v does not carry the old one's settings %+v", k, old)
	}
	if k.LimitID() != old.ID {
		t.Errorf("new key's LimitID = %q, want the old key's id %q", k.LimitID(), old.ID)
	}
	// Both work during the grace period.
	for _, sec := range []string{oldSecret, newSecret} {
		if _, err := s.Lookup(ctx, sec); err != nil {
			t.Errorf("Lookup during grace: %v", err)
		}
	}
	o, err := s.Get(ctx, old.ID)
	if err != nil {
		t.Fatal(err)
	}
	if o.ReplacedBy != k.ID || o.ExpiresAt.Before(time.Now().Add(59*time.Minute)) || o.ExpiresAt.After(time.Now().Add(time.Hour)) {
		t.Errorf("old key after rotate = %+v", o)
	}
	if _, _, err := s.Rotate(ctx, old.ID, time.Hour); !errors.Is(err, keys.ErrInvalid) || !strings.Contains(err.Error(), "already rotated") {
		t.Errorf("second rotate of the old key: err = %v, want ErrInvalid: already rotated", err)
	}
	// Rotating the new key with no grace ends it at once; the chain keeps
	// its first key's identity.
	third, k3, err := s.Rotate(ctx, newSecret, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lookup(ctx, newSecret); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("key rotated with no grace still works: %v", err)
	}
	if _, err := s.Lookup(ctx, third); err != nil {
		t.Error(err)
	}
	if k3.LimitID() != old.ID {
		t.Errorf("LimitID of the third key = %q, want %q", k3.LimitID(), old.ID)
	}
	for _, grace := range []time.Duration{-time.Second, keys.MaxGrace + time.Second} {
		if _, _, err := s.Rotate(ctx, k3.ID, grace); !errors.Is(err, keys.ErrInvalid) {
			t.Errorf("grace %v: err = %v, want ErrInvalid", grace, err)
		}
	}
	if err := s.Revoke(ctx, k3.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rotate(ctx, k3.ID, time.Hour); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("rotate of a revoked key: err = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Rotate(ctx, "key_0000000000000000", time.Hour); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("rotate of an unknown key: err = %v, want ErrNotFound", err)
	}
}

// testRotateGraceEnds checks the store itself refuses a key once its grace
// period is over (no cache involved).
func testRotateGraceEnds(t *testing.T, s Store) {
	ctx := context.Background()
	secret, k := mustIssue(t, s, "short grace", "free")
	if _, _, err := s.Rotate(ctx, k.ID, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	// Wait on the store's own clock reading, not a fixed sleep.
	for !got.Expired(time.Now()) {
		time.Sleep(time.Until(got.ExpiresAt))
	}
	if _, err := s.Lookup(ctx, secret); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("Lookup past the grace period: err = %v, want ErrNotFound", err)
	}
	if _, err := s.LookupHash(ctx, keys.HashSecret(secret)); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("LookupHash past the grace period: err = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Rotate(ctx, k.ID, time.Hour); err == nil {
		t.Error("rotating an expired key succeeded")
	}
}

func testSetTierAndModelsFollowTheChain(t *testing.T, s Store) {
	ctx := context.Background()
	_, old := mustIssue(t, s, "svc", "free")
	newSecret, k, err := s.Rotate(ctx, old.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, bystander := mustIssue(t, s, "other", "free")
	got, err := s.SetTier(ctx, newSecret, "enterprise", 100, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != k.ID || got.Tier != "enterprise" || got.RPM != 100 || got.TPM != 1000 {
		t.Errorf("SetTier returned %+v", got)
	}
	if o, _ := s.Get(ctx, old.ID); o.Tier != "enterprise" || o.RPM != 100 {
		t.Errorf("the rotated-out key of the chain did not follow: %+v", o)
	}
	if b, _ := s.Get(ctx, bystander.ID); !reflect.DeepEqual(b, bystander) {
		t.Errorf("a key of another chain changed: %+v, want %+v", b, bystander)
	}
	got, err = s.SetTier(ctx, old.ID, "standard", 0, 0)
	if err != nil || got.RPM != 0 || got.TPM != 0 || got.Tier != "standard" {
		t.Errorf("SetTier back to standard = %+v, %v", got, err)
	}
	if _, err := s.SetTier(ctx, old.ID, " ", 0, 0); !errors.Is(err, keys.ErrInvalid) {
		t.Errorf("SetTier to a blank tier: err = %v, want ErrInvalid", err)
	}
	if _, err := s.SetTier(ctx, old.ID, "free", -1, 0); !errors.Is(err, keys.ErrInvalid) {
		t.Errorf("SetTier with a negative limit: err = %v, want ErrInvalid", err)
	}
	if got, err = s.SetModels(ctx, k.ID, []string{"x/y"}); err != nil || !reflect.DeepEqual(got.Models, []string{"x/y"}) {
		t.Errorf("SetModels = %+v, %v", got, err)
	}
	if o, _ := s.Get(ctx, old.ID); !reflect.DeepEqual(o.Models, []string{"x/y"}) {
		t.Errorf("models did not follow the chain: %+v", o)
	}
	if got, err = s.SetModels(ctx, k.ID, nil); err != nil || got.Models != nil {
		t.Errorf("SetModels(nil) = %+v, %v", got, err)
	}
	if _, err := s.SetModels(ctx, k.ID, []string{"ok", "bad\nmodel"}); !errors.Is(err, keys.ErrInvalid) {
		t.Errorf("SetModels with a control character: err = %v, want ErrInvalid", err)
	}
	if _, err := s.SetTier(ctx, "key_0000000000000000", "free", 0, 0); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("SetTier of unknown key: %v", err)
	}
	if _, err := s.SetModels(ctx, "key_0000000000000000", nil); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("SetModels of unknown key: %v", err)
	}
}

// testLookupOwner: an owner is a rotation chain (its first key's id); its
// newest active key answers, and other chains are never returned.
func testLookupOwner(t *testing.T, s Store) {
	ctx := context.Background()
	_, first := mustIssue(t, s, "a", "free")
	_, other := mustIssue(t, s, "b", "free")
	if got, err := s.LookupOwner(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Fatalf("LookupOwner(first) = %+v, %v", got, err)
	}
	_, rotated, err := s.Rotate(ctx, first.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.LookupOwner(ctx, first.ID); err != nil || got.ID != rotated.ID || got.LimitID() != first.ID {
		t.Fatalf("after rotate: %+v, %v; want %s", got, err, rotated.ID)
	}
	if got, err := s.LookupOwner(ctx, other.ID); err != nil || got.ID != other.ID {
		t.Fatalf("other: %+v, %v", got, err)
	}
	for _, id := range []string{first.ID, rotated.ID} {
		if err := s.Revoke(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.LookupOwner(ctx, first.ID); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("revoked owner: err = %v, want ErrNotFound", err)
	}
	if got, err := s.LookupOwner(ctx, other.ID); err != nil || got.ID != other.ID {
		t.Errorf("other owner after revoking the first chain: %+v, %v", got, err)
	}
	if _, err := s.LookupOwner(ctx, ""); !errors.Is(err, keys.ErrNotFound) {
		t.Errorf("empty owner: err = %v", err)
	}
}

// versionSteps are the writes that must each move the change counter.
func versionSteps(ctx context.Context, s Store, k keys.Key) []struct {
	name string
	do   func() error
} {
	return []struct {
		name string
		do   func() error
	}{
		{"set-tier", func() error { _, err := s.SetTier(ctx, k.ID, "standard", 0, 0); return err }},
		{"set-models", func() error { _, err := s.SetModels(ctx, k.ID, []string{"a/b"}); return err }},
		{"rotate", func() error { _, _, err := s.Rotate(ctx, k.ID, time.Minute); return err }},
		{"revoke", func() error { return s.Revoke(ctx, k.ID) }},
	}
}

func checkVersionMoves(t *testing.T, reader, writer Store) {
	ctx := context.Background()
	prev, err := reader.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, k := mustIssue(t, writer, "a", "free")
	v, err := reader.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v <= prev {
		t.Fatalf("create did not move the version (%d -> %d)", prev, v)
	}
	prev = v
	for _, st := range versionSteps(ctx, writer, k) {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		v, err := reader.Version(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if v <= prev {
			t.Errorf("%s did not move the version (%d -> %d)", st.name, prev, v)
		}
		prev = v
	}
	// Reads do not move it: a cache would be dropped for nothing.
	if _, err := writer.List(ctx); err != nil {
		t.Fatal(err)
	}
	if v, err := reader.Version(ctx); err != nil || v != prev {
		t.Errorf("a read moved the version (%d -> %d, %v)", prev, v, err)
	}
}

func testVersionCountsEveryWrite(t *testing.T, s Store) { checkVersionMoves(t, s, s) }

func testConcurrentCreates(t *testing.T, s Store) {
	ctx := context.Background()
	const n = 32
	var wg sync.WaitGroup
	secrets := make([]string, n)
	ids := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var k keys.Key
			secrets[i], k, errs[i] = s.Issue(ctx, keys.Spec{Name: "concurrent", Tier: "free"})
			ids[i] = k.ID
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Issue %d: %v", i, err)
		}
		if seen[ids[i]] || seen[secrets[i]] {
			t.Fatalf("concurrent Issue repeated an id or secret")
		}
		seen[ids[i]], seen[secrets[i]] = true, true
		if got, err := s.Lookup(ctx, secrets[i]); err != nil || got.ID != ids[i] {
			t.Errorf("Lookup of key %d = %+v, %v", i, got, err)
		}
	}
	if ks, err := s.List(ctx); err != nil || len(ks) != n {
		t.Errorf("List = %d keys, %v; want %d", len(ks), err, n)
	}
}

func testShared(t *testing.T, open func(t *testing.T) (Store, Store)) {
	ctx := context.Background()
	cli, gw := open(t)
	secret, k := mustIssue(t, cli, "from cli", "free")
	if got, err := gw.Lookup(ctx, secret); err != nil || !reflect.DeepEqual(got, k) {
		t.Fatalf("Lookup through the other handle = %+v, %v; want %+v", got, err, k)
	}
	if err := gw.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Lookup(ctx, secret); !errors.Is(err, keys.ErrNotFound) {
		t.Fatalf("Lookup of a key revoked through the other handle: err = %v, want ErrNotFound", err)
	}
	// Concurrent writers and readers on both handles: contention must turn
	// into waiting, not errors.
	stores := []Store{cli, gw}
	const perStore = 25
	var wg sync.WaitGroup
	errc := make(chan error, 3*len(stores)*perStore)
	for _, s := range stores {
		for i := range perStore {
			wg.Go(func() {
				secret, _, err := s.Issue(ctx, keys.Spec{Name: "concurrent", Tier: "free"})
				if err != nil {
					errc <- err
					return
				}
				if _, err := s.List(ctx); err != nil {
					errc <- err
				}
				if _, err := stores[i%2].Lookup(ctx, secret); err != nil {
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
		if want := 1 + len(stores)*perStore; len(ks) != want {
			t.Errorf("handle %d lists %d keys, want %d", i, len(ks), want)
		}
	}
}

func testSharedVersion(t *testing.T, open func(t *testing.T) (Store, Store)) {
	gw, cli := open(t)
	checkVersionMoves(t, gw, cli)
}
