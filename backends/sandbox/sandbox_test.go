package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// newRunner returns an available Runner writing its run directories under
// a test directory, skipping when python3 is absent and failing when the
// host cannot isolate (as root on Linux it must).
func newRunner(t *testing.T, opts Options) (*Runner, string) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil && opts.Python == "" {
		t.Skip("python3 is not installed: the sandbox tests run real code")
	}
	opts.TempDir = t.TempDir()
	opts.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Available(); err != nil {
		if os.Geteuid() != 0 && !opts.AllowUnsandboxed && os.Getenv(unprivilegedRun) == "" && os.Getenv("CI") == "" {
			t.Skipf("not root, and this kernel refuses unprivileged user namespaces: %v", err)
		}
		t.Fatalf("unavailable: %v", err)
	}
	if os.Getenv(unprivilegedRun) != "" && !opts.AllowUnsandboxed && r.Isolation() != IsolationUserNS {
		t.Fatalf("unprivileged run isolated with %q, want %q", r.Isolation(), IsolationUserNS)
	}
	return r, opts.TempDir
}

// unprivilegedRun marks the re-run of this package's tests as an
// unprivileged user (TestUnprivileged).
const unprivilegedRun = "SWITCHYARD_SANDBOX_UNPRIVILEGED_RUN"

// TestUnprivileged re-runs the run, isolation and limit tests as an
// unprivileged user (nobody), as a non-root container runs the gateway:
// the sandbox must then isolate with unprivileged user namespaces and
// still hold every property those tests check.
func TestUnprivileged(t *testing.T) {
	if os.Getenv(unprivilegedRun) != "" {
		return // this is the re-run
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the other tests of this run are the unprivileged ones")
		return
	}
	py, err := exec.LookPath("/usr/bin/python3")
	if err != nil {
		t.Fatalf("the unprivileged run needs a python3 every user can run: %v", err)
	}
	dir, err := os.MkdirTemp("", "sandbox-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "-test.run", "^(TestRun|TestIsolation|TestLimits|TestTightMemoryLimit|TestRunCancelled|TestConcurrentRuns)$", "-test.count=1", "-test.v")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Dir(py) + ":/bin", "HOME=" + dir, "TMPDIR=" + dir, unprivilegedRun + "=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the tests as an unprivileged user failed: %v\n%s", err, out)
	}
	for _, name := range []string{"TestRun", "TestIsolation", "TestLimits", "TestTightMemoryLimit", "TestRunCancelled", "TestConcurrentRuns"} {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Errorf("%s did not pass as an unprivileged user:\n%s", name, out)
		}
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Errorf("a test skipped as an unprivileged user:\n%s", out)
	}
}

func run(t *testing.T, r *Runner, code string) Result {
	t.Helper()
	res, err := r.Run(t.Context(), code)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRun(t *testing.T) {
	r, _ := newRunner(t, Options{Timeout: 10 * time.Second})
	if !r.Sandboxed() {
		t.Fatal("not sandboxed")
	}
	tests := []struct {
		name, code   string
		exit         int
		stdout       string
		stderrHas    string
		stdoutHasAll []string
	}{
		{name: "print", code: "print('hello', 6*7)\n", stdout: "hello 42\n"},
		{name: "stderr and exit code", code: "import sys\nprint('out')\nsys.exit('bad')\n", exit: 1, stdout: "out\n", stderrHas: "bad"},
		{name: "exception", code: "sample", exit: 1, stderrHas: "NameError: name 'sample' is not defined"},
		{name: "unicode", code: "print('é✓')", stdout: "é✓\n"},
		{name: "unprivileged in its own namespaces", code: `import os, socket
print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), socket.gethostname(), os.getcwd())`,
			stdout: "65534 65534 [] 1 sandbox /mnt/data\n"},
		{name: "files in the working directory", code: `open('a.txt', 'w').write('x' * 10)
import os; print(os.listdir('.'), os.path.getsize('a.txt'))`, stdout: "['a.txt'] 10\n"},
		{name: "rlimits", code: `import resource as r
for n in ('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_NPROC', 'RLIMIT_NOFILE', 'RLIMIT_CORE'):
    print(n, r.getrlimit(getattr(r, n)))`, stdoutHasAll: []string{
			"RLIMIT_CPU (10, 11)", "RLIMIT_AS (536870912, 536870912)", "RLIMIT_FSIZE (33554432, 33554432)",
			"RLIMIT_NPROC (32, 32)", "RLIMIT_NOFILE (64, 64)", "RLIMIT_CORE (0, 0)"}},
		{name: "only its own processes", code: "import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()))", stdout: "['1']\n"},
		{name: "file size limit", code: "open('big', 'wb').write(b'x' * (40 << 20))", exit: 1, stderrHas: "File too large"},
		{name: "disk limit", code: "for i in range(100): open('/tmp/fill%d' % i, 'wb').write(b'x' * (1 << 20))", exit: 1, stderrHas: "No space left"},
		{name: "no host root", code: "import os\nprint(sorted(os.listdir('/')))",
			stdout: rootListing(t) + "\n"},
	}
	for _, tc := range tests {
		if tc.name == "unprivileged in its own namespaces" && r.Isolation() == IsolationUserNS {
			// The user namespace's root: the gateway's own user on the
			// host, without capabilities (TestIsolation checks them).
			tc.stdout = "0 0 [] 1 sandbox /mnt/data\n"
		}
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, tc.code)
			if res.ExitCode != tc.exit || res.TimedOut || res.Truncated {
				t.Errorf("exit %d timed out %v truncated %v; stderr %q", res.ExitCode, res.TimedOut, res.Truncated, res.Stderr)
			}
			if tc.stdoutHasAll == nil && res.Stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", res.Stdout, tc.stdout)
			}
			for _, s := range tc.stdoutHasAll {
				if !strings.Contains(res.Stdout, s) {
					t.Errorf("stdout %q lacks %q", res.Stdout, s)
				}
			}
			if !strings.Contains(res.Stderr, tc.stderrHas) {
				t.Errorf("stderr %q lacks %q", res.Stderr, tc.stderrHas)
			}
		})
	}
}

