package calendar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Errors of the package. Every error it returns wraps one of them; match with errors.Is.
var (
	// ErrInvalidOption: an option given to New is invalid.
	ErrInvalidOption = errors.New("calendar: invalid option")
	// ErrInvalidCalendar: a calendar file cannot be read, or a calendar cannot be used
	// (nil, or already in a Registry).
	ErrInvalidCalendar = errors.New("calendar: invalid calendar")
	// ErrInvalidRule: a rule is invalid, or its JSON cannot be decoded.
	ErrInvalidRule = errors.New("calendar: invalid rule")
	// ErrNoBusinessDay: a rule looked for a business day and found none within 366 days
	// (or, for the last business day of a month, in the month).
	ErrNoBusinessDay = errors.New("calendar: no business day")
	// ErrUnknownCalendar: a Registry has no calendar of that name and version.
	ErrUnknownCalendar = errors.New("calendar: unknown calendar")
)

// Calendar says which days are business days. Its name and version identify it: a timeout
// stores them beside its rule, and two calendars with the same name and version must answer
// the same for every day. Change a calendar (add a holiday) under a new version.
//
// Implementations must be safe for concurrent use and answer quickly (a rule asks once per
// day it moves over); [New] builds the usual kind, a weekend and holidays.
type Calendar interface {
	Name() string
	Version() string
	IsBusinessDay(d Date) bool
}

// Ref identifies a calendar by name and version. It is what a stored timeout keeps, and
// what [Registry.Lookup] takes; in JSON it is {"name":"…","version":"…"}.
type Ref struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// RefOf returns the name and version of c.
func RefOf(c Calendar) Ref {
	return Ref{Name: c.Name(), Version: c.Version()}
}

// String returns "name@version".
func (r Ref) String() string { return r.Name + "@" + r.Version }

// Holiday is a day off: one date (Year set), or a day every year (Year 0): the same month and
// day, or, with Nth and Weekday instead of Day, the Nth Weekday of the month ("the fourth
// Thursday of November").
type Holiday struct {
	Year  int // 0: every year
	Month time.Month
	Day   int // 0 with Nth: the Nth Weekday of Month
	Name  string
	// Nth, with Weekday, makes a yearly holiday on the Nth Weekday of Month: 1 to 4, or -1
	// for the last. Year and Day are then 0.
	Nth     int
	Weekday time.Weekday
	// Observed makes a yearly holiday on a month and day also a day off on the Friday before
	// when it falls on a Saturday, and on the Monday after when it falls on a Sunday (the
	// rule of the United States' federal holidays). The day itself stays a holiday.
	Observed bool
}

// String returns the holiday as a line of a calendar file: "2026-12-24 Christmas Eve",
// "*-12-25 Christmas", "*-11-Thu#4 Thanksgiving", "*-05-Mon#last Memorial Day" or "observed
// *-07-04 Independence Day".
func (h Holiday) String() string {
	switch {
	case h.Nth != 0:
		n := strconv.Itoa(h.Nth)
		if h.Nth == -1 {
			n = "last"
		}
		wd := fmt.Sprintf("weekday(%d)", int(h.Weekday))
		if h.Weekday >= time.Sunday && h.Weekday <= time.Saturday {
			wd = h.Weekday.String()[:3]
		}
		return fmt.Sprintf("*-%02d-%s#%s %s", int(h.Month), wd, n, h.Name)
	case h.Observed:
		return fmt.Sprintf("observed *-%02d-%02d %s", int(h.Month), h.Day, h.Name)
	case h.Year == 0:
		return fmt.Sprintf("*-%02d-%02d %s", int(h.Month), h.Day, h.Name)
	}
	return fmt.Sprintf("%04d-%02d-%02d %s", h.Year, int(h.Month), h.Day, h.Name)
}

func (h Holiday) validate() error {
	if strings.TrimSpace(h.Name) == "" {
		return fmt.Errorf("holiday %s has no name", h)
	}
	if h.Nth != 0 {
		switch {
		case h.Year != 0 || h.Day != 0 || h.Observed:
			return fmt.Errorf("holiday %q: the Nth weekday of a month is yearly, without a day, and not observed on another", h.String())
		case h.Nth < -1 || h.Nth > 4:
			return fmt.Errorf("holiday %q: Nth %d, want 1 to 4, or -1 for the last", h.String(), h.Nth)
		case h.Month < time.January || h.Month > time.December:
			return fmt.Errorf("holiday %q: month %d", h.String(), int(h.Month))
		case h.Weekday < time.Sunday || h.Weekday > time.Saturday:
			return fmt.Errorf("holiday %q: %d is not a day of the week", h.String(), int(h.Weekday))
		}
		return nil
	}
	if h.Weekday != 0 {
		return fmt.Errorf("holiday %q: a weekday without Nth", h.String())
	}
	if h.Year == 0 {
		// February 29 is allowed: it is a holiday in leap years.
		if !(Date{2000, h.Month, h.Day}).IsValid() {
			return fmt.Errorf("holiday %q: no such day in any year", h.String())
		}
		return nil
	}
	if h.Observed {
		return fmt.Errorf("holiday %q: only a yearly holiday is observed on another day", h.String())
	}
	if !(Date{h.Year, h.Month, h.Day}).IsValid() {
		return fmt.Errorf("holiday %q: no such day", h.String())
	}
	return nil
}

