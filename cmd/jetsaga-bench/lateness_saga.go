package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Lateness as a saga's timeout handler sees it: the same due times as
// the transport rounds, each requested by one saga instance, handled by a
// saga.Dispatcher (kvstore, default options). Lateness is the time the
// OnTimeout handler starts less the due time (Context.TimeoutDue). Rounds:
// the dispatcher with default options (on JetStream its engine activates
// timeouts DefaultEarlyActivation early and the dispatcher holds them
// until their due time), the engine with timeout.WithEarlyActivation(0)
// (activation at the due time, the default before early activation was),
// and, with -lead, the engine with that lead.

const (
	lateSagaQueue  = "late-saga"
	lateSagaBucket = "bench_late"
)

// lateStart starts an instance, which requests a timeout at Due.
type lateStart struct {
	ID  string    `json:"id"`
	Due time.Time `json:"due"`
}

func (lateStart) MessageName() string { return "bench.LateStart" }

type lateDue struct{}

func (lateDue) MessageName() string { return "bench.LateDue" }

type lateData struct {
	Due time.Time `json:"due"`
}

func latenessSagaDef(f *firings, n int, lead time.Duration, handled *atomic.Int64, done chan<- struct{}) *saga.Definition[lateData] {
	def := saga.Define[lateData]("late")
	saga.StartedBy(def, saga.By(func(m lateStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[lateData], m lateStart) error {
			c.Data.Due = m.Due
			if time.Now().After(m.Due.Add(-lead)) {
				f.pubLate.Add(1)
			}
			_, err := c.RequestTimeoutAt(m.Due, lateDue{})
			return err
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[lateData], _ lateDue) error {
		now := time.Now()
		f.add(n, c.ID(), c.TimeoutDue(), c.Incoming().EnqueuedAt, now)
		c.MarkComplete()
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	return def
}

// lateRound is a round of latenessSaga: the dispatcher's default engine
// (opts nil), or timeout.NewQueue with opts, whose early activation is
// lead.
type lateRound struct {
	lead time.Duration
	opts []timeout.QueueOption
}

// sagaRound connects a client named name and returns a broker and a
// kvstore bucket for a saga round on queue, which it drops, with the
// bucket, before it returns and when done is called.
func (e *env) sagaRound(ctx context.Context, name, queue, bucket string) (b *transport.Broker, store saga.Store, done func(), err error) {
	nc, err := e.servers.connect(nats.Name(name))
	if err != nil {
		return nil, nil, nil, err
	}
	if b, err = transport.NewJetStream(nc, transport.WithPrefix(benchPrefix), transport.WithLogger(sagaLogger())); err != nil {
		nc.Close()
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Close()
		nc.Close()
		return nil, nil, nil, err
	}
	drop := func() {
		ctx := context.WithoutCancel(ctx)
		if err := b.DeleteQueue(ctx, queue); err != nil {
			e.progress("deleting queue %s: %v", queue, err)
		}
		if err := js.DeleteKeyValue(ctx, bucket); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
			e.progress("deleting bucket %s: %v", bucket, err)
		}
	}
	done = func() {
		drop()
		b.Close()
		nc.Close()
	}
	drop()
	if store, err = kvstore.New(ctx, js, kvstore.Config{Bucket: bucket, Replicas: e.replicas()}); err != nil {
		done()
		return nil, nil, nil, err
	}
	return b, store, done, nil
}

// latenessSaga runs one saga round.
func latenessSaga(ctx context.Context, e *env, n int, r lateRound) (*firings, error) {
	lead := r.lead
	b, store, dropRound, err := e.sagaRound(ctx, "jetsaga-bench-late-saga", lateSagaQueue, lateSagaBucket)
	if err != nil {
		return nil, err
	}
	defer dropRound()
	f := newFirings(n)
	var handled atomic.Int64
	done := make(chan struct{})
	opts := []saga.Option{saga.WithSagas(latenessSagaDef(f, n, lead, &handled, done)), saga.WithLogger(sagaLogger())}
	if r.opts != nil {
		opts = append(opts, saga.WithTimeouts(timeout.NewQueue(b, r.opts...)))
	} else if got := timeout.NewQueue(b).EarlyActivation(); got != lead {
		return nil, fmt.Errorf("the default engine activates %v early, the round expects %v", got, lead)
	}
	d, err := saga.NewDispatcher(b, store, lateSagaQueue, opts...)
	if err != nil {
		return nil, err
	}
	// The instances start (and schedule) well before the first due time:
	// sending and handling the starting messages takes well under 0.5 ms
	// each.
	base := time.Now().Add(2*time.Second + time.Duration(n)*300*time.Microsecond)
	due := make([]time.Time, n)
	for i := range due {
		due[i] = base.Add(time.Duration(i) * e.cfg.spread / time.Duration(n))
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	err = parallel(e.cfg.conc, n, func(i int) error {
		_, err := d.Send(ctx, lateStart{ID: fmt.Sprintf("late-%d", i), Due: due[i]})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("starting: %w", err)
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(time.Until(due[n-1]) + 30*time.Second):
		f.mu.Lock()
		defer f.mu.Unlock()
		return nil, fmt.Errorf("%d of %d timeouts handled 30 s after the last due time", len(f.seen), n)
	}
	stop()
	select {
	case err := <-ran:
		if err != nil {
			return nil, err
		}
	case <-time.After(10 * time.Second):
		return nil, errors.New("dispatcher Run did not return within 10s of its context's end")
	}
	return f, nil
}
