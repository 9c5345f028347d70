package saga_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	remindMe  struct{ ID string }
	reminded  struct{ ID string }
	remindDue struct{}
)

func (remindDue) MessageName() string { return "reminder.Due" }

// A saga type's pending timeouts moved from the default engine to another
// after a routing change. Both engines are scheduled messages on the
// in-memory broker here; in production the other is typically Temporal
// (timeout/temporal).
func ExampleDispatcher_MigrateTimeouts() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	reminder := saga.Define[struct{}]("reminder")
	saga.StartedBy(reminder, saga.By(func(m remindMe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m remindMe) error {
			if _, err := c.RequestTimeout(24*time.Hour, remindDue{}); err != nil {
				return err
			}
			return c.Send("reminders-started", reminded(m))
		})
	saga.OnTimeout(reminder, func(ctx context.Context, c *saga.Context[struct{}], _ remindDue) error {
		c.MarkComplete()
		return nil
	})
	// The router has both engines: the one the timeouts are on, and the
	// one they move to (here named "archive").
	router := &timeout.Router{Default: timeout.NewQueue(broker), Routes: []timeout.Route{
		{Engine: "archive", Scheduler: timeout.NewQueue(broker, timeout.WithEngineName("archive")), Beyond: math.MaxInt64},
	}}
	d, err := saga.NewDispatcher(broker, memstore.New(), "reminders", saga.WithSagas(reminder), saga.WithTimeouts(router))
	if err != nil {
		fmt.Println(err)
		return
	}
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()

	d.Send(ctx, remindMe{ID: "r1"})
	started, _ := broker.Queue(ctx, "reminders-started")
	if ds, err := started.Receive(ctx, 1); err == nil {
		ds[0].Complete(ctx)
	}

	for m, err := range d.MigrateTimeouts(ctx, "reminder", "archive") {
		fmt.Println(m.ID, m.Type, m.Outcome, m.From.Engine(), "->", m.To.Engine(), err)
	}
	left, _ := d.DrainReport(ctx, "reminder", timeout.QueueEngine)
	fmt.Println("drained:", left.Drained(), len(left.Stale))
	now, _ := d.DrainReport(ctx, "reminder", "archive")
	fmt.Println("on archive:", now.ByType)

	cancel()
	<-done
	// Output:
	// r1 reminder.Due moved queue -> archive <nil>
	// drained: true 0
	// on archive: map[reminder.Due:1]
}

