package saga_test

// Stage hold (hold.go): timeouts activated early
// (timeout.WithEarlyActivation), which the dispatcher holds until their due
// time.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The lead of the tests on JetStream: longer than the default, so that
// every timeout is activated well before its due time (nats-server's
// tick activates up to ~260 ms after the scheduled time) and held.
const testLead = time.Second

type EarlyStart struct {
	ID  string
	Due time.Time
}

type EarlyStop struct{ ID string }

type EarlyDue struct{}

type earlyData struct {
	Due   time.Time
	Fired int
}

// earlyRun is what an early saga's timeout handler saw.
type earlyRun struct {
	ID                string
	Due, At, Enqueued time.Time // At: time.Now() in the handler
	CtxNow            time.Time // the step's Context.Now
	TimeoutDue        time.Time // the step's Context.TimeoutDue
}

type earlyRuns struct {
	mu   sync.Mutex
	runs []earlyRun
}

func (r *earlyRuns) add(e earlyRun) {
	r.mu.Lock()
	r.runs = append(r.runs, e)
	r.mu.Unlock()
}

func (r *earlyRuns) all() []earlyRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]earlyRun(nil), r.runs...)
}

// earlySaga requests a timeout at EarlyStart.Due; EarlyStop cancels it.
// The timeout's handler counts and records what it saw.
func earlySaga(runs *earlyRuns) *saga.Definition[earlyData] {
	d := saga.Define[earlyData]("early")
	saga.StartedBy(d, saga.By(func(m EarlyStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[earlyData], m EarlyStart) error {
			c.Data.Due = m.Due
			_, err := c.RequestTimeoutAt(m.Due, EarlyDue{})
			return err
		})
	saga.Handles(d, saga.By(func(m EarlyStop) string { return m.ID }),
		func(_ context.Context, c *saga.Context[earlyData], _ EarlyStop) error {
			for _, p := range c.PendingTimeouts() {
				c.CancelTimeout(p.Handle)
			}
			return nil
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[earlyData], _ EarlyDue) error {
		runs.add(earlyRun{ID: c.ID(), Due: c.Data.Due, At: time.Now(), Enqueued: c.Incoming().EnqueuedAt, CtxNow: c.Now(),
			TimeoutDue: c.TimeoutDue()})
		c.Data.Fired++
		return nil
	})
	return d
}

// cancelLog is a timeout.Scheduler that records what Cancel returned.
type cancelLog struct {
	timeout.Scheduler
	mu   sync.Mutex
	errs []error
}

func (s *cancelLog) Cancel(ctx context.Context, ref timeout.Ref) error {
	err := s.Scheduler.Cancel(ctx, ref)
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
	return err
}

// Pending lists the wrapped engine's timeouts.
func (s *cancelLog) Pending(ctx context.Context, f timeout.Filter) iter.Seq2[timeout.Pending, error] {
	return timeout.List(ctx, s.Scheduler, f)
}

func (s *cancelLog) results() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]error(nil), s.errs...)
}

// earlyEnv is one server with a queue, and what the tests' dispatchers
// share.
type earlyEnv struct {
	t    *testing.T
	url  string
	qcfg transport.QueueConfig
	q    *transport.Queue
	runs *earlyRuns
	log  *stepLog
	lead time.Duration // of the dispatchers' engines
}

func newEarlyEnv(t *testing.T, qcfg transport.QueueConfig) *earlyEnv {
	srv := startServer(t)
	e := &earlyEnv{t: t, url: srv.ClientURL(), qcfg: qcfg, runs: &earlyRuns{}, log: &stepLog{}, lead: testLead}
	e.q = newNode(t, e.url).openQueue(t, qcfg)
	return e
}

// dispatcher makes a dispatcher of the early saga on a node of its own,
// with the early engine (wrapped by cancels, if not nil), whose steps
// e.log records.
func (e *earlyEnv) dispatcher(cancels *cancelLog, opts ...saga.Option) (*node, *saga.Dispatcher) {
	return e.dispatcherLogged(e.log, cancels, opts...)
}

