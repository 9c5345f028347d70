package sagatest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/timeout"
)

// Recurring timeouts inside a saga: a year of "every second business day
// at 09:00 Europe/Warsaw" against a table computed here, day by day, from
// the holidays below, not by the calendar package.

type (
	Remind     struct{ ID string }
	StopRemind struct{ ID string }
	remindTick struct{}
	reminders  struct {
		Handle saga.TimeoutHandle
		Fired  []string // "n@nominal", nominal in RFC 3339 UTC
		Early  []string // occurrences handled before their nominal time
		StopAt int      // complete at this occurrence (0: never)
	}
)

func (remindTick) MessageName() string { return "test.remind-tick" }

// warsawHolidays are the fixed-date public holidays of Poland (the
// movable Easter ones left out): the calendar below has them as Yearly
// dates, and the table checks each day against this list.
var warsawHolidays = [][2]int{{1, 1}, {1, 6}, {5, 1}, {5, 3}, {8, 15}, {11, 1}, {11, 11}, {12, 25}, {12, 26}}

func warsawCalendar(t *testing.T) *calendar.Standard {
	t.Helper()
	var opts []calendar.Option
	for _, h := range warsawHolidays {
		opts = append(opts, calendar.Yearly(time.Month(h[0]), h[1], "holiday"))
	}
	c, err := calendar.New("pl", "2024", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// everySecondBusinessDay returns the nominal times of the series a
// request at from (a day before the first business day counted) makes,
// up to until: every second business day at 09:00 Warsaw time, brute
// force over the days.
func everySecondBusinessDay(t *testing.T, from, until time.Time) []time.Time {
	t.Helper()
	warsaw, err := time.LoadLocation("Europe/Warsaw")
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	y, m, d := from.In(warsaw).Date()
	day := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	for n := 0; ; {
		day = day.AddDate(0, 0, 1)
		if day.Weekday() == time.Saturday || day.Weekday() == time.Sunday ||
			slices.Contains(warsawHolidays, [2]int{int(day.Month()), day.Day()}) {
			continue
		}
		if n++; n%2 != 0 {
			continue
		}
		at := time.Date(day.Year(), day.Month(), day.Day(), 9, 0, 0, 0, warsaw).UTC()
		if at.After(until) {
			return out
		}
		out = append(out, at)
	}
}

var everySecondBusinessDayRule = calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")

// remindSaga counts in handled the occurrences each instance handled,
// which outlives a completed instance's data.
func remindSaga(handled *sync.Map) *saga.Definition[reminders] {
	d := saga.Define[reminders]("remind")
	saga.StartedBy(d, saga.By(func(m Remind) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[reminders], m Remind) error {
			p, err := c.RequestRecurringTimeoutBy(everySecondBusinessDayRule, remindTick{})
			c.Data.Handle = p.Handle
			if m.ID == "completes" {
				c.Data.StopAt = 5
			}
			return err
		})
	saga.Handles(d, saga.By(func(m StopRemind) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[reminders], m StopRemind) error {
			c.CancelTimeout(c.Data.Handle)
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[reminders], _ remindTick) error {
		if c.Timeout() != c.Data.Handle {
			return fmt.Errorf("occurrence under handle %s, want %s", c.Timeout(), c.Data.Handle)
		}
		n := fmt.Sprintf("%d@%s", c.Occurrence(), c.TimeoutDue().Format(time.RFC3339))
		c.Data.Fired = append(c.Data.Fired, n)
		count, _ := handled.LoadOrStore(c.ID(), new(atomic.Int64))
		count.(*atomic.Int64).Add(1)
		if c.Now().Before(c.TimeoutDue()) {
			c.Data.Early = append(c.Data.Early, n)
		}
		if c.Data.StopAt != 0 && c.Occurrence() == c.Data.StopAt {
			c.MarkComplete()
		}
		return nil
	})
	return d
}

func numbered(ts []time.Time) []string {
	out := make([]string, len(ts))
	for i, at := range ts {
		out[i] = fmt.Sprintf("%d@%s", i+1, at.Format(time.RFC3339))
	}
	return out
}

func TestRecurringTimeoutForAYearMatchesTheCalendar(t *testing.T) {
	var handled sync.Map
	d := remindSaga(&handled)
	reg := new(calendar.Registry)
	if err := reg.Add(warsawCalendar(t)); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start := env.Start()
		env.Send(Remind{ID: "year"})
		env.Send(Remind{ID: "completes"})
		yearEnd := start.AddDate(1, 0, 0)
		env.AdvanceTo(yearEnd)

		want := numbered(everySecondBusinessDay(t, start, yearEnd))
		if len(want) < 120 {
			t.Fatalf("the table has %d occurrences: the test computes it wrong", len(want))
		}
		got := sagatest.State(t, env, d, "year")
		if !slices.Equal(got.Fired, want) {
			t.Errorf("occurrences handled (%d) differ from the table (%d):\n got %q\nwant %q", len(got.Fired), len(want), got.Fired, want)
		}
		if len(got.Early) > 0 {
			t.Errorf("occurrences handled before their nominal time: %q", got.Early)
		}
		// One occurrence pending, the next in the table, under the same handle.
		next := everySecondBusinessDay(t, start, yearEnd.AddDate(0, 0, 7))[len(want)]
		ts := env.Timeouts(d, "year")
		if len(ts) != 1 || ts[0].Handle != got.Handle || !ts[0].At.Equal(next) || !ts[0].Recurring || ts[0].Occurrence != len(want)+1 {
			t.Errorf("pending after a year: %+v, want occurrence %d at %v under %s", ts, len(want)+1, next, got.Handle)
		}
		// Completing at the fifth occurrence ended that series.
		if !env.Completed(d, "completes") {
			t.Errorf("instance that completes at its fifth occurrence is not completed")
		}
		if n, _ := handled.Load("completes"); n.(*atomic.Int64).Load() != 5 {
			t.Errorf("instance that completes at its fifth occurrence handled %d", n.(*atomic.Int64).Load())
		}

		// Cancel stops it, whichever occurrence is pending.
		env.Send(StopRemind{ID: "year"})
		if ts := env.Timeouts(d, "year"); len(ts) != 0 {
			t.Errorf("pending after cancel: %+v", ts)
		}
		env.Advance(30 * 24 * time.Hour)
		if after := sagatest.State(t, env, d, "year"); len(after.Fired) != len(got.Fired) {
			t.Errorf("%d occurrences handled after cancel: %q", len(after.Fired)-len(got.Fired), after.Fired)
		}
	}, sagatest.WithCalendars(reg))
}

