package calendar

import (
	"fmt"
	"time"
)

// Date is a civil date, a day on a calendar without a time or a time zone. Its zero value is
// not a valid date, but "no date given": it encodes as empty text and decodes back, so that a
// Date field left unset in saga data survives a round trip. [Date.IsValid] reports whether a
// Date names a real day of years 1 to 9999. Dates compare with ==, and sort with
// [Date.Compare].
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// DateOf returns the date of t in t's location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{y, m, d}
}

// ParseDate parses a date in the form 2006-01-02.
func ParseDate(s string) (Date, error) {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return Date{}, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	y, ok1 := digits(s[0:4])
	m, ok2 := digits(s[5:7])
	d, ok3 := digits(s[8:10])
	if !ok1 || !ok2 || !ok3 {
		return Date{}, fmt.Errorf("date %q: want YYYY-MM-DD", s)
	}
	date := Date{y, time.Month(m), d}
	if !date.IsValid() {
		return Date{}, fmt.Errorf("date %q does not exist", s)
	}
	return date, nil
}

// digits parses a string of ASCII digits, and nothing else, as a non-negative integer.
func digits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// IsValid reports whether d is a day that exists, in years 1 to 9999.
func (d Date) IsValid() bool {
	return d.Year >= 1 && d.Year <= 9999 && d.Month >= time.January && d.Month <= time.December &&
		d.Day >= 1 && d.Day <= daysIn(d.Year, d.Month)
}

// String returns d in the form 2006-01-02.
func (d Date) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day)
}

// MarshalText encodes d as 2006-01-02, and the zero Date as empty text; any other invalid
// date is an error.
func (d Date) MarshalText() ([]byte, error) {
	if d == (Date{}) {
		return []byte{}, nil
	}
	if !d.IsValid() {
		return nil, fmt.Errorf("calendar: invalid date %d-%d-%d", d.Year, int(d.Month), d.Day)
	}
	return []byte(d.String()), nil
}

// UnmarshalText decodes a date in the form 2006-01-02, and empty text as the zero Date.
func (d *Date) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*d = Date{}
		return nil
	}
	v, err := ParseDate(string(b))
	if err != nil {
		return fmt.Errorf("calendar: %w", err)
	}
	*d = v
	return nil
}

// AddDays returns the date n days after d (before d if n is negative).
func (d Date) AddDays(n int) Date {
	return civil(days(d) + int64(n))
}

// DaysUntil returns the number of days from d to e: e.AddDays(-d.DaysUntil(e)) == d.
func (d Date) DaysUntil(e Date) int {
	return int(days(e) - days(d))
}

// Weekday returns the day of the week of d.
func (d Date) Weekday() time.Weekday {
	// 1970-01-01 was a Thursday.
	w := (days(d) + 4) % 7
	if w < 0 {
		w += 7
	}
	return time.Weekday(w)
}

// Compare returns -1 if d is before e, +1 if d is after e, and 0 if they are the same day.
func (d Date) Compare(e Date) int {
	a, b := days(d), days(e)
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LastOfMonth returns the last day of d's month.
func (d Date) LastOfMonth() Date {
	return Date{d.Year, d.Month, daysIn(d.Year, d.Month)}
}

// AddMonths returns the same day n months after d (before d if n is negative), on the last
// day of that month if it is shorter: 2026-01-31 plus one month is 2026-02-28, where
// time.Time's AddDate would overflow into March.
func (d Date) AddMonths(n int) Date {
	m := d.Year*12 + int(d.Month-1) + n
	y, mon := floorDiv(m, 12), time.Month(floorMod(m, 12)+1)
	return Date{y, mon, min(d.Day, daysIn(y, mon))}
}

// In returns the instant at the wall-clock time c on d in loc (midnight if c is the zero
// Clock). A wall-clock time that does not exist, because the clocks moved forward over it,
// moves forward by the length of the jump: 02:30 on a day when 02:00 became 03:00 is 03:30.
// A wall-clock time that happens twice, because the clocks moved back over it, is the
// earlier of the two instants.
func (d Date) In(c Clock, loc *time.Location) time.Time {
	return resolve(d, c.Hour(), c.Minute(), 0, 0, loc)
}

// isLeap reports whether y is a leap year of the Gregorian calendar.
func isLeap(y int) bool {
	return y%4 == 0 && (y%100 != 0 || y%400 == 0)
}

// daysIn returns the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	switch m {
	case time.February:
		if isLeap(y) {
			return 29
		}
		return 28
	case time.April, time.June, time.September, time.November:
		return 30
	}
	return 31
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