// TestMigrateTimeoutsWhileFiring moves n pending timeouts, due over the
// next two seconds, to another engine and back while they fire: each is
// handled once (counted in the instance's committed state: a handler may
// run again after a conflict, its commit is once), never before its due
// time, and each move reports moved or fired.
func TestMigrateTimeoutsWhileFiring(t *testing.T) {
	t.Parallel()
	const n = 300
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	type begin struct {
		ID  string
		Due time.Time
	}
	flow := saga.Define[migData]("mig-mem")
	saga.StartedBy(flow, saga.By(func(m begin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[migData], m begin) error {
			c.Data.Due = m.Due
			_, err := c.RequestTimeoutAt(m.Due, remindDue{})
			return err
		})
	saga.OnTimeout(flow, func(ctx context.Context, c *saga.Context[migData], _ remindDue) error {
		c.Data.Fired++
		c.Data.Early = c.Data.Early || time.Now().Before(c.Data.Due)
		return nil
	})
	router := &timeout.Router{Default: timeout.NewQueue(broker), Routes: []timeout.Route{
		{Engine: "archive", Scheduler: timeout.NewQueue(broker, timeout.WithEngineName("archive")), Beyond: math.MaxInt64},
	}}
	d, err := saga.NewDispatcher(broker, memstore.New(), "mig-mem", saga.WithSagas(flow), saga.WithTimeouts(router), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	ids := make([]string, n)
	start := time.Now().Add(time.Second)
	for i := range n {
		ids[i] = "m" + strconv.Itoa(i)
		if _, err := d.Send(t.Context(), begin{ID: ids[i], Due: start.Add(time.Duration(i) * 2 * time.Second / n)}); err != nil {
			t.Fatal(err)
		}
	}
	fired := func() (k int) {
		for _, id := range ids {
			if s, _, _ := data[migData](t, d, "mig-mem", id); s.Fired > 0 {
				k++
			}
		}
		return k
	}
	testutil.AwaitTrue(t, 10*time.Second, "every timeout scheduled", func() bool {
		k := 0
		for _, err := range d.ScheduledTimeouts(t.Context(), "mig-mem") {
			if err == nil {
				k++
			}
		}
		return k == n
	})
	// The migration starts as the first timeouts fire.
	testutil.AwaitTrue(t, 10*time.Second, "the first timeout fired", func() bool {
		s, _, _ := data[migData](t, d, "mig-mem", ids[0])
		return s.Fired > 0
	})
	outcomes := map[saga.MigrateOutcome]int{}
	began, firedBefore := time.Now(), fired()
	for _, to := range []string{"archive", timeout.QueueEngine} {
		for m, err := range d.MigrateTimeouts(t.Context(), "mig-mem", to) {
			if err != nil {
				t.Fatalf("to %s: %+v: %v", to, m, err)
			}
			if m.Outcome != saga.MigrateMoved && m.Outcome != saga.MigrateFired {
				t.Errorf("to %s: %+v: want moved or fired", to, m)
			}
			if m.Outcome == saga.MigrateMoved && m.To.Engine() != to {
				t.Errorf("to %s: %+v: moved to another engine", to, m)
			}
			outcomes[m.Outcome]++
		}
	}
	during := fired() - firedBefore
	t.Logf("outcomes: %v in %v; %d timeouts fired meanwhile", outcomes, time.Since(began), during)
	if outcomes[saga.MigrateMoved] == 0 || during == 0 {
		t.Errorf("outcomes %v, %d fired meanwhile: want timeouts moved while others fire", outcomes, during)
	}
	testutil.Await(t, 10*time.Second, func() string {
		if k := fired(); k < n {
			return fmt.Sprintf("%d of %d fired", k, n)
		}
		return ""
	})
	// Copies left on an engine have fired by now: the queue is empty once
	// they were handled or dropped.
	q, err := broker.Queue(t.Context(), "mig-mem")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Await(t, 10*time.Second, func() string { return queueEmpty(t, q) })
	for _, id := range ids {
		if s, _, _ := data[migData](t, d, "mig-mem", id); s.Fired != 1 || s.Early {
			t.Errorf("%s: handled %d times, early %v; want once, not early", id, s.Fired, s.Early)
		}
	}
	for _, eng := range []string{timeout.QueueEngine, "archive"} {
		r, err := d.DrainReport(t.Context(), "mig-mem", eng)
		if err != nil || !r.Drained() || len(r.Stale) > 0 {
			t.Errorf("DrainReport(%s): %+v, %v; want drained, nothing stale", eng, r, err)
		}
	}
}

type migData struct {
	Due   time.Time
	Fired int
	Early bool
}

// TestMigrateTimeoutsRefusesUnknownEngine: a migration to, and a drain
// report of, an engine the dispatcher's scheduler does not have fail with
// ErrUnknownEngine.
func TestMigrateTimeoutsRefusesUnknownEngine(t *testing.T) {
	t.Parallel()
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	flow := saga.Define[struct{}]("mig-unknown")
	saga.StartedBy(flow, saga.By(func(m remindMe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m remindMe) error { return nil })
	for _, sched := range []timeout.Scheduler{timeout.NewQueue(broker), &timeout.Router{Default: timeout.NewQueue(broker)}} {
		d, err := saga.NewDispatcher(broker, memstore.New(), "mig-unknown", saga.WithSagas(flow), saga.WithTimeouts(sched))
		if err != nil {
			t.Fatal(err)
		}
		for _, err := range d.MigrateTimeouts(t.Context(), "mig-unknown", "temporal") {
			if !errors.Is(err, saga.ErrUnknownEngine) {
				t.Errorf("%T: MigrateTimeouts to an unknown engine: %v, want ErrUnknownEngine", sched, err)
			}
		}
		if _, err := d.DrainReport(t.Context(), "mig-unknown", "temporal"); !errors.Is(err, saga.ErrUnknownEngine) {
			t.Errorf("%T: DrainReport of an unknown engine: %v, want ErrUnknownEngine", sched, err)
		}
	}
}

// lingeringEngine is a queue engine whose copies stay behind: its
// Cancel reports a timeout already fired without cancelling it, as the
// JetStream transport does for one due within its cancel margin, and its
// copies come an hour late, so that a copy a migration moved away is
// still listed after the moved timeout fired on the new engine.
type lingeringEngine struct{ *timeout.Queue }

func (e lingeringEngine) Schedule(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
	t.At = t.At.Add(time.Hour)
	return e.Queue.Schedule(ctx, t)
}

func (lingeringEngine) Cancel(context.Context, timeout.Ref) error { return timeout.ErrAlreadyFired }

// TestMigrateAgainAfterMovedTimeoutFired: migrating again lists the old
// engine's copy of a timeout an earlier migration moved; once the moved
// timeout has fired on the new engine, that copy is reported fired (the
// timeout was handled), not cancelled (which says the saga gave it up).
func TestMigrateAgainAfterMovedTimeoutFired(t *testing.T) {
	t.Parallel()
	broker, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	type begin struct{ ID string }
	flow := saga.Define[migData]("mig-again")
	saga.StartedBy(flow, saga.By(func(m begin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[migData], m begin) error {
			_, err := c.RequestTimeout(300*time.Millisecond, remindDue{})
			return err
		})
	saga.OnTimeout(flow, func(ctx context.Context, c *saga.Context[migData], _ remindDue) error {
		c.Data.Fired++
		return nil
	})
	router := &timeout.Router{Default: lingeringEngine{timeout.NewQueue(broker)}, Routes: []timeout.Route{
		{Engine: "archive", Scheduler: timeout.NewQueue(broker, timeout.WithEngineName("archive")), Beyond: math.MaxInt64},
	}}
	d, err := saga.NewDispatcher(broker, memstore.New(), "mig-again", saga.WithSagas(flow), saga.WithTimeouts(router), saga.WithLogger(testutil.Logger()))
	if err != nil {
		t.Fatal(err)
	}
	run(t, d)
	if _, err := d.Send(t.Context(), begin{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	migrate := func() []saga.Migrated {
		var out []saga.Migrated
		for m, err := range d.MigrateTimeouts(t.Context(), "mig-again", "archive") {
			if err != nil {
				t.Fatalf("%+v: %v", m, err)
			}
			out = append(out, m)
		}
		return out
	}
	testutil.AwaitTrue(t, 10*time.Second, "the timeout scheduled", func() bool {
		for _, err := range d.ScheduledTimeouts(t.Context(), "mig-again") {
			return err == nil
		}
		return false
	})
	if ms := migrate(); len(ms) != 1 || ms[0].Outcome != saga.MigrateMoved {
		t.Fatalf("first migration: %+v, want one moved", ms)
	}
	testutil.AwaitTrue(t, 10*time.Second, "the moved timeout handled", func() bool {
		s, _, _ := data[migData](t, d, "mig-again", "a")
		return s.Fired == 1
	})
	ms := migrate()
	if len(ms) != 1 || ms[0].Outcome != saga.MigrateFired {
		t.Fatalf("second migration: %+v, want the old copy reported fired", ms)
	}
}
