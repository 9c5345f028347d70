package schedule_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// harness is a memory broker, a scheduler and a consumer of the target
// queue "work", in a synctest bubble.
type harness struct {
	t   *testing.T
	b   *transport.Broker
	s   *schedule.Scheduler
	ctx context.Context

	mu  sync.Mutex
	got []*transport.Message

	stopRun func()
}

func newHarness(t *testing.T, opts ...schedule.Option) *harness {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	s, err := schedule.New(b, append([]schedule.Option{schedule.WithLogger(discard())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, b: b, s: s, ctx: t.Context()}
	// A short duplicate window: what the queue forgets, the scheduler's
	// record must know.
	q, err := b.OpenQueue(h.ctx, transport.QueueConfig{Name: "work", DuplicateWindow: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			ds, err := q.Receive(h.ctx, 100)
			if err != nil {
				return
			}
			for _, d := range ds {
				h.mu.Lock()
				h.got = append(h.got, d.Message)
				h.mu.Unlock()
				_ = d.Complete(h.ctx)
			}
		}
	}()
	return h
}

// run starts the runner; stop (the harness's stopRun) stops it.
func (h *harness) run() {
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.s.Run(ctx) }()
	h.stopRun = func() { cancel(); <-done }
}

func (h *harness) create(sch schedule.Schedule) {
	h.t.Helper()
	if sch.Action.Queue == "" && sch.Action.Topic == "" {
		sch.Action = schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}
	}
	if err := h.s.Create(h.ctx, sch); err != nil {
		h.t.Fatal(err)
	}
}

// received returns the nominal times received so far (as offsets from
// base, in seconds) and the messages.
func (h *harness) received(base time.Time) ([]int, []*transport.Message) {
	synctest.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for _, m := range h.got {
		n, err := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
		if err != nil {
			h.t.Fatalf("nominal %q: %v", m.Properties[schedule.PropertyNominal], err)
		}
		out = append(out, int(n.Sub(base)/time.Second))
	}
	return out, append([]*transport.Message(nil), h.got...)
}

func equalInts(t *testing.T, what string, got, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %v, want %v", what, got, want)
		}
	}
}

func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// An outage of the runner from 2.5 s to 40 s on a schedule every second,
// planned 30 s ahead: the occurrences planned before it (up to 31 s: the
// runner planned at 1 s) are sent on time by the server; when the runner
// is back at 40 s the catch-up policy decides what the ones not planned
// (32 to 40, tolerance 2 s: 32..37 late, 38..40 on time) become.
func TestCatchUpPolicies(t *testing.T) {
	cases := []struct {
		policy    schedule.CatchUpPolicy
		want      []int
		coalesced map[int]string
		skipped   int64
	}{
		{schedule.CatchUpFire, seq(0, 44), nil, 0},
		{schedule.CatchUpSkip, append(seq(0, 31), seq(38, 44)...), nil, 6},
		{schedule.CatchUpCoalesce, append(seq(0, 31), seq(37, 44)...), map[int]string{37: "6"}, 5},
	}
	for _, c := range cases {
		t.Run(c.policy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var hookSent, hookSkipped, hookLate int64
				coalescedHook := 0
				h := newHarness(t, schedule.WithHorizon(schedule.MinHorizon), schedule.WithHooks(schedule.Hooks{
					Sent: func(_ context.Context, p schedule.OccurrenceParams) {
						hookSent++
						if p.Late {
							hookLate++
						}
						coalescedHook += p.Coalesced
					},
					Skipped: func(_ context.Context, p schedule.OccurrenceParams) {
						if !p.Late || p.Lateness <= 2*time.Second {
							t.Errorf("skipped %s with lateness %s, late %v", p.ID, p.Lateness, p.Late)
						}
						hookSkipped++
					},
				}))
				base := time.Now().Add(time.Minute).Truncate(time.Minute)
				h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base,
					End: base.Add(44 * time.Second), CatchUp: schedule.CatchUp{Policy: c.policy, Tolerance: 2 * time.Second}})
				h.run()
				sleepUntil(base.Add(2*time.Second + 500*time.Millisecond))
				h.stopRun()
				sleepUntil(base.Add(40 * time.Second))
				h.run()
				sleepUntil(base.Add(50 * time.Second))
				got, msgs := h.received(base)
				equalInts(t, "nominal seconds", got, c.want)
				for i, m := range msgs {
					if w := c.coalesced[got[i]]; m.Properties[schedule.PropertyCoalesced] != w {
						t.Errorf("occurrence %d: coalesced %q, want %q", got[i], m.Properties[schedule.PropertyCoalesced], w)
					}
				}
				info, err := h.s.Get(h.ctx, "s")
				if err != nil {
					t.Fatal(err)
				}
				if info.Skipped != c.skipped || info.Sent != int64(len(c.want)) {
					t.Errorf("sent %d skipped %d, want %d and %d", info.Sent, info.Skipped, len(c.want), c.skipped)
				}
				if hookSent != info.Sent || hookSkipped != info.Skipped || hookLate != info.Late {
					t.Errorf("hooks: sent %d skipped %d late %d, info: %d %d %d", hookSent, hookSkipped, hookLate, info.Sent, info.Skipped, info.Late)
				}
				if w := c.coalesced[37]; w != "" && strconv.Itoa(coalescedHook) != w {
					t.Errorf("hooks: coalesced %d, want %s", coalescedHook, w)
				}
				h.stopRun()
			})
		})
	}
}

