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
	noisyEach    = 100     // timeouts of each (not scaled by -n)
	noisyRecv    = 8       // receivers
	// noisyEvery spaces the other tenants' due times: one every 10 ms
	// from A's instant, in turn (B, C, …), as the probe did, so
	// that they span the first 10 s of A's drain.
	noisyEvery = 10 * time.Millisecond
)

// noisyOtherDue returns the tenant and due time of the other tenants'
// i-th timeout (0 ≤ i < noisyTenants × each), the first due at t0.
func noisyOtherDue(i int, t0 time.Time) (tenant int, due time.Time) {
	return i % noisyTenants, t0.Add(time.Duration(i) * noisyEvery)
}

// noisyOutcome is one noisy run: A's lateness and drain time, and the
// other tenants' lateness (nil when A ran alone).
type noisyOutcome struct {
	// othersBySecond is the others' p99 by the second of A's drain they
	// were due in.
	othersBySecond []time.Duration
	// cpu is the CPU time the process (clients and server) used from
	// the first due time to the last handled.
	cpu       time.Duration
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
	nA, nEach := e.scaled(noisyBurst), noisyEach
	n := nA + noisyTenants*nEach
	if !withOthers {
		n = nA
	}
	tenants := noisyTenants
	if !withOthers {
		tenants = 0
	}
	e.progress("  %s: tenant A: %d timeouts due at one instant; %d tenants × %d, one every %v from then", noisyFairness(parts, withOthers), nA, tenants, nEach, noisyEvery)
	// Far enough ahead that scheduling them all does not overtake the
	// first due time.
	t0 := time.Now().Add(5*time.Second + time.Duration(n)*150*time.Microsecond)
	due := func(i int) (tenant string, part int, at time.Time) {
		if i < nA {
			return "A", 0, t0
		}
		t, at := noisyOtherDue(i-nA, t0)
		return string(rune('B' + t)), min(parts-1, 1+t%max(1, parts-1)), at
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
		out.othersBySecond = others.bySecond(t0)
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
		if level == "" {
			continue // -noisy-levels= runs the quiet hour alone
		}
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
				limit, conc := 0, 0
				if parts > 1 {
					limit, conc = e.cfg.noisyKeyLimit, e.cfg.noisyConcurrency
				}
				nOthers := noisyTenants * noisyEach
				if !withOthers {
					nOthers = 0
				}
				return noisySagaRun(ctx, e, parts, limit, conc, e.scaled(noisyBurst), nOthers)
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
	if e.cfg.noisyQuiet && e.cfg.noisyParts > 1 {
		r, err := noisyQuietHour(ctx, e)
		if err != nil {
			return nil, fmt.Errorf("quiet hour: %w", err)
		}
		res = append(res, r...)
	}
	return res, nil
}

// noisyQuietHours is the quiet hour's timeouts: no burst, the other
// tenants' only, one every noisyEvery (30 s).
const noisyQuietHours = 3000

// noisyQuietHour runs the quiet hour (issue 47): the ten tenants'
// noisyQuietHours timeouts and no burst, through a dispatcher on the
// default layout (one partition) and then on the fair one
// (-noisy-partitions, -noisy-key-limit); it compares the CPU the process
// (clients and server) used from the first due time to the last handled,
// and the handler lateness.
func noisyQuietHour(ctx context.Context, e *env) ([]Result, error) {
	parts := e.cfg.noisyParts
	def, err := noisySagaRun(ctx, e, 1, 0, 0, 0, noisyQuietHours)
	if err != nil {
		return nil, fmt.Errorf("one partition: %w", err)
	}
	fair, err := noisySagaRun(ctx, e, parts, e.cfg.noisyKeyLimit, e.cfg.noisyConcurrency, 0, noisyQuietHours)
	if err != nil {
		return nil, fmt.Errorf("%d partitions: %w", parts, err)
	}
	spread := time.Duration(noisyQuietHours) * noisyEvery
	cpuRatio := float64(fair.cpu) / float64(max(def.cpu, 1))
	lat := latencyResult("noisy", "  fair layout ("+noisyFairConfig(e)+"): handler-due", fair.others, def.others, 0, "p99 <= one partition's + 10ms (issue 47)")
	lat.RawName = "one partition"
	lat.Pass = verdict(fair.others.P99 <= def.others.P99+10*time.Millisecond && fair.others.Missing == 0 && fair.others.Early == 0)
	return []Result{
		{Bench: "noisy", Label: fmt.Sprintf("saga: quiet hour, no burst: %d timeouts over %v", noisyQuietHours, spread), Jetsaga: Figure{Text: "(below)"}},
		latencyResult("noisy", "  one partition: handler-due", def.others, nil, 0, ""),
		lat,
		{Bench: "noisy", Label: "  CPU, first due to last handled: fair layout (one partition)",
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%s): %.2f×", fmtDur(fair.cpu), fmtDur(def.cpu), cpuRatio)},
			Target:  "<= 1.15× (issue 47)", Pass: verdict(def.cpu > 0 && cpuRatio <= 1.15)},
	}, nil
}

