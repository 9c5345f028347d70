package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Workload (d): a child process (this binary with -child pending) opens
// the peer's timers, says "ready", schedules N timers an hour away when
// told "go", says "scheduled SECONDS", and exits when its stdin closes.
// The parent reads the resident memory of the child and of the peer's
// servers before and after.

type pendingResult struct {
	N          int
	Idle, Full memory // the child and the servers, before and with N pending
	Server     memory // the servers' part of Full
	Seconds    float64
}

func runPending(ctx context.Context, cfg config, e *env, p peer) (pendingResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return pendingResult{}, err
	}
	args := append(append([]string{}, p.pending...), "-pending", strconv.Itoa(cfg.pending), "-conc", strconv.Itoa(cfg.conc))
	if e.pg != nil {
		args = append(args, "-pg-url", e.pg.adminURL)
	}
	var servers func() []int = p.servers
	if p.pendingSetup != nil {
		extra, srv, stop, err := p.pendingSetup(ctx)
		if err != nil {
			return pendingResult{}, err
		}
		defer stop()
		args = append(args, extra...)
		servers = srv
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return pendingResult{}, err
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		return pendingResult{}, err
	}
	if err := cmd.Start(); err != nil {
		return pendingResult{}, err
	}
	defer func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	out := bufio.NewReader(outPipe)
	line := func() (string, error) {
		s, err := out.ReadString('\n')
		return strings.TrimSpace(s), err
	}
	if s, err := line(); err != nil || s != "ready" {
		return pendingResult{}, fmt.Errorf("child: %q %v", s, err)
	}
	settle := func() {
		waitCtx(ctx, 2*time.Second)
	}
	settle()
	all := func() []int {
		pids := []int{cmd.Process.Pid}
		if servers != nil {
			pids = append(pids, servers()...)
		}
		return pids
	}
	res := pendingResult{N: cfg.pending, Idle: memOf(all())}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		return res, err
	}
	s, err := line()
	if err != nil {
		return res, fmt.Errorf("child: %w", err)
	}
	secs, ok := strings.CutPrefix(s, "scheduled ")
	if !ok {
		return res, fmt.Errorf("child: %q", s)
	}
	res.Seconds, _ = strconv.ParseFloat(secs, 64)
	settle()
	res.Full = memOf(all())
	if servers != nil {
		res.Server = memOf(servers())
	}
	return res, nil
}

// runChild is the child's side of runPending.
func runChild(ctx context.Context, cfg config) error {
	if cfg.child != "pending" && cfg.child != "recurring" {
		return fmt.Errorf("-child %q: unknown", cfg.child)
	}
	e := newEnv(cfg)
	if cfg.pgURL != "" {
		e.pg = &postgres{adminURL: cfg.pgURL}
	}
	defer e.close()
	if cfg.child == "recurring" {
		defer func() { e.pg = nil }() // the parent's server: not the child's to stop
		return runRecurringSide(ctx, cfg, e)
	}
	p, err := peerFor(ctx, e, cfg.childPeer)
	if err != nil {
		return err
	}
	t, err := p.open(ctx, func(int) {})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	if s, err := in.ReadString('\n'); err != nil || strings.TrimSpace(s) != "go" {
		return fmt.Errorf("child: %q %v", s, err)
	}
	due := time.Now().Add(time.Hour)
	start := time.Now()
	if b, ok := t.(bulkTimers); ok {
		const batch = 1000
		for i := 0; i < cfg.pending; i += batch {
			ids := make([]int, 0, batch)
			for j := i; j < min(i+batch, cfg.pending); j++ {
				ids = append(ids, j)
			}
			if err := b.scheduleMany(ctx, ids, due); err != nil {
				return err
			}
		}
	} else if err := parallel(ctx, cfg.conc, cfg.pending, func(i int) error {
		_, err := t.schedule(ctx, i, due)
		return err
	}); err != nil {
		return err
	}
	fmt.Printf("scheduled %.3f\n", time.Since(start).Seconds())
	// Wait for the parent to close stdin, then leave without cleaning up:
	// the servers and databases are the parent's, and go with it.
	if _, err := io.Copy(io.Discard, in); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	os.Exit(0)
	return nil
}
