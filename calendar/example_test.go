package calendar_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
	_ "time/tzdata"

	"github.com/jetsaga/jetsaga/calendar"
)

// poland is a calendar file as users keep it.
const poland = `# Poland
weekend Sat Sun
*-01-01 New Year's Day
easter+1 Easter Monday
easter+60 Corpus Christi
*-11-11 Independence Day
2026-12-24 Christmas Eve
*-12-25 Christmas
*-12-26 Second Day of Christmas
`

func mustCalendar() calendar.Calendar {
	days, err := calendar.Load(strings.NewReader(poland))
	if err != nil {
		panic(err)
	}
	cal, err := calendar.New("pl", "2026.1", days)
	if err != nil {
		panic(err)
	}
	return cal
}

func warsaw(y int, m time.Month, d, h, min int) time.Time {
	loc, err := time.LoadLocation("Europe/Warsaw")
	if err != nil {
		panic(err)
	}
	return time.Date(y, m, d, h, min, 0, 0, loc)
}

func show(r calendar.Rule, from time.Time, cal calendar.Calendar) {
	due, err := r.Due(from, cal)
	if err != nil {
		fmt.Println(r, "error:", err)
		return
	}
	fmt.Printf("%s: %s\n", r, due.Format("Mon 2006-01-02 15:04 MST"))
}

// The payment grace period is three business days; from Wednesday before Christmas, the
// holidays on Thursday, Friday and Saturday push it into the next week.
func ExampleBusinessDays() {
	cal := mustCalendar()
	from := warsaw(2026, time.December, 23, 16, 0)
	show(calendar.BusinessDays(3).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), from, cal)
	// Output:
	// 3 business days after, at 09:00 Europe/Warsaw: Wed 2026-12-30 09:00 CET
}

// Seven business days before a renewal on Monday 15 June 2026, skipping Corpus Christi.
func ExampleBusinessDays_before() {
	cal := mustCalendar()
	renewal := warsaw(2026, time.June, 15, 12, 0)
	show(calendar.BusinessDays(-7).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), renewal, cal)
	// Output:
	// 7 business days before, at 09:00 Europe/Warsaw: Wed 2026-06-03 09:00 CEST
}

// Remind the customer seven days before renewal, but never on a weekend: Monday 09:00.
func ExampleRule_NotBefore() {
	cal := mustCalendar()
	renewal := warsaw(2026, time.June, 14, 14, 0) // a Sunday
	show(calendar.CalendarDays(-7).NotBefore(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), renewal, cal)
	// Output:
	// 7 calendar days before, on a business day not before 09:00 Europe/Warsaw: Mon 2026-06-08 09:00 CEST
}

func ExampleNextBusinessDay() {
	cal := mustCalendar()
	show(calendar.NextBusinessDay(calendar.ClockOf(9, 0)).In("Europe/Warsaw"), warsaw(2026, time.November, 10, 15, 0), cal)
	// Output:
	// next business day, at 09:00 Europe/Warsaw: Thu 2026-11-12 09:00 CET
}

// A wall-clock time that does not exist moves forward by the clock change. One that happens
// twice counts once, at the earlier instant: asked between the two, the next is tomorrow's.
func ExampleNext() {
	show(calendar.Next(calendar.ClockOf(2, 30)).In("Europe/Warsaw"), warsaw(2026, time.March, 28, 12, 0), nil)
	show(calendar.Next(calendar.ClockOf(2, 30)).In("Europe/Warsaw"), warsaw(2026, time.October, 24, 12, 0), nil)
	// 02:45 summer time, on the night the clocks go from 03:00 back to 02:00
	show(calendar.Next(calendar.ClockOf(2, 30)).In("Europe/Warsaw"), time.Date(2026, time.October, 25, 0, 45, 0, 0, time.UTC), nil)
	show(calendar.Next(calendar.ClockOf(9, 0)).In("America/New_York"), warsaw(2026, time.March, 8, 12, 0), nil)
	// Output:
	// next 02:30 Europe/Warsaw: Sun 2026-03-29 03:30 CEST
	// next 02:30 Europe/Warsaw: Sun 2026-10-25 02:30 CEST
	// next 02:30 Europe/Warsaw: Mon 2026-10-26 02:30 CET
	// next 09:00 America/New_York: Sun 2026-03-08 09:00 EDT
}

