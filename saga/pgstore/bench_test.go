package pgstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/saga/pgstore"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// The benchmark's saga, as cmd/jetsaga-bench's saga benchmark: each tick
// starts or feeds an instance (of 100), counts, and requests a timeout an
// hour away (which never fires during the run).
type (
	tick struct {
		Instance string
		N        int
	}
	tickTimeout struct{}
	counter     struct{ Count int }
)

func (tick) MessageName() string        { return "pgstore.bench.Tick" }
func (tickTimeout) MessageName() string { return "pgstore.bench.TickTimeout" }

func counterSaga() saga.Saga {
	def := saga.Define[counter]("counter")
	saga.StartedBy(def, saga.By(func(m tick) string { return m.Instance }),
		func(ctx context.Context, c *saga.Context[counter], m tick) error {
			c.Data.Count++
			_, err := c.RequestTimeout(time.Hour, tickTimeout{})
			return err
		})
	saga.OnTimeout(def, func(context.Context, *saga.Context[counter], tickTimeout) error { return nil })
	return def
}

// BenchmarkSagaSteps measures saga steps per second (receive, load,
// handle, commit the record, schedule the timeout, ack) with the state in
// pgstore beside kvstore, on one embedded nats-server and the test
// binary's PostgreSQL server (fsync off: see internal/pgtest), in the
// same run. b.N messages are queued first, then timed until all are
// handled:
//
//	go test -run '^$' -bench SagaSteps -benchtime 5000x ./saga/pgstore
func BenchmarkSagaSteps(b *testing.B) {
	e := newBenchEnv(b)
	broker, js, pool := e.broker, e.js, e.pool
	var round atomic.Int64
	stores := []struct {
		name string
		new  func(b *testing.B) saga.Store
	}{
		{"kvstore", func(b *testing.B) saga.Store {
			s, err := kvstore.New(b.Context(), js, kvstore.Config{Bucket: "bench_" + strconv.FormatInt(round.Add(1), 10)})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		// Each step in a transaction (the session), optimistic.
		{"pgstore", func(b *testing.B) saga.Store { return benchStore(b, pool) }},
		// The same, the step's load locking the row.
		{"pgstore-locking", func(b *testing.B) saga.Store { return benchStore(b, pool, pgstore.WithLocking()) }},
		// The session on a pool of 16 connections (pgxpool's default
		// here is 4): a step holds its connection from load to commit.
		{"pgstore-pool16", func(b *testing.B) saga.Store {
			cfg := pool.Config()
			cfg.MaxConns = 16
			p, err := pgxpool.NewWithConfig(b.Context(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.Close)
			return benchStore(b, p)
		}},
		// The store without its session: each statement on its own, and
		// the dispatcher's record cache on (as before the session).
		{"pgstore-nosession", func(b *testing.B) saga.Store { return benchStore(b, pool).WithoutSession() }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			benchSteps(b, broker, st.new(b), "bench"+strconv.FormatInt(round.Add(1), 10))
		})
	}
}

// benchStore empties the default table and returns a Store on it.
func benchStore(b *testing.B, pool *pgxpool.Pool, opts ...pgstore.Option) *pgstore.Store {
	if _, err := pool.Exec(b.Context(), "TRUNCATE jetsaga_sagas"); err != nil {
		b.Fatal(err)
	}
	s, err := pgstore.New(b.Context(), pool, opts...)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchSteps queues b.N ticks on a fresh queue, then times a dispatcher
// (concurrency 32) handling them all.
func benchSteps(b *testing.B, broker *transport.Broker, store saga.Store, queue string) {
	ctx := b.Context()
	var handled, conflicts atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	d, err := saga.NewDispatcher(broker, store, queue, saga.WithSagas(counterSaga()), saga.WithConcurrency(32),
		saga.WithLogger(testutil.Logger()),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
			conflicts.Add(int64(r.Conflicts))
			if r.Outcome != saga.Handled {
				b.Errorf("step %s/%s: %s: %v", info.Saga, info.ID, r.Outcome, r.Err)
			}
			if handled.Add(1) == n {
				close(done)
			}
		}}))
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		if _, err := d.Send(ctx, tick{Instance: fmt.Sprintf("inst-%03d", i%100), N: i}); err != nil {
			b.Fatal(err)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	finished := make(chan error, 1)
	b.ResetTimer()
	start := time.Now()
	go func() { finished <- d.Run(runCtx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	if err := <-finished; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "steps/s")
	b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/op")
}

// BenchmarkContention measures saga steps per second on 20 hot instances
// that 3 dispatchers (concurrency 8 each, a pool of 8 connections each)
// step at once, with optimistic revisions and with row locking, in the
// same run:
//
//	go test -run '^$' -bench Contention -benchtime 4000x ./saga/pgstore
func BenchmarkContention(b *testing.B) {
	srv := testutil.StartServer(b, embedded.Options{})
	pool, err := pgxpool.New(b.Context(), pg.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if err := pgstore.Migrate(b.Context(), pool); err != nil {
		b.Fatal(err)
	}
	url := pool.Config().ConnString()
	var round atomic.Int64
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			if _, err := pool.Exec(b.Context(), "TRUNCATE jetsaga_sagas"); err != nil {
				b.Fatal(err)
			}
			queue := "hot" + strconv.FormatInt(round.Add(1), 10)
			var handled, conflicts atomic.Int64
			done := make(chan struct{})
			n := int64(b.N)
			hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, r saga.StepResult) {
				conflicts.Add(int64(r.Conflicts))
				if r.Outcome != saga.Handled {
					b.Errorf("step %s/%s: %s: %v", info.Saga, info.ID, r.Outcome, r.Err)
				}
				if handled.Add(1) == n {
					close(done)
				}
			}}
			var ds []*saga.Dispatcher
			for range 3 {
				cfg, err := pgxpool.ParseConfig(url)
				if err != nil {
					b.Fatal(err)
				}
				cfg.MaxConns = 8
				p, err := pgxpool.NewWithConfig(b.Context(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				s, err := pgstore.New(b.Context(), p, mode.opts...)
				if err != nil {
					b.Fatal(err)
				}
				d, err := saga.NewDispatcher(natsBroker(b, srv.ClientURL()), s, queue, saga.WithSagas(counterSaga()), saga.WithConcurrency(8),
					saga.WithConflictRetries(1000), saga.WithLogger(testutil.Logger()), saga.WithHooks(hooks))
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, d)
			}
			for i := range b.N {
				if _, err := ds[0].Send(b.Context(), tick{Instance: fmt.Sprintf("hot-%02d", i%20), N: i}); err != nil {
					b.Fatal(err)
				}
			}
			runCtx, stop := context.WithCancel(b.Context())
			finished := make(chan error, len(ds))
			b.ResetTimer()
			start := time.Now()
			for _, d := range ds {
				go func() { finished <- d.Run(runCtx) }()
			}
			select {
			case <-done:
			case <-b.Context().Done():
			}
			elapsed := time.Since(start)
			b.StopTimer()
			stop()
			for range ds {
				if err := <-finished; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "steps/s")
			b.ReportMetric(float64(conflicts.Load())/float64(b.N), "conflicts/op")
		})
	}
}
