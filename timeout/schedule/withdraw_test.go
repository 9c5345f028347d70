package schedule_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// stateChanges are the writes that must cancel (or replace) a schedule's
// planned messages definitely. Each is applied to the schedule "s" (every
// 2 s, or a cron every minute on calendar office v1 for the calendar
// version) and returns what it leaves: whether occurrences after it go on
// (and under which body).
var stateChanges = []struct {
	name string
	// do applies the change and returns when the call that cancels the
	// plan returned (the cancels landed by then); after reports the body
	// the schedule's occurrences after it carry, or "" if none is to come.
	do    func(ctx context.Context, s *schedule.Scheduler, start time.Time) (time.Time, error)
	after string
}{
	{"pause", func(ctx context.Context, s *schedule.Scheduler, _ time.Time) (time.Time, error) {
		return returned(s.Pause(ctx, "s", ""))
	}, ""},
	{"delete", func(ctx context.Context, s *schedule.Scheduler, _ time.Time) (time.Time, error) {
		return returned(s.Delete(ctx, "s"))
	}, ""},
	{"spec change", func(ctx context.Context, s *schedule.Scheduler, start time.Time) (time.Time, error) {
		// Delete and create again with another message: the same times,
		// whose planned messages (IDs taken by the cancelled ones) must
		// still go out, once, with the new body.
		return respec(ctx, s, start, nil)
	}, "v2"},
	{"spec change across the instant", func(ctx context.Context, s *schedule.Scheduler, start time.Time) (time.Time, error) {
		// The same, created again at the next whole second: made just
		// before an occurrence, the Delete cancels its message and the
		// Create plans it at its very instant, under an ID the target
		// remembers as cancelled (not as sent).
		return respec(ctx, s, start, func() { sleepUntil(time.Now().Truncate(time.Second).Add(time.Second)) })
	}, "v2"},
}

// returned is now, with err: when a change returned.
func returned(err error) (time.Time, error) { return time.Now(), err }

// respec deletes the schedule "s" and creates it again from start with
// the body "v2"; between, if not nil, runs after the Delete. It returns
// when the Delete returned.
func respec(ctx context.Context, s *schedule.Scheduler, start time.Time, between func()) (time.Time, error) {
	info, err := s.Get(ctx, "s")
	if err != nil {
		return time.Time{}, err
	}
	if err := s.Delete(ctx, "s"); err != nil {
		return time.Time{}, err
	}
	deleted := time.Now()
	if between != nil {
		between()
	}
	return deleted, s.Create(ctx, schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: 2 * time.Second}, Start: start,
		End: start.Add(20 * time.Second), Action: schedule.Action{Queue: info.Action.Queue, Message: &transport.Message{Body: []byte("v2")}}})
}

// stateChangeCheck checks the occurrences of the schedule "s" received
// (recv) against a change made at op, racing the activation of the
// occurrence due then: every occurrence at most once, none early; none of
// the old plan due after margin (when the change's cancels returned, plus
// the broker's cancel margin: a cancel cannot land later); a
// paused schedule counts as sent exactly those received; the
// occurrences of a schedule created again with the body after all arrive
// and are counted.
func stateChangeCheck(t *testing.T, s *schedule.Scheduler, name string, after string, op, margin time.Time, recv func() []*transport.Message) {
	t.Helper()
	seen := map[string]int{}
	var sentOld int64
	for _, m := range recv() {
		nominal, err := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
		if err != nil {
			t.Fatal(err)
		}
		seen[m.Properties[schedule.PropertyNominal]]++
		if m.EnqueuedAt.Before(nominal) {
			t.Errorf("%s: occurrence %s enqueued %s early", name, m.MessageID, nominal.Sub(m.EnqueuedAt))
		}
		if string(m.Body) == after && after != "" {
			continue // the new schedule's
		}
		sentOld++
		if nominal.After(margin) {
			t.Errorf("%s: occurrence %s of the old plan received after the change at %s", name, m.MessageID, op.Format(time.RFC3339Nano))
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("%s: occurrence %s received %d times", name, id, n)
		}
	}
	info, err := s.Get(context.Background(), "s")
	switch {
	case after == "" && errors.Is(err, schedule.ErrNotFound):
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	case after == "" && info.Sent != sentOld:
		t.Errorf("%s: Info.Sent %d, but %d of its occurrences were received", name, info.Sent, sentOld)
	case after != "":
		// The new schedule's occurrences, from its creation on: an
		// occurrence of the old plan that activated as it was deleted
		// has the same ID, and stands for the new one's (the target
		// drops the second as a duplicate, as it would any resend).
		var n int64
		for _, m := range recv() {
			nominal, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
			if !nominal.Before(info.Created) {
				n++
			}
		}
		if n != info.Sent || !info.Ended {
			t.Errorf("%s: %d occurrences received since the schedule was created again, Info.Sent %d, ended %v", name, n, info.Sent, info.Ended)
		}
	}
}

