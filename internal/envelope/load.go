package envelope

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Where the KEKs come from, in this order (see Load).
const (
	// EnvKey holds the keys themselves: base64, the primary first,
	// separated by commas.
	EnvKey = "SWITCHYARD_DATA_KEY"
	// EnvKeyFile names a file holding them, one a line.
	EnvKeyFile = "SWITCHYARD_DATA_KEY_FILE"
	// KeyFileName is the file in the data directory used when neither is
	// set; it is created with a new random key when missing.
	KeyFileName = "data.key"
)

// Load returns the keyring from $SWITCHYARD_DATA_KEY, else from the file
// $SWITCHYARD_DATA_KEY_FILE names, else from DATA_DIR/data.key, which is
// created (mode 0600, one random key) when missing, so an embedded gateway
// encrypts without being configured. The generated key lives beside the
// databases, so it protects deleted content (erasure) but not a stolen data
// directory: production deployments keep the key elsewhere.
func Load(dataDir string) (*Keyring, error) {
	if v := strings.TrimSpace(os.Getenv(EnvKey)); v != "" {
		return parseKeyring(v, "$"+EnvKey)
	}
	if f := os.Getenv(EnvKeyFile); f != "" {
		return loadFile(f)
	}
	if dataDir == "" {
		return nil, errors.New("envelope: no data directory for the data key file")
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	path := filepath.Join(dir, KeyFileName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
	}
	return loadFile(path)
}

// KeyFile is the file Load reads the keys from, "" when they come from
// $SWITCHYARD_DATA_KEY.
func KeyFile(dataDir string) (string, error) {
	if strings.TrimSpace(os.Getenv(EnvKey)) != "" {
		return "", nil
	}
	if f := os.Getenv(EnvKeyFile); f != "" {
		return f, nil
	}
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		return "", fmt.Errorf("envelope: %w", err)
	}
	return filepath.Join(dir, KeyFileName), nil
}

// loadFile reads a keyring from a key file, and re-reads it when it meets
// a KEK it does not know (rotation while it runs).
func loadFile(path string) (*Keyring, error) {
	read := func() ([][]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("envelope: %w", err)
		}
		return ParseKeys(string(b))
	}
	keys, err := read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	k, err := NewKeyring(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	k.source, k.reload = path, read
	return k, nil
}

func parseKeyring(s, source string) (*Keyring, error) {
	keys, err := ParseKeys(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	k, err := NewKeyring(keys...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	k.source = source
	return k, nil
}

// NewKey returns a random KEK.
func NewKey() ([]byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("envelope: new key: %w", err)
	}
	return raw, nil
}

// createKeyFile writes a new random key to path unless the file exists.
// The key is written to a temporary file that is then linked into place,
// so services starting together on one data directory agree on one key
// and none reads a half-written file.
func createKeyFile(path string) error {
	key, err := NewKey()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	tmp, err := writeTemp(path, [][]byte{key})
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("envelope: %w", err)
	}
	return nil
}

// WriteKeyFile writes keys (the primary first) to path, mode 0600,
// replacing it atomically.
func WriteKeyFile(path string, keys [][]byte) error {
	tmp, err := writeTemp(path, keys)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("envelope: write key file: %w", err)
	}
	return nil
}

// writeTemp writes keys to a new temporary file beside path (CreateTemp
// makes it 0600), fsynced, and returns its name.
func writeTemp(path string, keys [][]byte) (string, error) {
	var b strings.Builder
	b.WriteString("# Switchyard data key-encryption keys (base64), the primary first.\n")
	b.WriteString("# Losing them loses every stored response, file and vector store chunk.\n")
	for _, k := range keys {
		b.WriteString(EncodeKey(k) + "\n")
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return "", fmt.Errorf("envelope: write key file: %w", err)
	}
	_, err = f.WriteString(b.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("envelope: write key file: %w", err)
	}
	return f.Name(), nil
}
