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
	"sync"
	"syscall"
	"time"
)

const childEnv = "JETSAGA_EMBEDDED_NATS_CHILD"

// ChildBinEnv names the environment variable that, when set, gives the
// path of the program StartProcess runs as the server child instead of the
// current binary: one whose main calls RunChildIfRequested first thing.
// A test binary built with the race detector runs its children under it
// too; a child program built without it spares the server's own code that
// cost (jetsaga's make test builds one and sets this).
const ChildBinEnv = "JETSAGA_EMBEDDED_NATS_BIN"

// childAddrInUse is a child's exit status when a port it was given is
// taken (ErrAddrInUse).
const childAddrInUse = 3

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
		if errors.Is(err, ErrAddrInUse) {
			os.Exit(childAddrInUse)
		}
		os.Exit(2)
	}
	fmt.Printf("READY %s %s\n", s.ClientURL(), s.ID())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	s.Shutdown()
	os.Exit(0)
}

// Process is an embedded server running in a child process, so that a
// test can kill it abruptly (SIGKILL) and start it again on the same port
// and store directory.
//
// Its methods may be called from several goroutines.
type Process struct {
	mu      sync.Mutex // guards the fields below but tempDir
	opts    Options
	cmd     *exec.Cmd
	url     string
	id      string
	tempDir bool
}

// StartProcess re-executes the current binary (or the program ChildBinEnv
// names) as a server child process (see RunChildIfRequested) and waits until it accepts connections.
func StartProcess(opts Options) (*Process, error) {
	p := &Process{opts: opts}
	if p.opts.StoreDir == "" {
		dir, err := os.MkdirTemp("", "jetsaga-nats-*")
		if err != nil {
			return nil, fmt.Errorf("embedded: store dir: %w", err)
		}
		p.opts.StoreDir, p.tempDir = dir, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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
	bin := os.Args[0]
	if b := os.Getenv(ChildBinEnv); b != "" {
		bin = b
	}
	cmd := exec.Command(bin, "-test.run=^$")
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
	gone := make(chan struct{}) // the child closed its stdout: it exited
	go func() {
		defer close(gone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- rest
			}
		}
	}()
	timeout := p.opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case rest := <-ready:
		url, id, _ := strings.Cut(rest, " ")
		p.url, p.id, p.cmd = url, id, cmd
	case <-gone:
		err := cmd.Wait()
		if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == childAddrInUse {
			return fmt.Errorf("%w: child exited: %v", ErrAddrInUse, err)
		}
		return fmt.Errorf("%w: child exited before it was ready: %v", ErrNotReady, err)
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
func (p *Process) ClientURL() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.url
}

// ID returns the server's ID, new at each start.
func (p *Process) ID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

// Running reports whether the process runs (it was not killed or stopped).
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Kill sends SIGKILL to the server process and waits for it to die.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.kill()
}

func (p *Process) kill() error {
	if p.cmd == nil {
		return errors.New("embedded: process not running")
	}
	err := p.cmd.Process.Kill()
	p.cmd.Wait()
	p.cmd = nil
	return err
}

// Restart starts the server process again after Kill or Stop, on the
// same ports. Should another process have taken one of them meanwhile, it
// tries again until ReadyTimeout (default 30s).
func (p *Process) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return errors.New("embedded: process still running")
	}
	within := p.opts.ReadyTimeout
	if within == 0 {
		within = 30 * time.Second
	}
	return retryBind(within, p.start)
}

// Stop asks the server process to shut down gracefully and waits for it.
func (p *Process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stop(0)
}

// stop sends SIGTERM and waits for the process to exit; after within (if
// not 0) it kills it.
func (p *Process) stop(within time.Duration) error {
	if p.cmd == nil {
		return nil
	}
	proc := p.cmd.Process
	proc.Signal(syscall.SIGTERM)
	if within > 0 {
		t := time.AfterFunc(within, func() { proc.Kill() })
		defer t.Stop()
	}
	err := p.cmd.Wait()
	p.cmd = nil
	return err
}

// Close stops the process if it runs and removes a temporary store directory.
func (p *Process) Close() error {
	return p.closeWithin(0)
}

// closeWithin is Close, killing the process if it has not stopped after
// within (0: wait as long as it takes).
func (p *Process) closeWithin(within time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.stop(within)
	p.cleanup()
	return err
}

func (p *Process) cleanup() {
	if p.tempDir {
		os.RemoveAll(p.opts.StoreDir)
	}
}
