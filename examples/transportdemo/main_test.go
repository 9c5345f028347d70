package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
)

// TestDemoRuns runs the demo end to end on an embedded server and checks
// what it prints: the cancelled reminder never arrives, the others arrive
// with the next sequence numbers, never before their due time.
func TestDemoRuns(t *testing.T) {
	var out testutil.Buffer
	if err := run(t.Context(), &out, "", 300*time.Millisecond); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		`received "welcome"\s+seq=1 `,
		`received "reminder-1"\s+seq=2 `,
		`received "reminder-3"\s+seq=3 `,
		`cancelled "reminder-2"`,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(out.String(), `received "reminder-2"`) {
		t.Errorf("cancelled reminder was delivered:\n%s", got)
	}
	lateness, err := latenesses(got)
	if err != nil {
		t.Fatal(err)
	}
	if len(lateness) != 2 {
		t.Errorf("got %d reminders' lateness, want 2 (reminder-1, reminder-3):\n%s", len(lateness), got)
	}
	for _, l := range lateness {
		if l < 0 {
			t.Errorf("a reminder arrived %v early:\n%s", -l, got)
		}
	}
}

// dueRE matches the lateness the demo prints for a scheduled message: a
// time.Duration, negative if it arrived early.
var dueRE = regexp.MustCompile(`, (\S+) after its due time`)

// latenesses returns the lateness of each scheduled message out reports.
func latenesses(out string) ([]time.Duration, error) {
	var ds []time.Duration
	for _, m := range dueRE.FindAllStringSubmatch(out, -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			return nil, fmt.Errorf("lateness %q: %w", m[1], err)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// TestLatenessesReadsEveryDuration: early arrivals in any unit are found,
// not only those in milliseconds.
func TestLatenessesReadsEveryDuration(t *testing.T) {
	out := ` 0.312s  received "reminder-1"   seq=2 enqueued at +312ms, 12ms after its due time
 0.900s  received "reminder-3"   seq=3 enqueued at +900ms, -1.2s after its due time
 1.000s  received "x"            seq=4 enqueued at +1s, -350ms after its due time
 1.100s  received "y"            seq=5 enqueued at +1.1s, -1m0.5s after its due time
 1.200s  received "z"            seq=6 enqueued at +1.2s, 0s after its due time
 1.300s  received "welcome"      seq=1 enqueued at +1ms
`
	got, err := latenesses(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{12 * time.Millisecond, -1200 * time.Millisecond, -350 * time.Millisecond, -time.Minute - 500*time.Millisecond, 0}
	if !slices.Equal(got, want) {
		t.Errorf("latenesses: got %v, want %v", got, want)
	}
	if _, err := latenesses(", soon after its due time"); err == nil {
		t.Error("latenesses read an unreadable duration")
	}
}