// Pause stops occurrences (the pending one too), resume goes on from the
// next one after now, and Backfill sends the skipped ones, once.
func TestPauseResumeBackfill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(20 * time.Second)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(3*time.Second + 500*time.Millisecond))
		if err := h.s.Pause(h.ctx, "s", "maintenance window"); err != nil {
			t.Fatal(err)
		}
		info, _ := h.s.Get(h.ctx, "s")
		if !info.Paused || info.PauseNote != "maintenance window" {
			t.Fatalf("paused %v note %q, want paused with the note", info.Paused, info.PauseNote)
		}
		sleepUntil(base.Add(8*time.Second + 500*time.Millisecond))
		got, _ := h.received(base)
		equalInts(t, "before resume", got, seq(0, 3))
		if err := h.s.Resume(h.ctx, "s", ""); err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(12*time.Second + 500*time.Millisecond))
		got, _ = h.received(base)
		equalInts(t, "after resume", got, append(seq(0, 3), seq(9, 12)...))

		// Backfill 2..10: 2, 3, 9, 10 were sent by the schedule, 4..8 skipped by the pause.
		occ, err := h.s.Backfill(h.ctx, "s", base.Add(2*time.Second), base.Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var sent []int
		for _, o := range occ {
			if o.Sent && !o.Duplicate {
				sent = append(sent, int(o.Nominal.Sub(base)/time.Second))
			}
		}
		equalInts(t, "backfilled", sent, seq(4, 8))
		// Again: the queue remembers every one of them.
		occ, err = h.s.Backfill(h.ctx, "s", base.Add(2*time.Second), base.Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range occ {
			if o.Sent && !o.Duplicate {
				t.Errorf("second backfill sent %s again", o.ID)
			}
		}
		sleepUntil(base.Add(21 * time.Second))
		got, msgs := h.received(base)
		counts := map[int]int{}
		for _, g := range got {
			counts[g]++
		}
		for i := 0; i <= 20; i++ {
			if counts[i] != 1 {
				t.Errorf("occurrence %d received %d times, want once (got %v)", i, counts[i], got)
			}
		}
		causes := map[string]int{}
		for _, m := range msgs {
			causes[m.Properties[schedule.PropertyCause]]++
		}
		if causes[schedule.CauseBackfill] != 5 || causes[schedule.CauseSchedule] != 16 {
			t.Errorf("causes %v, want 5 backfill and 16 schedule", causes)
		}
	})
}

func TestTriggerAndDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Cron: "0 9 * * *", Zone: "UTC"}, Start: base})
		h.run()
		defer h.stopRun()
		o, err := h.s.Trigger(h.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		_, msgs := h.received(base)
		if len(msgs) != 1 || msgs[0].MessageID != o.ID || msgs[0].Properties[schedule.PropertyCause] != schedule.CauseTrigger {
			t.Fatalf("after trigger got %v, want one message %s", msgs, o.ID)
		}
		if err := h.s.Delete(h.ctx, "s"); err != nil {
			t.Fatal(err)
		}
		if _, err := h.s.Get(h.ctx, "s"); !errors.Is(err, schedule.ErrNotFound) {
			t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
		}
		home, err := h.b.Queue(h.ctx, schedule.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := home.Counts(h.ctx); err != nil || c.Scheduled != 0 {
			t.Fatalf("after Delete the scheduler's queue holds %d scheduled messages (%v), want 0", c.Scheduled, err)
		}
		// The name is free again, with the same first occurrence (whose
		// cancelled message's ID the queue remembers).
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Cron: "0 9 * * *", Zone: "UTC"}, Start: base})
		time.Sleep(24 * time.Hour)
		if _, msgs := h.received(base); len(msgs) != 2 {
			t.Fatalf("the schedule created again sent %d messages in a day, want 1", len(msgs)-1)
		}
	})
}

func TestJitterNeverEarlyAndStable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "j", Spec: schedule.Spec{Every: time.Minute}, Start: base, End: base.Add(59 * time.Minute), Jitter: 30 * time.Second})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(time.Hour))
		_, msgs := h.received(base)
		if len(msgs) != 60 {
			t.Fatalf("got %d occurrences, want 60", len(msgs))
		}
		distinct := map[time.Duration]bool{}
		for _, m := range msgs {
			n, _ := time.Parse(time.RFC3339Nano, m.Properties[schedule.PropertyNominal])
			d := m.EnqueuedAt.Sub(n)
			if d < 0 || d >= 30*time.Second {
				t.Errorf("occurrence %s sent %s after its nominal time, want [0, 30s)", m.MessageID, d)
			}
			distinct[d] = true
		}
		if len(distinct) < 30 {
			t.Errorf("jitter took %d distinct values over 60 occurrences", len(distinct))
		}
	})
}

