package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/calendar/holidays"
)

// The file written for Poland 2027..2030 loads as a calendar that agrees
// with holidays.Country's for every day of those years.
func TestExport(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, []string{"pl", "2027..2030"}); err != nil {
		t.Fatal(err)
	}
	opt, err := calendar.Load(strings.NewReader(out.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	file, err := calendar.New("pl", holidays.Version(2027, 2030), opt)
	if err != nil {
		t.Fatal(err)
	}
	want, err := holidays.Country("pl", 2027, 2030)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for d := (calendar.Date{Year: 2027, Month: 1, Day: 1}); d.Year <= 2030; d = d.AddDays(1) {
		if file.IsBusinessDay(d) != want.IsBusinessDay(d) {
			t.Fatalf("%s: the file says business day %v, Country %v", d, file.IsBusinessDay(d), want.IsBusinessDay(d))
		}
		if _, ok := file.Holiday(d); ok {
			n++
		}
	}
	if n < 4*12 {
		t.Errorf("%d holidays in four years of Poland's file; want at least 48 (12 a year)", n)
	}
	for _, args := range [][]string{nil, {"pl"}, {"pl", "2027"}, {"pl", "x..y"}} {
		if err := run(&out, args); !errors.Is(err, errUsage) {
			t.Errorf("holidaycal %q: %v, want the usage", args, err)
		}
	}
	if err := run(&out, []string{"xx", "2027..2028"}); !errors.Is(err, holidays.ErrUnknownCountry) {
		t.Errorf("holidaycal xx: %v", err)
	}
}