// On the memory broker (virtual time): each state change, made 1 s
// before the planned occurrence of 4 s, at its instant, and just after,
// cancels the planned messages definitely: none of the old plan arrives
// after it, a Pause's record counts as sent exactly those that arrived,
// and the occurrences planned again after a spec change arrive once each
// under fresh IDs.
func TestStateChangesCancelThePlan(t *testing.T) {
	for _, c := range stateChanges {
		for _, off := range []time.Duration{-time.Second, -time.Nanosecond, 0, time.Nanosecond} {
			t.Run(fmt.Sprintf("%s/%v", c.name, off), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					h := newHarness(t)
					base := time.Now().Add(time.Minute).Truncate(time.Minute)
					h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: 2 * time.Second}, Start: base, End: base.Add(20 * time.Second)})
					h.run()
					defer h.stopRun()
					op := base.Add(4*time.Second + off)
					sleepUntil(op)
					done, err := c.do(h.ctx, h.s, base)
					if err != nil {
						t.Fatal(err)
					}
					sleepUntil(base.Add(22 * time.Second))
					_, msgs := h.received(base)
					n := 0
					for _, m := range msgs {
						if string(m.Body) == c.after && c.after != "" {
							n++
						}
					}
					stateChangeCheck(t, h.s, c.name, c.after, op, done, func() []*transport.Message { return msgs })
					if c.after != "" && n < 8 {
						t.Errorf("%d occurrences of the new schedule, want at least 8 (6 to 20 s)", n)
					}
				})
			})
		}
	}
}

// A new calendar version (Replan) that makes today a holiday cancels the
// planned occurrence of a cron schedule on that calendar definitely, made
// a second before it, at its instant and just after; a Replan onto a
// version that keeps it leaves it planned, under its own ID.
func TestReplanCancelsThePlan(t *testing.T) {
	for _, off := range []time.Duration{-time.Second, -time.Nanosecond, 0, time.Nanosecond} {
		t.Run(off.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				day := time.Date(2000, time.January, 4, 10, 0, 0, 0, time.UTC) // a Tuesday
				time.Sleep(time.Until(day))
				v1, err := calendar.New("office", "1")
				if err != nil {
					t.Fatal(err)
				}
				v2, err := calendar.New("office", "2", calendar.On(calendar.Date{Year: 2000, Month: time.January, Day: 4}, "closed"))
				if err != nil {
					t.Fatal(err)
				}
				same, err := calendar.New("office", "3", calendar.On(calendar.Date{Year: 2000, Month: time.January, Day: 7}, "closed"))
				if err != nil {
					t.Fatal(err)
				}
				reg := &calendar.Registry{}
				if err := reg.Add(v1, v2, same); err != nil {
					t.Fatal(err)
				}
				h := newHarness(t, schedule.WithCalendars(reg))
				h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Cron: "* * * * *", Zone: "UTC", Calendar: calendar.RefOf(v1)}})
				h.run()
				defer h.stopRun()
				// Onto a version that keeps today's occurrences: 10:01 stays
				// planned, under its ID.
				sleepUntil(day.Add(30 * time.Second))
				if err := h.s.Replan(h.ctx, "s", calendar.RefOf(same)); err != nil {
					t.Fatal(err)
				}
				op := day.Add(2*time.Minute + off)
				sleepUntil(op)
				if err := h.s.Replan(h.ctx, "s", calendar.RefOf(v2)); err != nil {
					t.Fatal(err)
				}
				sleepUntil(day.Add(10 * time.Minute))
				_, msgs := h.received(day)
				for _, m := range msgs {
					if nominal, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal]); m.MessageID != schedule.OccurrenceID("s", nominal) {
						t.Errorf("occurrence %s: MessageID %s", m.Properties[schedule.PropertyNominal], m.MessageID)
					}
				}
				if len(msgs) < 1 {
					t.Errorf("received %d occurrences, want 10:01 at least", len(msgs))
				}
				stateChangeCheck(t, h.s, "replan", "", op, op, func() []*transport.Message { return msgs })
			})
		})
	}
}

