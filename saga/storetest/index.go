package storetest

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// The index cases: a saga with indexes (saga.Index) run by dispatchers on
// the store under test, on an in-memory transport. Their entries are keys
// of the store ("=ix.SAGA.INDEX.VALUE[.ID]", saga.IndexKeyPrefix) that must be written, loaded,
// deleted and listed by prefix as records are (see saga/index.go).

type ixOrder struct {
	Customer string
	Payment  string
	Tags     []string
	Paid     int
	Bad      string // an index value the test sets to bad input
}

type ixPlaced struct{ ID, Customer, Payment string }
type ixChanged struct{ ID, Customer, Payment, Bad string }
type ixClosed struct{ ID string }
type ixPaid struct{ Payment string }
type ixByCustomer struct{ Customer string }
type ixCheckout struct{ Payment, Customer string } // starts by the unique index

func (ixPlaced) MessageName() string     { return "storetest.ix.Placed" }
func (ixChanged) MessageName() string    { return "storetest.ix.Changed" }
func (ixClosed) MessageName() string     { return "storetest.ix.Closed" }
func (ixPaid) MessageName() string       { return "storetest.ix.Paid" }
func (ixByCustomer) MessageName() string { return "storetest.ix.ByCustomer" }
func (ixCheckout) MessageName() string   { return "storetest.ix.Checkout" }

// ixSaga is an order saga named name with the indexes customer (not
// unique), payment (unique), tag (several values) and bad (bad input).
func ixSaga(name string) *saga.Definition[ixOrder] { return ixSagaOf(name, true) }

// ixSagaOf is ixSaga, without its indexes unless indexes.
func ixSagaOf(name string, indexes bool) *saga.Definition[ixOrder] {
	def := saga.Define[ixOrder](name, saga.WhenNotFound(saga.NotFoundPolicy{DeadLetter: true}))
	if indexes {
		declareIndexes(def)
	}
	addRoutes(def)
	return def
}

func declareIndexes(def *saga.Definition[ixOrder]) {
	saga.Index(def, "customer", func(o ixOrder) string { return o.Customer })
	saga.Index(def, "payment", func(o ixOrder) string { return o.Payment }, saga.Unique())
	saga.IndexValues(def, "tag", func(o ixOrder) []string { return o.Tags })
	saga.Index(def, "bad", func(o ixOrder) string {
		if o.Bad == "panic" {
			panic("index function fails")
		}
		return o.Bad
	})
}

func addRoutes(def *saga.Definition[ixOrder]) {
	saga.StartedBy(def, saga.By(func(m ixPlaced) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], m ixPlaced) error {
			c.Data.Customer, c.Data.Payment, c.Data.Tags = m.Customer, m.Payment, []string{"new", m.Customer}
			return nil
		})
	saga.StartedBy(def, saga.ByIndex(def, "payment", func(m ixCheckout) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[ixOrder], m ixCheckout) error {
			c.Data.Customer, c.Data.Payment = m.Customer, m.Payment
			c.Data.Paid++ // each checkout that reaches the instance
			return nil
		})
	saga.Handles(def, saga.By(func(m ixChanged) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], m ixChanged) error {
			c.Data.Customer, c.Data.Payment, c.Data.Bad = m.Customer, m.Payment, m.Bad
			return nil
		})
	saga.Handles(def, saga.By(func(m ixClosed) string { return m.ID }),
		func(_ context.Context, c *saga.Context[ixOrder], _ ixClosed) error {
			c.MarkComplete()
			return nil
		})
	saga.Handles(def, saga.ByIndex(def, "payment", func(m ixPaid) string { return m.Payment }),
		func(_ context.Context, c *saga.Context[ixOrder], _ ixPaid) error {
			c.Data.Paid++
			return nil
		})
	saga.Handles(def, saga.ByIndex(def, "customer", func(m ixByCustomer) string { return m.Customer }),
		func(_ context.Context, c *saga.Context[ixOrder], _ ixByCustomer) error {
			c.Data.Paid++
			return nil
		})
}

