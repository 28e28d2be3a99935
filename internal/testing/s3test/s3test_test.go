package s3test_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

func TestMain(m *testing.M) { s3test.Main(m) }

// Each test gets its own bucket; an object put in one is read back and is
// not in another's.
func TestBucketPerTest(t *testing.T) {
	ctx := context.Background()
	c, a := s3test.Bucket(t)
	_, b := s3test.Bucket(t)
	if a == b {
		t.Fatalf("both buckets are %q", a)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(a), Key: aws.String("k"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(a), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(body) != "hello" {
		t.Fatalf("read back %q", body)
	}
	list, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b)})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Contents) != 0 {
		t.Fatalf("the other bucket lists %d objects", len(list.Contents))
	}
}

// TestServerOutsideTests: Start runs a gateway of its own (as cmd/bench
// does, outside go test), which serves a bucket CreateBucket made, and Stop
// ends it.
func TestServerOutsideTests(t *testing.T) {
	s, err := s3test.Start()
	if err != nil {
		testserver.Unavailable(t, "versitygw", "this test does not run against a real S3 store", err)
	}
	ctx := context.Background()
	if err := s.CreateBucket(ctx, "bench"); err != nil {
		t.Fatal(err)
	}
	c := s3test.NewClient(s.Endpoint())
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bench"), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
		t.Error("the gateway still answers after Stop")
	}
}

// A bucket left with more objects than one listing page holds is emptied
// and removed when its test ends.
func TestBucketEmptiedAtEnd(t *testing.T) {
	ctx := context.Background()
	var c *s3.Client
	var name string
	t.Run("fill", func(t *testing.T) {
		c, name = s3test.Bucket(t)
		for i := range 1200 {
			key := fmt.Sprintf("dir/%04d", i)
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(name), Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
				t.Fatal(err)
			}
		}
	})
	if _, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(name)}); err == nil {
		t.Fatalf("bucket %s still exists after its test", name)
	}
}
