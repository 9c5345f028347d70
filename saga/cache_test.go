package saga_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// results collects StepDone results by message type.
type results struct {
	mu  sync.Mutex
	got []saga.StepResult
}

func (r *results) hooks() saga.Hooks {
	return saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, res saga.StepResult) {
		r.mu.Lock()
		r.got = append(r.got, res)
		r.mu.Unlock()
	}}
}

func (r *results) last(t *testing.T) saga.StepResult {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("no step done")
	}
	return r.got[len(r.got)-1]
}

// handleNext receives the next message of q (waiting for it) and hands it
// to d, as a custom receive loop would.
func handleNext(t *testing.T, q *transport.Queue, d *saga.Dispatcher) {
	t.Helper()
	ctx := ctxFor(t)
	for {
		ds, err := q.Receive(ctx, 1)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		if len(ds) == 1 {
			d.Handle(ctx, ds[0])
			return
		}
	}
}

// Two dispatchers (two processes, each with its own record cache) take
// turns on one instance: each step of one makes the other's cached record
// stale. A step from a stale record must not commit (the revision check
// refuses it) and runs again on fresh state; a decision the stale record
// would get wrong without a commit to check it — dropping a timeout the
// record does not know — is made on a fresh load.
func TestRecordCacheStaleAfterAnotherDispatcher(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	qcfg := transport.QueueConfig{Name: "cache-stale"}
	n1, n2 := newNode(t, srv.ClientURL()), newNode(t, srv.ClientURL())
	q := n1.openQueue(t, qcfg)
	var r1, r2 results
	d1 := n1.dispatcher(t, nil, qcfg.Name, saga.WithSagas(cacheSaga()), saga.WithQueueConfig(qcfg), saga.WithHooks(r1.hooks()))
	d2 := n2.dispatcher(t, nil, qcfg.Name, saga.WithSagas(cacheSaga()), saga.WithQueueConfig(qcfg), saga.WithHooks(r2.hooks()))
	send := func(m CacheIncr) {
		t.Helper()
		if _, err := d1.Send(ctxFor(t), m); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		t.Helper()
		c, _, ok := data[cacheData](t, d1, "cached", "x")
		if !ok {
			t.Fatal("instance x missing")
		}
		return c.Count
	}
	expect := func(r *results, outcome saga.Outcome, conflicts, wantCount int) {
		t.Helper()
		res := r.last(t)
		if res.Outcome != outcome || res.Conflicts != conflicts || res.Err != nil {
			t.Fatalf("step: outcome %s, %d conflicts, err %v; want %s, %d conflicts", res.Outcome, res.Conflicts, res.Err, outcome, conflicts)
		}
		if c := count(); c != wantCount {
			t.Fatalf("count %d, want %d", c, wantCount)
		}
	}

	send(CacheIncr{ID: "x"})
	handleNext(t, q, d1) // d1 caches x at its revision
	expect(&r1, saga.Handled, 0, 1)
	send(CacheIncr{ID: "x"})
	handleNext(t, q, d2) // d1's cached x is stale now
	expect(&r2, saga.Handled, 0, 2)
	send(CacheIncr{ID: "x"})
	handleNext(t, q, d1) // from the stale record: refused, run again fresh
	expect(&r1, saga.Handled, 1, 3)
	send(CacheIncr{ID: "x"})
	handleNext(t, q, d1) // from d1's own last write: no conflict
	expect(&r1, saga.Handled, 0, 4)

	send(CacheIncr{ID: "x", Arm: true})
	handleNext(t, q, d2) // stale for d2 (d1 wrote since); asks for a timeout d1's cache does not know
	expect(&r2, saga.Handled, 1, 5)
	handleNext(t, q, d1) // the timeout: handled, not dropped as unknown
	expect(&r1, saga.Handled, 0, 105)

	// The last step completed its message without waiting for the
	// server (its identity is in the inbox): the queue empties a moment
	// after the step returns.
	testutil.Await(t, 10*time.Second, func() string { return queueEmpty(t, q) })
}

// A step whose outbox holds timeouts only leaves the outbox in the stored
// record after carrying it out (no second Put); the next commit drops it.
// A dispatcher that loads such a record — another process, or one after a
// crash between commit and carrying out — carries it out again first:
// harmless when it was carried out (the timeout is scheduled once, fires
// once), and the recovery when it was not.
func TestKeptTimeoutOutbox(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash before carrying out=%v", crash), func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			qcfg := transport.QueueConfig{Name: "kept", LockDuration: time.Second}
			n1, n2 := newNode(t, srv.ClientURL()), newNode(t, srv.ClientURL())
			q := n2.openQueue(t, qcfg)  // to look at the queue
			q1 := n1.openQueue(t, qcfg) // to receive with d1's connection
			var log stepLog
			opts := []saga.Option{saga.WithSagas(cacheSaga()), saga.WithQueueConfig(qcfg), saga.WithHooks(log.hooks())}
			c := newCrasher(n1.nc)
			store := &crashStore{Store: n1.store, c: c}
			if crash {
				store.fault = func(_ string, v []byte) (bool, bool) { return false, hasOutbox(v) }
			}
			d1 := n1.dispatcher(t, store, qcfg.Name, opts...)
			d2 := n2.dispatcher(t, nil, qcfg.Name, opts...)
			if _, err := d2.Send(ctxFor(t), CacheIncr{ID: "k", Arm: true, Due: 3 * time.Second}); err != nil {
				t.Fatal(err)
			}
			ds, err := q1.Receive(ctxFor(t), 1)
			for err == nil && len(ds) == 0 {
				ds, err = q1.Receive(ctxFor(t), 1)
			}
			if err != nil {
				t.Fatal(err)
			}
			d1.Handle(ctxFor(t), ds[0])
			raw, _, err := n2.store.Load(ctxFor(t), "cached.aw") // storeKey("cached", "k")
			if err != nil {
				t.Fatal(err)
			}
			if !hasOutbox(raw) {
				t.Fatal("the stored record has no outbox after a step that requested a timeout")
			}
			if crash {
				if len(peekScheduled(t, q)) != 0 {
					t.Fatal("a timeout was scheduled although the dispatcher crashed before carrying it out")
				}
			} else if n := len(peekScheduled(t, q)); n != 1 {
				t.Fatalf("%d timeouts scheduled, want 1", n)
			}

			// d2 loads the record: carries the kept outbox out (again),
			// and its commit drops it.
			if _, err := d2.Send(ctxFor(t), CacheIncr{ID: "k"}); err != nil {
				t.Fatal(err)
			}
			run(t, d2)
			testutil.Await(t, 20*time.Second, func() string {
				if c, _, _ := data[cacheData](t, d2, "cached", "k"); c.Count != 102 {
					return fmt.Sprintf("count %d, want 102 (both increments and the timeout)", c.Count)
				}
				return queueEmpty(t, q)
			})
			raw, _, err = n2.store.Load(ctxFor(t), "cached.aw")
			if err != nil {
				t.Fatal(err)
			}
			if hasOutbox(raw) {
				t.Error("the record still holds an outbox after the next commits")
			}
			var due []stepEvent
			for _, e := range log.filter("") {
				if e.Info.MessageType == saga.MessageName[CacheDue]() {
					due = append(due, e)
				}
			}
			if len(due) != 1 || due[0].Result.Outcome != saga.Handled {
				t.Errorf("timeout steps %+v, want one, handled", due)
			}
		})
	}
}
