package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"
)

// TestDemoRuns runs the demo end to end on an embedded server and checks
// what it prints: the cancelled reminder never arrives, the others arrive
// with the next sequence numbers, never before their due time.
func TestDemoRuns(t *testing.T) {
	var out bytes.Buffer
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
	if bytes.Contains(out.Bytes(), []byte(`received "reminder-2"`)) {
		t.Errorf("cancelled reminder was delivered:\n%s", got)
	}
	if regexp.MustCompile(`-\d+ms after its due time`).MatchString(got) {
		t.Errorf("a reminder arrived early:\n%s", got)
	}
}