// Option configures a calendar built by [New].
type Option func(*Standard) error

// Weekend sets the days of the week that are not business days; the default is Saturday and
// Sunday. Weekend() with no days makes every day a business day, holidays apart. A
// weekend of all seven days is an error: such a calendar has no business day.
func Weekend(days ...time.Weekday) Option {
	return func(s *Standard) error {
		var mask uint8
		for _, d := range days {
			if d < time.Sunday || d > time.Saturday {
				return fmt.Errorf("weekend: %d is not a day of the week", int(d))
			}
			mask |= 1 << d
		}
		if mask == 0x7f {
			return errors.New("weekend: every day of the week is a weekend day, so no day is a business day")
		}
		s.weekend = mask
		return nil
	}
}

// On makes one date a holiday.
func On(d Date, name string) Option {
	return Holidays(Holiday{Year: d.Year, Month: d.Month, Day: d.Day, Name: name})
}

// Yearly makes the same day of every year a holiday. February 29 is a holiday in leap years
// only.
func Yearly(month time.Month, day int, name string) Option {
	return Holidays(Holiday{Month: month, Day: day, Name: name})
}

// NthWeekday makes the nth weekday of month a holiday every year: NthWeekday(time.November,
// 4, time.Thursday, "Thanksgiving Day"), or with n -1 the last: NthWeekday(time.May, -1,
// time.Monday, "Memorial Day"). n is 1 to 4, or -1.
func NthWeekday(month time.Month, n int, weekday time.Weekday, name string) Option {
	return Holidays(Holiday{Month: month, Nth: n, Weekday: weekday, Name: name})
}

// YearlyObserved makes the same day of every year a holiday, as [Yearly] does, and also the
// day it is observed on when it falls on a weekend: the Friday before a Saturday, the Monday
// after a Sunday, even across the end of a year (New Year's Day on a Saturday is observed on
// December 31). The observed day is named "name (observed)". This is the rule of the United
// States' federal holidays, whatever the calendar's weekend; others, such as the United
// Kingdom's substitute days (Christmas on a Saturday observed on Monday, Boxing Day on
// Tuesday), are not built in: list those days with [On], or implement [Calendar].
func YearlyObserved(month time.Month, day int, name string) Option {
	return Holidays(Holiday{Month: month, Day: day, Observed: true, Name: name})
}

// Holidays adds holidays, dated or yearly, such as those a calendar file lists.
func Holidays(hs ...Holiday) Option {
	return func(s *Standard) error {
		for _, h := range hs {
			if err := h.validate(); err != nil {
				return err
			}
			switch {
			case h.Nth != 0:
				s.nth[nthDay{h.Month, h.Nth, h.Weekday}] = h.Name
			case h.Year == 0:
				s.yearly[monthDay{h.Month, h.Day}] = h.Name
				if h.Observed {
					s.observed[monthDay{h.Month, h.Day}] = h.Name
				}
			default:
				s.dated[Date{h.Year, h.Month, h.Day}] = h.Name
			}
		}
		return nil
	}
}

// Easter makes the day offset days after Western (Gregorian) Easter Sunday a holiday in every
// year: Easter(1, "Easter Monday"), Easter(-2, "Good Friday"), Easter(60, "Corpus Christi").
// The offset is from -80 to 250, which keeps the day in the year of its Easter.
func Easter(offset int, name string) Option {
	return func(s *Standard) error {
		if strings.TrimSpace(name) == "" {
			return fmt.Errorf("easter%+d has no name", offset)
		}
		if offset < -80 || offset > 250 {
			return fmt.Errorf("easter%+d: offset out of range -80..250", offset)
		}
		s.easter[offset] = name
		return nil
	}
}

type monthDay struct {
	month time.Month
	day   int
}

// nthDay is the nth weekday of a month (n -1: the last).
type nthDay struct {
	month   time.Month
	n       int
	weekday time.Weekday
}

