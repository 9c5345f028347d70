package embedded

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const childEnv = "JETSAGA_EMBEDDED_NATS_CHILD"

// RunChildIfRequested turns the current process into an embedded server
// when StartProcess started it, and never returns in that case. Call it
// first thing in TestMain (or main) of a program that uses StartProcess;
// otherwise it returns at once.
func RunChildIfRequested() {
	cfg, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	var opts Options
	if err := json.Unmarshal([]byte(cfg), &opts); err != nil {
		fmt.Fprintln(os.Stderr, "embedded child:", err)
		os.Exit(2)
	}
	s, err := Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "embedded child:", err)
		os.Exit(2)
	}
	fmt.Printf("READY %s\n", s.ClientURL())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	s.Shutdown()
	os.Exit(0)
}

// Process is an embedded server running in a child process, so that a
// test can kill it abruptly (SIGKILL) and start it again on the same port
// and store directory.
type Process struct {
	opts    Options
	cmd     *exec.Cmd
	url     string
	tempDir bool
}

// StartProcess re-executes the current binary as a server child process
// (see RunChildIfRequested) and waits until it accepts connections.
func StartProcess(opts Options) (*Process, error) {
	p := &Process{opts: opts}
	if p.opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "jetsaga-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded: store dir: %w", err)
		}
		p.opts.StoreDir, p.tempDir = dir, true
	}
	if err := p.start(); err != nil {
		p.cleanup()
		return nil, err
	}
	return p, nil
}

func (p *Process) start() error {
	cfg, err := json.Marshal(p.opts)
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("embedded: start child: %w", err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if url, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- url
			}
		}
	}()
	timeout := p.opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case url := <-ready:
		p.url, p.cmd = url, cmd
	case <-time.After(timeout):
		cmd.Process.Kill()
		cmd.Wait()
		return fmt.Errorf("%w: child did not start within %v", ErrNotReady, timeout)
	}
	if p.opts.Port == 0 {
		var port int
		if _, err := fmt.Sscanf(p.url[strings.LastIndexByte(p.url, ':')+1:], "%d", &port); err == nil {
			p.opts.Port = port
		}
	}
	return nil
}

// ClientURL returns the nats:// URL clients connect to; it stays the same
// across Kill and Restart.
func (p *Process) ClientURL() string { return p.url }

// Kill sends SIGKILL to the server process and waits for it to die.
func (p *Process) Kill() error {
	if p.cmd == nil {
		return errors.New("embedded: process not running")
	}
	err := p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
	return err
}

// Restart starts the server process again after Kill or Stop.
func (p *Process) Restart() error {
	if p.cmd != nil {
		return errors.New("embedded: process still running")
	}
	return p.start()
}

// Stop asks the server process to shut down gracefully and waits for it.
func (p *Process) Stop() error {
	if p.cmd == nil {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	err := p.cmd.Wait()
	p.cmd = nil
	return err
}

// Close stops the process if it runs and removes a temporary store directory.
func (p *Process) Close() error {
	err := p.Stop()
	p.cleanup()
	return err
}

func (p *Process) cleanup() {
	if p.tempDir {
		os.RemoveAll(p.opts.StoreDir)
	}
}
