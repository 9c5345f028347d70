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
// One run prints three: A's burst alone (the drain time the issue holds
// A to, within 1.15×), every tenant on one partition (no fairness), and
// every tenant on -noisy-partitions P partitions (default 11), each
// tenant's timeouts carrying the tenant's PartitionKey, chosen so that A
// is alone in its partition and the others share the rest (the bench
// picks keys that the transport's hash puts there, as a service would
// whose keys do not collide with A's). It measures what separate
// schedule streams and receives across partitions give the tenants that
// do not share A's partition. -noisy-partitions 1 leaves out the third.

const (
	noisyBurst   = 100_000 // tenant A's timeouts, all due at one instant
	noisyTenants = 10      // tenants B…K
	noisyEach    = 100     // timeouts of each, due over one second
	noisyRecv    = 8       // receivers
)

// noisyOutcome is one noisy run: A's lateness and drain time, and the
// other tenants' lateness (nil when A ran alone).
type noisyOutcome struct {
	a, others *Latency
	// othersActivated and othersTaken split the others' lateness:
	// enqueued − due (the server's activation) and received − enqueued
	// (waiting in the queue for a receive).
	othersActivated, othersTaken *Latency
	drained                      time.Duration
}

// noisyRun runs the noisy neighbour once on a queue of parts partitions;
// without others, A's burst alone.
func noisyRun(ctx context.Context, e *env, parts int, withOthers bool) (noisyOutcome, error) {
	cfg := e.queueConfig("noisy")
	cfg.Partitions = parts
	q, drop, err := e.openQueueConfig(ctx, cfg)
	if err != nil {
		return noisyOutcome{}, err
	}
	defer drop()
	nA, nEach := e.scaled(noisyBurst), max(10, e.scaled(noisyEach))
	n := nA + noisyTenants*nEach
	if !withOthers {
		n = nA
	}
	tenants := noisyTenants
	if !withOthers {
		tenants = 0
	}
	e.progress("  %s: tenant A: %d timeouts due at one instant; %d tenants × %d due over the next second", noisyFairness(parts, withOthers), nA, tenants, nEach)
	// Far enough ahead that scheduling them all does not overtake the
	// first due time.
	t0 := time.Now().Add(5*time.Second + time.Duration(n)*150*time.Microsecond)
	due := func(i int) (tenant string, part int, at time.Time) {
		if i < nA {
			return "A", 0, t0
		}
		i -= nA
		t := i / nEach
		return string(rune('B' + t)), min(parts-1, 1+t%max(1, parts-1)), t0.Add(time.Duration(i%nEach) * time.Second / time.Duration(nEach))
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
		return noisyOutcome{}, fmt.Errorf("scheduling or waiting: %w", err)
	}
	if err := recvErr.get(); err != nil {
		return noisyOutcome{}, fmt.Errorf("receiving: %w", err)
	}
	out := noisyOutcome{a: burst.summary(nA, burst.e2e), drained: lastA.Sub(t0)}
	if withOthers {
		out.others = others.summary(noisyTenants*nEach, others.e2e)
		out.othersActivated, out.othersTaken = summarize(others.broker), summarize(others.lag)
	}
	return out, nil
}

