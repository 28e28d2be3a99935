// Package sandbox owns running untrusted Python code for the Responses
// API's code_interpreter tool: one fresh interpreter per run, isolated from
// the gateway and the network, under hard limits, returning what it printed.
//
// Isolation (Linux, gateway running as root). Each run re-executes the
// gateway's own binary (/proc/self/exe) as a small shim (shim_linux.go) in
// new mount, PID, network, IPC, UTS and cgroup namespaces. The shim builds
// a root filesystem on a tmpfs mounted on the run's fresh temporary
// directory: read-only binds of the system directories (/usr and the
// /bin, /lib… links or directories) and of the interpreter's installation,
// a generated /etc (passwd, group, hosts; the loader cache), /dev with
// null, zero, full, random and urandom only, a /proc of the new PID
// namespace, and a private /tmp and a writable working directory
// /mnt/data, both size-limited tmpfs. It pivots into that root, detaches
// the host's, makes the root read-only, sets the rlimits, drops to an
// unprivileged uid/gid (65534, nobody) with no supplementary groups and
// no_new_privs, installs a seccomp filter (seccomp_linux.go: namespace,
// mount, ptrace, bpf, keyring, io_uring, module… system calls fail with
// EPERM; amd64 and arm64), and execs python (-I -S by default) with a
// fixed minimal environment: nothing of the gateway's environment, which
// holds provider credentials, reaches the code. The network namespace has only its
// loopback interface, down, so no connection reaches anything. python is
// the PID namespace's init: when it ends or is killed at the timeout,
// every process the code started is killed with it, and the mounts go
// with the namespace.
//
// Limits: wall-clock timeout (the process group is killed), CPU seconds,
// address space, file size, processes, open files, core dumps off, the
// size of /tmp and /mnt/data, and a byte cap on the captured stdout and
// stderr together (truncated with a marker).
//
// Not covered: the seccomp filter is a deny-list, not an allow-list (the
// rest of the kernel's system call surface is reachable, so a kernel bug
// there is an escape), and other architectures get none; there is no
// cgroup (memory is bounded per process by RLIMIT_AS, not for the run as a
// whole; RLIMIT_NPROC counts every process of the uid on the host, so
// concurrent runs share it; tmpfs pages count against the host's memory up
// to their size); there is no /dev/shm and no /sys; files the code writes
// are not kept between runs.
//
// New probes the isolation once with a real run. When the host cannot
// provide it (the gateway is not root, a container's seccomp profile
// forbids namespaces, python is not reachable), Available says why and Run
// refuses, unless Options.AllowUnsandboxed: then code runs as a plain child
// process, as the unprivileged uid when the gateway is root, with the same
// environment, rlimits, timeout and output cap, but sharing the host's
// filesystem (what the uid may read and write), network and process table.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures a Runner. Zero values take the defaults.
type Options struct {
	// Python is the interpreter: a path or a name looked up on PATH;
	// default "python3".
	Python string
	// PythonArgs are the interpreter's flags before the program (read from
	// stdin); default -I -S: no environment variables, user site or
	// site-packages.
	PythonArgs []string
	// Timeout bounds a run's wall-clock time; default 30s.
	Timeout time.Duration
	// MemoryBytes bounds each process's address space (RLIMIT_AS);
	// default 512 MiB.
	MemoryBytes int64
	// CPUSeconds bounds each process's CPU time (RLIMIT_CPU); default the
	// timeout, rounded up.
	CPUSeconds int64
	// MaxOutputBytes caps stdout and stderr together; default 64 KiB.
	MaxOutputBytes int
	// MaxFileBytes bounds a file the code writes (RLIMIT_FSIZE); default
	// 32 MiB.
	MaxFileBytes int64
	// DiskBytes is the size of each of /tmp and /mnt/data; default 64 MiB.
	DiskBytes int64
	// MaxProcesses bounds the uid's processes (RLIMIT_NPROC); default 32.
	MaxProcesses int
	// MaxOpenFiles bounds each process's open files (RLIMIT_NOFILE);
	// default 64.
	MaxOpenFiles int
	// MaxConcurrent bounds the runs at once; more wait. Default 4.
	MaxConcurrent int
	// UID and GID the code runs as when the gateway is root; default
	// 65534 (nobody); 0 means the default, never root.
	UID, GID int
	// TempDir is where each run's directory is made; default os.TempDir().
	TempDir string
	// AllowUnsandboxed runs code without namespace isolation when the host
	// cannot provide it (see the package doc). Only for trusted,
	// single-user machines.
	AllowUnsandboxed bool
	// Logger receives outcomes and timings, never code or output; nil:
	// slog.Default().
	Logger *slog.Logger

	// noIsolation makes the isolation probe fail, as on a host without
	// namespaces (tests).
	noIsolation bool
}

