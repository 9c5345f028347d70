package saga_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/transport"
)

// A timeout requested by a calendar rule and re-planned under a new
// version of the calendar, on a real nats-server: the engine's listing
// shows the rule, the re-plan cancels the old schedule and makes a new
// one, and the timeout fires once, at the new instant.

type (
	rpBegin struct {
		ID   string
		From time.Time
	}
	rpDue  struct{}
	rpData struct{ Fired int }
)

func (rpDue) MessageName() string { return "rp.due" }

func TestReplanOnJetStream(t *testing.T) {
	t.Parallel()
	// D is the day (UTC) of an instant 3 s from now. Counting one business
	// day from the same wall-clock time on the day before: D at that time
	// if D is a business day (version 2), the day after if D is a holiday
	// (version 1).
	due := time.Now().Add(3 * time.Second).UTC()
	day := calendar.DateOf(due)
	v1, err := calendar.New("ops", "1", calendar.Weekend(), calendar.On(day, "closed"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := calendar.New("ops", "2", calendar.Weekend())
	if err != nil {
		t.Fatal(err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(v1, v2); err != nil {
		t.Fatal(err)
	}
	d := saga.Define[rpData]("replan-nats")
	saga.StartedBy(d, saga.By(func(m rpBegin) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[rpData], m rpBegin) error {
			_, err := c.RequestTimeoutBy(calendar.BusinessDays(1).In("UTC"), rpDue{}, saga.RuleFrom(m.From))
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[rpData], _ rpDue) error {
		c.Data.Fired++
		return nil
	})
	qcfg := transport.QueueConfig{Name: "replan-nats"}
	n, q := queueOnNewServer(t, qcfg)
	disp := n.dispatcher(t, nil, qcfg.Name, saga.WithSagas(d), saga.WithCalendars(reg, calendar.RefOf(v1)))
	run(t, disp)
	if _, err := disp.Send(ctxFor(t), rpBegin{ID: "r", From: due.AddDate(0, 0, -1)}); err != nil {
		t.Fatal(err)
	}
	listed := func() ([]saga.ScheduledTimeout, error) {
		var out []saga.ScheduledTimeout
		for st, err := range disp.ScheduledTimeouts(ctxFor(t), "replan-nats") {
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		return out, nil
	}
	testutil.Await(t, 20*time.Second, func() string {
		sts, err := listed()
		if err != nil {
			return err.Error()
		}
		if len(sts) != 1 {
			return fmt.Sprintf("%d timeouts scheduled, want 1", len(sts))
		}
		return ""
	})
	sts, _ := listed()
	if st := sts[0]; st.Rule != "next business day in UTC" || st.Calendar != calendar.RefOf(v1) || !st.At.Equal(due.AddDate(0, 0, 1)) {
		t.Fatalf("listed %+v; want the rule, ops@1, due %v", st, due.AddDate(0, 0, 1))
	}
	res, err := disp.ReplanTimeouts(ctxFor(t), "replan-nats", calendar.RefOf(v2))
	if err != nil || len(res) != 1 || !res[0].Changed() || !res[0].NewAt.Equal(due) || !res[0].OldAt.Equal(due.AddDate(0, 0, 1)) {
		t.Fatalf("ReplanTimeouts: %+v, %v; want one timeout moved to %v", res, err, due)
	}
	testutil.Await(t, 20*time.Second, func() string {
		s, inst, ok := data[rpData](t, disp, "replan-nats", "r")
		if !ok || s.Fired != 1 || len(inst.Timeouts) != 0 {
			return fmt.Sprintf("fired %d times, pending %+v; want once, none", s.Fired, inst)
		}
		sts, err := listed()
		if err != nil {
			return err.Error()
		}
		if len(sts) != 0 {
			return fmt.Sprintf("still scheduled: %+v (the schedule before the re-plan not cancelled?)", sts)
		}
		return queueEmpty(t, q)
	})
	if s, _, _ := data[rpData](t, disp, "replan-nats", "r"); s.Fired != 1 {
		t.Errorf("fired %d times, want once", s.Fired)
	}
}
