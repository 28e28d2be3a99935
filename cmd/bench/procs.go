package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is a server process the harness started, in its own process group so
// that stopping it also stops its children (nginx workers).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	err     error
}

var (
	procsMu sync.Mutex
	procs   []*proc
)

// startProc starts bin with args, output to logPath.
func startProc(name, logPath, dir string, env []string, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	procsMu.Lock()
	procs = append(procs, p)
	procsMu.Unlock()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process group: SIGTERM, then SIGKILL after a grace period.
func (p *proc) stop() {
	if p == nil || p.exited() {
		return
	}
	pgid := p.pid()
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
}

// logTail is the end of the process's output, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return strings.TrimSpace(string(b))
}

func stopAll() {
	procsMu.Lock()
	ps := procs
	procs = nil
	procsMu.Unlock()
	for i := len(ps) - 1; i >= 0; i-- {
		ps[i].stop()
	}
}

// waitHTTP waits until url answers anything at all over HTTP.
func waitHTTP(ctx context.Context, p *proc, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.logTail())
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s did not answer %s within %s\n%s", p.name, url, timeout, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// memStatus is the memory of a process from /proc/<pid>/status, in KiB.
type memStatus struct {
	HWM, RSS int64
}

func readMem(pid int) (memStatus, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	defer f.Close()
	var m memStatus
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		n, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmHWM":
			m.HWM = n
		case "VmRSS":
			m.RSS = n
		}
	}
	if m.HWM == 0 {
		return m, errors.New("no VmHWM in /proc status")
	}
	return m, sc.Err()
}

// output runs a command and returns its combined output.
func output(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return strings.TrimSpace(b.String()), err
}

// cpuTicks is the user+system CPU time, in clock ticks (1/100 s on Linux),
// of pid and its direct children (nginx's workers).
func cpuTicks(pid int) int64 {
	var total int64
	read := func(p int) (ppid int, ticks int64, ok bool) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			return 0, 0, false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return 0, 0, false
		}
		f := strings.Fields(s[i+1:])
		// After the command: state(0) ppid(1) ... utime(11) stime(12).
		if len(f) < 13 {
			return 0, 0, false
		}
		pp, _ := strconv.Atoi(f[1])
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return pp, ut + st, true
	}
	if _, t, ok := read(pid); ok {
		total += t
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if pp, t, ok := read(p); ok && pp == pid {
			total += t
		}
	}
	return total
}

// ticksPerSecond is Linux's USER_HZ, the unit of /proc/<pid>/stat times.
const ticksPerSecond = 100
