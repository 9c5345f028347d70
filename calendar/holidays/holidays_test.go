package holidays_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/calendar/holidays"
)

// The weekdays off in 2026-2028, written from each country's official
// list, not from the library: Poland's act on days off (with Christmas
// Eve from 2025), the United States' federal holidays as OPM lists them
// (observed days included), Germany's nationwide holidays, and the bank
// holidays of England and Wales (gov.uk). Weekends are off besides.
var official = map[string][]string{
	"pl": {
		"2026-01-01", "2026-01-06", "2026-04-06", "2026-05-01", "2026-06-04", "2026-11-11", "2026-12-24", "2026-12-25",
		"2027-01-01", "2027-01-06", "2027-03-29", "2027-05-03", "2027-05-27", "2027-11-01", "2027-11-11", "2027-12-24",
		"2028-01-06", "2028-04-17", "2028-05-01", "2028-05-03", "2028-06-15", "2028-08-15", "2028-11-01", "2028-12-25", "2028-12-26",
	},
	"us": {
		"2026-01-01", "2026-01-19", "2026-02-16", "2026-05-25", "2026-06-19", "2026-07-03", "2026-09-07", "2026-10-12", "2026-11-11", "2026-11-26", "2026-12-25",
		"2027-01-01", "2027-01-18", "2027-02-15", "2027-05-31", "2027-06-18", "2027-07-05", "2027-09-06", "2027-10-11", "2027-11-11", "2027-11-25", "2027-12-24", "2027-12-31",
		"2028-01-17", "2028-02-21", "2028-05-29", "2028-06-19", "2028-07-04", "2028-09-04", "2028-10-09", "2028-11-10", "2028-11-23", "2028-12-25",
	},
	"de": {
		"2026-01-01", "2026-04-03", "2026-04-06", "2026-05-01", "2026-05-14", "2026-05-25", "2026-12-25",
		"2027-01-01", "2027-03-26", "2027-03-29", "2027-05-06", "2027-05-17",
		"2028-04-14", "2028-04-17", "2028-05-01", "2028-05-25", "2028-06-05", "2028-10-03", "2028-12-25", "2028-12-26",
	},
	"gb": {
		"2026-01-01", "2026-04-03", "2026-04-06", "2026-05-04", "2026-05-25", "2026-08-31", "2026-12-25", "2026-12-28",
		"2027-01-01", "2027-03-26", "2027-03-29", "2027-05-03", "2027-05-31", "2027-08-30", "2027-12-27", "2027-12-28",
		"2028-01-03", "2028-04-14", "2028-04-17", "2028-05-01", "2028-05-29", "2028-08-28", "2028-12-25", "2028-12-26",
	},
}

// Every weekday of 2026-2028 is a business day exactly when the official
// list does not have it: no holiday missing (Easter-based, observed,
// substitute days), none added.
func TestAgainstOfficialLists(t *testing.T) {
	for code, days := range official {
		t.Run(code, func(t *testing.T) {
			off := map[calendar.Date]bool{}
			for _, s := range days {
				d, err := calendar.ParseDate(s)
				if err != nil {
					t.Fatal(err)
				}
				if w := d.Weekday(); w == time.Saturday || w == time.Sunday {
					t.Fatalf("the table lists %s, a %s", s, w)
				}
				off[d] = true
			}
			c, err := holidays.Country(code, 2026, 2028)
			if err != nil {
				t.Fatal(err)
			}
			for d := (calendar.Date{Year: 2026, Month: time.January, Day: 1}); d.Year <= 2028; d = d.AddDays(1) {
				weekend := d.Weekday() == time.Saturday || d.Weekday() == time.Sunday
				want := !weekend && !off[d]
				if got := c.IsBusinessDay(d); got != want {
					name, _ := c.Holiday(d)
					t.Errorf("%s (%s): business day %v, want %v (the calendar's holiday: %q)", d, d.Weekday(), got, want, name)
				}
			}
		})
	}
}

// A calendar's name and version say what it was built from, and a file
// written from its days reads back as the same calendar.
func TestNameVersionAndFile(t *testing.T) {
	c, err := holidays.Country("PL", 2027, 2030)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "pl" || c.Version() != "cal-"+holidays.LibraryVersion+"+2027-2030" {
		t.Errorf("name %q version %q", c.Name(), c.Version())
	}
	days, err := holidays.Days("pl", 2027, 2030)
	if err != nil {
		t.Fatal(err)
	}
	var file strings.Builder
	file.WriteString("weekend Sat Sun\n")
	for _, h := range days {
		file.WriteString(h.String() + "\n")
	}
	opt, err := calendar.Load(strings.NewReader(file.String()))
	if err != nil {
		t.Fatalf("the file does not load: %v\n%s", err, file.String())
	}
	back, err := calendar.New("pl", c.Version(), opt)
	if err != nil {
		t.Fatal(err)
	}
	for d := (calendar.Date{Year: 2027, Month: time.January, Day: 1}); d.Year <= 2030; d = d.AddDays(1) {
		if back.IsBusinessDay(d) != c.IsBusinessDay(d) {
			t.Fatalf("%s: the file says business day %v, the calendar %v", d, back.IsBusinessDay(d), c.IsBusinessDay(d))
		}
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		code        string
		first, last int
		want        error
	}{
		{"xx", 2026, 2027, holidays.ErrUnknownCountry},
		{"de.>", 2026, 2027, holidays.ErrUnknownCountry},
		{"pl", 2027, 2026, holidays.ErrInvalidYears},
		{"pl", 0, 2026, holidays.ErrInvalidYears},
		{"pl", 2000, 2100, holidays.ErrInvalidYears},
	} {
		if _, err := holidays.Country(tc.code, tc.first, tc.last); !errors.Is(err, tc.want) {
			t.Errorf("Country(%q, %d, %d): %v, want %v", tc.code, tc.first, tc.last, err, tc.want)
		}
	}
	for _, code := range holidays.Codes() {
		if _, err := holidays.Country(code, 2026, 2027); err != nil {
			t.Errorf("Country(%q): %v", code, err)
		}
	}
}

// LibraryVersion names the release go.mod requires: a bump of the
// dependency must change the calendars' versions too.
func TestLibraryVersion(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if want := "github.com/rickar/cal/v2 " + holidays.LibraryVersion; !strings.Contains(string(mod), want) {
		t.Errorf("go.mod does not require %q:\n%s", want, mod)
	}
}
