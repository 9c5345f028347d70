package main

import (
	"context"
	"fmt"
	"hash/fnv"
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
//
// With -noisy-partitions P > 1 the queue has P partitions and each
// tenant's timeouts carry the tenant's PartitionKey, chosen so that A is
// alone in its partition and the others share the rest (the bench picks
// keys that the transport's hash puts there, as a service would whose
// keys do not collide with A's). It measures what separate schedule
// streams and receives across partitions give the tenants that do not
// share A's partition.

const (
	noisyBurst   = 100_000 // tenant A's timeouts, all due at one instant
	noisyTenants = 10      // tenants B…K
	noisyEach    = 100     // timeouts of each, due over one second
	noisyRecv    = 8       // receivers
)

func benchNoisy(ctx context.Context, e *env) ([]Result, error) {
	parts := max(1, e.cfg.noisyParts)
	cfg := e.queueConfig("noisy")
	cfg.Partitions = parts
	q, drop, err := e.openQueueConfig(ctx, cfg)
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
	due := func(i int) (tenant string, part int, at time.Time) {
		if i < nA {
			return "A", 0, t0
		}
		i -= nA
		t := i / nEach
		return string(rune('B' + t)), 1 + t%max(1, parts-1), t0.Add(time.Duration(i%nEach) * time.Second / time.Duration(nEach))
	}
	keys := make([]string, parts)
	for p := range keys {
		keys[p] = keyIn("tenant", p, parts)
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
		tenant, part, at := due(i)
		m := jetMessage(tenant + "-" + strconv.Itoa(i))
		m.PartitionKey = keys[part]
		_, err := q.Schedule(rctx, m, at)
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
			Jetsaga: Figure{Text: noisyFairness(parts)},
		},
	}, nil
}

func noisyFairness(parts int) string {
	if parts == 1 {
		return "none: one partition, due and sequence order"
	}
	return fmt.Sprintf("%d partitions, A alone in one, the others in the rest", parts)
}

// keyIn returns a PartitionKey, prefix and a suffix, that a queue of parts
// partitions puts in partition part (the transport hashes the key with
// FNV-1a, 64 bits, modulo parts).
func keyIn(prefix string, part, parts int) string {
	for j := 0; ; j++ {
		c := prefix + "-" + strconv.Itoa(j)
		h := fnv.New64a()
		h.Write([]byte(c))
		if int(h.Sum64()%uint64(parts)) == part {
			return c
		}
	}
}