type (
	StartTicks   struct{ ID string }
	tickFire     struct{}
	tickSkip     struct{}
	tickCoalesce struct{}
	ticks        struct{ Fired []string } // "kind:n@due/now", offsets from the start
)

func (tickFire) MessageName() string     { return "test.tick-fire" }
func (tickSkip) MessageName() string     { return "test.tick-skip" }
func (tickCoalesce) MessageName() string { return "test.tick-coalesce" }

// After an outage, each series follows its type's catch-up policy: fire
// every missed occurrence, skip those late beyond the tolerance, or
// handle only the latest overdue one; every skipped occurrence is
// reported, and the series stays on its grid (no drift from lateness).
func TestRecurringTimeoutCatchUpAfterAnOutage(t *testing.T) {
	var start time.Time
	at := func(t time.Time) string { return t.Sub(start).String() }
	d := saga.Define[ticks]("ticks")
	saga.StartedBy(d, saga.By(func(m StartTicks) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[ticks], m StartTicks) error {
			for _, p := range []any{tickFire{}, tickSkip{}, tickCoalesce{}} {
				if _, err := c.RequestRecurringTimeout(time.Hour, p); err != nil {
					return err
				}
			}
			return nil
		})
	record := func(kind string) func(context.Context, *saga.Context[ticks]) {
		return func(ctx context.Context, c *saga.Context[ticks]) {
			c.Data.Fired = append(c.Data.Fired, fmt.Sprintf("%s:%d@%s/%s", kind, c.Occurrence(), at(c.TimeoutDue()), at(c.Now())))
		}
	}
	fire, skip, coalesce := record("fire"), record("skip"), record("coalesce")
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ticks], _ tickFire) error { fire(ctx, c); return nil })
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ticks], _ tickSkip) error { skip(ctx, c); return nil },
		saga.CatchUp(saga.CatchUpSkip, 10*time.Minute))
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[ticks], _ tickCoalesce) error { coalesce(ctx, c); return nil },
		saga.CatchUp(saga.CatchUpCoalesce, 10*time.Minute))
	var lates []saga.LateTimeout
	hooks := saga.Hooks{TimeoutLate: func(_ context.Context, l saga.LateTimeout) { lates = append(lates, l) }}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start = env.Start()
		env.Send(StartTicks{ID: "a"})
		env.Advance(150 * time.Minute) // occurrences 1 and 2 on time
		env.Outage(5 * time.Hour)      // 3 to 7 come due; the outage ends at 7h30m
		env.Advance(2 * time.Hour)     // 8 and 9 on time again
		got := sagatest.State(t, env, d, "a").Fired
		want := []string{
			"fire:1@1h0m0s/1h0m0s", "skip:1@1h0m0s/1h0m0s", "coalesce:1@1h0m0s/1h0m0s",
			"fire:2@2h0m0s/2h0m0s", "skip:2@2h0m0s/2h0m0s", "coalesce:2@2h0m0s/2h0m0s",
			"fire:3@3h0m0s/7h30m0s", "fire:4@4h0m0s/7h30m0s", "fire:5@5h0m0s/7h30m0s", "fire:6@6h0m0s/7h30m0s", "fire:7@7h0m0s/7h30m0s",
			"coalesce:7@7h0m0s/7h30m0s",
			"fire:8@8h0m0s/8h0m0s", "skip:8@8h0m0s/8h0m0s", "coalesce:8@8h0m0s/8h0m0s",
			"fire:9@9h0m0s/9h0m0s", "skip:9@9h0m0s/9h0m0s", "coalesce:9@9h0m0s/9h0m0s",
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("occurrences handled:\n got %q\nwant %q", got, want)
		}
		skipped := map[string][]string{}
		for _, l := range lates {
			if l.Skipped {
				skipped[l.Type] = append(skipped[l.Type], fmt.Sprintf("%d@%s", l.Occurrence, at(l.Due)))
			}
		}
		wantSkipped := map[string][]string{
			"test.tick-skip":     {"3@3h0m0s", "4@4h0m0s", "5@5h0m0s", "6@6h0m0s", "7@7h0m0s"},
			"test.tick-coalesce": {"3@3h0m0s", "4@4h0m0s", "5@5h0m0s", "6@6h0m0s"},
		}
		for typ, w := range wantSkipped {
			if !slices.Equal(skipped[typ], w) {
				t.Errorf("%s: skipped occurrences reported due at %q, want %q", typ, skipped[typ], w)
			}
		}
		if len(skipped) != len(wantSkipped) {
			t.Errorf("skipped occurrences reported: %v, want those of %d types", skipped, len(wantSkipped))
		}
		if ts := env.Timeouts(d, "a"); len(ts) != 3 {
			t.Errorf("pending: %+v, want one occurrence of each series", ts)
		}
	}, sagatest.WithDispatcherOptions(saga.WithHooks(hooks)))
}

