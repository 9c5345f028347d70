package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the tables' zones do not depend on the machine's zoneinfo
)

// cronTime reads the times of the cron tables below: "Mon Jul 9 15:00 2012" (UTC, seconds
// optional) or "2012-03-11T00:00:00-0500".
func cronTime(t *testing.T, s string) time.Time {
	t.Helper()
	for _, layout := range []string{"Mon Jan 2 15:04 2006", "Mon Jan 2 15:04:05 2006", "2006-01-02T15:04:05-0700", "2006-01-02"} {
		if v, err := time.Parse(layout, s); err == nil {
			return v
		}
	}
	t.Fatalf("bad time %q in the table", s)
	return time.Time{}
}

// The table of robfig/cron's spec_test.go (TestActivation and TestNext, at
// github.com/robfig/cron commit bc59245), as data, written for five fields: its seconds
// field dropped (rows that need seconds left out), "?" written "*", its TZ= prefix moved to
// the zone column. Where robfig/cron and Vixie cron part, the row has Vixie's answer and
// says why:
//
//   - robfig/cron counts a day field such as "*/10" as restricted (its issue 70); Vixie
//     cron, as jetsaga, counts any day field that starts with "*" as unrestricted, so the
//     other day field must match too;
//   - robfig/cron skips a time the clocks jump over and fires a repeated time twice;
//     jetsaga fires the first at the jump, the second once, at its first instant
//     (docs/schedules.md, "Daylight saving time").
//
// Then croniter's testDomDowVixieCronBug (github.com/kiorky/croniter, src/croniter/tests/
// test_croniter.py), whose "implement_cron_bug" sequence is Vixie's, and the examples of
// the issue that found the difference.
var cronTable = []struct {
	from, spec, zone string
	want             []string // the next occurrences, in order; none: the spec never fires
}{
	// TestActivation: each row is "fires at t" (next after a minute before is t) or not.
	// Every fifteen minutes.
	{"Mon Jul 9 14:59 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:00 2012"}},
	{"Mon Jul 9 15:44 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:45 2012"}},
	{"Mon Jul 9 15:39 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:45 2012"}}, // 15:40 does not fire
	// Every fifteen minutes, starting at 5 minutes.
	{"Mon Jul 9 15:04 2012", "5/15 * * * *", "", []string{"Mon Jul 9 15:05 2012", "Mon Jul 9 15:20 2012", "Mon Jul 9 15:35 2012", "Mon Jul 9 15:50 2012"}},
	// Named months.
	{"Sun Jul 15 14:59 2012", "0/15 * * Jul *", "", []string{"Sun Jul 15 15:00 2012"}},
	{"Sun Jul 15 14:59 2012", "0/15 * * Jun *", "", []string{"Sat Jun 1 00:00 2013"}},
	// Everything set.
	{"Sun Jul 15 08:29 2012", "30 08 * Jul Sun", "", []string{"Sun Jul 15 08:30 2012", "Sun Jul 22 08:30 2012"}},
	{"Sun Jul 15 08:29 2012", "30 08 15 Jul *", "", []string{"Sun Jul 15 08:30 2012", "Mon Jul 15 08:30 2013"}},
	// Predefined schedules.
	{"Mon Jul 9 14:59 2012", "@hourly", "", []string{"Mon Jul 9 15:00 2012", "Mon Jul 9 16:00 2012"}},
	{"Sun Jul 8 23:59 2012", "@daily", "", []string{"Mon Jul 9 00:00 2012", "Tue Jul 10 00:00 2012"}},
	{"Sat Jul 7 23:59 2012", "@weekly", "", []string{"Sun Jul 8 00:00 2012", "Sun Jul 15 00:00 2012"}},
	{"Sat Jun 30 23:59 2012", "@monthly", "", []string{"Sun Jul 1 00:00 2012", "Wed Aug 1 00:00 2012"}},
	// Both day fields restricted: a day matches either.
	{"Sat Jul 14 23:59 2012", "0 0 1,15 * Sun", "", []string{"Sun Jul 15 00:00 2012", "Sun Jul 22 00:00 2012", "Sun Jul 29 00:00 2012", "Wed Aug 1 00:00 2012"}},
	{"Thu Jun 14 23:59 2012", "0 0 1,15 * Sun", "", []string{"Fri Jun 15 00:00 2012"}},
	// robfig/cron: Sun Jul 15 fires (its issue 70). Vixie: "*/10" is unrestricted, so a day
	// must be a Sunday and the 1st, 11th, 21st or 31st.
	{"Sat Jul 14 23:59 2012", "0 0 */10 * Sun", "", []string{"Sun Oct 21 00:00 2012", "Sun Nov 11 00:00 2012"}},
	// One day field starting with "*": both must match.
	{"Sat Jul 14 23:59 2012", "0 0 * * Mon", "", []string{"Mon Jul 16 00:00 2012"}},
	{"Sun Jul 8 23:59 2012", "0 0 1,15 * *", "", []string{"Sun Jul 15 00:00 2012", "Wed Aug 1 00:00 2012"}},
	{"Sat Jul 14 23:59 2012", "0 0 */2 * Sun", "", []string{"Sun Jul 15 00:00 2012", "Sun Jul 29 00:00 2012", "Sun Aug 5 00:00 2012"}},

	// TestNext.
	{"Mon Jul 9 14:45 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:00 2012"}},
	{"Mon Jul 9 14:59 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:00 2012"}},
	{"Mon Jul 9 14:59:59 2012", "0/15 * * * *", "", []string{"Mon Jul 9 15:00 2012"}},
	// Wrap around hours.
	{"Mon Jul 9 15:45 2012", "20-35/15 * * * *", "", []string{"Mon Jul 9 16:20 2012"}},
	// Wrap around days.
	{"Mon Jul 9 23:46 2012", "*/15 * * * *", "", []string{"Tue Jul 10 00:00 2012"}},
	{"Mon Jul 9 23:45 2012", "20-35/15 * * * *", "", []string{"Tue Jul 10 00:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 * * * *", "", []string{"Tue Jul 10 00:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 1/2 * * *", "", []string{"Tue Jul 10 01:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 10-12 * * *", "", []string{"Tue Jul 10 10:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 1/2 */2 * *", "", []string{"Thu Jul 11 01:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 * 9-20 * *", "", []string{"Tue Jul 10 00:20 2012"}},
	{"Mon Jul 9 23:35:51 2012", "20-35/15 * 9-20 Jul *", "", []string{"Tue Jul 10 00:20 2012"}},
	// Wrap around months.
	{"Mon Jul 9 23:35 2012", "0 0 9 Apr-Oct *", "", []string{"Thu Aug 9 00:00 2012"}},
	// robfig/cron: Wed Aug 1 (it reads "*/5" as restricted, so any Monday or 1st, 6th, …
	// of the month). Vixie: a Monday that is the 1st, 6th, 11th, … of the month.
	{"Mon Jul 9 23:35 2012", "0 0 */5 Apr,Aug,Oct Mon", "", []string{"Mon Aug 6 00:00 2012", "Mon Oct 1 00:00 2012", "Mon Apr 1 00:00 2013"}},
	{"Mon Jul 9 23:35 2012", "0 0 */5 Oct Mon", "", []string{"Mon Oct 1 00:00 2012"}},
	// Wrap around years.
	{"Mon Jul 9 23:35 2012", "0 0 * Feb Mon", "", []string{"Mon Feb 4 00:00 2013"}},
	{"Mon Jul 9 23:35 2012", "0 0 * Feb Mon/2", "", []string{"Fri Feb 1 00:00 2013"}},
	// Wrap around minute, hour, day, month, and year.
	{"Mon Dec 31 23:59:45 2012", "* * * * *", "", []string{"Tue Jan 1 00:00 2013"}},
	// Leap year.
	{"Mon Jul 9 23:35 2012", "0 0 29 Feb *", "", []string{"Mon Feb 29 00:00 2016"}},
	// Daylight saving time, 02:00 EST -> 03:00 EDT. robfig/cron skips the time in the gap
	// (2013-03-11T02:30-0400); jetsaga fires it at the jump.
	{"2012-03-11T00:00:00-0500", "30 2 11 Mar *", "America/New_York", []string{"2012-03-11T03:00:00-0400", "2013-03-11T02:30:00-0400"}},
	// Hourly.
	{"2012-03-11T00:00:00-0500", "0 * * * *", "America/New_York", []string{"2012-03-11T01:00:00-0500", "2012-03-11T03:00:00-0400", "2012-03-11T04:00:00-0400", "2012-03-11T05:00:00-0400"}},
	// 01:00 nightly.
	{"2012-03-11T00:00:00-0500", "0 1 * * *", "America/New_York", []string{"2012-03-11T01:00:00-0500", "2012-03-12T01:00:00-0400"}},
	// 02:00 nightly: robfig/cron skips it that night (2012-03-12T02:00-0400 next); jetsaga
	// fires at the jump.
	{"2012-03-11T00:00:00-0500", "0 2 * * *", "America/New_York", []string{"2012-03-11T03:00:00-0400", "2012-03-12T02:00:00-0400"}},
	// 02:00 EDT -> 01:00 EST.
	{"2012-11-04T00:00:00-0400", "30 2 04 Nov *", "America/New_York", []string{"2012-11-04T02:30:00-0500"}},
	// robfig/cron: 01:30 EST, the second 01:30 of the night; jetsaga: a repeated time
	// fires once, at its first instant, so next year's.
	{"2012-11-04T01:45:00-0400", "30 1 04 Nov *", "America/New_York", []string{"2013-11-04T01:30:00-0500"}},
	// Hourly: robfig/cron fires 01:00 EDT and 01:00 EST; jetsaga 01:00 EDT only.
	{"2012-11-04T00:00:00-0400", "0 * * * *", "America/New_York", []string{"2012-11-04T01:00:00-0400", "2012-11-04T02:00:00-0500", "2012-11-04T03:00:00-0500"}},
	// 01:00 nightly: robfig/cron runs it twice that night; jetsaga once.
	{"2012-11-04T00:00:00-0400", "0 1 * * *", "America/New_York", []string{"2012-11-04T01:00:00-0400", "2012-11-05T01:00:00-0500"}},
	{"2012-11-04T00:00:00-0400", "0 2 * * *", "America/New_York", []string{"2012-11-04T02:00:00-0500", "2012-11-05T02:00:00-0500"}},
	{"2012-11-04T00:00:00-0400", "0 3 * * *", "America/New_York", []string{"2012-11-04T03:00:00-0500", "2012-11-05T03:00:00-0500"}},
	// Unsatisfiable.
	{"Mon Jul 9 23:35 2012", "0 0 30 Feb *", "", nil},
	{"Mon Jul 9 23:35 2012", "0 0 31 Apr *", "", nil},
	// Monthly.
	{"2012-11-04T00:00:00-0400", "0 3 3 * *", "America/New_York", []string{"2012-12-03T03:00:00-0500"}},
	// A clock change at midnight (robfig/cron issue 157).
	{"2018-10-17T05:00:00-0400", "0 9 10 * *", "America/Sao_Paulo", []string{"2018-11-10T06:00:00-0500"}},
	{"2018-02-14T05:00:00-0500", "0 9 22 * *", "America/Sao_Paulo", []string{"2018-02-22T07:00:00-0500"}},

	// croniter's testDomDowVixieCronBug: "*/2" starts with "*", so the days are the odd
	// Saturdays (Vixie: an intersection)...
	{"2023-05-02", "0 16 */2 * sat", "", []string{"Sat May 13 16:00 2023", "Sat May 27 16:00 2023", "Sat Jun 3 16:00 2023", "Sat Jun 17 16:00 2023"}},
	// ... while "1-31/2", the same days spelt without "*", is restricted: odd days and
	// Saturdays (croniter's default, the union).
	{"2023-05-02", "0 16 1-31/2 * sat", "", []string{"Wed May 3 16:00 2023", "Fri May 5 16:00 2023", "Sat May 6 16:00 2023", "Sun May 7 16:00 2023"}},

	// The examples. Vixie reads a field by its first character: "*,10" is
	// unrestricted (as "*"), "10,*" restricted.
	{"Fri Jan 1 00:00 2027", "0 0 */10 * sun", "", []string{"Sun Jan 31 00:00 2027", "Sun Feb 21 00:00 2027"}},
	{"Fri Jan 1 00:00 2027", "0 0 * * mon/2", "", []string{"Mon Jan 4 00:00 2027", "Wed Jan 6 00:00 2027", "Fri Jan 8 00:00 2027"}},
	{"Fri Jan 1 00:00 2027", "0 0 10 * */3", "", []string{"Sun Jan 10 00:00 2027", "Wed Feb 10 00:00 2027", "Wed Mar 10 00:00 2027"}},
	{"Fri Jan 1 00:00 2027", "0 12 *,10 * 2", "", []string{"Tue Jan 5 12:00 2027", "Tue Jan 12 12:00 2027"}},
	{"Fri Jan 1 00:00 2027", "0 12 10,* * 2", "", []string{"Fri Jan 1 12:00 2027", "Sat Jan 2 12:00 2027"}},
}

// TestCronTable checks the cron parser and its next occurrences against cronTable.
func TestCronTable(t *testing.T) {
	for _, c := range cronTable {
		zone := c.zone
		if zone == "" {
			zone = "UTC"
		}
		t.Run(c.spec+" from "+c.from, func(t *testing.T) {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			cr, err := parseCron(c.spec)
			if c.want == nil {
				if !errors.Is(err, ErrNeverFires) {
					t.Fatalf("parse: %v, want ErrNeverFires", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			after := cronTime(t, c.from)
			var got, want []string
			for _, w := range c.want {
				want = append(want, cronTime(t, w).UTC().Format(time.RFC3339))
				next, err := cr.next(after, loc, nil)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, next.UTC().Format(time.RFC3339))
				after = next
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("got  %v\nwant %v", got, want)
			}
		})
	}
}