// ixEnv runs dispatchers of an ixSaga on one store and reports each
// step's result by message ID.
type ixEnv struct {
	t    *testing.T
	name string
	def  *saga.Definition[ixOrder]
	ds   []*saga.Dispatcher

	mu      sync.Mutex
	results map[string][]saga.StepResult
	changed chan struct{}
}

// newIxEnv runs n dispatchers of saga name on store; the saga's name
// keeps its keys apart from the other cases'.
func newIxEnv(t *testing.T, store saga.Store, name string, n int) *ixEnv {
	t.Helper()
	return newIxEnvOf(t, store, ixSaga(name), n)
}

// indexCase runs an index case on a store that lists its keys, and skips
// it, saying why, on one that does not.
func indexCase(run func(t *testing.T, s saga.Store, f Features)) func(t *testing.T, s saga.Store, f Features) {
	return func(t *testing.T, s saga.Store, f Features) {
		if _, ok := s.(saga.ListingStore); !ok {
			t.Skipf("the store (%T) is not a saga.ListingStore: indexes that are not unique need one", s)
		}
		run(t, s, f)
	}
}

// newIxEnvOf runs n dispatchers of def on store.
func newIxEnvOf(t *testing.T, store saga.Store, def *saga.Definition[ixOrder], n int) *ixEnv {
	t.Helper()
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	name := def.Name()
	e := &ixEnv{t: t, name: name, def: def, results: make(map[string][]saga.StepResult), changed: make(chan struct{}, 1)}
	hooks := saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		e.mu.Lock()
		e.results[info.MessageID] = append(e.results[info.MessageID], res)
		e.mu.Unlock()
		select {
		case e.changed <- struct{}{}:
		default:
		}
	}}
	for range n {
		d, err := saga.NewDispatcher(b, store, name+"-q", saga.WithSagas(e.def), saga.WithHooks(hooks),
			saga.WithLogger(slog.New(slog.DiscardHandler)), saga.WithRecordCache(0), saga.WithReceiveBatch(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("dispatcher: %v", err)
			}
		})
		e.ds = append(e.ds, d)
	}
	return e
}

// send sends m with message ID id and waits for its final result.
func (e *ixEnv) send(id string, m any) saga.StepResult {
	e.t.Helper()
	if _, err := e.ds[0].Send(e.t.Context(), m, saga.WithMessageID(id)); err != nil {
		e.t.Fatal(err)
	}
	return e.await(id)
}

