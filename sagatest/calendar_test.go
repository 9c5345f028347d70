package sagatest_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Business time in the Env: timeouts requested by a calendar rule,
// re-planned under a new calendar version, catch-up policies after an
// outage, and the clock's default start.

type (
	Subscribe struct{ ID string }
	graceOver struct{}
	ledger    struct {
		Fired    []string // "type@offset" or "late:type@offset+lateness"
		Grace    saga.TimeoutHandle
		GraceDue time.Time // as RequestTimeoutBy returned it
	}
)

func (graceOver) MessageName() string { return "test.grace-over" }

// bank returns a calendar "bank" at version v: weekends and New Year's
// Day off, plus extra holidays.
func bank(t *testing.T, v string, extra ...calendar.Date) *calendar.Standard {
	t.Helper()
	opts := []calendar.Option{calendar.Yearly(time.January, 1, "New Year's Day")}
	for _, d := range extra {
		opts = append(opts, calendar.On(d, "extra"))
	}
	c, err := calendar.New("bank", v, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var graceRule = calendar.BusinessDays(3).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")

func graceSaga(start *time.Time) *saga.Definition[ledger] {
	d := saga.Define[ledger]("grace")
	saga.StartedBy(d, saga.By(func(m Subscribe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ledger], m Subscribe) error {
			p, err := c.RequestTimeoutBy(graceRule, graceOver{})
			c.Data.Grace, c.Data.GraceDue = p.Handle, p.At
			return err
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], _ graceOver) error {
		c.Data.Fired = append(c.Data.Fired, "grace@"+c.Now().Sub(*start).String())
		return nil
	})
	return d
}

func TestDefaultStartIsAMondayAndNowIsTheSameEverywhere(t *testing.T) {
	var start time.Time
	d := saga.Define[Stamp]("stamp")
	saga.StartedBy(d, saga.By(func(m StampMe) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[Stamp], m StampMe) error {
			c.Data.At = c.Now()
			return nil
		})
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		want := time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)
		if !start.Equal(want) || start.Weekday() != time.Monday {
			t.Errorf("default start %v (%v), want %v, a Monday", start, start.Weekday(), want)
		}
		env.Advance(90 * time.Minute)
		env.Send(StampMe{ID: "s"})
		got := sagatest.State(t, env, d, "s")
		// Not AssertState, which compares instants: the location too.
		if got.At != env.Now() {
			t.Errorf("handler's Now %v (%v), Env.Now %v (%v): want the same instant and location", got.At, got.At.Location(), env.Now(), env.Now().Location())
		}
	})
}

func TestTimeoutByRuleIsStoredWithItsRuleAndFiresThen(t *testing.T) {
	var start time.Time
	d := graceSaga(&start)
	reg := new(calendar.Registry)
	if err := reg.Add(bank(t, "1")); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Subscribe{ID: "a"}) // Monday January 1 (a holiday), 01:00 in Warsaw
		// Three business days after: Tuesday 2, Wednesday 3, Thursday 4, at
		// 09:00 Warsaw (08:00 UTC).
		due := time.Date(2024, time.January, 4, 8, 0, 0, 0, time.UTC)
		ts := env.Timeouts(d, "a")
		if len(ts) != 1 {
			t.Fatalf("pending timeouts %+v, want one", ts)
		}
		want := saga.PendingTimeout{Handle: ts[0].Handle, Type: "test.grace-over", At: due,
			Rule: "3 business days after, at 09:00 Europe/Warsaw", Calendar: calendar.Ref{Name: "bank", Version: "1"}, From: start}
		if !ts[0].At.Equal(want.At) || !ts[0].From.Equal(want.From) || ts[0].Rule != want.Rule || ts[0].Calendar != want.Calendar || ts[0].Type != want.Type {
			t.Errorf("pending timeout %+v, want %+v", ts[0], want)
		}
		var listed []saga.ScheduledTimeout
		for st, err := range env.Dispatcher().ScheduledTimeouts(t.Context(), "grace") {
			if err != nil {
				t.Fatal(err)
			}
			listed = append(listed, st)
		}
		if len(listed) != 1 || listed[0].Rule != want.Rule || listed[0].Calendar != want.Calendar || listed[0].Handle != ts[0].Handle {
			t.Errorf("scheduled timeouts %+v, want one with rule %q, calendar %v, handle %s", listed, want.Rule, want.Calendar, ts[0].Handle)
		}
		env.AdvanceTo(due.Add(-time.Nanosecond))
		// RequestTimeoutBy returned the handle and the due time.
		sagatest.AssertState(t, env, d, "a", ledger{Grace: ts[0].Handle, GraceDue: due})
		env.AdvanceTo(due)
		sagatest.AssertState(t, env, d, "a", ledger{Grace: ts[0].Handle, GraceDue: due, Fired: []string{"grace@" + due.Sub(start).String()}})
	}, sagatest.WithCalendars(reg))
}

