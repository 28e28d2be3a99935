package sandbox

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const platformSupported = true

const rlimitNproc = unix.RLIMIT_NPROC

// shimEnv carries the shim's configuration. A process started with it is
// the shim: init runs it before anything else of the binary.
const shimEnv = "SWITCHYARD_SANDBOX_SHIM"

// shimFailed is the shim's exit status when it could not set up or exec;
// the reason is on its error pipe (fd 3).
const shimFailed = 125

func init() {
	if v, ok := os.LookupEnv(shimEnv); ok {
		runShim(v) // does not return
	}
}

// startShim runs the shim with cfg, code on its stdin, and waits for it.
// A shim that fails to set up is an error; whatever python does is a
// result.
func startShim(ctx context.Context, cfg shimConfig, code io.Reader, stdout, stderr io.Writer) (shimResult, error) {
	js, err := json.Marshal(cfg)
	if err != nil {
		return shimResult{}, fmt.Errorf("sandbox: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return shimResult{}, fmt.Errorf("sandbox: %w", err)
	}
	defer errR.Close()

	// /proc/self/exe, not os.Executable(): it is this very binary even if
	// the file was replaced or removed since the gateway started.
	cmd := exec.CommandContext(ctx, "/proc/self/exe")
	cmd.Args = []string{"switchyard-sandbox"}
	cmd.Env = []string{shimEnv + "=" + base64.StdEncoding.EncodeToString(js)}
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = code, stdout, stderr
	cmd.ExtraFiles = []*os.File{errW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so the timeout kills everything the code
		// started even unsandboxed.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if cfg.Isolate {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET |
			syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	}
	if cfg.Isolate && cfg.UserNS {
		// Not root: a user namespace owns the others, with the gateway's
		// user as its root (the only mapping an unprivileged process may
		// write), and setgroups denied, as the kernel requires for that.
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	cmd.Cancel = func() error {
		// Isolated, python is the PID namespace's init: killing it kills
		// the namespace. The group kill covers the unsandboxed case.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return cmd.Process.Kill()
	}
	// Children that keep the output pipes open must not hold Wait.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		errW.Close()
		return shimResult{}, fmt.Errorf("sandbox: start: %w", err)
	}
	errW.Close()
	// EOF without a message once python is exec'd (the pipe is
	// close-on-exec in the shim).
	msg, _ := io.ReadAll(io.LimitReader(errR, 4096))
	werr := cmd.Wait()
	// Whatever of the group outlived python (unsandboxed: a background
	// child) goes now.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	ps := cmd.ProcessState
	if ps == nil {
		return shimResult{}, fmt.Errorf("sandbox: wait: %w", werr)
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	if len(msg) > 0 {
		return shimResult{}, fmt.Errorf("sandbox: setup: %s", msg)
	}
	res := shimResult{}
	switch {
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
			res.cpuLimited = cpu >= time.Duration(cfg.Limits[0].Soft)*time.Second
		}
	default:
		res.ExitCode = ws.ExitStatus()
	}
	return res, nil
}

// runShim is the shim's whole life: set up, then exec python; on failure
// report on fd 3 and exit.
func runShim(encoded string) {
	// Thread-scoped state (no_new_privs, the parent-death signal) must be
	// set on the thread that execs.
	runtime.LockOSThread()
	syscall.CloseOnExec(3)
	err := shim(encoded)
	_, _ = syscall.Write(3, []byte(err.Error()))
	os.Exit(shimFailed)
}

func shim(encoded string) error {
	js, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var cfg shimConfig
	if err := json.Unmarshal(js, &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if cfg.Isolate {
		if err := buildRoot(cfg); err != nil {
			return err
		}
		if cfg.UserNS {
			if err := dropCapabilities(); err != nil {
				return err
			}
		}
	} else if err := os.Chdir(cfg.Dir); err != nil {
		return fmt.Errorf("chdir: %w", err)
	}
	if cfg.UID >= 0 {
		// Groups first: once the uid is dropped, they cannot be.
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(cfg.GID); err != nil {
			return fmt.Errorf("setgid: %w", err)
		}
		if err := syscall.Setuid(cfg.UID); err != nil {
			return fmt.Errorf("setuid: %w", err)
		}
		if syscall.Getuid() != cfg.UID || syscall.Geteuid() != cfg.UID {
			return errors.New("setuid did not take")
		}
	}
	// No setuid binary can give privileges back.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Changing credentials cleared the parent-death signal; the code must
	// not outlive the gateway.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("pdeathsig: %w", err)
	}
	// Everything exec needs is allocated now: once the address-space limit
	// is set it can be far below what this Go process has already
	// reserved, and a runtime that must map more memory then dies. From
	// the limits to the exec nothing allocates.
	path, err := syscall.BytePtrFromString(cfg.Python)
	if err != nil {
		return fmt.Errorf("exec python: %w", err)
	}
	argv, err := syscall.SlicePtrFromStrings(append(append([]string{cfg.Python}, cfg.Args...), "-")) // the program is stdin
	if err != nil {
		return fmt.Errorf("exec python: %w", err)
	}
	envv, err := syscall.SlicePtrFromStrings(cfg.Env)
	if err != nil {
		return fmt.Errorf("exec python: %w", err)
	}
	limits := make([]syscall.Rlimit, len(cfg.Limits))
	for i, l := range cfg.Limits {
		limits[i] = syscall.Rlimit{Cur: l.Soft, Max: l.Hard}
	}
	// The filter after everything the shim does that it denies.
	if seccompSupported() {
		if err := installSeccomp(); err != nil {
			return err
		}
	}
	for i := range limits {
		// syscall.Setrlimit, not unix: it also stops the runtime from
		// restoring its original RLIMIT_NOFILE at exec.
		if err := syscall.Setrlimit(cfg.Limits[i].Resource, &limits[i]); err != nil {
			rawFail("setrlimit: ", err)
		}
	}
	// execve itself, not syscall.Exec, which converts its arguments (and
	// so allocates) first.
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	rawFail("exec python: ", errno)
	return nil // not reached
}

// dropCapabilities makes sure the code, which runs as the user namespace's
// root, holds no capability at all, not even within its namespaces: root
// gets no capabilities at exec (SECBIT_NOROOT), none is left in the
// bounding set, and the settings are locked so the code cannot undo them.
func dropCapabilities() error {
	// linux/securebits.h: NOROOT (bit 0), NO_SETUID_FIXUP (2), KEEP_CAPS
	// (4), NO_CAP_AMBIENT_RAISE (6), each with its lock at the next bit.
	const (
		secbitNoRoot            = 1 << 0
		secbitNoRootLocked      = 1 << 1
		secbitNoSetuidFixup     = 1 << 2
		secbitNoSetuidFixupLock = 1 << 3
		secbitKeepCapsLocked    = 1 << 5
		secbitNoAmbientRaise    = 1 << 6
		secbitNoAmbientLocked   = 1 << 7
	)
	const bits = secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLock |
		secbitKeepCapsLocked | secbitNoAmbientRaise | secbitNoAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, bits, 0, 0, 0); err != nil {
		return fmt.Errorf("securebits: %w", err)
	}
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// rawFail reports a failure of the shim's last steps on the error pipe and
// exits, without allocating (see shim).
func rawFail(prefix string, err error) {
	msg := "unknown error"
	if e, ok := err.(syscall.Errno); ok {
		msg = e.Error() // a constant from the errno table
	}
	_, _ = syscall.Write(3, unsafe.Slice(unsafe.StringData(prefix), len(prefix)))
	_, _ = syscall.Write(3, unsafe.Slice(unsafe.StringData(msg), len(msg)))
	os.Exit(shimFailed)
}

// roFlags remount a bind mount read-only, without setuid or devices.
const roFlags = unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV

// buildRoot makes the run's root filesystem on a tmpfs at cfg.Dir and
// pivots into it (see the package doc). Every step must succeed: a
// half-built sandbox is refused, never used.
func buildRoot(cfg shimConfig) error {
	root := cfg.Dir
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mount root: %w", err)
	}
	uid, gid := cfg.UID, cfg.GID
	if uid < 0 {
		uid, gid = os.Getuid(), os.Getgid()
	}
	for _, step := range []func() error{
		func() error { return bindSystemDirs(root, cfg.Binds) },
		func() error { return makeEtc(root, uid, gid) },
		func() error { return makeDev(root) },
		func() error { return mountProc(root) },
		func() error { return mountScratch(root, uid, gid, cfg.DiskBytes) },
		func() error { return pivotInto(root) },
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// bindRO binds the host directory src read-only at the same path under root.
func bindRO(root, src string) error {
	dst := filepath.Join(root, src)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	if err := unix.Mount("", dst, "", roFlags, ""); err != nil {
		return fmt.Errorf("bind %s read-only: %w", src, err)
	}
	return nil
}

// bindSystemDirs binds the host's system directories and the configured
// binds read-only, recreating merged-/usr links as links.
func bindSystemDirs(root string, binds []string) error {
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			// Merged /usr: /bin -> usr/bin and the like, recreated as links.
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(root, d)); err != nil {
				return err
			}
		case fi.IsDir():
			if err := bindRO(root, d); err != nil {
				return err
			}
		}
	}
	for _, d := range binds {
		if err := bindRO(root, d); err != nil {
			return err
		}
	}
	return nil
}

