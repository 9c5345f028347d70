package schedule

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
)

// cron is a parsed five-field cron expression: minute, hour, day of month,
// month, day of week. Each field is a bit set of the values it allows.
type cron struct {
	minute, hour, dom, month, dow uint64
	// domStar and dowStar record a day field that starts with "*" ("*",
	// "*/10", "*,15"), which is unrestricted: as in Vixie cron, a day
	// matches either day field when both are restricted, else both.
	domStar, dowStar bool
}

type cronField struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	monthNames = map[string]int{"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}
	dayNames = map[string]int{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
)

// The macros parseCron accepts for a whole expression.
var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

// parseCron parses a cron expression: five fields separated by spaces
// (minute 0-59, hour 0-23, day of month 1-31, month 1-12 or jan-dec, day of
// week 0-7 or sun-sat, 0 and 7 both Sunday), each a list of items separated
// by commas, each item "*", a value, or a range a-b, optionally followed by
// a step /n (1 to the field's largest value; "a/n" is a-to-the-last/n, the
// last day of the week being Saturday); or one of the macros @yearly,
// @monthly, @weekly, @daily, @hourly.
func parseCron(expr string) (cron, error) {
	s := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(s)]; ok {
		s = m
	}
	fs := strings.Fields(s)
	if len(fs) != 5 {
		return cron{}, fmt.Errorf("%w: cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", ErrInvalidSpec, expr, len(fs))
	}
	specs := []cronField{
		{"minute", 0, 59, nil},
		{"hour", 0, 23, nil},
		{"day of month", 1, 31, nil},
		{"month", 1, 12, monthNames},
		{"day of week", 0, 7, dayNames},
	}
	var c cron
	sets := []*uint64{&c.minute, &c.hour, &c.dom, &c.month, &c.dow}
	for i, f := range specs {
		set, star, err := parseField(fs[i], f)
		if err != nil {
			return cron{}, fmt.Errorf("%w: cron %q: %s: %v", ErrInvalidSpec, expr, f.name, err)
		}
		*sets[i] = set
		switch i {
		case 2:
			c.domStar = star
		case 4:
			c.dowStar = star
		}
	}
	if c.dow&(1<<7) != 0 { // 7 is Sunday too
		c.dow = c.dow&^(1<<7) | 1
	}
	if err := c.canFire(); err != nil {
		return cron{}, fmt.Errorf("%w: cron %q: %v", ErrNeverFires, expr, err)
	}
	return c, nil
}

