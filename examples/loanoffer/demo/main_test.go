package main

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
)

// TestDemo runs the demo end to end on an embedded nats-server and a
// Temporal dev server (about 13 s), and checks what it
// prints: where each timeout is held, which engine each one arrives
// from, none early, and the events the service receives.
func TestDemo(t *testing.T) {
	var out testutil.Buffer // the printer and the logger write to it
	// Longer than the demo's defaults, so that a loaded machine keeps to
	// the script: the three offers and the first listing well within the
	// nudge, each step well within the gaps.
	o := options{Nudge: 4 * time.Second, Beyond: 5 * time.Second, Reminder: 8 * time.Second, Expiry: 12 * time.Second}
	o.Logger = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := run(t.Context(), &out, o)
	got := out.String()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, got)
	}
	for _, want := range []string{
		`started a Temporal dev server at 127\.0\.0\.1:\d+`,
		`Temporal engine ready: a probe timeout scheduled and cancelled`,
		`offer-ada loanoffer\.ViewNudge\s+due \+\d+\.\d+s\s+on JetStream \(queue\)`,
		`offer-ada loanoffer\.Remind\s+due \+\d+\.\d+s\s+on Temporal \(temporal\)`,
		`offer-cy\s+loanoffer\.Expire\s+due \+\d+\.\d+s\s+on Temporal \(temporal\)`,
		`ben\s+timeout loanoffer\.ViewNudge arrived from JetStream \(queue\)`,
		`ben\s+timeout loanoffer\.Remind arrived from Temporal \(temporal\)`,
		`cy\s+timeout loanoffer\.Expire arrived from Temporal \(temporal\)`,
		`ada\s+← loan-events .*LoanBooked`,
		`ben\s+← loan-events .*LoanBooked`,
		`cy\s+← loan-events .*OfferExpired`,
		`pending timeouts .*\n\s*\S+\s+\(none\)`,
		`done in `,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	for seq := 1; seq <= 9; seq++ {
		if !strings.Contains(got, fmt.Sprintf("← loan-events seq=%d ", seq)) {
			t.Errorf("event seq=%d missing:\n%s", seq, got)
		}
	}
	// Cancelled timeouts never arrive: none of ada's, not ben's expiry nor
	// cy's nudge.
	for _, bad := range []string{`ada\s+timeout`, `ben\s+timeout loanoffer\.Expire`, `cy\s+timeout loanoffer\.ViewNudge`, `level=(WARN|ERROR)`} {
		if regexp.MustCompile(bad).MatchString(got) {
			t.Errorf("output has %s:\n%s", bad, got)
		}
	}
	// Four timeouts arrived — ben's nudge (JetStream), ben's and cy's
	// reminders and cy's expiry (Temporal) — none early.
	late := regexp.MustCompile(`timeout \S+ arrived from .*: (-?)\S+ late`).FindAllStringSubmatch(got, -1)
	if len(late) != 4 {
		t.Errorf("got %d arrivals, want 4:\n%s", len(late), got)
	}
	for _, m := range late {
		if m[1] == "-" {
			t.Errorf("a timeout arrived early: %s", m[0])
		}
	}
}
