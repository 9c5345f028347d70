package calendar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Kind says how a rule moves from its start to the day it is due.
type Kind string

// The kinds of rule. N is the rule's count; negative counts go back in time.
const (
	// KindInstant: the start instant itself; with business hours ([Rule.NotBefore],
	// [Rule.Within]) the rule rolls it forward to the next business opening.
	KindInstant Kind = "instant"
	// KindBusinessDays: N business days after the start day (before it if N < 0), counting
	// from the start day exclusive: one business day after a Friday or a Saturday is the
	// Monday, if that is a business day.
	KindBusinessDays Kind = "business_days"
	// KindCalendarDays: N days after the start day (before it if N < 0).
	KindCalendarDays Kind = "calendar_days"
	// KindMonths: the same day N months after the start day, on the month's last day if it is
	// shorter (January 31 plus one month is February 28 or 29).
	KindMonths Kind = "months"
	// KindNext: the first instant strictly after the start at which the rule's time falls
	// due, on the start day if still to come, else on the next day; each day's time falls
	// due once, at the instant [Date.In] gives: a time the clocks went back over counts at
	// the first of its two instants only (asked between the two, the next is the next
	// day's), and a time in a gap counts at the instant it moves forward to.
	KindNext Kind = "next"
	// KindMonthEnd: the last day of the start day's month, or of the month N months on.
	KindMonthEnd Kind = "month_end"
	// KindBusinessMonthEnd: the last business day of the start day's month, or of the month
	// N months on.
	KindBusinessMonthEnd Kind = "business_month_end"
	// KindBusinessHours: N hours of business hours (Open to Close on business days) after the
	// start, counted from the start if it is within them, else from the next opening. Hours
	// are elapsed time: on a day the clocks change within business hours, that day holds an
	// hour more or less. A result that uses up a day's hours exactly is at its Close. N is
	// 1 to [MaxBusinessHours]; the rule has no Time, and needs Open and Close.
	KindBusinessHours Kind = "business_hours"
)

// Limits of a rule's count, which keep a rule's cost and its result in range.
const (
	MaxBusinessDays  = 10_000
	MaxCalendarDays  = 100_000
	MaxMonths        = 1_200
	MaxBusinessHours = 10_000
)

// maxGap is the number of consecutive days without a business day after which a rule gives
// up with ErrNoBusinessDay.
const maxGap = 366

// Rule is a due time expressed the way a business states it: "3 business days after, at
// 09:00 Europe/Warsaw". It is plain data, compared with ==, encoded as JSON (with unknown
// fields rejected, so that a rule is never half understood) and shown by [Rule.String];
// [Rule.Due] turns it into an instant. Build rules with the constructors ([BusinessDays],
// [Next], …) and methods ([Rule.At], [Rule.In], …), which return copies. The zero Rule is
// no rule ("no rule", as String says): it encodes and decodes, so that a Rule field of saga
// data may be left unset, and computing it is an error wrapping [ErrInvalidRule].
//
// A rule is read in its zone, which it must name ([Rule.In]; computing a rule without one is
// an error): the start instant's date and wall-clock time there, then:
//
//  1. Kind and N choose a day.
//  2. On that day, the instant at Time; if Time is zero, at the start's wall-clock time.
//  3. If Open is set, an instant before Open, or at or after Close if set, or on a day that
//     is not a business day, moves forward to Open on the next business day (Open on the same
//     day if the day is a business day and the instant is before Open).
//
// A business hours rule ([BusinessHours]) instead counts its N hours within Open and Close
// on business days, from the start moved as in step 3.
type Rule struct {
	Kind  Kind   `json:"kind"`
	N     int    `json:"n,omitempty"`
	Time  Clock  `json:"time,omitzero"`  // the wall-clock time of the result; zero: the start's
	Open  Clock  `json:"open,omitzero"`  // business hours: not before Open on a business day
	Close Clock  `json:"close,omitzero"` // business hours: before Close (zero: no end)
	Zone  string `json:"zone,omitempty"` // IANA zone name, such as "Europe/Warsaw" or "UTC"; required
}

// BusinessDays returns the rule "n business days after" (before, if n is negative).
func BusinessDays(n int) Rule { return Rule{Kind: KindBusinessDays, N: n} }

