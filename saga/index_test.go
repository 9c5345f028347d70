package saga_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type ixOrder struct {
	Customer string
	Payment  string
	Tags     []string
	Paid     int
	Bad      string // an index value the test sets to bad input
}

type IxPlaced struct{ ID, Customer, Payment string }
type IxChanged struct{ ID, Customer, Payment, Bad string }
type IxClosed struct{ ID string }
type IxPaid struct{ Payment string }
type IxByCustomer struct{ Customer string }
type IxCheckout struct{ Payment, Customer string } // starts by the unique index

func (IxPlaced) MessageName() string     { return "ix.Placed" }
func (IxChanged) MessageName() string    { return "ix.Changed" }
func (IxClosed) MessageName() string     { return "ix.Closed" }
func (IxPaid) MessageName() string       { return "ix.Paid" }
func (IxByCustomer) MessageName() string { return "ix.ByCustomer" }
func (IxCheckout) MessageName() string   { return "ix.Checkout" }

// ixSaga: customer (not unique), payment (unique), tag (several
// values), and bad (for bad input).
func ixSaga() *saga.Definition[ixOrder] {
	def := saga.Define[ixOrder]("ixorder", saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	saga.Index(def, "customer", func(o ixOrder) string { return o.Customer })
	saga.Index(def, "payment", func(o ixOrder) string { return o.Payment }, saga.Unique())
	saga.IndexValues(def, "tag", func(o ixOrder) []string { return o.Tags })
	saga.Index(def, "bad", func(o ixOrder) string {
		if o.Bad == "panic" {
			panic("index function fails")
		}
		return o.Bad
	})
	saga.StartedBy(def, saga.By(func(m IxPlaced) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], m IxPlaced) error {
			c.Data.Customer, c.Data.Payment, c.Data.Tags = m.Customer, m.Payment, []string{"new", m.Customer}
			return nil
		})
	saga.StartedBy(def, saga.ByIndex(def, "payment", func(m IxCheckout) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[ixOrder], m IxCheckout) error {
			c.Data.Customer, c.Data.Payment = m.Customer, m.Payment
			c.Data.Paid++ // each checkout that reaches the instance
			return nil
		})
	saga.Handles(def, saga.By(func(m IxChanged) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], m IxChanged) error {
			c.Data.Customer, c.Data.Payment, c.Data.Bad = m.Customer, m.Payment, m.Bad
			return nil
		})
	saga.Handles(def, saga.By(func(m IxClosed) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], _ IxClosed) error {
			c.MarkComplete()
			return nil
		})
	saga.Handles(def, saga.ByIndex(def, "payment", func(m IxPaid) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[ixOrder], _ IxPaid) error {
			c.Data.Paid++
			return nil
		})
	saga.Handles(def, saga.ByIndex(def, "customer", func(m IxByCustomer) string { return m.Customer }),
		func(_ context.Context, c *saga.Context[ixOrder], _ IxByCustomer) error {
			c.Data.Paid++
			return nil
		})
	return def
}

// ixEnv runs dispatchers of ixSaga on one store and reports each
// step's result by message ID.
type ixEnv struct {
	t     *testing.T
	b     *transport.Broker
	store saga.Store
	ds    []*saga.Dispatcher

	mu      sync.Mutex
	results map[string][]saga.StepResult
	changed chan struct{}
}

func newIxEnv(t *testing.T, store saga.Store, dispatchers int) *ixEnv {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	e := &ixEnv{t: t, b: b, store: store, results: make(map[string][]saga.StepResult), changed: make(chan struct{}, 1)}
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		e.mu.Lock()
		e.results[info.MessageID] = append(e.results[info.MessageID], res)
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}}
	for range dispatchers {
		d, err := saga.NewDispatcher(b, store, "ixorders", saga.WithSagas(ixSaga()), saga.WithHooks(hooks),
			saga.WithLogger(testutil.Logger()), saga.WithRecordCache(0), saga.WithReceiveBatch(1))
		if err != nil {
			t.Fatal(err)
		}
		testutil.RunUntilCleanup(t, d.Run)
		e.ds = append(e.ds, d)
	}
	return e
}