// On nats-server, where Cancel counts a message due within 500 ms as
// activated: each state change made around the planned occurrence of
// 4 s (from 700 ms before to 150 ms after) cancels the plan definitely —
// nothing of the old plan arrives after the change's instant plus that
// margin, a Pause counts as sent exactly what arrived, and a spec change's
// new occurrences arrive once each.
func TestStateChangesCancelThePlanOnNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("40 s on a real server; run without -short")
	}
	_, b := jetStream(t)
	ctx := t.Context()
	offsets := []time.Duration{-700 * time.Millisecond, -450 * time.Millisecond, -100 * time.Millisecond, 0, 150 * time.Millisecond}
	type run struct {
		*natsRun
		c    int
		off  time.Duration
		done time.Time // when the change's cancels returned
	}
	var runs []*run
	base := time.Now().Truncate(time.Second).Add(15 * time.Second)
	for ci := range stateChanges {
		for _, off := range offsets {
			runs = append(runs, &run{c: ci, off: off, natsRun: startNATSRun(ctx, t, b, fmt.Sprintf("home-%d-%d", ci, len(runs)),
				schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: 2 * time.Second}, Start: base, End: base.Add(20 * time.Second)})})
		}
	}
	if time.Now().After(base) {
		t.Fatal("set-up took past the first occurrence")
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			sleepUntil(base.Add(4*time.Second + r.off))
			c := stateChanges[r.c]
			var err error
			if r.done, err = c.do(ctx, r.s, base); err != nil {
				t.Errorf("%s at %v: %v", c.name, r.off, err)
			}
		})
	}
	wg.Wait()
	sleepUntil(base.Add(23 * time.Second))
	for _, r := range runs {
		c := stateChanges[r.c]
		op := base.Add(4*time.Second + r.off)
		msgs := r.received()
		stateChangeCheck(t, r.s, fmt.Sprintf("%s at %v", c.name, r.off), c.after, op, r.done.Add(500*time.Millisecond),
			func() []*transport.Message { return msgs })
	}
}

// natsRun is a schedule "s" on a scheduler of its own (home queue qn) on
// nats-server, with a Run, and the occurrences its target received.
type natsRun struct {
	s    *schedule.Scheduler
	mu   sync.Mutex
	msgs []*transport.Message
}

// startNATSRun creates sch (its action sent to the queue "work-"+qn) on
// a scheduler with the home queue qn, starts its Run and collects what
// the target receives.
func startNATSRun(ctx context.Context, t *testing.T, b *transport.Broker, qn string, sch schedule.Schedule, opts ...schedule.Option) *natsRun {
	t.Helper()
	r := &natsRun{}
	var err error
	if r.s, err = schedule.New(b, append([]schedule.Option{schedule.WithQueue(qn), schedule.WithLogger(discard())}, opts...)...); err != nil {
		t.Fatal(err)
	}
	work, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "work-" + qn})
	if err != nil {
		t.Fatal(err)
	}
	sch.Action = schedule.Action{Queue: work.Name(), Message: &transport.Message{Body: []byte("v1")}}
	if err := r.s.Create(ctx, sch); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.s.Run(ctx) }()
	consume(ctx, work, func(m *transport.Message) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, m)
	})
	return r
}

// received returns what the target received so far.
func (r *natsRun) received() []*transport.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*transport.Message(nil), r.msgs...)
}