// rootListing is what the sandbox's root holds, as Python prints it: the
// system directories as on the host (directories or links), the
// interpreter's top directory when it lives elsewhere, and the generated
// ones.
func rootListing(t *testing.T) string {
	t.Helper()
	names := map[string]bool{"dev": true, "etc": true, "mnt": true, "proc": true, "tmp": true}
	for _, d := range systemDirs {
		if _, err := os.Lstat(d); err == nil {
			names[d[1:]] = true
		}
	}
	py, binds, err := resolvePython(t.Context(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	_ = py
	for _, b := range binds {
		names[strings.SplitN(b[1:], "/", 2)[0]] = true
	}
	var out []string
	for n := range names {
		out = append(out, "'"+n+"'")
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		code  string
		check func(t *testing.T, res Result, took time.Duration)
	}{
		{"infinite loop killed at the timeout", Options{Timeout: time.Second, CPUSeconds: 30}, "while True: pass",
			func(t *testing.T, res Result, took time.Duration) {
				if !res.TimedOut || res.ExitCode != 137 || took > 5*time.Second || !strings.Contains(res.Stderr, "time limit") {
					t.Errorf("%+v after %s", res, took)
				}
			}},
		{"sleeping children killed at the timeout", Options{Timeout: time.Second},
			"import os, time\nfor i in range(3):\n    if os.fork() == 0: break\ntime.sleep(60)",
			func(t *testing.T, res Result, took time.Duration) {
				if !res.TimedOut || took > 5*time.Second {
					t.Errorf("%+v after %s", res, took)
				}
			}},
		// The wall-clock timeout is far: on a loaded machine 2 CPU seconds
		// may take many more.
		{"CPU limit", Options{Timeout: 2 * time.Minute, CPUSeconds: 1}, "while True: pass",
			func(t *testing.T, res Result, took time.Duration) {
				// SIGXCPU at the soft limit, or SIGKILL at the hard one:
				// python is its PID namespace's init, which ignores
				// signals it has no handler for.
				if res.TimedOut || (res.ExitCode != 128+24 && res.ExitCode != 137) || !strings.Contains(res.Stderr, "CPU time limit") {
					t.Errorf("%+v after %s", res, took)
				}
			}},
		{"memory bomb", Options{Timeout: 20 * time.Second, MemoryBytes: 256 << 20},
			"a = []\nwhile True: a.append(bytearray(1 << 20))",
			func(t *testing.T, res Result, took time.Duration) {
				if res.TimedOut || res.ExitCode == 0 || !strings.Contains(res.Stderr, "MemoryError") {
					t.Errorf("%+v after %s", res, took)
				}
			}},
		{"single huge allocation", Options{MemoryBytes: 256 << 20}, "x = bytearray(1 << 30)",
			func(t *testing.T, res Result, took time.Duration) {
				if res.ExitCode != 1 || !strings.Contains(res.Stderr, "MemoryError") {
					t.Errorf("%+v", res)
				}
			}},
		{"output cap", Options{MaxOutputBytes: 1000}, "import sys\nprint('x' * 100000)\nprint('y' * 5000, file=sys.stderr)",
			func(t *testing.T, res Result, took time.Duration) {
				if !res.Truncated || res.ExitCode != 0 || len(res.Stdout)+len(res.Stderr) > 1000+2*len(TruncationMarker) ||
					!strings.HasSuffix(res.Stdout, TruncationMarker) || !strings.HasPrefix(res.Stdout, "xxxx") {
					t.Errorf("truncated %v, %d+%d bytes, stdout ends %q", res.Truncated, len(res.Stdout), len(res.Stderr), res.Stdout[max(0, len(res.Stdout)-30):])
				}
			}},
		{"endless output", Options{MaxOutputBytes: 100, Timeout: time.Second}, "while True: print('spam')",
			func(t *testing.T, res Result, took time.Duration) {
				if !res.Truncated || !res.TimedOut || len(res.Stdout) > 100+len(TruncationMarker) {
					t.Errorf("%+v", res)
				}
			}},
		{"fork bomb bounded", Options{MaxProcesses: 16, Timeout: 20 * time.Second}, `import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError as e:
    print('stopped after', n, type(e).__name__)`,
			func(t *testing.T, res Result, took time.Duration) {
				var n int
				var errName string
				if _, err := fmt.Sscanf(res.Stdout, "stopped after %d %s", &n, &errName); err != nil || n >= 16 || errName != "BlockingIOError" {
					t.Errorf("%+v", res)
				}
				// The sleeping children died with the namespace's init.
				if left := processesOf(t, 65534); len(left) > 0 {
					t.Errorf("processes of uid 65534 left: %v", left)
				}
			}},
		{"open files", Options{MaxOpenFiles: 20}, "fs = [open('/dev/null') for i in range(100)]",
			func(t *testing.T, res Result, took time.Duration) {
				if res.ExitCode != 1 || !strings.Contains(res.Stderr, "Too many open files") {
					t.Errorf("%+v", res)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRunner(t, tc.opts)
			start := time.Now()
			res := run(t, r, tc.code)
			tc.check(t, res, time.Since(start))
		})
	}
}

// processesOf lists the host's live (not zombie) python processes running
// as uid, other than this one, waiting a little for killed ones to die.
func processesOf(t *testing.T, uid int) []string {
	t.Helper()
	var out []string
	for range 20 {
		if out = listProcesses(t, uid); len(out) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return out
}

func listProcesses(t *testing.T, uid int) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		// Not this test process: in the unprivileged run it has the
		// sandbox's host uid.
		if pid, err := strconv.Atoi(e.Name()); err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		st := string(b)
		if strings.Contains(st, "\nState:\tZ") {
			continue
		}
		// The code's processes are pythons (forks included): other
		// programs of the same uid (a test Postgres run as nobody by
		// another package) are not the sandbox's.
		if !strings.Contains(st, "Name:\tpython") {
			continue
		}
		for _, l := range strings.Split(st, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(uid) {
				out = append(out, e.Name())
			}
		}
	}
	return out
}

func TestIsolation(t *testing.T) {
	const secret = "sk-test-provider-secret-4b1d"
	t.Setenv("SWITCHYARD_TEST_PROVIDER_KEY", secret)
	t.Setenv("OPENAI_API_KEY", secret)

	// An open port on the host's loopback: the code must not reach it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	// A directory the sandbox's uid could write to if it could see it.
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	r, runDirs := newRunner(t, Options{Timeout: 10 * time.Second})

	tests := []struct {
		name, code, want string
	}{
		{"environment not inherited", `import os
print(sorted(os.environ))
for p in os.listdir('/proc'):
    if p.isdigit():
        print(open('/proc/%s/environ' % p).read())`,
			"['HOME', 'LANG', 'PATH', 'TMPDIR']\nPATH=/usr/local/bin:/usr/bin:/bin\x00HOME=/tmp\x00TMPDIR=/tmp\x00LANG=C.UTF-8\x00\n"},
		{"gateway's environ unreachable", fmt.Sprintf(`try:
    print(open('/proc/%d/environ').read())
except OSError as e:
    print(type(e).__name__)`, os.Getpid()), "FileNotFoundError\n"},
		{"no network", fmt.Sprintf(`import socket
for host in ('127.0.0.1', '1.1.1.1'):
    try:
        socket.create_connection((host, %d), timeout=2)
        print('connected')
    except OSError as e:
        print(type(e).__name__)`, port), "OSError\nOSError\n"},
		{"no name resolution", `import socket
try:
    socket.getaddrinfo('example.com', 443)
    print('resolved')
except OSError as e:
    print(type(e).__name__)`, "gaierror\n"},
		{"cannot write outside", fmt.Sprintf(`import errno
for p in (%q, '/etc/x', '/usr/x', '/x', '/proc/x', %q, '/mnt/x'):
    try:
        open(p, 'w').write('x')
        print('wrote', p)
    except OSError as e:
        print(errno.errorcode[e.errno])`, filepath.Join(outside, "x"), filepath.Join(runDirs, "x")),
			"ENOENT\nEROFS\nEROFS\nEROFS\nENOENT\nENOENT\nEROFS\n"},
		{"private /tmp", "open('/tmp/x', 'w').write('x')\nprint('ok')", "ok\n"},
		{"host files unreachable", `import os
for p in ('/sys', '/work', '/home', '/var', '/etc/shadow', '/etc/ssl'):
    print(os.path.exists(p))`, "False\nFalse\nFalse\nFalse\nFalse\nFalse\n"},
		{"no privilege", `import os
try:
    os.setuid(0)
    print('root')
except OSError as e:
    print(type(e).__name__)
print(open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0])
print([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0])`, "PermissionError\n1\n0000000000000000\n"},
		{"namespaces and mounts denied", `import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, call in (('unshare', lambda: libc.unshare(0x10000000)), ('mount', lambda: libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
                   ('clone newuser', lambda: libc.syscall(56 if ctypes.sizeof(ctypes.c_void_p) == 8 and __import__('platform').machine() == 'x86_64' else 220, 0x10000000 | 17, 0, 0, 0, 0)),
                   ('keyctl', lambda: libc.syscall(250 if __import__('platform').machine() == 'x86_64' else 219, 0, 0, 0, 0, 0))):
    print(name, call(), errno.errorcode.get(ctypes.get_errno()))
print(open('/proc/self/status').read().split('Seccomp:')[1].split()[0])`,
			"unshare -1 EPERM\nmount -1 EPERM\nclone newuser -1 EPERM\nkeyctl -1 EPERM\n2\n"},
		{"processes and threads still work", `import subprocess, threading
print(subprocess.run(['/bin/echo', 'hi'], capture_output=True, text=True).stdout.strip())
t = threading.Thread(target=lambda: print('thread'))
t.start(); t.join()`, "hi\nthread\n"},
	}
	for _, tc := range tests {
		if tc.name == "no privilege" && r.Isolation() == IsolationUserNS {
			// Unprivileged, the code is the user namespace's root, which
			// is the gateway's own user on the host: setuid(0) is a no-op
			// there; what matters is that it holds no capability, and
			// that none can come back at exec (an empty bounding set).
			tc.code += "\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('CapBnd')][0])"
			tc.want = "root\n1\n0000000000000000\n0000000000000000\n"
		}
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, tc.code)
			if res.Stdout != tc.want || strings.Contains(res.Stdout+res.Stderr, secret) {
				t.Errorf("stdout %q, want %q; stderr %q", res.Stdout, tc.want, res.Stderr)
			}
		})
	}
	select {
	case <-accepted:
		t.Error("the sandbox connected to the host's loopback")
	default:
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); !os.IsNotExist(err) {
		t.Errorf("file written outside: %v", err)
	}
	if _, err := os.Stat("/tmp/x"); err == nil {
		t.Error("/tmp/x exists on the host")
	}
	// Every run directory is gone.
	ents, err := os.ReadDir(runDirs)
	if err != nil || len(ents) != 0 {
		t.Errorf("run directories left: %v %v", ents, err)
	}
}