// Result is what a run produced.
type Result struct {
	Stdout, Stderr string
	// ExitCode is python's exit status, or 128 + the signal that killed
	// it (137: SIGKILL, at the timeout or a hard limit; 152: SIGXCPU).
	ExitCode int
	// TimedOut: the run was killed at the wall-clock timeout.
	TimedOut bool
	// Truncated: output beyond MaxOutputBytes was dropped.
	Truncated bool
}

// Logs is stdout followed by stderr, what OpenAI's code interpreter
// reports as the call's logs.
func (r Result) Logs() string {
	if r.Stdout == "" || r.Stderr == "" || strings.HasSuffix(r.Stdout, "\n") {
		return r.Stdout + r.Stderr
	}
	return r.Stdout + "\n" + r.Stderr
}

// TruncationMarker ends a stream whose output was cut at the cap.
const TruncationMarker = "\n[output truncated]"

// Runner runs code. It is safe for concurrent use.
type Runner struct {
	opts     Options
	log      *slog.Logger
	python   string   // resolved interpreter
	binds    []string // its installation's directories outside the system ones
	isolated bool
	avail    error
	sem      chan struct{}
}

// errUnavailable wraps every reason Available gives.
var errUnavailable = errors.New("code interpreter unavailable")

// New returns a Runner for opts and probes it: the error is for invalid
// options only; a host that cannot run code is reported by Available.
func New(opts Options) (*Runner, error) {
	if opts.Timeout < 0 || opts.MemoryBytes < 0 || opts.CPUSeconds < 0 || opts.MaxOutputBytes < 0 ||
		opts.MaxFileBytes < 0 || opts.DiskBytes < 0 || opts.MaxProcesses < 0 || opts.MaxOpenFiles < 0 ||
		opts.MaxConcurrent < 0 || opts.UID < 0 || opts.GID < 0 {
		return nil, errors.New("sandbox: limits must not be negative")
	}
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.PythonArgs == nil {
		opts.PythonArgs = []string{"-I", "-S"}
	}
	if opts.Timeout == 0 {
		opts.Timeout = 30 * time.Second
	}
	def(&opts.MemoryBytes, 512<<20)
	def(&opts.CPUSeconds, int64((opts.Timeout+time.Second-1)/time.Second))
	defInt(&opts.MaxOutputBytes, 64<<10)
	def(&opts.MaxFileBytes, 32<<20)
	def(&opts.DiskBytes, 64<<20)
	defInt(&opts.MaxProcesses, 32)
	defInt(&opts.MaxOpenFiles, 64)
	defInt(&opts.MaxConcurrent, 4)
	defInt(&opts.UID, 65534)
	defInt(&opts.GID, 65534)
	if opts.TempDir == "" {
		opts.TempDir = os.TempDir()
	}
	r := &Runner{opts: opts, log: opts.Logger, sem: make(chan struct{}, opts.MaxConcurrent)}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.removeStale(time.Now())
	r.avail = r.setup()
	if r.avail != nil {
		r.log.Warn("sandbox: code interpreter unavailable", "err", r.avail)
	}
	return r, nil
}

// runDirPrefix names each run's directory under Options.TempDir.
const runDirPrefix = "switchyard-sandbox-"

