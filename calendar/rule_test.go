package calendar

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// at returns the instant of a wall-clock time in zone, for the starts of the rule tests
// (never in a gap or an overlap).
func at(t testing.TB, zone string, y int, m time.Month, d, h, min int) time.Time {
	t.Helper()
	return time.Date(y, m, d, h, min, 0, 0, mustLoad(t, zone))
}

// closed is a calendar without a single business day.
type closed struct{}

func (closed) Name() string            { return "closed" }
func (closed) Version() string         { return "1" }
func (closed) IsBusinessDay(Date) bool { return false }

func TestRuleDue(t *testing.T) {
	pl := testCalendar(t)
	nine := ClockOf(9, 0)
	const (
		waw = "Europe/Warsaw"
		nyc = "America/New_York"
		lhi = "Australia/Lord_Howe"
	)
	tests := []struct {
		name    string
		rule    Rule
		from    time.Time
		cal     Calendar
		want    time.Time // hand-computed, in UTC
		wantErr error
	}{
		// Business days.
		{"3 business days, ordinary week", BusinessDays(3).At(nine).In(waw), at(t, waw, 2026, time.November, 23, 14, 0), pl, utc(2026, time.November, 26, 8, 0), nil},
		{"business days keep the wall clock", BusinessDays(2).In(waw), at(t, waw, 2026, time.November, 26, 14, 30), pl, utc(2026, time.November, 30, 13, 30), nil},
		{"from a Saturday, 1 business day is Monday", BusinessDays(1).At(nine).In(waw), at(t, waw, 2026, time.November, 28, 10, 0), pl, utc(2026, time.November, 30, 8, 0), nil},
		// Christmas Eve (Thu) and Christmas (Fri) before a weekend with the Second Day of
		// Christmas on its Saturday.
		{"holidays Thu-Fri before a weekend", NextBusinessDay(nine).In(waw), at(t, waw, 2026, time.December, 23, 16, 0), pl, utc(2026, time.December, 28, 8, 0), nil},
		// 2026-12-31 Thu (1), 2027-01-01 Fri New Year, weekend, 01-04 Mon (2), 01-05 Tue (3).
		{"across the year", BusinessDays(3).At(nine).In(waw), at(t, waw, 2026, time.December, 30, 12, 0), pl, utc(2027, time.January, 5, 8, 0), nil},
		{"back across the year", BusinessDays(-3).At(nine).In(waw), at(t, waw, 2027, time.January, 5, 12, 0), pl, utc(2026, time.December, 30, 8, 0), nil},
		// Renewal Mon 2026-06-15; back: 12, 11, 10, 9, 8, 5, (4 is Corpus Christi), 3.
		{"7 business days before renewal", BusinessDays(-7).At(nine).In(waw), at(t, waw, 2026, time.June, 15, 12, 0), pl, utc(2026, time.June, 3, 7, 0), nil},
		{"leap day is a business day", BusinessDays(1).In("UTC"), utc(2028, time.February, 28, 10, 0), pl, utc(2028, time.February, 29, 10, 0), nil},
		// The start's date is its date in the rule's zone: 23:30 UTC Friday is Saturday in
		// Warsaw, so one business day after is Monday (and Tuesday in UTC: Monday's after).
		{"start read in the rule's zone", BusinessDays(1).At(nine).In(waw), utc(2026, time.November, 27, 23, 30), pl, utc(2026, time.November, 30, 8, 0), nil},
		{"start read in UTC", BusinessDays(1).At(nine).In("UTC"), utc(2026, time.November, 27, 23, 30), pl, utc(2026, time.November, 30, 9, 0), nil},
		// Business days onto DST days: the wall clock is kept, so the UTC hour moves.
		{"onto the Warsaw gap day at 02:30", BusinessDays(1).At(ClockOf(2, 30)).In(waw), at(t, waw, 2026, time.March, 28, 12, 0), closedWeekendless(t), utc(2026, time.March, 29, 1, 30), nil},
		{"kept wall clock in the Warsaw overlap", BusinessDays(1).In(waw), at(t, waw, 2026, time.October, 24, 2, 30), closedWeekendless(t), utc(2026, time.October, 25, 0, 30), nil},

		// Calendar days, DST.
		{"1 calendar day over spring forward keeps 09:00", CalendarDays(1).In(waw), at(t, waw, 2026, time.March, 28, 9, 0), nil, utc(2026, time.March, 29, 7, 0), nil},
		{"1 calendar day into the Warsaw gap", CalendarDays(1).In(waw), at(t, waw, 2026, time.March, 28, 2, 30), nil, utc(2026, time.March, 29, 1, 30), nil},
		{"1 calendar day into the New York gap", CalendarDays(1).At(ClockOf(2, 30)).In(nyc), at(t, nyc, 2026, time.March, 7, 12, 0), nil, utc(2026, time.March, 8, 7, 30), nil},
		{"1 calendar day into the New York overlap", CalendarDays(1).In(nyc), at(t, nyc, 2026, time.October, 31, 1, 30), nil, utc(2026, time.November, 1, 5, 30), nil},
		{"1 calendar day into the Lord Howe gap", CalendarDays(1).At(ClockOf(2, 15)).In(lhi), at(t, lhi, 2026, time.October, 3, 12, 0), nil, utc(2026, time.October, 3, 15, 45), nil},
		{"1 calendar day into the Lord Howe overlap", CalendarDays(1).At(ClockOf(1, 45)).In(lhi), at(t, lhi, 2026, time.April, 4, 12, 0), nil, utc(2026, time.April, 4, 14, 45), nil},
		{"7 calendar days before", CalendarDays(-7).In(nyc), at(t, nyc, 2026, time.March, 14, 8, 0), nil, utc(2026, time.March, 7, 13, 0), nil},
		{"calendar days keep the nanoseconds", CalendarDays(2).In("UTC"), time.Date(2026, 1, 1, 10, 11, 12, 13, time.UTC), nil, time.Date(2026, 1, 3, 10, 11, 12, 13, time.UTC), nil},

		// Months and month ends.
		{"Jan 31 + 1 month", Months(1).In(waw), at(t, waw, 2026, time.January, 31, 10, 0), nil, utc(2026, time.February, 28, 9, 0), nil},
		{"Jan 31 + 1 month, leap year", Months(1).In(waw), at(t, waw, 2028, time.January, 31, 10, 0), nil, utc(2028, time.February, 29, 9, 0), nil},
		{"Mar 31 - 1 month", Months(-1).At(nine).In("UTC"), utc(2027, time.March, 31, 10, 0), nil, utc(2027, time.February, 28, 9, 0), nil},
		{"end of the month", EndOfMonth(0).At(ClockOf(17, 0)).In(waw), at(t, waw, 2026, time.November, 3, 10, 0), nil, utc(2026, time.November, 30, 16, 0), nil},
		{"end of next month, leap February", EndOfMonth(1).At(ClockOf(17, 0)).In("UTC"), utc(2028, time.January, 31, 10, 0), nil, utc(2028, time.February, 29, 17, 0), nil},
		{"end of next month, February", EndOfMonth(1).At(ClockOf(17, 0)).In("UTC"), utc(2027, time.January, 31, 10, 0), nil, utc(2027, time.February, 28, 17, 0), nil},
		{"end of month across the year", EndOfMonth(2).In("UTC"), utc(2026, time.November, 30, 18, 0), nil, utc(2027, time.January, 31, 18, 0), nil},
		// 2026-01-31 is a Saturday; 2027-02-28 a Sunday; 2026-12-31 a Thursday.
		{"last business day, month ends on a Saturday", LastBusinessDayOfMonth(0).At(ClockOf(17, 0)).In(waw), at(t, waw, 2026, time.January, 5, 10, 0), pl, utc(2026, time.January, 30, 16, 0), nil},
		{"last business day of next February", LastBusinessDayOfMonth(1).At(ClockOf(17, 0)).In("UTC"), utc(2027, time.January, 20, 10, 0), pl, utc(2027, time.February, 26, 17, 0), nil},
		{"last business day, December", LastBusinessDayOfMonth(0).At(ClockOf(17, 0)).In("UTC"), utc(2026, time.December, 1, 10, 0), pl, utc(2026, time.December, 31, 17, 0), nil},

		// Next wall-clock time.
		{"next 09:00 later today", Next(nine).In(nyc), at(t, nyc, 2026, time.March, 6, 8, 0), nil, utc(2026, time.March, 6, 14, 0), nil},
		{"next 09:00 tomorrow, over spring forward", Next(nine).In(nyc), at(t, nyc, 2026, time.March, 7, 10, 0), nil, utc(2026, time.March, 8, 13, 0), nil},
		{"next 09:00 at 09:00 is tomorrow", Next(nine).In(nyc), at(t, nyc, 2026, time.March, 6, 9, 0), nil, utc(2026, time.March, 7, 14, 0), nil},
		{"next 02:30 in the Warsaw gap", Next(ClockOf(2, 30)).In(waw), at(t, waw, 2026, time.March, 28, 12, 0), nil, utc(2026, time.March, 29, 1, 30), nil},
		{"next 02:30 in the Warsaw overlap is the first", Next(ClockOf(2, 30)).In(waw), at(t, waw, 2026, time.October, 25, 1, 0), nil, utc(2026, time.October, 25, 0, 30), nil},
		// New York falls back on 2026-11-01, 02:00 EDT (06:00 UTC) to 01:00 EST: 01:30 is
		// 05:30 UTC, then 06:30 UTC. The next 01:30 is the next instant whose wall clock reads it.
		{"next 01:30 in the New York overlap, before both", Next(ClockOf(1, 30)).In(nyc), utc(2026, time.November, 1, 4, 0), nil, utc(2026, time.November, 1, 5, 30), nil},
		// A time that happens twice counts once, at its first instant.
		{"next 01:30 at 01:45 EDT is tomorrow's, not 01:30 EST", Next(ClockOf(1, 30)).In(nyc), utc(2026, time.November, 1, 5, 45), nil, utc(2026, time.November, 2, 6, 30), nil},
		{"next 01:30 at the first 01:30 is tomorrow's", Next(ClockOf(1, 30)).In(nyc), utc(2026, time.November, 1, 5, 30), nil, utc(2026, time.November, 2, 6, 30), nil},
		{"next 01:30 at 01:15 EST is tomorrow's", Next(ClockOf(1, 30)).In(nyc), utc(2026, time.November, 1, 6, 15), nil, utc(2026, time.November, 2, 6, 30), nil},
		{"next 01:45 at 01:50 +11 on Lord Howe is tomorrow's", Next(ClockOf(1, 45)).In(lhi), utc(2026, time.April, 4, 14, 50), nil, utc(2026, time.April, 5, 15, 15), nil},
		{"next 01:30 at 01:45 EST is tomorrow", Next(ClockOf(1, 30)).In(nyc), utc(2026, time.November, 1, 6, 45), nil, utc(2026, time.November, 2, 6, 30), nil},
		{"next 02:30 after the Warsaw gap is tomorrow", Next(ClockOf(2, 30)).In(waw), at(t, waw, 2026, time.March, 29, 3, 45), nil, utc(2026, time.March, 30, 0, 30), nil},
		{"next 02:30 in the Warsaw gap, asked after the jump", Next(ClockOf(2, 30)).In(waw), at(t, waw, 2026, time.March, 29, 3, 10), nil, utc(2026, time.March, 29, 1, 30), nil},
		{"next 09:00 on a business day", Next(nine).NotBefore(nine).In(waw), at(t, waw, 2026, time.December, 23, 16, 0), pl, utc(2026, time.December, 28, 8, 0), nil},

		// Rolling into business hours.
		{"not before 09:00: Saturday to Monday", NotBefore(nine).In(waw), at(t, waw, 2026, time.November, 28, 11, 0), pl, utc(2026, time.November, 30, 8, 0), nil},
		{"not before 09:00: early to 09:00", NotBefore(nine).In(waw), at(t, waw, 2026, time.November, 30, 7, 0), pl, utc(2026, time.November, 30, 8, 0), nil},
		{"not before 09:00: in hours stays", NotBefore(nine).In(waw), at(t, waw, 2026, time.November, 30, 22, 15), pl, utc(2026, time.November, 30, 21, 15), nil},
		{"not before 09:00: holiday Friday to Monday", NotBefore(nine).In(waw), at(t, waw, 2026, time.December, 25, 10, 0), pl, utc(2026, time.December, 28, 8, 0), nil},
		{"within 09:00-17:00: at close to next opening", NotBefore(nine).Within(nine, ClockOf(17, 0)).In(waw), at(t, waw, 2026, time.December, 29, 17, 0), pl, utc(2026, time.December, 30, 8, 0), nil},
		{"within 09:00-17:00: before close stays", NotBefore(nine).Within(nine, ClockOf(17, 0)).In(waw), at(t, waw, 2026, time.December, 29, 16, 59), pl, utc(2026, time.December, 29, 15, 59), nil},
		// Renewal on Sunday 2026-06-14 14:00: 7 days before is Sunday 06-07, so Monday 09:00.
		{"7 days before, never on a weekend", CalendarDays(-7).NotBefore(nine).In(waw), at(t, waw, 2026, time.June, 14, 14, 0), pl, utc(2026, time.June, 8, 7, 0), nil},
		{"7 days before, on a weekday, stays", CalendarDays(-7).NotBefore(nine).In(waw), at(t, waw, 2026, time.June, 17, 14, 0), pl, utc(2026, time.June, 10, 12, 0), nil},

		// Errors.
		{"no business day: business days", BusinessDays(1).In("UTC"), utc(2026, 1, 1, 0, 0), closed{}, time.Time{}, ErrNoBusinessDay},
		{"no business day: back", BusinessDays(-1).In("UTC"), utc(2026, 1, 1, 0, 0), closed{}, time.Time{}, ErrNoBusinessDay},
		{"no business day: roll", NotBefore(nine).In("UTC"), utc(2026, 1, 1, 0, 0), closed{}, time.Time{}, ErrNoBusinessDay},
		{"no business day: month end", LastBusinessDayOfMonth(0).In("UTC"), utc(2026, 1, 1, 0, 0), closed{}, time.Time{}, ErrNoBusinessDay},
		{"nil calendar", BusinessDays(1).In("UTC"), utc(2026, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidCalendar},
		{"unknown zone", CalendarDays(1).In("Europe/Atlantis"), utc(2026, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidRule},
		{"zero business days", BusinessDays(0).In("UTC"), utc(2026, 1, 1, 0, 0), pl, time.Time{}, ErrInvalidRule},
		{"too many business days", BusinessDays(MaxBusinessDays + 1).In("UTC"), utc(2026, 1, 1, 0, 0), pl, time.Time{}, ErrInvalidRule},
		{"next without a time", Rule{Kind: KindNext}, utc(2026, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidRule},
		{"close before open", NotBefore(nine).Within(nine, ClockOf(8, 0)).In("UTC"), utc(2026, 1, 1, 0, 0), pl, time.Time{}, ErrInvalidRule},
		{"bad time", CalendarDays(1).At(ClockOf(24, 0)).In("UTC"), utc(2026, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidRule},
		{"unknown kind", Rule{Kind: "fortnights", N: 1}, utc(2026, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidRule},
		{"out of years", CalendarDays(-MaxCalendarDays).In("UTC"), utc(100, 1, 1, 0, 0), nil, time.Time{}, ErrInvalidRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rule.Due(tt.from, tt.cal)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("%s from %s: got %s, %v, want error %v", tt.rule, tt.from, got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s from %s: got error %v, want %s", tt.rule, tt.from, err, tt.want)
			}
			if !got.Equal(tt.want) {
				t.Errorf("%s from %s: got %s (%s), want %s", tt.rule, tt.from, got.UTC(), got, tt.want)
			}
			if want := zoneOrUTC(tt.rule.Zone); got.Location().String() != want {
				t.Errorf("got location %s, want %s", got.Location(), want)
			}
			// DueIn with the zone loaded agrees.
			got2, err := tt.rule.DueIn(tt.from, tt.cal, mustLoad(t, zoneOrUTC(tt.rule.Zone)))
			if err != nil || !got2.Equal(got) {
				t.Errorf("DueIn: got %s, %v, want %s", got2, err, got)
			}
		})
	}
}

func zoneOrUTC(z string) string {
	if z == "" {
		return "UTC"
	}
	return z
}

// closedWeekendless is a calendar where every day is a business day, so that rules can land
// on the Sunday clock changes.
func closedWeekendless(t testing.TB) Calendar {
	c, err := New("all", "1", Weekend())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestDueInWrongZone(t *testing.T) {
	r := CalendarDays(1).In("Europe/Warsaw")
	if _, err := r.DueIn(time.Now(), nil, time.UTC); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("got %v, want ErrInvalidRule", err)
	}
	if _, err := r.DueIn(time.Now(), nil, nil); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("nil location: got %v, want ErrInvalidRule", err)
	}
}

func TestRuleString(t *testing.T) {
	nine, five := ClockOf(9, 0), ClockOf(17, 0)
	tests := []struct {
		rule Rule
		want string
	}{
		{BusinessDays(3).At(nine).In("Europe/Warsaw"), "3 business days after, at 09:00 Europe/Warsaw"},
		{BusinessDays(-7).At(nine).In("UTC"), "7 business days before, at 09:00 UTC"},
		{BusinessDays(1).In("UTC"), "next business day in UTC"},
		{BusinessDays(-1).In("Asia/Tokyo"), "previous business day in Asia/Tokyo"},
		{NextBusinessDay(nine).In("America/New_York"), "next business day, at 09:00 America/New_York"},
		{CalendarDays(1).In("UTC"), "1 calendar day after in UTC"},
		{CalendarDays(-7).NotBefore(nine).In("Europe/Warsaw"), "7 calendar days before, on a business day not before 09:00 Europe/Warsaw"},
		{CalendarDays(0).At(nine).In("UTC"), "the same day, at 09:00 UTC"},
		{Months(1).In("UTC"), "1 month after in UTC"},
		{Months(-2).In("UTC"), "2 months before in UTC"},
		{Months(0).In("UTC"), "0 months after in UTC"},
		{CalendarDays(0).In("UTC"), "the same day in UTC"},
		{Next(nine).In("Australia/Lord_Howe"), "next 09:00 Australia/Lord_Howe"},
		{EndOfMonth(0).At(five).In("UTC"), "last day of the month, at 17:00 UTC"},
		{EndOfMonth(1).In("UTC"), "last day of next month in UTC"},
		{EndOfMonth(-1).In("UTC"), "last day of previous month in UTC"},
		{EndOfMonth(3).In("UTC"), "last day of the month 3 months after in UTC"},
		{LastBusinessDayOfMonth(0).At(five).In("Europe/Warsaw"), "last business day of the month, at 17:00 Europe/Warsaw"},
		{NotBefore(nine).In("Europe/Warsaw"), "on a business day not before 09:00 Europe/Warsaw"},
		{NotBefore(nine).Within(nine, five).In("UTC"), "on a business day within 09:00-17:00 UTC"},
	}
	for _, tt := range tests {
		if got := tt.rule.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		// And back.
		if got, err := ParseRule(tt.want); err != nil || got != tt.rule {
			t.Errorf("ParseRule(%q): got %#v, %v, want %#v", tt.want, got, err, tt.rule)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, in := range []string{
		"",
		"UTC",
		"3 business days after",                      // no zone
		"3 business days after UTC",                  // "in" missing
		"3 business days after, at 09:00 in UTC",     // "in" with a time
		"0 business days after in UTC",               // invalid rule
		"-3 business days after in UTC",              // sign
		"+3 business days after in UTC",              // sign
		"3 business dais after in UTC",               // unit
		"3 business days later in UTC",               // direction
		"3 fortnights after in UTC",                  // unit
		"next 9:00 UTC",                              // clock
		"next 09:00, at 10:00 UTC",                   // two times
		"last day of the year UTC",                   // period
		"last day of the month 2 weeks after in UTC", // unit
		"next business day, at 09:00, at 10:00 UTC",  // repeated
		"on a business day within 17:00-09:00 UTC",   // close before open
		"on a business day within 09:00 UTC",         // no close
		"on a business day sometimes UTC",            // phrase
		"7 calendar days before, on a business day not before 25:00 UTC",
		"1 calendar days after in UTC", // not the form String writes
	} {
		if r, err := ParseRule(in); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("ParseRule(%q): got %#v, %v, want ErrInvalidRule", in, r, err)
		}
	}
}

func TestRuleJSON(t *testing.T) {
	rules := []Rule{
		BusinessDays(3).At(ClockOf(9, 0)).In("Europe/Warsaw"),
		BusinessDays(-7),
		CalendarDays(-7).NotBefore(ClockOf(0, 0)).In("America/New_York"),
		Months(1),
		Next(ClockOf(23, 59)),
		EndOfMonth(0).At(ClockOf(17, 0)),
		LastBusinessDayOfMonth(1),
		NotBefore(ClockOf(9, 0)).Within(ClockOf(9, 0), ClockOf(17, 30)),
	}
	for _, r := range rules {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		var got Rule
		if err := json.Unmarshal(b, &got); err != nil || got != r {
			t.Errorf("%s: round trip through %s: got %#v, %v, want %#v", r, b, got, err, r)
		}
	}
	b, _ := json.Marshal(BusinessDays(3).At(ClockOf(9, 0)).In("Europe/Warsaw"))
	if got, want := string(b), `{"kind":"business_days","n":3,"time":"09:00","zone":"Europe/Warsaw"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	// Together with the calendar's identity, as a stored timeout would keep them.
	type stored struct {
		Rule     Rule `json:"rule"`
		Calendar Ref  `json:"calendar"`
	}
	b, err := json.Marshal(stored{BusinessDays(1), Ref{"pl", "2026.1"}})
	if err != nil {
		t.Fatal(err)
	}
	var s stored
	if err := json.Unmarshal(b, &s); err != nil || s.Rule != BusinessDays(1) || s.Calendar != (Ref{"pl", "2026.1"}) {
		t.Errorf("got %+v, %v from %s", s, err, b)
	}

	for _, in := range []string{
		`{"kind":"business_days"}`,
		`{"kind":"business_days","n":1,"observed":true}`,
		`{"kind":"next","n":0}`,
		`{"kind":"calendar_days","n":1,"time":"9:00"}`,
		`{"kind":"calendar_days","n":1,"time":"24:00"}`,
		`{"kind":"instant"}`,
		`{"kind":"instant","open":"09:00","time":"10:00"}`,
		`{"kind":"instant","open":"09:00","close":"09:00"}`,
		`{"kind":"instant","close":"09:00"}`,
		`{"n":1}`,
		`{"kind":"weeks","n":1}`,
		`[]`,
	} {
		var r Rule
		if err := json.Unmarshal([]byte(in), &r); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%s: got %v, want ErrInvalidRule", in, err)
		}
	}
}

func TestValidate(t *testing.T) {
	if err := BusinessDays(1).In("Europe/Warsaw").Validate(); err != nil {
		t.Errorf("got %v, want nil", err)
	}
	if err := BusinessDays(1).In("Mars/Olympus").Validate(); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("got %v, want ErrInvalidRule", err)
	}
	if err := BusinessDays(0).Validate(); !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), "business days") {
		t.Errorf("got %v, want ErrInvalidRule about business days", err)
	}
}

func TestZones(t *testing.T) {
	var z Zones
	a, err := z.Load("Europe/Warsaw")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := z.Load("Europe/Warsaw")
	if a != b || a.String() != "Europe/Warsaw" {
		t.Errorf("got %p %s and %p, want the same Europe/Warsaw twice", a, a, b)
	}
	if loc, err := z.Load("UTC"); err != nil || loc != time.UTC {
		t.Errorf("UTC: got %v, %v, want UTC", loc, err)
	}
	if _, err := z.Load("Europe/Atlantis"); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("unknown zone: got %v, want ErrInvalidRule", err)
	}
}

func TestNeedsCalendar(t *testing.T) {
	for r, want := range map[Rule]bool{
		BusinessDays(1):                          true,
		LastBusinessDayOfMonth(0):                true,
		NotBefore(ClockOf(9, 0)):                 true,
		CalendarDays(1).NotBefore(ClockOf(9, 0)): true,
		CalendarDays(1):                          false,
		Months(1):                                false,
		EndOfMonth(0):                            false,
		Next(ClockOf(9, 0)):                      false,
	} {
		if got := r.NeedsCalendar(); got != want {
			t.Errorf("%s: got %t, want %t", r, got, want)
		}
	}
}

func BenchmarkDue(b *testing.B) {
	cal := testCalendar(b)
	from := at(b, "Europe/Warsaw", 2026, time.December, 23, 16, 0)
	loc := mustLoad(b, "Europe/Warsaw")
	for _, bc := range []struct {
		name string
		rule Rule
	}{
		{"BusinessDays3At", BusinessDays(3).At(ClockOf(9, 0)).In("Europe/Warsaw")},
		{"BusinessDaysMinus7", BusinessDays(-7).In("Europe/Warsaw")},
		{"LastBusinessDayOfMonth", LastBusinessDayOfMonth(0).At(ClockOf(17, 0)).In("Europe/Warsaw")},
		{"CalendarDaysNotBefore", CalendarDays(-7).NotBefore(ClockOf(9, 0)).In("Europe/Warsaw")},
	} {
		b.Run(bc.name+"/Due", func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.rule.Due(from, cal); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bc.name+"/DueIn", func(b *testing.B) {
			for b.Loop() {
				if _, err := bc.rule.DueIn(from, cal, loc); err != nil {
					b.Fatal(err)
				}
			}
		})
		var zones Zones
		b.Run(bc.name+"/Zones+DueIn", func(b *testing.B) {
			for b.Loop() {
				loc, err := zones.Load(bc.rule.Zone)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bc.rule.DueIn(from, cal, loc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// only is a calendar whose single business day is day.
type only struct{ day Date }

func (only) Name() string                { return "only" }
func (only) Version() string             { return "1" }
func (o only) IsBusinessDay(d Date) bool { return d == o.day }

// TestSearchBound checks how far a rule looks for a business day: 366 days, then it gives up.
func TestSearchBound(t *testing.T) {
	from := utc(2026, time.January, 1, 12, 0)
	tests := []struct {
		name    string
		rule    Rule
		day     Date
		wantErr error
	}{
		{"forward 366 days", BusinessDays(1), Date{2027, time.January, 2}, nil},
		{"forward 367 days", BusinessDays(1), Date{2027, time.January, 3}, ErrNoBusinessDay},
		{"back 365 days", BusinessDays(-1), Date{2025, time.January, 1}, nil},
		{"back 367 days", BusinessDays(-1), Date{2024, time.December, 30}, ErrNoBusinessDay},
		{"roll 366 days", NotBefore(ClockOf(9, 0)), Date{2027, time.January, 2}, nil},
		{"roll 367 days", NotBefore(ClockOf(9, 0)), Date{2027, time.January, 3}, ErrNoBusinessDay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rule.In("UTC").Due(from, only{tt.day})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %s, %v, want error %v", got, err, tt.wantErr)
			}
			if err == nil && DateOf(got) != tt.day {
				t.Errorf("got %s, want %s", DateOf(got), tt.day)
			}
		})
	}
}

// TestInSynctestBubble computes rules inside a testing/synctest bubble, where the package
// must work (no goroutines, no package state), from the bubble's fake clock.
func TestInSynctestBubble(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var zones Zones
		var reg Registry
		if err := reg.Add(testCalendar(t)); err != nil {
			t.Fatal(err)
		}
		cal, err := reg.Lookup(Ref{"pl", "2026.1"})
		if err != nil {
			t.Fatal(err)
		}
		loc, err := zones.Load("Europe/Warsaw")
		if err != nil {
			t.Fatal(err)
		}
		// The bubble starts at 2000-01-01 00:00 UTC, a Saturday (01:00 in Warsaw), a holiday.
		got, err := BusinessDays(1).At(ClockOf(9, 0)).In("Europe/Warsaw").DueIn(time.Now(), cal, loc)
		if err != nil {
			t.Fatal(err)
		}
		if want := utc(2000, time.January, 3, 8, 0); !got.Equal(want) {
			t.Errorf("got %s, want %s", got, want)
		}
	})
}

// TestNextAroundEveryTransition checks Next against a minute-by-minute search, from starts
// on each side of the clock changes of 2026 in zones with hour and half-hour changes, some
// of them at midnight: the result is after the start, no instant between reads the time
// for the first time on its day, and the result is the first to read it on its day (or,
// for a time in a gap, lies where Date.In moves it).
func TestNextAroundEveryTransition(t *testing.T) {
	for _, zone := range []string{"Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "America/Havana"} {
		loc := mustLoad(t, zone)
		for u := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); u.Year() < 2027; {
			_, end := u.ZoneBounds()
			if end.IsZero() {
				break
			}
			u = end
			wall := end.Add(-time.Second).In(loc) // the clock just before the change
			clocks := []Clock{ClockOf(wall.Hour(), 0), ClockOf(wall.Hour(), 30), ClockOf(0, 0), ClockOf(23, 30), ClockOf(12, 0)}
			for from := end.Add(-6 * time.Hour); from.Before(end.Add(6 * time.Hour)); from = from.Add(15 * time.Minute) {
				for _, c := range clocks {
					r := Next(c).In(zone)
					got, err := r.Due(from, nil)
					if err != nil {
						t.Fatal(err)
					}
					if !got.After(from) {
						t.Fatalf("%s from %s: %s, not after the start", r, from.In(loc), got)
					}
					reads := func(x time.Time) bool {
						x = x.In(loc)
						return x.Hour() == c.Hour() && x.Minute() == c.Minute() && x.Second() == 0
					}
					// first: x reads c, and no instant of its day before it does (a repeat
					// lies at most three hours after the first reading).
					first := func(x time.Time) bool {
						if !reads(x) {
							return false
						}
						for y := x.Add(-3 * time.Hour); y.Before(x); y = y.Add(time.Minute) {
							if reads(y) && DateOf(y.In(loc)) == DateOf(x.In(loc)) {
								return false
							}
						}
						return true
					}
					for x := from.Truncate(time.Minute).Add(time.Minute); x.Before(got); x = x.Add(time.Minute) {
						if first(x) {
							t.Fatalf("%s from %s: got %s, but %s reads %s before it", r, from.In(loc), got.In(loc), x.In(loc), c)
						}
					}
					if reads(got) && !first(got) {
						t.Fatalf("%s from %s: got %s, the second reading of %s on its day", r, from.In(loc), got.In(loc), c)
					}
					if !reads(got) {
						// A time in a gap: nothing on its day reads it, and Date.In put it there.
						d := DateOf(got.In(loc))
						if want := d.In(c, loc); !got.Equal(want) {
							t.Fatalf("%s from %s: got %s, which does not read %s, want %s", r, from.In(loc), got.In(loc), c, want)
						}
					}
				}
			}
		}
	}
}