// TestTightMemoryLimit runs repeatedly under an address-space limit far
// below what the shim's Go runtime has reserved: the shim must reach the
// exec without mapping memory.
func TestTightMemoryLimit(t *testing.T) {
	r, _ := newRunner(t, Options{MemoryBytes: 96 << 20})
	for i := range 30 {
		res := run(t, r, "print('ok')")
		if res.Stdout != "ok\n" || res.ExitCode != 0 {
			t.Fatalf("run %d: %+v", i, res)
		}
	}
}

func TestRunCancelled(t *testing.T) {
	r, runDirs := newRunner(t, Options{Timeout: 30 * time.Second})
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := r.Run(ctx, "import time\ntime.sleep(60)")
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("err %v after %s", err, time.Since(start))
	}
	if ents, _ := os.ReadDir(runDirs); len(ents) != 0 {
		t.Errorf("run directories left: %v", ents)
	}
}

func TestConcurrentRuns(t *testing.T) {
	r, _ := newRunner(t, Options{MaxConcurrent: 2})
	errs := make(chan error, 6)
	for i := range 6 {
		go func() {
			res, err := r.Run(t.Context(), fmt.Sprintf("print(%d)", i))
			if err == nil && res.Stdout != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("run %d: %+v", i, res)
			}
			errs <- err
		}()
	}
	for range 6 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestUnavailable(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed")
	}
	tests := []struct {
		name string
		opts Options
		want string // in Available's error; "" for available
	}{
		{"no python", Options{Python: "/nonexistent/python3"}, "python"},
		{"no isolation, not allowed", Options{noIsolation: true}, "allow_unsandboxed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
			r, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			aerr := r.Available()
			if aerr == nil || !strings.Contains(aerr.Error(), tc.want) {
				t.Fatalf("Available() = %v, want it to mention %q", aerr, tc.want)
			}
			if _, err := r.Run(t.Context(), "print(1)"); err == nil {
				t.Error("Run ran without isolation")
			}
		})
	}
	var none *Runner
	if none.Available() == nil || none.Sandboxed() {
		t.Error("a nil Runner is available")
	}
	if _, err := New(Options{Timeout: -1}); err == nil {
		t.Error("negative timeout accepted")
	}
}