// Escalate at the end of the month.
func ExampleLastBusinessDayOfMonth() {
	cal := mustCalendar()
	from := warsaw(2026, time.January, 5, 10, 0)
	show(calendar.EndOfMonth(0).At(calendar.ClockOf(17, 0)).In("Europe/Warsaw"), from, cal)
	show(calendar.LastBusinessDayOfMonth(0).At(calendar.ClockOf(17, 0)).In("Europe/Warsaw"), from, cal)
	show(calendar.LastBusinessDayOfMonth(1).At(calendar.ClockOf(17, 0)).In("Europe/Warsaw"), from, cal)
	// Output:
	// last day of the month, at 17:00 Europe/Warsaw: Sat 2026-01-31 17:00 CET
	// last business day of the month, at 17:00 Europe/Warsaw: Fri 2026-01-30 17:00 CET
	// last business day of next month, at 17:00 Europe/Warsaw: Fri 2026-02-27 17:00 CET
}

// A month after January 31 is the last day of February.
func ExampleMonths() {
	show(calendar.Months(1).In("Europe/Warsaw"), warsaw(2028, time.January, 31, 10, 0), nil)
	// Output:
	// 1 month after in Europe/Warsaw: Tue 2028-02-29 10:00 CET
}

// Monthly renewals count from the first one: the k-th is Months(k) after it. Chaining
// Months(1) from the previous renewal drifts: after February 28 comes March 28, not March 31.
func ExampleMonths_renewals() {
	first := warsaw(2026, time.January, 31, 10, 0)
	fmt.Println("counted from the first renewal:")
	for k := 1; k <= 3; k++ {
		due, err := calendar.Months(k).In("Europe/Warsaw").Due(first, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println(due.Format("Mon 2006-01-02 15:04 MST"))
	}
	fmt.Println("chained, each from the one before (drifts):")
	due := first
	for k := 1; k <= 3; k++ {
		var err error
		due, err = calendar.Months(1).In("Europe/Warsaw").Due(due, nil)
		if err != nil {
			panic(err)
		}
		fmt.Println(due.Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// counted from the first renewal:
	// Sat 2026-02-28 10:00 CET
	// Tue 2026-03-31 10:00 CEST
	// Thu 2026-04-30 10:00 CEST
	// chained, each from the one before (drifts):
	// Sat 2026-02-28 10:00 CET
	// Sat 2026-03-28 10:00 CET
	// Tue 2026-04-28 10:00 CEST
}

// A rule is stored as JSON beside the identity of its calendar.
func ExampleRule_json() {
	r := calendar.BusinessDays(3).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	b, _ := json.Marshal(struct {
		Rule     calendar.Rule `json:"rule"`
		Calendar calendar.Ref  `json:"calendar"`
	}{r, calendar.RefOf(mustCalendar())})
	fmt.Println(string(b))
	// Output:
	// {"rule":{"kind":"business_days","n":3,"time":"09:00","zone":"Europe/Warsaw"},"calendar":{"name":"pl","version":"2026.1"}}
}

// A Registry finds the calendar a stored timeout names.
func ExampleRegistry() {
	var reg calendar.Registry
	if err := reg.Add(mustCalendar()); err != nil {
		panic(err)
	}
	cal, err := reg.Lookup(calendar.Ref{Name: "pl", Version: "2026.1"})
	fmt.Println(cal.Name(), cal.Version(), err)
	_, err = reg.Lookup(calendar.Ref{Name: "pl", Version: "2027.1"})
	fmt.Println(err)
	// Output:
	// pl 2026.1 <nil>
	// calendar: unknown calendar: pl@2027.1
}

func ExampleLoad_error() {
	_, err := calendar.Load(strings.NewReader("*-12-25 Christmas\n\n2027-02-29 Leap day\n"))
	fmt.Println(err)
	// Output:
	// calendar: invalid calendar: line 3: date "2027-02-29" does not exist
}

// Holidays of the United States: the Nth weekday of a month, and holidays observed on the
// Friday before or the Monday after when they fall on a weekend.
func ExampleNthWeekday() {
	days, err := calendar.Load(strings.NewReader(`weekend Sat Sun
*-01-Mon#3 Martin Luther King Jr. Day
*-05-Mon#last Memorial Day
observed *-07-04 Independence Day
*-11-Thu#4 Thanksgiving Day
`))
	if err != nil {
		panic(err)
	}
	us, err := calendar.New("us", "2026.1", days,
		calendar.YearlyObserved(time.December, 25, "Christmas Day")) // or in the file: observed *-12-25 Christmas Day
	if err != nil {
		panic(err)
	}
	for _, d := range []calendar.Date{
		{Year: 2026, Month: time.January, Day: 19},
		{Year: 2026, Month: time.May, Day: 25},
		{Year: 2026, Month: time.July, Day: 3}, // July 4 is a Saturday
		{Year: 2027, Month: time.July, Day: 5}, // July 4 is a Sunday
		{Year: 2026, Month: time.November, Day: 26},
		{Year: 2022, Month: time.December, Day: 26},
	} {
		name, _ := us.Holiday(d)
		fmt.Println(d, d.Weekday(), name)
	}
	// Output:
	// 2026-01-19 Monday Martin Luther King Jr. Day
	// 2026-05-25 Monday Memorial Day
	// 2026-07-03 Friday Independence Day (observed)
	// 2027-07-05 Monday Independence Day (observed)
	// 2026-11-26 Thursday Thanksgiving Day
	// 2022-12-26 Monday Christmas Day (observed)
}

// A holiday on a weekend is observed on the Friday before a Saturday, the Monday after a
// Sunday; a rule counts over the observed day.
func ExampleYearlyObserved() {
	us, err := calendar.New("us", "2026.1", calendar.YearlyObserved(time.July, 4, "Independence Day"))
	if err != nil {
		panic(err)
	}
	// Thursday 2026-07-02: Friday 07-03 is the observed holiday, so the next business day is
	// Monday.
	ny, _ := time.LoadLocation("America/New_York")
	from := time.Date(2026, time.July, 2, 15, 0, 0, 0, ny)
	show(calendar.NextBusinessDay(calendar.ClockOf(9, 0)).In("America/New_York"), from, us)
	// Output:
	// next business day, at 09:00 America/New_York: Mon 2026-07-06 09:00 EDT
}

// Answer within four business hours: from Friday 15:00, two hours on Friday and two on
// Monday.
func ExampleBusinessHours() {
	sla := calendar.BusinessHours(4, calendar.ClockOf(9, 0), calendar.ClockOf(17, 0)).In("Europe/Warsaw")
	show(sla, warsaw(2026, time.November, 27, 15, 0), mustCalendar())
	// Output:
	// 4 business hours after, on a business day within 09:00-17:00 Europe/Warsaw: Mon 2026-11-30 11:00 CET
}

// A calendar built in code, written as a calendar file for the jetsaga command
// (jetsaga timeouts replan reads calendars from files).
func ExampleStandard_WriteTo() {
	us, err := calendar.New("us", "2026.1",
		calendar.YearlyObserved(time.July, 4, "Independence Day"),
		calendar.NthWeekday(time.November, 4, time.Thursday, "Thanksgiving Day"),
		calendar.Easter(-2, "Good Friday"))
	if err != nil {
		panic(err)
	}
	if _, err := us.WriteTo(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// # us@2026.1
	// weekend Sun Sat
	// observed *-07-04 Independence Day
	// *-11-Thu#4 Thanksgiving Day
	// easter-2 Good Friday
}
