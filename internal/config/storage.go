package config

import (
	"fmt"
	"net/url"
	"regexp"
)

// Storage says where the stores (keys, files, batches, responses, vector
// stores) keep their state: embedded (SQLite and files under --data-dir,
// one node) or fleet (PostgreSQL for metadata and an S3-compatible object
// store for blobs, shared by every replica). internal/gateway opens the
// stores it names (docs/operations.md, "Embedded and fleet storage").
type Storage struct {
	Metadata StorageMetadata `yaml:"metadata" json:"metadata,omitzero"`
	Blobs    StorageBlobs    `yaml:"blobs" json:"blobs,omitzero"`
}

// StorageMetadata is where rows live.
type StorageMetadata struct {
	// Kind is MetadataSQLite (default: files under --data-dir) or
	// MetadataPostgres.
	Kind string `yaml:"kind" json:"kind,omitempty"`
	// DSNEnv names the environment variable holding the PostgreSQL
	// connection string (postgres://user:password@host:5432/db?sslmode=...
	// or key=value); the DSN carries a password, so it never appears in
	// the file. Required for postgres.
	DSNEnv string `yaml:"dsn_env" json:"dsn_env,omitempty"`
	// MaxConns bounds each process's connection pool (postgres only);
	// 0: DefaultPostgresMaxConns, or the DSN's pool_max_conns.
	MaxConns int32 `yaml:"max_conns" json:"max_conns,omitempty"`
}

// StorageBlobs is where file contents live.
type StorageBlobs struct {
	// Kind is BlobsFilesystem (default: under --data-dir) or BlobsS3.
	Kind string `yaml:"kind" json:"kind,omitempty"`
	// Endpoint is the S3-compatible store's base URL; empty: AWS S3.
	Endpoint string `yaml:"endpoint" json:"endpoint,omitempty"`
	Bucket   string `yaml:"bucket" json:"bucket,omitempty"`
	// Region signs the requests; empty: the AWS chain's (AWS_REGION), else
	// us-east-1.
	Region string `yaml:"region" json:"region,omitempty"`
	// PathStyle addresses the bucket in the URL's path, as most
	// self-hosted stores (MinIO, Ceph, versitygw) need.
	PathStyle bool `yaml:"path_style" json:"path_style,omitempty"`
	// AccessKeyEnv and SecretKeyEnv name the environment variables holding
	// the credentials; both empty: the AWS SDK's default chain (AWS_*
	// variables, shared config, web identity, instance roles).
	AccessKeyEnv string `yaml:"access_key_env" json:"access_key_env,omitempty"`
	SecretKeyEnv string `yaml:"secret_key_env" json:"secret_key_env,omitempty"`
}

// Storage kinds.
const (
	MetadataSQLite   = "sqlite"
	MetadataPostgres = "postgres"
	BlobsFilesystem  = "filesystem"
	BlobsS3          = "s3"
)

// DefaultPostgresMaxConns is the pool size per process when neither
// max_conns nor the DSN's pool_max_conns sets one (pgdb.DefaultMaxConns).
const DefaultPostgresMaxConns = 10

var (
	// bucketRE is an S3 bucket name (virtual-host safe: no dots needed).
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
)

func (c *Config) applyStorageDefaults() {
	if c.Storage.Metadata.Kind == "" {
		c.Storage.Metadata.Kind = MetadataSQLite
	}
	if c.Storage.Blobs.Kind == "" {
		c.Storage.Blobs.Kind = BlobsFilesystem
	}
}

func (v *validator) checkStorage(c *Config) {
	m := c.Storage.Metadata
	switch m.Kind {
	case MetadataSQLite:
		if m.DSNEnv != "" {
			v.fail("only kind postgres takes dsn_env (sqlite lives under --data-dir)", "storage", "metadata", "dsn_env")
		}
		if m.MaxConns != 0 {
			v.fail("only kind postgres takes max_conns", "storage", "metadata", "max_conns")
		}
	case MetadataPostgres:
		switch {
		case m.DSNEnv == "":
			v.fail("is required for postgres: the name of the environment variable holding the connection string", "storage", "metadata", "dsn_env")
		case !envNameRE.MatchString(m.DSNEnv):
			v.fail("must be an environment variable name (the DSN itself goes in that variable, not in the file)", "storage", "metadata", "dsn_env")
		}
		if m.MaxConns < 0 || m.MaxConns > 10000 {
			v.fail("must be between 1 and 10000 (0: the default)", "storage", "metadata", "max_conns")
		}
	default:
		v.fail(fmt.Sprintf("must be %q or %q", MetadataSQLite, MetadataPostgres), "storage", "metadata", "kind")
	}

	b := c.Storage.Blobs
	switch b.Kind {
	case BlobsFilesystem:
		for _, f := range []struct {
			field string
			set   bool
		}{
			{"endpoint", b.Endpoint != ""}, {"bucket", b.Bucket != ""}, {"region", b.Region != ""},
			{"path_style", b.PathStyle}, {"access_key_env", b.AccessKeyEnv != ""}, {"secret_key_env", b.SecretKeyEnv != ""},
		} {
			if f.set {
				v.fail("only kind s3 takes "+f.field+" (filesystem blobs live under --data-dir)", "storage", "blobs", f.field)
			}
		}
	case BlobsS3:
		if !bucketRE.MatchString(b.Bucket) {
			v.fail("must be an S3 bucket name (3-63 of a-z, 0-9, '.', '-')", "storage", "blobs", "bucket")
		}
		if b.Endpoint != "" {
			if u, err := url.Parse(b.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				v.fail("must be an http or https URL with a host (empty: AWS S3)", "storage", "blobs", "endpoint")
			} else if u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/") {
				v.fail("must be the store's base URL, without a path, query or fragment", "storage", "blobs", "endpoint")
			}
		}
		for _, f := range []struct{ field, val string }{{"access_key_env", b.AccessKeyEnv}, {"secret_key_env", b.SecretKeyEnv}} {
			if f.val != "" && !envNameRE.MatchString(f.val) {
				v.fail("must be an environment variable name (the key itself goes in that variable, not in the file)", "storage", "blobs", f.field)
			}
		}
		if (b.AccessKeyEnv == "") != (b.SecretKeyEnv == "") {
			v.fail("access_key_env and secret_key_env go together (both empty: the AWS default credential chain)", "storage", "blobs")
		}
	default:
		v.fail(fmt.Sprintf("must be %q or %q", BlobsFilesystem, BlobsS3), "storage", "blobs", "kind")
	}
}

// MissingStorageEnv lists the storage settings whose environment variable
// is unset: the gateway cannot reach its fleet storage without them.
func (c *Config) MissingStorageEnv(getenv func(string) string) []string {
	var missing []string
	m, b := c.Storage.Metadata, c.Storage.Blobs
	if m.Kind == MetadataPostgres && m.DSNEnv != "" && getenv(m.DSNEnv) == "" {
		missing = append(missing, fmt.Sprintf("storage.metadata.dsn_env: environment variable %s is not set", m.DSNEnv))
	}
	if b.Kind == BlobsS3 {
		for _, f := range []struct{ field, env string }{{"access_key_env", b.AccessKeyEnv}, {"secret_key_env", b.SecretKeyEnv}} {
			if f.env != "" && getenv(f.env) == "" {
				missing = append(missing, fmt.Sprintf("storage.blobs.%s: environment variable %s is not set", f.field, f.env))
			}
		}
	}
	return missing
}