// send sends m with message ID id and waits for its final result (not
// a retry).
func (e *ixEnv) send(id string, m any) saga.StepResult {
	e.t.Helper()
	if _, err := e.ds[0].Send(e.t.Context(), m, saga.WithMessageID(id)); err != nil {
		e.t.Fatal(err)
	}
	return e.await(id)
}

func (e *ixEnv) await(id string) saga.StepResult {
	e.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		e.mu.Lock()
		rs := e.results[id]
		e.mu.Unlock()
		if n := len(rs); n > 0 && rs[n-1].Outcome != saga.Retried && rs[n-1].Outcome != saga.Abandoned {
			return rs[n-1]
		}
		select {
		case <-e.changed:
		case <-deadline:
			e.t.Fatalf("message %s: no final result; got %v", id, rs)
		}
	}
}

func (e *ixEnv) find(name, value string) []string {
	e.t.Helper()
	var ids []string
	for inst, err := range saga.Find(e.t.Context(), e.ds[0], ixSaga(), saga.Where(name, value)) {
		if err != nil {
			e.t.Fatalf("Find(%s=%s): %v", name, value, err)
		}
		ids = append(ids, inst.ID)
	}
	return ids
}

func (e *ixEnv) paid(id string) int {
	e.t.Helper()
	o, _, err := saga.InstanceOf(e.t.Context(), e.ds[0], ixSaga(), id)
	if err != nil {
		e.t.Fatalf("instance %s: %v", id, err)
	}
	return o.Paid
}

func wantIDs(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
}

// TestIndexFind: Find yields the instances that hold a value, in ID
// order; a changed value moves the instance; a completed instance leaves
// every index; a value of several is found by each.
func TestIndexFind(t *testing.T) {
	e := newIxEnv(t, memstore.New(), 1)
	for _, m := range []IxPlaced{{"o2", "c-1", "p-2"}, {"o1", "c-1", "p-1"}, {"o3", "c-2", "p-3"}} {
		if r := e.send("place-"+m.ID, m); r.Outcome != saga.Handled {
			t.Fatalf("place %s: %v %v", m.ID, r.Outcome, r.Err)
		}
	}
	wantIDs(t, "customer c-1", e.find("customer", "c-1"), "o1", "o2")
	wantIDs(t, "payment p-3", e.find("payment", "p-3"), "o3")
	wantIDs(t, "tag new", e.find("tag", "new"), "o1", "o2", "o3")
	wantIDs(t, "tag c-2", e.find("tag", "c-2"), "o3")

	e.send("change-o2", IxChanged{ID: "o2", Customer: "c-2", Payment: "p-2"})
	wantIDs(t, "customer c-1 after the change", e.find("customer", "c-1"), "o1")
	wantIDs(t, "customer c-2 after the change", e.find("customer", "c-2"), "o2", "o3")

	e.send("close-o3", IxClosed{ID: "o3"})
	wantIDs(t, "customer c-2 after completion", e.find("customer", "c-2"), "o2")
	wantIDs(t, "payment p-3 after completion", e.find("payment", "p-3"))

	// Paged.
	var page []string
	for inst, err := range e.ds[0].Find(t.Context(), "ixorder", saga.Where("tag", "new").After("o1").Limit(1)) {
		if err != nil {
			t.Fatal(err)
		}
		page = append(page, inst.ID)
	}
	wantIDs(t, "tag new after o1, limit 1", page, "o2")
}

// TestByIndexCorrelates: a message correlated by a unique index reaches
// the instance that holds its value; one whose value no instance holds
// goes to the NotFoundPolicy (dead-lettered here); on a non-unique index
// a value held by two instances is dead-lettered with ErrAmbiguousIndex.
func TestByIndexCorrelates(t *testing.T) {
	e := newIxEnv(t, memstore.New(), 1)
	e.send("place-o1", IxPlaced{"o1", "c-1", "p-1"})
	e.send("place-o2", IxPlaced{"o2", "c-1", "p-2"})
	e.send("place-o3", IxPlaced{"o3", "c-3", "p-3"})

	if r := e.send("paid-1", IxPaid{Payment: "p-2"}); r.Outcome != saga.Handled {
		t.Fatalf("paid p-2: %v %v", r.Outcome, r.Err)
	}
	if got := e.paid("o2"); got != 1 {
		t.Fatalf("o2 paid %d times, want 1", got)
	}
	r := e.send("paid-2", IxPaid{Payment: "p-9"})
	if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrSagaNotFound) {
		t.Fatalf("paid p-9: got %v %v, want dead-lettered, saga not found", r.Outcome, r.Err)
	}
	if r := e.send("cust-3", IxByCustomer{Customer: "c-3"}); r.Outcome != saga.Handled {
		t.Fatalf("customer c-3: %v %v", r.Outcome, r.Err)
	}
	r = e.send("cust-1", IxByCustomer{Customer: "c-1"})
	if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrAmbiguousIndex) {
		t.Fatalf("customer c-1: got %v %v, want dead-lettered, ErrAmbiguousIndex", r.Outcome, r.Err)
	}
}

