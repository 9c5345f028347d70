package calendar

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseRule reads a rule in the form [Rule.String] writes, such as "3 business days after,
// at 09:00 Europe/Warsaw" or "7 calendar days before, on a business day not before 09:00
// UTC": ParseRule(r.String()) returns r for every valid rule r. The zone is the last word,
// and is not loaded (see [Rule.Validate]); a rule without one is an error that says so.
// Errors wrap [ErrInvalidRule].
func ParseRule(s string) (Rule, error) {
	r, err := parseRule(s)
	if err == nil {
		return r, nil
	}
	// Is the zone all that is missing?
	if r, e := parseBody(s); e == nil && r.check() == nil && r.String() == s {
		return Rule{}, fmt.Errorf("%w: %q: no zone: end the rule with an IANA zone, such as %q or %q",
			ErrInvalidRule, s, r.In("Europe/Warsaw"), r.In("UTC"))
	}
	return Rule{}, err
}

func parseRule(s string) (Rule, error) {
	bad := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf("%w: %q: %s", ErrInvalidRule, s, fmt.Sprintf(format, args...))
	}
	i := strings.LastIndexByte(s, ' ')
	if i < 0 {
		return bad("want a rule and a zone, such as \"3 business days after, at 09:00 Europe/Warsaw\"")
	}
	body, zone := s[:i], s[i+1:]
	body = strings.TrimSuffix(body, " in")
	r, err := parseBody(body)
	if err != nil {
		return bad("%v", err)
	}
	r.Zone = zone
	if err := r.check(); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	if r.String() != s {
		// A rule reads back only in the form String writes ("in" before a zone exactly when
		// the rule names no time).
		return bad("did you mean %q?", r.String())
	}
	return r, nil
}

// parseBody reads a rule but for its zone: the text before it, "in" apart. It does not check
// the rule.
func parseBody(body string) (Rule, error) {
	bad := func(format string, args ...any) (Rule, error) {
		return Rule{}, fmt.Errorf(format, args...)
	}
	var r Rule
	parts := strings.Split(body, ", ")
	// The move, unless the rule is an instant rolled into business hours.
	if strings.HasPrefix(parts[0], "on a business day") {
		r.Kind = KindInstant
	} else {
		if err := parseMove(parts[0], &r); err != nil {
			return bad("%v", err)
		}
		parts = parts[1:]
	}
	if len(parts) > 0 && strings.HasPrefix(parts[0], "at ") {
		if r.Kind == KindNext {
			return bad("a next rule has its time in \"next HH:MM\"")
		}
		c, err := ParseClock(strings.TrimPrefix(parts[0], "at "))
		if err != nil {
			return bad("%v", err)
		}
		r.Time, parts = c, parts[1:]
	}
	if len(parts) > 0 {
		p := parts[0]
		switch {
		case strings.HasPrefix(p, "on a business day not before "):
			c, err := ParseClock(strings.TrimPrefix(p, "on a business day not before "))
			if err != nil {
				return bad("%v", err)
			}
			r.Open = c
		case strings.HasPrefix(p, "on a business day within "):
			open, close, ok := strings.Cut(strings.TrimPrefix(p, "on a business day within "), "-")
			if !ok {
				return bad("want \"within HH:MM-HH:MM\"")
			}
			o, err := ParseClock(open)
			if err != nil {
				return bad("%v", err)
			}
			c, err := ParseClock(close)
			if err != nil {
				return bad("%v", err)
			}
			r.Open, r.Close = o, c
		default:
			return bad("unexpected %q", p)
		}
		parts = parts[1:]
	}
	if len(parts) > 0 {
		return bad("unexpected %q", strings.Join(parts, ", "))
	}
	return r, nil
}

// parseMove reads the first part of a rule: how it moves to its day.
func parseMove(p string, r *Rule) error {
	switch p {
	case "next business day":
		r.Kind, r.N = KindBusinessDays, 1
		return nil
	case "previous business day":
		r.Kind, r.N = KindBusinessDays, -1
		return nil
	case "the same day":
		r.Kind = KindCalendarDays
		return nil
	}
	if c, ok := strings.CutPrefix(p, "next "); ok {
		t, err := ParseClock(c)
		if err != nil {
			return err
		}
		r.Kind, r.Time = KindNext, t
		return nil
	}
	for _, m := range [...]struct {
		prefix string
		kind   Kind
	}{{"last business day of ", KindBusinessMonthEnd}, {"last day of ", KindMonthEnd}} {
		rest, ok := strings.CutPrefix(p, m.prefix)
		if !ok {
			continue
		}
		r.Kind = m.kind
		switch rest {
		case "the month":
			return nil
		case "next month":
			r.N = 1
			return nil
		case "previous month":
			r.N = -1
			return nil
		}
		rest, ok = strings.CutPrefix(rest, "the month ")
		if !ok {
			return fmt.Errorf("want \"%sthe month\", \"next month\", \"previous month\" or \"the month N months after\"", m.prefix)
		}
		n, err := parseCount(rest, "month")
		r.N = n
		return err
	}
	for _, u := range [...]struct {
		unit string
		kind Kind
	}{{"business day", KindBusinessDays}, {"business hour", KindBusinessHours}, {"calendar day", KindCalendarDays}, {"month", KindMonths}} {
		if strings.Contains(p, " "+u.unit) {
			n, err := parseCount(p, u.unit)
			r.Kind, r.N = u.kind, n
			return err
		}
	}
	return fmt.Errorf("unknown rule %q", p)
}

// parseCount reads "3 business days after" or "1 month before" for unit "business day" or
// "month".
func parseCount(p, unit string) (int, error) {
	f := strings.Fields(p)
	if len(f) < 3 || strings.Join(f[1:len(f)-1], " ") != unit && strings.Join(f[1:len(f)-1], " ") != unit+"s" {
		return 0, fmt.Errorf("want \"N %ss after\" or \"N %ss before\", got %q", unit, unit, p)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 0 || f[0][0] == '+' {
		return 0, fmt.Errorf("%q: want a count of %ss", f[0], unit)
	}
	switch f[len(f)-1] {
	case "after":
		return n, nil
	case "before":
		return -n, nil
	}
	return 0, fmt.Errorf("want after or before, got %q", f[len(f)-1])
}