// makeEtc writes /etc: only what python and the loader need, none of the
// host's configuration.
func makeEtc(root string, uid, gid int) error {
	etc := filepath.Join(root, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	for name, content := range map[string]string{
		"passwd": fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandbox:/mnt/data:/usr/sbin/nologin\n", uid, gid),
		"group":  fmt.Sprintf("root:x:0:\nsandbox:x:%d:\n", gid),
		"hosts":  "127.0.0.1 localhost\n::1 localhost\n",
	} {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		dst := filepath.Join(etc, "ld.so.cache")
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
		if err := unix.Mount("/etc/ld.so.cache", dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind ld.so.cache: %w", err)
		}
		if err := unix.Mount("", dst, "", roFlags, ""); err != nil {
			return fmt.Errorf("bind ld.so.cache read-only: %w", err)
		}
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		_ = os.Symlink(target, filepath.Join(etc, "localtime")) // a clock nicety only
	}
	return nil
}

// makeDev makes /dev: the harmless character devices, nothing else.
func makeDev(root string) error {
	dev := filepath.Join(root, "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom"} {
		dst := filepath.Join(dev, d)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
		if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("remount /dev/%s: %w", d, err)
		}
	}
	for name, target := range map[string]string{"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// mountProc mounts /proc of the new PID namespace: the sandbox's processes
// only.
func mountProc(root string) error {
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount proc: %w", err)
	}
	return nil
}

// mountScratch mounts the only writable places, /tmp and /mnt/data,
// size-limited and gone with the namespace.
func mountScratch(root string, uid, gid int, diskBytes int64) error {
	size := fmt.Sprintf("size=%d", diskBytes)
	if err := os.Mkdir(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,"+size); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	data := filepath.Join(root, "mnt", "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", data, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("mode=0700,uid=%d,gid=%d,%s", uid, gid, size)); err != nil {
		return fmt.Errorf("mount /mnt/data: %w", err)
	}
	return nil
}

// pivotInto makes root the root, the host's detached and unreachable from
// here on, read-only.
func pivotInto(root string) error {
	old := filepath.Join(root, ".oldroot")
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host root: %w", err)
	}
	if err := os.Remove("/.oldroot"); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", roFlags, ""); err != nil {
		return fmt.Errorf("root read-only: %w", err)
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := os.Chdir("/mnt/data"); err != nil {
		return err
	}
	return nil
}
