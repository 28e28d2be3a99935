package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
)

// The storage section: the same file upload, download and batch on the
// embedded default (SQLite and files under --data-dir) and on fleet mode
// (PostgreSQL and S3, the servers the fleet-storage tests run: a throwaway
// PostgreSQL cluster and versitygw), each on a fresh `switchyard run`,
// printed side by side. For the capacity envelope it also counts, in fleet
// mode, the PostgreSQL connections the replica holds during the batch
// (pg_stat_activity) and the object storage requests and bytes per batch
// line (through a counting proxy in front of versitygw).

const (
	// storageFileBytes is the uploaded file: 64 MiB of random bytes.
	storageFileBytes = 64 << 20
	// storageLines is the batch's size.
	storageLines = 10_000
	// storageReps is how many times the file goes up and down; the
	// median is reported.
	storageReps = 3
)

type storageResult struct {
	Skip      string // why the section did not run
	Limiter   *limiterResult
	Modes     []*storageMode
	FileBytes int64
	Lines     int
	Versions  []kv
	Elapsed   time.Duration
}

type storageMode struct {
	Key, Label string
	Skip       string // why this mode did not run

	UploadMBps, DownloadMBps float64 // medians over storageReps, MB = 10^6 bytes
	UploadErr                string

	BatchStatus    string
	BatchCompleted int
	BatchElapsed   time.Duration
	LinesPerSec    float64

	// Fleet mode only.
	PGConnsMax, PGActiveMax int    // the replica's connections during the batch
	PGWork                  pgWork // the database's work for the batch
	S3Requests              int64  // object storage requests from batch create to completed
	S3BytesUp, S3BytesDown  int64  // their request and response bodies
	S3Ops                   map[string]int64
}

func (m *storageMode) fleet() bool { return m.Key == "fleet" }

func (m *storageMode) s3PerLine() (reqs, bytes float64) {
	if m.BatchCompleted == 0 {
		return math.NaN(), math.NaN()
	}
	n := float64(m.BatchCompleted)
	return float64(m.S3Requests) / n, float64(m.S3BytesUp+m.S3BytesDown) / n
}

// runStorage runs the storage section on its own fake upstream.
func runStorage(ctx context.Context, o *options, tmp string) *storageResult {
	start := time.Now()
	res := &storageResult{FileBytes: storageFileBytes, Lines: storageLines}
	defer func() { res.Elapsed = time.Since(start) }()
	fakePort, _ := freePort()
	logf("storage: starting a fake upstream (no service time)")
	fake, err := startFake(ctx, o.bin, tmp, "fake-storage", fakePort, 0, 0)
	if err != nil {
		res.Skip = "not run: the fake upstream did not start: " + err.Error()
		return res
	}
	defer fake.stop()
	res.Limiter = runLimiter(ctx, o, tmp)

	embedded := &storageMode{Key: "embedded", Label: "embedded (SQLite + local disk)"}
	fleet := &storageMode{Key: "fleet", Label: "fleet (PostgreSQL + S3 on versitygw)"}
	res.Modes = []*storageMode{embedded, fleet}

	logf("storage: embedded default")
	runStorageMode(ctx, o, tmp, fakePort, embedded, nil)

	logf("storage: starting PostgreSQL and versitygw as the fleet-storage tests do")
	pg, err := pgtest.Start()
	if err != nil {
		fleet.Skip = "not run: PostgreSQL did not start: " + err.Error()
		return res
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			logf("storage: stopping PostgreSQL: %v", err)
		}
	}()
	if v, err := pg.Version(ctx); err == nil {
		res.Versions = append(res.Versions, kv{"PostgreSQL", v})
	}
	s3, err := s3test.Start()
	if err != nil {
		fleet.Skip = "not run: versitygw did not start: " + err.Error()
		return res
	}
	defer func() {
		if err := s3.Stop(); err != nil {
			logf("storage: stopping versitygw: %v", err)
		}
	}()
	res.Versions = append(res.Versions, kv{"versitygw", s3test.Version})
	dsn, err := pg.CreateDatabase(ctx, "bench")
	if err == nil {
		err = s3.CreateBucket(ctx, "bench")
	}
	if err != nil {
		fleet.Skip = "not run: " + err.Error()
		return res
	}
	proxy, err := startS3Proxy(s3.Endpoint())
	if err != nil {
		fleet.Skip = "not run: the counting S3 proxy did not start: " + err.Error()
		return res
	}
	defer proxy.close()
	logf("storage: fleet mode")
	runStorageMode(ctx, o, tmp, fakePort, fleet, &fleetEnv{dsn: dsn, admin: pg.DSN("postgres"), s3: proxy})
	return res
}

