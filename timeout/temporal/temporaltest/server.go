package temporaltest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
)

// Options shape a dev server.
type Options struct {
	// Namespace is the namespace the server creates besides "default".
	// Default: "default" only.
	Namespace string
	// DBFile keeps the server's state in a SQLite file, so that it
	// survives Kill and Restart. Default: in memory, lost when the
	// server stops.
	DBFile string
	// SQLitePragmas are the server's SQLite pragmas ("journal_mode=wal"),
	// with DBFile.
	SQLitePragmas []string
	// SearchAttributes registers custom search attributes, name to type
	// ("Keyword", "Text", "Int", ...).
	SearchAttributes map[string]string
	// Port is the frontend's gRPC port. Default: a free port.
	Port int
	// LogLevel is the server's log level. Default: "error".
	LogLevel string
}

// Server is a temporal dev server in a child process.
type Server struct {
	exe  string
	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	logs *syncBuffer
}

// Start starts a dev server and returns once it serves its namespace.
func Start(ctx context.Context, opts Options, logf func(format string, args ...any)) (*Server, error) {
	exe, err := CLI(ctx, logf)
	if err != nil {
		return nil, err
	}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "error"
	}
	s := &Server{exe: exe, opts: opts}
	fixed := opts.Port != 0
	for attempt := 0; ; attempt++ {
		if !fixed {
			if s.opts.Port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = s.start(ctx)
		if err == nil || fixed || attempt == 3 || ctx.Err() != nil {
			return s, err
		}
		// The free port was taken before the server bound it: retry.
	}
}

// New starts a dev server for t and stops it when t ends. It fails t if
// the server does not start.
func New(t testing.TB, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute) // a cold CLI build included
	defer cancel()
	s, err := Start(ctx, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("temporaltest: stopping the dev server: %v", err)
		}
	})
	return s
}

// HostPort is the server's frontend address.
func (s *Server) HostPort() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.opts.Port)) }

// Namespace is the server's namespace (Options.Namespace).
func (s *Server) Namespace() string { return s.opts.Namespace }

// ClientOptions returns the options of a client of the server, logging
// warnings and errors only.
func (s *Server) ClientOptions() client.Options {
	return client.Options{
		HostPort: s.HostPort(), Namespace: s.opts.Namespace,
		Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
	}
}

// Client returns a client of the server that t closes when it ends.
func (s *Server) Client(t testing.TB) client.Client {
	t.Helper()
	c, err := client.DialContext(t.Context(), s.ClientOptions())
	if err != nil {
		t.Fatalf("temporaltest: dialing %s: %v", s.HostPort(), err)
	}
	t.Cleanup(c.Close)
	return c
}

func (s *Server) start(ctx context.Context) error {
	args := []string{"server", "start-dev", "--headless",
		"--ip", "127.0.0.1", "--port", strconv.Itoa(s.opts.Port),
		"--log-level", s.opts.LogLevel,
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false",
	}
	if s.opts.Namespace != "default" {
		args = append(args, "--namespace", s.opts.Namespace)
	}
	if s.opts.DBFile != "" {
		args = append(args, "--db-filename", s.opts.DBFile)
		for _, p := range s.opts.SQLitePragmas {
			args = append(args, "--sqlite-pragma", p)
		}
	}
	for name, typ := range s.opts.SearchAttributes {
		args = append(args, "--search-attribute", name+"="+typ)
	}
	logs := &syncBuffer{}
	cmd := exec.Command(s.exe, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	setProcessGroup(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("temporaltest: starting %s: %w", s.exe, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.logs = cmd, done, logs
	s.mu.Unlock()
	if err := s.awaitReady(ctx, done); err != nil {
		s.Kill()
		return fmt.Errorf("temporaltest: dev server on port %d: %w\n%s", s.opts.Port, err, tail(logs.String(), 30))
	}
	return nil
}

// awaitReady waits until the server serves its namespace.
func (s *Server) awaitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	opts := s.ClientOptions()
	opts.Logger = log.NewStructuredLogger(slog.New(slog.DiscardHandler))
	var last error
	for {
		select {
		case <-done:
			return errors.New("exited")
		default:
		}
		if c, err := client.DialContext(ctx, opts); err == nil {
			_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: s.opts.Namespace})
			c.Close()
			if err == nil {
				return nil
			}
			last = err
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", ctx.Err(), last)
		case <-done:
			return errors.New("exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the server gracefully (SIGINT), waiting for it to exit.
func (s *Server) Stop() error { return s.signal(os.Interrupt) }

// Kill kills the server (SIGKILL) and waits for it to exit: with a DBFile
// it loses nothing committed.
func (s *Server) Kill() error { return s.signal(os.Kill) }

func (s *Server) signal(sig os.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	if err := signalGroup(cmd, sig); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		signalGroup(cmd, os.Kill)
		<-done
	}
	return nil
}

// Restart starts the server again, on the same port and DBFile, after
// Stop or Kill.
func (s *Server) Restart(ctx context.Context) error {
	return s.start(ctx)
}

// Logs returns what the server printed since it last started.
func (s *Server) Logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.logs == nil {
		return ""
	}
	return s.logs.String()
}

// TempDB returns the path of a database file in a temporary directory of
// t, for Options.DBFile.
func TempDB(t testing.TB) string { return filepath.Join(t.TempDir(), "temporal.db") }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 1<<20 { // keep the last MiB or so
		rest := append([]byte(nil), b.b.Bytes()[b.b.Len()/2:]...)
		b.b.Reset()
		b.b.Write(rest)
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
