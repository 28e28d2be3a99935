package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/internal/config"
	"github.com/switchyard-ai/switchyard/internal/objstore"
	"github.com/switchyard-ai/switchyard/internal/pgdb"
)

// checkTimeout bounds each storage connection check.
const checkTimeout = 10 * time.Second

// checkConnections connects to the configured fleet storage (`validate
// --check-connections`): PostgreSQL (SELECT 1, server and schema
// versions) and the object store (HeadBucket). It prints one line per
// store and returns an error naming the setting to fix for each failure.
func checkConnections(ctx context.Context, cfg *config.Config, getenv func(string) string, stdout io.Writer) error {
	var errs []error
	m := cfg.Storage.Metadata
	switch m.Kind {
	case config.MetadataPostgres:
		if err := checkPostgres(ctx, m, getenv, stdout); err != nil {
			errs = append(errs, err)
		}
	default:
		fmt.Fprintf(stdout, "storage.metadata: %s under --data-dir (nothing to connect to)\n", m.Kind)
	}
	b := cfg.Storage.Blobs
	switch b.Kind {
	case config.BlobsS3:
		if err := checkS3(ctx, b, getenv, stdout); err != nil {
			errs = append(errs, err)
		}
	default:
		fmt.Fprintf(stdout, "storage.blobs: %s under --data-dir (nothing to connect to)\n", b.Kind)
	}
	return errors.Join(errs...)
}

func checkPostgres(ctx context.Context, m config.StorageMetadata, getenv func(string) string, stdout io.Writer) error {
	setting := fmt.Sprintf("storage.metadata.dsn_env (the DSN in $%s)", m.DSNEnv)
	dsn := getenv(m.DSNEnv)
	if dsn == "" {
		return fmt.Errorf("%s: the environment variable is not set", setting)
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	info, err := pgdb.Check(ctx, dsn)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	comps := make([]string, 0, len(info.Schemas))
	for c := range info.Schemas {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	schema := "no Switchyard tables yet (each store creates its own at first start)"
	if len(comps) > 0 {
		parts := make([]string, len(comps))
		for i, c := range comps {
			parts[i] = fmt.Sprintf("%s %d", c, info.Schemas[c])
		}
		schema = "schema versions: " + strings.Join(parts, ", ")
	}
	fmt.Fprintf(stdout, "storage.metadata: postgres ok (host %s port %d database %q user %q, PostgreSQL %s); %s\n",
		info.Host, info.Port, info.Database, info.User, info.ServerVersion, schema)
	return nil
}

func checkS3(ctx context.Context, b config.StorageBlobs, getenv func(string) string, stdout io.Writer) error {
	creds := "the AWS default credential chain"
	oc := objstore.Config{Endpoint: b.Endpoint, Bucket: b.Bucket, Region: b.Region, PathStyle: b.PathStyle}
	if b.AccessKeyEnv != "" {
		creds = fmt.Sprintf("storage.blobs.access_key_env/secret_key_env ($%s/$%s)", b.AccessKeyEnv, b.SecretKeyEnv)
		oc.AccessKey, oc.SecretKey = getenv(b.AccessKeyEnv), getenv(b.SecretKeyEnv)
		if oc.AccessKey == "" || oc.SecretKey == "" {
			return fmt.Errorf("%s: not set", creds)
		}
	}
	where := b.Endpoint
	if where == "" {
		where = "AWS S3"
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	s, err := objstore.New(ctx, oc)
	if err == nil {
		err = s.Check(ctx)
	}
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "storage.blobs: s3 ok (bucket %q at %s)\n", b.Bucket, where)
		return nil
	case errors.Is(err, objstore.ErrNoBucket):
		return fmt.Errorf("storage.blobs.bucket: bucket %q does not exist at %s (create it, or fix the name): %w", b.Bucket, where, err)
	case errors.Is(err, objstore.ErrAccessDenied):
		return fmt.Errorf("%s: the store refused them for bucket %q at %s (wrong keys, or no permission on the bucket): %w", creds, b.Bucket, where, err)
	case strings.Contains(err.Error(), "credentials"):
		return fmt.Errorf("%s: no usable credentials: %w", creds, err)
	default:
		return fmt.Errorf("storage.blobs.endpoint (%s): cannot reach the store, or it answered unexpectedly (check the URL, region %q and path_style %v): %w",
			where, b.Region, b.PathStyle, err)
	}
}
