package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// parallel runs f(0..n-1) on conc goroutines and returns the first error.
func parallel(ctx context.Context, conc, n int, f func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, conc)
	for g := range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					errs[g] = fmt.Errorf("%d: %w", i, err)
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// recorder collects the handler times of timers.
type recorder struct {
	mu    sync.Mutex
	at    map[int]time.Time
	dups  int
	want  int
	done  chan struct{}
	fired atomic.Int64
}

func newRecorder(want int) *recorder {
	return &recorder{at: make(map[int]time.Time, want), want: want, done: make(chan struct{})}
}

func (r *recorder) fire(id int) {
	now := time.Now()
	r.fired.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.at[id]; ok {
		r.dups++
		return
	}
	r.at[id] = now
	if len(r.at) == r.want {
		close(r.done)
	}
}

// cancelResult is workload (b).
type cancelResult struct {
	Pending  int
	Rate     float64 // timers scheduled per second, far in the future
	Cancel   latency
	FiredBad int64 // cancelled timers that fired anyway (none should: they are an hour away)
}

// runCancel schedules pending timers an hour away, then cancels cancels of
// them one at a time, in random order.
func runCancel(ctx context.Context, cfg config, p peer) (cancelResult, error) {
	r := newRecorder(-1)
	t, err := p.open(ctx, r.fire)
	if err != nil {
		return cancelResult{}, err
	}
	defer t.close()
	res := cancelResult{Pending: cfg.cancelPending}
	refs := make([]any, cfg.cancelPending)
	due := time.Now().Add(time.Hour)
	start := time.Now()
	if err := parallel(ctx, cfg.conc, cfg.cancelPending, func(i int) error {
		var err error
		refs[i], err = t.schedule(ctx, i, due)
		return err
	}); err != nil {
		return res, fmt.Errorf("scheduling: %w", err)
	}
	res.Rate = float64(cfg.cancelPending) / time.Since(start).Seconds()
	var lat []time.Duration
	for _, i := range rand.Perm(cfg.cancelPending)[:min(cfg.cancels, cfg.cancelPending)] {
		s := time.Now()
		if err := t.cancel(ctx, refs[i]); err != nil {
			return res, fmt.Errorf("cancel %d: %w", i, err)
		}
		lat = append(lat, time.Since(s))
	}
	res.Cancel = summarize(lat)
	res.FiredBad = r.fired.Load()
	return res, nil
}

// latenessResult is workload (a).
type latenessResult struct {
	N         int
	Rate      float64 // timers scheduled per second
	Lateness  latency // handler start − due
	Lost      int
	Dups      int
	SchedLate int // timers whose schedule call returned after their due time
}

// runLateness schedules n timers due evenly over the window, starting
// lead after now, and records when each reaches its handler. lead is set
// from the rate the cancel workload measured, so that every timer is
// scheduled before the first is due.
func runLateness(ctx context.Context, cfg config, p peer, estRate float64) (latenessResult, error) {
	n := cfg.timers
	r := newRecorder(n)
	t, err := p.open(ctx, r.fire)
	if err != nil {
		return latenessResult{}, err
	}
	defer t.close()
	lead := time.Second + time.Duration(1.5*float64(n)/max(estRate, 1)*float64(time.Second))
	base := time.Now().Add(lead)
	due := make([]time.Time, n)
	for i := range due {
		due[i] = base.Add(time.Duration(i) * cfg.window / time.Duration(n))
	}
	var schedLate atomic.Int64
	start := time.Now()
	if err := parallel(ctx, cfg.conc, n, func(i int) error {
		_, err := t.schedule(ctx, i, due[i])
		if time.Now().After(due[i]) {
			schedLate.Add(1)
		}
		return err
	}); err != nil {
		return latenessResult{}, fmt.Errorf("scheduling: %w", err)
	}
	res := latenessResult{N: n, Rate: float64(n) / time.Since(start).Seconds(), SchedLate: int(schedLate.Load())}
	select {
	case <-r.done:
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(time.Until(due[n-1]) + cfg.grace):
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var ls []time.Duration
	for id, at := range r.at {
		ls = append(ls, at.Sub(due[id]))
	}
	res.Lateness = summarize(ls)
	res.Lost = n - len(r.at)
	res.Dups = r.dups
	return res, nil
}

// sagaResult is workload (c).
type sagaResult struct {
	Instances int
	StepsPerS float64
	CPUPer    time.Duration // CPU per step: this process and the system's servers
	// ServerCPUPer is the servers' part of CPUPer (PostgreSQL's processes,
	// the Temporal dev server; the embedded nats-server is in this
	// process).
	ServerCPUPer time.Duration
	// Stmts and Trips, of workload (e): the statements a step sent
	// PostgreSQL (BEGIN and COMMIT included), and in how many round trips.
	Stmts, Trips float64
}

// runSaga keeps cfg.sagaWindow instances in flight for cfg.sagaTime, each
// two steps with a timer of cfg.sagaDelay between them, then waits for
// those started to finish.
func runSaga(ctx context.Context, cfg config, p peer) (sagaResult, error) {
	slots := make(chan struct{}, cfg.sagaWindow)
	var completed atomic.Int64
	var doneMu sync.Mutex
	finished := map[int]bool{}
	s, err := p.saga(ctx, cfg.sagaDelay, func(id int) {
		doneMu.Lock()
		defer doneMu.Unlock()
		if finished[id] {
			return // a redelivered step: counted once
		}
		finished[id] = true
		completed.Add(1)
		<-slots
	})
	if err != nil {
		return sagaResult{}, err
	}
	defer s.close()
	cpu0 := cpuByPid(append(serversOf(p), os.Getpid()))
	start := time.Now()
	var started atomic.Int64
	stopAt := start.Add(cfg.sagaTime)
	err = parallel(ctx, cfg.conc, 1<<30, func(int) error {
		if time.Now().After(stopAt) {
			return errStop
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Until(stopAt)):
			return errStop
		}
		id := int(started.Add(1) - 1)
		return s.start(ctx, id)
	})
	if err != nil && !errors.Is(err, errStop) {
		return sagaResult{}, err
	}
	n := started.Load()
	deadline := time.Now().Add(4 * cfg.grace) // a slow system drains its window long after the last start
	for completed.Load() < n && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	servers := serversOf(p)
	cpuServers := cpuSince(cpu0, servers)
	cpu := cpuServers + cpuSince(cpu0, []int{os.Getpid()})
	if c := completed.Load(); c < n {
		return sagaResult{}, fmt.Errorf("%d of %d instances completed %v after the last start", c, n, 4*cfg.grace)
	}
	steps := 2 * n
	per := time.Duration(max(steps, 1))
	return sagaResult{Instances: int(n), StepsPerS: float64(steps) / elapsed.Seconds(), CPUPer: cpu / per, ServerCPUPer: cpuServers / per}, nil
}

var errStop = errors.New("stop")

// cpuByPid is each process's CPU time so far.
func cpuByPid(pids []int) map[int]time.Duration {
	m := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		m[pid] = cpuOf([]int{pid})
	}
	return m
}

// cpuSince is the CPU time the processes pids used since before, which
// the processes started since (a pool's new backends) count from their
// start. A process that ended in between is not counted.
func cpuSince(before map[int]time.Duration, pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		sum += cpuOf([]int{pid}) - before[pid]
	}
	return sum
}

func serversOf(p peer) []int {
	if p.servers == nil {
		return nil
	}
	return p.servers()
}
