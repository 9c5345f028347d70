package saga_test

// Stage receive (receive.go): Run's workers and Handle: draining a step
// in flight, stopping when idle, receiving again after the server restarts
// or is killed, renewing the locks of a batch's waiting deliveries, and
// Handle before the dispatcher opened its queue.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// Graceful drain.

type SlowStart struct{ ID string }

func TestRunDrainsInFlightStep(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "drain", LockDuration: 3 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	entered, cancelled := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	var finished atomic.Bool
	def := saga.Define[counter]("slow")
	saga.StartedBy(def, saga.By(func(m SlowStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], _ SlowStart) error {
			if calls.Add(1) == 1 {
				close(entered)
			}
			<-cancelled
			time.Sleep(300 * time.Millisecond) // the slow part, after Run was told to stop
			c.Data.Count++
			finished.Store(true)
			return nil
		})
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg),
		saga.WithConcurrency(4), saga.WithDrainTimeout(10*time.Second))
	if _, err := d.Send(ctxFor(t), SlowStart{ID: "s-1"}); err != nil {
		t.Fatal(err)
	}
	r := run(t, d)
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	r.cancel()
	close(cancelled)
	if err := r.wait(10 * time.Second); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if !finished.Load() {
		t.Fatal("Run returned before the step in flight finished")
	}
	if c, _, _ := data[counter](t, d, "slow", "s-1"); c.Count != 1 {
		t.Errorf("count %d, want 1: the drained step must commit", c.Count)
	}
	// Completed: the message leaves the queue, so it cannot be
	// redelivered. The acknowledgement does not wait for the server's
	// reply (the instance's inbox makes a redelivery a duplicate), so it
	// may land a moment after Run returned.
	testutil.Await(t, 5*time.Second, func() string { return queueEmpty(t, q) })
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times, want 1", n)
	}
}

// TestRunStopsPromptlyWhenIdle: with nothing in flight, Run returns soon
// after its context ends, although idle workers are waiting in receives.
func TestRunStopsPromptlyWhenIdle(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	n := newNode(t, srv.ClientURL())
	q := n.openQueue(t, transport.QueueConfig{Name: "idle"})
	var log stepLog
	d := n.dispatcher(t, nil, "idle", saga.WithSagas(counterSaga()), saga.WithHooks(log.hooks()))
	if _, err := d.Send(ctxFor(t), Incr{ID: "i-1"}); err != nil {
		t.Fatal(err)
	}
	r := run(t, d)
	// Idle for certain: the step is done (StepDone ran) and its message
	// settled; the data alone is committed before the step ends.
	testutil.Await(t, 10*time.Second, func() string {
		if c, _, _ := data[counter](t, d, "counter", "i-1"); c.Count != 1 {
			return "not handled yet"
		}
		if len(log.filter("")) != 1 {
			return "step not done yet"
		}
		return queueEmpty(t, q)
	})
	start := time.Now()
	if err := r.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Run returned %v after cancel with nothing in flight, want well under 2s", took)
	}
}

// R2: timeouts survive server restarts.

type RStart struct {
	ID    string
	After time.Duration
}

type RDue struct{}

type restartData struct {
	Due   time.Time
	Fired int
	Early string
}

