package machine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	counter struct {
		machine.Instance
		N int
	}
	Open2 struct{ ID string }
	Ping  struct{ ID string }
)

// benchSagas are the same saga written three ways: plain, plain with the
// Expect a machine declares (liveness), and as a machine.
func benchSagas(b *testing.B) map[string]saga.Saga {
	plain := func(expect bool) *saga.Definition[counter] {
		var opts []saga.DefinitionOption
		if expect {
			opts = append(opts, saga.CheckLiveness())
		}
		d := saga.Define[counter]("counter", opts...)
		saga.StartedBy(d, saga.By(func(e Open2) string { return e.ID }),
			func(ctx context.Context, c *saga.Context[counter], _ Open2) error {
				c.Data.Machine.State = "Open"
				if expect {
					return c.Expect(saga.MessageName[Ping]())
				}
				return nil
			})
		saga.Handles(d, saga.By(func(e Ping) string { return e.ID }),
			func(ctx context.Context, c *saga.Context[counter], _ Ping) error {
				c.Data.N++
				if expect {
					return c.Expect(saga.MessageName[Ping]())
				}
				return nil
			})
		return d
	}
	m := machine.New[counter]("counter")
	open := m.State("Open")
	start := machine.NewEvent(m, saga.By(func(e Open2) string { return e.ID }))
	ping := machine.NewEvent(m, saga.By(func(e Ping) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(open))
	m.During(open, machine.When(ping).Then(func(ctx context.Context, c *saga.Context[counter], _ Ping) error {
		c.Data.N++
		return nil
	}))
	return map[string]saga.Saga{"plain": plain(false), "plain+expect": plain(true), "machine": m.MustBuild()}
}

// BenchmarkStep measures steps/s of the same saga, plain and as a
// machine, on the in-memory transport and store, in one run: batches of
// 500 steps alternate between the variants (the machine is shared, and
// noisy), and each variant's rate is reported with the machine's ratio to
// the plain saga's and to the plain saga with the liveness declarations a
// machine makes:
//
//	go test -run '^$' -bench Step -benchtime 40000x ./saga/machine
func BenchmarkStep(b *testing.B) {
	sagas := benchSagas(b)
	names := []string{"plain", "plain+expect", "machine"}
	runs := make(map[string]*stepRun)
	for _, n := range names {
		runs[n] = startSteps(b, sagas[n])
	}
	const batch = 500
	b.ResetTimer()
	for k, done := 0, 0; done < b.N; k, done = k+1, done+batch {
		for j := range names { // each variant first in turn
			runs[names[(k+j)%len(names)]].batch(b, min(batch, b.N-done))
		}
	}
	b.StopTimer()
	rate := make(map[string]float64)
	for _, n := range names {
		r := runs[n]
		rate[n] = float64(r.steps) / r.elapsed.Seconds()
		b.ReportMetric(rate[n], n+"-steps/s")
	}
	b.ReportMetric(rate["machine"]/rate["plain"], "machine/plain")
	b.ReportMetric(rate["machine"]/rate["plain+expect"], "machine/plain+expect")
}

// stepRun is a dispatcher running one variant, fed in batches.
type stepRun struct {
	d       *saga.Dispatcher
	left    atomic.Int64
	done    chan struct{}
	steps   int
	elapsed time.Duration
}

const benchInstances = 64

func startSteps(b *testing.B, s saga.Saga) *stepRun {
	b.Helper()
	ctx := b.Context()
	broker, err := transport.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = broker.Close() })
	r := &stepRun{done: make(chan struct{}, 1)}
	r.d, err = saga.NewDispatcher(broker, memstore.New(), "bench", saga.WithSagas(s),
		saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, res saga.StepResult) {
			if res.Err != nil {
				b.Errorf("step: %v", res.Err)
			}
			if r.left.Add(-1) == 0 {
				r.done <- struct{}{}
			}
		}}))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 1)
	go func() { exited <- r.d.Run(runCtx) }()
	b.Cleanup(func() { stop(); <-exited })
	r.left.Store(benchInstances)
	for i := range benchInstances {
		if _, err := r.d.Send(ctx, Open2{ID: fmt.Sprint(i)}); err != nil {
			b.Fatal(err)
		}
	}
	<-r.done
	return r
}

// batch sends n pings and waits until they are handled.
func (r *stepRun) batch(b *testing.B, n int) {
	start := time.Now()
	r.left.Store(int64(n))
	for i := range n {
		if _, err := r.d.Send(b.Context(), Ping{ID: fmt.Sprint((r.steps + i) % benchInstances)}); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-r.done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d steps left after a minute", r.left.Load(), n)
	}
	r.steps += n
	r.elapsed += time.Since(start)
}
