package renewal_test

import (
	"errors"
	"slices"
	"testing"
	"time"
	_ "time/tzdata" // the zone database of the Go release, not the machine's

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/examples/renewal"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

const events = "billing-events"

var flow = renewal.New(renewal.Config{})

// poland is a business calendar: weekends and Polish public holidays.
func poland(t *testing.T, version string, extra ...calendar.Option) *calendar.Standard {
	t.Helper()
	opts := []calendar.Option{
		calendar.Yearly(time.January, 1, "New Year's Day"), calendar.Yearly(time.January, 6, "Epiphany"),
		calendar.Easter(1, "Easter Monday"), calendar.Yearly(time.May, 1, "Labour Day"),
		calendar.Yearly(time.May, 3, "Constitution Day"), calendar.Easter(60, "Corpus Christi"),
		calendar.Yearly(time.August, 15, "Assumption"), calendar.Yearly(time.November, 1, "All Saints"),
		calendar.Yearly(time.November, 11, "Independence Day"), calendar.Yearly(time.December, 25, "Christmas"),
		calendar.Yearly(time.December, 26, "Second Day of Christmas"),
	}
	c, err := calendar.New("pl", version, append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// registry holds the calendars and makes the first current.
func registry(t *testing.T, cals ...calendar.Calendar) sagatest.Option {
	t.Helper()
	reg := new(calendar.Registry)
	if err := reg.Add(cals...); err != nil {
		t.Fatal(err)
	}
	return sagatest.WithCalendars(reg, calendar.RefOf(cals[0]))
}

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

// sentAt returns when the messages of type M were sent to the events
// queue, with the messages.
func sentAt[M any](t *testing.T, env *sagatest.Env) ([]M, []time.Time) {
	t.Helper()
	var ats []time.Time
	for _, raw := range env.Messages(events) {
		if raw.Properties[saga.TypeProperty] != saga.MessageName[M]() {
			continue
		}
		ats = append(ats, raw.EnqueuedAt.UTC())
	}
	return sagatest.Sent[M](env, events), ats
}

// businessDaysBetween counts the business days strictly between a and b.
func businessDaysBetween(cal calendar.Calendar, a, b calendar.Date) int {
	n := 0
	for d := a.AddDays(1); d != b; d = d.AddDays(1) {
		if cal.IsBusinessDay(d) {
			n++
		}
	}
	return n
}

// A year of monthly renewals in Warsaw, paid at each charge: twelve
// reminders, each at 09:00 local time on the business day seven business
// days before its renewal, and renewals at 10:00 local time through both
// daylight saving changes of 2024.
func TestAYearOfRenewals(t *testing.T) {
	pl := poland(t, "2024.1")
	warsaw := zone(t, "Europe/Warsaw")
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		renews := time.Date(2024, time.February, 15, 10, 0, 0, 0, warsaw)
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Renews: renews, Amount: 999})
		for period := 1; period <= 12; period++ {
			env.AdvanceTo(renews)
			charges := sagatest.Sent[renewal.Charge](env, events)
			if len(charges) != period || charges[period-1] != (renewal.Charge{Sub: "s1", Period: period, Attempt: 1, Amount: 999}) {
				t.Fatalf("period %d: charges %+v", period, charges)
			}
			env.Send(renewal.PaymentSucceeded{Sub: "s1", Period: period})
			renewed := sagatest.Sent[renewal.Renewed](env, events)
			next := renewed[len(renewed)-1].Next.In(warsaw)
			if len(renewed) != period || next.Hour() != 10 || next.Minute() != 0 || next.Day() != 15 || next.Month() != renews.Month()%12+1 {
				t.Fatalf("period %d: renewed %+v; want the 15th of the next month at 10:00 Warsaw", period, renewed)
			}
			renews = next
		}
		reminders, ats := sentAt[renewal.Reminder](t, env)
		if len(reminders) != 12 { // the 13th is due in February 2025
			t.Fatalf("%d reminders, want 12", len(reminders))
		}
		for i, r := range reminders {
			at := ats[i].In(warsaw)
			day := calendar.DateOf(at)
			if at.Hour() != 9 || at.Minute() != 0 || !pl.IsBusinessDay(day) || r.LateBy != 0 ||
				businessDaysBetween(pl, day, calendar.DateOf(r.Renews.In(warsaw))) != 6 {
				t.Errorf("reminder %d sent %v for the renewal of %v: want 09:00 Warsaw, seven business days before", i+1, at, r.Renews.In(warsaw))
			}
		}
		// Hand-computed: February 15 (Thursday) is reminded on Tuesday
		// February 6 at 09:00 CET; April 15 (Monday) on Thursday April 4
		// at 09:00 CEST, after the clocks changed on March 31.
		if !ats[0].Equal(utc(2024, time.February, 6, 8, 0)) || !ats[2].Equal(utc(2024, time.April, 4, 7, 0)) {
			t.Errorf("reminders at %v and %v, want 2024-02-06 08:00 UTC and 2024-04-04 07:00 UTC", ats[0], ats[2])
		}
		env.Send(renewal.CancelRequested{Sub: "s1"})
		env.AssertCompleted(t, flow, "s1")
	}, sagatest.WithStart(utc(2024, time.January, 10, 12, 0)), registry(t, pl), sagatest.WithQueues(events))
}