func restartSaga() *saga.Definition[restartData] {
	d := saga.Define[restartData]("restart")
	saga.StartedBy(d, saga.By(func(m RStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[restartData], m RStart) error {
			if !c.IsNew() {
				return nil
			}
			c.Data.Due = c.Now().Add(m.After)
			_, err := c.RequestTimeoutAt(c.Data.Due, RDue{})
			return err
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[restartData], _ RDue) error {
		c.Data.Fired++
		if early := timeoutTooEarly(c, c.Data.Due); early != "" {
			c.Data.Early = early
		}
		return nil
	})
	return d
}

// restartScenario requests timeouts due 1-3s ahead, waits until all are
// pending in the queue, lets restart take the server down and up, and
// checks that every timeout is then handled exactly once, none early.
func restartScenario(t *testing.T, url string, restart func(firstDue time.Time)) {
	const sagas = 10
	n := newNode(t, url)
	qcfg := transport.QueueConfig{Name: "restart", LockDuration: 2 * time.Second}
	q := n.openQueue(t, qcfg)
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(restartSaga()), saga.WithQueueConfig(qcfg),
		saga.WithRetry(saga.RetryPolicy{Immediate: 3, Delayed: 10, Backoff: func(int) time.Duration { return 300 * time.Millisecond }}),
		saga.WithDrainTimeout(3*time.Second)) // bounds a step stuck on a dead connection
	run(t, d)
	ctx := ctxFor(t)
	start := time.Now()
	for i := range sagas {
		after := 2*time.Second + time.Duration(i)*200*time.Millisecond
		if _, err := d.Send(ctx, RStart{ID: fmt.Sprintf("t-%d", i), After: after}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 10*time.Second, func() string {
		got := 0
		for _, err := range d.ScheduledTimeouts(ctx, "restart") {
			if err != nil {
				return err.Error()
			}
			got++
		}
		if got != sagas {
			return fmt.Sprintf("%d of %d timeouts pending", got, sagas)
		}
		return ""
	})
	// The scenario needs every timeout pending, none due yet, when the
	// restart begins: a machine too slow for that fails the test rather
	// than testing something else.
	firstDue := time.Time{}
	for i := range sagas {
		r, _, _ := data[restartData](t, d, "restart", fmt.Sprintf("t-%d", i))
		if firstDue.IsZero() || r.Due.Before(firstDue) {
			firstDue = r.Due
		}
	}
	if now := time.Now(); !now.Before(firstDue) {
		t.Fatalf("scheduling took %v, until %v after the first timeout's due time: the restart would not begin with every timeout pending", now.Sub(start), now.Sub(firstDue))
	}
	restart(firstDue)
	back := time.Now()
	t.Logf("server back %v after the first request", back.Sub(start))

	testutil.Await(t, 30*time.Second, func() string {
		for i := range sagas {
			id := fmt.Sprintf("t-%d", i)
			r, _, ok := data[restartData](t, d, "restart", id)
			if !ok || r.Fired < 1 {
				return fmt.Sprintf("%s: timeout not handled yet (%+v)", id, r)
			}
		}
		return queueEmpty(t, q)
	})
	var late time.Duration
	for i := range sagas {
		id := fmt.Sprintf("t-%d", i)
		r, inst, _ := data[restartData](t, d, "restart", id)
		// Late from its due time, or from the server's return for one due
		// while the server was down or starting.
		from := r.Due
		if back.After(from) {
			from = back
		}
		late = max(late, inst.Updated.Sub(from))
		if r.Fired != 1 || r.Early != "" || len(inst.Timeouts) != 0 {
			t.Errorf("%s: %+v, pending %v; want its timeout handled exactly once, not early", id, r, inst.Timeouts)
		}
	}
	// Lateness is reported; the bound only catches receives that stall
	// after a reconnect (a pull the restarted server forgot used to be
	// waited out for 5s; pulls now last at most 1s).
	t.Logf("latest timeout handled %v after its due time or the server's return", late)
	if late > 4*time.Second {
		t.Errorf("a timeout was handled %v after its due time or the server's return; receives should resume within a pull wait (1s) of the reconnect", late)
	}
	if dl := peekAll(t, q.DeadLetterQueue()); len(dl) > 0 {
		t.Errorf("%d messages dead-lettered, first: %s: %s", len(dl), dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
	}
}

func TestTimeoutsSurviveServerRestart(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	restartScenario(t, srv.ClientURL(), func(time.Time) {
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart: %v", err)
		}
	})
}

func TestTimeoutsSurviveServerKill(t *testing.T) {
	t.Parallel()
	p, err := embedded.StartProcess(embedded.Options{ReadyTimeout: testutil.ServerReady})
	if err != nil {
		t.Fatalf("start nats-server in a child process: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	restartScenario(t, p.ClientURL(), func(firstDue time.Time) {
		if err := p.Kill(); err != nil {
			t.Fatalf("kill: %v", err)
		}
		// Stay down until the first timeout is overdue, so that some fire
		// late, after the restart, rather than on time.
		testutil.Await(t, 5*time.Second, func() string {
			if time.Now().Before(firstDue.Add(100 * time.Millisecond)) {
				return "first timeout not overdue yet"
			}
			return ""
		})
		if err := p.Restart(); err != nil {
			t.Fatalf("restart: %v", err)
		}
	})
}

type HandleFail struct{ ID string }

// TestHandleBeforeQueueOpenRetries: Handle, for custom receive loops, runs
// a failing step before the dispatcher opened its queue (no Send, Run or
// ScheduledTimeouts yet) and settles it as Retried, without a panic (its
// delayed retry once went to a nil queue).
func TestHandleBeforeQueueOpenRetries(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "custom", LockDuration: 5 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	def := saga.Define[counter]("fails")
	saga.StartedBy(def, saga.By(func(m HandleFail) string { return m.ID }),
		func(context.Context, *saga.Context[counter], HandleFail) error { return errors.New("transient") })
	var log stepLog
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(def), saga.WithQueueConfig(qcfg), saga.WithRetry(fastRetry), saga.WithHooks(log.hooks()))
	rawSend(t, q, &transport.Message{Body: []byte(`{"ID":"f-1"}`), Properties: map[string]string{saga.TypeProperty: saga.MessageName[HandleFail]()}})
	ds, err := q.Receive(ctxFor(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("Handle panicked: %v", p)
			}
		}()
		d.Handle(ctxFor(t), ds[0])
	}()
	if ev := log.filter(""); len(ev) != 1 || ev[0].Result.Outcome != saga.Retried {
		t.Errorf("steps %+v, want one, %s", ev, saga.Retried)
	}
}

// A delivery received with others in a batch waits while the steps before
// it run; the dispatcher renews its lock when it waited for half the
// LockDuration, so that a batch of slow steps does not lose its tail's
// locks (which would run those steps twice, the second as a duplicate).
func TestReceiveBatchRenewsWaitingLocks(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "batch-lock", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	slow := saga.Define[cacheData]("slow")
	saga.StartedBy(slow, saga.By(func(m CacheIncr) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[cacheData], _ CacheIncr) error {
			c.Data.Count++
			select { // longer than half the lock: the next one needs a renewal
			case <-time.After(1200 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		})
	var log stepLog
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(slow), saga.WithQueueConfig(qcfg), saga.WithHooks(log.hooks()),
		saga.WithConcurrency(1), saga.WithReceiveBatch(3))
	for _, id := range []string{"a", "b", "c"} {
		if _, err := d.Send(ctxFor(t), CacheIncr{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, d)
	testutil.Await(t, 20*time.Second, func() string {
		if n := len(log.filter("")); n < 3 {
			return fmt.Sprintf("%d steps done, want 3", n)
		}
		return queueEmpty(t, q)
	})
	for _, id := range []string{"a", "b", "c"} {
		if c, _, _ := data[cacheData](t, d, "slow", id); c.Count != 1 {
			t.Errorf("%s: count %d, want 1", id, c.Count)
		}
	}
	for _, e := range log.filter("") {
		if e.Result.Outcome != saga.Handled {
			t.Errorf("step %s/%s: %s (%v), want every step handled once", e.Info.Saga, e.Info.ID, e.Result.Outcome, e.Result.Err)
		}
	}
}