// NextBusinessDay returns the rule "next business day, at" the time at.
func NextBusinessDay(at Clock) Rule { return BusinessDays(1).At(at) }

// CalendarDays returns the rule "n calendar days after" (before, if n is negative).
func CalendarDays(n int) Rule { return Rule{Kind: KindCalendarDays, N: n} }

// Months returns the rule "n months after" (before, if n is negative), on the month's last
// day if it is shorter (see [KindMonths]). For a series, such as monthly renewals, count
// every one from the first: the k-th renewal is Months(k) from the first, which keeps the
// first's day (January 31, February 28, March 31). Months(1) from the renewal before drifts
// to the shortest month's day for good (January 31, February 28, March 28).
func Months(n int) Rule { return Rule{Kind: KindMonths, N: n} }

// Next returns the rule "next" at: the first instant strictly after the start at which at
// falls due, today if still to come, else tomorrow (see [KindNext]). A wall-clock time that
// happens twice counts once, at its first instant, as a daily schedule fires: on the day
// New York goes from 02:00 EDT back to 01:00 EST, Next(01:30) asked at 00:30 is 01:30 EDT,
// and asked at 01:45 EDT (or at 01:15 EST, after the clocks went back) it is 01:30 the next
// day. So a chain of Next rules, each counted from the one before's due time, is due once a
// day, whatever the clocks do.
func Next(at Clock) Rule { return Rule{Kind: KindNext, Time: at} }

// EndOfMonth returns the rule "last day of the month", of the start's month if n is 0, or of
// the month n months on.
func EndOfMonth(n int) Rule { return Rule{Kind: KindMonthEnd, N: n} }

// LastBusinessDayOfMonth returns the rule "last business day of the month", of the start's
// month if n is 0, or of the month n months on.
func LastBusinessDayOfMonth(n int) Rule { return Rule{Kind: KindBusinessMonthEnd, N: n} }

// BusinessHours returns the rule "n business hours after", counting only the hours from open
// to close on business days (see [KindBusinessHours]): BusinessHours(4, ClockOf(9, 0),
// ClockOf(17, 0)) from Friday 15:00 is Monday 11:00. n is 1 to [MaxBusinessHours].
func BusinessHours(n int, open, close Clock) Rule {
	return Rule{Kind: KindBusinessHours, N: n, Open: open, Close: close}
}

// NotBefore returns the rule that leaves an instant as it is on a business day from open
// on, and moves it forward to open on the next business day otherwise.
func NotBefore(open Clock) Rule { return Rule{Kind: KindInstant, Open: open} }

// At returns r due at the wall-clock time at on its day.
func (r Rule) At(at Clock) Rule { r.Time = at; return r }

// In returns r read in the IANA time zone zone, such as "Europe/Warsaw" or "UTC". Every rule
// needs one: computing a rule without a zone is an error, whatever the calendar (a
// [Calendar] says which days are business days, not where).
func (r Rule) In(zone string) Rule { r.Zone = zone; return r }

// NotBefore returns r rolled forward to open on a business day (see [Rule]).
func (r Rule) NotBefore(open Clock) Rule { r.Open, r.Close = open, Clock{}; return r }

// Within returns r rolled forward into business hours, from open to close on a business day
// (see [Rule]).
func (r Rule) Within(open, close Clock) Rule { r.Open, r.Close = open, close; return r }

// NeedsCalendar reports whether r asks a calendar which days are business days.
func (r Rule) NeedsCalendar() bool {
	return r.Kind == KindBusinessDays || r.Kind == KindBusinessMonthEnd || !r.Open.IsZero()
}

// Validate reports whether r is a rule that Due can compute, including whether its zone
// can be loaded. Errors wrap [ErrInvalidRule].
func (r Rule) Validate() error {
	if err := r.check(); err != nil {
		return err
	}
	_, err := r.location()
	return err
}

