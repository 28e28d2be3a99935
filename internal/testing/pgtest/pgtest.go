// Package pgtest runs a real PostgreSQL server for tests: one throwaway
// cluster per test binary (initdb and postgres from Debian's postgresql
// package, installed with apt-get when missing and the tests run as root),
// listening only on a unix socket in its own temporary directory, and a
// fresh database for each test, dropped when the test ends.
//
// The cluster starts on the first call of DSN or Pool in the test binary.
// A package's TestMain should end with it:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// which runs the tests, then shuts the server down (fast shutdown) and
// removes its directory. Without that TestMain, the server still stops when
// the test binary exits (the kernel sends it SIGKILL as its parent dies, and
// its backends follow the postmaster), but its temporary directory
// (sy-pgtest-* in os.TempDir) stays behind.
//
// Without PostgreSQL a test is skipped, saying why, except in CI (CI set),
// where it fails: CI must never pass by checking less.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/switchyard-ai/switchyard/internal/testing/testserver"
)

// Port is the port number in the socket's name (.s.PGSQL.<Port>); nothing
// listens on TCP.
const Port = 5432

// User is the cluster's superuser; every connection authenticates as it
// (trust authentication over the private socket).
const User = "postgres"

type cluster struct {
	dir  string // owns data/ and the socket
	bin  string // the directory of initdb and postgres
	cred *syscall.Credential
	cmd  *exec.Cmd
	done chan struct{} // closed when the postmaster has exited
	log  *testserver.Buffer
}

var (
	mu       sync.Mutex
	started  *cluster
	startErr error
	dbSeq    atomic.Int64
)

// DSN creates a fresh, empty database for t, dropped (with any connections
// still open to it) when t ends, and returns its key=value connection
// string, which pgx, pgxpool and database/sql with pgx's stdlib accept.
func DSN(t testing.TB) string {
	t.Helper()
	c := get(t)
	name := dbName(t.Name())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// FORCE ends the sessions a test left open, so that a leaked pool
		// cannot keep its database alive.
		if err := c.admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return c.dsn(name)
}

// Pool returns a pgx pool on a fresh database for t (see DSN), closed when
// t ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Main runs the package's tests, then stops the server if they started one,
// and exits with the tests' status. Call it from TestMain.
func Main(m *testing.M) { testserver.Main(m, map[string]func() error{"pgtest": Stop}) }

// Stop shuts the server down, if one was started, and removes its
// directory. A later DSN starts a new one.
func Stop() error {
	mu.Lock()
	defer mu.Unlock()
	c := started
	started, startErr = nil, nil
	if c == nil {
		return nil
	}
	// SIGINT is PostgreSQL's fast shutdown: roll back open transactions,
	// disconnect the clients, checkpoint, exit.
	return testserver.Stop("postgres", c.cmd.Process, c.done, syscall.SIGINT, 30*time.Second, c.log, c.dir)
}

// Restart stops the server the way an operator's restart does (fast
// shutdown: open transactions roll back, every client is disconnected) and
// starts it again on the same data directory and socket, returning once it
// accepts connections. Databases and their contents survive; clients must
// reconnect. It fails t when no server was started.
func Restart(t testing.TB) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	c := started
	if c == nil {
		t.Fatal("pgtest: Restart before any DSN or Pool started the server")
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	if err := c.launch(); err != nil {
		started, startErr = nil, err
		t.Fatalf("pgtest: restart: %v", err)
	}
}

// get returns the running cluster, starting it on first use; it skips or
// fails t when PostgreSQL cannot be had.
func get(t testing.TB) *cluster {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if started == nil && startErr == nil {
		started, startErr = start()
	}
	if startErr != nil {
		testserver.Unavailable(t, "PostgreSQL", "this test does not run against a real server", startErr)
	}
	return started
}

func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", c.dir, Port, User, db)
}

func (c *cluster) admin(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, c.dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// dbName makes a database name (at most 63 bytes, PostgreSQL's identifier
// limit) from a test name, unique within the binary.
func dbName(test string) string {
	s := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(test, "_"))
	suffix := "_" + strconv.FormatInt(dbSeq.Add(1), 10)
	if len(s) > 40 {
		s = s[:40]
	}
	return "t_" + s + suffix
}

func start() (*cluster, error) {
	bin, err := findOrInstall()
	if err != nil {
		return nil, err
	}
	// A short path: the socket's path must fit in about 100 bytes.
	dir, err := os.MkdirTemp(baseDir(), "sy-pgtest-")
	if err != nil {
		return nil, err
	}
	cred, err := credential(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", User, "--auth=trust",
		"--no-sync", "--encoding=UTF8", "--locale=C")
	initdb.Stdout, initdb.Stderr = &out, &out
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if err := initdb.Run(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out.String())
	}
	c := &cluster{dir: dir, bin: bin, cred: cred}
	if err := c.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// launch starts the postmaster on the cluster's data directory and waits