// await waits for the final result (not a delayed retry) of message id.
func (e *ixEnv) await(id string) saga.StepResult {
	e.t.Helper()
	deadline := time.After(30 * time.Second)
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

func (e *ixEnv) want(id string, m any, outcome saga.Outcome, err error) {
	e.t.Helper()
	r := e.send(id, m)
	if r.Outcome != outcome || err == nil && r.Err != nil || err != nil && !errors.Is(r.Err, err) {
		e.t.Fatalf("%s (%T): got %v %v, want %v %v", id, m, r.Outcome, r.Err, outcome, err)
	}
}

func (e *ixEnv) find(index, value string) []string {
	e.t.Helper()
	ids := []string{}
	for inst, err := range saga.Find(e.t.Context(), e.ds[0], e.def, saga.Where(index, value)) {
		if err != nil {
			e.t.Fatalf("Find(%s=%s): %v", index, value, err)
		}
		ids = append(ids, inst.ID)
	}
	return ids
}

func (e *ixEnv) wantFound(index, value string, want ...string) {
	e.t.Helper()
	if got := e.find(index, value); !slices.Equal(got, append([]string{}, want...)) {
		e.t.Fatalf("Find(%s=%q): got %q, want %q", index, value, got, want)
	}
}

func (e *ixEnv) paid(id string) int {
	e.t.Helper()
	o, _, err := saga.InstanceOf(e.t.Context(), e.ds[0], e.def, id)
	if err != nil {
		e.t.Fatalf("instance %s: %v", id, err)
	}
	return o.Paid
}

// listing adds ListKeys to a wrapper of the store under test.
type listing struct{ saga.Store }

func (l listing) ListKeys(ctx context.Context, prefix string) iter.Seq2[string, error] {
	return l.Store.(saga.ListingStore).ListKeys(ctx, prefix)
}

// testIndexFind: Find yields the instances that hold a value, in ID
// order; a changed value moves the instance; a completed instance leaves
// every index; a value of several is found by each; pages.
func testIndexFind(t *testing.T, s saga.Store, _ Features) {
	e := newIxEnv(t, s, "storetestixfind", 1)
	for _, m := range []ixPlaced{{"o2", "c-1", "p-2"}, {"o1", "c-1", "p-1"}, {"o3", "c-2", "p-3"}} {
		e.want("place-"+m.ID, m, saga.Handled, nil)
	}
	e.wantFound("customer", "c-1", "o1", "o2")
	e.wantFound("payment", "p-3", "o3")
	e.wantFound("tag", "new", "o1", "o2", "o3")
	e.wantFound("tag", "c-2", "o3")

	e.want("change-o2", ixChanged{ID: "o2", Customer: "c-2", Payment: "p-2"}, saga.Handled, nil)
	e.wantFound("customer", "c-1", "o1")
	e.wantFound("customer", "c-2", "o2", "o3")

	// A value dropped and taken again before any read: its old entry is
	// still there when the step writes it again.
	e.want("away-o1", ixChanged{ID: "o1", Customer: "c-9", Payment: "p-9"}, saga.Handled, nil)
	e.want("back-o1", ixChanged{ID: "o1", Customer: "c-1", Payment: "p-1"}, saga.Handled, nil)
	e.wantFound("customer", "c-1", "o1")
	e.wantFound("payment", "p-1", "o1")
	e.wantFound("customer", "c-9")

	e.want("close-o3", ixClosed{ID: "o3"}, saga.Handled, nil)
	e.wantFound("customer", "c-2", "o2")
	e.wantFound("payment", "p-3")

	var page []string
	for inst, err := range e.ds[0].Find(t.Context(), e.name, saga.Where("tag", "new").After("o1").Limit(1)) {
		if err != nil {
			t.Fatal(err)
		}
		page = append(page, inst.ID)
	}
	if !slices.Equal(page, []string{"o2"}) {
		t.Fatalf("tag new after o1, limit 1: got %q, want [o2]", page)
	}
}

// testByIndex: a message correlated by a unique index reaches the
// instance that holds its value; one whose value no instance holds goes
// to the NotFoundPolicy (dead-lettered here); on a non-unique index a
// value two instances hold is dead-lettered with ErrAmbiguousIndex.
func testByIndex(t *testing.T, s saga.Store, _ Features) {
	e := newIxEnv(t, s, "storetestixby", 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	e.want("place-o2", ixPlaced{"o2", "c-1", "p-2"}, saga.Handled, nil)
	e.want("place-o3", ixPlaced{"o3", "c-3", "p-3"}, saga.Handled, nil)
	e.want("paid-1", ixPaid{Payment: "p-2"}, saga.Handled, nil)
	if got := e.paid("o2"); got != 1 {
		t.Fatalf("o2 paid %d times, want 1", got)
	}
	e.want("paid-2", ixPaid{Payment: "p-9"}, saga.DeadLettered, saga.ErrSagaNotFound)
	e.want("cust-3", ixByCustomer{Customer: "c-3"}, saga.Handled, nil)
	e.want("cust-1", ixByCustomer{Customer: "c-1"}, saga.DeadLettered, saga.ErrAmbiguousIndex)
}

// testByIndexMoved: a message correlated by a unique index whose entry
// still names an instance that dropped the value (the entry is stale:
// no read has deleted it yet) or that completed never reaches that
// instance; once another instance takes the value, it reaches that one.
// (ByIndex takes the instance the entry names and checks its record
// when the step loads it: a check that passed a record without the
// value would be caught here.)
func testByIndexMoved(t *testing.T, s saga.Store, _ Features) {
	e := newIxEnv(t, s, "storetestixmoved", 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	e.want("place-o2", ixPlaced{"o2", "c-2", "p-2"}, saga.Handled, nil)
	e.want("drop-o1", ixChanged{ID: "o1", Customer: "c-1", Payment: "p-9"}, saga.Handled, nil)
	e.want("paid-1", ixPaid{Payment: "p-1"}, saga.DeadLettered, saga.ErrSagaNotFound)
	e.want("take-o2", ixChanged{ID: "o2", Customer: "c-2", Payment: "p-1"}, saga.Handled, nil)
	e.want("paid-2", ixPaid{Payment: "p-1"}, saga.Handled, nil)
	if got := e.paid("o2"); got != 1 {
		t.Fatalf("o2 was reached %d times, want 1", got)
	}
	e.want("close-o2", ixClosed{ID: "o2"}, saga.Handled, nil)
	e.want("paid-3", ixPaid{Payment: "p-1"}, saga.DeadLettered, saga.ErrSagaNotFound)
	if got := e.paid("o1"); got != 0 {
		t.Fatalf("o1 was reached %d times by a value it had dropped", got)
	}
}

// createGate holds the first writes of entries of the payment index (Put
// with revision 0) until n of them wait (or a few seconds have passed):
// the first starts all look the value up before any of them writes.
type createGate struct {
	listing
	prefix  string
	n       int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
}

func (g *createGate) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 && strings.HasPrefix(key, g.prefix) {
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
	return g.Store.Put(ctx, key, value, rev)
}

// testIndexUniqueStarts: starts with the same value of a unique index,
// sent at once to three dispatchers (as three processes) on one store,
// make one instance, which each of them reaches.
func testIndexUniqueStarts(t *testing.T, s saga.Store, _ Features) {
	const name = "storetestixuniq"
	e := newIxEnv(t, &createGate{listing: listing{s}, prefix: saga.IndexKeyPrefix + name + ".payment.", n: 3, all: make(chan struct{})}, name, 3)
	const n = 12
	for i := range n {
		if _, err := e.ds[i%3].Send(t.Context(), ixCheckout{Payment: "p-1", Customer: "c-1"}, saga.WithMessageID(fmt.Sprint("co-", i))); err != nil {
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

// testIndexUniqueTaken: a step that gives a unique index a value another
// live instance holds is dead-lettered with ErrIndexValueTaken and
// changes nothing; once the holder completes, the value is free.
func testIndexUniqueTaken(t *testing.T, s saga.Store, _ Features) {
	e := newIxEnv(t, s, "storetestixtaken", 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	e.want("place-o2", ixPlaced{"o2", "c-2", "p-2"}, saga.Handled, nil)
	e.want("steal", ixChanged{ID: "o2", Customer: "c-2", Payment: "p-1"}, saga.DeadLettered, saga.ErrIndexValueTaken)
	e.wantFound("payment", "p-1", "o1")
	e.wantFound("payment", "p-2", "o2")
	e.want("close-o1", ixClosed{ID: "o1"}, saga.Handled, nil)
	e.want("steal-again", ixChanged{ID: "o2", Customer: "c-2", Payment: "p-1"}, saga.Handled, nil)
	e.wantFound("payment", "p-1", "o2")
	e.wantFound("payment", "p-2")
}

// testIndexBadInput: bad index values from a step's data and from a
// message are dead-lettered as Permanent errors matching
// ErrInvalidIndexValue; values with subject wildcards and dots are found
// as given (they reach keys only encoded); bad queries are refused.
func testIndexBadInput(t *testing.T, s saga.Store, _ Features) {
	e := newIxEnv(t, s, "storetestixbad", 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	for i, bad := range []string{"a\x00b", strings.Repeat("x", saga.MaxIndexValueLen+1), "a\u0085b", "panic"} {
		r := e.send(fmt.Sprint("bad-", i), ixChanged{ID: "o1", Customer: "c-1", Payment: "p-1", Bad: bad})
		if r.Outcome != saga.DeadLettered || !errors.Is(r.Err, saga.ErrInvalidIndexValue) || !errors.Is(r.Err, saga.ErrPermanent) {
			t.Errorf("value %.20q: got %v %v, want dead-lettered, permanent, ErrInvalidIndexValue", bad, r.Outcome, r.Err)
		}
	}
	e.want("paid-bad", ixPaid{Payment: "p\x01"}, saga.DeadLettered, saga.ErrInvalidIndexValue)
	e.want("odd", ixChanged{ID: "o1", Customer: "c.*> x", Payment: "p-1"}, saga.Handled, nil)
	e.wantFound("customer", "c.*> x", "o1")
	e.wantFound("customer", "c")
	e.wantFound("customer", "c.*")
	for _, q := range []struct {
		q    saga.Query
		want error
	}{
		{saga.Where("no such", "v"), saga.ErrInvalidIndex},
		{saga.Where("customer", ""), saga.ErrInvalidIndexValue},
		{saga.Where("customer", "a\nb"), saga.ErrInvalidIndexValue},
	} {
		for _, err := range e.ds[0].Find(t.Context(), e.name, q.q) {
			if !errors.Is(err, q.want) {
				t.Errorf("Find(%+v): got %v, want %v", q.q, err, q.want)
			}
		}
	}
	for _, err := range saga.Find(t.Context(), e.ds[0], e.def, saga.Where("undeclared", "v")) {
		if !errors.Is(err, saga.ErrInvalidIndex) {
			t.Errorf("Find of an undeclared index: got %v, want ErrInvalidIndex", err)
		}
	}
}

// errKilled is how haltStore fails the record's write.
var errKilled = errors.New("storetest: killed between the index entries and the record")

// haltStore fails the next Put of one record key once armed, as a process
// killed after the step's index entries were written and before its
// record: held until released (then retried), or for good (dies).
type haltStore struct {
	listing
	key     string
	reached chan struct{}
	release chan struct{}
	armed   atomic.Bool
	dies    bool
}

func (s *haltStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if key == s.key && s.armed.CompareAndSwap(true, false) {
		if s.dies {
			return 0, saga.Permanent(errKilled)
		}
		close(s.reached)
		<-s.release
		return 0, errKilled
	}
	return s.Store.Put(ctx, key, value, rev)
}

// testIndexKilledBetweenWrites: while a step's index entries are written
// and its record is not, Find returns no instance for the new values and
// still the instance for its old ones; once the step runs again, the
// reverse.
func testIndexKilledBetweenWrites(t *testing.T, s saga.Store, _ Features) {
	const name = "storetestixkill"
	hs := &haltStore{listing: listing{s}, key: saga.StoreKey(name, "o1"), reached: make(chan struct{}), release: make(chan struct{})}
	e := newIxEnv(t, hs, name, 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	hs.armed.Store(true)
	if _, err := e.ds[0].Send(t.Context(), ixChanged{ID: "o1", Customer: "c-2", Payment: "p-2"}, saga.WithMessageID("change")); err != nil {
		t.Fatal(err)
	}
	<-hs.reached
	e.wantFound("customer", "c-2")
	e.wantFound("payment", "p-2")
	e.wantFound("customer", "c-1", "o1")
	e.wantFound("payment", "p-1", "o1")
	close(hs.release)
	if r := e.await("change"); r.Outcome != saga.Handled {
		t.Fatalf("change: %v %v", r.Outcome, r.Err)
	}
	e.wantFound("customer", "c-2", "o1")
	e.wantFound("payment", "p-2", "o1")
	e.wantFound("customer", "c-1")
	e.wantFound("payment", "p-1")
}

// testIndexStepDied: a step that wrote its index entries and died before
// its record leaves entries no read takes: Find does not return the
// instance for the new values, a message correlated by one does not reach
// it, and once the record moves on the values are free for another
// instance of a unique index.
func testIndexStepDied(t *testing.T, s saga.Store, _ Features) {
	const name = "storetestixdied"
	hs := &haltStore{listing: listing{s}, key: saga.StoreKey(name, "o1"), dies: true}
	e := newIxEnv(t, hs, name, 1)
	e.want("place-o1", ixPlaced{"o1", "c-1", "p-1"}, saga.Handled, nil)
	hs.armed.Store(true)
	e.want("change", ixChanged{ID: "o1", Customer: "c-2", Payment: "p-2"}, saga.DeadLettered, errKilled)
	e.wantFound("customer", "c-2")
	e.wantFound("payment", "p-2")
	e.wantFound("customer", "c-1", "o1")
	e.wantFound("payment", "p-1", "o1")

	// The record moves on (values unchanged): the dead step's entries
	// are stale.
	e.want("touch", ixChanged{ID: "o1", Customer: "c-1", Payment: "p-1"}, saga.Handled, nil)
	e.want("paid", ixPaid{Payment: "p-2"}, saga.DeadLettered, saga.ErrSagaNotFound)
	e.want("cust", ixByCustomer{Customer: "c-2"}, saga.DeadLettered, saga.ErrSagaNotFound)
	e.want("place-o2", ixPlaced{"o2", "c-2", "p-2"}, saga.Handled, nil)
	e.wantFound("payment", "p-2", "o2")
	e.wantFound("customer", "c-2", "o2")
	if got := e.paid("o1"); got != 0 {
		t.Fatalf("o1 was reached %d times by messages for values it never held", got)
	}
}

// raceStore runs race before the next Put of key once armed: a step on
// the same record, committed between Reindex's read and its write.
type raceStore struct {
	listing
	key   string
	armed atomic.Bool
	race  func()
}

func (s *raceStore) Put(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	if key == s.key && s.armed.CompareAndSwap(true, false) {
		s.race()
	}
	return s.Store.Put(ctx, key, value, rev)
}

// testIndexReindex: instances written before the saga had indexes are
// not found until Reindex; Reindex, with a step committed on an instance
// between its read and its write, loses no update; while it runs, Find
// says the index is being built; run again, it writes nothing.
func testIndexReindex(t *testing.T, s saga.Store, _ Features) {
	const name = "storetestixre"
	rs := &raceStore{listing: listing{s}, key: saga.StoreKey(name, "o3")}
	old := newIxEnvOf(t, rs, ixSagaOf(name, false), 1)
	for i := range 5 {
		id := fmt.Sprint("o", i)
		old.want("place-"+id, ixPlaced{id, "c-1", "p-" + id}, saga.Handled, nil)
	}
	e := newIxEnvOf(t, rs, ixSaga(name), 1)
	e.wantFound("customer", "c-1") // not indexed yet
	var building []error
	rs.race = func() {
		for _, err := range e.ds[0].Find(t.Context(), name, saga.Where("customer", "c-1")) {
			if err != nil {
				building = append(building, err)
			}
		}
		e.want("change-o3", ixChanged{ID: "o3", Customer: "c-2", Payment: "p-o3"}, saga.Handled, nil)
	}
	rs.armed.Store(true)
	res, err := e.ds[0].Reindex(t.Context(), e.def)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != 5 || res.Indexed != 4 || len(res.Failed) != 0 {
		t.Fatalf("Reindex: got %+v, want 5 records, 4 indexed (o3 by its step), none failed", res)
	}
	if len(building) != 1 || !errors.Is(building[0], saga.ErrIndexBuilding) {
		t.Fatalf("Find during Reindex: got errors %v, want one ErrIndexBuilding", building)
	}
	e.wantFound("customer", "c-1", "o0", "o1", "o2", "o4")
	e.wantFound("customer", "c-2", "o3")
	e.wantFound("payment", "p-o4", "o4")
	e.want("paid-o1", ixPaid{Payment: "p-o1"}, saga.Handled, nil)
	if res, err := e.ds[0].Reindex(t.Context(), e.def); err != nil || res.Indexed != 0 || res.Records != 5 {
		t.Fatalf("Reindex again: got %+v %v, want 5 records, none written", res, err)
	}
	// A step of a definition without the indexes drops the instance's
	// values: it is no longer found.
	old.want("change-o1", ixChanged{ID: "o1", Customer: "c-1", Payment: "p-o1"}, saga.Handled, nil)
	e.wantFound("customer", "c-1", "o0", "o2", "o4")
}