// check validates r but for its zone.
func (r Rule) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidRule, fmt.Sprintf(format, args...))
	}
	abs := max(r.N, -r.N)
	switch r.Kind {
	case KindInstant:
		if r.N != 0 || !r.Time.IsZero() {
			return bad("an instant rule takes no count and no time")
		}
		if r.Open.IsZero() {
			return bad("an instant rule needs business hours (open)")
		}
	case KindBusinessDays:
		if r.N == 0 || abs > MaxBusinessDays {
			return bad("business days: count %d, want 1 to %d either way", r.N, MaxBusinessDays)
		}
	case KindCalendarDays:
		if abs > MaxCalendarDays {
			return bad("calendar days: count %d, want at most %d either way", r.N, MaxCalendarDays)
		}
	case KindMonths, KindMonthEnd, KindBusinessMonthEnd:
		if abs > MaxMonths {
			return bad("%s: count %d, want at most %d either way", r.Kind, r.N, MaxMonths)
		}
	case KindBusinessHours:
		if r.N < 1 || r.N > MaxBusinessHours {
			return bad("business hours: count %d, want 1 to %d", r.N, MaxBusinessHours)
		}
		if !r.Time.IsZero() {
			return bad("a business hours rule takes no time")
		}
		if r.Open.IsZero() || r.Close.IsZero() {
			return bad("a business hours rule needs business hours, open and close (Within)")
		}
	case KindNext:
		if r.N != 0 {
			return bad("a next rule takes no count")
		}
		if r.Time.IsZero() {
			return bad("a next rule needs a time")
		}
	case "":
		if r == (Rule{}) {
			return bad("the zero Rule, which names no due time")
		}
		return bad("no kind")
	default:
		return bad("unknown kind %q", string(r.Kind))
	}
	for _, c := range [...]struct {
		what string
		c    Clock
	}{{"time", r.Time}, {"open", r.Open}, {"close", r.Close}} {
		if !c.c.IsZero() && !c.c.IsValid() {
			return bad("%s %d:%d is not a time of day", c.what, c.c.Hour(), c.c.Minute())
		}
	}
	if !r.Close.IsZero() {
		if r.Open.IsZero() {
			return bad("close %s without open", r.Close)
		}
		if r.Close.minutes() <= r.Open.minutes() {
			return bad("business hours %s-%s: close must be after open", r.Open, r.Close)
		}
	}
	return nil
}

func (r Rule) location() (*time.Location, error) {
	if r.Zone == "" {
		return nil, r.noZone()
	}
	loc, err := time.LoadLocation(r.Zone)
	if err != nil {
		return nil, fmt.Errorf("%w: zone %q: %w", ErrInvalidRule, r.Zone, err)
	}
	return loc, nil
}

// Due returns the instant r falls due, computed from the instant from with the calendar cal
// (which may be nil if r does not need one, see [Rule.NeedsCalendar]), in r's zone. The
// instant may be before from: "7 business days before" is. Due loads r's zone each time
// (with time.LoadLocation, some microseconds); [Rule.DueIn] takes a loaded one.
func (r Rule) Due(from time.Time, cal Calendar) (time.Time, error) {
	if err := r.check(); err != nil {
		return time.Time{}, err
	}
	loc, err := r.location()
	if err != nil {
		return time.Time{}, err
	}
	return r.due(from, cal, loc)
}

// DueIn is [Rule.Due] with r's zone already loaded, for callers that keep locations: loc's
// name must be r.Zone.
func (r Rule) DueIn(from time.Time, cal Calendar, loc *time.Location) (time.Time, error) {
	if err := r.check(); err != nil {
		return time.Time{}, err
	}
	if r.Zone == "" {
		return time.Time{}, r.noZone()
	}
	want := r.Zone
	if loc == nil || loc.String() != want {
		return time.Time{}, fmt.Errorf("%w: zone %q given for a rule in %q", ErrInvalidRule, loc, want)
	}
	return r.due(from, cal, loc)
}