func (e *earlyEnv) dispatcherLogged(log *stepLog, cancels *cancelLog, opts ...saga.Option) (*node, *saga.Dispatcher) {
	n := newNode(e.t, e.url)
	var engine timeout.Scheduler = timeout.NewQueue(n.broker, timeout.WithEarlyActivation(e.lead))
	if cancels != nil {
		cancels.Scheduler = engine
		engine = cancels
	}
	opts = append([]saga.Option{saga.WithSagas(earlySaga(e.runs)), saga.WithQueueConfig(e.qcfg),
		saga.WithTimeouts(engine), saga.WithHooks(log.hooks())}, opts...)
	return n, n.dispatcher(e.t, nil, e.qcfg.Name, opts...)
}

// checkRuns checks that each ID's timeout handler ran once, never before
// its due time, and (with ids activated early) was activated early, so
// held.
func (e *earlyEnv) checkRuns(ids ...string) {
	e.t.Helper()
	got := map[string]int{}
	for _, r := range e.runs.all() {
		got[r.ID]++
		if r.At.Before(r.Due) || r.CtxNow.Before(r.Due) {
			e.t.Errorf("%s: handled at %v (Context.Now %v), %v before its due time %v", r.ID, r.At, r.CtxNow, r.Due.Sub(r.At), r.Due)
		}
		if !r.Enqueued.Before(r.Due) {
			e.t.Errorf("%s: activated at %v, not before its due time %v: not activated early, so not held", r.ID, r.Enqueued, r.Due)
		}
		if !r.TimeoutDue.Equal(r.Due) || r.TimeoutDue.Location() != time.UTC {
			e.t.Errorf("%s: Context.TimeoutDue %v, want the due time requested, %v, in UTC", r.ID, r.TimeoutDue, r.Due)
		}
	}
	for _, id := range ids {
		if got[id] != 1 {
			e.t.Errorf("%s: timeout handler ran %d times, want 1", id, got[id])
		}
	}
}

// timeoutSteps returns the steps on timeouts of instance id.
// awaitHandled waits until the timeout of instance id has been handled
// and the queue is empty.
func (e *earlyEnv) awaitHandled(id string, within time.Duration) {
	e.t.Helper()
	testutil.Await(e.t, within, func() string {
		if len(e.timeoutSteps(id)) == 0 {
			return "timeout not handled yet"
		}
		return queueEmpty(e.t, e.q)
	})
}

