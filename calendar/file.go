package calendar

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Load reads a calendar file and returns the option that applies it, for [New]:
//
//	f, err := os.Open("pl.cal")
//	...
//	days, err := calendar.Load(f)
//	...
//	cal, err := calendar.New("pl", "2026.1", days)
//
// A calendar file is UTF-8 text (a byte order mark and CRLF line ends are accepted), one
// entry a line; blank lines and lines starting with # are ignored, and so is space around an
// entry:
//
//	# Poland
//	weekend Sat Sun              the weekend days (optional, at most once; "weekend" alone: none)
//	*-01-01 New Year's Day       a holiday every year on that month and day
//	2026-12-24 Christmas Eve     a holiday on that date only
//	easter+1 Easter Monday       a holiday a number of days after (or before: easter-2) Easter Sunday
//
// and, for holidays such as those of the United States:
//
//	*-11-Thu#4 Thanksgiving Day          the 4th Thursday of November every year (#1 to #4)
//	*-05-Mon#last Memorial Day           the last Monday of May every year
//	observed *-07-04 Independence Day    every year on July 4, and on the Friday before when that is
//	                                     a Saturday, the Monday after when a Sunday
//
// as [NthWeekday] and [YearlyObserved] make them.
// Every holiday has a name, the rest of its line. Days of the week are written as their
// English name or its first three letters, in any case. A date listed twice, or a yearly
// day or Nth weekday listed twice (observed or not), is an error, as is an entry that New
// would reject. Errors wrap [ErrInvalidCalendar] and name the line: "calendar: invalid
// calendar: line 7: …". [Holiday.String] writes a holiday as its line.
func Load(r io.Reader) (Option, error) {
	var (
		weekend    []time.Weekday
		weekendSet bool
		holidays   []Holiday
		easter     []Option
		seen       = map[string]int{} // entry key -> line
	)
	sc := bufio.NewScanner(r)
	line := 0
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: line %d: %s", ErrInvalidCalendar, line, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff") // a byte order mark some editors write
		}
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		first, rest := text, ""
		if i := strings.IndexAny(text, " \t"); i >= 0 {
			first, rest = text[:i], strings.TrimSpace(text[i+1:])
		}
		switch {
		case strings.EqualFold(first, "weekend"):
			if weekendSet {
				return nil, fail("weekend given twice (first on line %d)", seen["weekend"])
			}
			weekendSet, seen["weekend"] = true, line
			for _, f := range strings.Fields(rest) {
				d, ok := parseWeekday(f)
				if !ok {
					return nil, fail("%q is not a day of the week", f)
				}
				weekend = append(weekend, d)
			}
			if len(weekend) == 7 {
				return nil, fail("every day of the week is a weekend day, so no day is a business day")
			}
			continue
		}
		observed := false
		if strings.EqualFold(first, "observed") {
			observed = true
			first, rest = rest, ""
			if i := strings.IndexAny(first, " \t"); i >= 0 {
				first, rest = first[:i], strings.TrimSpace(first[i+1:])
			}
			if !strings.HasPrefix(first, "*-") || strings.Contains(first, "#") || rest == "" {
				return nil, fail("observed %q: want observed *-MM-DD and a name, such as \"observed *-07-04 Independence Day\"", first)
			}
		}
		if rest == "" {
			return nil, fail("%q has no name: want a date and a name, such as \"2026-12-24 Christmas Eve\"", first)
		}
		key := first
		var h *Holiday
		switch {
		case strings.HasPrefix(first, "*-") && strings.Contains(first, "#"):
			n, ok := parseNth(first)
			if !ok {
				return nil, fail("%q: want *-MM-Day#N, N from 1 to 4 or last, such as \"*-11-Thu#4 Thanksgiving\"", first)
			}
			n.Name = rest
			key = n.String()[:len(n.String())-len(rest)-1]
			h = &n
		case strings.HasPrefix(first, "*-"):
			d, err := ParseDate("2000" + first[1:]) // a leap year, so that *-02-29 parses
			if err != nil {
				return nil, fail("yearly day %q: want *-MM-DD, a month and day that exist", first)
			}
			h = &Holiday{Month: d.Month, Day: d.Day, Name: rest, Observed: observed}
		case strings.HasPrefix(strings.ToLower(first), "easter"):
			off := 0
			if s := first[len("easter"):]; s != "" {
				n, err := strconv.Atoi(s)
				if err != nil || (s[0] != '+' && s[0] != '-') {
					return nil, fail("%q: want easter, easter+N or easter-N", first)
				}
				off = n
			}
			if off < -80 || off > 250 {
				return nil, fail("%q: offset out of range -80..250", first)
			}
			easter = append(easter, Easter(off, rest))
		default:
			d, err := ParseDate(first)
			if err != nil {
				return nil, fail("%v", err)
			}
			h = &Holiday{Year: d.Year, Month: d.Month, Day: d.Day, Name: rest}
		}
		if prev, dup := seen[key]; dup {
			return nil, fail("%s is already listed on line %d", key, prev)
		}
		seen[key] = line
		if h != nil {
			holidays = append(holidays, *h)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: after line %d: %w", ErrInvalidCalendar, line, err)
	}
	return func(s *Standard) error {
		if weekendSet {
			if err := Weekend(weekend...)(s); err != nil {
				return err
			}
		}
		for _, o := range easter {
			if err := o(s); err != nil {
				return err
			}
		}
		return Holidays(holidays...)(s)
	}, nil
}

