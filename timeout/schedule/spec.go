package schedule

import (
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
)

// Spec says when a schedule's occurrences are: a cron expression read in a
// time zone, a calendar rule applied again and again, or a fixed interval.
// Exactly one of Cron, Rule and Every is set; Create refuses a spec with
// none or more than one (ErrInvalidSpec).
type Spec struct {
	// Cron is a five-field cron expression (minute 0-59, hour 0-23, day of
	// month 1-31, month 1-12, day of week 0-7), read in Zone. A field is a
	// list of items separated by commas (1,15); an item is "*" (every
	// value), a value, or a range (9-17, mon-fri), optionally followed by a
	// step "/n", n from 1 to the field's largest value: */15 (0, 15, 30,
	// 45), 9-17/2, and a value with a step runs to the field's end: 0/15 is
	// */15, 5/15 is 5, 20, 35, 50, mon/2 is Monday, Wednesday and Friday.
	// Months and days of the week may be named (jan-dec, sun-sat, in any
	// case); 0 and 7 are Sunday. A macro may stand for the whole expression:
	// @hourly, @daily (@midnight), @weekly, @monthly, @yearly (@annually).
	// Seconds, years and Quartz's ?, L, W and # are not accepted.
	//
	// The day fields are read as Vixie cron reads them. A day field that
	// starts with "*" ("*", "*/10", "*,15") is unrestricted; any other is
	// restricted. When both are restricted a day matches either: "0 0 1,15
	// * mon" is the 1st, the 15th and every Monday. Otherwise a day must
	// match both: "0 0 */10 * sun" is a Sunday that is the 1st, 11th, 21st
	// or 31st ("1-31/10", the same days spelt without "*", would be those
	// days and every Sunday).
	//
	// With Calendar set, it fires only on the calendar's business days
	// ("*/15 9-16 * * *" on a calendar: every 15 minutes within business
	// hours). Default: empty.
	Cron string `json:"cron,omitempty"`
	// Zone is the IANA time zone Cron is read in ("Europe/Warsaw", "UTC").
	// Required with Cron; a Rule names its own zone.
	Zone string `json:"zone,omitempty"`
	// Rule makes each occurrence the rule's due time counted from the one
	// before (Rule.Due), the first counted from the schedule's Start:
	// calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
	// is every second business day at 09:00, and
	// calendar.LastBusinessDayOfMonth(1).At(calendar.ClockOf(18, 0)) the last
	// business day of each month at 18:00 (the first in the month after
	// Start's). The rule must move forward: a count of at least 1, or
	// calendar.Next. Default: nil.
	Rule *calendar.Rule `json:"rule,omitempty"`
	// Calendar names the calendar (in the Scheduler's registry, see
	// WithCalendars) a Rule counts business days on, or whose business days
	// a Cron is limited to. Required with a Rule that needs one; optional
	// with Cron. Default: none.
	Calendar calendar.Ref `json:"calendar,omitzero"`
	// Every makes the occurrences Start, Start+Every, Start+2·Every, ...:
	// elapsed time, whatever the zone and the calendar (which it does not
	// take). At least a second. Default: 0.
	Every time.Duration `json:"every,omitempty"`
}

// planner computes a spec's occurrences with its calendar resolved.
type planner struct {
	spec Spec
	cron cron
	loc  *time.Location
	cal  calendar.Calendar
	// start anchors Every.
	start time.Time
}

