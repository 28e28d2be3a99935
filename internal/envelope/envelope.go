// Package envelope encrypts the owners' content that Switchyard keeps at
// rest (stored responses, vector store chunks, file blobs) so that it can be
// erased by forgetting a key.
//
// Every object (a response, a file, a vector store file's chunks) gets its
// own random 256-bit data key (DEK). Its content is sealed with AES-256-GCM
// under that DEK, the object's id bound as associated data, so a ciphertext
// moved to another object does not open. The DEK itself is stored only
// wrapped (AES-256-GCM) under a key-encryption key (KEK) that comes from a
// secret outside the databases (see Load). Deleting the object deletes its
// wrapped DEK, after which every copy of the ciphertext, wherever it went
// (a database page, a backup, object storage), is unreadable.
//
// A Keyring holds one or more KEKs: the first (primary) wraps new DEKs,
// all of them unwrap. Rotation adds a new primary and rewraps the stored
// DEKs under it (Rewrap), after which the old KEK can be dropped; content
// is never re-encrypted. KEKs are named by an id derived from the key, so
// a wrapped DEK says which KEK opens it without the operator naming keys.
package envelope

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// KeySize is the size of every key: AES-256.
const KeySize = 32

// Versions of the formats written here, the first byte of each.
const (
	wrapVersion = 1
	sealVersion = 1
)

// SealOverhead is how many bytes Seal adds to a plaintext: a version byte,
// the nonce and the GCM tag.
const SealOverhead = 1 + 12 + 16

var (
	// ErrUnknownKEK: the wrapped DEK names a KEK this keyring does not hold
	// (the secret was replaced without rotation, or rotation dropped a KEK
	// too early).
	ErrUnknownKEK = errors.New("envelope: data key wrapped under an unknown key-encryption key")
	// ErrOpen: a ciphertext or wrapped key failed authentication: it was
	// altered, cut short, or belongs to another object.
	ErrOpen = errors.New("envelope: message authentication failed")
)

// kek is one key-encryption key.
type kek struct {
	id   string
	aead cipher.AEAD
}

// Keyring is a set of KEKs; the first wraps new data keys. It is safe for
// concurrent use.
type Keyring struct {
	mu     sync.RWMutex
	ks     *keyset
	source string
	// reload, when set, reads the keys again from their source: Unwrap
	// calls it on meeting a KEK it does not know, so a gateway keeps
	// reading keys that `switchyard datakey rotate` rewrapped under a new
	// KEK while it ran. At most once per reloadEvery.
	reload     func() ([][]byte, error)
	lastReload time.Time
}

// reloadEvery bounds how often an unknown KEK re-reads the key source.
const reloadEvery = time.Second

// keyset is the KEKs of a Keyring at one time.
type keyset struct {
	primary *kek
	byID    map[string]*kek
}

// NewKeyring returns a keyring of keys (each KeySize bytes), the first the
// primary. Duplicates are ignored.
func NewKeyring(keys ...[]byte) (*Keyring, error) {
	ks, err := newKeyset(keys)
	if err != nil {
		return nil, err
	}
	return &Keyring{ks: ks}, nil
}

func newKeyset(keys [][]byte) (*keyset, error) {
	if len(keys) == 0 {
		return nil, errors.New("envelope: no key-encryption key")
	}
	k := &keyset{byID: map[string]*kek{}}
	for i, raw := range keys {
		if len(raw) != KeySize {
			return nil, fmt.Errorf("envelope: key %d is %d bytes, want %d", i+1, len(raw), KeySize)
		}
		id := KeyID(raw)
		if _, dup := k.byID[id]; dup {
			continue
		}
		a, err := newAEAD(raw)
		if err != nil {
			return nil, err
		}
		kk := &kek{id: id, aead: a}
		k.byID[id] = kk
		if k.primary == nil {
			k.primary = kk
		}
	}
	return k, nil
}

func (k *Keyring) current() *keyset {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.ks
}

// lookup finds KEK id, reloading the source once if it is unknown.
func (k *Keyring) lookup(id string) (*kek, bool) {
	if kk, ok := k.current().byID[id]; ok {
		return kk, true
	}
	if k.reload == nil {
		return nil, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if kk, ok := k.ks.byID[id]; ok {
		return kk, true // another caller reloaded meanwhile
	}
	if time.Since(k.lastReload) < reloadEvery {
		return nil, false
	}
	k.lastReload = time.Now()
	keys, err := k.reload()
	if err != nil {
		return nil, false
	}
	ks, err := newKeyset(keys)
	if err != nil {
		return nil, false
	}
	k.ks = ks
	kk, ok := ks.byID[id]
	return kk, ok
}

// KeyID names a KEK: a hash of the key, which says nothing about it.
func KeyID(key []byte) string {
	h := sha256.New()
	h.Write([]byte("switchyard kek id\x00"))
	h.Write(key)
	return "kek-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// PrimaryID is the id of the KEK that wraps new data keys.
func (k *Keyring) PrimaryID() string { return k.current().primary.id }

// IDs are the ids of every KEK, the primary first.
func (k *Keyring) IDs() []string {
	ks := k.current()
	ids := []string{ks.primary.id}
	for id := range ks.byID {
		if id != ks.primary.id {
			ids = append(ids, id)
		}
	}
	return ids
}

// Source says where the keyring came from (an environment variable's name
// or a file's path), for start-up messages; never the key.
func (k *Keyring) Source() string { return k.source }

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	return a, nil
}

// wrapAD binds a wrapped DEK to its object: a wrapped key copied to
// another object's row does not unwrap.
func wrapAD(objectID string) []byte { return []byte("switchyard dek\x00" + objectID) }

// DataKey is one object's data key, unwrapped.
type DataKey struct {
	objectID string
	raw      []byte
	aead     cipher.AEAD
}

// NewDataKey makes a random data key for objectID and returns it with its
// wrapped form (to store) under the primary KEK.
func (k *Keyring) NewDataKey(objectID string) (*DataKey, []byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, nil, fmt.Errorf("envelope: new data key: %w", err)
	}
	dk, err := newDataKey(objectID, raw)
	if err != nil {
		return nil, nil, err
	}
	w, err := k.wrap(k.current().primary, objectID, raw)
	if err != nil {
		return nil, nil, err
	}
	return dk, w, nil
}