// benchNoisy runs the noisy neighbour at each level of -noisy-levels:
// "saga", the target (handler lateness, through a dispatcher, see
// noisy_saga.go), and "transport" (receipt lateness of timeouts scheduled
// and received on the transport alone, without early activation, which
// shows the server's activation apart from the receive). At each, one
// after the other on the same server: A's burst alone (on the fair
// queue: the drain time A is held to), every tenant on one partition (no
// fairness), and every tenant on -noisy-partitions partitions with A
// alone in one (fairness by key; at the saga level with
// saga.WithKeyLimit(-noisy-key-limit)).
func benchNoisy(ctx context.Context, e *env) ([]Result, error) {
	var res []Result
	for level := range strings.SplitSeq(e.cfg.noisyLevels, ",") {
		var run func(parts int, withOthers bool) (noisyOutcome, error)
		what := "received-due"
		switch level {
		case "transport":
			run = func(parts int, withOthers bool) (noisyOutcome, error) {
				return noisyRun(ctx, e, parts, withOthers)
			}
		case "saga":
			what = "handler-due"
			run = func(parts int, withOthers bool) (noisyOutcome, error) {
				limit := 0
				if parts > 1 {
					limit = e.cfg.noisyKeyLimit
				}
				return noisySagaRun(ctx, e, parts, limit, withOthers)
			}
		default:
			return nil, fmt.Errorf("-noisy-levels: unknown level %q (saga, transport)", level)
		}
		r, err := noisyLevel(e, level, what, run)
		if err != nil {
			return nil, fmt.Errorf("%s level: %w", level, err)
		}
		res = append(res, r...)
	}
	return res, nil
}

// noisyLevel runs A alone, without fairness and with fairness at one
// level; what names its lateness. The targets apply to the saga
// level's fair run.
func noisyLevel(e *env, level, what string, run func(parts int, withOthers bool) (noisyOutcome, error)) ([]Result, error) {
	parts := max(1, e.cfg.noisyParts)
	nA, nEach := e.scaled(noisyBurst), max(10, e.scaled(noisyEach))
	alone, err := run(parts, false)
	if err != nil {
		return nil, fmt.Errorf("tenant A alone: %w", err)
	}
	res := []Result{{
		Bench: "noisy", Label: fmt.Sprintf("%s: A alone (%d due at one instant, %s): burst drained", level, nA, noisyFairness(parts, false)),
		Jetsaga: Figure{Text: fmtDur(alone.drained)},
	}}
	runs := []int{1}
	if parts > 1 {
		runs = append(runs, parts)
	}
	for _, p := range runs {
		o, err := run(p, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", noisyFairness(p, true), err)
		}
		target, maxP99 := "", time.Duration(0)
		graded := p > 1 && level == "saga"
		if graded {
			target, maxP99 = "p99 <= 100ms (issue 36)", 100*time.Millisecond
		}
		drain := Result{Bench: "noisy", Label: "  A's burst drained (last " + strings.TrimSuffix(what, "-due") + " - due), × alone",
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%.2f×)", fmtDur(o.drained), float64(o.drained)/float64(max(alone.drained, 1)))}}
		if graded {
			drain.Target = "<= 1.15× alone (issue 36)"
			drain.Pass = verdict(float64(o.drained) <= 1.15*float64(alone.drained))
		}
		label := level + ": " + noisyFairness(p, true)
		if level == "saga" && p > 1 {
			label += fmt.Sprintf(", WithKeyLimit(%d)", e.cfg.noisyKeyLimit)
		}
		res = append(res,
			Result{Bench: "noisy", Label: label, Jetsaga: Figure{Text: "(below)"}},
			latencyResult("noisy", fmt.Sprintf("  tenant A: %d due at one instant, %s", nA, what), o.a, nil, 0, ""),
			drain,
			latencyResult("noisy", fmt.Sprintf("  tenants B-K: %d × %d due over 1s, %s", noisyTenants, nEach, what), o.others, nil, maxP99, target),
			latencyResult("noisy", "    of which enqueued-due (activation)", o.othersActivated, nil, 0, ""),
			latencyResult("noisy", "    of which "+strings.TrimSuffix(what, "-due")+"-enqueued", o.othersTaken, nil, 0, ""),
		)
	}
	return res, nil
}

func noisyFairness(parts int, withOthers bool) string {
	switch {
	case !withOthers && parts == 1:
		return "one partition"
	case !withOthers:
		return fmt.Sprintf("%d partitions", parts)
	case parts == 1:
		return "without fairness: one partition, due and sequence order"
	}
	return fmt.Sprintf("with fairness: %d partitions by key, A alone in one, the others in the rest", parts)
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