func TestTimeoutByRuleErrors(t *testing.T) {
	type Try struct {
		ID string
		I  int
	}
	tests := []struct {
		name    string
		rule    calendar.Rule
		cal     string
		wantErr error
	}{
		{"invalid rule", calendar.BusinessDays(0), "", calendar.ErrInvalidRule},
		{"unknown zone", calendar.CalendarDays(1).In("Mars/Olympus"), "", calendar.ErrInvalidRule},
		{"unknown calendar", calendar.BusinessDays(1).In("UTC"), "moon", calendar.ErrUnknownCalendar},
		{"added after the dispatcher was built", calendar.BusinessDays(1).In("UTC"), "late", calendar.ErrUnknownCalendar},
		{"no default among several", calendar.BusinessDays(1).In("UTC"), "", calendar.ErrUnknownCalendar},
		{"named", calendar.BusinessDays(1).In("UTC"), "bank", nil},
		{"no calendar needed", calendar.CalendarDays(1).In("UTC"), "", nil},
		{"no zone", calendar.CalendarDays(1), "", calendar.ErrInvalidRule},
	}
	got := make([]error, len(tests))
	d := saga.Define[struct{}]("tries")
	saga.StartedBy(d, saga.By(func(m Try) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m Try) error {
			_, got[m.I] = c.RequestTimeoutBy(tests[m.I].rule, graceOver{}, saga.OnCalendar(tests[m.I].cal))
			return nil
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[struct{}], graceOver) error { return nil })
	other, err := calendar.New("other", "1")
	if err != nil {
		t.Fatal(err)
	}
	late, err := calendar.New("late", "1")
	if err != nil {
		t.Fatal(err)
	}
	reg := new(calendar.Registry)
	if err := reg.Add(bank(t, "1"), other); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		if err := reg.Add(late); err != nil {
			t.Fatal(err)
		}
		for i, tt := range tests {
			env.Send(Try{ID: tt.name, I: i})
			err := got[i]
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil && !errors.Is(err, saga.ErrPermanent)) {
				t.Errorf("%s: got %v, want %v (and ErrPermanent)", tt.name, err, tt.wantErr)
			}
		}
		env.Advance(48 * time.Hour)
	}, sagatest.WithCalendars(reg))
}

// closed is a calendar without business days: a re-plan to it fails for
// every business-day rule.
type closed struct{}

func (closed) Name() string                     { return "bank" }
func (closed) Version() string                  { return "closed" }
func (closed) IsBusinessDay(calendar.Date) bool { return false }