func TestCreateRefuses(t *testing.T) {
	reg := &calendar.Registry{}
	cal, _ := calendar.New("office", "1")
	_ = reg.Add(cal)
	msg := &transport.Message{Subject: "Tick"}
	ok := schedule.Spec{Cron: "0 9 * * *", Zone: "UTC"}
	every := calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	zero := calendar.BusinessDays(0).In("UTC")
	noZone := calendar.BusinessDays(1)
	cases := []struct {
		name    string
		sch     schedule.Schedule
		wantErr error
	}{
		{"dot in name", schedule.Schedule{Name: "a.b", Spec: ok}, schedule.ErrInvalidName},
		{"star in name", schedule.Schedule{Name: "a*", Spec: ok}, schedule.ErrInvalidName},
		{"gt in name", schedule.Schedule{Name: ">", Spec: ok}, schedule.ErrInvalidName},
		{"space in name", schedule.Schedule{Name: "a b", Spec: ok}, schedule.ErrInvalidName},
		{"control in name", schedule.Schedule{Name: "a\nb", Spec: ok}, schedule.ErrInvalidName},
		{"empty name", schedule.Schedule{Name: "", Spec: ok}, schedule.ErrInvalidName},
		{"long name", schedule.Schedule{Name: strings.Repeat("a", 65), Spec: ok}, schedule.ErrInvalidName},
		{"no spec", schedule.Schedule{Name: "x"}, schedule.ErrInvalidSpec},
		{"cron and rule", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 9 * * *", Zone: "UTC", Rule: &every, Calendar: calendar.RefOf(cal)}}, schedule.ErrInvalidSpec},
		{"cron without zone", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 9 * * *"}}, schedule.ErrInvalidSpec},
		{"unknown zone", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 9 * * *", Zone: "Mars/Olympus"}}, schedule.ErrInvalidSpec},
		{"four fields", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 9 * *", Zone: "UTC"}}, schedule.ErrInvalidSpec},
		{"minute 60", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "60 9 * * *", Zone: "UTC"}}, schedule.ErrInvalidSpec},
		{"backwards range", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 17-9 * * *", Zone: "UTC"}}, schedule.ErrInvalidSpec},
		{"step 0", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "*/0 9 * * *", Zone: "UTC"}}, schedule.ErrInvalidSpec},
		{"bad name", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 9 * foo *", Zone: "UTC"}}, schedule.ErrInvalidSpec},
		{"february 30", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 0 30 2 *", Zone: "UTC"}}, schedule.ErrNeverFires},
		{"april 31", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 0 31 4 *", Zone: "UTC"}}, schedule.ErrNeverFires},
		{"ends before first", schedule.Schedule{Name: "x", Spec: schedule.Spec{Cron: "0 0 1 1 *", Zone: "UTC"},
			Start: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}, schedule.ErrNeverFires},
		{"rule that does not move", schedule.Schedule{Name: "x", Spec: schedule.Spec{Rule: &zero, Calendar: calendar.RefOf(cal)}}, schedule.ErrInvalidSpec},
		{"rule without zone", schedule.Schedule{Name: "x", Spec: schedule.Spec{Rule: &noZone, Calendar: calendar.RefOf(cal)}}, schedule.ErrInvalidSpec},
		{"rule without calendar", schedule.Schedule{Name: "x", Spec: schedule.Spec{Rule: &every}}, schedule.ErrInvalidSpec},
		{"unknown calendar", schedule.Schedule{Name: "x", Spec: schedule.Spec{Rule: &every, Calendar: calendar.Ref{Name: "office", Version: "9"}}}, schedule.ErrInvalidSpec},
		{"interval under a second", schedule.Schedule{Name: "x", Spec: schedule.Spec{Every: time.Millisecond}}, schedule.ErrInvalidSpec},
		{"hostile queue", schedule.Schedule{Name: "x", Spec: ok, Action: schedule.Action{Queue: "work.>", Message: msg}}, schedule.ErrInvalidSchedule},
		{"queue and topic", schedule.Schedule{Name: "x", Spec: ok, Action: schedule.Action{Queue: "a", Topic: "b", Message: msg}}, schedule.ErrInvalidSchedule},
		{"no message", schedule.Schedule{Name: "x", Spec: ok, Action: schedule.Action{Queue: "a"}}, schedule.ErrInvalidSchedule},
		{"jitter too long", schedule.Schedule{Name: "x", Spec: ok, Jitter: 2 * time.Hour}, schedule.ErrInvalidSchedule},
	}
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := schedule.New(b, schedule.WithCalendars(reg))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.sch.Action.Queue == "" && c.sch.Action.Topic == "" && c.sch.Action.Message == nil && c.wantErr != schedule.ErrInvalidSchedule {
				c.sch.Action = schedule.Action{Queue: "work", Message: msg}
			}
			err := s.Create(t.Context(), c.sch)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("got %v, want %v", err, c.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "schedule: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
	for _, name := range []string{"a.b", "*", ">", "x y"} {
		if _, err := s.Get(t.Context(), name); !errors.Is(err, schedule.ErrInvalidName) {
			t.Errorf("Get(%q): %v, want ErrInvalidName", name, err)
		}
		if err := s.Pause(t.Context(), name, ""); !errors.Is(err, schedule.ErrInvalidName) {
			t.Errorf("Pause(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if err := s.Create(t.Context(), schedule.Schedule{Name: "dup", Spec: ok, Action: schedule.Action{Queue: "work", Message: msg}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(t.Context(), schedule.Schedule{Name: "dup", Spec: ok, Action: schedule.Action{Queue: "work", Message: msg}}); !errors.Is(err, schedule.ErrExists) {
		t.Fatalf("second Create: %v, want ErrExists", err)
	}
}

// A pause while no runner runs: the occurrences planned before it that
// activated (2 and 3 s) count as sent, and the runner that comes back
// sends nothing after it.
func TestPauseAfterTickActivated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(9 * time.Second)})
		h.run()
		sleepUntil(base.Add(1*time.Second + 500*time.Millisecond))
		h.stopRun()
		sleepUntil(base.Add(3*time.Second + 500*time.Millisecond))
		if err := h.s.Pause(h.ctx, "s", "no"); err != nil {
			t.Fatal(err)
		}
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(10 * time.Second))
		got, _ := h.received(base)
		equalInts(t, "sent", got, seq(0, 3))
		if info, _ := h.s.Get(h.ctx, "s"); info.Sent != 4 {
			t.Errorf("Info.Sent %d, want 4", info.Sent)
		}
	})
}

// The examples docs/schedules.md gives for daylight saving time.
func TestCronDSTExamples(t *testing.T) {
	cases := []struct {
		name, cron, zone string
		after            time.Time
		want             []string // UTC
	}{
		{"warsaw gap: 02:30 fires at the jump", "30 2 * * *", "Europe/Warsaw", time.Date(2027, 3, 27, 12, 0, 0, 0, time.UTC),
			[]string{"2027-03-28T01:00:00Z", "2027-03-29T00:30:00Z"}},
		{"warsaw gap: four times in the gap fire once", "*/15 2 * * *", "Europe/Warsaw", time.Date(2027, 3, 27, 12, 0, 0, 0, time.UTC),
			[]string{"2027-03-28T01:00:00Z", "2027-03-29T00:00:00Z"}},
		{"warsaw repeat: 02:30 fires once, summer time", "30 2 * * *", "Europe/Warsaw", time.Date(2027, 10, 30, 12, 0, 0, 0, time.UTC),
			[]string{"2027-10-31T00:30:00Z", "2027-11-01T01:30:00Z"}},
		{"new york repeat: 01:30 once", "30 1 * * *", "America/New_York", time.Date(2027, 11, 6, 12, 0, 0, 0, time.UTC),
			[]string{"2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"}},
		{"lord howe gap of half an hour: 02:15 at 02:30", "15 2 * * *", "Australia/Lord_Howe", time.Date(2027, 10, 2, 0, 0, 0, 0, time.UTC),
			[]string{"2027-10-02T15:30:00Z", "2027-10-03T15:15:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				time.Sleep(time.Until(c.after))
				h := newHarness(t)
				h.create(schedule.Schedule{Name: "d", Spec: schedule.Spec{Cron: c.cron, Zone: c.zone}})
				got, err := h.s.Upcoming(h.ctx, "d", len(c.want))
				if err != nil {
					t.Fatal(err)
				}
				var gs []string
				for _, g := range got {
					gs = append(gs, g.UTC().Format(time.RFC3339))
				}
				if strings.Join(gs, " ") != strings.Join(c.want, " ") {
					t.Fatalf("got %v, want %v", gs, c.want)
				}
			})
		})
	}
}

