package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/internal/envelope"
	"github.com/switchyard-ai/switchyard/internal/testing/pgtest"
	"github.com/switchyard-ai/switchyard/internal/testing/s3test"
	"github.com/switchyard-ai/switchyard/ratelimit/ratelimittest"
)

// fleetGateway is one `switchyard run` process of a two-process fleet.
type fleetGateway struct {
	base, admin, demoKey string
	cmd                  *exec.Cmd
	exited               chan error
	stderr               *lockedBuffer
}

// TestFleetTwoGatewayProcesses runs two `switchyard run` processes (each
// with its in-process backends) on one PostgreSQL, one S3 bucket and one
// Redis (envoyproxy/ratelimit's service on a real redis-server, configured
// over xDS from the first replica's control plane), as two replicas of a
// fleet: a file uploaded through one downloads byte-identical through the
// other, a conversation started on one continues on the other
// (previous_response_id), a free key gets exactly its 10 requests a minute
// across both (the rest refused with 429 whichever replica they reach), and
// a key revoked through one's admin API is refused by the other within 2 s.
func TestFleetTwoGatewayProcesses(t *testing.T) {
	bin := buildSwitchyard(t)
	dsn := pgtest.DSN(t)
	_, bucket := s3test.Bucket(t)
	// The shared rate limit service runs in this process, so its windows
	// follow a clock the test holds mid-minute: no request can straddle a
	// window boundary. Its listener is bound now, for both replicas'
	// --ratelimit-addr; it serves once a's control plane has configured it.
	redisSock := ratelimittest.Redis(t)
	rlsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	xdsA := freePort(t)
	const adminToken = "fleet-admin-token-0123456789abcdef"
	env := append(os.Environ(),
		"SY_TEST_PG_DSN="+dsn, "SY_TEST_S3_ACCESS="+s3test.AccessKey, "SY_TEST_S3_SECRET="+s3test.SecretKey,
		envelope.EnvKey+"="+envelope.EncodeKey(make([]byte, envelope.KeySize)), // replicas share the data key
		"SWITCHYARD_ADMIN_TOKEN="+adminToken)
	start := func(name string, extra ...string) *fleetGateway {
		t.Helper()
		cfg := string(mustRead(t, "../../internal/config/default.yaml"))
		for _, port := range []string{"127.0.0.1:8091", "127.0.0.1:8092", "127.0.0.1:8093", "127.0.0.1:8094"} {
			cfg = strings.ReplaceAll(cfg, port, freePort(t)) // each process its own demo vendors
		}
		cfg += fmt.Sprintf(fleetStorage, s3test.Endpoint(t), bucket)
		path := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		g := &fleetGateway{exited: make(chan error, 1), stderr: &lockedBuffer{}}
		g.cmd = exec.Command(bin, "run", "--config", path, "--data-dir", t.TempDir(), "--demo-key",
			"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--ratelimit-addr", rlsLis.Addr().String())
		g.cmd.Args = append(g.cmd.Args, extra...)
		g.cmd.Env, g.cmd.Stderr = env, g.stderr
		stdout, err := g.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			g.exited <- g.cmd.Wait()
		}()
		t.Cleanup(func() {
			_ = g.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-g.exited:
			case <-time.After(30 * time.Second):
				_ = g.cmd.Process.Kill()
			}
		})
		for g.base == "" || g.admin == "" || g.demoKey == "" {
			line, ok := <-lines
			if !ok {
				t.Fatalf("%s exited before serving: %v\n%s", name, <-g.exited, g.stderr.String())
			}
			if u, ok := strings.CutPrefix(line, "Switchyard is serving the OpenAI API at "); ok {
				g.base = u
			}
			if a, ok := strings.CutPrefix(line, "Admin API at "); ok {
				g.admin = strings.TrimSuffix(strings.Fields(a)[0], "/admin/v1/keys")
			}
			if k, ok := strings.CutPrefix(line, "Demo API key (tier standard): "); ok {
				g.demoKey = k
			}
		}
		go func() {
			for range lines {
			}
		}()
		return g
	}
	a, b := start("a", "--xds-listen", xdsA), start("b")
	ratelimittest.EnvoyRateLimit(t, rlsLis, xdsA, redisSock, ratelimittest.NewClock())

	// A file through a, read through b with the same key.
	content := make([]byte, 1<<20)
	_, _ = rand.Read(content)
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("purpose", "assistants")
	fw, _ := mw.CreateFormFile("file", "data.bin")
	_, _ = fw.Write(content)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, a.base+"/files", &body)
	req.Header.Set("authorization", "Bearer "+a.demoKey)
	req.Header.Set("content-type", mw.FormDataContentType())
	var file struct{ ID string }
	status, raw := do(t, req)
	if status != http.StatusOK || json.Unmarshal(raw, &file) != nil || file.ID == "" {
		t.Fatalf("upload through a: %d %s", status, raw)
	}
	req, _ = http.NewRequest(http.MethodGet, b.base+"/files/"+file.ID+"/content", nil)
	req.Header.Set("authorization", "Bearer "+a.demoKey)
	if status, got := do(t, req); status != http.StatusOK || !bytes.Equal(got, content) {
		t.Fatalf("download through b: %d, %d bytes, identical %v", status, len(got), bytes.Equal(got, content))
	}

	// A conversation started on a continues on b.
	post := func(g *fleetGateway, body string) (int, []byte) {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/responses", strings.NewReader(body))
		req.Header.Set("authorization", "Bearer "+a.demoKey)
		req.Header.Set("content-type", "application/json")
		return do(t, req)
	}
	var first struct{ ID string }
	if status, raw := post(a, `{"model":"demo/chat","input":"first turn"}`); status != http.StatusOK || json.Unmarshal(raw, &first) != nil || first.ID == "" {
		t.Fatalf("first turn through a: %d %s", status, raw)
	}
	if status, raw := post(b, `{"model":"demo/chat","input":"second turn","previous_response_id":"`+first.ID+`"}`); status != http.StatusOK {
		t.Fatalf("second turn through b, continuing a's: %d %s", status, raw)
	}

	fleetFreeKeyLimit(t, a, b, adminToken)

	// Revoke a's demo key through a's admin API; b must refuse it.
	req, _ = http.NewRequest(http.MethodGet, a.admin+"/admin/v1/keys", nil)
	req.Header.Set("authorization", "Bearer "+adminToken)
	status, raw = do(t, req)
	var list struct {
		Data []struct{ ID, Prefix string }
	}
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil {
		t.Fatalf("list keys through a: %d %s", status, raw)
	}
	id := ""
	for _, k := range list.Data {
		if k.Prefix != "" && strings.HasPrefix(a.demoKey, k.Prefix) {
			id = k.ID
		}
	}
	if id == "" {
		t.Fatalf("a's demo key is not in the shared key store: %s", raw)
	}
	chat := func(g *fleetGateway) int {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/chat/completions",
			strings.NewReader(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("authorization", "Bearer "+a.demoKey)
		req.Header.Set("content-type", "application/json")
		status, _ := do(t, req)
		return status
	}
	if got := chat(b); got != http.StatusOK {
		t.Fatalf("b before the revocation: %d", got)
	}
	req, _ = http.NewRequest(http.MethodPost, a.admin+"/admin/v1/keys/"+id+"/revoke", nil)
	req.Header.Set("authorization", "Bearer "+adminToken)
	if status, raw := do(t, req); status != http.StatusOK {
		t.Fatalf("revoke through a: %d %s", status, raw)
	}
	revoked := time.Now()
	for chat(b) != http.StatusUnauthorized {
		if time.Since(revoked) > 2*time.Second {
			t.Fatalf("b still honours the key revoked through a after %v", time.Since(revoked))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("b refused the revoked key %v after the revocation", time.Since(revoked).Round(time.Millisecond))
}

func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// fleetFreeKeyLimit: a free key (10 requests a minute) created through a's
// admin API sends 16 requests at once, 8 to each replica; exactly 10 are
// served, and the other 6 (and one more on each replica afterwards) get
// OpenAI's 429 for requests per minute, whichever replica they reached.
func fleetFreeKeyLimit(t *testing.T, a, b *fleetGateway, adminToken string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, a.admin+"/admin/v1/keys", strings.NewReader(`{"name":"fleet-free","tier":"free"}`))
	req.Header.Set("authorization", "Bearer "+adminToken)
	req.Header.Set("content-type", "application/json")
	status, raw := do(t, req)
	var created struct{ Secret string }
	if status != http.StatusCreated || json.Unmarshal(raw, &created) != nil || created.Secret == "" {
		t.Fatalf("create a free key through a: %d %s", status, raw)
	}
	type answer struct {
		replica string
		status  int
		body    []byte
	}
	chat := func(g *fleetGateway, name string) answer {
		req, _ := http.NewRequest(http.MethodPost, g.base+"/chat/completions",
			strings.NewReader(`{"model":"demo/chat","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("authorization", "Bearer "+created.Secret)
		req.Header.Set("content-type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return answer{name, 0, []byte(err.Error())}
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{name, resp.StatusCode, body}
	}
	answers := make(chan answer, 16)
	for i := range 16 {
		go func() {
			if i%2 == 0 {
				answers <- chat(a, "a")
			} else {
				answers <- chat(b, "b")
			}
		}()
	}
	var all []answer
	for range 16 {
		all = append(all, <-answers)
	}
	all = append(all, chat(a, "a"), chat(b, "b"))
	served := map[string]int{}
	for _, ans := range all {
		switch ans.status {
		case http.StatusOK:
			served[ans.replica]++
		case http.StatusTooManyRequests:
			checkRequestsRefusal(t, ans.replica, ans.body)
		default:
			t.Errorf("%s answered %d %s, want 200 or 429", ans.replica, ans.status, ans.body)
		}
	}
	// With the 10 slots taken, the two that came after are refused, one
	// on each replica.
	for _, ans := range all[16:] {
		if ans.status != http.StatusTooManyRequests {
			t.Errorf("%s, after the 16: %d, want 429", ans.replica, ans.status)
		}
	}
	if n := served["a"] + served["b"]; n != 10 {
		t.Fatalf("a free key (10 requests a minute) got %d requests through two replicas in one window (a %d, b %d), want exactly 10",
			n, served["a"], served["b"])
	}
	t.Logf("free key: a served %d, b served %d; the other 8 answered 429", served["a"], served["b"])
}

// checkRequestsRefusal checks a 429 body is OpenAI's requests-per-minute
// refusal.
func checkRequestsRefusal(t *testing.T, replica string, body []byte) {
	t.Helper()
	var e struct {
		Error map[string]any `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Errorf("%s: 429 body %s is not JSON: %v", replica, body, err)
		return
	}
	for _, f := range []string{"message", "type", "param", "code"} {
		if _, ok := e.Error[f]; !ok {
			t.Errorf("%s: 429 error lacks %q: %s", replica, f, body)
		}
	}
	if e.Error["type"] != "requests" || e.Error["code"] != "rate_limit_exceeded" {
		t.Errorf("%s: 429 error %s, want type requests, code rate_limit_exceeded", replica, body)
	}
}