// createGate is a store whose first writes of entries of the payment
// index (Put with revision 0) wait until n of them are waiting (or a few
// seconds have passed): steps that start instances all look the value up
// before any of them has written.
type createGate struct {
	saga.ListingStore
	n       int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (g *createGate) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 && strings.HasPrefix(key, "_ix.ixorder.payment.") {
		g.mu.Lock()
		if g.waiting++; g.waiting == g.n {
			close(g.all)
		}
		g.mu.Unlock()
		select {
		case <-g.all:
		case <-time.After(3 * time.Second): // fewer than n started at once
		}
	}
	return g.ListingStore.Put(ctx, key, value, rev)
}

// TestUniqueIndexStartsOnce: starts with the same value of a unique index,
// sent at once to three dispatchers (as three processes) on one store,
// make one instance, which each of them reaches. The first writes of the
// value's entries wait for each other, so that the first starts all look
// it up before any of them writes.
func TestUniqueIndexStartsOnce(t *testing.T) {
	e := newIxEnv(t, &createGate{ListingStore: memstore.New(), n: 3, all: make(chan struct{})}, 3)
	const n = 12
	for i := range n {
		if _, err := e.ds[i%3].Send(t.Context(), IxCheckout{Payment: "p-1", Customer: "c-1"}, saga.WithMessageID(fmt.Sprint("co-", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if r := e.await(fmt.Sprint("co-", i)); r.Outcome != saga.Handled {
			t.Fatalf("checkout %d: %v %v", i, r.Outcome, r.Err)
		}
	}
	ids := e.find("payment", "p-1")
	if len(ids) != 1 {
		t.Fatalf("instances holding p-1: %q, want one", ids)
	}
	if got := e.paid(ids[0]); got != n {
		t.Fatalf("the instance was reached %d times, want %d", got, n)
	}
}

// TestUniqueIndexTaken: a step that gives a unique index a value another
// live instance holds is dead-lettered with ErrIndexValueTaken, and
// changes nothing; once the holder completes, the value is free.
func TestUniqueIndexTaken(t *testing.T) {
	e := newIxEnv(t, memstore.New(), 1)
	e.send("place-o1", IxPlaced{"o1", "c-1", "p-1"})
	e.send("place-o2", IxPlaced{"o2", "c-2", "p-2"})
	r := e.send("steal", IxChanged{ID: "o2", Customer: "c-2", Payment: "p-1"})
	if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrIndexValueTaken) {
		t.Fatalf("got %v %v, want dead-lettered, ErrIndexValueTaken", r.Outcome, r.Err)
	}
	wantIDs(t, "payment p-1", e.find("payment", "p-1"), "o1")
	wantIDs(t, "payment p-2", e.find("payment", "p-2"), "o2")
	e.send("close-o1", IxClosed{ID: "o1"})
	if r := e.send("steal-again", IxChanged{ID: "o2", Customer: "c-2", Payment: "p-1"}); r.Outcome != saga.Handled {
		t.Fatalf("after o1 completed: %v %v", r.Outcome, r.Err)
	}
	wantIDs(t, "payment p-1 after", e.find("payment", "p-1"), "o2")
	wantIDs(t, "payment p-2 after", e.find("payment", "p-2"))
}

// TestIndexBadInput: bad index values from a step's data and from a
// message are dead-lettered as Permanent errors matching
// ErrInvalidIndexValue; a bad name or value in a query is refused; bad
// declarations fail the definition.
func TestIndexBadInput(t *testing.T) {
	e := newIxEnv(t, memstore.New(), 1)
	e.send("place-o1", IxPlaced{"o1", "c-1", "p-1"})
	for i, bad := range []string{"a\x00b", strings.Repeat("x", saga.MaxIndexValueLen+1), "a\u0085b", "panic"} {
		r := e.send(fmt.Sprint("bad-", i), IxChanged{ID: "o1", Customer: "c-1", Payment: "p-1", Bad: bad})
		if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrInvalidIndexValue) || !errors.Is(r.Err, saga.ErrPermanent) {
			t.Errorf("value %.20q: got %v %v, want dead-lettered, permanent, ErrInvalidIndexValue", bad, r.Outcome, r.Err)
		}
	}
	r := e.send("paid-bad", IxPaid{Payment: "p.*>\x01"})
	if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrInvalidIndexValue) {
		t.Errorf("ByIndex with a bad value: got %v %v", r.Outcome, r.Err)
	}
	// Values with subject wildcards are only encoded: found as given.
	e.send("odd", IxChanged{ID: "o1", Customer: "c.*>", Payment: "p-1"})
	wantIDs(t, "customer c.*>", e.find("customer", "c.*>"), "o1")
	wantIDs(t, "customer c", e.find("customer", "c"))

	for _, q := range []struct {
		q    saga.Query
		want error
	}{
		{saga.Where("no such", "v"), saga.ErrInvalidIndex},
		{saga.Where("customer", ""), saga.ErrInvalidIndexValue},
		{saga.Where("customer", "a\nb"), saga.ErrInvalidIndexValue},
	} {
		for _, err := range e.ds[0].Find(t.Context(), "ixorder", q.q) {
			if !errors.Is(err, q.want) {
				t.Errorf("Find(%v): got %v, want %v", q.q, err, q.want)
			}
		}
	}
	for _, err := range saga.Find(t.Context(), e.ds[0], ixSaga(), saga.Where("undeclared", "v")) {
		if !errors.Is(err, saga.ErrInvalidIndex) {
			t.Errorf("Find of an undeclared index: got %v, want ErrInvalidIndex", err)
		}
	}
	for name, declare := range map[string]func(*saga.Definition[ixOrder]){
		"bad name": func(d *saga.Definition[ixOrder]) { saga.Index(d, "a.b", func(ixOrder) string { return "" }) },
		"twice": func(d *saga.Definition[ixOrder]) {
			saga.Index(d, "a", func(ixOrder) string { return "" })
			saga.Index(d, "a", func(ixOrder) string { return "" })
		},
	} {
		d := saga.Define[ixOrder]("bad")
		saga.StartedBy(d, saga.By(func(m IxPlaced) string { return m.ID }), func(context.Context, *saga.Context[ixOrder], IxPlaced) error { return nil })
		declare(d)
		_, err := saga.NewDispatcher(e.b, memstore.New(), "bad", saga.WithSagas(d))
		if !errors.Is(err, saga.ErrInvalidDefinition) || !errors.Is(err, saga.ErrInvalidIndex) {
			t.Errorf("%s: got %v, want ErrInvalidDefinition and ErrInvalidIndex", name, err)
		}
	}
}