func TestReplanUnderANewCalendarVersion(t *testing.T) {
	var start time.Time
	d := graceSaga(&start)
	v1 := bank(t, "1")
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	oldDue := time.Date(2024, time.January, 4, 8, 0, 0, 0, time.UTC)
	newDue := time.Date(2024, time.January, 5, 8, 0, 0, 0, time.UTC)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Subscribe{ID: "a"})
		env.Send(Subscribe{ID: "b"})
		h := env.Timeouts(d, "a")[0].Handle
		// A holiday is announced on Wednesday 3: version 2.
		v2 := bank(t, "2", calendar.Date{Year: 2024, Month: time.January, Day: 3})
		if err := reg.Add(v2, closed{}); err != nil {
			t.Fatal(err)
		}
		env.Advance(time.Hour)
		// To a calendar without business days: each timeout reports its
		// error and keeps its instant.
		res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "grace", calendar.RefOf(closed{}))
		if err != nil || len(res) != 2 || !errors.Is(res[0].Err, calendar.ErrNoBusinessDay) || !errors.Is(res[1].Err, calendar.ErrNoBusinessDay) {
			t.Fatalf("re-plan to a closed calendar: %+v, %v; want two results with ErrNoBusinessDay", res, err)
		}
		res, err = env.Dispatcher().ReplanTimeouts(t.Context(), "grace", calendar.RefOf(v2))
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 2 {
			t.Fatalf("re-plan: %+v, want two results", res)
		}
		for i, id := range []string{"a", "b"} {
			r := res[i]
			if r.ID != id || r.Err != nil || !r.Changed() || !r.OldAt.Equal(oldDue) || !r.NewAt.Equal(newDue) ||
				r.Old != calendar.RefOf(v1) || r.New != calendar.RefOf(v2) || !r.From.Equal(start) {
				t.Errorf("re-plan of %s: %+v; want moved from %v on bank@1 to %v on bank@2", id, r, oldDue, newDue)
			}
		}
		// Re-planning again to the same version changes nothing.
		if res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "grace", calendar.RefOf(v2)); err != nil || len(res) != 0 {
			t.Errorf("second re-plan: %+v, %v; want nothing to do", res, err)
		}
		env.Settle()
		ts := env.Timeouts(d, "a")
		if len(ts) != 1 || ts[0].Handle != h || !ts[0].At.Equal(newDue) || ts[0].Calendar != calendar.RefOf(v2) {
			t.Fatalf("pending after re-plan: %+v; want handle %s at %v on bank@2", ts, h, newDue)
		}
		// The message scheduled before the re-plan, had its cancel come too
		// late, arrives: it is dropped. (As a delayed retry's copy, which
		// names its original's MessageID, the handle: the queue would drop
		// a message with that MessageID as a duplicate.)
		old := &transport.Message{MessageID: "copy-" + string(h), Body: []byte("{}"), Properties: map[string]string{
			"jetsaga-message-id": string(h),
			saga.TypeProperty:    "test.grace-over", timeout.PropertySaga: "grace", timeout.PropertyInstance: "a", "jetsaga-token": string(h),
			timeout.PropertyTimeout: "1", timeout.PropertyDue: oldDue.Format(time.RFC3339Nano)}}
		q, err := env.Broker().Queue(t.Context(), sagatest.Queue)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := q.Send(t.Context(), old); err != nil || r.Duplicate {
			t.Fatalf("sending the old message: %+v, %v", r, err)
		}
		env.Settle()
		sagatest.AssertState(t, env, d, "a", ledger{Grace: h, GraceDue: oldDue})
		env.AdvanceTo(oldDue)
		sagatest.AssertState(t, env, d, "a", ledger{Grace: h, GraceDue: oldDue}) // the old instant passes: nothing
		env.AdvanceTo(newDue)
		sagatest.AssertState(t, env, d, "a", ledger{Grace: h, GraceDue: oldDue, Fired: []string{"grace@" + newDue.Sub(start).String()}})
	}, sagatest.WithCalendars(reg, calendar.RefOf(v1)))
}

// The catch-up policies, one timeout type each, all due at +1h; two
// coalesced ones, at +1h and +2h.
type (
	fireT     struct{}
	skipT     struct{}
	coalesceT struct{ N int }
	lateT     struct{}
	Plan      struct{ ID string }
)

func (fireT) MessageName() string     { return "test.fire" }
func (skipT) MessageName() string     { return "test.skip" }
func (coalesceT) MessageName() string { return "test.coalesce" }
func (lateT) MessageName() string     { return "test.late" }

const tolerance = 10 * time.Minute