// Standard is a calendar of a weekend and holidays, built by [New]. It is immutable and
// safe for concurrent use.
type Standard struct {
	name, version string
	weekend       uint8 // bit d set: time.Weekday d is a weekend day
	dated         map[Date]string
	yearly        map[monthDay]string
	observed      map[monthDay]string // yearly days also observed on the Friday or Monday
	nth           map[nthDay]string
	easter        map[int]string // days after Easter Sunday
}

// New returns a calendar named name at version version, with a weekend of Saturday and
// Sunday unless an option says otherwise. Name and version must be non-empty, without
// leading or trailing spaces. Invalid options make an error wrapping [ErrInvalidOption].
//
//	cal, err := calendar.New("pl", "2026.1",
//		calendar.Yearly(time.December, 25, "Christmas"),
//		calendar.Easter(1, "Easter Monday"),
//		calendar.On(calendar.Date{Year: 2026, Month: time.December, Day: 24}, "Christmas Eve"))
func New(name, version string, opts ...Option) (*Standard, error) {
	for _, f := range [...]struct{ what, v string }{{"name", name}, {"version", version}} {
		if f.v == "" || strings.TrimSpace(f.v) != f.v || strings.ContainsAny(f.v, "\n\r\t") {
			return nil, fmt.Errorf("%w: calendar %s %q: want non-empty text without surrounding space", ErrInvalidOption, f.what, f.v)
		}
	}
	s := &Standard{
		name: name, version: version,
		weekend:  1<<time.Saturday | 1<<time.Sunday,
		dated:    map[Date]string{},
		yearly:   map[monthDay]string{},
		observed: map[monthDay]string{},
		nth:      map[nthDay]string{},
		easter:   map[int]string{},
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, fmt.Errorf("%w: calendar %s: %w", ErrInvalidOption, Ref{name, version}, err)
		}
	}
	return s, nil
}

// Name returns the calendar's name.
func (s *Standard) Name() string { return s.name }

// Version returns the calendar's version.
func (s *Standard) Version() string { return s.version }

// IsBusinessDay reports whether d is neither a weekend day nor a holiday.
func (s *Standard) IsBusinessDay(d Date) bool {
	if s.weekend&(1<<d.Weekday()) != 0 {
		return false
	}
	_, holiday := s.Holiday(d)
	return !holiday
}

// IsWeekend reports whether d falls on a weekend day.
func (s *Standard) IsWeekend(d Date) bool {
	return s.weekend&(1<<d.Weekday()) != 0
}

// Holiday returns the name of the holiday on d, if d is one. Where two holidays fall on the
// same day, a dated one is named first, then a yearly one, an Nth weekday, an Easter one,
// and last a yearly one observed on d ("Independence Day (observed)").
func (s *Standard) Holiday(d Date) (name string, ok bool) {
	if name, ok := s.dated[d]; ok {
		return name, true
	}
	if name, ok := s.yearly[monthDay{d.Month, d.Day}]; ok {
		return name, true
	}
	if len(s.nth) > 0 {
		wd := d.Weekday()
		if name, ok := s.nth[nthDay{d.Month, (d.Day-1)/7 + 1, wd}]; ok {
			return name, true
		}
		if d.Day+7 > daysIn(d.Year, d.Month) {
			if name, ok := s.nth[nthDay{d.Month, -1, wd}]; ok {
				return name, true
			}
		}
	}
	if len(s.easter) > 0 {
		if name, ok := s.easter[easterSunday(d.Year).DaysUntil(d)]; ok {
			return name, true
		}
	}
	if len(s.observed) > 0 {
		var on Date // the weekend day a holiday observed on d falls on
		switch d.Weekday() {
		case time.Friday:
			on = d.AddDays(1)
		case time.Monday:
			on = d.AddDays(-1)
		}
		if name, ok := s.observed[monthDay{on.Month, on.Day}]; ok && on != (Date{}) {
			return name + " (observed)", true
		}
	}
	return "", false
}

// easterSunday returns the date of Western Easter Sunday in year y (the anonymous Gregorian
// algorithm, "Meeus/Jones/Butcher").
func easterSunday(y int) Date {
	a := y % 19
	b, c := y/100, y%100
	d, e := b/4, b%4
	f := (b + 8) / 25
	g := (b - f + 1) / 3
	h := (19*a + b - d - g + 15) % 30
	i, k := c/4, c%4
	l := (32 + 2*e + 2*i - h - k) % 7
	m := (a + 11*h + 22*l) / 451
	month := (h + l - 7*m + 114) / 31
	day := (h+l-7*m+114)%31 + 1
	return Date{y, time.Month(month), day}
}
