package schedule_test

// A year of occurrences in virtual time (testing/synctest) on the memory
// broker, for each spec kind in three zones, compared with a table the test
// computes on its own: by brute force over the minutes (cron) or the days
// (rules) of the year, from the calendar's answers, never by calling the
// code under test. A holiday added in September (a new calendar version,
// Replan) must move the occurrences after it.

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout/schedule"
	"github.com/jetsaga/jetsaga/transport"
)

const year = 2027

func calendars(t *testing.T) (v1, v2 calendar.Calendar, reg *calendar.Registry) {
	t.Helper()
	base := []calendar.Option{
		calendar.Yearly(time.January, 1, "New Year"),
		calendar.Yearly(time.December, 25, "Christmas"),
		calendar.Easter(1, "Easter Monday"),
	}
	var err error
	if v1, err = calendar.New("office", "1", base...); err != nil {
		t.Fatal(err)
	}
	// Version 2 adds a holiday on Thursday 30 September, the month's last
	// business day under version 1.
	if v2, err = calendar.New("office", "2", append(base, calendar.On(calendar.Date{Year: year, Month: time.September, Day: 30}, "Office closed"))...); err != nil {
		t.Fatal(err)
	}
	reg = &calendar.Registry{}
	if err := reg.Add(v1, v2); err != nil {
		t.Fatal(err)
	}
	return v1, v2, reg
}

type yearCase struct {
	name string
	spec func(zone string) schedule.Spec
	// want computes the expected nominal times in [from, to] on cal.
	want func(loc *time.Location, cal calendar.Calendar, from, to time.Time) []time.Time
}

var office = calendar.Ref{Name: "office", Version: "1"}

var yearCases = []yearCase{
	{
		// At 15 and 45 past 01:00 to 03:00: both DST changes, and times in a
		// gap that must fire at the jump, not a jump's length later.
		name: "cron-dst",
		spec: func(zone string) schedule.Spec { return schedule.Spec{Cron: "15,45 1-3 * * *", Zone: zone} },
		want: func(loc *time.Location, _ calendar.Calendar, from, to time.Time) []time.Time {
			return bruteCron(loc, from, to, func(h, m int, _ calendar.Date) bool { return (m == 15 || m == 45) && h >= 1 && h <= 3 })
		},
	},
	{
		name: "cron-business-hours", // every 15 minutes within business hours
		spec: func(zone string) schedule.Spec {
			return schedule.Spec{Cron: "*/15 9-16 * * mon-fri", Zone: zone, Calendar: office}
		},
		want: func(loc *time.Location, cal calendar.Calendar, from, to time.Time) []time.Time {
			return bruteCron(loc, from, to, func(h, m int, d calendar.Date) bool {
				return m%15 == 0 && h >= 9 && h <= 16 && cal.IsBusinessDay(d)
			})
		},
	},
	{
		name: "every-2nd-business-day",
		spec: func(zone string) schedule.Spec {
			r := calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In(zone)
			return schedule.Spec{Rule: &r, Calendar: office}
		},
		want: func(loc *time.Location, cal calendar.Calendar, from, to time.Time) []time.Time {
			var out []time.Time
			n := 0
			for d := calendar.DateOf(from.In(loc)).AddDays(1); ; d = d.AddDays(1) {
				if !cal.IsBusinessDay(d) {
					continue
				}
				if n++; n%2 != 0 {
					continue
				}
				at := time.Date(d.Year, d.Month, d.Day, 9, 0, 0, 0, loc) // 09:00 exists once in these zones
				if at.After(to) {
					return out
				}
				out = append(out, at)
			}
		},
	},
	{
		name: "last-business-day-of-month",
		spec: func(zone string) schedule.Spec {
			r := calendar.LastBusinessDayOfMonth(1).At(calendar.ClockOf(18, 0)).In(zone)
			return schedule.Spec{Rule: &r, Calendar: office}
		},
		want: func(loc *time.Location, cal calendar.Calendar, from, to time.Time) []time.Time {
			var out []time.Time
			for d := calendar.DateOf(from.In(loc)); ; d = d.AddDays(1) {
				next := d.AddDays(1)
				// d is the last business day of its month if no later day of it is one.
				last := cal.IsBusinessDay(d) && d.Month != calendar.DateOf(from.In(loc)).Month
				for e := next; last && e.Month == d.Month; e = e.AddDays(1) {
					last = !cal.IsBusinessDay(e)
				}
				if last {
					at := time.Date(d.Year, d.Month, d.Day, 18, 0, 0, 0, loc)
					if at.After(to) {
						return out
					}
					out = append(out, at)
				}
				if d.Year > year {
					return out
				}
			}
		},
	},
}