type (
	StartHourly struct{ ID string }
	PokeHourly  struct{ ID string }
	hourlyTick  struct{}
	hourly      struct {
		Fired []int // occurrence numbers, in the order handled
		Dues  []time.Time
		Pokes int
	}
)

func (hourlyTick) MessageName() string { return "test.hourly-tick" }

func hourlySaga() *saga.Definition[hourly] {
	d := saga.Define[hourly]("hourly")
	saga.StartedBy(d, saga.By(func(m StartHourly) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[hourly], m StartHourly) error {
			_, err := c.RequestRecurringTimeout(time.Hour, hourlyTick{})
			return err
		})
	saga.Handles(d, saga.By(func(m PokeHourly) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[hourly], m PokeHourly) error {
			c.Data.Pokes++
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[hourly], _ hourlyTick) error {
		c.Data.Fired = append(c.Data.Fired, c.Occurrence())
		c.Data.Dues = append(c.Data.Dues, c.TimeoutDue())
		return nil
	})
	return d
}

// A crash in the step that handles an occurrence — before its commit,
// after it and before the outbox is cleared, or before the ack — neither
// loses the next occurrence nor schedules it twice, in any order with
// another message to the instance.
func TestRecurringTimeoutSurvivesACrashInItsStep(t *testing.T) {
	d := hourlySaga()
	for _, point := range []sagatest.CrashPoint{sagatest.BeforeCommit, sagatest.BeforeOutboxCleared, sagatest.BeforeAck} {
		t.Run(point.String(), func(t *testing.T) {
			var start time.Time
			sagatest.Explore(t, []saga.Saga{d},
				func(t *testing.T, env *sagatest.Env) {
					start = env.Start()
					env.Send(StartHourly{ID: "h"})
				},
				[]sagatest.Input{
					sagatest.Crash(sagatest.Timeout(d, "h"), point),
					sagatest.Send(PokeHourly{ID: "h"}),
				},
				func(t *testing.T, env *sagatest.Env) {
					env.AdvanceTo(start.Add(3*time.Hour + time.Minute))
					got := sagatest.State(t, env, d, "h")
					want := []time.Time{start.Add(time.Hour), start.Add(2 * time.Hour), start.Add(3 * time.Hour)}
					if !slices.Equal(got.Fired, []int{1, 2, 3}) || !slices.EqualFunc(got.Dues, want, time.Time.Equal) {
						t.Errorf("occurrences handled %v due %v, want 1, 2, 3 due %v", got.Fired, got.Dues, want)
					}
					ts := env.Timeouts(d, "h")
					if len(ts) != 1 || ts[0].Occurrence != 4 || !ts[0].At.Equal(start.Add(4*time.Hour)) {
						t.Errorf("pending %+v, want occurrence 4 only, at +4h", ts)
					}
				})
		})
	}
}

