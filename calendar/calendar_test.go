package calendar

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// testFile is a calendar file for the tests: Polish public holidays, and a bank's Christmas
// Eve of 2026.
const testFile = `# Poland, for the tests
weekend Sat Sun
*-01-01 New Year's Day
*-01-06 Epiphany
easter+1 Easter Monday
easter+60 Corpus Christi
*-05-01 Labour Day
*-05-03 Constitution Day
*-08-15 Assumption
*-11-01 All Saints
*-11-11 Independence Day
2026-12-24 Christmas Eve
*-12-25 Christmas
*-12-26 Second Day of Christmas
`

func testCalendar(t testing.TB) *Standard {
	t.Helper()
	days, err := Load(strings.NewReader(testFile))
	if err != nil {
		t.Fatal(err)
	}
	cal, err := New("pl", "2026.1", days)
	if err != nil {
		t.Fatal(err)
	}
	return cal
}

func TestStandard(t *testing.T) {
	cal := testCalendar(t)
	tests := []struct {
		date     Date
		business bool
		holiday  string
	}{
		{Date{2026, time.December, 23}, true, ""},                         // Wednesday
		{Date{2026, time.December, 24}, false, "Christmas Eve"},           // Thursday, dated
		{Date{2027, time.December, 24}, true, ""},                         // Friday, not listed for 2027
		{Date{2026, time.December, 25}, false, "Christmas"},               // Friday, yearly
		{Date{2026, time.December, 26}, false, "Second Day of Christmas"}, // Saturday
		{Date{2026, time.December, 27}, false, ""},                        // Sunday
		{Date{2026, time.December, 28}, true, ""},                         // Monday
		{Date{2026, time.April, 6}, false, "Easter Monday"},               // Easter 2026: April 5
		{Date{2027, time.March, 29}, false, "Easter Monday"},              // Easter 2027: March 28
		{Date{2026, time.June, 4}, false, "Corpus Christi"},
		{Date{2026, time.June, 5}, true, ""},
		{Date{2028, time.February, 29}, true, ""},
	}
	for _, tt := range tests {
		if got := cal.IsBusinessDay(tt.date); got != tt.business {
			t.Errorf("IsBusinessDay(%s): got %t, want %t", tt.date, got, tt.business)
		}
		if got, _ := cal.Holiday(tt.date); got != tt.holiday {
			t.Errorf("Holiday(%s): got %q, want %q", tt.date, got, tt.holiday)
		}
	}
	if got := RefOf(cal); got != (Ref{"pl", "2026.1"}) {
		t.Errorf("RefOf: got %v, want pl@2026.1", got)
	}
}

func TestEasterSunday(t *testing.T) {
	// Published dates of Western Easter.
	want := map[int]Date{
		1961: {1961, time.April, 2}, 2000: {2000, time.April, 23}, 2008: {2008, time.March, 23},
		2011: {2011, time.April, 24}, 2019: {2019, time.April, 21}, 2024: {2024, time.March, 31},
		2025: {2025, time.April, 20}, 2026: {2026, time.April, 5}, 2027: {2027, time.March, 28},
		2038: {2038, time.April, 25}, 2285: {2285, time.March, 22},
	}
	for y, w := range want {
		if got := easterSunday(y); got != w {
			t.Errorf("Easter %d: got %s, want %s", y, got, w)
		}
	}
}

func TestWeekendOption(t *testing.T) {
	// A Friday and Saturday weekend, and none.
	fs, err := New("ae", "1", Weekend(time.Friday, time.Saturday))
	if err != nil {
		t.Fatal(err)
	}
	none, err := New("nonstop", "1", Weekend())
	if err != nil {
		t.Fatal(err)
	}
	for d, want := range map[Date][2]bool{
		{2026, time.November, 27}: {false, true}, // Friday
		{2026, time.November, 28}: {false, true}, // Saturday
		{2026, time.November, 29}: {true, true},  // Sunday
	} {
		if got := fs.IsBusinessDay(d); got != want[0] {
			t.Errorf("Fri-Sat weekend, %s: got %t, want %t", d, got, want[0])
		}
		if got := none.IsBusinessDay(d); got != want[1] {
			t.Errorf("no weekend, %s: got %t, want %t", d, got, want[1])
		}
	}
}

