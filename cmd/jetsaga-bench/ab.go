package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// A/B rate measurement. This machine is shared and noisy: a neighbour's
// build can halve throughput for a second. So the sides do not take turns
// by the round; within each round they alternate every few milliseconds
// (one step each, rotating who goes first), so that all see the same
// conditions, and each side's rate is its operations over the time spent
// in its own steps.

// A contender prepares a round of n operations, untimed (IDs, pre-filled
// messages), and returns a step that does the next few of them.
type contender func(ctx context.Context, n int) (step, error)

// A step does some operations and returns how many.
type step func(ctx context.Context) (int, error)

// lane is a named contender: jetsaga, or one of the raw baselines.
type lane struct {
	label string
	c     contender
}

// abResult is what abRates measured of one lane.
type abResult struct {
	rates         []float64 // operations per second, one per round
	allocs, bytes float64   // heap allocations per operation, whole process
}

// abRates runs a warm-up round, then -rounds measured rounds of n
// operations per lane, and returns what it measured of each lane.
func (e *env) abRates(ctx context.Context, name string, n int, lanes ...lane) ([]abResult, error) {
	if _, err := interleave(ctx, max(100, n/5), lanes); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	res := make([]abResult, len(lanes))
	for r := range e.cfg.rounds {
		st, err := interleave(ctx, n, lanes)
		if err != nil {
			return nil, fmt.Errorf("round %d: %w", r+1, err)
		}
		msg := fmt.Sprintf("  %s round %d:", name, r+1)
		for i := range lanes {
			res[i].add(st[i], n, e.cfg.rounds)
			msg += fmt.Sprintf(" %s %s", lanes[i].label, fmtRate(res[i].rates[r]))
		}
		e.progress("%s", msg)
	}
	return res, nil
}

func (r *abResult) add(s laneStats, n, rounds int) {
	r.rates = append(r.rates, float64(n)/s.t.Seconds())
	r.allocs += float64(s.allocs) / float64(n*rounds)
	r.bytes += float64(s.bytes) / float64(n*rounds)
}

// laneStats is what one lane spent in its steps: time, and heap objects
// and bytes allocated by the whole process (client and embedded server)
// meanwhile. Lanes never run at once, so each is charged its own server work.
type laneStats struct {
	t             time.Duration
	allocs, bytes uint64
}

// interleave prepares every lane for n operations, then runs their steps
// in turn, rotating the order, until each has done n, and returns what
// each spent in its steps.
func interleave(ctx context.Context, n int, lanes []lane) ([]laneStats, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	steps := make([]step, len(lanes))
	for i, l := range lanes {
		s, err := l.c(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.label, err)
		}
		steps[i] = s
	}
	heap := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	allocs := func() (objects, bytes uint64) {
		metrics.Read(heap)
		return heap[0].Value.Uint64(), heap[1].Value.Uint64()
	}
	st := make([]laneStats, len(lanes))
	done := make([]int, len(lanes))
	runtime.GC() // start from the same heap state
	for k, left := 0, len(lanes); left > 0; k++ {
		for j := range lanes {
			i := (k + j) % len(lanes)
			if done[i] >= n {
				continue
			}
			o0, b0 := allocs()
			start := time.Now()
			c, err := steps[i](ctx)
			st[i].t += time.Since(start)
			o1, b1 := allocs()
			st[i].allocs += o1 - o0
			st[i].bytes += b1 - b0
			if err == nil && c == 0 {
				err = errNoProgress
			}
			if err != nil {
				return nil, fmt.Errorf("%s after %d of %d: %w", lanes[i].label, done[i], n, err)
			}
			if done[i] += c; done[i] >= n {
				left--
			}
		}
	}
	return st, nil
}

var errNoProgress = errors.New("step did no work")

// chunked returns a step that calls f(i) for the next chunk of indexes
// in [0,n), from workers goroutines.
func chunked(n, chunk, workers int, f func(ctx context.Context, i int) error) step {
	next := 0
	return func(ctx context.Context) (int, error) {
		lo, hi := next, min(n, next+chunk)
		next = hi
		return hi - lo, parallel(workers, hi-lo, func(i int) error { return f(ctx, lo+i) })
	}
}

// parallel calls f(i) for i in [0,n) from the given number of goroutines,
// handing out indexes in order, and returns the first error.
func parallel(workers, n int, f func(i int) error) error {
	if workers <= 1 {
		for i := range n {
			if err := f(i); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		next     atomic.Int64
		failed   atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Go(func() {
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					errOnce.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