// Available returns nil when Run can run code, otherwise why not. A nil
// Runner is unavailable.
func (r *Runner) Available() error {
	if r == nil {
		return fmt.Errorf("%w: no sandbox configured", errUnavailable)
	}
	return r.avail
}

// Sandboxed reports whether runs are isolated in namespaces (false when
// Options.AllowUnsandboxed let them run without).
func (r *Runner) Sandboxed() bool { return r != nil && r.isolated }

// Isolation names how runs are isolated, for operators and the tool's
// description: namespaces entered as root (the strongest: the code also
// runs as an unprivileged user), unprivileged user namespaces (the gateway
// is not root: the code runs as the namespace's root without capabilities),
// or none (allow_unsandboxed).
func (r *Runner) Isolation() string {
	switch {
	case r == nil || !r.isolated:
		return IsolationNone
	case os.Geteuid() == 0:
		return IsolationRoot
	default:
		return IsolationUserNS
	}
}

// Isolation values.
const (
	IsolationRoot   = "namespaces (root; code runs as an unprivileged user)"
	IsolationUserNS = "user namespaces (unprivileged; code runs without capabilities)"
	IsolationNone   = "none (allow_unsandboxed)"
)

// probeCode is the run New makes: the whole path, namespaces, root,
// privilege drop and exec, must work for it to print 42.
const probeCode = "print(6 * 7)\n"

