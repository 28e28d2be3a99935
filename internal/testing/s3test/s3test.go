// Package s3test runs a real S3-compatible object store for tests: one
// versitygw gateway per test binary, serving a temporary directory (its
// posix backend) on a free 127.0.0.1 port with fixed credentials, and a
// fresh bucket for each test, emptied and removed when the test ends.
//
// The binary is bin/versitygw-<Version> under the module root (make
// test-deps puts it there), or the file $SWITCHYARD_VERSITYGW names. When
// it is missing the first test installs it there with `go install` (a few
// minutes cold, then cached).
//
// The gateway starts on the first call of Bucket or Endpoint. A package's
// TestMain should end with it:
//
//	func TestMain(m *testing.M) { s3test.Main(m) }
//
// which runs the tests, then stops the gateway and removes its directory.
// Without that TestMain the gateway still dies with the test binary (the
// kernel sends it SIGKILL as its parent dies), but its directory
// (sy-s3test-* in os.TempDir) stays behind.
//
// Without versitygw a test is skipped, saying why, except in CI (CI set),
// where it fails: CI must never pass by checking less.
package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// Version is the versitygw release the tests run against; the Makefile's
// VERSITYGW_VERSION must match.
const Version = "v1.8.0"

// The gateway's fixed test credentials and region.
const (
	AccessKey = "switchyard-test"
	SecretKey = "switchyard-test-secret"
	Region    = "us-east-1"
)

type gateway struct {
	dir      string
	endpoint string
	cmd      *exec.Cmd
	done     chan struct{}
	log      *testserver.Buffer
}

var (
	mu       sync.Mutex
	started  *gateway
	startErr error
	seq      atomic.Int64
)

// Endpoint returns the gateway's base URL (http://127.0.0.1:port), starting
// it on first use.
func Endpoint(t testing.TB) string {
	t.Helper()
	return get(t).endpoint
}

// Client returns an S3 client for the gateway: path-style addressing and
// the test credentials.
func Client(t testing.TB) *s3.Client {
	t.Helper()
	return NewClient(Endpoint(t))
}

// NewClient returns an S3 client for the gateway at endpoint.
func NewClient(endpoint string) *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
	})
}

// Bucket creates a fresh bucket for t and returns a client and its name.
// When t ends the bucket's objects and unfinished multipart uploads are
// removed, then the bucket.
func Bucket(t testing.TB) (*s3.Client, string) {
	t.Helper()
	c := Client(t)
	name := bucketName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := empty(ctx, c, name); err != nil {
			t.Errorf("s3test: empty bucket %s: %v", name, err)
			return
		}
		if _, err := c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)}); err != nil {
			t.Errorf("s3test: delete bucket %s: %v", name, err)
		}
	})
	return c, name
}

func empty(ctx context.Context, c *s3.Client, bucket string) error {
	uploads, err := c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		return err
	}
	for _, u := range uploads.Uploads {
		if _, err := c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(bucket), Key: u.Key, UploadId: u.UploadId,
		}); err != nil {
			return err
		}
	}
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		if len(page.Contents) == 0 {
			continue
		}
		// One request per page (up to 1000 keys): a test that leaves
		// thousands of objects (the soak) must not spend minutes here.
		ids := make([]types.ObjectIdentifier, len(page.Contents))
		for i, o := range page.Contents {
			ids[i] = types.ObjectIdentifier{Key: o.Key}
		}
		out, err := c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: aws.String(bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return err
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("delete %s: %s %s (and %d more)", aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors)-1)
		}
	}
	return nil
}

// bucketName makes a valid bucket name (3-63 of [a-z0-9-]) from a test
// name, unique within the binary.
func bucketName(test string) string {
	s := strings.Trim(strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(test, "-")), "-")
	if len(s) > 40 {
		s = strings.TrimRight(s[:40], "-")
	}
	return "t-" + s + "-" + strconv.FormatInt(seq.Add(1), 10)
}

// Main runs the package's tests, then stops the gateway if they started
// one, and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) { testserver.Main(m, map[string]func() error{"s3test": Stop}) }

// Stop stops the gateway, if one was started, and removes its directory.
func Stop() error {
	mu.Lock()
	defer mu.Unlock()
	g := started
	started, startErr = nil, nil
	if g == nil {
		return nil
	}
	return testserver.Stop("versitygw", g.cmd.Process, g.done, syscall.SIGTERM, 15*time.Second, g.log, g.dir)
}

