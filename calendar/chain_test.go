package calendar

import (
	"testing"
	"time"
)

// transitionNights are the nights of 2026 the clocks change in three zones, with a daily
// wall-clock time that the change touches and the instant it is due that night,
// hand-computed: in a gap it moves forward by the jump, in an overlap it is the first of
// the two instants that read it.
var transitionNights = []struct {
	name  string
	zone  string
	clock Clock
	day   Date
	want  time.Time // in UTC
}{
	// Warsaw: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
	{"Warsaw spring, 02:30 in the gap", "Europe/Warsaw", ClockOf(2, 30), Date{2026, time.March, 29}, utc(2026, time.March, 29, 1, 30)},
	{"Warsaw fall, 02:30 twice", "Europe/Warsaw", ClockOf(2, 30), Date{2026, time.October, 25}, utc(2026, time.October, 25, 0, 30)},
	// New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
	{"New York spring, 01:30 before the jump", "America/New_York", ClockOf(1, 30), Date{2026, time.March, 8}, utc(2026, time.March, 8, 6, 30)},
	{"New York spring, 02:30 in the gap", "America/New_York", ClockOf(2, 30), Date{2026, time.March, 8}, utc(2026, time.March, 8, 7, 30)},
	{"New York fall, 01:30 twice", "America/New_York", ClockOf(1, 30), Date{2026, time.November, 1}, utc(2026, time.November, 1, 5, 30)},
	// Lord Howe, half-hour changes: 2026-04-05 02:00 +11 -> 01:30 +10:30; 2026-10-04
	// 02:00 +10:30 -> 02:30 +11.
	{"Lord Howe fall, 01:45 twice", "Australia/Lord_Howe", ClockOf(1, 45), Date{2026, time.April, 5}, utc(2026, time.April, 4, 14, 45)},
	{"Lord Howe spring, 01:45 before the jump", "Australia/Lord_Howe", ClockOf(1, 45), Date{2026, time.October, 4}, utc(2026, time.October, 3, 15, 15)},
	{"Lord Howe spring, 02:15 in the gap", "Australia/Lord_Howe", ClockOf(2, 15), Date{2026, time.October, 4}, utc(2026, time.October, 3, 15, 45)},
}

// TestDailyChainOverTransitions chains daily rules the way a saga does that asks for the
// next reminder when one falls due (the start of each is the due instant of the one
// before), over the nights the clocks change: each day is due exactly once, at its
// instant (the hand-computed one on the night of the change, else the only instant that
// reads the time).
func TestDailyChainOverTransitions(t *testing.T) {
	for _, n := range transitionNights {
		loc := mustLoad(t, n.zone)
		for _, rule := range []Rule{Next(n.clock).In(n.zone), CalendarDays(1).At(n.clock).In(n.zone)} {
			t.Run(n.name+"/"+rule.String(), func(t *testing.T) {
				from := n.day.AddDays(-3).In(n.clock, loc) // an ordinary day's instant
				var got []string
				for k := -2; k <= 4; k++ {
					due, err := rule.Due(from, nil)
					if err != nil {
						t.Fatal(err)
					}
					d := n.day.AddDays(k)
					want := n.want
					if k != 0 {
						want = time.Date(d.Year, d.Month, d.Day, n.clock.Hour(), n.clock.Minute(), 0, 0, loc)
					}
					got = append(got, due.In(loc).Format("01-02 15:04 MST"))
					if !due.Equal(want) {
						t.Fatalf("due %s for %s after %v, want %s", due.In(loc).Format(time.RFC3339), d, got[:len(got)-1], want.In(loc).Format(time.RFC3339))
					}
					from = due
				}
			})
		}
	}
}
