package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetsaga/jetsaga/transport"
)

// P4: a million pending timeouts (1M × -n) on one queue. Opt-in (-only
// million): it takes minutes. It schedules them all through Queue.Schedule,
// due over -spread starting about 20 s after the scheduling ends; reads the
// process RSS (server and client are in-process) once all are pending;
// cancels a random 2000 of them, one at a time, timing each; then receives
// the rest with Receive(100)+Complete as they fire and checks that each
// arrives exactly once and never early, and that no cancelled one does.

const (
	millionCount     = 1_000_000
	millionSchedConc = 64 // goroutines scheduling
	millionRecvConc  = 8  // goroutines receiving
	millionLead      = 20 * time.Second
	millionMaxRSS    = 600 << 20
)

func benchMillion(ctx context.Context, e *env) ([]Result, error) {
	n := e.scaled(millionCount)
	nCancel := min(cancelCount, n/2)
	benchStart := time.Now()

	// The due times must all lie after the scheduling ends, which depends
	// on the scheduling rate: estimate it on a throwaway queue first.
	rate, err := millionPilot(ctx, e, min(n, 10_000))
	if err != nil {
		return nil, fmt.Errorf("pilot: %w", err)
	}
	estimate := time.Duration(float64(n) / rate * 1.5 * float64(time.Second))
	first := time.Now().Add(estimate + millionLead)
	spread := e.cfg.spread
	due := func(i int) time.Time { return first.Add(time.Duration(i) * spread / time.Duration(n)) }
	e.progress("  pilot: %s; scheduling %d, first due in %v, spread over %v", fmtRate(rate), n, time.Until(first).Round(time.Second), spread)

	q, drop, err := e.openQueue(ctx, "million")
	if err != nil {
		return nil, err
	}
	defer drop()

	// Which ones to cancel is chosen up front; only their sequences are kept.
	cancelled := make([]bool, n)
	cancelSeq := make(map[int]uint64, nCancel)
	for len(cancelSeq) < nCancel {
		i := rand.IntN(n)
		cancelled[i], cancelSeq[i] = true, 0
	}
	var seqMu sync.Mutex
	base := nuid.Next()

	// (1) Schedule.
	var done atomic.Int64
	schedStart := time.Now()
	stopProgress := e.every(10*time.Second, func() {
		e.progress("  scheduled %d of %d", done.Load(), n)
	})
	err = parallel(millionSchedConc, n, func(i int) error {
		seq, err := q.Schedule(ctx, jetMessage(base+"-"+strconv.Itoa(i)), due(i))
		if err != nil {
			return fmt.Errorf("schedule %d: %w", i, err)
		}
		if cancelled[i] {
			seqMu.Lock()
			cancelSeq[i] = seq
			seqMu.Unlock()
		}
		done.Add(1)
		return nil
	})
	stopProgress()
	schedEnd := time.Now()
	if err != nil {
		return nil, err
	}
	schedDur := schedEnd.Sub(schedStart)
	margin := first.Sub(schedEnd)
	e.progress("  scheduled %d in %v (%s); first due %v after", n, schedDur.Round(time.Millisecond), fmtRate(float64(n)/schedDur.Seconds()), margin.Round(time.Millisecond))

	// (2) RSS with all pending.
	rss, hwm, err := readRSS()
	if err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap := int64(ms.HeapInuse)
	e.progress("  RSS %d MiB (peak %d MiB, Go heap in use %d MiB)", rss>>20, hwm>>20, heap>>20)

	// (3) Cancel a random nCancel of them, one at a time.
	lat := make([]time.Duration, 0, nCancel)
	for i, seq := range cancelSeq { // map order: random
		start := time.Now()
		err := q.Cancel(ctx, seq)
		lat = append(lat, time.Since(start))
		if err != nil {
			return nil, fmt.Errorf("cancel %d (seq %d): %w", i, seq, err)
		}
	}
	cancelEnd := time.Now()
	if cancelEnd.After(first) {
		e.progress("  warning: the cancels ended %v after the first due time", cancelEnd.Sub(first))
	}

	// (4) Receive all the rest as they fire.
	want := n - nCancel
	e.progress("  waiting for %d to fire, from %v on", want, time.Until(first).Round(time.Second))
	f, err := millionReceive(ctx, e, q, n, want, base, due, cancelled)
	if err != nil {
		return nil, err
	}
	last := due(n - 1)

	res := []Result{
		{
			Bench: "million",
			Label: fmt.Sprintf("million: Schedule %d (%d goroutines)", n, millionSchedConc),
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%s; first due %s later)",
				fmtRate(float64(n)/schedDur.Seconds()), fmtDur(schedDur), fmtDur(margin))},
			Target: "all pending before the first due",
			Pass:   verdict(margin > 0),
		},
		{
			Bench:   "million",
			Label:   fmt.Sprintf("  process RSS, %d pending", n),
			Jetsaga: Figure{Text: fmt.Sprintf("%d MiB (peak %d MiB; Go heap in use %d MiB)", rss>>20, hwm>>20, heap>>20)},
			Target:  fmt.Sprintf("<= %d MiB (P4)", millionMaxRSS>>20),
			Pass:    verdict(rss <= millionMaxRSS),
		},
		latencyResult("million", fmt.Sprintf("  cancel %d of %d pending", nCancel, n), summarize(lat), nil, time.Millisecond, "p99 <= 1ms (P4)"),
		{
			Bench: "million",
			Label: fmt.Sprintf("  fire: Receive(100)+Complete, %d goroutines", millionRecvConc),
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%d in %s; last received %s after last due)",
				fmtRate(float64(f.got)/f.lastRecv.Sub(f.firstRecv).Seconds()), f.got,
				fmtDur(f.lastRecv.Sub(f.firstRecv)), fmtDur(f.lastRecv.Sub(last)))},
		},
		latencyResult("million", "  fire: lateness enqueued-due", summarize(f.enqLate), nil, 0, ""),
		latencyResult("million", "  fire: lateness received-due", summarize(f.late), nil, 0, ""),
		{
			Bench: "million",
			Label: "  fire: counts",
			Jetsaga: Figure{Text: fmt.Sprintf("%d of %d, %d lost, %d dup, %d early, %d cancelled fired",
				f.got, want, want-f.got, f.dups, f.early, f.resurrected)},
			Target: "all fire, 0 dup/early (P4)",
			Pass:   verdict(f.got == want && f.dups == 0 && f.early == 0 && f.resurrected == 0),
		},
		{
			Bench:   "million",
			Label:   "  whole bench",
			Jetsaga: Figure{Text: fmtDur(time.Since(benchStart))},
		},
	}
	return res, nil
}

