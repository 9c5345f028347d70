package saga_test

// Stage outbox (outbox.go): the effects a step committed carried out and
// cleared, by the step or by whoever finds the outbox later (a crash at
// each point of the commit protocol), a timeouts-only outbox kept in the
// record until the next commit, and effects that cannot go out yet.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Crash points of the commit protocol.

type CrashStart struct{ ID string }

type CrashDue struct{}

type CrashOut struct{ Which, ID string }

type crashData struct {
	Count, Fired int
	Due          time.Time
	Early        string
}

// crashSaga: the starting step sends A, requests timeout T, sends B, in
// that order; T's handler counts.
func crashSaga(starts, fires *atomic.Int64) *saga.Definition[crashData] {
	d := saga.Define[crashData]("crash")
	saga.StartedBy(d, saga.By(func(m CrashStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[crashData], m CrashStart) error {
			starts.Add(1)
			c.Data.Count++
			if err := c.Send("crash-out", CrashOut{Which: "A", ID: m.ID}); err != nil {
				return err
			}
			c.Data.Due = c.Now().Add(2 * time.Second)
			if _, err := c.RequestTimeoutAt(c.Data.Due, CrashDue{}); err != nil {
				return err
			}
			return c.Send("crash-out", CrashOut{Which: "B", ID: m.ID})
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[crashData], _ CrashDue) error {
		fires.Add(1)
		c.Data.Fired++
		if early := timeoutTooEarly(c, c.Data.Due); early != "" {
			c.Data.Early = early
		}
		return nil
	})
	return d
}

func TestCrashPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		put       putFault
		scheduled bool // crash right after the timeout is scheduled
		// restart: before B takes over, a downstream consumer receives and
		// completes what A sent, and the server restarts — which makes
		// nats-server forget the MessageIDs of consumed messages.
		restart bool
	}{
		{name: "after commit Put, before effects", put: func(_ string, v []byte) (bool, bool) { return false, hasOutbox(v) }},
		{name: "after timeout scheduled, before next send", scheduled: true},
		{name: "after effects, before clearing Put", put: func(_ string, v []byte) (bool, bool) { return !hasOutbox(v), false }},
		{name: "after clearing Put, before ack", put: func(_ string, v []byte) (bool, bool) { return false, !hasOutbox(v) }},
		{name: "after effects, effects consumed, server restarted", put: func(_ string, v []byte) (bool, bool) { return !hasOutbox(v), false }, restart: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := startServer(t)
			qcfg := transport.QueueConfig{Name: "crash", LockDuration: time.Second}
			var starts, fires atomic.Int64
			var log stepLog
			opts := []saga.Option{
				saga.WithSagas(crashSaga(&starts, &fires)), saga.WithQueueConfig(qcfg),
				saga.WithRetry(fastRetry), saga.WithHooks(log.hooks()),
			}
			// Create both queues before any dispatcher runs: concurrent
			// creation of one queue trips a data race inside nats-server
			// v2.15.2 (see the report).
			obs := newNode(t, srv.ClientURL())
			q := obs.openQueue(t, qcfg)
			out := obs.openQueue(t, transport.QueueConfig{Name: "crash-out"})

			// Dispatcher A, with faults.
			a := newNode(t, srv.ClientURL())
			c := newCrasher(a.nc)
			sched := &crashScheduler{inner: timeout.NewQueue(a.broker), c: c}
			if tc.scheduled {
				sched.afterSchedule = func(timeout.Timeout) bool { return true }
			}
			store := &crashStore{Store: a.store, c: c, fault: tc.put}
			da := a.dispatcher(t, store, qcfg.Name, append(opts, saga.WithTimeouts(sched))...)
			if _, err := da.Send(t.Context(), CrashStart{ID: "c-1"}); err != nil {
				t.Fatal(err)
			}
			ra := runCrashing(t, da)
			select {
			case <-c.done:
			case <-time.After(20 * time.Second):
				t.Fatal("dispatcher A never reached the crash point")
			}
			ra.cancel()

			consumed := map[string]int{}
			if tc.restart {
				ctx := ctxFor(t)
				for len(consumed) < 2 {
					ds, err := out.Receive(ctx, 2)
					if err != nil {
						t.Fatalf("downstream received %v before the restart: %v", consumed, err)
					}
					for _, d := range ds {
						consumed[string(d.Body)]++
						if err := d.Complete(ctx); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := srv.Restart(); err != nil {
					t.Fatalf("restart: %v", err)
				}
			}

			// Dispatcher B, on a fresh connection, takes over.
			b := newNode(t, srv.ClientURL())
			db := b.dispatcher(t, nil, qcfg.Name, opts...)
			run(t, db)
			testutil.Await(t, 20*time.Second, func() string {
				d, _, ok := data[crashData](t, db, "crash", "c-1")
				if !ok || d.Fired < 1 {
					return fmt.Sprintf("timeout not handled yet: %+v", d)
				}
				// StepDone runs after the message is settled.
				if len(log.filter(saga.MessageName[CrashDue]())) == 0 {
					return "timeout step not reported yet"
				}
				return queueEmpty(t, q)
			})

			d, inst, _ := data[crashData](t, db, "crash", "c-1")
			if d.Count != 1 || d.Fired != 1 || d.Early != "" {
				t.Errorf("state %+v: want Count 1 and Fired 1, as if the step ran once, and the timeout not early", d)
			}
			if len(inst.Timeouts) != 0 {
				t.Errorf("pending timeouts left: %+v", inst.Timeouts)
			}
			if n := starts.Load(); n != 1 {
				t.Errorf("starting handler ran %d times, want 1 (B must finish A's committed step, not run it again)", n)
			}
			if n := fires.Load(); n != 1 {
				// Legitimate only if T's step conflicted with B's finishing of
				// the start step; Fired above is what counts.
				t.Logf("timeout handler ran %d times", n)
			}
			// A crashed before settling the start message; B got it again and
			// found it done (Duplicate): neither may report it Handled.
			var redelivered bool
			for _, e := range log.filter(saga.MessageName[CrashStart]()) {
				if e.Result.Outcome == saga.Handled {
					t.Errorf("start message handled (delivery %d): want A to crash first and B to find it done", e.Info.DeliveryCount)
				}
				redelivered = redelivered || e.Info.DeliveryCount >= 2 && e.Result.Outcome == saga.Duplicate
			}
			if !redelivered {
				t.Errorf("start message steps %+v: want a redelivery settled as %s", log.filter(saga.MessageName[CrashStart]()), saga.Duplicate)
			}
			seqs := map[uint64]bool{}
			for _, e := range log.filter(saga.MessageName[CrashDue]()) {
				seqs[e.Info.Seq] = true
			}
			if len(seqs) != 1 {
				t.Errorf("timeout fired %d times (distinct activations), want 1", len(seqs))
			}

			bodies := consumed
			for _, m := range peekAll(t, out) {
				bodies[string(m.Body)]++
			}
			want := map[string]int{`{"Which":"A","ID":"c-1"}`: 1, `{"Which":"B","ID":"c-1"}`: 1}
			if fmt.Sprint(bodies) != fmt.Sprint(want) {
				t.Errorf("messages in crash-out: got %v, want each exactly once: %v", bodies, want)
			}
			if dl := peekAll(t, q.DeadLetterQueue()); len(dl) > 0 {
				t.Errorf("%d messages dead-lettered, first: %s: %s", len(dl), dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
			}
		})
	}
}

// A committed step whose effects cannot be carried out yet.

type FullStart struct{ ID string }

type FullOut struct{ ID string }

type FullDue struct{}

func fullSaga(runs *atomic.Int64) *saga.Definition[counter] {
	d := saga.Define[counter]("full")
	saga.StartedBy(d, saga.By(func(m FullStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[counter], m FullStart) error {
			runs.Add(1)
			c.Data.Count++
			if _, err := c.RequestTimeout(time.Hour, FullDue{}); err != nil {
				return err
			}
			return c.Send("full-out", FullOut(m))
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[counter], FullDue) error { return nil })
	return d
}

// TestCommittedStepWithPendingEffects: the destination queue is full, so
// the committed start step cannot send. The message must not be
// dead-lettered as if it failed (its change stands); the effects go out
// once the queue has room; and an operator cancel meanwhile must either
// cancel or change nothing, never leak the timeout the step scheduled.
func TestCommittedStepWithPendingEffects(t *testing.T) {
	t.Parallel()
	qcfg := transport.QueueConfig{Name: "full", LockDuration: 2 * time.Second}
	n, q := queueOnNewServer(t, qcfg)
	outCfg := transport.QueueConfig{Name: "full-out", MaxBytes: 1}
	out := n.openQueue(t, outCfg)
	var log stepLog
	var runs atomic.Int64
	d := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(fullSaga(&runs)), saga.WithQueueConfig(qcfg),
		saga.WithRetry(fastRetry), saga.WithHooks(log.hooks()))
	ctx := ctxFor(t)
	if _, err := d.Send(ctx, FullStart{ID: "f-1"}, saga.WithMessageID("start-f-1")); err != nil {
		t.Fatal(err)
	}
	run(t, d)
	start := saga.MessageName[FullStart]()
	testutil.Await(t, 10*time.Second, func() string {
		if len(log.filter(start)) == 0 {
			return "start message not settled yet"
		}
		return ""
	})
	first := log.filter(start)[0]
	if first.Result.Outcome != saga.EffectsPending || !errors.Is(first.Result.Err, transport.ErrQueueFull) {
		t.Errorf("start step: %s, %v; want %s with transport.ErrQueueFull", first.Result.Outcome, first.Result.Err, saga.EffectsPending)
	}
	if c, _, _ := data[counter](t, d, "full", "f-1"); c.Count != 1 {
		t.Fatalf("count %d, want the step committed", c.Count)
	}

	// Operator cancel while the outbox cannot be carried out: nothing
	// changes, and the error says so.
	res, err := d.CancelTimeouts(ctx, "full", "f-1")
	if err == nil || !errors.Is(err, transport.ErrQueueFull) || len(res.Cancelled) != 0 {
		t.Errorf("CancelTimeouts with a stuck outbox: %+v, %v; want nothing cancelled and transport.ErrQueueFull", res, err)
	}
	if _, inst, _ := data[counter](t, d, "full", "f-1"); len(inst.Timeouts) != 1 {
		t.Errorf("after a failed cancel: instance lists %v, want its timeout still", inst.Timeouts)
	}

	// Room again: the effects go out exactly once, by themselves.
	outCfg.MaxBytes = 0
	n.openQueue(t, outCfg)
	testutil.Await(t, 20*time.Second, func() string {
		if got := len(peekAll(t, out)); got != 1 {
			return fmt.Sprintf("%d messages in full-out, want 1", got)
		}
		return ""
	})
	res, err = d.CancelTimeouts(ctx, "full", "f-1")
	if err != nil || len(res.Cancelled) != 1 || res.Cancelled[0].Type != saga.MessageName[FullDue]() {
		t.Errorf("CancelTimeouts: %+v, %v; want the one FullDue", res, err)
	}
	testutil.Await(t, 10*time.Second, func() string { return queueEmpty(t, q) })
	if got := scheduledByID(t, d, "full"); len(got) != 0 {
		t.Errorf("timeouts still scheduled after they were cancelled: %v", got)
	}
	if dl := peekAll(t, q.DeadLetterQueue()); len(dl) > 0 {
		t.Errorf("%d messages dead-lettered, first: %s: %s", len(dl), dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
	}
	if got := len(peekAll(t, out)); got != 1 {
		t.Errorf("%d messages in full-out, want exactly 1", got)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("start handler ran %d times, want 1", n)
	}
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
