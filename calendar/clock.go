package calendar

import (
	"fmt"
	"time"
)

// Clock is a wall-clock time of day to the minute, such as 09:00, read in whatever zone it is
// applied in. The zero Clock is "no time given"; [ClockOf] makes one, [ParseClock] reads one.
// Clocks compare with ==; in JSON a Clock is the string "09:00".
type Clock struct {
	set          bool
	hour, minute int
}

// ClockOf returns the wall-clock time hour:minute. It does not check its arguments; a Clock
// out of range (25:00) makes a rule invalid ([Rule.Validate]) and fails to encode.
func ClockOf(hour, minute int) Clock {
	return Clock{set: true, hour: hour, minute: minute}
}

// ParseClock parses a wall-clock time in the form 15:04, from 00:00 to 23:59.
func ParseClock(s string) (Clock, error) {
	if len(s) != 5 || s[2] != ':' {
		return Clock{}, fmt.Errorf("time of day %q: want HH:MM", s)
	}
	h, ok1 := digits(s[0:2])
	m, ok2 := digits(s[3:5])
	if !ok1 || !ok2 {
		return Clock{}, fmt.Errorf("time of day %q: want HH:MM", s)
	}
	c := ClockOf(h, m)
	if !c.IsValid() {
		return Clock{}, fmt.Errorf("time of day %q does not exist", s)
	}
	return c, nil
}

// ClockOfTime returns the wall-clock time of t in t's location, to the minute.
func ClockOfTime(t time.Time) Clock {
	return ClockOf(t.Hour(), t.Minute())
}

// IsZero reports whether c is the zero Clock, "no time given". 00:00 is not zero.
func (c Clock) IsZero() bool { return !c.set }

// IsValid reports whether c is a time of day from 00:00 to 23:59.
func (c Clock) IsValid() bool {
	return c.set && c.hour >= 0 && c.hour < 24 && c.minute >= 0 && c.minute < 60
}

// Hour returns c's hour (0 for the zero Clock).
func (c Clock) Hour() int { return c.hour }

// Minute returns c's minute (0 for the zero Clock).
func (c Clock) Minute() int { return c.minute }

// minutes returns c as minutes after midnight.
func (c Clock) minutes() int { return c.hour*60 + c.minute }

// String returns c in the form 15:04, or "" for the zero Clock.
func (c Clock) String() string {
	if !c.set {
		return ""
	}
	return fmt.Sprintf("%02d:%02d", c.hour, c.minute)
}

// MarshalText encodes c as 15:04 and the zero Clock as empty text; a Clock out of range is
// an error.
func (c Clock) MarshalText() ([]byte, error) {
	if !c.set {
		return []byte{}, nil
	}
	if !c.IsValid() {
		return nil, fmt.Errorf("calendar: invalid time of day %d:%d", c.hour, c.minute)
	}
	return []byte(c.String()), nil
}

// UnmarshalText decodes 15:04, and empty text as the zero Clock.
func (c *Clock) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*c = Clock{}
		return nil
	}
	v, err := ParseClock(string(b))
	if err != nil {
		return fmt.Errorf("calendar: %w", err)
	}
	*c = v
	return nil
}