func catchUpSaga(start *time.Time) *saga.Definition[ledger] {
	d := saga.Define[ledger]("catchup")
	saga.StartedBy(d, saga.By(func(m Plan) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ledger], m Plan) error {
			for _, p := range []any{fireT{}, skipT{}, coalesceT{1}, lateT{}} {
				if _, err := c.RequestTimeout(time.Hour, p); err != nil {
					return err
				}
			}
			_, err := c.RequestTimeout(2*time.Hour, coalesceT{2})
			return err
		})
	at := func(c *saga.Context[ledger]) string { return c.Now().Sub(*start).String() }
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], _ fireT) error {
		c.Data.Fired = append(c.Data.Fired, "fire@"+at(c))
		return nil
	}, saga.CatchUp(saga.CatchUpFire, tolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], _ skipT) error {
		c.Data.Fired = append(c.Data.Fired, "skip@"+at(c))
		return nil
	}, saga.CatchUp(saga.CatchUpSkip, tolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m coalesceT) error {
		c.Data.Fired = append(c.Data.Fired, "coalesce"+string(rune('0'+m.N))+"@"+at(c))
		return nil
	}, saga.CatchUp(saga.CatchUpCoalesce, tolerance))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], _ lateT) error {
		c.Data.Fired = append(c.Data.Fired, "late@"+at(c))
		return nil
	}, saga.HandleLate(tolerance, func(ctx context.Context, c *saga.Context[ledger], _ lateT, l saga.Lateness) error {
		c.Data.Fired = append(c.Data.Fired, "late:late@"+at(c)+"+"+l.Late.String())
		return nil
	}))
	return d
}

func TestCatchUpPoliciesOnTime(t *testing.T) {
	var start time.Time
	d := catchUpSaga(&start)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Plan{ID: "p"})
		env.Advance(3 * time.Hour)
		got := sagatest.State(t, env, d, "p")
		slices.Sort(got.Fired)
		want := []string{"coalesce1@1h0m0s", "coalesce2@2h0m0s", "fire@1h0m0s", "late@1h0m0s", "skip@1h0m0s"}
		if !slices.Equal(got.Fired, want) {
			t.Errorf("handled %q, want %q: on time, every policy handles every timeout", got.Fired, want)
		}
	})
}

func TestCatchUpPoliciesAfterAnOutage(t *testing.T) {
	var start time.Time
	d := catchUpSaga(&start)
	var lates []saga.LateTimeout
	hooks := saga.Hooks{TimeoutLate: func(_ context.Context, l saga.LateTimeout) { lates = append(lates, l) }}
	var skipped int
	count := saga.Hooks{StepDone: func(_ context.Context, _ saga.StepInfo, r saga.StepResult) {
		if r.Outcome == saga.Skipped {
			skipped++
		}
	}}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Plan{ID: "p"})
		env.Advance(30 * time.Minute)
		env.Outage(3 * time.Hour) // everything comes due during it
		if got := env.Now().Sub(start); got != 3*time.Hour+30*time.Minute {
			t.Errorf("after the outage: now +%v, want +3h30m0s", got)
		}
		got := sagatest.State(t, env, d, "p")
		slices.Sort(got.Fired)
		want := []string{"coalesce2@3h30m0s", "fire@3h30m0s", "late:late@3h30m0s+2h30m0s"}
		if !slices.Equal(got.Fired, want) {
			t.Errorf("handled %q, want %q", got.Fired, want)
		}
		if ts := env.Timeouts(d, "p"); len(ts) != 0 {
			t.Errorf("still pending: %+v; want none (the skipped and coalesced ones are no longer waited for)", ts)
		}
		if skipped != 2 {
			t.Errorf("%d steps Skipped, want 2 (skip, and coalesce #1)", skipped)
		}
		policies := map[string]bool{}
		for _, l := range lates {
			policies[l.Policy.String()+map[bool]string{true: "/skipped"}[l.Skipped]] = true
			if l.Late <= tolerance {
				t.Errorf("TimeoutLate %+v: not beyond its tolerance", l)
			}
		}
		for _, p := range []string{"fire", "skip/skipped", "coalesce", "late"} {
			if !policies[p] {
				t.Errorf("TimeoutLate reported %v; want %s among them", policies, p)
			}
		}
	}, sagatest.WithDispatcherOptions(saga.WithHooks(hooks), saga.WithHooks(count)))
}