func newDataKey(objectID string, raw []byte) (*DataKey, error) {
	a, err := newAEAD(raw)
	if err != nil {
		return nil, err
	}
	return &DataKey{objectID: objectID, raw: raw, aead: a}, nil
}

// wrapped: version | len(kek id) | kek id | nonce | sealed key and tag.
func (k *Keyring) wrap(p *kek, objectID string, raw []byte) ([]byte, error) {
	out := make([]byte, 0, 2+len(p.id)+12+KeySize+16)
	out = append(out, wrapVersion, byte(len(p.id)))
	out = append(out, p.id...)
	nonce := make([]byte, 12)
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("envelope: wrap: %w", err)
	}
	out = append(out, nonce...)
	return p.aead.Seal(out, nonce, raw, wrapAD(objectID)), nil
}

// WrappedKEKID returns the id of the KEK that wrapped w.
func WrappedKEKID(w []byte) (string, error) {
	if len(w) < 2 || w[0] != wrapVersion || len(w) < 2+int(w[1]) {
		return "", fmt.Errorf("envelope: malformed wrapped data key: %w", ErrOpen)
	}
	return string(w[2 : 2+int(w[1])]), nil
}

// Unwrap opens objectID's wrapped data key.
func (k *Keyring) Unwrap(objectID string, w []byte) (*DataKey, error) {
	id, err := WrappedKEKID(w)
	if err != nil {
		return nil, err
	}
	kk, ok := k.lookup(id)
	if !ok {
		return nil, fmt.Errorf("%w (%s)", ErrUnknownKEK, id)
	}
	rest := w[2+len(id):]
	if len(rest) != 12+KeySize+16 {
		return nil, fmt.Errorf("envelope: malformed wrapped data key: %w", ErrOpen)
	}
	raw, err := kk.aead.Open(nil, rest[:12], rest[12:], wrapAD(objectID))
	if err != nil {
		return nil, fmt.Errorf("envelope: unwrap data key of %s: %w", objectID, ErrOpen)
	}
	return newDataKey(objectID, raw)
}

// RewrapKey returns w wrapped under the primary KEK, and whether that changed
// anything (false when the primary already wraps it).
func (k *Keyring) RewrapKey(objectID string, w []byte) ([]byte, bool, error) {
	id, err := WrappedKEKID(w)
	if err != nil {
		return nil, false, err
	}
	p := k.current().primary
	if id == p.id {
		return w, false, nil
	}
	dk, err := k.Unwrap(objectID, w)
	if err != nil {
		return nil, false, err
	}
	nw, err := k.wrap(p, objectID, dk.raw)
	if err != nil {
		return nil, false, err
	}
	return nw, true, nil
}

// contentAD binds a ciphertext to its object and to the field it fills,
// so neither another object's ciphertext nor another field's opens.
func (dk *DataKey) contentAD(field string) []byte {
	return []byte("switchyard content\x00" + dk.objectID + "\x00" + field)
}

// Seal encrypts a small value (a row's column) of the key's object; field
// names the column. The result is len(plaintext)+SealOverhead bytes.
func (dk *DataKey) Seal(field string, plaintext []byte) []byte {
	out := make([]byte, 1+12, SealOverhead+len(plaintext))
	out[0] = sealVersion
	// A random nonce: a data key seals a handful of values, far from the
	// 2^32 messages where random 96-bit nonces start to risk a collision.
	if _, err := rand.Read(out[1:13]); err != nil {
		panic("envelope: crypto/rand failed: " + err.Error()) // crypto/rand does not fail on supported platforms
	}
	return dk.aead.Seal(out, out[1:13], plaintext, dk.contentAD(field))
}

// Open decrypts what Seal made for the same object and field.
func (dk *DataKey) Open(field string, sealed []byte) ([]byte, error) {
	if len(sealed) < SealOverhead || sealed[0] != sealVersion {
		return nil, fmt.Errorf("envelope: open %s of %s: malformed: %w", field, dk.objectID, ErrOpen)
	}
	pt, err := dk.aead.Open(nil, sealed[1:13], sealed[13:], dk.contentAD(field))
	if err != nil {
		return nil, fmt.Errorf("envelope: open %s of %s: %w", field, dk.objectID, ErrOpen)
	}
	return pt, nil
}

// EncodeKey is a key as the key file and $SWITCHYARD_DATA_KEY hold it.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// ParseKeys reads keys in base64 (standard or URL alphabet, padded or
// not), separated by commas or white space; lines starting with '#' are
// comments. The first key is the primary.
func ParseKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\r' }) {
			raw, err := decodeKey(f)
			if err != nil {
				return nil, fmt.Errorf("envelope: key %d: %w", len(keys)+1, err)
			}
			keys = append(keys, raw)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("envelope: no key found")
	}
	return keys, nil
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(s, "=")
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("a key must be %d bytes in base64, not %d", KeySize, len(raw))
			}
			return raw, nil
		}
	}
	return nil, errors.New("not base64")
}
