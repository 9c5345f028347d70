package schedule_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

// A daily wall-clock time over the nights the clocks change, three ways: a schedule of
// calendar.Next (and of "1 calendar day after, at"), a cron schedule, and a saga that asks
// for the next reminder by calendar.Next when one falls due. All fire once a day; a time
// the clocks went back over at its first instant. They differ only in a gap: a rule
// moves the time forward by the jump, cron fires at the jump.

type (
	StartDaily struct {
		ID   string
		Rule calendar.Rule
	}
	dailyTick struct{}
	daily     struct {
		Rule  calendar.Rule
		Fired []time.Time
	}
)

func (dailyTick) MessageName() string { return "test.daily-tick" }

// dailySaga chains its reminders as a user would: each from the due time of the one
// handled.
func dailySaga() *saga.Definition[daily] {
	d := saga.Define[daily]("daily")
	saga.StartedBy(d, saga.By(func(m StartDaily) string { return m.ID }),
		func(_ context.Context, c *saga.Context[daily], m StartDaily) error {
			c.Data.Rule = m.Rule
			_, err := c.RequestTimeoutBy(m.Rule, dailyTick{})
			return err
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[daily], _ dailyTick) error {
		c.Data.Fired = append(c.Data.Fired, c.TimeoutDue())
		_, err := c.RequestTimeoutBy(c.Data.Rule, dailyTick{}, saga.RuleFrom(c.TimeoutDue()))
		return err
	})
	return d
}

func TestDailyChainOverTransitions(t *testing.T) {
	utc := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, time.UTC) }
	nights := []struct {
		name, zone string
		h, m       int
		day        calendar.Date
		rule, cron time.Time // hand-computed, the instant that night
	}{
		// Warsaw: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{"Warsaw spring", "Europe/Warsaw", 2, 30, calendar.Date{Year: 2026, Month: time.March, Day: 29}, utc(time.March, 29, 1, 30), utc(time.March, 29, 1, 0)},
		{"Warsaw fall", "Europe/Warsaw", 2, 30, calendar.Date{Year: 2026, Month: time.October, Day: 25}, utc(time.October, 25, 0, 30), utc(time.October, 25, 0, 30)},
		// New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
		{"New York spring 01:30", "America/New_York", 1, 30, calendar.Date{Year: 2026, Month: time.March, Day: 8}, utc(time.March, 8, 6, 30), utc(time.March, 8, 6, 30)},
		{"New York spring 02:30", "America/New_York", 2, 30, calendar.Date{Year: 2026, Month: time.March, Day: 8}, utc(time.March, 8, 7, 30), utc(time.March, 8, 7, 0)},
		{"New York fall", "America/New_York", 1, 30, calendar.Date{Year: 2026, Month: time.November, Day: 1}, utc(time.November, 1, 5, 30), utc(time.November, 1, 5, 30)},
		// Lord Howe, half an hour: 2026-04-05 02:00 +11 -> 01:30 +10:30; 2026-10-04
		// 02:00 +10:30 -> 02:30 +11.
		{"Lord Howe fall", "Australia/Lord_Howe", 1, 45, calendar.Date{Year: 2026, Month: time.April, Day: 5}, utc(time.April, 4, 14, 45), utc(time.April, 4, 14, 45)},
		{"Lord Howe spring 01:45", "Australia/Lord_Howe", 1, 45, calendar.Date{Year: 2026, Month: time.October, Day: 4}, utc(time.October, 3, 15, 15), utc(time.October, 3, 15, 15)},
		{"Lord Howe spring 02:15", "Australia/Lord_Howe", 2, 15, calendar.Date{Year: 2026, Month: time.October, Day: 4}, utc(time.October, 3, 15, 45), utc(time.October, 3, 15, 30)},
	}
	d := dailySaga()
	for _, n := range nights {
		t.Run(n.name, func(t *testing.T) {
			loc := mustZone(t, n.zone)
			// want returns the instants of the days D-2 to D+4, the night's given.
			want := func(night time.Time) []string {
				var out []string
				for k := -2; k <= 4; k++ {
					day := n.day.AddDays(k)
					at := time.Date(day.Year, day.Month, day.Day, n.h, n.m, 0, 0, loc) // an ordinary day
					if k == 0 {
						at = night
					}
					out = append(out, at.UTC().Format(time.RFC3339))
				}
				return out
			}
			clock := calendar.ClockOf(n.h, n.m)
			start := n.day.AddDays(-3).In(calendar.ClockOf(12, 0), loc) // noon of D-3
			sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
				s, err := schedule.New(env.Broker(), schedule.WithLogger(discard()))
				if err != nil {
					t.Fatal(err)
				}
				next := calendar.Next(clock).In(n.zone)
				days := calendar.CalendarDays(1).At(clock).In(n.zone)
				for _, c := range []struct {
					name string
					spec schedule.Spec
					want []string
				}{
					{"next", schedule.Spec{Rule: &next}, want(n.rule)},
					{"days", schedule.Spec{Rule: &days}, want(n.rule)},
					{"cron", schedule.Spec{Cron: fmt.Sprintf("%d %d * * *", n.m, n.h), Zone: n.zone}, want(n.cron)},
				} {
					name := c.name
					err := s.Create(t.Context(), schedule.Schedule{Name: name, Spec: c.spec, Start: start,
						Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick"}}})
					if err != nil {
						t.Fatal(err)
					}
					got, err := s.Upcoming(t.Context(), name, len(c.want))
					if err != nil {
						t.Fatal(err)
					}
					var gotS []string
					for _, g := range got {
						gotS = append(gotS, g.UTC().Format(time.RFC3339))
					}
					if !slices.Equal(gotS, c.want) {
						t.Errorf("%s: occurrences %v, want %v", c.spec, gotS, c.want)
					}
				}

				// The saga, chaining Next from each due time.
				env.AdvanceTo(start)
				env.Send(StartDaily{ID: "r", Rule: next})
				env.AdvanceTo(n.day.AddDays(4).In(clock, loc).Add(time.Hour))
				var fired []string
				for _, f := range sagatest.State(t, env, d, "r").Fired {
					fired = append(fired, f.UTC().Format(time.RFC3339))
				}
				if w := want(n.rule); !slices.Equal(fired, w) {
					t.Errorf("saga chaining %s: fired %v, want %v", next, fired, w)
				}
			}, sagatest.WithStart(n.day.AddDays(-4).In(calendar.Clock{}, time.UTC)), sagatest.WithQueues("work"))
		})
	}
}