// noisyLevel runs, at one level (what names its lateness): A alone on
// the default layout (one partition) and on the fair one, then every
// tenant on each. The targets apply to the saga level's fair run,
// held to A alone on the default layout.
func noisyLevel(e *env, level, what string, run func(parts int, withOthers bool) (noisyOutcome, error)) ([]Result, error) {
	parts := max(1, e.cfg.noisyParts)
	nA := e.scaled(noisyBurst)
	layouts := []int{1}
	if parts > 1 {
		layouts = append(layouts, parts)
	}
	alone := map[int]time.Duration{}
	var res []Result
	for _, p := range layouts {
		o, err := run(p, false)
		if err != nil {
			return nil, fmt.Errorf("tenant A alone, %s: %w", noisyFairness(p, false), err)
		}
		alone[p] = o.drained
		r := Result{Bench: "noisy", Label: fmt.Sprintf("%s: A alone (%d due at one instant, %s): burst drained", level, nA, noisyFairness(p, false)),
			Jetsaga: Figure{Text: fmtDur(o.drained)}}
		if p > 1 {
			r.Jetsaga.Text += fmt.Sprintf(" (%.2f× on one partition)", float64(o.drained)/float64(max(alone[1], 1)))
		}
		res = append(res, r)
	}
	for _, p := range layouts {
		o, err := run(p, true)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", noisyFairness(p, true), err)
		}
		target, maxP99 := "", time.Duration(0)
		graded := p > 1 && level == "saga"
		if graded {
			target, maxP99 = "p99 <= 100ms (issue 47)", 100*time.Millisecond
		}
		drain := Result{Bench: "noisy", Label: "  A's burst drained (last " + strings.TrimSuffix(what, "-due") + " - due), × A alone on one partition",
			Jetsaga: Figure{Text: fmt.Sprintf("%s (%.2f×; %.2f× alone on this layout)", fmtDur(o.drained),
				float64(o.drained)/float64(max(alone[1], 1)), float64(o.drained)/float64(max(alone[p], 1)))}}
		if graded {
			drain.Target = "<= 1.15× A alone on one partition (issue 47)"
			drain.Pass = verdict(float64(o.drained) <= 1.15*float64(alone[1]))
		}
		label := level + ": " + noisyFairness(p, true)
		if level == "saga" && p > 1 {
			label += ", " + noisyFairConfig(e)
		}
		res = append(res,
			Result{Bench: "noisy", Label: label, Jetsaga: Figure{Text: "(below)"}},
			latencyResult("noisy", fmt.Sprintf("  tenant A: %d due at one instant, %s", nA, what), o.a, nil, 0, ""),
			drain,
			latencyResult("noisy", fmt.Sprintf("  tenants B-K: %d, one every %v, %s", noisyTenants*noisyEach, noisyEvery, what), o.others, nil, maxP99, target),
			bySecondResult(o.othersBySecond, maxP99),
			latencyResult("noisy", "    of which enqueued-due (activation)", o.othersActivated, nil, 0, ""),
			latencyResult("noisy", "    of which "+strings.TrimSuffix(what, "-due")+"-enqueued", o.othersTaken, nil, 0, ""),
		)
	}
	return res, nil
}

// bySecondResult is the row of the others' p99 by the second of A's
// drain they were due in; with maxP99, graded: every second within it.
func bySecondResult(ps []time.Duration, maxP99 time.Duration) Result {
	cells := make([]string, len(ps))
	worst := time.Duration(0)
	for i, p := range ps {
		cells[i] = fmt.Sprintf("%.0f", float64(p)/float64(time.Millisecond))
		worst = max(worst, p)
	}
	r := Result{Bench: "noisy", Label: "    p99 by second of A's drain (ms)", Jetsaga: Figure{Text: strings.Join(cells, " ")}}
	if maxP99 > 0 {
		r.Target = fmt.Sprintf("every second <= %v", maxP99)
		r.Pass = verdict(len(ps) > 0 && worst <= maxP99)
	}
	return r
}

// noisyFairConfig describes the fair layout's dispatcher options.
func noisyFairConfig(e *env) string {
	s := fmt.Sprintf("%d partitions, WithKeyLimit(%d)", e.cfg.noisyParts, e.cfg.noisyKeyLimit)
	if e.cfg.noisyConcurrency > 0 {
		s += fmt.Sprintf(", WithConcurrency(%d)", e.cfg.noisyConcurrency)
	}
	return s
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