func (e *earlyEnv) timeoutSteps(id string) []stepEvent {
	var out []stepEvent
	for _, ev := range e.log.filter(saga.MessageName[EarlyDue]()) {
		if ev.Info.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// TestEarlyTimeoutsNeverEarly runs timeouts activated early through Run
// (two workers, receiving one message at a time):
// every one is activated before its due time, held, and handled once,
// never before its due time. Holding does not hold up other messages: a
// message sent while timeouts are held is handled at once.
func TestEarlyTimeoutsNeverEarly(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early"})
	held := make(chan struct{}, 1)
	_, d := e.dispatcher(nil, saga.WithConcurrency(2), saga.WithReceiveBatch(1))
	saga.OnHold(d, func(*transport.Delivery) {
		select {
		case held <- struct{}{}:
		default:
		}
	})
	const n = 20
	first := time.Now().Add(2 * time.Second)
	var ids []string
	for i := range n {
		id := fmt.Sprintf("e-%d", i)
		ids = append(ids, id)
		// All due at once: activated by one tick, all held at once.
		if _, err := d.Send(ctxFor(t), EarlyStart{ID: id, Due: first}); err != nil {
			t.Fatal(err)
		}
	}
	run(t, d)
	// While they are held, a new instance starts, its message behind
	// theirs in the queue, and its step is done long before their due
	// time.
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("no timeout held")
	}
	sent := time.Now()
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "meanwhile", Due: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if _, _, ok := data[earlyData](t, d, "early", "meanwhile"); !ok {
			return "the instance started while timeouts are held does not exist yet"
		}
		return ""
	})
	// Held in place, the timeouts would take both workers until they
	// are due.
	if now := time.Now(); !now.Before(first) {
		t.Errorf("the instance started while timeouts were held took %v, until %v after their due time",
			now.Sub(sent), now.Sub(first))
	}
	testutil.Await(t, 20*time.Second, func() string {
		if got := len(e.runs.all()); got < n {
			return fmt.Sprintf("%d of %d timeouts handled", got, n)
		}
		return ""
	})
	e.checkRuns(ids...)
	for _, id := range ids {
		for _, ev := range e.timeoutSteps(id) {
			if ev.Result.Outcome != saga.Handled || ev.Info.TimeoutDue.IsZero() {
				t.Errorf("%s: timeout step %s, TimeoutDue %v; want handled, with its due time", id, ev.Result.Outcome, ev.Info.TimeoutDue)
			}
			// Activated ahead, started at or after the due time: what
			// sagaotel's two lateness metrics tell apart.
			if !ev.Info.EnqueuedAt.Before(ev.Info.TimeoutDue) || ev.Info.StartedAt.Before(ev.Info.TimeoutDue) {
				t.Errorf("%s: timeout enqueued %v, step started %v, due %v; want enqueued before, started at or after the due time",
					id, ev.Info.EnqueuedAt, ev.Info.StartedAt, ev.Info.TimeoutDue)
			}
		}
	}
}

// TestEarlyTimeoutCancel cancels one timeout before its lead window: the
// engine's Cancel is definite (nil) and the timeout never arrives; and one
// while the dispatcher holds it: Cancel reports ErrAlreadyFired, and the
// held timeout is dropped at its due time by its token, its handler never
// run.
func TestEarlyTimeoutCancel(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-cancel"})
	cancels := &cancelLog{}
	_, d := e.dispatcher(cancels)
	holding := make(chan string, 1)
	saga.OnHold(d, func(del *transport.Delivery) {
		select {
		case holding <- del.Properties[timeout.PropertyInstance]:
		default:
		}
	})
	run(t, d)

	// Before the lead window: 4 s ahead, the lead is 1 s.
	due := time.Now().Add(4 * time.Second)
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "before", Due: due}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if _, inst, ok := data[earlyData](t, d, "early", "before"); !ok || len(inst.Timeouts) != 1 {
			return "timeout not requested yet"
		}
		return ""
	})
	if _, err := d.Send(ctxFor(t), EarlyStop{ID: "before"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if errs := cancels.results(); len(errs) != 1 {
			return fmt.Sprintf("cancels so far: %v", errs)
		}
		return ""
	})
	if errs := cancels.results(); errs[0] != nil {
		t.Fatalf("Cancel %v before the due time (lead %v): %v, want nil", time.Until(due), testLead, errs[0])
	}

	// Within the lead window, while held.
	withinDue := time.Now().Add(2 * time.Second)
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "within", Due: withinDue}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-holding:
		if id != "within" {
			t.Fatalf("holding %s's timeout, the one cancelled before its lead window", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout was not held")
	}
	// Held, it is still listed: as activating, at its due time.
	var listed []saga.ScheduledTimeout
	for st, err := range d.ScheduledTimeouts(ctxFor(t), "early") {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, st)
	}
	if len(listed) != 1 || listed[0].ID != "within" || !listed[0].Activating || !listed[0].At.Equal(withinDue) || transport.IsScheduledSeq(listed[0].Seq) {
		t.Errorf("ScheduledTimeouts while the timeout is held: %v; want within's, activating, due %v", listed, withinDue)
	}
	if _, err := d.Send(ctxFor(t), EarlyStop{ID: "within"}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if len(e.timeoutSteps("within")) == 0 {
			return "the held timeout was not settled yet"
		}
		return ""
	})
	// The cancel may be carried out more than once (an outbox of timeouts
	// stays in the record until the next commit): each time, fired.
	if errs := cancels.results(); len(errs) < 2 {
		t.Errorf("Cancel of the held timeout not called: %v", errs)
	} else {
		for _, err := range errs[1:] {
			if !errors.Is(err, timeout.ErrAlreadyFired) {
				t.Errorf("Cancel of the held timeout: %v, want ErrAlreadyFired", err)
			}
		}
	}
	if ev := e.timeoutSteps("within")[0]; ev.Result.Outcome != saga.Dropped {
		t.Errorf("held timeout cancelled by its saga: outcome %s, want %s", ev.Result.Outcome, saga.Dropped)
	}
	// The first's due time passes: nothing arrives.
	testutil.Await(t, 10*time.Second, func() string {
		if time.Now().Before(due.Add(time.Second)) {
			return "waiting past the cancelled timeout's due time"
		}
		return queueEmpty(t, e.q)
	})
	if runs := e.runs.all(); len(runs) != 0 {
		t.Errorf("cancelled timeouts handled: %+v", runs)
	}
	if steps := e.timeoutSteps("before"); len(steps) != 0 {
		t.Errorf("the timeout cancelled before its lead arrived: %+v", steps)
	}
	for _, id := range []string{"before", "within"} {
		if d, _, _ := data[earlyData](t, d, "early", id); d.Fired != 0 {
			t.Errorf("%s: Fired %d, want 0", id, d.Fired)
		}
	}
}