// A subscription renewing on the 31st keeps the 31st where the month has
// one: its renewals count from the first (January 31, February 29, March
// 31, April 30, May 31), not from the one before (which would drift to
// the 29th from March on).
func TestRenewalsCountFromTheFirst(t *testing.T) {
	warsaw := zone(t, "Europe/Warsaw")
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		renews := time.Date(2024, time.January, 31, 10, 0, 0, 0, warsaw)
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Renews: renews, Amount: 999})
		var days []int
		for period := 1; period <= 4; period++ {
			env.AdvanceTo(renews)
			env.Send(renewal.PaymentSucceeded{Sub: "s1", Period: period})
			renewed := sagatest.Sent[renewal.Renewed](env, events)
			if len(renewed) != period {
				t.Fatalf("period %d: renewed %+v", period, renewed)
			}
			renews = renewed[period-1].Next.In(warsaw)
			days = append(days, renews.Day())
		}
		if want := []int{29, 31, 30, 31}; !slices.Equal(days, want) {
			t.Errorf("renewal days %v, want %v", days, want)
		}
	}, sagatest.WithStart(utc(2024, time.January, 10, 12, 0)), registry(t, poland(t, "2024.1")), sagatest.WithQueues(events))
}

// A renewal across New York's change to daylight saving time (March 10,
// 2024): the next renewal keeps its 10:00 wall-clock time, an hour earlier
// in UTC, and its reminder, on the Monday after the change, is at 09:00
// EDT.
func TestRenewalAcrossADaylightSavingChange(t *testing.T) {
	us, err := calendar.New("us", "2024.1", calendar.On(calendar.Date{Year: 2024, Month: time.February, Day: 19}, "Presidents' Day"))
	if err != nil {
		t.Fatal(err)
	}
	ny := zone(t, "America/New_York")
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "bob", Zone: "America/New_York", Amount: 500,
			Renews: time.Date(2024, time.February, 20, 10, 0, 0, 0, ny)}) // 15:00 UTC
		env.AdvanceTo(utc(2024, time.February, 20, 15, 0))
		env.Send(renewal.PaymentSucceeded{Sub: "s1", Period: 1})
		env.AssertSent(t, events, renewal.Charge{Sub: "s1", Period: 1, Attempt: 1, Amount: 500},
			renewal.Renewed{Sub: "s1", Period: 1, Next: utc(2024, time.March, 20, 14, 0)})
		env.AdvanceTo(utc(2024, time.March, 20, 14, 0))
		_, ats := sentAt[renewal.Reminder](t, env)
		// February 20 (Tuesday, after Presidents' Day): Thursday February 8,
		// 09:00 EST. March 20 (Wednesday): Monday March 11, 09:00 EDT.
		want := []time.Time{utc(2024, time.February, 8, 14, 0), utc(2024, time.March, 11, 13, 0)}
		if len(ats) != 2 || !ats[0].Equal(want[0]) || !ats[1].Equal(want[1]) {
			t.Errorf("reminders at %v, want %v", ats, want)
		}
		charges, cats := sentAt[renewal.Charge](t, env)
		if len(charges) != 2 || !cats[1].Equal(utc(2024, time.March, 20, 14, 0)) {
			t.Errorf("charges %+v at %v; the second want at 2024-03-20 14:00 UTC (10:00 EDT)", charges, cats)
		}
		env.Send(renewal.CancelRequested{Sub: "s1"})
	}, sagatest.WithStart(utc(2024, time.February, 1, 0, 0)), registry(t, us), sagatest.WithQueues(events))
}

