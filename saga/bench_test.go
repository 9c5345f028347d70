package saga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type benchCount struct{ N int }
type benchStart struct{ ID string }
type benchStep struct{ ID string }

var benchSaga = saga.Define[benchCount]("stepbench")

func init() {
	saga.StartedBy(benchSaga, saga.By(func(m benchStart) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[benchCount], m benchStart) error { return nil })
	saga.Handles(benchSaga, saga.By(func(m benchStep) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[benchCount], m benchStep) error {
			c.Data.N++
			return nil
		})
}

// BenchmarkStepOnMemory measures the dispatcher's own share of a step: one
// step of a started saga (100 instances in turn) on the memory broker and
// memstore — Send, Receive, Handle — with no server in the figure. Its
// allocs/op is exact where jetsaga-bench's rates are noisy: compare it
// before and after a change to the step path (docs/architecture.md).
func BenchmarkStepOnMemory(b *testing.B) {
	ctx := context.Background()
	broker, err := transport.NewMemory()
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	d, err := saga.NewDispatcher(broker, memstore.New(), "stepbench", saga.WithSagas(benchSaga))
	if err != nil {
		b.Fatal(err)
	}
	q, err := broker.Queue(ctx, "stepbench")
	if err != nil {
		b.Fatal(err)
	}
	step := func(m any) {
		if _, err := d.Send(ctx, m); err != nil {
			b.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ds, err := q.Receive(rctx, 1)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		d.Handle(ctx, ds[0])
	}
	for i := range 100 {
		step(benchStart{ID: fmt.Sprint("i", i)})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		step(benchStep{ID: fmt.Sprint("i", i%100)})
	}
}
