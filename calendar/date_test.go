package calendar

import (
	"encoding/json"
	"testing"
	"time"
	_ "time/tzdata" // the tests do not depend on the machine's zoneinfo
)

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// utc returns an instant written in UTC, for the hand-computed wants.
func utc(y int, m time.Month, d, h, min int) time.Time {
	return time.Date(y, m, d, h, min, 0, 0, time.UTC)
}

func TestDateIn(t *testing.T) {
	tests := []struct {
		name string
		zone string
		date Date
		at   Clock
		want time.Time // hand-computed
	}{
		{"Warsaw ordinary winter", "Europe/Warsaw", Date{2026, time.January, 15}, ClockOf(9, 0), utc(2026, time.January, 15, 8, 0)},
		{"Warsaw ordinary summer", "Europe/Warsaw", Date{2026, time.July, 15}, ClockOf(9, 0), utc(2026, time.July, 15, 7, 0)},
		// 2026-03-29 02:00 CET becomes 03:00 CEST: 02:30 does not exist and moves forward by
		// the hour, to 03:30 CEST.
		{"Warsaw gap", "Europe/Warsaw", Date{2026, time.March, 29}, ClockOf(2, 30), utc(2026, time.March, 29, 1, 30)},
		{"Warsaw gap start", "Europe/Warsaw", Date{2026, time.March, 29}, ClockOf(2, 0), utc(2026, time.March, 29, 1, 0)},
		{"Warsaw after gap", "Europe/Warsaw", Date{2026, time.March, 29}, ClockOf(3, 0), utc(2026, time.March, 29, 1, 0)},
		// 2026-10-25 03:00 CEST becomes 02:00 CET: 02:30 happens at 00:30 and 01:30 UTC; the
		// earlier.
		{"Warsaw overlap", "Europe/Warsaw", Date{2026, time.October, 25}, ClockOf(2, 30), utc(2026, time.October, 25, 0, 30)},
		{"Warsaw overlap start", "Europe/Warsaw", Date{2026, time.October, 25}, ClockOf(2, 0), utc(2026, time.October, 25, 0, 0)},
		{"Warsaw after overlap", "Europe/Warsaw", Date{2026, time.October, 25}, ClockOf(3, 0), utc(2026, time.October, 25, 2, 0)},
		// 2026-03-08 02:00 EST becomes 03:00 EDT.
		{"New York gap", "America/New_York", Date{2026, time.March, 8}, ClockOf(2, 30), utc(2026, time.March, 8, 7, 30)},
		// 2026-11-01 02:00 EDT becomes 01:00 EST: 01:30 is 05:30 UTC (EDT) or 06:30 UTC (EST).
		{"New York overlap", "America/New_York", Date{2026, time.November, 1}, ClockOf(1, 30), utc(2026, time.November, 1, 5, 30)},
		{"New York overlap end", "America/New_York", Date{2026, time.November, 1}, ClockOf(1, 59), utc(2026, time.November, 1, 5, 59)},
		{"New York after overlap", "America/New_York", Date{2026, time.November, 1}, ClockOf(2, 0), utc(2026, time.November, 1, 7, 0)},
		// Lord Howe Island moves by 30 minutes: +10:30 standard, +11 in summer.
		// 2026-10-04 02:00 (+10:30) becomes 02:30 (+11): 02:15 moves to 02:45 +11.
		{"Lord Howe gap", "Australia/Lord_Howe", Date{2026, time.October, 4}, ClockOf(2, 15), utc(2026, time.October, 3, 15, 45)},
		// 2026-04-05 02:00 (+11) becomes 01:30 (+10:30): 01:45 is 14:45 or 15:15 UTC.
		{"Lord Howe overlap", "Australia/Lord_Howe", Date{2026, time.April, 5}, ClockOf(1, 45), utc(2026, time.April, 4, 14, 45)},
		{"Lord Howe after overlap", "Australia/Lord_Howe", Date{2026, time.April, 5}, ClockOf(2, 0), utc(2026, time.April, 4, 15, 30)},
		{"UTC", "UTC", Date{2028, time.February, 29}, ClockOf(23, 59), utc(2028, time.February, 29, 23, 59)},
		{"zero clock is midnight", "Europe/Warsaw", Date{2026, time.January, 1}, Clock{}, utc(2025, time.December, 31, 23, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := mustLoad(t, tt.zone)
			got := tt.date.In(tt.at, loc)
			if !got.Equal(tt.want) {
				t.Errorf("%s %s in %s: got %s, want %s", tt.date, tt.at, tt.zone, got.UTC(), tt.want)
			}
			if got.Location() != loc {
				t.Errorf("got location %s, want %s", got.Location(), loc)
			}
		})
	}
}

