package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The noisy neighbour (issue 36), as things stand: tenant A has 100,000 ×
// -n timeouts due at one instant, ten other tenants 100 each due over the
// second that starts then, all on one queue, received by a pool of
// receivers as a dispatcher would. Each group's lateness (receipt − due)
// shows how long the others wait behind A's burst: the queue activates
// and hands out its due schedules in due and sequence order, whoever
// they belong to. This is the baseline a fairness mechanism is measured
// against, in the same run once there is one.

const (
	noisyBurst   = 100_000 // tenant A's timeouts, all due at one instant
	noisyTenants = 10      // tenants B…K
	noisyEach    = 100     // timeouts of each, due over one second
	noisyRecv    = 8       // receivers
)

func benchNoisy(ctx context.Context, e *env) ([]Result, error) {
	q, drop, err := e.openQueue(ctx, "noisy")
	if err != nil {
		return nil, err
	}
	defer drop()
	nA, nEach := e.scaled(noisyBurst), max(10, e.scaled(noisyEach))
	n := nA + noisyTenants*nEach
	e.progress("  tenant A: %d timeouts due at one instant; %d tenants × %d due over the next second", nA, noisyTenants, nEach)
	// Far enough ahead that scheduling them all does not overtake the
	// first due time.
	t0 := time.Now().Add(5*time.Second + time.Duration(n)*150*time.Microsecond)
	due := func(i int) (tenant string, at time.Time) {
		if i < nA {
			return "A", t0
		}
		i -= nA
		return string(rune('B' + i/nEach)), t0.Add(time.Duration(i%nEach) * time.Second / time.Duration(nEach))
	}
	burst, others := newFirings(nA), newFirings(noisyTenants*nEach)
	var (
		mu      sync.Mutex
		got     int
		lastA   time.Time
		allDone = make(chan struct{})
	)
	rctx, cancel := context.WithDeadline(ctx, t0.Add(10*time.Minute))
	defer cancel()
	var wg sync.WaitGroup
	recvErr := newFirstErr()
	for range noisyRecv {
		wg.Go(func() {
			for {
				ds, err := q.Receive(rctx, 100)
				if err != nil {
					if rctx.Err() == nil {
						recvErr.set(err)
					}
					return
				}
				now := time.Now()
				for _, d := range ds {
					tenant, _, _ := strings.Cut(d.MessageID, "-")
					f, total := others, noisyTenants*nEach
					if tenant == "A" {
						f, total = burst, nA
					}
					f.add(total, d.MessageID, d.ScheduledAt, d.EnqueuedAt, now)
					if err := d.CompleteNoWait(rctx); err != nil {
						recvErr.set(err)
						return
					}
				}
				mu.Lock()
				for _, d := range ds {
					if strings.HasPrefix(d.MessageID, "A-") {
						lastA = now
					}
				}
				got += len(ds)
				if got >= n {
					select {
					case <-allDone:
					default:
						close(allDone)
					}
				}
				mu.Unlock()
			}
		})
	}
	err = parallel(publishers, n, func(i int) error {
		tenant, at := due(i)
		_, err := q.Schedule(rctx, jetMessage(tenant+"-"+strconv.Itoa(i)), at)
		return err
	})
	if err == nil {
		select {
		case <-allDone:
		case <-recvErr.failed:
		case <-rctx.Done():
			err = fmt.Errorf("%d of %d arrived: %w", got, n, rctx.Err())
		}
	}
	cancel()
	wg.Wait()
	if err != nil {
		return nil, fmt.Errorf("scheduling or waiting: %w", err)
	}
	if err := recvErr.get(); err != nil {
		return nil, fmt.Errorf("receiving: %w", err)
	}
	a, o := burst.summary(nA, burst.e2e), others.summary(noisyTenants*nEach, others.e2e)
	return []Result{
		latencyResult("noisy", fmt.Sprintf("tenant A: %d due at one instant, received-due", nA), a, nil, 0, ""),
		{
			Bench:   "noisy",
			Label:   "  A's burst drained (last receipt - due)",
			Jetsaga: Figure{Text: fmtDur(lastA.Sub(t0))},
		},
		latencyResult("noisy", fmt.Sprintf("tenants B-K: %d × %d due over 1s, received-due", noisyTenants, nEach), o, nil,
			100*time.Millisecond, "p99 <= 100ms (issue 36)"),
		{
			Bench:   "noisy",
			Label:   "  fairness",
			Jetsaga: Figure{Text: "none: one queue, due and sequence order"},
		},
	}, nil
}