// Backfill of an interval schedule before its start counts back from it.
func TestBackfillBeforeStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Hour).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "e", Spec: schedule.Spec{Every: 10 * time.Second}, Start: base})
		sleepUntil(base.Add(-time.Second))
		occ, err := h.s.Backfill(h.ctx, "e", base.Add(-35*time.Second), base.Add(-2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, o := range occ {
			got = append(got, int(o.Nominal.Sub(base)/time.Second))
		}
		equalInts(t, "backfilled", got, []int{-30, -20, -10})
	})
}

// A target that refuses (a topic not created yet) is tried again every
// few seconds, and the tick is never dead-lettered: once the topic exists,
// the late occurrences go out (catch-up: fire).
func TestTargetFailureRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h.create(schedule.Schedule{Name: "t", Spec: schedule.Spec{Every: 5 * time.Second}, Start: base, End: base.Add(40 * time.Second),
			Action: schedule.Action{Topic: "events", Message: &transport.Message{Subject: "Tick"}}})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(2 * time.Minute)) // far longer than MaxDeliveryCount redeliveries would take
		home, err := h.b.Queue(h.ctx, schedule.DefaultQueue)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := home.DeadLetterQueue().Counts(h.ctx); c.Active != 0 {
			t.Fatalf("%d ticks dead-lettered", c.Active)
		}
		topic, err := h.b.OpenTopic(h.ctx, transport.TopicConfig{Name: "events"})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := topic.OpenSubscription(h.ctx, "all", transport.SubscriptionConfig{})
		if err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(3 * time.Minute))
		ds, err := sub.Receive(h.ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 9 {
			t.Fatalf("got %d occurrences on the topic, want 9", len(ds))
		}
		info, _ := h.s.Get(h.ctx, "t")
		if !info.Ended || info.Late != 9 {
			t.Errorf("ended %v late %d, want ended and 9 late", info.Ended, info.Late)
		}
	})
}