// validate reports what is wrong with s as an error wrapping ErrInvalidSpec
// (or ErrNeverFires, for an expression that names no existing day).
func (s Spec) validate() error {
	n := 0
	for _, set := range []bool{s.Cron != "", s.Rule != nil, s.Every != 0} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return fmt.Errorf("%w: neither a cron expression, a rule nor an interval", ErrInvalidSpec)
	case n > 1:
		return fmt.Errorf("%w: more than one of a cron expression, a rule and an interval: give one", ErrInvalidSpec)
	case s.Every != 0:
		if s.Every < time.Second {
			return fmt.Errorf("%w: interval %s: at least 1s", ErrInvalidSpec, s.Every)
		}
		if s.Calendar != (calendar.Ref{}) || s.Zone != "" {
			return fmt.Errorf("%w: an interval takes no zone and no calendar", ErrInvalidSpec)
		}
		return nil
	case s.Cron != "":
		if s.Zone == "" {
			return fmt.Errorf("%w: cron %q without a zone (use \"UTC\" for UTC)", ErrInvalidSpec, s.Cron)
		}
		if _, err := time.LoadLocation(s.Zone); err != nil {
			return fmt.Errorf("%w: zone %q: %v", ErrInvalidSpec, s.Zone, err)
		}
		_, err := parseCron(s.Cron)
		return err
	}
	r := *s.Rule
	if err := r.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if s.Zone != "" && s.Zone != r.Zone {
		return fmt.Errorf("%w: zone %q beside a rule in %q: a rule names its own zone", ErrInvalidSpec, s.Zone, r.Zone)
	}
	switch r.Kind {
	case calendar.KindNext:
	case calendar.KindBusinessDays, calendar.KindCalendarDays, calendar.KindMonths,
		calendar.KindMonthEnd, calendar.KindBusinessMonthEnd, calendar.KindBusinessHours:
		if r.N < 1 {
			return fmt.Errorf("%w: rule %s does not move forward: a recurring rule needs a count of at least 1", ErrInvalidSpec, r)
		}
	default:
		return fmt.Errorf("%w: rule kind %q cannot recur", ErrInvalidSpec, r.Kind)
	}
	if r.NeedsCalendar() && s.Calendar == (calendar.Ref{}) {
		return fmt.Errorf("%w: rule %s needs a calendar", ErrInvalidSpec, r)
	}
	return nil
}

// newPlanner resolves s's zone and calendar (from reg, if s names one).
func newPlanner(s Spec, reg *calendar.Registry, start time.Time) (*planner, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	p := &planner{spec: s, start: start}
	if s.Every != 0 {
		return p, nil
	}
	if s.Calendar != (calendar.Ref{}) {
		if reg == nil {
			return nil, fmt.Errorf("%w: spec names calendar %s and the scheduler has no registry (WithCalendars)", ErrInvalidSpec, s.Calendar)
		}
		cal, err := reg.Lookup(s.Calendar)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
		p.cal = cal
	}
	zone := s.Zone
	if s.Rule != nil {
		zone = s.Rule.Zone
	} else {
		p.cron, _ = parseCron(s.Cron)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w: zone %q: %v", ErrInvalidSpec, zone, err)
	}
	p.loc = loc
	return p, nil
}

// next returns the occurrence after prev: for a cron spec the first
// instant strictly after prev; for a rule the rule's due time counted from
// prev (the previous occurrence, or the schedule's start for the first).
func (p *planner) next(prev time.Time) (time.Time, error) {
	if e := p.spec.Every; e != 0 {
		k := prev.Sub(p.start) / e // the occurrences before start count back from it too
		if prev.Before(p.start) && prev.Sub(p.start)%e != 0 {
			k-- // floor, not truncation toward zero
		}
		return p.start.Add((k + 1) * e), nil
	}
	if p.spec.Rule == nil {
		return p.cron.next(prev, p.loc, p.cal)
	}
	t, err := p.spec.Rule.DueIn(prev, p.cal, p.loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrNeverFires, err)
	}
	if !t.After(prev) {
		return time.Time{}, fmt.Errorf("%w: rule %s from %s is %s, not after it", ErrNeverFires, p.spec.Rule, prev.Format(time.RFC3339), t.Format(time.RFC3339))
	}
	return t.Truncate(time.Second), nil
}

// ZoneName returns the time zone occurrences are read in: Zone, the rule's, or "UTC" for an interval.
func (s Spec) ZoneName() string {
	switch {
	case s.Rule != nil:
		return s.Rule.Zone
	case s.Every != 0:
		return "UTC"
	}
	return s.Zone
}

// String returns the spec for people: the cron expression and its zone, or
// the rule's wording, and the calendar.
func (s Spec) String() string {
	var out string
	switch {
	case s.Every != 0:
		out = "every " + s.Every.String()
	case s.Rule != nil:
		out = s.Rule.String()
	default:
		out = fmt.Sprintf("cron %q in %s", s.Cron, s.Zone)
	}
	if s.Calendar != (calendar.Ref{}) {
		out += " on calendar " + s.Calendar.String()
	}
	return out
}