// fleetEnv is what fleet mode runs on.
type fleetEnv struct {
	dsn   string // the replica's database, "bench"
	admin string // the cluster's "postgres" database, where the statistics are read
	s3    *s3Proxy
}

const (
	benchDSNEnv      = "SY_BENCH_PG_DSN"
	benchS3AccessEnv = "SY_BENCH_S3_ACCESS"
	benchS3SecretEnv = "SY_BENCH_S3_SECRET"
)

func (f *fleetEnv) env() []string {
	// Replicas on shared storage share the data key (the KEK): from the
	// environment, as a fleet deployment sets it.
	kek := make([]byte, envelope.KeySize)
	_, _ = rand.Read(kek)
	return []string{benchDSNEnv + "=" + f.dsn, benchS3AccessEnv + "=" + s3test.AccessKey, benchS3SecretEnv + "=" + s3test.SecretKey,
		envelope.EnvKey + "=" + envelope.EncodeKey(kek)}
}

// storageYAML is the storage section of fleet mode's configuration.
func (f *fleetEnv) storageYAML() string {
	return fmt.Sprintf(`storage:
  metadata:
    kind: postgres
    dsn_env: %s
  blobs:
    kind: s3
    endpoint: %s
    bucket: bench
    region: %s
    path_style: true
    access_key_env: %s
    secret_key_env: %s
`, benchDSNEnv, f.s3.url, s3test.Region, benchS3AccessEnv, benchS3SecretEnv)
}

