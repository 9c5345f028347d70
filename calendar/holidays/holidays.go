// Package holidays makes jetsaga business calendars (calendar.Calendar)
// of the public holidays of real countries, from the holiday sets of
// github.com/rickar/cal/v2, so that a service does not type its
// country's holidays into a calendar file and keep them right year after
// year (Easter, observed days, regional holidays).
//
// A calendar is built for a range of years, and its name and version say
// what it was built from — the country, the library's release and the
// years — so that a timeout stored with it (its calendar.Ref) is told
// apart from one stored with another release's days when the registry is
// asked for it, and a re-plan knows which is the newer:
//
//	pl, err := holidays.Country("pl", 2026, 2030) // "pl", version "cal-v2.1.13+2026-2030"
//
// It is a module of its own, so that package calendar stays free of
// dependencies: only a service that imports it gets rickar/cal.
//
// What a day off is: the holidays the library marks public or bank
// holidays (not the religious or other observances it also lists), on the
// day they fall and on the day they are observed when they fall on a
// weekend (the United States' federal rule, the United Kingdom's
// substitute days), and the country's weekend — Saturday and Sunday for
// every country and region offered here. Corrections holds what this
// package adds where the library's release lags a country's law (Poland's
// Christmas Eve, a public holiday from 2025).
package holidays

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rickar/cal/v2"
	"github.com/rickar/cal/v2/at"
	"github.com/rickar/cal/v2/au"
	"github.com/rickar/cal/v2/be"
	"github.com/rickar/cal/v2/ca"
	"github.com/rickar/cal/v2/ch"
	"github.com/rickar/cal/v2/cz"
	"github.com/rickar/cal/v2/de"
	"github.com/rickar/cal/v2/dk"
	"github.com/rickar/cal/v2/es"
	"github.com/rickar/cal/v2/fr"
	"github.com/rickar/cal/v2/gb"
	"github.com/rickar/cal/v2/ie"
	"github.com/rickar/cal/v2/it"
	"github.com/rickar/cal/v2/nl"
	"github.com/rickar/cal/v2/no"
	"github.com/rickar/cal/v2/nz"
	"github.com/rickar/cal/v2/pl"
	"github.com/rickar/cal/v2/se"
	"github.com/rickar/cal/v2/sk"
	"github.com/rickar/cal/v2/us"

	"github.com/jetsaga/jetsaga/calendar"
)

// LibraryVersion is the release of github.com/rickar/cal/v2 the holiday
// sets come from; it is part of every calendar's version. (A test checks
// it against go.mod.)
const LibraryVersion = "v2.1.13"

// Errors of the package; match with errors.Is.
var (
	// ErrUnknownCountry: no holiday set for that country or region code.
	ErrUnknownCountry = errors.New("holidays: unknown country")
	// ErrInvalidYears: the range of years is empty, reversed or wider
	// than MaxYears.
	ErrInvalidYears = errors.New("holidays: invalid range of years")
)

// MaxYears bounds the years of one calendar: its days are listed one by
// one.
const MaxYears = 100

// sets are the holiday sets by code: ISO 3166-1 alpha-2 country codes,
// and country-region for Germany's and Australia's states (ISO 3166-2
// subdivision codes; Australia has no national set).
var sets = map[string][]*cal.Holiday{
	"at": at.Holidays, "be": be.Holidays, "ca": ca.Holidays, "ch": ch.Holidays,
	"cz": cz.Holidays, "de": de.Holidays, "dk": dk.Holidays, "es": es.Holidays, "fr": fr.Holidays,
	"gb": gb.Holidays, "ie": ie.Holidays, "it": it.Holidays, "nl": nl.Holidays, "no": no.Holidays,
	"nz": nz.Holidays, "pl": pl.Holidays, "se": se.Holidays, "sk": sk.Holidays, "us": us.Holidays,
	"au-act": au.HolidaysACT, "au-nsw": au.HolidaysNSW, "au-nt": au.HolidaysNT, "au-qld": au.HolidaysQLD,
	"au-sa": au.HolidaysSA, "au-tas": au.HolidaysTAS, "au-vic": au.HolidaysVIC, "au-wa": au.HolidaysWA,
	"de-bw": de.HolidaysBW, "de-by": de.HolidaysBY, "de-be": de.HolidaysBE, "de-bb": de.HolidaysBB,
	"de-hb": de.HolidaysHB, "de-hh": de.HolidaysHH, "de-he": de.HolidaysHE, "de-mv": de.HolidaysMV,
	"de-ni": de.HolidaysNI, "de-nw": de.HolidaysNW, "de-rp": de.HolidaysRP, "de-sl": de.HolidaysSL,
	"de-sn": de.HolidaysSN, "de-st": de.HolidaysST, "de-sh": de.HolidaysSH, "de-th": de.HolidaysTH,
}