func (r Rule) due(from time.Time, cal Calendar, loc *time.Location) (time.Time, error) {
	if cal == nil && r.NeedsCalendar() {
		return time.Time{}, fmt.Errorf("%w: nil calendar for rule %q", ErrInvalidCalendar, r)
	}
	start := from.In(loc)
	d := DateOf(start)
	var err error
	switch r.Kind {
	case KindInstant:
		return r.roll(start, cal, loc)
	case KindBusinessDays:
		d, err = addBusinessDays(d, r.N, cal)
	case KindCalendarDays:
		d = d.AddDays(r.N)
	case KindMonths:
		d = d.AddMonths(r.N)
	case KindMonthEnd:
		d = d.AddMonths(r.N).LastOfMonth()
	case KindBusinessMonthEnd:
		d, err = lastBusinessDay(d.AddMonths(r.N), cal)
	case KindNext:
		return r.roll(nextAt(from, d, r.Time, loc), cal, loc)
	case KindBusinessHours:
		return r.addBusinessHours(start, cal, loc)
	}
	if err != nil {
		return time.Time{}, err
	}
	if !d.IsValid() {
		return time.Time{}, fmt.Errorf("%w: rule %q from %s: day %s out of range", ErrInvalidRule, r, from, d)
	}
	var t time.Time
	if r.Time.IsZero() {
		t = resolve(d, start.Hour(), start.Minute(), start.Second(), start.Nanosecond(), loc)
	} else {
		t = d.In(r.Time, loc)
	}
	return r.roll(t, cal, loc)
}

// nextAt returns the first instant after from at which c falls due in loc, where d is from's
// date in loc: on each day, the one instant [Date.In] gives for c (the first of two the
// clocks went back over, or the one a gap moves it to).
func nextAt(from time.Time, d Date, c Clock, loc *time.Location) time.Time {
	// From the day before (a time in a gap just before midnight moves into from's day) to
	// two days after (from's date may be a day the clocks went back over midnight).
	for i := -1; i < 3; i++ {
		if t := d.AddDays(i).In(c, loc); t.After(from) {
			return t
		}
	}
	return d.AddDays(3).In(c, loc) // not reached: a day's wall clock comes round within three
}

// noZone is the error of a rule without a zone.
func (r Rule) noZone() error {
	return fmt.Errorf("%w: rule %q names no zone: give one with In, such as In(\"Europe/Warsaw\") or In(\"UTC\")", ErrInvalidRule, r)
}

// roll moves t into r's business hours, if r has them.
func (r Rule) roll(t time.Time, cal Calendar, loc *time.Location) (time.Time, error) {
	if r.Open.IsZero() {
		return t, nil
	}
	d := DateOf(t)
	if cal.IsBusinessDay(d) {
		sec := t.Hour()*3600 + t.Minute()*60 + t.Second()
		if sec < r.Open.minutes()*60 {
			return d.In(r.Open, loc), nil
		}
		if r.Close.IsZero() || sec < r.Close.minutes()*60 {
			return t, nil
		}
	}
	next, err := addBusinessDays(d, 1, cal)
	if err != nil {
		return time.Time{}, err
	}
	return next.In(r.Open, loc), nil
}

// addBusinessHours returns the instant r.N hours of business hours after start.
func (r Rule) addBusinessHours(start time.Time, cal Calendar, loc *time.Location) (time.Time, error) {
	t, err := r.roll(start, cal, loc) // within business hours, or at the next opening
	if err != nil {
		return time.Time{}, err
	}
	left := time.Duration(r.N) * time.Hour
	for days := 0; ; days++ {
		if days > MaxCalendarDays {
			return time.Time{}, fmt.Errorf("%w: rule %q from %s: more than %d days of business hours", ErrInvalidRule, r, start, MaxCalendarDays)
		}
		d := DateOf(t)
		end := d.In(r.Close, loc)
		if avail := end.Sub(t); left <= avail {
			return t.Add(left), nil
		} else if avail > 0 {
			left -= avail
		}
		next, err := addBusinessDays(d, 1, cal)
		if err != nil {
			return time.Time{}, err
		}
		if !next.IsValid() {
			return time.Time{}, fmt.Errorf("%w: rule %q from %s: day %s out of range", ErrInvalidRule, r, start, next)
		}
		t = next.In(r.Open, loc)
	}
}

// addBusinessDays returns the n-th business day after d (before d if n < 0).
func addBusinessDays(d Date, n int, cal Calendar) (Date, error) {
	step := 1
	if n < 0 {
		step, n = -1, -n
	}
	for ; n > 0; n-- {
		for gap := 0; ; gap++ {
			if gap == maxGap {
				return Date{}, fmt.Errorf("%w: calendar %s has none in the %d days from %s", ErrNoBusinessDay, RefOf(cal), maxGap, d)
			}
			d = d.AddDays(step)
			if cal.IsBusinessDay(d) {
				break
			}
		}
	}
	return d, nil
}