// A holiday announced mid-year, among the seven business days before a
// pending reminder: the reminder keeps its instant until the timeouts are
// re-planned under the calendar's new version, then comes a business day
// earlier.
func TestHolidayAddedMidYearIsReplanned(t *testing.T) {
	v1 := poland(t, "2024.1")
	reg := new(calendar.Registry)
	if err := reg.Add(v1); err != nil {
		t.Fatal(err)
	}
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Amount: 999,
			Renews: utc(2024, time.June, 17, 8, 0)}) // Monday, 10:00 CEST
		old, moved := utc(2024, time.June, 6, 7, 0), utc(2024, time.June, 5, 7, 0) // 09:00 CEST
		if ts := env.Timeouts(flow, "s1"); len(ts) != 2 || !ts[0].At.Equal(old) || ts[0].Calendar != calendar.RefOf(v1) {
			t.Fatalf("pending %+v; want the reminder at %v on pl@2024.1 first", ts, old)
		}
		env.AdvanceTo(utc(2024, time.June, 1, 0, 0))
		v2 := poland(t, "2024.2", calendar.On(calendar.Date{Year: 2024, Month: time.June, Day: 10}, "Announced"))
		if err := reg.Add(v2); err != nil {
			t.Fatal(err)
		}
		res, err := env.Dispatcher().ReplanTimeouts(t.Context(), "renewal", calendar.RefOf(v2))
		if err != nil || len(res) != 1 {
			t.Fatalf("ReplanTimeouts: %+v, %v; want one timeout (the reminder; the charge has no rule)", res, err)
		}
		if r := res[0]; !r.Changed() || !r.OldAt.Equal(old) || !r.NewAt.Equal(moved) || r.Type != "renewal.remind" {
			t.Fatalf("re-planned %+v; want the reminder moved from %v to %v", r, old, moved)
		}
		env.AdvanceTo(old)
		_, ats := sentAt[renewal.Reminder](t, env)
		if len(ats) != 1 || !ats[0].Equal(moved) {
			t.Errorf("reminders at %v, want one, at %v", ats, moved)
		}
		env.Send(renewal.CancelRequested{Sub: "s1"})
	}, sagatest.WithStart(utc(2024, time.May, 20, 0, 0)), sagatest.WithCalendars(reg, calendar.RefOf(v1)), sagatest.WithQueues(events))
}

// An outage across a reminder's due time, longer than its tolerance: the
// reminder is sent when the outage ends, marked late. An outage across
// the renewal itself: the reminder, news of the past, is dropped, and
// the charge goes out late.
func TestOutageAcrossDueTimes(t *testing.T) {
	pl := poland(t, "2024.1")
	start := utc(2024, time.February, 1, 0, 0)
	subscribe := func(env *sagatest.Env) {
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Amount: 999,
			Renews: utc(2024, time.February, 15, 9, 0)}) // 10:00 CET; reminder due February 6, 08:00 UTC
		env.AdvanceTo(utc(2024, time.February, 6, 6, 0))
	}
	t.Run("reminder", func(t *testing.T) {
		sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
			subscribe(env)
			env.Outage(24 * time.Hour)
			rs, ats := sentAt[renewal.Reminder](t, env)
			if len(rs) != 1 || rs[0].LateBy != 22*time.Hour || !ats[0].Equal(utc(2024, time.February, 7, 6, 0)) {
				t.Errorf("reminders %+v at %v; want one, 22h late, at the end of the outage", rs, ats)
			}
			env.Send(renewal.CancelRequested{Sub: "s1"})
		}, sagatest.WithStart(start), registry(t, pl), sagatest.WithQueues(events))
	})
	t.Run("renewal", func(t *testing.T) {
		sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
			subscribe(env)
			env.Outage(10 * 24 * time.Hour) // until February 16, 06:00 UTC
			if rs := sagatest.Sent[renewal.Reminder](env, events); len(rs) != 0 {
				t.Errorf("reminders %+v after the renewal; want none", rs)
			}
			charges, ats := sentAt[renewal.Charge](t, env)
			if len(charges) != 1 || !ats[0].Equal(utc(2024, time.February, 16, 6, 0)) {
				t.Errorf("charges %+v at %v; want one, when the outage ended", charges, ats)
			}
			env.Send(renewal.PaymentSucceeded{Sub: "s1", Period: 1})
			env.AssertRunning(t, flow, "s1")
			env.Send(renewal.CancelRequested{Sub: "s1"})
		}, sagatest.WithStart(start), registry(t, pl), sagatest.WithQueues(events))
	})
}

