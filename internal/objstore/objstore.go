// Package objstore keeps blobs in an S3-compatible object store (AWS S3,
// or any store speaking its API: MinIO, Ceph RGW, versitygw, R2, ...), the
// fleet-mode counterpart of blobs in the data directory. Uploads stream:
// content is sent in parts of PartSize as it is read, so memory per upload
// is one part whatever the object's size, and an upload that fails or
// exceeds its limit is aborted, leaving nothing behind (and any earlier
// object under the same key untouched).
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// DefaultPartSize is the multipart part size, and so the memory one upload
// holds. S3 takes parts of 5 MiB to 5 GiB (the last may be smaller) and at
// most MaxParts of them: 8 MiB parts allow objects up to about 78 GiB.
const DefaultPartSize = 8 << 20

// MaxParts is S3's limit on parts per multipart upload.
const MaxParts = 10000

// minPartSize is S3's smallest part but the last.
const minPartSize = 5 << 20

var (
	// ErrNotFound reports a key with no object. It matches fs.ErrNotExist
	// too, as a filesystem blob store's error would.
	ErrNotFound = fmt.Errorf("objstore: object not found: %w", fs.ErrNotExist)
	// ErrTooLarge reports content beyond Put's limit; nothing was stored.
	ErrTooLarge = errors.New("objstore: object too large")
	// ErrNoBucket reports that the configured bucket does not exist.
	ErrNoBucket = errors.New("objstore: bucket does not exist")
	// ErrAccessDenied reports credentials the store rejects or that lack
	// permission on the bucket.
	ErrAccessDenied = errors.New("objstore: access denied")
)

// SourceError wraps an error reading Put's source (the client's upload),
// as distinct from a failure of the store.
type SourceError struct{ Err error }

func (e *SourceError) Error() string { return "objstore: read upload: " + e.Err.Error() }
func (e *SourceError) Unwrap() error { return e.Err }

// Config says where the objects live.
type Config struct {
	// Endpoint is the store's base URL (https://minio.internal:9000);
	// empty means AWS S3 for Region.
	Endpoint string
	Bucket   string
	Region   string
	// PathStyle addresses the bucket in the path (endpoint/bucket/key)
	// rather than the host name (bucket.endpoint/key); most self-hosted
	// stores need it.
	PathStyle bool
	// AccessKey and SecretKey, when both set, are the credentials; when
	// empty, the AWS SDK's default chain finds them (AWS_* environment,
	// shared config files, web identity, ECS or EC2 instance roles).
	AccessKey, SecretKey string
	// PartSize overrides DefaultPartSize (at least 5 MiB).
	PartSize int64
}

// Store keeps objects in one bucket. It is safe for concurrent use.
type Store struct {
	c        *s3.Client
	bucket   string
	partSize int64
}

// New returns a Store for cfg. It does not contact the store; Check does.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("objstore: no bucket configured")
	}
	opts := []func(*awsconfig.LoadOptions) error{}
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return nil, errors.New("objstore: an access key needs its secret key, and the reverse")
		}
		opts = append(opts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		// S3-compatible stores mostly ignore the region, but SigV4 signs it.
		awsCfg.Region = "us-east-1"
	}
	c := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Only the checksums S3 requires: several S3-compatible stores
		// reject the SDK's default trailing CRC checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return NewFromClient(c, cfg.Bucket, cfg.PartSize)
}

// NewFromClient returns a Store on an already configured client.
// partSize <= 0 means DefaultPartSize.
func NewFromClient(c *s3.Client, bucket string, partSize int64) (*Store, error) {
	if partSize <= 0 {
		partSize = DefaultPartSize
	}
	if partSize < minPartSize {
		return nil, fmt.Errorf("objstore: part size %d is below S3's minimum of %d", partSize, minPartSize)
	}
	return &Store{c: c, bucket: bucket, partSize: partSize}, nil
}

// Bucket returns the store's bucket.
func (s *Store) Bucket() string { return s.bucket }

// Check verifies that the bucket exists and the credentials may use it
// (HeadBucket).
func (s *Store) Check(ctx context.Context) error {
	_, err := s.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	// A HEAD answer has no body, so its error has only a status, and a 404
	// is ambiguous: versitygw answers an unknown access key with one. A
	// one-key listing's answer carries the store's error code.
	_, lerr := s.c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(1)})
	if lerr == nil {
		return fmt.Errorf("objstore: bucket %s: HeadBucket: %w", s.bucket, classify(err))
	}
	return fmt.Errorf("objstore: bucket %s: %w", s.bucket, classify(lerr))
}