// TestResolveEveryTransition checks every clock change of 2000 to 2040 in zones that move
// by an hour, by half an hour, and both ways (southern hemisphere), whatever instant
// time.Date picks: a time in a gap moves forward by the gap, a time in an overlap is the
// earlier instant, and a time just outside either is exact.
func TestResolveEveryTransition(t *testing.T) {
	for _, zone := range []string{"Europe/Warsaw", "America/New_York", "Australia/Lord_Howe", "Australia/Sydney", "America/Santiago"} {
		loc := mustLoad(t, zone)
		n := 0
		for u := time.Date(2000, 1, 1, 0, 0, 0, 0, loc); u.Year() < 2040; {
			_, end := u.ZoneBounds()
			if end.IsZero() {
				break
			}
			u = end
			n++
			_, before := end.Add(-time.Second).Zone()
			_, after := end.Zone()
			jump := time.Duration(after-before) * time.Second
			if jump == 0 {
				continue // a change of zone name or the end of the table, not of the clock
			}
			// The wall clock at the transition, as it read just before it. A gap is the wall
			// times from there forward by the jump, an overlap those back by the jump.
			wallBefore := end.In(time.FixedZone("", before))
			mid := wallBefore.Add(jump / 2)
			d := DateOf(mid)
			got := resolve(d, mid.Hour(), mid.Minute(), mid.Second(), 0, loc)
			var want time.Time
			if jump > 0 {
				// Gap: read with the offset before, so jump later than the wall time on the
				// new clock.
				want = time.Date(d.Year, d.Month, d.Day, mid.Hour(), mid.Minute(), mid.Second(), 0, time.FixedZone("", before))
				if w := got.In(loc); w.Hour()*60+w.Minute() != (mid.Hour()*60+mid.Minute()+int(jump/time.Minute))%(24*60) {
					t.Errorf("%s gap at %s: %s reads %s, want moved forward by %s", zone, end, mid.Format("15:04"), w.Format("15:04"), jump)
				}
			} else {
				// Overlap: the earlier instant is the one on the offset before.
				want = time.Date(d.Year, d.Month, d.Day, mid.Hour(), mid.Minute(), mid.Second(), 0, time.FixedZone("", before))
			}
			if !got.Equal(want) {
				t.Errorf("%s transition at %s (%s): %s %s: got %s, want %s", zone, end, jump, d, mid.Format("15:04:05"), got, want)
			}
			// Just after the change, the wall time is unambiguous.
			post := end.Add(time.Duration(max(jump, -jump))).Add(time.Minute).In(loc)
			if got := resolve(DateOf(post), post.Hour(), post.Minute(), post.Second(), 0, loc); !got.Equal(post) {
				t.Errorf("%s after transition at %s: got %s, want %s", zone, end, got, post)
			}
		}
		if n < 40 {
			t.Errorf("%s: %d transitions seen from 2000 to 2040, want at least 40", zone, n)
		}
	}
}