func TestUnsandboxed(t *testing.T) {
	const secret = "sk-test-provider-secret-77"
	t.Setenv("SWITCHYARD_TEST_PROVIDER_KEY", secret)
	// As root the code runs as nobody, who cannot reach an interpreter
	// under /root (pyenv); the system one is readable by everyone.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = ""
	}
	r, runDirs := newRunner(t, Options{Python: py, AllowUnsandboxed: true, noIsolation: true, Timeout: time.Second})
	if r.Sandboxed() {
		t.Fatal("Sandboxed() with isolation off")
	}
	res := run(t, r, "import os\nprint(sorted(os.environ))\nopen('f', 'w').write('x')\nprint(os.listdir('.'))")
	if strings.Contains(res.Stdout+res.Stderr, secret) || !strings.HasPrefix(res.Stdout, "['HOME', 'LANG', 'PATH', 'TMPDIR']\n['f']") {
		t.Errorf("%+v", res)
	}
	res = run(t, r, "import os, time\nif os.fork() == 0: time.sleep(60)\nwhile True: pass")
	if !res.TimedOut {
		t.Errorf("%+v", res)
	}
	if ents, _ := os.ReadDir(runDirs); len(ents) != 0 {
		t.Errorf("run directories left: %v", ents)
	}
	if os.Geteuid() == 0 {
		if left := processesOf(t, 65534); len(left) > 0 {
			t.Errorf("processes of uid 65534 left: %v", left)
		}
	}
}

func TestOutsideSystem(t *testing.T) {
	tests := []struct {
		in, want []string
	}{
		{[]string{"/usr/bin", "/usr", "/usr"}, nil},
		{[]string{"/opt/py/bin", "/opt/py", "/opt/py"}, []string{"/opt/py"}},
		{[]string{"/opt/venv/bin", "/opt/base", "/opt/base", "/opt/venv", "/opt/venv"}, []string{"/opt/venv", "/opt/base"}},
	}
	for _, tc := range tests {
		if got := outsideSystem(tc.in); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("outsideSystem(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestStaleRunDirectoriesRemoved: New removes run directories a crashed
// process left behind, and only those old enough that no run can still own
// them.
func TestStaleRunDirectoriesRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, runDirPrefix+"stale")
	fresh := filepath.Join(dir, runDirPrefix+"fresh")
	other := filepath.Join(dir, "not-ours")
	for _, d := range []string{stale, fresh, other} {
		if err := os.MkdirAll(filepath.Join(d, "tmp"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, d := range []string{stale, other} {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := New(Options{TempDir: dir, Python: "/nonexistent/python3", Logger: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale run directory kept: %v", err)
	}
	for _, d := range []string{fresh, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
