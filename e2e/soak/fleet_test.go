package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/fake"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// Shared secrets of the fleet's processes.
const (
	adminToken    = "soak-admin-token-0123456789abcdef"
	internalToken = "soak-internal-token-0123456789abcdef"
	vendorKeyEnv  = "SY_SOAK_VENDOR_KEY"
	vendorKey     = "soak-vendor-credential"
)

// fleet is the processes and servers of one soak run.
type fleet struct {
	t       *testing.T
	bin     string
	dir     string
	env     []string
	cfgPath string
	dsn     string

	redis   *ratelimittest.RedisServer
	rls     *proc
	rlsAddr string
	vendors map[string]*vendor // by region
	// batchSends: see vendor.
	batchSends sync.Map

	control   *proc
	xdsAddr   string
	adminURL  string
	gateways  []*gatewayProcs
	backends  []*proc
	gwBalance *balancer // the backends' way into the gateways
	beBalance *balancer // the data planes' backends cluster
}

// gatewayProcs is one gateway: a data plane and the extproc beside it.
type gatewayProcs struct {
	addr     string // the data plane's public listener
	dataplan *proc
	extproc  *proc
}

// startFleet starts everything, in dependency order, and returns once every
// process is ready.
func startFleet(t *testing.T, ejection time.Duration) *fleet {
	f := &fleet{t: t, bin: buildSwitchyard(t), dir: t.TempDir(), vendors: map[string]*vendor{}}
	dsn := pgtest.DSN(t)
	f.dsn = dsn
	_, bucket := s3test.Bucket(t)
	f.env = append(os.Environ(),
		"SY_SOAK_PG_DSN="+dsn, "SY_SOAK_S3_ACCESS="+s3test.AccessKey, "SY_SOAK_S3_SECRET="+s3test.SecretKey,
		envelope.EnvKey+"="+envelope.EncodeKey(bytes.Repeat([]byte{7}, envelope.KeySize)),
		"SWITCHYARD_ADMIN_TOKEN="+adminToken, "SWITCHYARD_INTERNAL_TOKEN="+internalToken,
		vendorKeyEnv+"="+vendorKey)
	for _, region := range []string{"us", "asia"} {
		f.vendors[region] = startVendor(t, region, &f.batchSends)
	}
	f.redis = ratelimittest.StartRedis(t)

	gwAddrs := []string{freePort(t), freePort(t), freePort(t)}
	beAddrs := []string{freePort(t), freePort(t)}
	f.gwBalance = startBalancer(t, gwAddrs)
	f.beBalance = startBalancer(t, beAddrs)
	f.cfgPath = filepath.Join(f.dir, "fleet.yaml")
	cfg := fmt.Sprintf(fleetYAML, ejection.String(), f.beBalance.addr(), f.vendors["us"].addr, vendorKeyEnv, f.vendors["asia"].addr, vendorKeyEnv,
		s3test.Endpoint(t), bucket)
	if err := os.WriteFile(f.cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	f.xdsAddr = freePort(t)
	adminAddr, cpHealth := freePort(t), freePort(t)
	f.adminURL = "http://" + adminAddr
	f.control = f.newProc("controlplane", "http://"+cpHealth+"/healthz", "controlplane", "--config", f.cfgPath,
		"--listen", f.xdsAddr, "--admin-listen", adminAddr, "--health", cpHealth, "--data-dir", filepath.Join(f.dir, "cp"), "--log-level", "warn")
	f.control.start()
	f.control.waitReady(60 * time.Second)

	// envoyproxy/ratelimit's service on Redis, configured by the control
	// plane over xDS, as a fleet runs it: a process of its own.
	f.startRLS()

	for i, addr := range gwAddrs {
		g := &gatewayProcs{addr: addr}
		epAddr, epHealth, dpHealth := freePort(t), freePort(t), freePort(t)
		g.extproc = f.newProc(fmt.Sprintf("extproc-%d", i), "http://"+epHealth+"/healthz", "extproc", "--config", f.cfgPath,
			"--xds", f.xdsAddr, "--listen", epAddr, "--ratelimit", f.rlsAddr, "--region", "us", "--node-id", fmt.Sprintf("extproc-%d", i),
			"--data-dir", filepath.Join(f.dir, fmt.Sprintf("gw%d", i)), "--health", epHealth, "--log-level", "warn")
		g.dataplan = f.newProc(fmt.Sprintf("dataplane-%d", i), "http://"+dpHealth+"/healthz", "dataplane", "--config", f.cfgPath,
			"--xds", f.xdsAddr, "--extproc", epAddr, "--ratelimit", f.rlsAddr, "--region", "us", "--node-id", fmt.Sprintf("dataplane-%d", i),
			"--listen", addr, "--health", dpHealth, "--log-level", "warn")
		f.gateways = append(f.gateways, g)
	}
	for i, addr := range beAddrs {
		be := f.newProc(fmt.Sprintf("backends-%d", i), "", "backends", "--config", f.cfgPath, "--listen", addr,
			"--gateway-url", "http://"+f.gwBalance.addr()+"/v1", "--batch-lease", "3s",
			"--data-dir", filepath.Join(f.dir, fmt.Sprintf("be%d", i)), "--log-level", "warn")
		health := freePort(t)
		be.args = append(be.args, "--health", health)
		be.ready = "http://" + health + "/healthz"
		f.backends = append(f.backends, be)
	}
	var all []*proc
	for _, g := range f.gateways {
		all = append(all, g.extproc, g.dataplan)
	}
	all = append(all, f.backends...)
	for _, p := range all {
		p.start()
	}
	for _, p := range all {
		p.waitReady(60 * time.Second)
	}
	return f
}

// fleetYAML: one model in each capability, each served by a vendor in us
// and one in asia (failover across regions), short timeouts so a hanging
// vendor is left within the SDK's patience, and the fleet's storage.
// Outlier detection is quicker than the defaults (docs/operations.md,
// "Soak and chaos"): each gateway sees about 100 answers a second, a third
// of the fleet's, and a vendor cutting every stream fails about a fifth of
// the soak's mix of answers (a cut stream is one answer and one failure);
// at 100 ms intervals, 5 answers and 10 % the failure percentage ejects it
// within about two intervals, and it stays out as long as a vendor fault
// holds instead of being probed back in while the fault lasts.
const fleetYAML = `
region: us
listeners: [{name: public, address: 127.0.0.1:18080}]
outlier_detection: {consecutive_failures: 3, interval: 100ms, base_ejection_time: %s, failure_percentage_threshold: 10, failure_percentage_request_volume: 5}
backends: {address: %q}
providers:
  - {name: vendor-us, kind: openai, base_url: "http://%s/v1", api_key_env: %s, region: us}
  - {name: vendor-asia, kind: openai, base_url: "http://%s/v1", api_key_env: %s, region: asia}
models:
  - id: soak/chat
    first_byte_timeout: 1s
    idle_timeout: 5s
    providers:
      - {provider: vendor-us, upstream_model: fake-chat-1}
      - {provider: vendor-asia, upstream_model: fake-chat-1}
  - id: soak/embed
    capabilities: [embeddings]
    first_byte_timeout: 1s
    idle_timeout: 5s
    providers:
      - {provider: vendor-us, upstream_model: fake-embed-1}
      - {provider: vendor-asia, upstream_model: fake-embed-1}
tiers:
  free: {rpm: 10, tpm: 40000, on_limiter_error: deny, batch_lines_per_day: 2000}
  standard: {rpm: 600, tpm: 2000000, on_limiter_error: allow, batch_lines_per_day: 50000}
  enterprise: {on_limiter_error: allow, batch_lines_per_day: -1}
storage:
  metadata:
    kind: postgres
    dsn_env: SY_SOAK_PG_DSN
  blobs:
    kind: s3
    endpoint: %s
    bucket: %s
    region: us-east-1
    path_style: true
    access_key_env: SY_SOAK_S3_ACCESS
    secret_key_env: SY_SOAK_S3_SECRET
`

// killGateway SIGKILLs both processes of gateway i and starts them again
// on the same addresses.
func (f *fleet) killGateway(i int) {
	g := f.gateways[i]
	g.dataplan.kill()
	g.extproc.kill()
	g.extproc.start()
	g.dataplan.start()
	g.extproc.waitReady(60 * time.Second)
	g.dataplan.waitReady(60 * time.Second)
}

// admin calls the control plane's admin API.
func (f *fleet) admin(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, f.adminURL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("authorization", "Bearer "+adminToken)
	req.Header.Set("content-type", "application/json")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// createKey issues a key through the admin API: its secret and id.
func (f *fleet) createKey(name, tier string, rpm, tpm int64) (secret, id string) {
	f.t.Helper()
	status, raw, err := f.admin(http.MethodPost, "/admin/v1/keys", map[string]any{"name": name, "tier": tier, "rpm": rpm, "tpm": tpm})
	var k struct{ ID, Secret string }
	if err != nil || status != http.StatusCreated || json.Unmarshal(raw, &k) != nil || k.Secret == "" {
		f.t.Fatalf("create key %s: %d %s %v", name, status, raw, err)
	}
	return k.Secret, k.ID
}

// proc is one process of the fleet, restartable on the same arguments
// (the same addresses).
type proc struct {
	t     *testing.T
	name  string
	bin   string
	args  []string
	env   []string
	ready string // a URL answering 200 once the process is ready
	logf  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

func (f *fleet) newProc(name, ready string, args ...string) *proc {
	p := &proc{t: f.t, name: name, bin: f.bin, args: args, env: f.env, ready: ready, logf: filepath.Join(f.dir, name+".log")}
	f.t.Cleanup(p.stop)
	return p
}

func (p *proc) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(p.logf, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	p.starts++
	fmt.Fprintf(logf, "--- start %d at %s\n", p.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = p.env, logf, logf
	// The fleet dies with the test binary, however that ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	p.cmd, p.exited = cmd, exited
}

// pid is the running process's id.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// waitReady polls the process's health endpoint until it answers 200.
func (p *proc) waitReady(timeout time.Duration) {
	p.t.Helper()
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(p.ready)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			p.t.Fatalf("%s exited before it was ready:\n%s", p.name, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s not ready within %s:\n%s", p.name, timeout, p.logTail())
		}
		time.Sleep(20 * time.Millisecond) // polling the readiness endpoint
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the process at cleanup: SIGTERM, then SIGKILL after 10 s.
func (p *proc) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
	if p.t.Failed() {
		p.t.Logf("%s's log (tail):\n%s", p.name, p.logTail())
	}
}

func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Vendor fault modes.
const (
	modeServe int32 = iota
	mode500         // every request answered 500
	modeHang        // no answer until the caller gives up
	modeReset       // streams reset by the vendor after a few events
	modeDown        // connections accepted and closed at once (the region is down)
)

// vendor is a fake OpenAI-compatible vendor with a fault switch in front.
type vendor struct {
	region string
	addr   string
	mode   atomic.Int32
	hits   atomic.Int64
	// batchSends counts the requests of each batch line ("batch N line
	// I", its user message) across both vendors: lines re-sent after a
	// takeover show as counts above one.
	batchSends *sync.Map
}

var batchLineRE = regexp.MustCompile(`"batch \d+ line \d+"`)

func startVendor(t *testing.T, region string, batchSends *sync.Map) *vendor {
	// Streams take a while (10 ms between events, about 80 ms a stream),
	// as a model's do, so a gateway killed mid-run has streams in flight.
	h, err := fake.Handler(fake.KindOpenAI, fake.Options{APIKey: vendorKey, ChunkDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v := &vendor{region: region, batchSends: batchSends}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	v.addr = lis.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.hits.Add(1)
		if r.Body != nil && strings.HasSuffix(r.URL.Path, "/chat/completions") {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			if m := batchLineRE.Find(body); m != nil {
				n, _ := v.batchSends.LoadOrStore(string(m), new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		switch v.mode.Load() {
		case mode500:
			r.Header.Set(fake.HeaderStatus, "500")
		case modeHang:
			r.Header.Set(fake.HeaderDelayMS, "600000")
		case modeReset:
			r.Header.Set(fake.HeaderCutAfter, "3")
		case modeDown:
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					if tc, ok := c.(*net.TCPConn); ok {
						_ = tc.SetLinger(0) // a reset, not a clean close
					}
					_ = c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		h.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	return v
}

// balancer is a TCP round-robin balancer, as a Kubernetes Service spreads
// connections over a Deployment's pods: a connection goes to the next
// target that accepts it.
type balancer struct {
	lis     net.Listener
	targets []string
	next    atomic.Uint64
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func startBalancer(t *testing.T, targets []string) *balancer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{lis: lis, targets: targets, conns: map[net.Conn]bool{}}
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *balancer) addr() string { return b.lis.Addr().String() }

func (b *balancer) serve() {
	for {
		c, err := b.lis.Accept()
		if err != nil {
			return
		}
		go b.handle(c)
	}
}

func (b *balancer) track(c net.Conn, on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if on {
		b.conns[c] = true
	} else {
		delete(b.conns, c)
	}
}

func (b *balancer) handle(c net.Conn) {
	b.track(c, true)
	defer b.track(c, false)
	defer c.Close()
	var up net.Conn
	start := b.next.Add(1)
	for i := range len(b.targets) {
		var err error
		if up, err = net.DialTimeout("tcp", b.targets[(int(start)+i)%len(b.targets)], time.Second); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	b.track(up, true)
	defer b.track(up, false)
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

func (b *balancer) close() {
	_ = b.lis.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	for c := range b.conns {
		_ = c.Close()
	}
}

// roundRobinDialer spreads the client's connections over the gateways, a
// tiny client-side balancer: each connection goes to the next gateway that
// accepts it. Keep-alives are off in the client, so each request is a new
// connection and the gateways share the load evenly.
type roundRobinDialer struct {
	addrs []string
	next  atomic.Uint64
}

func (d *roundRobinDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	start := d.next.Add(1)
	var lastErr error
	for i := range len(d.addrs) {
		var dl net.Dialer
		c, err := dl.DialContext(ctx, network, d.addrs[(int(start)+i)%len(d.addrs)])
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// buildSwitchyard builds the binary from this tree, once per run.
func buildSwitchyard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "switchyard")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/switchyard-ai/switchyard/cmd/switchyard")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return strings.TrimSpace(s)
}
