package keys

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

const (
	// secretPrefix marks a string as a Switchyard key. A fixed, distinctive
	// prefix lets secret scanners (and humans) recognise leaked keys, and lets
	// Revoke tell a secret from a key ID without a database round trip.
	secretPrefix = "sk-sy-"

	// secretRandomLen base62 characters carry 43*log2(62) ≈ 256.03 bits of
	// entropy from crypto/rand, the same strength as a 256-bit symmetric key.
	secretRandomLen = 43

	secretLen = len(secretPrefix) + secretRandomLen

	// displayPrefixLen is how much of a secret is kept in the clear for
	// operators to recognise a key in listings: the fixed "sk-sy-" plus six
	// random characters (~36 bits). That is enough to tell keys apart but far
	// too little to help guess the remaining ~220 bits.
	displayPrefixLen = 12

	idPrefix   = "key_"
	idRandLen  = 8 // bytes, rendered as 16 hex characters
	idLen      = len(idPrefix) + 2*idRandLen
	base62Alph = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)

// newSecret returns a fresh key: secretPrefix followed by secretRandomLen
// uniformly random base62 characters.
func newSecret() (string, error) {
	var b strings.Builder
	b.Grow(secretLen)
	b.WriteString(secretPrefix)
	// Rejection sampling: bytes >= 248 (= 4*62) are discarded so that b%62 is
	// uniform. Reducing every byte mod 62 would make the first eight symbols
	// slightly more likely and cost entropy.
	buf := make([]byte, secretRandomLen+16)
	for b.Len() < secretLen {
		if _, err := rand.Read(buf); err != nil {
			return "", fmt.Errorf("keys: generate secret: %w", err)
		}
		for _, c := range buf {
			if c >= 4*62 {
				continue
			}
			b.WriteByte(base62Alph[c%62])
			if b.Len() == secretLen {
				break
			}
		}
	}
	return b.String(), nil
}

// newID returns a random, non-secret identifier for a key, used to refer to
// it in listings, logs and revocations without handling the secret.
func newID() (string, error) {
	var raw [idRandLen]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("keys: generate id: %w", err)
	}
	return idPrefix + hex.EncodeToString(raw[:]), nil
}

// HashSecret is the only form in which a secret is stored or used as a cache
// key: every store implementation keeps and looks up this, never the secret.
//
// A single SHA-256 is deliberate. Slow password hashes (bcrypt, scrypt,
// argon2) exist to make guessing low-entropy human passwords expensive; our
// secrets carry 256 bits from crypto/rand, so brute force over the input space
// is infeasible no matter how fast the hash is. A fast, unsalted hash also
// keeps the hot path cheap and, being deterministic, lets us find a key by an
// indexed equality lookup on the hash instead of scanning and verifying.
func HashSecret(secret string) [sha256.Size]byte {
	if len(secret) <= secretLen {
		// Copying into a stack array keeps the hot path allocation-free;
		// []byte(secret) would allocate for anything over 32 bytes.
		var buf [secretLen]byte
		n := copy(buf[:], secret)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(secret))
}

// wellFormedSecret reports whether s has the shape of a key. It looks only at
// the public format (prefix, length, alphabet), so answering early for
// malformed input reveals nothing about any real key, and it spares the hash,
// the cache and the database from garbage such as "Bearer undefined".
func wellFormedSecret(s string) bool {
	if len(s) != secretLen || !strings.HasPrefix(s, secretPrefix) {
		return false
	}
	for i := len(secretPrefix); i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z') {
			return false
		}
	}
	return true
}

// wellFormedID reports whether s has the shape of a key ID.
func wellFormedID(s string) bool {
	if len(s) != idLen || !strings.HasPrefix(s, idPrefix) {
		return false
	}
	for i := len(idPrefix); i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