func TestDateArithmetic(t *testing.T) {
	// Against the time package, day by day from 1899 to 2101.
	start := time.Date(1899, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := 0; i < 202*366; i += 1 {
		tm := start.AddDate(0, 0, i)
		d := DateOf(tm)
		if got := (Date{1899, time.January, 1}).AddDays(i); got != d {
			t.Fatalf("1899-01-01 + %d days: got %s, want %s", i, got, d)
		}
		if got := d.Weekday(); got != tm.Weekday() {
			t.Fatalf("%s weekday: got %s, want %s", d, got, tm.Weekday())
		}
		if got := (Date{1899, time.January, 1}).DaysUntil(d); got != i {
			t.Fatalf("days until %s: got %d, want %d", d, got, i)
		}
		if got, want := d.LastOfMonth().Day, time.Date(d.Year, d.Month+1, 0, 0, 0, 0, 0, time.UTC).Day(); got != want {
			t.Fatalf("%s last of month: got %d, want %d", d, got, want)
		}
	}
}

func TestAddMonths(t *testing.T) {
	tests := []struct {
		from Date
		n    int
		want Date
	}{
		{Date{2026, time.January, 31}, 1, Date{2026, time.February, 28}},
		{Date{2028, time.January, 31}, 1, Date{2028, time.February, 29}},
		{Date{2028, time.February, 29}, 12, Date{2029, time.February, 28}},
		{Date{2028, time.February, 29}, 48, Date{2032, time.February, 29}},
		{Date{2026, time.March, 31}, -1, Date{2026, time.February, 28}},
		{Date{2026, time.May, 31}, 1, Date{2026, time.June, 30}},
		{Date{2026, time.December, 15}, 1, Date{2027, time.January, 15}},
		{Date{2027, time.January, 15}, -1, Date{2026, time.December, 15}},
		{Date{2026, time.January, 15}, -25, Date{2023, time.December, 15}},
		{Date{2026, time.August, 31}, 0, Date{2026, time.August, 31}},
	}
	for _, tt := range tests {
		if got := tt.from.AddMonths(tt.n); got != tt.want {
			t.Errorf("%s + %d months: got %s, want %s", tt.from, tt.n, got, tt.want)
		}
	}
}

func TestParseDate(t *testing.T) {
	tests := []struct {
		in      string
		want    Date
		wantErr bool
	}{
		{"2028-02-29", Date{2028, time.February, 29}, false},
		{"0001-01-01", Date{1, time.January, 1}, false},
		{"2027-02-29", Date{}, true},
		{"2026-04-31", Date{}, true},
		{"2026-13-01", Date{}, true},
		{"0000-01-01", Date{}, true},
		{"2026-1-01", Date{}, true},
		{"2026/01/01", Date{}, true},
		{"2026-01-0x", Date{}, true},
		{"+026-01-01", Date{}, true},
		{"", Date{}, true},
	}
	for _, tt := range tests {
		got, err := ParseDate(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDate(%q): got %s, %v, want %s, error %t", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseClock(t *testing.T) {
	tests := []struct {
		in      string
		want    Clock
		wantErr bool
	}{
		{"09:00", ClockOf(9, 0), false},
		{"00:00", ClockOf(0, 0), false},
		{"23:59", ClockOf(23, 59), false},
		{"24:00", Clock{}, true},
		{"12:60", Clock{}, true},
		{"9:00", Clock{}, true},
		{"09.00", Clock{}, true},
		{"", Clock{}, true},
	}
	for _, tt := range tests {
		got, err := ParseClock(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseClock(%q): got %v, %v, want %v, error %t", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	if ClockOf(0, 0).IsZero() || !(Clock{}).IsZero() {
		t.Error("00:00 must not be the zero Clock, and the zero Clock must be")
	}
}

func TestDateClockJSON(t *testing.T) {
	type pair struct {
		D Date  `json:"d"`
		C Clock `json:"c"`
	}
	in := pair{Date{2028, time.February, 29}, ClockOf(7, 5)}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"d":"2028-02-29","c":"07:05"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	var out pair
	if err := json.Unmarshal(b, &out); err != nil || out != in {
		t.Errorf("round trip: got %+v, %v, want %+v", out, err, in)
	}
	if _, err := json.Marshal(pair{D: Date{2027, time.February, 29}}); err == nil {
		t.Error("marshal 2027-02-29: got no error, want one")
	}
	if _, err := json.Marshal(pair{D: Date{2027, time.February, 1}, C: ClockOf(25, 0)}); err == nil {
		t.Error("marshal 25:00: got no error, want one")
	}
	if err := json.Unmarshal([]byte(`{"d":"2027-02-30","c":""}`), &out); err == nil {
		t.Error("unmarshal 2027-02-30: got no error, want one")
	}
}