// runStorageMode starts a fresh switchyard run on its own data directory
// (and, in fleet mode, PostgreSQL and S3) and measures it.
func runStorageMode(ctx context.Context, o *options, tmp string, fakePort int, m *storageMode, fl *fleetEnv) {
	port, _ := freePort()
	adminPort, _ := freePort()
	cfgText := switchyardConfig(port, fakePort, fakePort, fakePort)
	env := []string{fakeKeyEnv + "=" + fakeKey}
	if fl != nil {
		cfgText += fl.storageYAML()
		env = append(env, fl.env()...)
	}
	name := "switchyard-storage-" + m.Key
	cfg := filepath.Join(tmp, name+".yaml")
	dataDir := filepath.Join(tmp, "data-"+m.Key)
	if err := os.WriteFile(cfg, []byte(cfgText), 0o644); err != nil {
		m.Skip = "not run: " + err.Error()
		return
	}
	out, err := output(ctx, "", env, o.bin, "keys", "create", "--data-dir", dataDir, "--config", cfg, "--tier", benchTier, "--name", "bench")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	key := strings.TrimSpace(lines[len(lines)-1])
	if err != nil || !strings.HasPrefix(key, "sk-") {
		m.Skip = fmt.Sprintf("not run: switchyard keys create: %v: %s", err, clip(out, 300))
		return
	}
	// startReplica starts switchyard run on the mode's configuration; in
	// fleet mode the batch runs on a replica of its own (see below).
	startReplica := func(suffix string) (*proc, error) {
		p, err := startProc(name+suffix, filepath.Join(tmp, name+suffix+".log"), "", env, o.bin, "run", "--config", cfg, "--data-dir", dataDir,
			"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort))
		if err == nil {
			if err = waitHTTP(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/v1/models", port), 60*time.Second); err != nil {
				p.stop()
			}
		}
		return p, err
	}
	p, err := startReplica("")
	if err != nil {
		m.Skip = "not run: switchyard did not start: " + err.Error()
		return
	}
	defer func() { p.stop() }()
	c := &storageClient{base: fmt.Sprintf("http://127.0.0.1:%d", port), key: key, http: &http.Client{}}

	// Files: the same random content up and down storageReps times.
	content := make([]byte, storageFileBytes)
	_, _ = rand.Read(content)
	sum := sha256.Sum256(content)
	var ups, downs []float64
	for range storageReps {
		t0 := time.Now()
		id, err := c.upload(ctx, "bench.bin", "user_data", content)
		if err != nil {
			m.UploadErr = "upload: " + err.Error()
			break
		}
		ups = append(ups, float64(len(content))/1e6/time.Since(t0).Seconds())
		t0 = time.Now()
		got, err := c.download(ctx, id)
		if err != nil {
			m.UploadErr = "download: " + err.Error()
			break
		}
		if got != sum {
			m.UploadErr = "download: the content differs from the upload"
			break
		}
		downs = append(downs, float64(len(content))/1e6/time.Since(t0).Seconds())
		_ = c.delete(ctx, id)
	}
	m.UploadMBps, m.DownloadMBps = median(ups), median(downs)
	logf("  %-8s upload %.1f MB/s, download %.1f MB/s (%d MiB file, median of %d)%s", m.Key, m.UploadMBps, m.DownloadMBps,
		storageFileBytes>>20, len(ups), errSuffix(m.UploadErr))

	// Batch: storageLines lines, timed from create to completed.
	var input bytes.Buffer
	for i := range storageLines {
		line, _ := json.Marshal(map[string]any{
			"custom_id": fmt.Sprintf("line-%d", i), "method": "POST", "url": "/v1/chat/completions",
			"body": map[string]any{"model": "bench/chat", "max_tokens": 16,
				"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Batch line %d: say hello.", i)}}},
		})
		input.Write(line)
		input.WriteByte('\n')
	}
	fileID, err := c.upload(ctx, "batch.jsonl", "batch", input.Bytes())
	if err != nil {
		m.BatchStatus = "failed: upload: " + err.Error()
		return
	}
	var sampler *pgSampler
	var work0, idle pgWork
	if fl != nil {
		// PostgreSQL publishes a session's statistics when it ends (and
		// otherwise up to 10 s late), so the batch's database work is read
		// around replicas that have ended: the one above, then one started
		// and stopped idle (its start and stop, taken out), then the
		// batch's own.
		p.stop()
		if work0, err = readPGWork(ctx, fl.admin); err == nil {
			if p, err = startReplica("-idle"); err == nil {
				p.stop()
				var w pgWork
				if w, err = readPGWork(ctx, fl.admin); err == nil {
					idle, work0 = w.minus(work0), w
					p, err = startReplica("-batch")
				}
			}
		}
		if err == nil {
			sampler, err = startPGSampler(ctx, fl.admin)
		}
		if err != nil {
			m.BatchStatus = "failed: reading PostgreSQL's statistics: " + err.Error()
			return
		}
		fl.s3.reset()
	}
	t0 := time.Now()
	b, err := c.runBatch(ctx, fileID)
	m.BatchElapsed = time.Since(t0)
	if fl != nil {
		m.S3Requests, m.S3BytesUp, m.S3BytesDown, m.S3Ops = fl.s3.snapshot()
	}
	switch {
	case err != nil:
		m.BatchStatus = "failed: " + err.Error()
	case b.Status == "completed" && b.RequestCounts.Completed != storageLines:
		m.BatchStatus = fmt.Sprintf("completed with %d of %d lines (%d failed)", b.RequestCounts.Completed, storageLines, b.RequestCounts.Failed)
	default:
		m.BatchStatus, m.BatchCompleted = b.Status, b.RequestCounts.Completed
		m.LinesPerSec = float64(m.BatchCompleted) / m.BatchElapsed.Seconds()
		if n, err := countLines(ctx, c.base, c.key, b.OutputFileID); err != nil || n != storageLines {
			m.BatchStatus = fmt.Sprintf("output file: %d lines (%v), want %d", n, err, storageLines)
		}
	}
	if fl != nil {
		m.PGConnsMax, m.PGActiveMax = sampler.stop()
		p.stop()
		if w, err := readPGWork(ctx, fl.admin); err == nil {
			m.PGWork = w.minus(work0).minus(idle)
		}
	}
	logf("  %-8s batch %s: %d lines in %s, %.0f lines/s", m.Key, m.BatchStatus, m.BatchCompleted, m.BatchElapsed.Round(time.Millisecond), m.LinesPerSec)
	if fl != nil {
		rq, by := m.s3PerLine()
		logf("  %-8s PostgreSQL during the batch: %d connections open (at most %d active), %.2f commits and %.2f rows written per line; S3 %d requests (%.4f per line), %.0f bytes per line",
			m.Key, m.PGConnsMax, m.PGActiveMax, m.PGWork.perLine(m.PGWork.Commits, m.BatchCompleted), m.PGWork.perLine(m.PGWork.rows(), m.BatchCompleted),
			m.S3Requests, rq, by)
	}
}

func errSuffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// storageClient calls the gateway's Files and Batch APIs.
type storageClient struct {
	base, key string
	http      *http.Client
}

func (c *storageClient) do(ctx context.Context, method, path, ctype string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("authorization", "Bearer "+c.key)
	if ctype != "" {
		req.Header.Set("content-type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, clip(string(b), 300))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// upload streams content as a multipart form, as the SDKs send it.
func (c *storageClient) upload(ctx context.Context, filename, purpose string, content []byte) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := mw.WriteField("purpose", purpose)
		if err == nil {
			var fw io.Writer
			if fw, err = mw.CreateFormFile("file", filename); err == nil {
				if _, err = fw.Write(content); err == nil {
					err = mw.Close()
				}
			}
		}
		pw.CloseWithError(err)
	}()
	var f struct {
		ID string `json:"id"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/files", mw.FormDataContentType(), pr, &f); err != nil {
		pr.CloseWithError(err)
		return "", err
	}
	return f.ID, nil
}

func (c *storageClient) download(ctx context.Context, id string) ([32]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/files/"+id+"/content", nil)
	req.Header.Set("authorization", "Bearer "+c.key)
	resp, err := c.http.Do(req)
	if err != nil {
		return [32]byte{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return [32]byte{}, fmt.Errorf("GET content: %d %s", resp.StatusCode, b)
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return [32]byte{}, err
	}
	return [32]byte(h.Sum(nil)), nil
}

func (c *storageClient) delete(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/files/"+id, "", nil, nil)
}

type batchObject struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	OutputFileID  string `json:"output_file_id"`
	RequestCounts struct {
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
}

// runBatch creates the batch and polls it until it ends.
func (c *storageClient) runBatch(ctx context.Context, fileID string) (batchObject, error) {
	var b batchObject
	create, _ := json.Marshal(map[string]string{"input_file_id": fileID, "endpoint": "/v1/chat/completions", "completion_window": "24h"})
	if err := c.do(ctx, http.MethodPost, "/v1/batches", "application/json", bytes.NewReader(create), &b); err != nil {
		return b, fmt.Errorf("create: %w", err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		switch b.Status {
		case "completed", "failed", "expired", "cancelled":
			return b, nil
		}
		if time.Now().After(deadline) {
			return b, fmt.Errorf("still %q after 3m", b.Status)
		}
		time.Sleep(50 * time.Millisecond)
		if err := c.do(ctx, http.MethodGet, "/v1/batches/"+b.ID, "", nil, &b); err != nil {
			return b, fmt.Errorf("poll: %w", err)
		}
	}
}

// pgSampler polls pg_stat_activity for the benchmark database's sessions
// (the replica's pools; its own session excluded) and keeps the largest
// counts seen.
type pgSampler struct {
	cancel           context.CancelFunc
	done             chan struct{}
	maxOpen, maxBusy int
}

func startPGSampler(ctx context.Context, dsn string) (*pgSampler, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &pgSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var open, busy int
			if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'idle')
				FROM pg_stat_activity WHERE datname = 'bench'`).Scan(&open, &busy); err == nil {
				s.maxOpen, s.maxBusy = max(s.maxOpen, open), max(s.maxBusy, busy)
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return s, nil
}

func (s *pgSampler) stop() (open, busy int) {
	s.cancel()
	<-s.done
	return s.maxOpen, s.maxBusy
}

// pgWork is the database's cumulative work from pg_stat_database.
type pgWork struct {
	Commits, Inserted, Updated, Deleted int64
}

// readPGWork reads the database's statistics once every other session on
// it has ended (each publishes its statistics as it ends) and they have
// stopped moving. It reads from another database (the cluster's
// statistics views cover them all), so its own queries are not counted.
func readPGWork(ctx context.Context, dsn string) (pgWork, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return pgWork{}, err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	var last pgWork
	for n := 0; ; n++ {
		var others int
		var w pgWork
		// Each statement is a transaction; pg_stat_clear_snapshot makes
		// the next read see fresh statistics.
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench'`).Scan(&others); err != nil {
			return w, err
		}
		if _, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
			return w, err
		}
		if err := conn.QueryRow(ctx, `SELECT xact_commit, tup_inserted, tup_updated, tup_deleted
			FROM pg_stat_database WHERE datname = 'bench'`).Scan(&w.Commits, &w.Inserted, &w.Updated, &w.Deleted); err != nil {
			return w, err
		}
		if others == 0 && n > 0 && w.Inserted == last.Inserted && w.Updated == last.Updated && w.Deleted == last.Deleted {
			return w, nil
		}
		if time.Now().After(deadline) {
			return w, fmt.Errorf("%d other sessions still on the database after 30s", others)
		}
		last = w
		time.Sleep(100 * time.Millisecond)
	}
}