// secondBusinessDayAfter is the brute-force step of the series: 09:00
// Warsaw time on the second business day after prev's day, with extra
// holidays beside warsawHolidays.
func secondBusinessDayAfter(t *testing.T, prev time.Time, extra ...time.Time) time.Time {
	t.Helper()
	warsaw, err := time.LoadLocation("Europe/Warsaw")
	if err != nil {
		t.Fatal(err)
	}
	y, m, d := prev.In(warsaw).Date()
	day := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	for n := 0; n < 2; {
		day = day.AddDate(0, 0, 1)
		off := day.Weekday() == time.Saturday || day.Weekday() == time.Sunday ||
			slices.Contains(warsawHolidays, [2]int{int(day.Month()), day.Day()})
		for _, e := range extra {
			ey, em, ed := e.In(warsaw).Date()
			off = off || (ey == day.Year() && em == day.Month() && ed == day.Day())
		}
		if !off {
			n++
		}
	}
	return time.Date(day.Year(), day.Month(), day.Day(), 9, 0, 0, 0, warsaw).UTC()
}

// A holiday added mid-year (a new calendar version, re-planned) moves the
// pending occurrence and the series goes on from it on the new version.
func TestRecurringTimeoutReplannedMidYear(t *testing.T) {
	var handled sync.Map
	d := remindSaga(&handled)
	v1 := warsawCalendar(t)
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		start := env.Start()
		env.Send(Remind{ID: "r"})
		replanAt := time.Date(2024, time.June, 1, 0, 0, 0, 0, time.UTC)
		env.AdvanceTo(replanAt)
		// The table: on version 1 up to the re-plan; the occurrence then
		// pending falls on the new holiday, and is counted again, on
		// version 2, from the nominal time of the one before.
		var want []time.Time
		prev := start
		for at := secondBusinessDayAfter(t, prev); !at.After(replanAt); at = secondBusinessDayAfter(t, prev) {
			want = append(want, at)
			prev = at
		}
		holiday := secondBusinessDayAfter(t, prev) // the pending occurrence's day
		yearEnd := start.AddDate(1, 0, 0)
		for at := secondBusinessDayAfter(t, prev, holiday); !at.After(yearEnd); at = secondBusinessDayAfter(t, prev, holiday) {
			want = append(want, at)
			prev = at
		}

		v2opts := []calendar.Option{calendar.On(calendar.DateOf(holiday.In(time.FixedZone("", 2*3600))), "new holiday")}
		for _, h := range warsawHolidays {
			v2opts = append(v2opts, calendar.Yearly(time.Month(h[0]), h[1], "holiday"))
		}
		v2, err := calendar.New("pl", "2024b", v2opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Add(v2); err != nil {
			t.Fatal(err)
		}
		res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "remind", calendar.RefOf(v2))
		if err != nil || len(res) != 1 || !res[0].Changed() || !res[0].OldAt.Equal(holiday) {
			t.Fatalf("re-plan: %+v, %v; want the occurrence of %v moved", res, err, holiday)
		}
		env.AdvanceTo(yearEnd)
		got := sagatest.State(t, env, d, "r")
		if w := numbered(want); !slices.Equal(got.Fired, w) {
			t.Errorf("occurrences handled (%d) differ from the table (%d):\n got %q\nwant %q", len(got.Fired), len(w), got.Fired, w)
		}
		if ts := env.Timeouts(d, "r"); len(ts) != 1 || ts[0].Calendar != calendar.RefOf(v2) {
			t.Errorf("pending after the year: %+v, want one on %s", ts, calendar.RefOf(v2))
		}
	}, sagatest.WithCalendars(reg, calendar.RefOf(v1)))
}

