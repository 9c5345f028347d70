package saga_test

// The record cache (cache.go), a decorator of the step's loads: a cached
// record made stale by another dispatcher never commits.

import (
	"context"
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
