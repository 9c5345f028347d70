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
			return c.Send("notes", UnitNote{ID: m.ID})
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