// bruteCron walks every minute of [from, to] in UTC and keeps those whose
// wall clock in loc matches, each wall reading once (the first, when the
// clocks go back); at an instant where the clocks jumped forward, it adds
// the instant if a wall time skipped over matches.
func bruteCron(loc *time.Location, from, to time.Time, match func(h, m int, d calendar.Date) bool) []time.Time {
	var out []time.Time
	seen := map[time.Time]bool{} // wall readings, as UTC-labelled times
	prev := from.Add(-time.Minute).In(loc)
	for u := from; !u.After(to); u = u.Add(time.Minute) {
		lt := u.In(loc)
		wall := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), 0, 0, time.UTC)
		pwall := time.Date(prev.Year(), prev.Month(), prev.Day(), prev.Hour(), prev.Minute(), 0, 0, time.UTC)
		fire := false
		if !seen[wall] && match(lt.Hour(), lt.Minute(), calendar.DateOf(lt)) {
			fire = true
		}
		seen[wall] = true
		for w := pwall.Add(time.Minute); w.Before(wall); w = w.Add(time.Minute) { // a gap
			if match(w.Hour(), w.Minute(), calendar.DateOf(w)) {
				fire = true
			}
		}
		if fire {
			out = append(out, u)
		}
		prev = lt
	}
	return out
}

func TestYearOfOccurrences(t *testing.T) {
	for _, zone := range []string{"Europe/Warsaw", "America/New_York", "Australia/Lord_Howe"} {
		for _, c := range yearCases {
			t.Run(zone+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) { runYear(t, zone, c) })
			})
		}
	}
}

type received struct {
	id      string
	nominal time.Time
	at      time.Time
}

func runYear(t *testing.T, zone string, c yearCase) {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	_, v2, reg := calendars(t)
	from := time.Date(year, time.January, 1, 0, 0, 0, 0, loc)
	to := time.Date(year+1, time.January, 1, 0, 0, 0, 0, loc).Add(-time.Second)
	replanAt := time.Date(year, time.September, 20, 12, 0, 0, 0, loc)
	time.Sleep(time.Until(from.Add(-time.Hour)))

	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, err := schedule.New(b, schedule.WithCalendars(reg), schedule.WithLogger(discard()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := s.Create(ctx, schedule.Schedule{
		Name: "year", Spec: c.spec(zone), Start: from, End: to,
		Action: schedule.Action{Queue: "work", Message: &transport.Message{Subject: "Tick", Body: []byte("{}")}},
	}); err != nil {
		t.Fatal(err)
	}
	var got []received
	done := make(chan struct{})
	go func() {
		defer close(done)
		q, err := b.Queue(ctx, "work")
		if err != nil {
			t.Error(err)
			return
		}
		for {
			ds, err := q.Receive(ctx, 100)
			if err != nil {
				return
			}
			for _, d := range ds {
				nominal, err := time.Parse(time.RFC3339Nano, d.Properties[schedule.PropertyNominal])
				if err != nil {
					t.Errorf("nominal: %v", err)
				}
				got = append(got, received{d.MessageID, nominal, time.Now()})
				_ = d.Complete(ctx)
			}
		}
	}()
	go func() { _ = s.Run(ctx) }()

	time.Sleep(time.Until(replanAt))
	if c.spec(zone).Calendar != (calendar.Ref{}) {
		if err := s.Replan(ctx, "year", calendar.RefOf(v2)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(to.Add(24 * time.Hour)))
	synctest.Wait()
	cancel()
	<-done

	want := c.want(loc, v2, from, to)
	if len(want) == 0 {
		t.Fatal("the expected table is empty")
	}
	ids := map[string]bool{}
	var nominals []time.Time
	for _, r := range got {
		if ids[r.id] {
			t.Errorf("occurrence %s received twice", r.id)
		}
		ids[r.id] = true
		if r.at.Before(r.nominal) {
			t.Errorf("occurrence %s received at %s, before its nominal time", r.id, r.at)
		}
		if r.id != schedule.OccurrenceID("year", r.nominal) {
			t.Errorf("occurrence ID %s for nominal %s", r.id, r.nominal)
		}
		nominals = append(nominals, r.nominal)
	}
	diff(t, nominals, want, loc)
	info, err := s.Get(t.Context(), "year")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Ended || info.Sent != int64(len(want)) {
		t.Errorf("info: ended %v sent %d, want ended and %d sent", info.Ended, info.Sent, len(want))
	}
}

// diff fails t with the occurrences missing from got and those too many.
func diff(t *testing.T, got, want []time.Time, loc *time.Location) {
	t.Helper()
	key := func(x time.Time) int64 { return x.UnixNano() }
	g, w := map[int64]bool{}, map[int64]bool{}
	for _, x := range got {
		g[key(x)] = true
	}
	for _, x := range want {
		w[key(x)] = true
	}
	var missing, extra []string
	for _, x := range want {
		if !g[key(x)] {
			missing = append(missing, x.In(loc).Format(time.RFC3339))
		}
	}
	for _, x := range got {
		if !w[key(x)] {
			extra = append(extra, x.In(loc).Format(time.RFC3339))
		}
	}
	if len(missing)+len(extra) > 0 {
		t.Errorf("got %d occurrences, want %d; missing (%d): %v; not expected (%d): %v",
			len(got), len(want), len(missing), head(missing), len(extra), head(extra))
	}
	if !slices.IsSortedFunc(got, func(a, b time.Time) int { return a.Compare(b) }) {
		t.Errorf("occurrences received out of order")
	}
}

func head(s []string) []string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}