// TestEarlyTimeoutStopWhileHolding stops Run while it holds a timeout:
// Run lets it come due and handles it, once, before it returns, as it
// lets steps in flight finish.
func TestEarlyTimeoutStopWhileHolding(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-stop"})
	_, d := e.dispatcher(nil)
	holding := make(chan struct{}, 1)
	saga.OnHold(d, func(*transport.Delivery) {
		select {
		case holding <- struct{}{}:
		default:
		}
	})
	r := run(t, d)
	due := time.Now().Add(2 * time.Second)
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "s-1", Due: due}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-holding:
	case <-time.After(10 * time.Second):
		t.Fatal("the timeout was not held")
	}
	if err := r.wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	e.checkRuns("s-1")
	ev := e.timeoutSteps("s-1")
	if len(ev) != 1 || ev[0].Info.DeliveryCount != 1 || ev[0].Result.Outcome != saga.Handled {
		t.Fatalf("timeout steps %+v, want one, handled on the first delivery", ev)
	}
	// Each bound is measured from the moment it is about, so that the
	// step's own duration (store round trips, slow under -race on a loaded
	// machine) is in neither: the hold ends at the due time, and Run
	// returns once the step is done.
	began, ended := ev[0].Info.StartedAt, ev[0].Info.StartedAt.Add(ev[0].Result.Duration)
	if late := began.Sub(due); late > time.Second {
		t.Errorf("the held timeout's step began %v after its due time", late)
	}
	if ended.After(returned) {
		t.Errorf("Run returned %v before the held timeout's step ended", ended.Sub(returned))
	} else if late := returned.Sub(ended); late > time.Second {
		t.Errorf("Run returned %v after the held timeout's step ended", late)
	}
	// Completed without waiting for the broker: it may land after Run
	// returned.
	testutil.Await(t, 10*time.Second, func() string { return queueEmpty(t, e.q) })
}