// A charge that keeps failing is retried on each business day of grace at
// 09:00 customer-local, then the subscription lapses; cancelling at any
// point ends it and leaves no timeout behind (Run checks).
func TestGraceRetriesThenLapse(t *testing.T) {
	pl := poland(t, "2024.1")
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Amount: 999,
			Renews: utc(2024, time.February, 15, 9, 0)}) // Thursday 10:00 CET
		env.AdvanceTo(utc(2024, time.February, 15, 9, 0))
		env.Send(renewal.PaymentFailed{Sub: "s1", Period: 1, Reason: "card declined"})
		env.AdvanceTo(utc(2024, time.February, 25, 0, 0))
		_, ats := sentAt[renewal.Charge](t, env)
		// Grace ends three business days after, Tuesday February 20 at
		// 10:00 CET; retries on Friday 16, Monday 19 and Tuesday 20 at 09:00.
		want := []time.Time{utc(2024, time.February, 15, 9, 0), utc(2024, time.February, 16, 8, 0),
			utc(2024, time.February, 19, 8, 0), utc(2024, time.February, 20, 8, 0)}
		if len(ats) != len(want) {
			t.Fatalf("charges at %v, want %v", ats, want)
		}
		for i := range want {
			if !ats[i].Equal(want[i]) {
				t.Errorf("charge %d at %v, want %v", i+1, ats[i], want[i])
			}
		}
		lapsed, lats := sentAt[renewal.Lapsed](t, env)
		if len(lapsed) != 1 || !lats[0].Equal(utc(2024, time.February, 20, 9, 0)) {
			t.Errorf("lapsed %+v at %v; want once, at 2024-02-20 09:00 UTC", lapsed, lats)
		}
		env.AssertCompleted(t, flow, "s1")
		// A payment after the lapse is refunded.
		env.Send(renewal.PaymentSucceeded{Sub: "s1", Period: 1})
		if r := sagatest.Sent[renewal.Refund](env, events); len(r) != 1 {
			t.Errorf("refunds %+v, want one", r)
		}
	}, sagatest.WithStart(utc(2024, time.February, 1, 0, 0)), registry(t, pl), sagatest.WithQueues(events))
}

func TestSubscribeNeedsAZone(t *testing.T) {
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		env.Send(renewal.Subscribed{Sub: "s1", Zone: "Mars/Olympus", Renews: env.Now().Add(30 * 24 * time.Hour)})
		dl := env.DeadLetters()
		if len(dl) != 1 || dl[0].DeadLetterReason != saga.ReasonPermanent {
			t.Errorf("dead letters %+v; want the Subscribed, permanent", dl)
		}
	}, registry(t, poland(t, "2024.1")))
}

// The rules are the ones the package documents.
func TestRules(t *testing.T) {
	for _, tt := range []struct {
		rule calendar.Rule
		want string
	}{
		{renewal.ReminderRule.In("UTC"), "7 business days before, at 09:00 UTC"},
		{renewal.GraceRule.In("UTC"), "3 business days after in UTC"},
		{renewal.RetryRule.In("UTC"), "next business day, at 09:00 UTC"},
		{renewal.Renewal(2).In("UTC"), "2 months after in UTC"},
	} {
		if got := tt.rule.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		if _, err := calendar.ParseRule(tt.want); errors.Is(err, calendar.ErrInvalidRule) {
			t.Errorf("%q: %v", tt.want, err)
		}
	}
}
