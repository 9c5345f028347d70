package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// The noisy neighbour as a saga service meets it (issue 36's target:
// handler lateness): each timeout is requested by a saga instance of its
// tenant and handled by a saga.Dispatcher (kvstore, default options: on
// JetStream its engine activates timeouts early and the dispatcher holds
// them until their due time). Lateness is the OnTimeout handler's start
// less its due time (Context.TimeoutDue). Each instance is started by a
// message carrying its tenant's PartitionKey, which the instance keeps
// and its timeout inherits. The fair run puts the queue on
// -noisy-partitions partitions and gives the dispatcher
// saga.WithKeyLimit(-noisy-key-limit); the run without fairness has one
// partition and no key limit.

const (
	noisySagaQueue  = "noisy-saga"
	noisySagaBucket = "bench_noisy"
)

// noisyStart starts an instance of Tenant, which requests a timeout at Due.
type noisyStart struct {
	ID     string    `json:"id"`
	Tenant string    `json:"tenant"`
	Due    time.Time `json:"due"`
}

func (noisyStart) MessageName() string { return "bench.NoisyStart" }

type noisyDue struct{}

func (noisyDue) MessageName() string { return "bench.NoisyDue" }

type noisyData struct {
	Tenant string `json:"tenant"`
}

// noisySagaDef records each handled timeout in burst (tenant A) or
// others, and closes done when all n are handled; started holds the IDs
// of the instances whose start step requested their timeout, and
// nStarted counts them.
func noisySagaDef(burst, others *firings, nA, nOthers int, started *sync.Map, nStarted, handled *atomic.Int64, done chan<- struct{}) *saga.Definition[noisyData] {
	def := saga.Define[noisyData]("noisy")
	saga.StartedBy(def, saga.By(func(m noisyStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[noisyData], m noisyStart) error {
			c.Data.Tenant = m.Tenant
			if _, err := c.RequestTimeoutAt(m.Due, noisyDue{}); err != nil {
				return err
			}
			if _, again := started.LoadOrStore(m.ID, true); !again { // a step may run again
				nStarted.Add(1)
			}
			return nil
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[noisyData], _ noisyDue) error {
		now := time.Now()
		f, total := others, nOthers
		if c.Data.Tenant == "A" {
			f, total = burst, nA
		}
		f.add(total, c.ID(), c.TimeoutDue(), c.Incoming().EnqueuedAt, now)
		c.MarkComplete()
		if handled.Add(1) == int64(nA+nOthers) {
			close(done)
		}
		return nil
	})
	return def
}

// noisySagaRun runs the noisy neighbour once through a dispatcher on a
// queue of parts partitions, with key limit keyLimit (0: none): tenant
// A's nA timeouts due at one instant, the other tenants' nOthers one
// every noisyEvery from then (see noisyOtherDue); concurrency is the
// dispatcher's WithConcurrency (0: its default).
func noisySagaRun(ctx context.Context, e *env, parts, keyLimit, concurrency, nA, nOthers int) (noisyOutcome, error) {
	b, store, dropRound, err := e.sagaRound(ctx, "jetsaga-bench-noisy-saga", noisySagaQueue, noisySagaBucket)
	if err != nil {
		return noisyOutcome{}, err
	}
	defer dropRound()
	e.progress("  saga, %s, key limit %d, concurrency %d: tenant A: %d timeouts due at one instant; %d others, one every %v from then",
		noisyFairness(parts, nOthers > 0 && nA > 0), keyLimit, concurrency, nA, nOthers, noisyEvery)
	burst, others := newFirings(max(nA, 1)), newFirings(max(nOthers, 1))
	var (
		started           sync.Map
		nStarted, handled atomic.Int64
	)
	done := make(chan struct{})
	qc := e.queueConfig(noisySagaQueue)
	qc.Partitions = parts
	opts := []saga.Option{
		saga.WithSagas(noisySagaDef(burst, others, nA, nOthers, &started, &nStarted, &handled, done)),
		saga.WithLogger(sagaLogger()), saga.WithQueueConfig(qc),
	}
	if keyLimit > 0 {
		opts = append(opts, saga.WithKeyLimit(keyLimit))
	}
	if concurrency > 0 {
		opts = append(opts, saga.WithConcurrency(concurrency))
	}
	d, err := saga.NewDispatcher(b, store, noisySagaQueue, opts...)
	if err != nil {
		return noisyOutcome{}, err
	}
	keys := make([]string, parts)
	for p := range keys {
		keys[p] = keyIn("tenant", p, parts)
	}
	// The instances start well before the first due time: a start (send
	// and step) takes well under 1 ms of this machine.
	n := nA + nOthers
	t0 := time.Now().Add(5*time.Second + time.Duration(n)*time.Millisecond)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	err = parallel(publishers, n, func(i int) error {
		m := noisyStart{ID: fmt.Sprintf("A-%d", i), Tenant: "A", Due: t0}
		part := 0
		if i >= nA {
			j := i - nA
			t, due := noisyOtherDue(j, t0)
			m = noisyStart{ID: fmt.Sprintf("%c-%d", 'B'+t, j), Tenant: string(rune('B' + t)), Due: due}
			part = min(parts-1, 1+t%max(1, parts-1))
		}
		_, err := d.Send(ctx, m, saga.WithPartitionKey(keys[part]))
		return err
	})
	if err != nil {
		return noisyOutcome{}, fmt.Errorf("starting: %w", err)
	}
	if left := time.Until(t0); left < time.Second {
		return noisyOutcome{}, fmt.Errorf("the starts were sent %v before the due time: too late to measure lateness", left)
	}
	// The starts' steps must be done too: on a loaded 3-node cluster they
	// ran past the due time, and the first second of the drain measured
	// the rest of the setup.
	for nStarted.Load() < int64(n) {
		if left := time.Until(t0); left < time.Second {
			return noisyOutcome{}, fmt.Errorf("%d of %d instances started %v before the due time: too late to measure lateness", nStarted.Load(), n, left)
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return noisyOutcome{}, context.Cause(ctx)
		}
	}
	var cpu0 time.Duration
	select {
	case <-time.After(time.Until(t0)):
		cpu0 = e.cpu()
	case <-ctx.Done():
		return noisyOutcome{}, context.Cause(ctx)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return noisyOutcome{}, context.Cause(ctx)
	case <-time.After(time.Until(t0) + 10*time.Minute):
		return noisyOutcome{}, fmt.Errorf("%d of %d timeouts handled 10 min after the due time", handled.Load(), n)
	}
	cpu := e.cpu() - cpu0
	stop()
	select {
	case err := <-ran:
		if err != nil {
			return noisyOutcome{}, err
		}
	case <-time.After(30 * time.Second):
		return noisyOutcome{}, errors.New("dispatcher Run did not return within 30s of its context's end")
	}
	out := noisyOutcome{a: burst.summary(nA, burst.e2e), drained: burst.last().Sub(t0), cpu: cpu}
	if nOthers > 0 {
		out.others = others.summary(nOthers, others.e2e)
		out.othersActivated, out.othersTaken = summarize(others.broker), summarize(others.lag)
		out.othersBySecond = others.bySecond(t0)
	}
	return out, nil
}
