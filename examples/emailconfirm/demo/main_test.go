package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDemo runs the demo end to end on an embedded nats-server with the
// reminder at 1.5s and the release at 3s, and checks what it prints. The
// cancels then come well before the timeouts' due times (on JetStream a
// timeout within 500 ms of its time can no longer be cancelled).
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), &out, options{
		Reminder: 1500 * time.Millisecond, Expiry: 3 * time.Second, RefuseFor: time.Minute,
		Logger: slog.New(slog.DiscardHandler),
	})
	got := out.String()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, got)
	}
	for _, want := range []string{
		`production uses 30m, 1h and 7 days`,
		`dana\s+← signup-events seq=1 .*ConfirmationRequested`,
		`dana\s+← signup-events seq=3 .*Confirmed: activate the account of dana@example.com`,
		`seq=0x8[0-9a-f]{11}\s+scheduled enqueued \+\d+\.\d+s\s+due \+\d+\.\d+s\s+emailconfirm/dana emailconfirm.Remind`,
		`eve\s+timeout emailconfirm.Remind activated: seq=\d+, due`,
		`eve\s+← signup-events .*ReminderDue`,
		`eve\s+← signup-events .*Confirmed`,
		`finn\s+timeout emailconfirm.Release activated`,
		`finn\s+← signup-events .*AccountReleased`,
		`finn\s+← signup-events seq=9 .*ConfirmationRefused\{Reason: expired\}`,
		`emailconfirm/finn emailconfirm.Forget`,
		`done in `,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	// The service received events 1 to 9, with no gap.
	for seq := 1; seq <= 9; seq++ {
		if !strings.Contains(got, fmt.Sprintf("← signup-events seq=%d ", seq)) {
			t.Errorf("event seq=%d missing:\n%s", seq, got)
		}
	}
	// dana confirmed before her reminder, eve before her release: none of
	// their cancelled timeouts activated.
	for _, bad := range []string{`dana\s+timeout`, `eve\s+timeout emailconfirm.Release`, `eve\s+.*AccountReleased`} {
		if regexp.MustCompile(bad).MatchString(got) {
			t.Errorf("output has %s, a cancelled timeout:\n%s", bad, got)
		}
	}
	// Three timeouts activated (eve's reminder, finn's reminder and
	// release), none handled early. (Their activation, the enqueue time,
	// comes up to the engine's lead before the due time: early activation,
	// the default on JetStream.)
	late := regexp.MustCompile(`timeout \S+ activated: .*: (-?)\S+ late`).FindAllStringSubmatch(got, -1)
	if len(late) != 3 {
		t.Errorf("got %d activations, want 3:\n%s", len(late), got)
	}
	for _, m := range late {
		if m[1] == "-" {
			t.Errorf("a timeout activated early: %s", m[0])
		}
	}
}
