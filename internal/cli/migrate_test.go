package cli

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
)

type (
	Remind    struct{ ID string }
	remindDue struct{}
)

func (remindDue) MessageName() string { return "ops.RemindDue" }

// TestTimeoutsMigrateAndDrain moves a saga type's timeouts to a second
// engine with timeouts migrate (the second engine stands for Temporal: a
// transport engine named "temporal", added as the Temporal build adds
// its engine), and drain reports what each engine holds.
func TestTimeoutsMigrateAndDrain(t *testing.T) {
	w := newWorkload(t)
	second := timeout.NewQueue(w.broker, timeout.WithEngineName("temporal"))
	opts := []Option{WithEngine("temporal", func(context.Context, string, string) (EngineScheduler, func(), error) {
		return second, nil, nil
	})}
	d := saga.Define[struct{}]("reminder")
	saga.StartedBy(d, saga.By(func(m Remind) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m Remind) error {
			_, err := c.RequestTimeout(time.Hour, remindDue{})
			return err
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[struct{}], remindDue) error { return nil })
	router := &timeout.Router{Default: timeout.NewQueue(w.broker), Routes: []timeout.Route{{Engine: "temporal", Scheduler: second, Beyond: math.MaxInt64}}}
	disp := w.dispatcher("reminders", saga.WithSagas(d), saga.WithTimeouts(router))
	sendAll(t, disp, Remind{ID: "r1"}, Remind{ID: "r2"})
	testutil.AwaitTrue(t, 15*time.Second, "two timeouts listed", func() bool {
		r := w.run("timeouts", "list", "--saga", "reminder", "--json")
		return r.code == 0 && len(decode[[]PendingView](t, r.stdout)) == 2
	})
	// --queue: the stand-in engine lists one queue at a time, which a
	// listing of every queue cannot give it.
	t2, q := "--temporal-address=t:1", "--queue=reminders"
	if r := w.runWith(opts, "", t2, "timeouts", "migrate", q, "--saga", "reminder", "--to", "temporal"); r.code != ExitAborted {
		t.Fatalf("migrate without --yes: %v", r)
	}
	if r := w.runWith(opts, "", t2, "timeouts", "migrate", q, "--saga", "reminder", "--to", "nowhere", "--yes"); r.code != ExitUsage {
		t.Fatalf("migrate to an unknown engine: %v", r)
	}
	if r := w.run("timeouts", "migrate", q, "--saga", "reminder", "--to", "temporal", "--yes"); r.code != ExitUsage {
		t.Fatalf("migrate to temporal without the engine: %v", r)
	}
	r := w.runWith(opts, "", t2, "timeouts", "migrate", q, "--saga", "reminder", "--to", "temporal", "--yes", "--json")
	if r.code != 0 {
		t.Fatalf("migrate: %v", r)
	}
	rows := decode[[]MigrateView](t, r.stdout)
	if len(rows) != 2 {
		t.Fatalf("migrate: %+v, want two rows", rows)
	}
	for _, rw := range rows {
		if rw.Outcome != "moved" || timeout.Ref(rw.From).Engine() != "queue" || timeout.Ref(rw.To).Engine() != "temporal" {
			t.Errorf("migrate row %+v; want moved from queue to temporal", rw)
		}
	}
	left := decode[DrainView](t, w.runWith(opts, "", t2, "timeouts", "drain", q, "--saga", "reminder", "--engine", "queue", "--json").stdout)
	if !left.Drained || len(left.Pending)+len(left.Stale) != 0 {
		t.Errorf("drain queue: %+v; want drained, nothing stale", left)
	}
	now := decode[DrainView](t, w.runWith(opts, "", t2, "timeouts", "drain", q, "--saga", "reminder", "--engine", "temporal", "--json").stdout)
	if now.Drained || len(now.Pending) != 2 || now.ByType["ops.RemindDue"] != 2 {
		t.Errorf("drain temporal: %+v; want the two timeouts pending", now)
	}
	if rows := decode[[]MigrateView](t, w.runWith(opts, "", t2, "timeouts", "migrate", q, "--saga", "reminder", "--to", "temporal", "--yes", "--json").stdout); len(rows) != 0 {
		t.Errorf("a second migration: %+v; want nothing to do", rows)
	}
}