func (w pgWork) minus(o pgWork) pgWork {
	return pgWork{w.Commits - o.Commits, w.Inserted - o.Inserted, w.Updated - o.Updated, w.Deleted - o.Deleted}
}

func (w pgWork) rows() int64 { return w.Inserted + w.Updated + w.Deleted }

func (pgWork) perLine(n int64, lines int) float64 {
	if lines == 0 {
		return math.NaN()
	}
	return float64(n) / float64(lines)
}

// s3Proxy is a reverse proxy in front of the S3 server that counts the
// requests through it and the bytes of their bodies. It keeps the Host
// header the client signed (SigV4 covers it).
type s3Proxy struct {
	url  string
	srv  *http.Server
	reqs atomic.Int64
	up   atomic.Int64
	down atomic.Int64
	mu   sync.Mutex
	ops  map[string]int64
}

func startS3Proxy(target string) (*s3Proxy, error) {
	tu, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &s3Proxy{url: "http://" + ln.Addr().String(), ops: map[string]int64{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(tu)
			r.Out.Host = r.In.Host
			if r.Out.Body != nil && r.Out.Body != http.NoBody {
				r.Out.Body = &countingBody{ReadCloser: r.Out.Body, n: &p.up}
			}
			p.reqs.Add(1)
			op := s3Op(r.In)
			p.mu.Lock()
			p.ops[op]++
			p.mu.Unlock()
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &p.down}
			return nil
		},
	}
	p.srv = &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// s3Op names an S3 request's operation from its method and query.
func s3Op(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodPut && q.Has("partNumber"):
		return "UploadPart"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "AbortMultipartUpload"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodGet && (q.Has("list-type") || strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0):
		return "ListObjects"
	case r.Method == http.MethodGet && r.Header.Get("Range") != "":
		return "GetObject (range)"
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodDelete:
		return "DeleteObject"
	}
	return r.Method
}

func (p *s3Proxy) reset() {
	p.reqs.Store(0)
	p.up.Store(0)
	p.down.Store(0)
	p.mu.Lock()
	p.ops = map[string]int64{}
	p.mu.Unlock()
}

func (p *s3Proxy) snapshot() (reqs, up, down int64, ops map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops = make(map[string]int64, len(p.ops))
	for k, v := range p.ops {
		ops[k] = v
	}
	return p.reqs.Load(), p.up.Load(), p.down.Load(), ops
}

func (p *s3Proxy) close() { _ = p.srv.Close() }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