func parseField(s string, f cronField) (set uint64, star bool, err error) {
	if s == "" {
		return 0, false, fmt.Errorf("empty")
	}
	// As Vixie cron does, the first character decides: "*,10" is
	// unrestricted, "10,*" restricted.
	star = strings.HasPrefix(s, "*")
	for item := range strings.SplitSeq(s, ",") {
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			step, err = strconv.Atoi(stepText)
			if err != nil || step < 1 || step > f.max {
				return 0, false, fmt.Errorf("bad step %q", stepText)
			}
		}
		lo, hi := f.min, f.max
		switch {
		case rng == "*":
			if f.name == "day of week" {
				hi = 6
			}
		case strings.Contains(rng, "-"):
			a, b, _ := strings.Cut(rng, "-")
			if lo, err = fieldValue(a, f); err != nil {
				return 0, false, err
			}
			if hi, err = fieldValue(b, f); err != nil {
				return 0, false, err
			}
			if hi < lo {
				return 0, false, fmt.Errorf("range %q runs backwards", rng)
			}
		default:
			if lo, err = fieldValue(rng, f); err != nil {
				return 0, false, err
			}
			hi = lo
			if hasStep { // "5/15" is "5-max/15"; "mon/2" ends on Saturday, not on 7 (Sunday again)
				hi = f.max
				if f.name == "day of week" {
					hi = 6
				}
			}
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	return set, star, nil
}

func fieldValue(s string, f cronField) (int, error) {
	if v, ok := f.names[strings.ToLower(s)]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("bad value %q", s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("value %d out of range %d-%d", v, f.min, f.max)
	}
	return v, nil
}

// daysIn is the longest each month can be (February in a leap year).
var daysIn = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// canFire reports an expression that names no day that exists, such as
// "0 0 30 2 *" (February 30). With both day fields restricted a day
// matches either, so the day of week always fires; else a day must match
// the day of month, which some month must hold (a day-of-month field
// that starts with "*" holds the 1st).
func (c cron) canFire() error {
	if c.domStar || c.dowStar {
		// The day of month alone picks the days: a month must hold one of them.
		for m := 1; m <= 12; m++ {
			if c.month&(1<<m) == 0 {
				continue
			}
			if c.dom&(uint64(1)<<(daysIn[m]+1)-1) != 0 {
				return nil
			}
		}
		return fmt.Errorf("no month in the expression has any of its days")
	}
	return nil
}

// dayMatches reports whether the cron fires on day d (its calendar fields).
func (c cron) dayMatches(d calendar.Date) bool {
	if c.month&(1<<int(d.Month)) == 0 {
		return false
	}
	domOK := c.dom&(1<<d.Day) != 0
	dowOK := c.dow&(1<<int(d.Weekday())) != 0
	if c.domStar || c.dowStar { // one unrestricted: both must match
		return domOK && dowOK
	}
	return domOK || dowOK
}

// maxCronDays bounds the search for the next day a cron fires on: eight
// years and a day covers February 29 across a century year not a leap
// year (2096 to 2104).
const maxCronDays = 8*366 + 1

// next returns the first instant strictly after `after` at which the cron
// fires in loc, on a day that cal (if not nil) says is a business day.
//
// Wall-clock times are resolved in loc: a time that happens twice (the
// clocks went back over it) fires once, at the earlier instant; a time that
// does not exist (the clocks jumped over it) fires at the instant the
// clocks jumped, once however many such times the expression names in the
// gap (and once only if the time right after the jump also matches).
func (c cron) next(after time.Time, loc *time.Location, cal calendar.Calendar) (time.Time, error) {
	start := calendar.DateOf(after.In(loc)).AddDays(-1) // a wall time of the day before may resolve after `after` in a gap
	for i := 0; i <= maxCronDays; i++ {
		d := start.AddDays(i)
		if !c.dayMatches(d) || (cal != nil && !cal.IsBusinessDay(d)) {
			continue
		}
		for h := range 24 {
			if c.hour&(1<<h) == 0 {
				continue
			}
			for mins := c.minute; mins != 0; mins &= mins - 1 {
				m := bits.TrailingZeros64(mins)
				if t := resolveWall(d, h, m, loc); t.After(after) {
					return t, nil
				}
			}
		}
	}
	return time.Time{}, fmt.Errorf("%w: no occurrence within %d days after %s", ErrNeverFires, maxCronDays, after.UTC().Format(time.RFC3339))
}

// resolveWall returns the instant the wall-clock time h:m on d names in
// loc: the earlier of two if the time happens twice, the instant the clocks
// jumped if it falls in a gap. It does not rely on what time.Date returns
// in those cases, which Go leaves unspecified.
func resolveWall(d calendar.Date, h, m int, loc *time.Location) time.Time {
	wall := time.Date(d.Year, d.Month, d.Day, h, m, 0, 0, time.UTC)
	var best time.Time
	for _, probe := range []time.Duration{-30 * time.Hour, 0, 30 * time.Hour} {
		_, off := wall.Add(probe).In(loc).Zone()
		t := wall.Add(-time.Duration(off) * time.Second)
		lt := t.In(loc)
		if lt.Hour() == h && lt.Minute() == m && lt.Day() == d.Day && (best.IsZero() || t.Before(best)) {
			best = t
		}
	}
	if !best.IsZero() {
		return best
	}
	// A gap: read with the offset in force before it, the wall time names an
	// instant after the jump; the zone in force then began at the jump.
	_, off := wall.Add(-30 * time.Hour).In(loc).Zone()
	start, _ := wall.Add(-time.Duration(off) * time.Second).In(loc).ZoneBounds()
	return start
}
