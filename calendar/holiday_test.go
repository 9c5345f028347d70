package calendar

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// usFile is the United States' federal holidays as a calendar file.
const usFile = `# United States, federal
weekend Sat Sun
observed *-01-01 New Year's Day
*-01-Mon#3 Martin Luther King Jr. Day
*-02-Mon#3 Washington's Birthday
*-05-Mon#last Memorial Day
observed *-06-19 Juneteenth
observed *-07-04 Independence Day
*-09-Mon#1 Labor Day
*-10-Mon#2 Columbus Day
observed *-11-11 Veterans Day
*-11-Thu#4 Thanksgiving Day
observed *-12-25 Christmas Day
`

func usCalendar(t testing.TB) *Standard {
	t.Helper()
	days, err := Load(strings.NewReader(usFile))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New("us", "1", days)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNthWeekdayAndObserved(t *testing.T) {
	fromFile := usCalendar(t)
	fromOptions, err := New("us", "1",
		YearlyObserved(time.January, 1, "New Year's Day"),
		NthWeekday(time.January, 3, time.Monday, "Martin Luther King Jr. Day"),
		NthWeekday(time.May, -1, time.Monday, "Memorial Day"),
		YearlyObserved(time.July, 4, "Independence Day"),
		NthWeekday(time.November, 4, time.Thursday, "Thanksgiving Day"),
		YearlyObserved(time.December, 25, "Christmas Day"),
	)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		d    Date
		want string // "" for no holiday
	}{
		{Date{2026, time.January, 19}, "Martin Luther King Jr. Day"}, // third Monday
		{Date{2026, time.January, 12}, ""},
		{Date{2027, time.January, 18}, "Martin Luther King Jr. Day"},
		{Date{2026, time.November, 26}, "Thanksgiving Day"}, // fourth Thursday
		{Date{2027, time.November, 25}, "Thanksgiving Day"},
		{Date{2027, time.November, 18}, ""},
		{Date{2026, time.May, 25}, "Memorial Day"}, // last Monday
		{Date{2027, time.May, 31}, "Memorial Day"},
		{Date{2027, time.May, 24}, ""},
		// 2026-07-04 is a Saturday: observed on Friday 07-03.
		{Date{2026, time.July, 4}, "Independence Day"},
		{Date{2026, time.July, 3}, "Independence Day (observed)"},
		{Date{2026, time.July, 6}, ""},
		// 2027-07-04 is a Sunday: observed on Monday 07-05.
		{Date{2027, time.July, 5}, "Independence Day (observed)"},
		{Date{2027, time.July, 2}, ""},
		// 2028-07-04 is a Tuesday: no other day.
		{Date{2028, time.July, 3}, ""},
		// 2022-01-01 is a Saturday: observed on Friday 2021-12-31, in the year before.
		{Date{2021, time.December, 31}, "New Year's Day (observed)"},
		// 2022-12-25 is a Sunday: observed on Monday 12-26.
		{Date{2022, time.December, 26}, "Christmas Day (observed)"},
	}
	for _, cal := range []*Standard{fromFile, fromOptions} {
		for _, tt := range tests {
			got, ok := cal.Holiday(tt.d)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Holiday(%s %s): got %q, %t, want %q", tt.d, tt.d.Weekday(), got, ok, tt.want)
			}
			if weekday := tt.d.Weekday() != time.Saturday && tt.d.Weekday() != time.Sunday; cal.IsBusinessDay(tt.d) != (weekday && tt.want == "") {
				t.Errorf("IsBusinessDay(%s): got %t", tt.d, cal.IsBusinessDay(tt.d))
			}
		}
	}
	// A rule counts over them: 3 business days after Wednesday 2026-11-25 skip Thanksgiving
	// and the weekend: Friday 27, Monday 30, Tuesday December 1.
	got, err := BusinessDays(3).At(ClockOf(9, 0)).In("America/New_York").Due(time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC), fromFile)
	if want := time.Date(2026, 12, 1, 14, 0, 0, 0, time.UTC); err != nil || !got.Equal(want) {
		t.Errorf("got %s, %v, want %s", got, err, want)
	}
}

