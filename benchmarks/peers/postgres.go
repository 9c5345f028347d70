package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL from the distribution's packages, run by the bench: initdb
// into a temporary directory, postgres on a free loopback port, stopped at
// the end. postgres refuses to run as root, so as root the server runs as
// the postgres user the Debian package creates.

var errMissing = errors.New("PostgreSQL is not installed: install it first, e.g. sudo apt-get install -y postgresql (the peers River and DBOS need it), or leave them out with -only")

type postgres struct {
	adminURL string // a superuser's URL of database postgres
	dir      string
	cmd      *exec.Cmd
	settings []string
	dbs      atomic.Int64
}

// postgresBin finds the directory of initdb and postgres: on $PATH, else
// Debian's /usr/lib/postgresql/VERSION/bin, the newest.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errMissing
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// ensurePostgres returns the server, starting it on first use.
func (e *env) ensurePostgres(ctx context.Context) (*postgres, error) {
	if e.pg != nil {
		return e.pg, nil
	}
	bin, err := postgresBin()
	if errors.Is(err, errMissing) && os.Geteuid() == 0 {
		if _, aerr := exec.LookPath("apt-get"); aerr == nil {
			logf("installing postgresql with apt-get (once per machine)")
			for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "--no-install-recommends", "postgresql"}} {
				cmd := exec.CommandContext(ctx, "apt-get", args...)
				cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
				if out, err := cmd.CombinedOutput(); err != nil {
					return nil, fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, out)
				}
			}
			bin, err = postgresBin()
		}
	}
	if err != nil {
		return nil, err
	}
	pg, err := startPostgres(ctx, bin, e.cfg.pgSync)
	if err != nil {
		return nil, err
	}
	e.pg = pg
	return pg, nil
}

func startPostgres(ctx context.Context, bin string, sync bool) (*postgres, error) {
	dir, err := os.MkdirTemp("", "jetsaga-peers-pg-*")
	if err != nil {
		return nil, err
	}
	pg := &postgres{dir: dir}
	// As root, run as the postgres user (the package creates it).
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, PostgreSQL needs a user to run as, and there is no user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	data := filepath.Join(dir, "data")
	initdb := append(append([]string{}, asUser...), filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	if out, err := exec.CommandContext(ctx, initdb[0], initdb[1:]...).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	commit := "off"
	if sync {
		commit = "on"
	}
	pg.settings = []string{"listen_addresses=127.0.0.1", "port=" + strconv.Itoa(port), "unix_socket_directories=" + dir,
		"max_connections=300", "synchronous_commit=" + commit, "shared_buffers=128MB"}
	args := append(append([]string{}, asUser...), filepath.Join(bin, "postgres"), "-D", data)
	for _, s := range pg.settings {
		args = append(args, "-c", s)
	}
	pg.cmd = exec.Command(args[0], args[1:]...)
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err == nil {
		pg.cmd.Stdout, pg.cmd.Stderr = logFile, logFile
		os.Chmod(logFile.Name(), 0o666)
	}
	if err := pg.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	pg.adminURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, pg.adminURL)
		if err == nil {
			conn.Close(ctx)
			break
		}
		if time.Now().After(deadline) {
			pg.stop()
			b, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres did not accept connections in 30s: %w\n%s", err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	logf("PostgreSQL started in %s, port %d", dir, port)
	return pg, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// newDatabase creates a fresh database and returns its URL.
func (pg *postgres) newDatabase(ctx context.Context, prefix string) (string, error) {
	conn, err := pgx.Connect(ctx, pg.adminURL)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), pg.dbs.Add(1))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return strings.Replace(pg.adminURL, "/postgres?", "/"+name+"?", 1), nil
}

// postmaster is the server's main process, from its pid file.
func (pg *postgres) postmaster() int {
	b, err := os.ReadFile(filepath.Join(pg.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// processes are the postmaster and its children (backends and helpers).
func (pg *postgres) processes() []int {
	pm := pg.postmaster()
	if pm == 0 {
		return nil
	}
	return append([]int{pm}, children(pm)...)
}

func (pg *postgres) describe() string {
	return "initdb in a temporary directory, " + strings.Join(pg.settings[3:], ", ") + " (fsync on; other settings the defaults)"
}

func (pg *postgres) stop() {
	if pg.cmd == nil {
		return
	}
	if pm := pg.postmaster(); pm > 0 {
		if p, err := os.FindProcess(pm); err == nil {
			p.Signal(os.Interrupt) // fast shutdown
		}
	}
	done := make(chan struct{})
	go func() { pg.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		pg.cmd.Process.Kill()
	}
	os.RemoveAll(pg.dir)
}

func readFile(name string) (string, error) {
	b, err := os.ReadFile(name)
	return string(b), err
}
