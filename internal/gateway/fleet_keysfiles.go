package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/backends/admin"
	"github.com/switchyard-ai/switchyard/backends/files"
	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/keys"
	"github.com/switchyard-ai/switchyard/internal/objstore"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// KeyStore is a key store as the processes use it: the Cache's Source,
// the admin API's and the CLI's operations, and Close. keys.SQLiteStore
// and keys.PostgresStore are the implementations OpenKeyStore chooses
// between.
type KeyStore interface {
	keys.Source
	admin.KeyStore
	Close() error
}

// KeyOutageGrace is how long a process whose key store is PostgreSQL keeps
// answering from its key cache while the database cannot be read
// (keys.WithOutageGrace): a key revoked meanwhile is honoured at
// most this long after its revocation.
const KeyOutageGrace = 30 * time.Second

// OpenKeyStore opens the key store storage names: PostgreSQL (the DSN from
// the environment variable storage.metadata.dsn_env names) or SQLite in
// dataDir.
func OpenKeyStore(ctx context.Context, st config.Storage, dataDir string) (KeyStore, error) {
	if st.Metadata.Kind != config.MetadataPostgres {
		return keys.OpenSQLite(ctx, dataDir)
	}
	dsn, err := storageDSN(st.Metadata)
	if err != nil {
		return nil, err
	}
	return keys.OpenPostgres(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns})
}

func storageDSN(m config.StorageMetadata) (string, error) {
	dsn := os.Getenv(m.DSNEnv)
	if dsn == "" {
		return "", fmt.Errorf("gateway: storage.metadata.dsn_env: environment variable %s is not set", m.DSNEnv)
	}
	return dsn, nil
}

// newKeyCache is the process's key cache over store: on PostgreSQL it
// keeps answering cached keys through a database blink (KeyOutageGrace).
func newKeyCache(store KeyStore) *keys.Cache {
	if _, ok := store.(*keys.PostgresStore); ok {
		return keys.NewCache(store, keyCacheSize, keyCacheTTL, keys.WithOutageGrace(KeyOutageGrace))
	}
	return keys.NewCache(store, keyCacheSize, keyCacheTTL)
}

// openFleetFiles opens the files service on the fleet storage when
// storage.metadata is postgres, and returns nil for SQLite (backends opens
// SQLite and the data directory then). Blobs go to S3, or, with blobs
// kind filesystem, to the data directory, which every replica must then
// share. Every replica must also share the data key (envelope): with
// PostgreSQL it must come from $SWITCHYARD_DATA_KEY or
// $SWITCHYARD_DATA_KEY_FILE, never from a key file each replica would
// generate for itself.
func openFleetFiles(ctx context.Context, st config.Storage, dataDir string, log *slog.Logger) (*files.Store, error) {
	switch {
	case st.Metadata.Kind != config.MetadataPostgres && st.Blobs.Kind == config.BlobsS3:
		return nil, errors.New("gateway: files: S3 blobs need PostgreSQL metadata (storage.metadata.kind: postgres): the SQLite rows of one node would not describe the blobs other nodes write")
	case st.Metadata.Kind != config.MetadataPostgres:
		return nil, nil
	}
	if strings.TrimSpace(os.Getenv(envelope.EnvKey)) == "" && os.Getenv(envelope.EnvKeyFile) == "" {
		return nil, fmt.Errorf("gateway: files: with PostgreSQL storage every replica must share the data key: set $%s or $%s (a key generated in each replica's data directory would make one replica's files unreadable to the others)",
			envelope.EnvKey, envelope.EnvKeyFile)
	}
	ring, err := envelope.Load(dataDir)
	if err != nil {
		return nil, fmt.Errorf("gateway: files: %w", err)
	}
	var blobs files.Blobs
	if b := st.Blobs; b.Kind == config.BlobsS3 {
		store, err := objstore.New(ctx, objstore.Config{Endpoint: b.Endpoint, Bucket: b.Bucket, Region: b.Region,
			PathStyle: b.PathStyle, AccessKey: envOf(b.AccessKeyEnv), SecretKey: envOf(b.SecretKeyEnv)})
		if err != nil {
			return nil, fmt.Errorf("gateway: files: %w", err)
		}
		blobs = files.NewS3Blobs(store)
	} else if blobs, err = files.OpenDiskBlobs(filepath.Join(dataDir, "files")); err != nil {
		return nil, err
	}
	dsn, err := storageDSN(st.Metadata)
	if err != nil {
		return nil, err
	}
	meta, err := files.OpenPostgresMetadata(ctx, dsn, pgdb.Pool{MaxConns: st.Metadata.MaxConns}, ring)
	if err != nil {
		return nil, err
	}
	return files.New(meta, blobs, ring, files.Options{Logger: log.With("service", "files")}), nil
}

func envOf(name string) string {
	if name == "" {
		return ""
	}
	return os.Getenv(name)
}