func TestHolidayString(t *testing.T) {
	for _, tt := range []struct {
		h    Holiday
		want string
	}{
		{Holiday{Year: 2026, Month: time.December, Day: 24, Name: "Christmas Eve"}, "2026-12-24 Christmas Eve"},
		{Holiday{Month: time.December, Day: 25, Name: "Christmas"}, "*-12-25 Christmas"},
		{Holiday{Month: time.November, Nth: 4, Weekday: time.Thursday, Name: "Thanksgiving"}, "*-11-Thu#4 Thanksgiving"},
		{Holiday{Month: time.May, Nth: -1, Weekday: time.Monday, Name: "Memorial Day"}, "*-05-Mon#last Memorial Day"},
		{Holiday{Month: time.July, Day: 4, Observed: true, Name: "Independence Day"}, "observed *-07-04 Independence Day"},
	} {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
		// Load reads what String writes.
		opt, err := Load(strings.NewReader(tt.want))
		if err != nil {
			t.Errorf("Load(%q): %v", tt.want, err)
			continue
		}
		a, err1 := New("a", "1", opt)
		b, err2 := New("a", "1", Holidays(tt.h))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for d := (Date{2020, time.January, 1}); d.Year < 2030; d = d.AddDays(1) {
			x, _ := a.Holiday(d)
			y, _ := b.Holiday(d)
			if x != y {
				t.Fatalf("%q: %s: file %q, option %q", tt.want, d, x, y)
			}
		}
	}
}

func TestNthWeekdayAndObservedErrors(t *testing.T) {
	for _, o := range []Option{
		NthWeekday(time.November, 0, time.Thursday, "x"),
		NthWeekday(time.November, 5, time.Thursday, "x"),
		NthWeekday(time.November, -2, time.Thursday, "x"),
		NthWeekday(13, 1, time.Thursday, "x"),
		NthWeekday(time.November, 1, 7, "x"),
		NthWeekday(time.November, 1, time.Thursday, " "),
		YearlyObserved(time.February, 30, "x"),
		YearlyObserved(time.July, 4, ""),
		Holidays(Holiday{Year: 2026, Month: time.July, Day: 4, Observed: true, Name: "x"}),
		Holidays(Holiday{Month: time.July, Day: 4, Nth: 1, Weekday: time.Monday, Name: "x"}),
		Holidays(Holiday{Month: time.July, Nth: 1, Weekday: time.Monday, Observed: true, Name: "x"}),
	} {
		if _, err := New("x", "1", o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("got %v, want ErrInvalidOption", err)
		}
	}
	for _, tt := range []struct{ file, want string }{
		{"*-11-Thu#5 x\n", `1: "*-11-Thu#5": want *-MM-Day#N, N from 1 to 4 or last`},
		{"*-11-Thx#4 x\n", `1: "*-11-Thx#4": want *-MM-Day#N`},
		{"*-13-Thu#4 x\n", `1: "*-13-Thu#4": want *-MM-Day#N`},
		{"*-11-Thu#4 A\n*-11-thu#4 B\n", "2: *-11-Thu#4 is already listed on line 1"},
		{"observed 2026-07-04 x\n", `1: observed "2026-07-04": want observed *-MM-DD and a name`},
		{"observed *-07-04\n", `1: observed "*-07-04": want observed *-MM-DD and a name`},
		{"observed\n", `1: observed "": want observed *-MM-DD and a name`},
		{"*-07-04 A\nobserved *-07-04 B\n", "2: *-07-04 is already listed on line 1"},
	} {
		_, err := Load(strings.NewReader(tt.file))
		if !errors.Is(err, ErrInvalidCalendar) || !strings.Contains(err.Error(), "line "+tt.want) {
			t.Errorf("Load(%q): got %v, want line %s", tt.file, err, tt.want)
		}
	}
}