// haltStore holds the Put of one record key (the record, not its index
// entries) until released, and then fails it as a process killed before
// the write would: the step's index entries are written, its record is
// not.
type haltStore struct {
	saga.ListingStore
	key     string
	reached chan struct{}
	release chan struct{}
	armed   atomic.Bool
	dies    bool // the step dies for good: its record is never written
}

var errKilled = errors.New("killed between the index entries and the record")

func (s *haltStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if key == s.key {
		if s.dies && s.armed.CompareAndSwap(true, false) {
			return 0, saga.Permanent(errKilled)
		}
		if s.armed.CompareAndSwap(true, false) {
			close(s.reached)
			<-s.release
			return 0, errKilled
		}
	}
	return s.ListingStore.Put(ctx, key, value, rev)
}

// TestIndexKilledBetweenWrites: while a step's index entries are written
// and its record is not (and after it dies there), Find returns no
// instance for the new values, still the instance for its old ones, and
// a message correlated by the new value does not reach it. Once the step
// runs again, both hold.
func TestIndexKilledBetweenWrites(t *testing.T) {
	store := &haltStore{ListingStore: memstore.New(), key: saga.StoreKey("ixorder", "o1"),
		reached: make(chan struct{}), release: make(chan struct{})}
	e := newIxEnv(t, store, 1)
	e.send("place-o1", IxPlaced{"o1", "c-1", "p-1"})
	store.armed.Store(true)
	if _, err := e.ds[0].Send(t.Context(), IxChanged{ID: "o1", Customer: "c-2", Payment: "p-2"}, saga.WithMessageID("change")); err != nil {
		t.Fatal(err)
	}
	<-store.reached
	check := func(when string) {
		t.Helper()
		wantIDs(t, when+": customer c-2", e.find("customer", "c-2"))
		wantIDs(t, when+": payment p-2", e.find("payment", "p-2"))
		wantIDs(t, when+": customer c-1", e.find("customer", "c-1"), "o1")
		wantIDs(t, when+": payment p-1", e.find("payment", "p-1"), "o1")
	}
	check("entries written, record not")
	close(store.release)
	if r := e.await("change"); r.Outcome != saga.Handled {
		t.Fatalf("change: %v %v", r.Outcome, r.Err)
	}
	wantIDs(t, "customer c-2 after", e.find("customer", "c-2"), "o1")
	wantIDs(t, "payment p-2 after", e.find("payment", "p-2"), "o1")
	wantIDs(t, "customer c-1 after", e.find("customer", "c-1"))
	wantIDs(t, "payment p-1 after", e.find("payment", "p-1"))
}