// Correction is a holiday this package adds to a country's set where the
// library's release lacks it.
type Correction struct {
	Month     time.Month
	Day       int
	Name      string
	FromYear  int // the first year it is a holiday
	Reference string
}

// Corrections are the holidays added to the library's sets, by code.
var Corrections = map[string][]Correction{
	"pl": {{Month: time.December, Day: 24, Name: "Wigilia Bożego Narodzenia", FromYear: 2025,
		Reference: "Ustawa z dnia 6 grudnia 2024 r. (Dz.U. 2024 poz. 1965): Christmas Eve a public holiday from 2025"}},
}

// Codes returns the codes Country knows, sorted.
func Codes() []string {
	out := make([]string, 0, len(sets))
	for c := range sets {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Country returns the calendar of code (a country: "pl", "us", "gb", ...;
// or a German state: "de-by") for the years from first to last: its name
// is code, its version "cal-" + LibraryVersion + "+" + first + "-" + last.
// A day outside the years is a business day unless it falls on the
// weekend: build a calendar for every year a timeout may reach.
func Country(code string, first, last int) (*calendar.Standard, error) {
	days, err := Days(code, first, last)
	if err != nil {
		return nil, err
	}
	return calendar.New(strings.ToLower(code), Version(first, last), calendar.Weekend(time.Saturday, time.Sunday), calendar.Holidays(days...))
}

// Version is the version of the calendars built for the years from first
// to last.
func Version(first, last int) string {
	return fmt.Sprintf("cal-%s+%d-%d", LibraryVersion, first, last)
}

// Days returns the days off of code in the years from first to last, as
// calendar holidays on their dates, in date order: what Country builds its
// calendar from, and what a calendar file lists (calendar.Holiday's
// String is a file's line).
func Days(code string, first, last int) ([]calendar.Holiday, error) {
	code = strings.ToLower(code)
	set, ok := sets[code]
	if !ok {
		return nil, fmt.Errorf("%w: %q (known: %s)", ErrUnknownCountry, code, strings.Join(Codes(), " "))
	}
	if first <= 0 || last < first || last-first >= MaxYears {
		return nil, fmt.Errorf("%w: %d..%d: at most %d years, the first at least 1", ErrInvalidYears, first, last, MaxYears)
	}
	byDate := map[calendar.Date]string{}
	add := func(t time.Time, name string) {
		if t.IsZero() {
			return
		}
		d := calendar.Date{Year: t.Year(), Month: t.Month(), Day: t.Day()}
		if d.Year < first || d.Year > last {
			return
		}
		if _, ok := byDate[d]; !ok {
			byDate[d] = name
		}
	}
	// A year beyond each end too: an observed day can fall in the year
	// before (the United States' New Year's Day on a Saturday is observed
	// on the Friday, 31 December).
	for y := first - 1; y <= last+1; y++ {
		for _, h := range set {
			if h.Type != cal.ObservancePublic && h.Type != cal.ObservanceBank && h.Type != cal.ObservanceUnknown {
				continue
			}
			actual, observed := h.Calc(y)
			add(actual, h.Name)
			if !observed.Equal(actual) {
				add(observed, h.Name+" (observed)")
			}
		}
		for _, c := range Corrections[code] {
			if y >= c.FromYear {
				add(time.Date(y, c.Month, c.Day, 0, 0, 0, 0, time.UTC), c.Name)
			}
		}
	}
	out := make([]calendar.Holiday, 0, len(byDate))
	for d, name := range byDate {
		out = append(out, calendar.Holiday{Year: d.Year, Month: d.Month, Day: d.Day, Name: name})
	}
	slices.SortFunc(out, func(a, b calendar.Holiday) int {
		return calendar.Date{Year: a.Year, Month: a.Month, Day: a.Day}.Compare(calendar.Date{Year: b.Year, Month: b.Month, Day: b.Day})
	})
	return out, nil
}
