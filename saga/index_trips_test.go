package saga_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type btData struct {
	Payment string
	Group   string
	Paid    int // BtPaid messages committed on the instance
}

type (
	BtOpened  struct{ ID, Payment, Group string }
	BtChanged struct{ ID, Payment string }
	BtPaid    struct{ Payment string }
)

func (BtOpened) MessageName() string  { return "bt.Opened" }
func (BtChanged) MessageName() string { return "bt.Changed" }
func (BtPaid) MessageName() string    { return "bt.Paid" }

func btSaga() *saga.Definition[btData] {
	def := saga.Define[btData]("bt", saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	saga.Index(def, "payment", func(d btData) string { return d.Payment }, saga.Unique())
	saga.Index(def, "group", func(d btData) string { return d.Group })
	saga.StartedBy(def, saga.By(func(m BtOpened) string { return m.ID }),
		func(_ context.Context, c *saga.Context[btData], m BtOpened) error {
			c.Data.Payment, c.Data.Group = m.Payment, m.Group
			return nil
		})
	saga.Handles(def, saga.By(func(m BtChanged) string { return m.ID }),
		func(_ context.Context, c *saga.Context[btData], m BtChanged) error {
			c.Data.Payment = m.Payment
			return nil
		})
	saga.Handles(def, saga.ByIndex(def, "payment", func(m BtPaid) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[btData], _ BtPaid) error {
			c.Data.Paid++
			return nil
		})
	return def
}

// loadCounter counts a store's loads and listings.
type loadCounter struct {
	*memstore.Store
	loads, lists atomic.Int64
}

func (s *loadCounter) Load(ctx context.Context, key string) ([]byte, uint64, error) {
	s.loads.Add(1)
	return s.Store.Load(ctx, key)
}

func (s *loadCounter) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	s.lists.Add(1)
	return s.Store.ListKeys(ctx, prefix)
}

// btDispatcher is a dispatcher of btSaga on store whose steps' results
// Handle's hook reports in last.
func btDispatcher(t *testing.T, b *transport.Broker, store saga.Store, last *saga.StepResult) *saga.Dispatcher {
	t.Helper()
	hooks := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) { *last = r }}
	d, err := saga.NewDispatcher(b, store, "bt", saga.WithSagas(btSaga()), saga.WithHooks(hooks), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Open(t.Context()); err != nil {
		t.Fatal(err)
	}
	return d
}

// countedBt is a dispatcher of btSaga on a memstore whose loads are
// counted, on an in-memory broker, and the result of its last step.
func countedBt(t *testing.T) (*transport.Broker, *loadCounter, *saga.Dispatcher, *saga.StepResult) {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	store := &loadCounter{Store: memstore.New()}
	last := new(saga.StepResult)
	return b, store, btDispatcher(t, b, store, last), last
}

// handle sends m and hands it to d, as its receive loop would.
func handle(t *testing.T, b *transport.Broker, d *saga.Dispatcher, m any) {
	t.Helper()
	ctx := t.Context()
	if _, err := d.Send(ctx, m); err != nil {
		t.Fatal(err)
	}
	q, err := b.Queue(ctx, "bt")
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive: %d messages, %v", len(ds), err)
	}
	d.Handle(ctx, ds[0])
}

// TestByIndexLoads: a message correlated by a unique index costs one
// store read more than one correlated by its instance ID (the entry): the
// instance's record is checked on the step's own load, here from the
// dispatcher's record cache.
func TestByIndexLoads(t *testing.T) {
	b, store, d, last := countedBt(t)
	handle(t, b, d, BtOpened{"o1", "p-1", ""})
	handle(t, b, d, BtChanged{"o1", "p-1"})
	byID := store.loads.Load()
	handle(t, b, d, BtChanged{"o1", "p-1"})
	byID = store.loads.Load() - byID
	before := store.loads.Load()
	handle(t, b, d, BtPaid{"p-1"})
	got := store.loads.Load() - before
	if last.Outcome != saga.Handled || btPaid(t, d, "o1") != 1 {
		t.Fatalf("paid: %v %v, o1 paid %d", last.Outcome, last.Err, btPaid(t, d, "o1"))
	}
	if got > byID+1 {
		t.Errorf("a step correlated by a unique index read the store %d times; one by ID %d: want at most one more", got, byID)
	}
}

// TestByIndexStaleCache: a dispatcher whose cached record of an
// instance still holds a value that another dispatcher has since taken
// from it never lets a message correlated by that value reach it: the
// commit on the cached record conflicts, and the record loaded again
// does not hold the value.
func TestByIndexStaleCache(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	store := memstore.New()
	var lastA, lastB saga.StepResult
	a := btDispatcher(t, b, store, &lastA)
	other := btDispatcher(t, b, store, &lastB)
	handle(t, b, a, BtOpened{"o1", "p-1", ""})  // a caches o1 holding p-1
	handle(t, b, other, BtChanged{"o1", "p-2"}) // o1 drops p-1
	if lastB.Outcome != saga.Handled {
		t.Fatalf("change: %v %v", lastB.Outcome, lastB.Err)
	}
	handle(t, b, a, BtPaid{"p-1"})
	if lastA.Outcome != saga.DeadLettered || !errors.Is(lastA.Err, saga.ErrSagaNotFound) || btPaid(t, a, "o1") != 0 {
		t.Fatalf("paid p-1 on a: got %v %v (o1 paid %d), want dead-lettered, not found", lastA.Outcome, lastA.Err, btPaid(t, a, "o1"))
	}
}

// btPaid is the BtPaid messages committed on instance id.
func btPaid(t *testing.T, d *saga.Dispatcher, id string) int {
	t.Helper()
	data, _, err := saga.InstanceOf(t.Context(), d, btSaga(), id)
	if err != nil {
		t.Fatal(err)
	}
	return data.Paid
}

// TestFindPageReads: a page of Find on an index that is not unique reads
// the listing of the value's entries and the record of each instance on
// the page, not every entry and record of the value.
func TestFindPageReads(t *testing.T) {
	b, store, d, _ := countedBt(t)
	const n, page = 40, 5
	for i := range n {
		handle(t, b, d, BtOpened{fmt.Sprintf("o%02d", i), fmt.Sprint("p-", i), "g"})
	}
	before := store.loads.Load()
	var ids []string
	for inst, err := range d.Find(t.Context(), "bt", saga.Where("group", "g").After("o09").Limit(page)) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	reads := store.loads.Load() - before
	if want := []string{"o10", "o11", "o12", "o13", "o14"}; !slices.Equal(ids, want) {
		t.Fatalf("page: got %q, want %q", ids, want)
	}
	// The page's records, the unique entry's key and the index's build
	// state.
	if reads > page+2 {
		t.Errorf("a page of %d among %d instances read the store %d times, want at most %d", page, n, reads, page+2)
	}

	// A unique index: its entry, the record, the build state; no
	// listing.
	loads, lists := store.loads.Load(), store.lists.Load()
	ids = ids[:0]
	for inst, err := range d.Find(t.Context(), "bt", saga.Where("payment", "p-7")) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	loads, lists = store.loads.Load()-loads, store.lists.Load()-lists
	if !slices.Equal(ids, []string{"o07"}) || loads > 3 || lists != 0 {
		t.Errorf("Find by a unique index: got %q in %d reads and %d listings, want [o07] in at most 3 reads and none", ids, loads, lists)
	}
}