// TestIndexStepDiedAfterEntries: a step that wrote its index entries and
// died before its record leaves entries that no read takes: Find does
// not return the instance for the new values, a message correlated by
// one does not reach it, and once the record moves on the values are
// free for another instance of a unique index.
func TestIndexStepDiedAfterEntries(t *testing.T) {
	store := &haltStore{ListingStore: memstore.New(), key: saga.StoreKey("ixorder", "o1"), dies: true}
	e := newIxEnv(t, store, 1)
	e.send("place-o1", IxPlaced{"o1", "c-1", "p-1"})
	store.armed.Store(true)
	if r := e.send("change", IxChanged{ID: "o1", Customer: "c-2", Payment: "p-2"}); r.Outcome != saga.DeadLettered || !errors.Is(r.Err, errKilled) {
		t.Fatalf("change: got %v %v, want dead-lettered by the kill", r.Outcome, r.Err)
	}
	wantIDs(t, "customer c-2", e.find("customer", "c-2"))
	wantIDs(t, "payment p-2", e.find("payment", "p-2"))
	wantIDs(t, "customer c-1", e.find("customer", "c-1"), "o1")
	wantIDs(t, "payment p-1", e.find("payment", "p-1"), "o1")

	// The instance's record moves on (values unchanged): the entries of
	// the step that died are stale.
	if r := e.send("touch", IxChanged{ID: "o1", Customer: "c-1", Payment: "p-1"}); r.Outcome != saga.Handled {
		t.Fatalf("touch: %v %v", r.Outcome, r.Err)
	}
	if r := e.send("paid", IxPaid{Payment: "p-2"}); r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrSagaNotFound) {
		t.Fatalf("paid p-2: got %v %v, want dead-lettered, saga not found", r.Outcome, r.Err)
	}
	if r := e.send("cust", IxByCustomer{Customer: "c-2"}); r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrSagaNotFound) {
		t.Fatalf("customer c-2: got %v %v, want dead-lettered, saga not found", r.Outcome, r.Err)
	}
	if r := e.send("place-o2", IxPlaced{"o2", "c-2", "p-2"}); r.Outcome != saga.Handled {
		t.Fatalf("o2 takes p-2: %v %v", r.Outcome, r.Err)
	}
	wantIDs(t, "payment p-2 at last", e.find("payment", "p-2"), "o2")
	wantIDs(t, "customer c-2 at last", e.find("customer", "c-2"), "o2")
	if got := e.paid("o1"); got != 0 {
		t.Fatalf("o1 was reached %d times by messages for values it never held", got)
	}
}
