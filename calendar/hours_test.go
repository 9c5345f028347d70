package calendar

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestBusinessHours(t *testing.T) {
	pl := testCalendar(t)
	const waw = "Europe/Warsaw"
	nine, five := ClockOf(9, 0), ClockOf(17, 0)
	hours := func(n int) Rule { return BusinessHours(n, nine, five).In(waw) }
	tests := []struct {
		name string
		rule Rule
		from time.Time
		cal  Calendar
		want time.Time // in UTC; Warsaw is UTC+1 in winter, +2 in summer
	}{
		{"within the day", hours(4), at(t, waw, 2026, time.November, 23, 10, 0), pl, utc(2026, time.November, 23, 13, 0)},
		{"into the next day", hours(4), at(t, waw, 2026, time.November, 23, 15, 0), pl, utc(2026, time.November, 24, 10, 0)},
		{"a whole day ends at close", hours(8), at(t, waw, 2026, time.November, 23, 9, 0), pl, utc(2026, time.November, 23, 16, 0)},
		{"over a weekend", hours(2), at(t, waw, 2026, time.November, 27, 16, 0), pl, utc(2026, time.November, 30, 9, 0)},
		{"from a Saturday", hours(1), at(t, waw, 2026, time.November, 28, 12, 0), pl, utc(2026, time.November, 30, 9, 0)},
		{"from before opening", hours(1), at(t, waw, 2026, time.November, 23, 7, 0), pl, utc(2026, time.November, 23, 9, 0)},
		{"from after closing", hours(1), at(t, waw, 2026, time.November, 23, 18, 0), pl, utc(2026, time.November, 24, 9, 0)},
		{"from closing", hours(1), at(t, waw, 2026, time.November, 23, 17, 0), pl, utc(2026, time.November, 24, 9, 0)},
		// Wednesday 2026-12-23 16:00: one hour that day, then Christmas Eve, Christmas and the
		// weekend, then two hours on Monday 28.
		{"over Christmas", hours(3), at(t, waw, 2026, time.December, 23, 16, 0), pl, utc(2026, time.December, 28, 10, 0)},
		{"several days", hours(20), at(t, waw, 2026, time.November, 23, 9, 0), pl, utc(2026, time.November, 25, 12, 0)},
		// Hours are elapsed time: on 2026-03-29 Warsaw goes from 02:00 to 03:00, so
		// 01:00-05:00 holds three hours, and two after 01:00 is 04:00 summer time.
		{"over a clock change", BusinessHours(2, ClockOf(1, 0), five).In(waw), at(t, waw, 2026, time.March, 29, 1, 0), closedWeekendless(t), utc(2026, time.March, 29, 2, 0)},
		{"minutes kept", hours(1), time.Date(2026, 11, 23, 9, 30, 15, 0, time.UTC), pl, time.Date(2026, 11, 23, 10, 30, 15, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.rule.Due(tt.from, tt.cal)
			if err != nil || !got.Equal(tt.want) {
				t.Errorf("%s from %s: got %s, %v, want %s", tt.rule, tt.from, got.UTC(), err, tt.want)
			}
		})
	}
	// Errors.
	for _, r := range []Rule{
		BusinessHours(0, nine, five).In(waw),
		BusinessHours(-1, nine, five).In(waw),
		BusinessHours(MaxBusinessHours+1, nine, five).In(waw),
		BusinessHours(1, nine, Clock{}).In(waw),
		BusinessHours(1, five, nine).In(waw),
		BusinessHours(1, nine, five).At(nine).In(waw),
	} {
		if _, err := r.Due(utc(2026, 1, 5, 10, 0), pl); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%#v: got %v, want ErrInvalidRule", r, err)
		}
	}
	if _, err := hours(1).Due(utc(2026, 1, 5, 10, 0), closed{}); !errors.Is(err, ErrNoBusinessDay) {
		t.Errorf("closed calendar: got %v, want ErrNoBusinessDay", err)
	}
	// Text and JSON.
	r := hours(4)
	const text = "4 business hours after, on a business day within 09:00-17:00 Europe/Warsaw"
	if got := r.String(); got != text {
		t.Errorf("String: %q, want %q", got, text)
	}
	if got, err := ParseRule(text); err != nil || got != r {
		t.Errorf("ParseRule: %#v, %v", got, err)
	}
	if got := BusinessHours(1, nine, five).In("UTC").String(); got != "1 business hour after, on a business day within 09:00-17:00 UTC" {
		t.Errorf("String: %q", got)
	}
	b, err := json.Marshal(r)
	if want := `{"kind":"business_hours","n":4,"open":"09:00","close":"17:00","zone":"Europe/Warsaw"}`; err != nil || string(b) != want {
		t.Errorf("JSON: %s, %v, want %s", b, err, want)
	}
	var back Rule
	if err := json.Unmarshal(b, &back); err != nil || back != r {
		t.Errorf("JSON back: %#v, %v", back, err)
	}
	if !r.NeedsCalendar() {
		t.Error("NeedsCalendar: false")
	}
}

// A rule whose business hours are a minute a day gives up rather than run for long.
func TestBusinessHoursBound(t *testing.T) {
	r := BusinessHours(MaxBusinessHours, ClockOf(9, 0), ClockOf(9, 1)).In("UTC")
	if _, err := r.Due(utc(2026, 1, 5, 10, 0), closedWeekendless(t)); !errors.Is(err, ErrInvalidRule) {
		t.Errorf("got %v, want ErrInvalidRule", err)
	}
	// The longest ordinary one: 10,000 hours of 8 a day, five days a week, about five years.
	got, err := BusinessHours(MaxBusinessHours, ClockOf(9, 0), ClockOf(17, 0)).In("UTC").Due(utc(2026, 1, 5, 9, 0), testCalendar(t))
	if err != nil || got.Year() != 2030 && got.Year() != 2031 {
		t.Errorf("got %s, %v", got, err)
	}
}