// setup resolves the interpreter and probes isolated, then (when allowed)
// unsandboxed runs.
func (r *Runner) setup() error {
	if !platformSupported {
		return fmt.Errorf("%w: the sandbox runs on Linux only", errUnavailable)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	py, binds, err := resolvePython(ctx, r.opts.Python)
	if err != nil {
		return fmt.Errorf("%w: python %q: %w", errUnavailable, r.opts.Python, err)
	}
	r.python, r.binds = py, binds

	err = r.probe(ctx, true)
	if err == nil {
		r.isolated = true
		r.log.Info("sandbox: code interpreter ready", "python", r.python, "isolation", r.Isolation())
		return nil
	}
	if !r.opts.AllowUnsandboxed {
		hint := ""
		if os.Geteuid() != 0 {
			hint = " (not root: isolation needs unprivileged user namespaces, which this kernel or container refuses; see kernel.unprivileged_userns_clone, user.max_user_namespaces, or the container's seccomp profile)"
		}
		return fmt.Errorf("%w: isolation failed%s: %w; allow_unsandboxed runs code without it, on trusted single-user machines only",
			errUnavailable, hint, err)
	}
	r.log.Warn("sandbox: namespace isolation unavailable; code will run UNSANDBOXED because allow_unsandboxed is set", "err", err)
	if err := r.probe(ctx, false); err != nil {
		return fmt.Errorf("%w: unsandboxed run failed: %w", errUnavailable, err)
	}
	r.log.Info("sandbox: code interpreter ready", "python", r.python, "isolation", r.Isolation())
	return nil
}

func (r *Runner) probe(ctx context.Context, isolated bool) error {
	if isolated && r.opts.noIsolation {
		return errors.New("isolation disabled for the test")
	}
	res, err := r.run(ctx, probeCode, isolated, 15*time.Second)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Stdout != "42\n" {
		// The probe's own output is ours, not user content: it says why.
		return fmt.Errorf("probe run exited %d: %.300s", res.ExitCode, res.Stderr)
	}
	return nil
}

// Run runs code (a Python program) and returns what it printed. Code that
// fails, raises or is killed at a limit is a Result, not an error; the
// error is for runs that could not happen (unavailable, ctx done, the
// sandbox failed to set up).
func (r *Runner) Run(ctx context.Context, code string) (Result, error) {
	if err := r.Available(); err != nil {
		return Result{}, err
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("sandbox: waiting for a slot: %w", ctx.Err())
	}
	defer func() { <-r.sem }()
	return r.run(ctx, code, r.isolated, r.opts.Timeout)
}

func (r *Runner) run(ctx context.Context, code string, isolated bool, timeout time.Duration) (Result, error) {
	start := time.Now()
	dir, err := os.MkdirTemp(r.opts.TempDir, runDirPrefix)
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: run directory: %w", err)
	}
	defer func() {
		// Isolated, the directory was only the new root's mount point (the
		// mounts were the namespace's and went with it); unsandboxed, it
		// holds whatever the code wrote.
		if err := os.RemoveAll(dir); err != nil {
			r.log.Error("sandbox: run directory not removed", "dir", dir, "err", err)
		}
	}()
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		uid, gid = r.opts.UID, r.opts.GID
	}
	cfg := shimConfig{
		Isolate: isolated, UserNS: isolated && os.Geteuid() != 0, Dir: dir, Python: r.python, Args: r.opts.PythonArgs,
		Binds: r.binds, UID: uid, GID: gid, DiskBytes: r.opts.DiskBytes,
		Limits: []limit{
			{Resource: syscall.RLIMIT_CPU, Soft: uint64(r.opts.CPUSeconds), Hard: uint64(r.opts.CPUSeconds) + 1},
			{Resource: syscall.RLIMIT_AS, Soft: uint64(r.opts.MemoryBytes), Hard: uint64(r.opts.MemoryBytes)},
			{Resource: syscall.RLIMIT_FSIZE, Soft: uint64(r.opts.MaxFileBytes), Hard: uint64(r.opts.MaxFileBytes)},
			{Resource: rlimitNproc, Soft: uint64(r.opts.MaxProcesses), Hard: uint64(r.opts.MaxProcesses)},
			{Resource: syscall.RLIMIT_NOFILE, Soft: uint64(r.opts.MaxOpenFiles), Hard: uint64(r.opts.MaxOpenFiles)},
			{Resource: syscall.RLIMIT_CORE, Soft: 0, Hard: 0},
		},
	}
	home := "/tmp"
	if !isolated {
		home = dir
		if uid >= 0 {
			if err := os.Chown(dir, uid, gid); err != nil {
				return Result{}, fmt.Errorf("sandbox: run directory: %w", err)
			}
		}
	}
	// The whole environment the code sees: the gateway's own holds
	// provider credentials and must never be inherited.
	cfg.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + home, "TMPDIR=" + home, "LANG=C.UTF-8"}

	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &capture{left: r.opts.MaxOutputBytes}
	stdout, stderr := &capWriter{c: out}, &capWriter{c: out}
	res, err := startShim(runCtx, cfg, strings.NewReader(code), stdout, stderr)
	if err != nil {
		return Result{}, err
	}
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	if ctx.Err() != nil {
		return Result{}, fmt.Errorf("sandbox: %w", ctx.Err())
	}
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	res.Truncated = out.truncated
	switch {
	case res.TimedOut:
		res.Stderr += fmt.Sprintf("\n[killed: the run exceeded its %s time limit]", timeout)
	case res.ExitCode == 128+int(syscall.SIGXCPU) || (res.ExitCode == 128+int(syscall.SIGKILL) && res.cpuLimited):
		res.Stderr += "\n[killed: CPU time limit exceeded]"
	}
	r.log.Debug("sandbox: run finished", "isolated", isolated, "exit_code", res.ExitCode, "timed_out", res.TimedOut,
		"truncated", res.Truncated, "output_bytes", len(res.Stdout)+len(res.Stderr), "duration", time.Since(start))
	return res.Result, nil
}

// shimResult is a finished run as startShim sees it.
type shimResult struct {
	Result
	cpuLimited bool // killed while at the CPU limit
}

// shimConfig is what the shim is told, as JSON in its environment.
type shimConfig struct {
	Isolate bool
	// UserNS isolates in a new user namespace too: the gateway is not root,
	// so the namespaces are made with the kernel's unprivileged user
	// namespaces, the code runs as the namespace's root with every
	// capability dropped, and its files map to the gateway's own user.
	UserNS bool
	// Dir is the run's directory: the new root's mount point (isolated)
	// or the working directory (not).
	Dir    string
	Python string
	Args   []string
	Env    []string
	// Binds are host directories bound read-only at the same path.
	Binds     []string
	UID, GID  int // -1: keep the gateway's
	DiskBytes int64
	Limits    []limit
}

