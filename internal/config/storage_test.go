package config

import (
	"strings"
	"testing"
)

func TestStorageDefaultsToEmbedded(t *testing.T) {
	c, err := Parse("test.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Storage.Metadata.Kind != MetadataSQLite || c.Storage.Blobs.Kind != BlobsFilesystem {
		t.Fatalf("storage defaults = %+v, want sqlite + filesystem", c.Storage)
	}
	if m := c.MissingStorageEnv(func(string) string { return "" }); len(m) != 0 {
		t.Fatalf("embedded storage needs no environment, got %v", m)
	}
}

func TestStorageFleet(t *testing.T) {
	src := good + `storage:
  metadata:
    kind: postgres
    dsn_env: SY_PG_DSN
    max_conns: 20
  blobs:
    kind: s3
    endpoint: https://minio.internal:9000
    bucket: switchyard-blobs
    region: eu-west-1
    path_style: true
    access_key_env: SY_S3_ACCESS
    secret_key_env: SY_S3_SECRET
`
	c, err := Parse("test.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Storage{
		Metadata: StorageMetadata{Kind: "postgres", DSNEnv: "SY_PG_DSN", MaxConns: 20},
		Blobs: StorageBlobs{Kind: "s3", Endpoint: "https://minio.internal:9000", Bucket: "switchyard-blobs", Region: "eu-west-1",
			PathStyle: true, AccessKeyEnv: "SY_S3_ACCESS", SecretKeyEnv: "SY_S3_SECRET"},
	}
	if c.Storage != want {
		t.Fatalf("storage = %+v, want %+v", c.Storage, want)
	}
	missing := c.MissingStorageEnv(func(k string) string {
		if k == "SY_S3_ACCESS" {
			return "x"
		}
		return ""
	})
	got := strings.Join(missing, "\n")
	if len(missing) != 2 || !strings.Contains(got, "storage.metadata.dsn_env: environment variable SY_PG_DSN") ||
		!strings.Contains(got, "storage.blobs.secret_key_env: environment variable SY_S3_SECRET") {
		t.Fatalf("MissingStorageEnv = %v", missing)
	}
	// Credentials from the AWS chain: no key variables.
	src = good + "storage:\n  blobs:\n    kind: s3\n    bucket: b-1\n"
	if _, err := Parse("test.yaml", []byte(src)); err != nil {
		t.Fatalf("s3 with the default credential chain: %v", err)
	}
}

func TestStorageErrorsNameFieldAndLine(t *testing.T) {
	// good has 12 lines; storage: is line 13.
	for _, tc := range []struct {
		name, storage string
		want          []string
	}{
		{"unknown metadata kind", "  metadata:\n    kind: mysql\n", []string{"test.yaml:15:", "storage.metadata.kind", `"sqlite" or "postgres"`}},
		{"postgres without dsn_env", "  metadata:\n    kind: postgres\n", []string{"test.yaml:14:", "storage.metadata.dsn_env", "is required"}},
		{"DSN in the file", "  metadata:\n    kind: postgres\n    dsn_env: postgres://u:p@h/db\n", []string{"test.yaml:16:", "storage.metadata.dsn_env", "environment variable name"}},
		{"dsn_env with sqlite", "  metadata:\n    dsn_env: X\n", []string{"test.yaml:15:", "storage.metadata.dsn_env", "only kind postgres"}},
		{"negative max_conns", "  metadata:\n    kind: postgres\n    dsn_env: X\n    max_conns: -1\n", []string{"test.yaml:17:", "storage.metadata.max_conns"}},
		{"max_conns not a number", "  metadata:\n    kind: postgres\n    dsn_env: X\n    max_conns: many\n", []string{"test.yaml:17:", "storage.metadata.max_conns", "whole number"}},
		{"unknown blobs kind", "  blobs:\n    kind: gcs\n", []string{"test.yaml:15:", "storage.blobs.kind", `"filesystem" or "s3"`}},
		{"s3 without bucket", "  blobs:\n    kind: s3\n", []string{"test.yaml:14:", "storage.blobs.bucket", "bucket name"}},
		{"bad bucket", "  blobs:\n    kind: s3\n    bucket: My_Bucket\n", []string{"test.yaml:16:", "storage.blobs.bucket"}},
		{"bad endpoint", "  blobs:\n    kind: s3\n    bucket: b-1\n    endpoint: minio:9000\n", []string{"test.yaml:17:", "storage.blobs.endpoint", "http or https URL"}},
		{"endpoint with path", "  blobs:\n    kind: s3\n    bucket: b-1\n    endpoint: http://minio:9000/b-1\n", []string{"test.yaml:17:", "storage.blobs.endpoint", "without a path"}},
		{"half the keys", "  blobs:\n    kind: s3\n    bucket: b-1\n    access_key_env: A\n", []string{"test.yaml:14:", "storage.blobs", "go together"}},
		{"key in the file", "  blobs:\n    kind: s3\n    bucket: b-1\n    access_key_env: AKIA/xyz\n    secret_key_env: S\n", []string{"test.yaml:17:", "storage.blobs.access_key_env", "environment variable name"}},
		{"bucket with filesystem", "  blobs:\n    bucket: b-1\n", []string{"test.yaml:15:", "storage.blobs.bucket", "only kind s3"}},
		{"unknown field", "  blobs:\n    kind: s3\n    bucket: b-1\n    colour: red\n", []string{"test.yaml:17:", "storage.blobs.colour", `unknown field "colour"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(good+"storage:\n"+tc.storage))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
