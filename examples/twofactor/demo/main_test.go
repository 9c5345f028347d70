package main

import (
	"bytes"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestDemo runs the demo end to end on an embedded nats-server, with codes
// that live 1.5s, and checks what it prints: each user's outcome, the
// resend replacing bob's timeout, and an expiry never before its time.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	err := run(t.Context(), &out, options{TTL: 1500 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	got := out.String()
	if err != nil {
		t.Fatalf("run: %v\n%s", err, got)
	}
	for _, want := range []string{
		`codes live 1.5s and allow 3 attempts \(production uses 5m`,
		`started an embedded nats-server`,
		`ann\s+← auth-events seq=1 .*CodeIssued: code \d{6} for ann`,
		`ann\s+← auth-events seq=2 .*CodeRejected: 2 attempt\(s\) left`,
		`ann\s+← auth-events seq=3 .*Verified: ann may log in`,
		`bob\s+asks for a new code`,
		`bob\s+the timeout due \+\d+\.\d+s was cancelled; the new one is due`,
		`carol\s+← auth-events .*CodeRejected: 1 attempt\(s\) left`,
		`carol\s+← auth-events .*Failed\{Reason: too many attempts\}`,
		`bob\s+← auth-events seq=10 .*Failed\{Reason: expired\}`,
		`pending timeouts \(Dispatcher.ScheduledTimeouts\): none`,
		`done in `,
	} {
		if !regexp.MustCompile(want).MatchString(got) {
			t.Errorf("output lacks %s:\n%s", want, got)
		}
	}
	// Two codes were issued to bob, and one expiry: the first code's
	// timeout was replaced.
	if n := len(regexp.MustCompile(`CodeIssued: code \d+ for bob`).FindAllString(got, -1)); n != 2 {
		t.Errorf("bob got %d codes, want 2:\n%s", n, got)
	}
	if n := len(regexp.MustCompile(`Failed\{Reason: expired\}`).FindAllString(got, -1)); n != 1 {
		t.Errorf("%d expiries, want 1 (bob's second code):\n%s", n, got)
	}
	// Before the resend exactly one timeout is pending, bob's first, and
	// after it exactly one, a different one.
	seqs := regexp.MustCompile(`seq=(0x[0-9a-f]+)  twofactor/bob`).FindAllStringSubmatch(got, -1)
	if len(seqs) != 2 || seqs[0][1] == seqs[1][1] {
		t.Errorf("bob's pending timeouts: got %v, want two different ones:\n%s", seqs, got)
	}
	m := regexp.MustCompile(`the expiry was enqueued (-?[0-9.]+)(ms|s|µs|ns) after the code's time`).FindStringSubmatch(got)
	if m == nil {
		t.Fatalf("no lateness line:\n%s", got)
	}
	if late, _ := strconv.ParseFloat(m[1], 64); late < 0 {
		t.Errorf("bob's code expired early:\n%s", got)
	}
}