// lastBusinessDay returns the last business day of d's month.
func lastBusinessDay(d Date, cal Calendar) (Date, error) {
	for e := d.LastOfMonth(); e.Day >= 1; e.Day-- {
		if cal.IsBusinessDay(e) {
			return e, nil
		}
	}
	return Date{}, fmt.Errorf("%w: calendar %s has none in %04d-%02d", ErrNoBusinessDay, RefOf(cal), d.Year, int(d.Month))
}

// String returns r the way a person would say it, such as "3 business days after, at 09:00
// Europe/Warsaw" or "on a business day not before 09:00 America/New_York". The text of a
// rule does not change between versions of the package; [ParseRule] reads it back. It is
// for people (an operator's command line, a console); JSON is for storage. A rule without a
// zone, which cannot be computed, is written without one, and the zero Rule as "no rule";
// ParseRule refuses both.
func (r Rule) String() string {
	if r == (Rule{}) {
		return "no rule"
	}
	var parts []string
	switch r.Kind {
	case KindInstant:
	case KindBusinessDays:
		switch r.N {
		case 1:
			parts = append(parts, "next business day")
		case -1:
			parts = append(parts, "previous business day")
		default:
			parts = append(parts, count(r.N, "business day"))
		}
	case KindCalendarDays:
		if r.N == 0 {
			parts = append(parts, "the same day")
		} else {
			parts = append(parts, count(r.N, "calendar day"))
		}
	case KindMonths:
		parts = append(parts, count(r.N, "month"))
	case KindMonthEnd:
		parts = append(parts, monthPhrase("last day of", r.N))
	case KindBusinessMonthEnd:
		parts = append(parts, monthPhrase("last business day of", r.N))
	case KindNext:
		parts = append(parts, "next "+r.Time.String())
	case KindBusinessHours:
		parts = append(parts, count(r.N, "business hour"))
	default:
		parts = append(parts, fmt.Sprintf("kind %q, n %d", string(r.Kind), r.N))
	}
	if !r.Time.IsZero() && r.Kind != KindNext {
		parts = append(parts, "at "+r.Time.String())
	}
	if !r.Open.IsZero() {
		if r.Close.IsZero() {
			parts = append(parts, "on a business day not before "+r.Open.String())
		} else {
			parts = append(parts, "on a business day within "+r.Open.String()+"-"+r.Close.String())
		}
	}
	s := strings.Join(parts, ", ")
	if r.Zone == "" {
		return s // invalid: a rule names its zone
	}
	if r.Time.IsZero() && r.Open.IsZero() {
		return s + " in " + r.Zone
	}
	return s + " " + r.Zone
}

// count returns "3 business days after", "1 business day before", "0 months after".
func count(n int, unit string) string {
	if n != 1 && n != -1 {
		unit += "s"
	}
	if n < 0 {
		return strconv.Itoa(-n) + " " + unit + " before"
	}
	return strconv.Itoa(n) + " " + unit + " after"
}

func monthPhrase(what string, n int) string {
	switch n {
	case 0:
		return what + " the month"
	case 1:
		return what + " next month"
	case -1:
		return what + " previous month"
	}
	return what + " the month " + count(n, "month")
}

// UnmarshalJSON decodes a rule and checks it (but for its zone, which Due loads): unknown
// fields and invalid rules are errors wrapping [ErrInvalidRule]. The zero Rule, which
// encodes as {"kind":""}, decodes without error (as does {}), so that a Rule field left
// unset in saga data survives a round trip; computing it is an error. null leaves r as it
// is, as encoding/json does for other values.
func (r *Rule) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil // as encoding/json leaves a value it reads null into
	}
	type plain Rule
	var v plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRule, err)
	}
	if Rule(v) == (Rule{}) {
		*r = Rule{}
		return nil
	}
	if err := Rule(v).check(); err != nil {
		return err
	}
	*r = Rule(v)
	return nil
}