// parseNth reads "*-11-Thu#4" or "*-05-Mon#last" as a holiday without its name.
func parseNth(s string) (Holiday, bool) {
	rest, ok := strings.CutPrefix(s, "*-")
	if !ok || len(rest) < 3 || rest[2] != '-' {
		return Holiday{}, false
	}
	m, ok := digits(rest[:2])
	if !ok || m < 1 || m > 12 {
		return Holiday{}, false
	}
	day, nth, ok := strings.Cut(rest[3:], "#")
	if !ok {
		return Holiday{}, false
	}
	wd, ok := parseWeekday(day)
	if !ok {
		return Holiday{}, false
	}
	n := -1
	if nth != "last" {
		if n, ok = digits(nth); !ok || len(nth) != 1 || n < 1 || n > 4 {
			return Holiday{}, false
		}
	}
	return Holiday{Month: time.Month(m), Nth: n, Weekday: wd}, true
}

func parseWeekday(s string) (time.Weekday, bool) {
	for d := time.Sunday; d <= time.Saturday; d++ {
		name := d.String()
		if strings.EqualFold(s, name) || strings.EqualFold(s, name[:3]) {
			return d, true
		}
	}
	return 0, false
}

// WriteTo writes the calendar as a calendar file that [Load] reads back to the same days: a
// comment naming the calendar, the weekend, then its dated holidays, yearly ones (observed
// or not), Nth weekdays and Easter days, each group in calendar order. A calendar built in
// code can so be handed to the jetsaga command, which reads calendars from files
// (`jetsaga timeouts replan`). A holiday whose name holds a line break cannot be written
// as a line: the error wraps [ErrInvalidCalendar], and nothing is written.
func (s *Standard) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\nweekend", Ref{s.name, s.version})
	for d := time.Sunday; d <= time.Saturday; d++ {
		if s.weekend&(1<<d) != 0 {
			b.WriteString(" " + d.String()[:3])
		}
	}
	b.WriteByte('\n')
	var lines []string
	for _, h := range s.holidays() {
		lines = append(lines, h.String())
	}
	for _, off := range slices.Sorted(maps.Keys(s.easter)) {
		e := "easter"
		if off != 0 {
			e = fmt.Sprintf("easter%+d", off)
		}
		lines = append(lines, e+" "+s.easter[off])
	}
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			return 0, fmt.Errorf("%w: calendar %s: holiday %q: a name with a line break cannot be written as a line", ErrInvalidCalendar, Ref{s.name, s.version}, l)
		}
		b.WriteString(l + "\n")
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// holidays returns the calendar's dated, yearly and Nth weekday holidays, each kind in
// calendar order.
func (s *Standard) holidays() []Holiday {
	var hs []Holiday
	for _, d := range slices.SortedFunc(maps.Keys(s.dated), Date.Compare) {
		hs = append(hs, Holiday{Year: d.Year, Month: d.Month, Day: d.Day, Name: s.dated[d]})
	}
	for _, md := range slices.SortedFunc(maps.Keys(s.yearly), func(a, b monthDay) int {
		return cmp.Or(cmp.Compare(a.month, b.month), cmp.Compare(a.day, b.day))
	}) {
		_, observed := s.observed[md]
		hs = append(hs, Holiday{Month: md.month, Day: md.day, Name: s.yearly[md], Observed: observed})
	}
	for _, nd := range slices.SortedFunc(maps.Keys(s.nth), func(a, b nthDay) int {
		return cmp.Or(cmp.Compare(a.month, b.month), cmp.Compare(a.weekday, b.weekday), cmp.Compare(a.n, b.n))
	}) {
		hs = append(hs, Holiday{Month: nd.month, Nth: nd.n, Weekday: nd.weekday, Name: s.nth[nd]})
	}
	return hs
}
