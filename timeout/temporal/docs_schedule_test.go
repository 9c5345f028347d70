package temporal_test

import (
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
	"github.com/jetsaga/jetsaga/transport/embedded"
)

// docsScheduleRouter is the snippet of docs/schedules.md (internal/doccheck
// checks that the guide quotes it): a scheduler whose ticks due more than a
// day ahead wait on Temporal, the others on the queue.
func docsScheduleRouter(c client.Client, b *transport.Broker) (*schedule.Scheduler, error) {
	engine, err := temporal.New(c) // and a temporal.Worker (or temporal.Register) running
	if err != nil {
		return nil, err
	}
	ticks := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{engine.Route(24 * time.Hour)}}
	return schedule.New(b, schedule.WithTimeouts(ticks))
}

// TestScheduleRouter runs the guide's snippet on a dev server: a monthly
// schedule's tick waits on Temporal, an hourly one's on the queue; after
// a Delete, the monthly tick's workflow is no longer pending.
func TestScheduleRouter(t *testing.T) {
	srv := temporaltest.New(t, temporaltest.Options{})
	c := srv.Client(t)
	ns := testutil.StartServer(t, embedded.Options{})
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	b, err := transport.NewJetStream(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); nc.Close() })
	s, err := docsScheduleRouter(c, b)
	if err != nil {
		t.Fatal(err)
	}
	w, err := temporal.NewWorker(c, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	for _, tc := range []struct {
		name, cron, engine string
	}{
		{"monthly", "0 9 1 * *", temporal.DefaultEngineName},
		{"hourly", "0 * * * *", timeout.QueueEngine},
	} {
		err := s.Create(t.Context(), schedule.Schedule{Name: tc.name, Spec: schedule.Spec{Cron: tc.cron, Zone: "Europe/Warsaw"},
			Start:  time.Now().Add(2 * time.Hour), // more than an hour away, whatever the time
			Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}})
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Get(t.Context(), tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if info.Engine != tc.engine {
			t.Errorf("%s (next %v): tick on %q, want %q", tc.name, info.Next, info.Engine, tc.engine)
		}
	}
	engine, err := temporal.New(c)
	if err != nil {
		t.Fatal(err)
	}
	pending := func() int {
		n := 0
		for _, err := range engine.Pending(t.Context(), timeout.Filter{Queue: s.Queue()}) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		return n
	}
	testutil.AwaitTrue(t, 10*time.Second, "the monthly tick listed on Temporal", func() bool { return pending() == 1 })
	if err := s.Delete(t.Context(), "monthly"); err != nil {
		t.Fatal(err)
	}
	testutil.AwaitTrue(t, 10*time.Second, "no tick pending on Temporal after Delete", func() bool { return pending() == 0 })
}
