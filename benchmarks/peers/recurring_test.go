package main

import (
	"strings"
	"testing"
	"time"
)

// The occurrence log of (f) counts only the measured minutes, an
// occurrence once however often it is handled (and how often twice), and
// nominal times off the minute.
func TestOccurrenceLog(t *testing.T) {
	from := time.Date(2026, 11, 27, 12, 1, 0, 0, time.UTC)
	l := &occurrenceLog{seen: map[string]time.Time{}, n: map[string]int{}, from: from, to: from.Add(2 * time.Minute)}
	l.note(1, from.Add(-time.Minute), from)                                  // before the window
	l.note(1, from, from.Add(80*time.Millisecond))                           // counted
	l.note(1, from, from.Add(time.Second))                                   // twice
	l.note(2, from.Add(time.Minute), from.Add(time.Minute-time.Millisecond)) // early
	l.note(2, from.Add(2*time.Minute), from.Add(2*time.Minute))              // after the window
	l.note(3, from.Add(1500*time.Millisecond), from.Add(2*time.Second))      // off the minute
	if got := l.count(); got != 3 {
		t.Errorf("count %d, want 3", got)
	}
	twice := 0
	for _, n := range l.n {
		if n > 1 {
			twice++
		}
	}
	if twice != 1 || l.off != 1 {
		t.Errorf("twice %d, off the minute %d; want 1 and 1", twice, l.off)
	}
	s := summarize(l.lat)
	if s.Negative != 1 || s.Max != 500*time.Millisecond {
		t.Errorf("lateness %+v: want one early, max 500 ms", s)
	}
}

// (f)'s table: a row a system, p99 as a ratio to jetsaga's, a failure
// said in its row.
func TestPrintRecurring(t *testing.T) {
	var b strings.Builder
	printRecurring(&b, []recurringResult{
		{Key: "jetsaga", Name: "jetsaga schedules", Schedules: 10, Minutes: 2, Setup: 1.5,
			Lateness: latency{Count: 20, P50: 50 * time.Millisecond, P99: 100 * time.Millisecond, Max: 120 * time.Millisecond}, Memory: memory{RSS: 64 << 20}},
		{Key: "river", Name: "River periodic jobs", Schedules: 10, Minutes: 2, Setup: 0.5, Missing: 3, Twice: 1,
			Lateness: latency{Count: 17, P50: 300 * time.Millisecond, P99: 400 * time.Millisecond, Max: 450 * time.Millisecond, Negative: 2},
			Memory:   memory{RSS: 200 << 20}, Server: memory{RSS: 150 << 20}, OffMinute: 4},
		{Key: "river-tuned", Name: "River periodic jobs, tuned", Err: "boom"},
	})
	out := b.String()
	for _, want := range []string{
		"| jetsaga schedules | 10 × 2 | 1.5 s | 50 ms | 100 ms | 120 ms | 1.00× | 0 | 0 | 0 | 64 MiB | 0 MiB |",
		"| River periodic jobs | 10 × 2 | 0.5 s | 300 ms | 400 ms | 450 ms | 4.00× | 2 | 3 | 1 | 200 MiB | 150 MiB |",
		"River periodic jobs: 4 occurrences had a nominal time not on a whole minute.",
		"| River periodic jobs, tuned | failed: boom |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
