// Package pgtest runs a private PostgreSQL server for a test binary: the
// distribution's server binaries (Debian's package postgresql), a cluster
// made with initdb in a temporary directory, postgres listening on a free
// loopback port and on a unix socket in that directory, stopped and
// removed when the tests end. As root it runs the server as the user
// postgres, which the package creates (postgres refuses to run as root).
//
// A test package starts one server for all its tests in TestMain:
//
//	var pg *pgtest.Server
//
//	func TestMain(m *testing.M) { pgtest.Main(m, &pg) }
//
// and each test takes a database of its own with pg.NewDatabase(t).
// When PostgreSQL is not installed, Main fails the test binary with a
// message that says what to install: a skip would leave CI green with
// none of the tests run.
//
// The package needs no PostgreSQL driver (it runs the server's own
// tools), so the root module does not depend on one.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// EnvURL names the environment variable that points the tests at a
// running server instead (a superuser's URL, e.g.
// postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable): Main then
// starts none. A child test process started by a test gets it from its
// parent.
const EnvURL = "JETSAGA_PGTEST_URL"

// EnvBin names the environment variable that gives the directory of
// PostgreSQL's programs (initdb, postgres, pg_isready, createdb), for an
// installation the search (see Start) does not find.
const EnvBin = "JETSAGA_PGTEST_BIN"

// ErrNotInstalled is returned by Start when no PostgreSQL server binaries
// are found.
var ErrNotInstalled = errors.New("pgtest: PostgreSQL is not installed: install it, e.g. apt-get install -y postgresql (Debian, Ubuntu), or point " + EnvURL + " at a server")

// ReadyTimeout bounds the wait for a started server to accept
// connections.
const ReadyTimeout = time.Minute

// Server is a PostgreSQL server for tests.
type Server struct {
	adminURL string // a superuser's URL of database postgres
	bin      string // initdb, postgres, createdb, pg_isready
	dir      string // the cluster's temporary directory; "" if not ours
	cmd      *exec.Cmd
	exited   chan struct{} // closed when cmd has exited
	dbs      atomic.Int64
}

// Main starts a server, stores it in *srv, runs the tests, stops the
// server and exits with the tests' code. A server that does not start
// fails the binary, saying why (and what to install when PostgreSQL is
// missing).
func Main(m *testing.M, srv **Server) {
	s, err := Start(context.Background())
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: these tests need a PostgreSQL server: %v\n", err)
		os.Exit(1)
	}
	*srv = s
	code := m.Run()
	s.Stop()
	os.Exit(code)
}

// Start returns the server EnvURL names, or starts one of its own from the
// programs in EnvBin's directory, initdb's on $PATH, or Debian's
// /usr/lib/postgresql/VERSION/bin (the newest); ErrNotInstalled if there
// are none.
func Start(ctx context.Context) (*Server, error) {
	bin, binErr := findBin()
	if u := os.Getenv(EnvURL); u != "" {
		return &Server{adminURL: u, bin: bin}, nil
	}
	if binErr != nil {
		return nil, binErr
	}
	return start(ctx, bin)
}

// findBin finds the directory of the server's programs (initdb,
// postgres, pg_isready, createdb): initdb's on $PATH (after symbolic
// links: the others may not be linked beside it), else Debian's
// /usr/lib/postgresql/VERSION/bin, the newest.
func findBin() (string, error) {
	if dir := os.Getenv(EnvBin); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			return "", fmt.Errorf("%w (%s=%s: %w)", ErrNotInstalled, EnvBin, dir, err)
		}
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil {
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_isready")); err == nil {
				return filepath.Dir(p), nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(dir string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return major(b) - major(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", ErrNotInstalled
}

// dirPattern names the clusters' temporary directories.
const dirPattern = "jetsaga-pgtest-*"

func start(ctx context.Context, bin string) (_ *Server, err error) {
	removeStale()
	dir, err := os.MkdirTemp("", dirPattern)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{bin: bin, dir: dir}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	// As root, initdb and postgres run as the user postgres; postgres is
	// this process's own child, and dies with it (Pdeathsig: a test
	// binary killed by go test's -timeout leaves no server behind).
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGQUIT} // SIGQUIT: immediate shutdown
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgtest: running as root, the server needs a user to run as, and there is no user postgres (the postgresql package creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr, initdb.Dir = attr, dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	// fsync off: a test cluster is thrown away, and the machine is shared.
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dir, "-c", "fsync=off", "-c", "max_connections=200")
	s.cmd.SysProcAttr, s.cmd.Dir = attr, dir
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer logFile.Close()
	_ = os.Chmod(logFile.Name(), 0o666)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: postgres: %w", err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	s.adminURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := s.awaitReady(ctx); err != nil {
		b, _ := os.ReadFile(logFile.Name())
		return nil, fmt.Errorf("%w\n%s", err, b)
	}
	return s, nil
}

// awaitReady asks pg_isready until the server accepts connections.
func (s *Server) awaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if exec.CommandContext(ctx, filepath.Join(s.bin, "pg_isready"), "-q", "-d", s.adminURL).Run() == nil {
			return nil
		}
		select {
		case <-s.exited:
			return errors.New("pgtest: postgres exited before accepting connections")
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres did not accept connections within %v", ReadyTimeout)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// URL is a superuser's URL of the server's database postgres.
func (s *Server) URL() string { return s.adminURL }

// NewDatabase creates an empty database for one test and returns its URL
// (a superuser's). It is not dropped: the server goes away with the test
// binary.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	u, err := s.CreateDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// CreateDatabase creates an empty database and returns its URL.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	name := fmt.Sprintf("test_%d_%d", os.Getpid(), s.dbs.Add(1))
	createdb := "createdb"
	if s.bin != "" {
		createdb = filepath.Join(s.bin, "createdb")
	}
	if out, err := exec.CommandContext(ctx, createdb, "--maintenance-db="+s.adminURL, name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtest: createdb %s: %w\n%s", name, err, out)
	}
	u, err := url.Parse(s.adminURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: %s: %w", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// Stop stops a server that Start started (fast shutdown) and removes its
// directory; a server EnvURL named is left alone.
func (s *Server) Stop() {
	if s.dir == "" {
		return
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(os.Interrupt) // fast shutdown: ends sessions, then exits
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	_ = os.RemoveAll(s.dir)
	s.dir = ""
}

// removeStale removes the directories of clusters whose test binary was
// killed (its server died with it, the directory stayed): those with no
// live postmaster, untouched for ten minutes (a younger one may be
// another binary's, still in initdb).
func removeStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPattern))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid")); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			if pid, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pid > 0 && syscall.Kill(pid, 0) != syscall.ESRCH {
				continue // running
			}
		}
		_ = os.RemoveAll(dir)
	}
}