// TestCalendarVersionAddedAfterBuild: the dispatcher's current versions
// and its default calendar are fixed when it is built. A registry given
// with one calendar and no current version named gains a second version
// (to re-plan to): new requests, with the default calendar or naming it,
// still use the first, and the re-plan moves them all.
func TestCalendarVersionAddedAfterBuild(t *testing.T) {
	type ByName struct{ ID string }
	var start time.Time
	d := graceSaga(&start)
	saga.StartedBy(d, saga.By(func(m ByName) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ledger], m ByName) error {
			_, err := c.RequestTimeoutBy(graceRule, graceOver{}, saga.OnCalendar("bank"))
			return err
		})
	v1 := bank(t, "1")
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	oldDue := time.Date(2024, time.January, 4, 8, 0, 0, 0, time.UTC)
	newDue := time.Date(2024, time.January, 5, 8, 0, 0, 0, time.UTC)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Subscribe{ID: "before"})
		v2 := bank(t, "2", calendar.Date{Year: 2024, Month: time.January, Day: 3})
		if err := reg.Add(v2); err != nil {
			t.Fatal(err)
		}
		env.Send(Subscribe{ID: "default"})
		env.Send(ByName{ID: "named"})
		for _, id := range []string{"before", "default", "named"} {
			ts := env.Timeouts(d, id)
			if len(ts) != 1 || ts[0].Calendar != calendar.RefOf(v1) || !ts[0].At.Equal(oldDue) {
				t.Errorf("%s: pending %+v; want one on bank@1 due %v", id, ts, oldDue)
			}
		}
		res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "grace", calendar.RefOf(v2))
		if err != nil || len(res) != 3 {
			t.Fatalf("re-plan: %+v, %v; want three moved", res, err)
		}
		for _, r := range res {
			if !r.Changed() || !r.NewAt.Equal(newDue) {
				t.Errorf("re-plan of %s: %+v; want moved to %v", r.ID, r, newDue)
			}
		}
	}, sagatest.WithCalendars(reg))
}

// Timeouts re-planned to a due time already past, one type per catch-up
// policy.
type (
	pastPlain struct{}
	pastSkip  struct{}
	pastLate  struct{}
	pastLoose struct{} // skipped only beyond a week
	pastCoal  struct{ N int }
	Replan    struct{ ID string }
	ReplanTie struct{ ID string }
)

func (pastPlain) MessageName() string { return "test.past-plain" }
func (pastSkip) MessageName() string  { return "test.past-skip" }
func (pastLate) MessageName() string  { return "test.past-late" }
func (pastLoose) MessageName() string { return "test.past-loose" }
func (pastCoal) MessageName() string  { return "test.past-coalesce" }

