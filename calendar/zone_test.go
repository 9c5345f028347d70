package calendar

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A rule names its zone: without one it is an error to compute, never UTC by default.
func TestRuleWithoutZone(t *testing.T) {
	from := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	cal := testCalendar(t)
	const want = `calendar: invalid rule: rule "3 business days after" names no zone: give one with In, such as In("Europe/Warsaw") or In("UTC")`
	r := BusinessDays(3)
	if _, err := r.Due(from, cal); !errors.Is(err, ErrInvalidRule) || err == nil || err.Error() != want {
		t.Errorf("Due: %v, want %s", err, want)
	}
	if _, err := r.DueIn(from, cal, time.UTC); !errors.Is(err, ErrInvalidRule) || err == nil || err.Error() != want {
		t.Errorf("DueIn: %v, want %s", err, want)
	}
	if err := r.Validate(); !errors.Is(err, ErrInvalidRule) || err == nil || err.Error() != want {
		t.Errorf("Validate: %v, want %s", err, want)
	}
	var z Zones
	if _, err := z.Load(""); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("Zones.Load(\"\"): %v, want ErrInvalidRule", err)
	}
	// UTC is named like any other zone.
	got, err := r.In("UTC").Due(from, cal)
	if err != nil || !got.Equal(time.Date(2026, 3, 5, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("In(UTC): %s, %v", got, err)
	}
	// A rule without a zone still decodes (saga data may hold one), and says it has none.
	if got := r.String(); got != "3 business days after" {
		t.Errorf("String: %q", got)
	}
}

// ParseRule says when the zone is what is missing, and reads "UTC" as the zone UTC.
func TestParseRuleZone(t *testing.T) {
	for _, in := range []string{
		"5 business days after",
		"next business day, at 09:00",
		"next 09:00",
		"on a business day not before 09:00",
	} {
		_, err := ParseRule(in)
		if !errors.Is(err, ErrInvalidRule) || !strings.Contains(err.Error(), "no zone") {
			t.Errorf("ParseRule(%q): %v, want an error about the missing zone", in, err)
		}
	}
	_, err := ParseRule("5 business days after")
	if want := `calendar: invalid rule: "5 business days after": no zone: end the rule with an IANA zone, such as "5 business days after in Europe/Warsaw" or "5 business days after in UTC"`; err == nil || err.Error() != want {
		t.Errorf("got %v, want %s", err, want)
	}
	r, err := ParseRule("3 business days after in UTC")
	if err != nil || r != BusinessDays(3).In("UTC") {
		t.Errorf("got %#v, %v", r, err)
	}
}
