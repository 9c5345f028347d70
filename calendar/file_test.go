package calendar

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// A calendar built in code, written with WriteTo and read back with Load, has the same
// business days and holiday names, and writes the same file again.
func TestWriteToRoundTrip(t *testing.T) {
	for _, weekend := range [][]time.Weekday{{time.Friday, time.Saturday}, {}} {
		orig, err := New("us", "2026.1",
			Weekend(weekend...),
			On(Date{Year: 2026, Month: time.December, Day: 24}, "Christmas Eve"),
			Yearly(time.December, 25, "Christmas Day"),
			Yearly(time.February, 29, "Leap Day"),
			YearlyObserved(time.July, 4, "Independence Day"),
			YearlyObserved(time.January, 1, "New Year's Day"),
			NthWeekday(time.November, 4, time.Thursday, "Thanksgiving Day"),
			NthWeekday(time.May, -1, time.Monday, "Memorial Day"),
			Easter(-2, "Good Friday"),
			Easter(0, "Easter Sunday"),
			Easter(60, "Corpus Christi"))
		if err != nil {
			t.Fatal(err)
		}
		var file bytes.Buffer
		if _, err := orig.WriteTo(&file); err != nil {
			t.Fatal(err)
		}
		days, err := Load(bytes.NewReader(file.Bytes()))
		if err != nil {
			t.Fatalf("Load of what WriteTo wrote: %v\n%s", err, file.String())
		}
		back, err := New("us", "2026.1", days)
		if err != nil {
			t.Fatal(err)
		}
		for d := (Date{Year: 2019, Month: time.January, Day: 1}); d.Year < 2031; d = d.AddDays(1) {
			n1, ok1 := orig.Holiday(d)
			n2, ok2 := back.Holiday(d)
			if orig.IsBusinessDay(d) != back.IsBusinessDay(d) || n1 != n2 || ok1 != ok2 {
				t.Fatalf("%v: written %v %q %v, read back %v %q %v\n%s", d, orig.IsBusinessDay(d), n1, ok1, back.IsBusinessDay(d), n2, ok2, file.String())
			}
		}
		var again bytes.Buffer
		if _, err := back.WriteTo(&again); err != nil || again.String() != file.String() {
			t.Errorf("written again (%v):\n%s\nfirst:\n%s", err, again.String(), file.String())
		}
	}
}

func TestWriteToRefusesALineBreak(t *testing.T) {
	cal, err := New("x", "1", Yearly(time.March, 3, "Day\nweekend Mon"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := cal.WriteTo(&b); !errors.Is(err, ErrInvalidCalendar) || b.Len() != 0 {
		t.Errorf("got %v and %q, want ErrInvalidCalendar and nothing written", err, b.String())
	}
}