// TestReplanIntoThePastSaysWhatWillHappen: a re-plan that moves a
// timeout to a due time already past reports that it fires at once, and
// what its type's catch-up policy will do with it; each then happens.
// (Before, each was reported "moved", like a timeout still to come,
// though the skipped one was then dropped.)
func TestReplanIntoThePastSaysWhatWillHappen(t *testing.T) {
	var start time.Time
	d := saga.Define[ledger]("past")
	// Three business days before Friday 2024-01-05, at 09:00 UTC: Tuesday
	// 2 on bank@1; with Tuesday 2 and Wednesday 3 holidays (bank@2), and
	// Monday 1 one on both, Thursday 2023-12-28: in the past.
	rule := calendar.BusinessDays(-3).At(calendar.ClockOf(9, 0)).In("UTC")
	friday := time.Date(2024, time.January, 5, 0, 0, 0, 0, time.UTC)
	saga.StartedBy(d, saga.By(func(m Replan) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ledger], m Replan) error {
			for _, p := range []any{pastPlain{}, pastSkip{}, pastLate{}, pastLoose{}, pastCoal{1}} {
				if _, err := c.RequestTimeoutBy(rule, p, saga.RuleFrom(friday)); err != nil {
					return err
				}
			}
			// Two business days before: Wednesday 3 on bank@1, Friday
			// 2023-12-29 on bank@2, a day after the others.
			_, err := c.RequestTimeoutBy(calendar.BusinessDays(-2).At(calendar.ClockOf(9, 0)).In("UTC"), pastCoal{2}, saga.RuleFrom(friday))
			return err
		})
	// Two coalesced timeouts due at the same instant.
	saga.StartedBy(d, saga.By(func(m ReplanTie) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ledger], m ReplanTie) error {
			for n := range 2 {
				if _, err := c.RequestTimeoutBy(rule, pastCoal{n}, saga.RuleFrom(friday)); err != nil {
					return err
				}
			}
			return nil
		})
	fired := func(name string) func(context.Context, *saga.Context[ledger], any) error {
		return func(_ context.Context, c *saga.Context[ledger], _ any) error {
			c.Data.Fired = append(c.Data.Fired, name+"@"+c.Now().Sub(start).String())
			return nil
		}
	}
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m pastPlain) error {
		return fired("plain")(ctx, c, m)
	})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m pastSkip) error { return fired("skip")(ctx, c, m) },
		saga.CatchUp(saga.CatchUpSkip, time.Hour))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m pastLate) error { return fired("late")(ctx, c, m) },
		saga.HandleLate(time.Hour, func(ctx context.Context, c *saga.Context[ledger], m pastLate, _ saga.Lateness) error {
			return fired("late-handler")(ctx, c, m)
		}))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m pastLoose) error {
		return fired("loose")(ctx, c, m)
	},
		saga.CatchUp(saga.CatchUpSkip, 7*24*time.Hour))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ledger], m pastCoal) error {
		return fired("coalesce"+strconv.Itoa(m.N))(ctx, c, m)
	}, saga.CatchUp(saga.CatchUpCoalesce, time.Hour))
	v1 := bank(t, "1")
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(Replan{ID: "r"})
		env.Send(ReplanTie{ID: "tie"})
		for _, p := range env.Timeouts(d, "r") {
			want := time.Date(2024, time.January, 2, 9, 0, 0, 0, time.UTC)
			if p.Rule == "2 business days before, at 09:00 UTC" {
				want = want.AddDate(0, 0, 1)
			}
			if !p.At.Equal(want) {
				t.Fatalf("pending %+v: want due %v", p, want)
			}
		}
		v2 := bank(t, "2", calendar.Date{Year: 2024, Month: time.January, Day: 2}, calendar.Date{Year: 2024, Month: time.January, Day: 3})
		if err := reg.Add(v2); err != nil {
			t.Fatal(err)
		}
		env.Advance(12 * time.Hour)
		res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "past", calendar.RefOf(v2))
		if err != nil {
			t.Fatal(err)
		}
		newDue := time.Date(2023, time.December, 28, 9, 0, 0, 0, time.UTC)
		type key struct {
			typ  string
			rule string
		}
		three, two := "3 business days before, at 09:00 UTC", "2 business days before, at 09:00 UTC"
		want := map[key]saga.ReplanOutcome{
			{"test.past-plain", three}: saga.ReplanMovedPast, {"test.past-skip", three}: saga.ReplanMovedSkipped,
			{"test.past-late", three}: saga.ReplanMovedLate, {"test.past-loose", three}: saga.ReplanMovedPast,
			// The earlier of two coalesced: dropped; the later: handled.
			{"test.past-coalesce", three}: saga.ReplanMovedSkipped, {"test.past-coalesce", two}: saga.ReplanMovedPast,
		}
		if len(res) != len(want)+2 {
			t.Fatalf("re-plan: %+v; want %d results", res, len(want)+2)
		}
		for _, r := range res {
			if r.ID == "tie" {
				if r.Outcome != saga.ReplanMovedCoalesced {
					t.Errorf("re-plan of %s/%s, one of two due at the same instant: %s; want %s", r.ID, r.Type, r.Outcome, saga.ReplanMovedCoalesced)
				}
				continue
			}
			due := newDue
			if r.Rule == two {
				due = due.AddDate(0, 0, 1)
			}
			w, ok := want[key{r.Type, r.Rule}]
			if !ok || r.Err != nil || !r.Changed() || !r.NewAt.Equal(due) || r.Outcome != w || r.Overdue != env.Now().Sub(due) {
				t.Errorf("re-plan of %s by %q: %+v (%s); want moved to %v, %v overdue, %q", r.Type, r.Rule, r, r.Outcome, due, env.Now().Sub(due), w)
			}
		}
		env.Settle()
		got := sagatest.State(t, env, d, "r").Fired
		slices.Sort(got)
		if wantFired := []string{"coalesce2@12h0m0s", "late-handler@12h0m0s", "loose@12h0m0s", "plain@12h0m0s"}; !slices.Equal(got, wantFired) {
			t.Errorf("handled %q, want %q (the skipped ones dropped)", got, wantFired)
		}
		if got := sagatest.State(t, env, d, "tie").Fired; len(got) != 1 {
			t.Errorf("of two coalesced timeouts due at the same instant, handled %q; want one", got)
		}
	}, sagatest.WithCalendars(reg, calendar.RefOf(v1)))
}
