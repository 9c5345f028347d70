package temporal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
)

type (
	offerMade    struct{ ID string }
	offerExpired struct{}
	offer        struct{ Due time.Time }
)

// Sagas that request timeouts routed to Temporal while the Temporal
// server is down (killed) wait for it instead of failing: with a retry
// policy that would dead-letter at the first failure, nothing is
// dead-lettered, the dispatcher reports that it waits, and after the
// restart every saga's timeout is scheduled and fires exactly once, none
// before its due time. (The timeouts are longer than the outage: one that
// comes due meanwhile is routed to the queue's engine when it is carried
// out, as timeout.Router routes by the time left.)
func TestSagasWaitForTemporal(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	_, ns := servers(t)
	srv := temporaltest.New(t, temporaltest.Options{DBFile: temporaltest.TempDB(t), SQLitePragmas: []string{"journal_mode=wal", "synchronous=normal"}})
	c := srv.Client(t)
	b := broker(t, ns)
	engine, tq := servedEngine(t, c, b)

	var mu sync.Mutex
	fired := map[string][]time.Time{} // saga ID → when its timeout was handled
	due := map[string]time.Time{}
	def := saga.Define[offer]("offer")
	saga.StartedBy(def, saga.By(func(m offerMade) string { return m.ID }),
		func(_ context.Context, c *saga.Context[offer], _ offerMade) error {
			c.Data.Due = time.Now().Add(30 * time.Second)
			_, err := c.RequestTimeout(30*time.Second, offerExpired{})
			return err
		})
	saga.OnTimeout(def, func(_ context.Context, c *saga.Context[offer], _ offerExpired) error {
		mu.Lock()
		defer mu.Unlock()
		fired[c.ID()] = append(fired[c.ID()], time.Now())
		due[c.ID()] = c.Data.Due
		c.MarkComplete()
		return nil
	})
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{engine.Route(5 * time.Second)}}
	queue := "offers-" + tq
	d, err := saga.NewDispatcher(b, memstore.New(), queue, saga.WithSagas(def), saga.WithTimeouts(router),
		saga.WithLogger(quietLogger()), saga.WithRetry(saga.RetryPolicy{Immediate: 1, Delayed: -1}),
		saga.WithDrainTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	const sagas = 10
	for i := range sagas {
		if _, err := d.Send(t.Context(), offerMade{ID: fmt.Sprintf("o-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 60*time.Second, func() string {
		if h := d.Health(); !(h.Waiting && h.Attempts >= 5) {
			return fmt.Sprintf("the dispatcher did not wait for Temporal: %+v", h)
		}
		return ""
	})
	t.Logf("waiting: %+v", d.Health())
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	back := time.Now()

	testutil.Await(t, 90*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(fired) < sagas {
			return fmt.Sprintf("%d of %d timeouts fired since the restart", len(fired), sagas)
		}
		return ""
	})
	q, err := b.Queue(t.Context(), queue)
	if err != nil {
		t.Fatal(err)
	}
	for m, err := range q.DeadLetterQueue().Browse(t.Context(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("dead-lettered during the outage: %s %s: %s", m.MessageID, m.DeadLetterReason, m.DeadLetterDescription)
	}
	// A second firing would come within moments of the first.
	time.Sleep(2 * time.Second) // nothing to await: the test checks that nothing more happens
	mu.Lock()
	defer mu.Unlock()
	for id, at := range fired {
		if len(at) != 1 {
			t.Errorf("%s: timeout handled %d times", id, len(at))
		}
		if at[0].Before(due[id]) {
			t.Errorf("%s: timeout handled %v before its due time", id, due[id].Sub(at[0]))
		}
		// Not a latency target: a bound that a retry by the policy's
		// backoff (10 s, 20 s, 40 s, ...) instead of a wait would miss.
		from := due[id]
		if back.After(from) {
			from = back
		}
		if late := at[0].Sub(from); late > 15*time.Second {
			t.Errorf("%s: timeout handled %v after its due time or Temporal's return", id, late)
		}
	}
	if h := d.Health(); h.Waiting {
		t.Errorf("still waiting after the restart: %+v", h)
	}
}