// A recurring request that could not recur is refused at the call, with
// an error to match, and leaves nothing pending.
func TestRecurringTimeoutErrors(t *testing.T) {
	type Try struct {
		ID string
		I  int
	}
	tests := []struct {
		name    string
		every   time.Duration
		rule    *calendar.Rule
		wantErr error
	}{
		{"interval too short", 999 * time.Millisecond, nil, timeout.ErrInvalidTimeout},
		{"negative interval", -time.Hour, nil, timeout.ErrInvalidTimeout},
		{"an instant rule does not recur", 0, ptr(calendar.NotBefore(calendar.ClockOf(9, 0)).In("UTC")), calendar.ErrInvalidRule},
		{"end of this month does not recur", 0, ptr(calendar.EndOfMonth(0).In("UTC")), calendar.ErrInvalidRule},
		{"invalid rule", 0, ptr(calendar.BusinessDays(0)), calendar.ErrInvalidRule},
		{"interval", time.Minute, nil, nil},
		{"next day at 09:00", 0, ptr(calendar.Next(calendar.ClockOf(9, 0)).In("Europe/Warsaw")), nil},
	}
	got := make([]error, len(tests))
	d := saga.Define[struct{}]("recur-tries")
	saga.StartedBy(d, saga.By(func(m Try) string { return m.ID }),
		func(ctx context.Context, c *saga.Context[struct{}], m Try) error {
			if tt := tests[m.I]; tt.rule != nil {
				_, got[m.I] = c.RequestRecurringTimeoutBy(*tt.rule, remindTick{})
			} else {
				_, got[m.I] = c.RequestRecurringTimeout(tt.every, remindTick{})
			}
			return nil
		})
	saga.OnTimeout(d, func(context.Context, *saga.Context[struct{}], remindTick) error { return nil })
	reg := new(calendar.Registry)
	if err := reg.Add(warsawCalendar(t)); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		for i, tt := range tests {
			env.Send(Try{ID: tt.name, I: i})
			err := got[i]
			if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil && !errors.Is(err, saga.ErrPermanent)) {
				t.Errorf("%s: got %v, want %v (and ErrPermanent)", tt.name, err, tt.wantErr)
			}
			if ts := env.Timeouts(d, tt.name); (tt.wantErr == nil) != (len(ts) == 1) {
				t.Errorf("%s: pending %+v", tt.name, ts)
			}
		}
	}, sagatest.WithCalendars(reg))
}

func ptr[T any](v T) *T { return &v }