// TestEarlyTimeoutHoldOutlastsLock holds a timeout longer than the
// queue's LockDuration: the lock is renewed, and the timeout is handled
// on its first delivery, at its due time.
func TestEarlyTimeoutHoldOutlastsLock(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-lock", LockDuration: time.Second})
	e.lead = 3 * time.Second
	_, d := e.dispatcher(nil)
	run(t, d)
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "l-1", Due: time.Now().Add(4 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 15*time.Second, func() string {
		if len(e.timeoutSteps("l-1")) == 0 {
			return "timeout not handled yet"
		}
		return ""
	})
	e.checkRuns("l-1")
	r := e.runs.all()[0]
	if held := r.At.Sub(r.Enqueued); held < 2*e.qcfg.LockDuration {
		t.Errorf("held %v, want more than twice the LockDuration %v: the test needs a longer lead", held, e.qcfg.LockDuration)
	}
	if ev := e.timeoutSteps("l-1"); len(ev) != 1 || ev[0].Info.DeliveryCount != 1 {
		t.Errorf("timeout steps %+v, want one, on the first delivery (the lock renewed)", ev)
	}
}

// TestEarlyTimeoutCrashWhileHolding crashes a dispatcher (its connection
// closes) while it holds a timeout: the timeout is redelivered once the
// lock expires and handled once by another dispatcher — late, not lost.
func TestEarlyTimeoutCrashWhileHolding(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-crash", LockDuration: 2 * time.Second})
	// A's steps after the crash fail (and are abandoned); its own log
	// keeps them apart. Without its record cache, it cannot run the
	// handler from memory after the crash.
	a, da := e.dispatcherLogged(&stepLog{}, nil, saga.WithRecordCache(0))
	c := newCrasher(a.nc)
	saga.OnHold(da, func(*transport.Delivery) { c.crash() })
	if _, err := da.Send(ctxFor(t), EarlyStart{ID: "c-1", Due: time.Now().Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	runCrashing(t, da)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatal("dispatcher A never held the timeout")
	}
	_, db := e.dispatcher(nil)
	run(t, db)
	e.awaitHandled("c-1", 20*time.Second)
	e.checkRuns("c-1")
	if d, _, _ := data[earlyData](t, db, "early", "c-1"); d.Fired != 1 {
		t.Errorf("Fired %d, want 1", d.Fired)
	}
	if ev := e.timeoutSteps("c-1"); len(ev) != 1 || ev[0].Info.DeliveryCount < 2 {
		t.Errorf("timeout steps %+v, want one, on a redelivery", ev)
	}
}

// TestEarlyTimeoutHandleContextEnds ends the context of Handle, in a
// custom receive loop, while it holds a timeout: Handle abandons it, and
// Run then handles it once, at its due time.
func TestEarlyTimeoutHandleContextEnds(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-handle"})
	_, d := e.dispatcher(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	saga.OnHold(d, func(*transport.Delivery) { cancel() })
	if _, err := d.Send(ctxFor(t), EarlyStart{ID: "h-1", Due: time.Now().Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		ds, err := e.q.Receive(ctx, 1)
		if err != nil {
			break
		}
		for _, del := range ds {
			d.Handle(ctx, del) // the start, then the timeout
		}
	}
	if r := e.runs.all(); len(r) != 0 {
		t.Fatalf("handled by a Handle whose context ended while it held the timeout: %+v", r)
	}
	run(t, d)
	e.awaitHandled("h-1", 10*time.Second)
	e.checkRuns("h-1")
	if ev := e.timeoutSteps("h-1"); len(ev) != 1 || ev[0].Info.DeliveryCount != 2 {
		t.Errorf("timeout steps %+v, want one, on the second delivery", ev)
	}
}

// TestEarlyTimeoutHostileDue sends copies of a pending timeout's message
// whose due property is unreadable (handled on arrival) or an hour ahead
// of the copy's activation (dead-lettered with ReasonTimeoutNotDue, never
// held nor handled).
func TestEarlyTimeoutHostileDue(t *testing.T) {
	t.Parallel()
	e := newEarlyEnv(t, transport.QueueConfig{Name: "early-hostile"})
	_, d := e.dispatcher(nil)
	run(t, d)
	for _, id := range []string{"h-garbled", "h-far"} {
		if _, err := d.Send(ctxFor(t), EarlyStart{ID: id, Due: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduled timeout messages, to copy.
	msgs := map[string]*transport.Message{}
	testutil.Await(t, 10*time.Second, func() string {
		for _, m := range peekAll(t, e.q) {
			if m.State == transport.Scheduled {
				msgs[m.Properties[timeout.PropertyInstance]] = m
			}
		}
		if len(msgs) < 2 {
			return fmt.Sprintf("%d of 2 timeouts scheduled", len(msgs))
		}
		return ""
	})
	send := func(id, due string) {
		m := msgs[id].Clone()
		m.MessageID, m.Seq, m.ScheduledAt = id+"-copy", 0, time.Time{}
		m.Properties[timeout.PropertyDue] = due
		if _, err := e.q.Schedule(ctxFor(t), m, time.Now().Add(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	send("h-garbled", "soon")
	send("h-far", time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	testutil.Await(t, 10*time.Second, func() string {
		for _, id := range []string{"h-garbled", "h-far"} {
			if len(e.timeoutSteps(id)) == 0 {
				return id + ": copy not settled yet"
			}
		}
		return ""
	})
	if ev := e.timeoutSteps("h-garbled"); ev[0].Result.Outcome != saga.Handled {
		t.Errorf("copy with an unreadable due time: %s (%v), want handled on arrival", ev[0].Result.Outcome, ev[0].Result.Err)
	}
	ev := e.timeoutSteps("h-far")[0]
	if ev.Result.Outcome != saga.DeadLettered || !errors.Is(ev.Result.Err, saga.ErrTimeoutNotDue) {
		t.Errorf("copy due an hour after its activation: %s (%v), want dead-lettered with ErrTimeoutNotDue", ev.Result.Outcome, ev.Result.Err)
	}
	dead := peekAll(t, e.q.DeadLetterQueue())
	if len(dead) != 1 || dead[0].DeadLetterReason != saga.ReasonTimeoutNotDue {
		t.Errorf("dead letters %+v, want the far copy with reason %s", dead, saga.ReasonTimeoutNotDue)
	}
	for _, r := range e.runs.all() {
		if r.ID == "h-far" {
			t.Errorf("h-far handled: %+v", r)
		}
	}
	if d, inst, _ := data[earlyData](t, d, "early", "h-far"); d.Fired != 0 || len(inst.Timeouts) != 1 {
		t.Errorf("h-far: Fired %d, pending %v; want its timeout still pending", d.Fired, inst.Timeouts)
	}
}

// TestEarlyTimeoutVirtualClock runs the early engine on the memory broker
// in a synctest bubble: the dispatcher holds the timeout on the virtual
// clock and handles it exactly at its due time.
func TestEarlyTimeoutVirtualClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		runs := &earlyRuns{}
		const lead = 5 * time.Second
		d, err := saga.NewDispatcher(b, memstore.New(), "early-virtual", saga.WithSagas(earlySaga(runs)),
			saga.WithLogger(testutil.Logger()), saga.WithTimeouts(timeout.NewQueue(b, timeout.WithEarlyActivation(lead))))
		if err != nil {
			t.Fatal(err)
		}
		var held atomic.Int32
		saga.OnHold(d, func(*transport.Delivery) { held.Add(1) })
		done := make(chan error)
		go func() { done <- d.Run(ctx) }()
		due := time.Now().Add(time.Hour)
		if _, err := d.Send(ctx, EarlyStart{ID: "v-1", Due: due}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(due.Add(-lead / 2)))
		synctest.Wait()
		if held.Load() != 1 || len(runs.all()) != 0 {
			t.Fatalf("at %v before the due time: %d held, handled %+v; want held, not handled", lead/2, held.Load(), runs.all())
		}
		time.Sleep(time.Until(due))
		synctest.Wait()
		if r := runs.all(); len(r) != 1 || !r[0].At.Equal(due) || !r[0].CtxNow.Equal(due) {
			t.Errorf("handled %+v, want once, at the due time %v", r, due)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