// millionPilot schedules n far-future messages on a throwaway queue and
// returns the rate.
func millionPilot(ctx context.Context, e *env, n int) (float64, error) {
	q, drop, err := e.openQueue(ctx, "million-pilot")
	if err != nil {
		return 0, err
	}
	defer drop()
	base, due := nuid.Next(), time.Now().Add(time.Hour)
	start := time.Now()
	if err := parallel(millionSchedConc, n, func(i int) error {
		_, err := q.Schedule(ctx, jetMessage(base+"-"+strconv.Itoa(i)), due)
		return err
	}); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// millionFired is what the receivers of the million bench saw.
type millionFired struct {
	mu                            sync.Mutex
	seen                          []uint8
	got, dups, early, resurrected int
	late                          []time.Duration // received - due
	enqLate                       []time.Duration // enqueued (activated) - due
	firstRecv, lastRecv           time.Time
}

func millionReceive(ctx context.Context, e *env, q *transport.Queue, n, want int, base string,
	due func(int) time.Time, cancelled []bool,
) (*millionFired, error) {
	f := &millionFired{seen: make([]uint8, n), late: make([]time.Duration, 0, want), enqLate: make([]time.Duration, 0, want)}
	// Generous: the firing may run well behind the due times.
	deadline := due(n - 1).Add(2*time.Minute + time.Duration(want)*100*time.Microsecond)
	rctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var (
		allIn    = make(chan struct{})
		allOnce  sync.Once
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop()
	}
	prefix := base + "-"
	stopProgress := e.every(10*time.Second, func() {
		f.mu.Lock()
		got := f.got
		f.mu.Unlock()
		e.progress("  received %d of %d", got, want)
	})
	defer stopProgress()
	for range millionRecvConc {
		wg.Go(func() {
			for {
				ds, err := q.Receive(rctx, 100)
				if err != nil {
					if rctx.Err() == nil {
						fail(fmt.Errorf("receive: %w", err))
					}
					return
				}
				now := time.Now()
				for _, d := range ds {
					i, err := strconv.Atoi(strings.TrimPrefix(d.MessageID, prefix))
					if err != nil || i < 0 || i >= n || !strings.HasPrefix(d.MessageID, prefix) {
						fail(fmt.Errorf("unexpected message %q", d.MessageID))
						return
					}
					if f.add(i, now, d.EnqueuedAt, due(i), cancelled[i]) == want {
						allOnce.Do(func() { close(allIn) })
					}
					if err := d.Complete(rctx); err != nil {
						if rctx.Err() == nil {
							fail(fmt.Errorf("complete %q: %w", d.MessageID, err))
						}
						return
					}
				}
			}
		})
	}
	select {
	case <-allIn:
		// A short grace for duplicates and cancelled ones that fire late.
		select {
		case <-time.After(2 * time.Second):
		case <-rctx.Done():
		}
	case <-rctx.Done():
	}
	stop()
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if f.got < want {
		e.progress("  only %d of %d arrived by %v after the last due time", f.got, want, deadline.Sub(due(n-1)))
	}
	return f, nil
}

// add records message i received at now and returns how many distinct
// uncancelled ones have arrived.
func (f *millionFired) add(i int, now, enqueued, due time.Time, cancelled bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[i]++; f.seen[i] > 1 {
		f.dups++
		return f.got
	}
	if cancelled {
		f.resurrected++
		return f.got
	}
	if f.got == 0 {
		f.firstRecv = now
	}
	f.got++
	f.lastRecv = now
	if now.Before(due) {
		f.early++
	}
	f.late = append(f.late, now.Sub(due))
	f.enqLate = append(f.enqLate, enqueued.Sub(due))
	return f.got
}

// every runs fn every d until the returned function is called.
func (e *env) every(d time.Duration, fn func()) func() {
	t := time.NewTicker(d)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case <-t.C:
				fn()
			case <-quit:
				return
			}
		}
	}()
	return func() { t.Stop(); close(quit) }
}

// readRSS returns the process's resident set size and its peak, in bytes.
func readRSS() (rss, hwm int64, err error) {
	fh, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status %s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 {
		return 0, 0, errors.Join(errors.New("no VmRSS in /proc/self/status"), sc.Err())
	}
	return rss, hwm, sc.Err()
}