// until it accepts connections.
func (c *cluster) launch() error {
	dir, data := c.dir, filepath.Join(c.dir, "data")
	log := &testserver.Buffer{}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", data,
		"-k", dir, "-p", strconv.Itoa(Port),
		"-c", "listen_addresses=",
		// A throwaway cluster: durability buys nothing and costs time.
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = dir
	// Pdeathsig: the server dies with the test binary even when no TestMain
	// stops it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd, c.done, c.log = cmd, make(chan struct{}), log
	go func() { _ = cmd.Wait(); close(c.done) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.admin(ctx, "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited at start:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-c.done
			return fmt.Errorf("postgres did not accept connections in 30s: %v\n%s", err, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// baseDir is where the cluster's directory goes: os.TempDir, unless we are
// root and the server, run as nobody, could not reach it (a TMPDIR under
// /root), then /tmp.
func baseDir() string {
	base := os.TempDir()
	if os.Geteuid() != 0 {
		return base
	}
	for d := base; ; d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o001 == 0 {
			return "/tmp"
		}
		if d == filepath.Dir(d) {
			return base
		}
	}
}

// credential returns the user to run initdb and postgres as, and hands dir
// to it. PostgreSQL refuses to run as root, so root runs them as nobody.
func credential(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil // as ourselves
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root, and no unprivileged user to run postgres as: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user nobody: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// findOrInstall returns the directory holding initdb and postgres: the
// newest /usr/lib/postgresql/<version>/bin (Debian keeps them off PATH), or
// the one of a pg_config in PATH. When there is none and we are root with
// apt-get, it installs Debian's postgresql package first.
func findOrInstall() (string, error) {
	if dir := find(); dir != "" {
		return dir, nil
	}
	apt, err := exec.LookPath("apt-get")
	if err != nil {
		return "", fmt.Errorf("initdb/postgres not found (in /usr/lib/postgresql/*/bin or beside pg_config), and no apt-get to install them with")
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("initdb/postgres not found; install them (apt-get install postgresql) or run the tests as root to have them install it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log bytes.Buffer
	aptRun := func(args ...string) error {
		cmd := exec.CommandContext(ctx, apt, append([]string{"-o", "DPkg::Lock::Timeout=120", "-y", "-q"}, args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = &log, &log
		return cmd.Run()
	}
	// Another test binary may be installing it at the same moment and hold
	// apt's locks: look again, refresh the package lists (a fresh machine
	// may have none) and retry.
	for attempt := range 3 {
		if dir := find(); dir != "" {
			return dir, nil
		}
		if err = aptRun("install", "--no-install-recommends", "postgresql"); err == nil {
			break
		}
		if attempt == 0 {
			if uerr := aptRun("update"); uerr != nil {
				err = fmt.Errorf("apt-get update: %w", uerr)
			}
		} else {
			time.Sleep(2 * time.Second)
		}
	}
	if err != nil {
		return "", fmt.Errorf("apt-get install postgresql: %w\n%s", err, log.String())
	}
	if dir := find(); dir != "" {
		return dir, nil
	}
	return "", fmt.Errorf("apt-get installed postgresql but initdb is not in /usr/lib/postgresql/*/bin\n%s", log.String())
}

func find() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if pc, err := exec.LookPath("pg_config"); err == nil {
		if out, err := exec.Command(pc, "--bindir").Output(); err == nil {
			d := strings.TrimSpace(string(out))
			if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
				return d
			}
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && isExec(filepath.Join(filepath.Dir(p), "postgres")) {
		return filepath.Dir(p)
	}
	return ""
}

func version(bindir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return v
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Server is a throwaway cluster started outside a test binary (cmd/bench's
// storage section): the same cluster the tests run, owned by the caller,
// who stops it. It is independent of the one DSN and Pool share.
type Server struct{ c *cluster }

// Start starts a throwaway cluster as the tests do (installing PostgreSQL
// with apt-get when missing and running as root).
func Start() (*Server, error) {
	c, err := start()
	if err != nil {
		return nil, err
	}
	return &Server{c: c}, nil
}

// CreateDatabase creates an empty database name and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	if err := s.c.admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgtest: create database %s: %w", name, err)
	}
	return s.c.dsn(name), nil
}

// DSN is the connection string of database db (postgres: the one every
// cluster has).
func (s *Server) DSN(db string) string { return s.c.dsn(db) }

// Version is the server's version string (SHOW server_version).
func (s *Server) Version(ctx context.Context) (string, error) {
	conn, err := pgx.Connect(ctx, s.c.dsn("postgres"))
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var v string
	err = conn.QueryRow(ctx, "SHOW server_version").Scan(&v)
	return v, err
}

// Stop shuts the cluster down (fast shutdown) and removes its directory.
func (s *Server) Stop() error {
	return testserver.Stop("postgres", s.c.cmd.Process, s.c.done, syscall.SIGINT, 30*time.Second, s.c.log, s.c.dir)
}