// Overlap: a handler three times slower than the period, on a queue with
// sessions and the action's message in one session: occurrences are
// handled one at a time, in order, none dropped (what Temporal calls
// buffer-all), while two competing handlers wait for the session.
func TestOverlapBySession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		ctx := t.Context()
		if _, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "serial", RequiresSession: true, LockDuration: time.Minute}); err != nil {
			t.Fatal(err)
		}
		s, err := schedule.New(b, schedule.WithLogger(discard()))
		if err != nil {
			t.Fatal(err)
		}
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		if err := s.Create(ctx, schedule.Schedule{Name: "slow", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(9 * time.Second),
			Action: schedule.Action{Queue: "serial", Message: &transport.Message{SessionID: "slow"}}}); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { _ = s.Run(runCtx) }()
		q, _ := b.Queue(ctx, "serial")
		var mu sync.Mutex
		var order []string
		running, overlaps := 0, 0
		for range 2 { // two competing handlers
			go func() {
				for runCtx.Err() == nil {
					r, err := q.AcceptNextSession(runCtx)
					if err != nil {
						return
					}
					for {
						rctx, rcancel := context.WithTimeout(runCtx, 5*time.Second)
						d, err := r.Receive(rctx)
						rcancel()
						if err != nil {
							break
						}
						mu.Lock()
						if running++; running > 1 {
							overlaps++
						}
						order = append(order, d.Properties[schedule.PropertyNominal])
						mu.Unlock()
						time.Sleep(3 * time.Second) // slower than the period
						mu.Lock()
						running--
						mu.Unlock()
						_ = d.Complete(runCtx)
					}
					_ = r.Close()
				}
			}()
		}
		sleepUntil(base.Add(40 * time.Second))
		mu.Lock()
		defer mu.Unlock()
		if overlaps > 0 {
			t.Errorf("%d occurrences handled while another was", overlaps)
		}
		if len(order) != 10 || !slices.IsSorted(order) {
			t.Errorf("handled %v, want the 10 occurrences in order", order)
		}
	})
}

// A Pause that lands while Run handles a tick (at 0.5 s: planned 31 s
// ahead, the schedule's ticks are due 15.5 s before its first occurrence
// not planned; from the Sent hook Run calls as it counts the occurrence
// of 0 s, before it writes the plan it extended) cancels the planned
// occurrences after it (1 to 15 s), and Run's write loses: Resume at
// 6.5 s skips 1 to 6 and plans 7 on, which go out under fresh IDs ("~2":
// the target keeps a cancelled ID taken), each once.
func TestPauseDuringAPlan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var h *harness
		base := time.Now().Add(time.Minute).Truncate(time.Minute)
		h = newHarness(t, schedule.WithHorizon(31*time.Second), schedule.WithHooks(schedule.Hooks{Sent: func(ctx context.Context, p schedule.OccurrenceParams) {
			if p.Nominal.Equal(base) {
				if err := h.s.Pause(ctx, "s", "during the plan"); err != nil {
					t.Errorf("Pause: %v", err)
				}
			}
		}}))
		h.create(schedule.Schedule{Name: "s", Spec: schedule.Spec{Every: time.Second}, Start: base, End: base.Add(40 * time.Second)})
		h.run()
		defer h.stopRun()
		sleepUntil(base.Add(6*time.Second + 500*time.Millisecond))
		if info, _ := h.s.Get(h.ctx, "s"); !info.Paused {
			t.Fatal("not paused")
		}
		if err := h.s.Resume(h.ctx, "s", ""); err != nil {
			t.Fatal(err)
		}
		sleepUntil(base.Add(41 * time.Second))
		got, msgs := h.received(base)
		equalInts(t, "nominal seconds", got, append([]int{0}, seq(7, 40)...))
		for i, m := range msgs {
			id := schedule.OccurrenceID("s", base.Add(time.Duration(got[i])*time.Second))
			if got[i] >= 7 && got[i] <= 15 {
				id += "~2"
			}
			if m.MessageID != id {
				t.Errorf("occurrence %d: MessageID %q, want %q", got[i], m.MessageID, id)
			}
		}
		info, err := h.s.Get(h.ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if info.Sent != 35 || info.Skipped != 6 || !info.Ended {
			t.Errorf("sent %d skipped %d ended %v, want 35, 6 (1 to 6 s), ended", info.Sent, info.Skipped, info.Ended)
		}
	})
}
