package saga_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// unitStore is a memstore that is a saga.UnitStore whose units only
// record what the dispatcher does with them, in order, with what the
// handler and the Sent hook do: the order of the seam, which a real
// database (saga/pgstore's tests) cannot show.
type unitStore struct {
	saga.Store
	mu  sync.Mutex
	log []string
}

type unitKey struct{}

type recUnit struct{ s *unitStore }

func (s *unitStore) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, e)
}

func (s *unitStore) events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

func (s *unitStore) Begin(ctx context.Context) (context.Context, saga.Unit, error) {
	s.note("begin")
	u := &recUnit{s}
	return context.WithValue(ctx, unitKey{}, u), u, nil
}

func (u *recUnit) Commit(context.Context) error   { u.s.note("commit"); return nil }
func (u *recUnit) Rollback(context.Context) error { u.s.note("rollback"); return nil }

type UnitStart struct{ ID string }
type UnitNote struct{ ID string }

func (UnitStart) MessageName() string { return "unit.Start" }
func (UnitNote) MessageName() string  { return "unit.Note" }

// TestUnitStoreOrder: with a UnitStore, each attempt of a step runs in a
// unit its handler's context carries; a failed attempt's unit is rolled
// back, a committed one's is committed before the step's messages are
// sent.
func TestUnitStoreOrder(t *testing.T) {
	ctx := t.Context()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if _, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "notes"}); err != nil {
		t.Fatal(err)
	}
	store := &unitStore{Store: memstore.New()}
	def := saga.Define[struct{ Runs int }]("unit")
	failed := false
	saga.StartedBy(def, saga.By(func(m UnitStart) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{ Runs int }], m UnitStart) error {
			if ctx.Value(unitKey{}) == nil {
				return saga.Permanent(errors.New("the handler's context carries no unit"))
			}
			if !failed {
				failed = true
				store.note("handler fails")
				return errors.New("transient")
			}
			store.note("handler")
			return c.Send("notes", UnitNote(m))
		})
	sent := make(chan struct{}, 1)
	hooks := saga.Hooks{Sent: func(context.Context, string, *transport.Message) {
		store.note("sent")
		sent <- struct{}{}
	}}
	d, err := saga.NewDispatcher(b, store, "units", saga.WithSagas(def), saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)
	if _, err := d.Send(ctx, UnitStart{ID: "u1"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sent:
	case <-time.After(20 * time.Second):
		t.Fatalf("nothing sent; the units: %q", store.events())
	}
	want := []string{"begin", "handler fails", "rollback", "begin", "handler", "commit", "sent"}
	if got := store.events(); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

type UnitTimeout struct{}

func (UnitTimeout) MessageName() string { return "unit.Timeout" }

// putCounter counts the writes of the store it wraps.
type putCounter struct {
	saga.Store
	mu   sync.Mutex
	puts int
}

func (p *putCounter) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	p.mu.Lock()
	p.puts++
	p.mu.Unlock()
	return p.Store.Put(ctx, key, value, rev)
}

func (p *putCounter) n() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.puts
}

// scheduleCounter counts the Schedule calls of the scheduler it wraps.
type scheduleCounter struct {
	timeout.Scheduler
	mu sync.Mutex
	n  int
}

func (s *scheduleCounter) Schedule(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Scheduler.Schedule(ctx, t)
}

func (s *scheduleCounter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// TestUnitStoreKeepsTimeoutOutbox: with a UnitStore, a step that requests
// timeouts (and sends nothing) writes the record once, in its unit: the
// outbox, carried out after the commit, stays in the stored record until
// the next commit rather than being cleared by a second write outside the
// unit. The next step on the instance on the same dispatcher does not
// schedule the timeout again; one on another dispatcher (a restart) does,
// and the engine keeps one timeout.
func TestUnitStoreKeepsTimeoutOutbox(t *testing.T) {
	ctx := t.Context()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	qcfg := transport.QueueConfig{Name: "unit-timeouts"}
	q, err := b.OpenQueue(ctx, qcfg)
	if err != nil {
		t.Fatal(err)
	}
	puts := &putCounter{Store: memstore.New()}
	store := &unitStore{Store: puts}
	sched := &scheduleCounter{Scheduler: timeout.NewQueue(b)}
	def := saga.Define[struct{ Runs int }]("unit")
	saga.StartedBy(def, saga.By(func(m UnitStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[struct{ Runs int }], _ UnitStart) error {
			_, err := c.RequestTimeout(time.Hour, UnitTimeout{})
			return err
		})
	saga.Handles(def, saga.By(func(m UnitNote) string { return m.ID }),
		func(_ context.Context, c *saga.Context[struct{ Runs int }], _ UnitNote) error {
			c.Data.Runs++
			return nil
		})
	saga.OnTimeout(def, func(context.Context, *saga.Context[struct{ Runs int }], UnitTimeout) error { return nil })
	newDispatcher := func() *saga.Dispatcher {
		d, err := saga.NewDispatcher(b, store, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg),
			saga.WithTimeouts(sched), saga.WithLogger(testutil.Logger()))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := newDispatcher()
	if _, err := d.Send(ctx, UnitStart{ID: "u1"}); err != nil {
		t.Fatal(err)
	}
	handleNext(t, q, d)
	if got := puts.n(); got != 1 {
		t.Fatalf("a step that requests a timeout wrote the record %d times, want 1 (its commit in the unit)", got)
	}
	if got := sched.count(); got != 1 {
		t.Fatalf("got %d schedules, want 1", got)
	}
	if _, err := d.Send(ctx, UnitNote{ID: "u1"}); err != nil {
		t.Fatal(err)
	}
	handleNext(t, q, d)
	if got := sched.count(); got != 1 {
		t.Fatalf("the next step on the same dispatcher scheduled the carried-out timeout again: %d schedules, want 1", got)
	}
	if got := puts.n(); got != 2 {
		t.Fatalf("got %d writes after two steps, want 2", got)
	}

	// A step that keeps the outbox again, then another dispatcher (no
	// note: a restart) takes the next step: it carries the outbox out
	// again, and the engine keeps one timeout.
	if _, err := d.Send(ctx, UnitStart{ID: "u2"}); err != nil {
		t.Fatal(err)
	}
	handleNext(t, q, d)
	d2 := newDispatcher()
	if _, err := d2.Send(ctx, UnitNote{ID: "u2"}); err != nil {
		t.Fatal(err)
	}
	handleNext(t, q, d2)
	if got := sched.count(); got != 3 {
		t.Fatalf("got %d schedules, want 3 (the other dispatcher carries the kept outbox out again)", got)
	}
	scheduled := 0
	for _, m := range peekAll(t, q) {
		if m.Properties[saga.TypeProperty] == (UnitTimeout{}).MessageName() {
			scheduled++
		}
	}
	if scheduled != 2 {
		t.Fatalf("the queue holds %d timeouts, want 2 (one per instance)", scheduled)
	}
}