// Put stores r's content under key, replacing any object there, and
// returns its size. limit > 0 bounds the size: one byte more and Put
// returns ErrTooLarge, having stored nothing. The object appears only when
// complete; on any failure a started multipart upload is aborted. Errors
// reading r are SourceErrors.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, limit int64) (int64, error) {
	buf := make([]byte, s.partSize)
	n, eof, err := fill(r, buf)
	if err != nil {
		return 0, err
	}
	total := int64(n)
	if limit > 0 && total > limit {
		return 0, fmt.Errorf("objstore: put %s: more than %d bytes: %w", key, limit, ErrTooLarge)
	}
	if eof {
		// One part's worth or less: a single PUT.
		_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(key),
			Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return 0, fmt.Errorf("objstore: put %s: %w", key, classify(err))
		}
		return total, nil
	}

	up, err := s.c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key),
	})
	if err != nil {
		return 0, fmt.Errorf("objstore: put %s: start upload: %w", key, classify(err))
	}
	done := false
	defer func() {
		if !done {
			s.abort(ctx, key, up.UploadId)
		}
	}()
	var parts []types.CompletedPart
	for {
		num := int32(len(parts) + 1)
		if num > MaxParts {
			return 0, fmt.Errorf("objstore: put %s: more than %d parts of %d bytes: %w", key, MaxParts, s.partSize, ErrTooLarge)
		}
		out, err := s.c.UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(num), Body: bytes.NewReader(buf[:n]), ContentLength: aws.Int64(int64(n)),
		})
		if err != nil {
			return 0, fmt.Errorf("objstore: put %s: part %d: %w", key, num, classify(err))
		}
		parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		if eof {
			break
		}
		// The part just sent is no longer needed: the next one reuses its
		// buffer.
		if n, eof, err = fill(r, buf); err != nil {
			return 0, err
		}
		if n == 0 {
			break // the content ended exactly at a part boundary
		}
		total += int64(n)
		if limit > 0 && total > limit {
			return 0, fmt.Errorf("objstore: put %s: more than %d bytes: %w", key, limit, ErrTooLarge)
		}
	}
	_, err = s.c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return 0, fmt.Errorf("objstore: put %s: complete upload: %w", key, classify(err))
	}
	done = true
	return total, nil
}

// abort drops an unfinished multipart upload and its parts. It runs on a
// detached context: the upload must go even when ctx ended it. A failed
// abort leaves parts that the bucket's lifecycle rule for incomplete
// multipart uploads removes (see docs/operations.md).
func (s *Store) abort(ctx context.Context, key string, uploadID *string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = s.c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: uploadID,
	})
}

// fill reads into buf until it is full or r ends (eof). A read error is a
// SourceError.
func fill(r io.Reader, buf []byte) (n int, eof bool, err error) {
	n, err = io.ReadFull(r, buf)
	switch {
	case err == nil:
		return n, false, nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return n, true, nil
	default:
		return n, false, &SourceError{Err: err}
	}
}

// Open returns a stream of key's content and its size. The caller closes
// it. A missing key is ErrNotFound.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, int64, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, 0, fmt.Errorf("objstore: open %s: %w", key, classify(err))
	}
	return out.Body, aws.ToInt64(out.ContentLength), nil
}

// OpenRange returns a stream of length bytes of key's content from offset
// (length < 0: to the end), and the object's total size. A range starting
// past the end reads nothing.
func (s *Store) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, int64, error) {
	if offset < 0 {
		return nil, 0, fmt.Errorf("objstore: open %s: negative offset %d", key, offset)
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), 0, nil
	}
	rng := fmt.Sprintf("bytes=%d-", offset)
	if length > 0 {
		rng = fmt.Sprintf("bytes=%d-%d", offset, offset+length-1)
	}
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key), Range: aws.String(rng)})
	if err != nil {
		if code(err) == "InvalidRange" {
			// The offset is at or past the end; report the size.
			size, herr := s.Size(ctx, key)
			if herr != nil {
				return nil, 0, herr
			}
			return io.NopCloser(strings.NewReader("")), size, nil
		}
		return nil, 0, fmt.Errorf("objstore: open %s: %w", key, classify(err))
	}
	size := aws.ToInt64(out.ContentLength)
	if cr := aws.ToString(out.ContentRange); cr != "" {
		// "bytes 0-9/1234": the total follows the slash.
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			fmt.Sscan(cr[i+1:], &size)
		}
	}
	return out.Body, size, nil
}

// Size returns key's size (HeadObject).
func (s *Store) Size(ctx context.Context, key string) (int64, error) {
	out, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return 0, fmt.Errorf("objstore: head %s: %w", key, classify(err))
	}
	return aws.ToInt64(out.ContentLength), nil
}

// Delete removes key's object. Deleting a missing key succeeds, as in S3:
// a retried delete must not fail.
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("objstore: delete %s: %w", key, classify(err))
	}
	return nil
}

// List returns the keys starting with prefix, in lexical order.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("objstore: list %q: %w", prefix, classify(err))
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// code returns the S3 error code of err, or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// classify maps the store's answers callers act on to this package's
// errors, keeping the original in the chain.
func classify(err error) error {
	switch code(err) {
	case "NoSuchKey":
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	case "NoSuchBucket":
		return fmt.Errorf("%w (%w)", ErrNoBucket, err)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden",
		"XAdminUserNotFound": // versitygw's unknown access key
		return fmt.Errorf("%w (%w)", ErrAccessDenied, err)
	case "NotFound":
		// HEAD answers carry no body, so only the status tells: 404.
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden {
		return fmt.Errorf("%w (%w)", ErrAccessDenied, err)
	}
	return err
}

// Object describes a stored object.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Objects yields the objects whose key starts with prefix, in lexical
// order, a page (up to 1000) at a time, so a large bucket is never held in
// memory; an error ends the sequence.
func (s *Store) Objects(ctx context.Context, prefix string) iter.Seq2[Object, error] {
	return func(yield func(Object, error) bool) {
		p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)})
		for p.HasMorePages() {
			page, err := p.NextPage(ctx)
			if err != nil {
				yield(Object{}, fmt.Errorf("objstore: list %q: %w", prefix, classify(err)))
				return
			}
			for _, o := range page.Contents {
				if !yield(Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}, nil) {
					return
				}
			}
		}
	}
}