func floorMod(a, b int) int {
	return a - floorDiv(a, b)*b
}

// days returns the number of days from 1970-01-01 to d (Howard Hinnant's days_from_civil).
func days(d Date) int64 {
	y := int64(d.Year)
	m := int64(d.Month)
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + int64(d.Day) - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// civil is the inverse of days.
func civil(z int64) Date {
	z += 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	y := yoe + era*400
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	d := doy - (153*mp+2)/5 + 1
	m := mp + 3
	if m > 12 {
		m -= 12
	}
	if m <= 2 {
		y++
	}
	return Date{int(y), time.Month(m), int(d)}
}

// resolve returns the instant of the wall-clock time h:m:s.ns on d in loc. Go's time.Date
// does not promise which instant it returns for a wall-clock time that happens twice or not
// at all, so resolve works it out from the offsets of the zone periods around that time:
// of the instants whose wall clock reads the time, the earliest; if there is none (the time
// is in a gap), the time read with the offset before the gap, which moves it forward by the
// length of the gap.
func resolve(d Date, h, m, s, ns int, loc *time.Location) time.Time {
	reads, inGap := instants(d, h, m, s, ns, loc)
	if len(reads) > 0 {
		return reads[0]
	}
	return inGap
}

// instants returns the instants whose wall clock in loc reads h:m:s.ns on d, in time order:
// one, or two in an overlap (none in a gap). If there is none, inGap is the time read with
// the offset before the gap.
func instants(d Date, h, m, s, ns int, loc *time.Location) (reads []time.Time, inGap time.Time) {
	t := time.Date(d.Year, d.Month, d.Day, h, m, s, ns, loc)
	// wall is the wall-clock time as seconds, read as if it were UTC.
	wall := time.Date(d.Year, d.Month, d.Day, h, m, s, 0, time.UTC).Unix()
	start, end := t.ZoneBounds()
	if start.IsZero() && end.IsZero() {
		return []time.Time{t}, time.Time{} // one offset for all time: no gaps, no overlaps
	}
	_, off := t.Zone()
	type period struct {
		off        int   // seconds east of UTC
		from, upto int64 // unix seconds [from, upto); 0 for unbounded
		hasFrom    bool
		hasUpto    bool
	}
	cur := period{off: off}
	var around []period
	if !start.IsZero() {
		cur.from, cur.hasFrom = start.Unix(), true
		_, prevOff := start.Add(-time.Second).Zone()
		ps, _ := start.Add(-time.Second).ZoneBounds()
		p := period{off: prevOff, upto: start.Unix(), hasUpto: true}
		if !ps.IsZero() {
			p.from, p.hasFrom = ps.Unix(), true
		}
		around = append(around, p)
	}
	if !end.IsZero() {
		cur.upto, cur.hasUpto = end.Unix(), true
	}
	around = append(around, cur)
	if !end.IsZero() {
		_, nextOff := end.Zone()
		_, ne := end.ZoneBounds()
		n := period{off: nextOff, from: end.Unix(), hasFrom: true}
		if !ne.IsZero() {
			n.upto, n.hasUpto = ne.Unix(), true
		}
		around = append(around, n)
	}
	// An instant whose wall clock reads wall: wall-off must lie in the period whose offset
	// is off. around is in time order, so the matches are too.
	for _, p := range around {
		u := wall - int64(p.off)
		if (!p.hasFrom || u >= p.from) && (!p.hasUpto || u < p.upto) {
			reads = append(reads, time.Unix(u, int64(ns)).In(loc))
		}
	}
	if len(reads) > 0 {
		return reads, time.Time{}
	}
	// No instant reads wall: it falls in a gap where the clocks jumped forward. Read it with
	// the offset in force before the jump.
	for i := 0; i+1 < len(around); i++ {
		before, after := around[i], around[i+1]
		jump := before.upto // the instant of the transition
		if after.off > before.off && wall >= jump+int64(before.off) && wall < jump+int64(after.off) {
			return nil, time.Unix(wall-int64(before.off), int64(ns)).In(loc)
		}
	}
	return nil, t
}
