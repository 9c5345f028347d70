package saga_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type rxData struct{ Customer string }

type RxOpened struct{ ID, Customer string }

func (RxOpened) MessageName() string { return "rx.Opened" }

func rxSaga(indexed bool) *saga.Definition[rxData] {
	def := saga.Define[rxData]("rx")
	if indexed {
		saga.Index(def, "customer", func(d rxData) string { return d.Customer })
	}
	saga.StartedBy(def, saga.By(func(m RxOpened) string { return m.ID }),
		func(_ context.Context, c *saga.Context[rxData], m RxOpened) error {
			c.Data.Customer = m.Customer
			return nil
		})
	return def
}

// TestRequestReindex: instances written before the saga had an index are
// found once a reindex request (a message on the queue, as the jetsaga
// command sends it) is handled by a dispatcher that runs the saga; one
// for a saga the dispatcher does not run is dead-lettered.
func TestRequestReindex(t *testing.T) {
	ctx := t.Context()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	store := memstore.New()
	results := make(chan saga.StepResult, 16)
	hooks := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { results <- r }}
	old, err := saga.NewDispatcher(b, store, "rx", saga.WithSagas(rxSaga(false)), saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	stopOld, oldDone := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- old.Run(stopOld) }()
	for _, m := range []RxOpened{{"r1", "ann"}, {"r2", "ann"}, {"r3", "bob"}} {
		if _, err := old.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		if r := <-results; r.Outcome != saga.Handled {
			t.Fatalf("%+v: %v %v", m, r.Outcome, r.Err)
		}
	}
	oldDone()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	def := rxSaga(true)
	d, err := saga.NewDispatcher(b, store, "rx", saga.WithSagas(def), saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	find := func() []string {
		var ids []string
		for inst, err := range saga.Find(ctx, d, def, saga.Where("customer", "ann")) {
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, inst.ID)
		}
		return ids
	}
	if got := find(); len(got) != 0 {
		t.Fatalf("before the rebuild: found %q, want none", got)
	}
	q, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "rx"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := saga.RequestReindex(ctx, q, "rx"); err != nil {
		t.Fatal(err)
	}
	if r := <-results; r.Outcome != saga.Handled {
		t.Fatalf("reindex request: %v %v", r.Outcome, r.Err)
	}
	if got := find(); !slices.Equal(got, []string{"r1", "r2"}) {
		t.Fatalf("after the rebuild: found %q, want [r1 r2]", got)
	}
	if built, err := saga.IndexesBuilt(ctx, store, "rx"); err != nil || !built {
		t.Fatalf("IndexesBuilt: %t, %v", built, err)
	}
	if _, err := saga.RequestReindex(ctx, q, "nosuch"); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrInvalidIndex) {
			t.Fatalf("reindex of a saga not run here: %v %v", r.Outcome, r.Err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no result for the reindex of a saga not run here")
	}
}
