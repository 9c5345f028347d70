package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Shutdown is how Restart stops a server.
type Shutdown int

const (
	// Fast shutdown (SIGINT): the server ends every session, rolling back
	// open transactions, writes a checkpoint and exits.
	Fast Shutdown = iota + 1
	// Immediate shutdown (SIGQUIT): the server exits at once, as in a
	// crash; the next start recovers from the write-ahead log.
	Immediate
)

func (m Shutdown) String() string {
	switch m {
	case Fast:
		return "fast"
	case Immediate:
		return "immediate"
	}
	return "unknown"
}

// ErrNotRestartable is returned by Restart for a server this package did
// not start (EnvURL named it).
var ErrNotRestartable = errors.New("pgtest: the server was not started by this process")

// Restart stops the server the way mode says, waits for it to exit, and
// starts it again on the same data directory and port, returning once it
// accepts connections. Clients see their connections broken and must
// reconnect. Do not call it concurrently with Stop or itself.
func (s *Server) Restart(ctx context.Context, mode Shutdown) error {
	return s.RestartAfter(ctx, mode, nil)
}

// RestartAfter is Restart that calls whileDown, if not nil, once the
// server has exited and before it starts again: an outage that lasts as
// long as whileDown (which awaits what the test wants to see happen
// during it). Its error stops nothing: the server starts again, and the
// error is returned.
func (s *Server) RestartAfter(ctx context.Context, mode Shutdown, whileDown func() error) (err error) {
	if s.dir == "" || s.cmd == nil {
		return ErrNotRestartable
	}
	sig := os.Interrupt
	switch mode {
	case Fast:
	case Immediate:
		sig = syscall.SIGQUIT
	default:
		return fmt.Errorf("pgtest: restart: unknown shutdown mode %d", mode)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("pgtest: restart: %w", err)
	}
	select {
	case <-s.exited:
	case <-time.After(time.Minute):
		return fmt.Errorf("pgtest: restart: postgres did not exit within a minute of a %v shutdown", mode)
	}
	var downErr error
	if whileDown != nil {
		downErr = whileDown()
	}
	defer func() {
		if err == nil {
			err = downErr
		}
	}()
	old := s.cmd
	cmd := exec.Command(old.Path, old.Args[1:]...)
	cmd.SysProcAttr, cmd.Dir = old.SysProcAttr, old.Dir
	logFile, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return fmt.Errorf("pgtest: restart: %w", err)
	}
	defer logFile.Close()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: restart: postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.awaitReady(ctx); err != nil {
		b, _ := os.ReadFile(logFile.Name())
		return fmt.Errorf("%w\n%s", err, b)
	}
	return nil
}