type limit struct {
	Resource   int
	Soft, Hard uint64
}

// capture is the output budget stdout and stderr share.
type capture struct {
	mu        sync.Mutex
	left      int
	truncated bool
}

// capWriter keeps what fits the budget and drops the rest, still
// accepting it so the code never blocks on a full pipe.
type capWriter struct {
	c   *capture
	buf bytes.Buffer
	cut bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	n := min(len(p), w.c.left)
	w.buf.Write(p[:n])
	w.c.left -= n
	if n < len(p) {
		w.c.truncated, w.cut = true, true
	}
	return len(p), nil
}

func (w *capWriter) String() string {
	w.c.mu.Lock()
	defer w.c.mu.Unlock()
	if w.cut {
		return w.buf.String() + TruncationMarker
	}
	return w.buf.String()
}

// pythonInfo prints what resolvePython needs, one path per line.
const pythonInfo = "import sys\nfor p in (sys.executable, sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix): print(p)\n"

// resolvePython finds the real interpreter behind name (pyenv shims and
// venv links included) and the directories of its installation that the
// sandbox must bind besides the system ones. It runs the operator's
// interpreter with a fixed program, not user code.
func resolvePython(ctx context.Context, name string) (string, []string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, path, "-I", "-S", "-c", pythonInfo)
	// Just enough for version managers' shims to find their interpreter.
	for _, k := range []string{"PATH", "HOME", "PYENV_ROOT", "PYENV_VERSION"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	b, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("ask the interpreter for its paths: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 || lines[0] == "" {
		return "", nil, errors.New("unexpected answer from the interpreter")
	}
	exe, err := filepath.EvalSymlinks(lines[0])
	if err != nil {
		return "", nil, fmt.Errorf("interpreter path: %w", err)
	}
	var dirs []string
	for _, p := range append([]string{filepath.Dir(exe)}, lines[1:]...) {
		if p == "" {
			continue
		}
		rp, err := filepath.EvalSymlinks(p)
		if err != nil {
			return "", nil, fmt.Errorf("interpreter path: %w", err)
		}
		dirs = append(dirs, rp)
	}
	return exe, outsideSystem(dirs), nil
}

// systemDirs are bound into every sandbox.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// outsideSystem returns the directories not already under a system
// directory or another of them, deduplicated.
func outsideSystem(dirs []string) []string {
	under := func(p, d string) bool { return p == d || strings.HasPrefix(p, d+"/") }
	var out []string
	for _, p := range dirs {
		covered := p == "/"
		for _, d := range systemDirs {
			if rd, err := filepath.EvalSymlinks(d); err == nil && under(p, rd) {
				covered = true
			}
		}
		for i := 0; i < len(out) && !covered; i++ {
			switch {
			case under(p, out[i]):
				covered = true
			case under(out[i], p):
				out[i] = p
				covered = true
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	// A directory widened above may now cover a later one.
	var final []string
	for i, p := range out {
		dup := false
		for j, q := range out {
			if i != j && under(p, q) && (p != q || j < i) {
				dup = true
			}
		}
		if !dup {
			final = append(final, p)
		}
	}
	return final
}

// removeStale removes run directories a crashed process left behind: every
// run removes its own, but a process killed mid-run cannot. A directory is
// stale when it is older than any run can last (with a wide margin, since
// another gateway may share the temporary directory), so a live run's is
// never touched.
func (r *Runner) removeStale(now time.Time) {
	entries, err := os.ReadDir(r.opts.TempDir)
	if err != nil {
		return
	}
	cutoff := now.Add(-max(time.Hour, 4*r.opts.Timeout))
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), runDirPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || info.ModTime().After(cutoff) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.opts.TempDir, e.Name())); err != nil {
			r.log.Warn("sandbox: removing a stale run directory failed", "dir", e.Name(), "err", err)
		}
	}
}