// The target tells what became of a MessageID it remembers, which
// planning relies on: a cancelled scheduled message's ID is reported
// Cancelled on a later send (scheduled or not), one that activated is
// not — on the memory broker and on nats-server.
func TestTargetReportsCancelledIDs(t *testing.T) {
	for name, open := range brokers {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			q, err := open(t).OpenQueue(ctx, transport.QueueConfig{Name: "work"})
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now().Add(time.Hour)
			res, err := q.Send(ctx, &transport.Message{MessageID: "x", ScheduledAt: at})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Cancel(ctx, res.Seq); err != nil {
				t.Fatal(err)
			}
			for _, again := range []time.Time{at, {}} {
				res, err := q.Send(ctx, &transport.Message{MessageID: "x", ScheduledAt: again})
				if err != nil {
					t.Fatal(err)
				}
				if !res.Duplicate || !res.Cancelled || res.Seq != 0 {
					t.Errorf("send of a cancelled ID (scheduled at %v): %+v, want a duplicate, cancelled", again, res)
				}
			}
			if _, err := q.Send(ctx, &transport.Message{MessageID: "y", ScheduledAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			ds, err := q.Receive(ctx, 1)
			if err != nil || len(ds) != 1 || ds[0].Message.MessageID != "y" {
				t.Fatalf("receive: %v %v", ds, err)
			}
			res, err = q.Send(ctx, &transport.Message{MessageID: "y", ScheduledAt: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Duplicate || res.Cancelled {
				t.Errorf("send of an activated ID: %+v, want a duplicate, not cancelled", res)
			}
		})
	}
}

// On nats-server: a new calendar version that makes today a holiday
// (Replan), made around the planned occurrence of a cron schedule every
// minute (from 700 ms before to 150 ms after), cancels the plan
// definitely — nothing of it arrives after the change plus the server's
// cancel margin, and the record counts as sent exactly what arrived.
func TestReplanCancelsThePlanOnNATS(t *testing.T) {
	t.Parallel() // waits on real time: overlaps the package's other long waits
	if testing.Short() {
		t.Skip("up to 90 s on a real server; run without -short")
	}
	_, b := jetStream(t)
	ctx := t.Context()
	base := time.Now().Add(20 * time.Second).Truncate(time.Minute).Add(time.Minute).UTC()
	v1, err := calendar.New("office", "1")
	if err != nil {
		t.Fatal(err)
	}
	day := func(t time.Time) calendar.Date { return calendar.Date{Year: t.Year(), Month: t.Month(), Day: t.Day()} }
	v2, err := calendar.New("office", "2", calendar.On(day(base), "closed"), calendar.On(day(base.Add(24*time.Hour)), "closed"))
	if err != nil {
		t.Fatal(err)
	}
	reg := &calendar.Registry{}
	if err := reg.Add(v1, v2); err != nil {
		t.Fatal(err)
	}
	offsets := []time.Duration{-700 * time.Millisecond, -450 * time.Millisecond, -100 * time.Millisecond, 0, 150 * time.Millisecond}
	runs := make([]*natsRun, len(offsets))
	for i := range offsets {
		runs[i] = startNATSRun(ctx, t, b, fmt.Sprintf("home-%d", i),
			schedule.Schedule{Name: "s", Spec: schedule.Spec{Cron: "* * * * *", Zone: "UTC", Calendar: calendar.RefOf(v1)}}, schedule.WithCalendars(reg))
	}
	done := make([]time.Time, len(runs)) // when each Replan returned
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Go(func() {
			sleepUntil(base.Add(offsets[i]))
			var err error
			if done[i], err = returned(r.s.Replan(ctx, "s", calendar.RefOf(v2))); err != nil {
				t.Errorf("replan at %v: %v", offsets[i], err)
			}
		})
	}
	wg.Wait()
	sleepUntil(base.Add(time.Minute + 2*time.Second))
	for i, r := range runs {
		op := base.Add(offsets[i])
		msgs := r.received()
		stateChangeCheck(t, r.s, fmt.Sprintf("replan at %v", offsets[i]), "", op, done[i].Add(500*time.Millisecond),
			func() []*transport.Message { return msgs })
	}
}

// Deleting a schedule's target queue, paused first as the docs say, and
// creating it again: after Resume the occurrences reach the new queue
// (not the deleted one a Run may still hold), and the record counts as
// sent exactly what the queues received.
func TestResumeAfterTheTargetQueueIsCreatedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: 2 * time.Second}, Start: base, End: base.Add(time.Minute)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(3 * time.Second))
		if err := h.s.Pause(h.ctx, "s", "moving the queue"); err != nil {
			t.Fatal(err)
		}
		before, _ := h.received(base)
		if err := h.b.DeleteQueue(h.ctx, "work"); err != nil {
			t.Fatal(err)
		}
		q, err := h.b.OpenQueue(h.ctx, transport.QueueConfig{Name: "work"})
		if err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(10 * time.Second))
		if err := h.s.Resume(h.ctx, "s", ""); err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(2 * time.Minute))
		synctest.Wait()
		var after []int
		for m, err := range q.Browse(h.ctx, 0) {
			if err != nil {
				t.Fatal(err)
			}
			n, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
			after = append(after, int(n.Sub(base)/time.Second))
		}
		equalInts(t, "received before the pause", before, []int{0, 2})
		var want []int
		for i := 12; i <= 60; i += 2 {
			want = append(want, i)
		}
		equalInts(t, "received on the queue created again", after, want)
		info, err := h.s.Get(h.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if info.Sent != int64(len(before)+len(after)) {
			t.Errorf("Info.Sent %d, received %d", info.Sent, len(before)+len(after))
		}
	})
}