func TestNewInvalid(t *testing.T) {
	tests := []struct {
		name    string
		cname   string
		version string
		opts    []Option
	}{
		{"empty name", "", "1", nil},
		{"empty version", "pl", "", nil},
		{"spaces around name", " pl", "1", nil},
		{"newline in version", "pl", "1\n2", nil},
		{"weekday out of range", "pl", "1", []Option{Weekend(time.Weekday(7))}},
		{"negative weekday", "pl", "1", []Option{Weekend(time.Weekday(-1))}},
		{"no business day", "pl", "1", []Option{Weekend(0, 1, 2, 3, 4, 5, 6)}},
		{"February 30", "pl", "1", []Option{Yearly(time.February, 30, "x")}},
		{"month 13", "pl", "1", []Option{Yearly(13, 1, "x")}},
		{"2027-02-29", "pl", "1", []Option{On(Date{2027, time.February, 29}, "x")}},
		{"unnamed", "pl", "1", []Option{Yearly(time.May, 1, " ")}},
		{"easter too far", "pl", "1", []Option{Easter(251, "x")}},
		{"easter unnamed", "pl", "1", []Option{Easter(1, "")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cal, err := New(tt.cname, tt.version, tt.opts...)
			if !errors.Is(err, ErrInvalidOption) {
				t.Errorf("got %v, %v, want an error wrapping ErrInvalidOption", cal, err)
			}
		})
	}
	// February 29 every year is valid: a holiday in leap years.
	cal, err := New("leap", "1", Yearly(time.February, 29, "Leap Day"))
	if err != nil {
		t.Fatal(err)
	}
	if cal.IsBusinessDay(Date{2028, time.February, 29}) || !cal.IsBusinessDay(Date{2027, time.March, 1}) {
		t.Error("Yearly(February 29): got a business day on 2028-02-29 or none on 2027-03-01, want a holiday in leap years only")
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string // in the error, after "line "
	}{
		{"bad date", "# x\n\n2026-02-30 Nope\n", "3: date \"2026-02-30\" does not exist"},
		{"no name", "*-12-25 Christmas\n2026-12-24\n", "2: \"2026-12-24\" has no name"},
		{"duplicate date", "2026-12-24 Eve\n*-12-25 Christmas\n2026-12-24 Eve again\n", "3: 2026-12-24 is already listed on line 1"},
		{"duplicate yearly", "*-12-25 A\n*-12-25 B\n", "2: *-12-25 is already listed on line 1"},
		{"bad yearly", "*-02-30 Nope\n", "1: yearly day \"*-02-30\""},
		{"bad weekday", "weekend Sat Sunday Funday\n", "1: \"Funday\" is not a day of the week"},
		{"weekend twice", "weekend Sat\n\nweekend Sun\n", "3: weekend given twice (first on line 1)"},
		{"all weekend", "weekend mon tue wed thu fri sat sun\n", "1: every day of the week"},
		{"bad easter", "easter+x Nope\n", "1: \"easter+x\": want easter, easter+N or easter-N"},
		{"easter no sign", "easter1 Nope\n", "1: \"easter1\""},
		{"easter out of range", "easter-81 Nope\n", "1: \"easter-81\": offset out of range"},
		{"garbage", "Christmas 12-25\n", "1: date \"Christmas\": want YYYY-MM-DD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opt, err := Load(strings.NewReader(tt.file))
			if !errors.Is(err, ErrInvalidCalendar) {
				t.Fatalf("got %v, want an error wrapping ErrInvalidCalendar", err)
			}
			if opt != nil {
				t.Error("got an option with the error, want nil")
			}
			if !strings.Contains(err.Error(), "line "+tt.want) {
				t.Errorf("got %q, want it to contain %q", err, "line "+tt.want)
			}
		})
	}
}

func TestLoadFormat(t *testing.T) {
	// Space, tabs, case, "easter" alone, an empty weekend; and Holiday.String writes lines
	// Load reads.
	opt, err := Load(strings.NewReader("\ufeff  WEEKEND\r\n\t*-07-04\tIndependence Day  \neaster Easter Sunday\n2026-11-26 Thanksgiving # not a comment\n"))
	if err != nil {
		t.Fatal(err)
	}
	cal, err := New("us", "1", opt)
	if err != nil {
		t.Fatal(err)
	}
	for d, want := range map[Date]string{
		{2026, time.July, 4}:      "Independence Day",
		{2026, time.April, 5}:     "Easter Sunday",
		{2026, time.November, 26}: "Thanksgiving # not a comment",
		{2026, time.November, 28}: "", // a Saturday, and a business day without a weekend
	} {
		got, _ := cal.Holiday(d)
		if got != want {
			t.Errorf("Holiday(%s): got %q, want %q", d, got, want)
		}
		if cal.IsBusinessDay(d) != (want == "") {
			t.Errorf("IsBusinessDay(%s): got %t, want %t", d, !(want == ""), want == "")
		}
	}
	for _, h := range []Holiday{{Year: 2026, Month: time.December, Day: 24, Name: "Christmas Eve"}, {Month: time.December, Day: 25, Name: "Christmas"}} {
		if _, err := Load(strings.NewReader(h.String())); err != nil {
			t.Errorf("Load(%q): %v", h.String(), err)
		}
	}
	if got, want := (Holiday{Month: time.December, Day: 25, Name: "Christmas"}).String(), "*-12-25 Christmas"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRegistry(t *testing.T) {
	var r Registry
	if _, err := r.Lookup(Ref{"pl", "1"}); !errors.Is(err, ErrUnknownCalendar) {
		t.Errorf("empty registry: got %v, want ErrUnknownCalendar", err)
	}
	v1, _ := New("pl", "1")
	v2, _ := New("pl", "2")
	us, _ := New("us", "1")
	if err := r.Add(v2, us, v1); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Lookup(Ref{"pl", "1"}); err != nil || got != Calendar(v1) {
		t.Errorf("Lookup pl@1: got %v, %v, want v1", got, err)
	}
	if _, err := r.Lookup(Ref{"pl", "3"}); !errors.Is(err, ErrUnknownCalendar) {
		t.Errorf("Lookup pl@3: got %v, want ErrUnknownCalendar", err)
	}
	if err := r.Add(v1); !errors.Is(err, ErrInvalidCalendar) {
		t.Errorf("Add twice: got %v, want ErrInvalidCalendar", err)
	}
	if err := r.Add(nil); !errors.Is(err, ErrInvalidCalendar) {
		t.Errorf("Add nil: got %v, want ErrInvalidCalendar", err)
	}
	got := r.Refs()
	want := []Ref{{"pl", "1"}, {"pl", "2"}, {"us", "1"}}
	if len(got) != len(want) {
		t.Fatalf("Refs: got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Refs: got %v, want %v", got, want)
		}
	}
}