func get(t testing.TB) *gateway {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if started == nil && startErr == nil {
		started, startErr = start()
	}
	if startErr != nil {
		testserver.Unavailable(t, "versitygw", "this test does not run against a real S3 store", startErr)
	}
	return started
}

func start() (*gateway, error) {
	bin, err := findOrInstall()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sy-s3test-")
	if err != nil {
		return nil, err
	}
	data, side := filepath.Join(dir, "data"), filepath.Join(dir, "meta")
	for _, d := range []string{data, side} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	// The port is found free, then handed to versitygw, so another process
	// may take it in between: try again on a fresh one.
	var lastErr error
	for range 3 {
		g, err := launch(bin, dir, data, side)
		if err == nil {
			return g, nil
		}
		lastErr = err
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func launch(bin, dir, data, side string) (*gateway, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := lis.Addr().String()
	lis.Close()
	log := &testserver.Buffer{}
	cmd := exec.Command(bin,
		"--access", AccessKey, "--secret", SecretKey, "--region", Region,
		"--port", addr, "--quiet",
		// A sidecar directory keeps object metadata in files, so the
		// temporary directory's filesystem need not support xattrs.
		"posix", "--sidecar", side, data)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	cmd.Env = os.Environ()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	g := &gateway{dir: dir, endpoint: "http://" + addr, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(g.done) }()
	deadline := time.Now().Add(30 * time.Second)
	client := NewClient(g.endpoint)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.ListBuckets(ctx, &s3.ListBucketsInput{})
		cancel()
		if err == nil {
			return g, nil
		}
		select {
		case <-g.done:
			return nil, fmt.Errorf("versitygw exited at start:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-g.done
			return nil, fmt.Errorf("versitygw did not answer in 30s: %v\n%s", err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// findOrInstall returns the versitygw binary: $SWITCHYARD_VERSITYGW, or
// bin/versitygw-<Version> under the module root, installed there with
// `go install` when missing.
func findOrInstall() (string, error) {
	if p := os.Getenv("SWITCHYARD_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("SWITCHYARD_VERSITYGW: %w", err)
		}
		return p, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, "bin", "versitygw-"+Version)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%s is missing and there is no go command to install it with (run make test-deps)", bin)
	}
	// Install into a private directory, then rename into place: another
	// test binary may be installing it at the same moment.
	tmp, err := os.MkdirTemp(filepath.Join(root, "bin"), ".versitygw-")
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(filepath.Join(root, "bin"), 0o755); err == nil {
			tmp, err = os.MkdirTemp(filepath.Join(root, "bin"), ".versitygw-")
		}
	}
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, goBin, "install", "github.com/versity/versitygw/cmd/versitygw@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	cmd.Dir = tmp
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go install versitygw@%s: %w\n%s", Version, err, out.String())
	}
	if err := os.Rename(filepath.Join(tmp, "versitygw"), bin); err != nil {
		return "", err
	}
	return bin, nil
}

// moduleRoot finds the directory of go.mod above the working directory
// (a test runs in its package's directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory, so no bin/ to find versitygw in (set SWITCHYARD_VERSITYGW)")
		}
		dir = parent
	}
}

// Server is a versitygw gateway started outside a test binary (cmd/bench's
// storage section): the same gateway the tests run, owned by the caller,
// who stops it. It is independent of the one Endpoint and Bucket share.
type Server struct{ g *gateway }

// Start starts a gateway as the tests do (installing versitygw into bin/
// when missing). Its credentials are AccessKey and SecretKey.
func Start() (*Server, error) {
	g, err := start()
	if err != nil {
		return nil, err
	}
	return &Server{g: g}, nil
}

// Endpoint is the gateway's base URL (http://127.0.0.1:port).
func (s *Server) Endpoint() string { return s.g.endpoint }

// CreateBucket creates an empty bucket.
func (s *Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := NewClient(s.g.endpoint).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("s3test: create bucket %s: %w", name, err)
	}
	return nil
}

// Stop stops the gateway and removes its directory.
func (s *Server) Stop() error {
	return testserver.Stop("versitygw", s.g.cmd.Process, s.g.done, syscall.SIGTERM, 15*time.Second, s.g.log, s.g.dir)
}
