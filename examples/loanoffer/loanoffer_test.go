package loanoffer_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/loanoffer"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// These tests run the saga on sagatest's virtual clock with the real
// durations — 10 minutes, 7 days, 14 days — in milliseconds. In
// production the same definition's timeouts go to two engines (see the
// demo); here they are all scheduled messages on the in-memory transport.

const (
	events = "loan-events"
	day    = 24 * time.Hour
)

func run(t *testing.T, f func(t *testing.T, env *sagatest.Env, flow *saga.Definition[loanoffer.State])) {
	t.Helper()
	flow := loanoffer.New(loanoffer.Config{})
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		f(t, env, flow)
	}, sagatest.WithQueues(events))
}

func at(env *sagatest.Env, d time.Duration) time.Time { return env.Start().Add(d).UTC() }

func sent(env *sagatest.Env) loanoffer.OfferSent {
	return loanoffer.OfferSent{Offer: "o1", Customer: "ada", Amount: 500000, ExpiresAt: at(env, 14*day)}
}

func wantTimeouts(t *testing.T, env *sagatest.Env, flow *saga.Definition[loanoffer.State], want ...string) {
	t.Helper()
	var got []string
	for _, p := range env.Timeouts(flow, "o1") {
		got = append(got, fmt.Sprintf("%s +%v", p.Type, p.At.Sub(env.Start())))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pending timeouts at +%v:\n got  %v\n want %v", env.Now().Sub(env.Start()), got, want)
	}
}

// An offer never opened: nudged at 10 minutes, reminded at 7 days,
// expired at 14 — each at its instant, not a nanosecond before.
func TestUnansweredOfferExpiresAtFourteenDays(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[loanoffer.State]) {
		env.Send(loanoffer.OfferMade{Offer: "o1", Customer: "ada", Amount: 500000})
		env.AssertSent(t, events, sent(env))
		wantTimeouts(t, env, flow, "loanoffer.ViewNudge +10m0s", "loanoffer.Remind +168h0m0s", "loanoffer.Expire +336h0m0s")

		env.Advance(10*time.Minute - time.Nanosecond)
		env.AssertSent(t, events, sent(env))
		env.Advance(time.Nanosecond)
		nudge := loanoffer.NudgeDue{Offer: "o1", Customer: "ada"}
		env.AssertSent(t, events, sent(env), nudge)

		env.AdvanceTo(env.Start().Add(7*day - time.Nanosecond))
		env.AssertSent(t, events, sent(env), nudge)
		env.Advance(time.Nanosecond)
		reminder := loanoffer.ReminderDue{Offer: "o1", Customer: "ada", ExpiresAt: at(env, 14*day)}
		env.AssertSent(t, events, sent(env), nudge, reminder)

		env.AdvanceTo(env.Start().Add(14*day - time.Nanosecond))
		env.AssertRunning(t, flow, "o1")
		env.Advance(time.Nanosecond)
		env.AssertCompleted(t, flow, "o1")
		env.AssertSent(t, events, sent(env), nudge, reminder, loanoffer.OfferExpired{Offer: "o1", Customer: "ada", ExpiredAt: at(env, 14*day)})
	})
}

// Opened within 10 minutes: no nudge; the reminder and the expiry stand.
func TestViewedOfferIsNotNudged(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[loanoffer.State]) {
		env.Send(loanoffer.OfferMade{Offer: "o1", Customer: "ada", Amount: 500000})
		env.Advance(3 * time.Minute)
		env.Send(loanoffer.OfferViewed{Offer: "o1"})
		wantTimeouts(t, env, flow, "loanoffer.Remind +168h0m0s", "loanoffer.Expire +336h0m0s")
		env.Advance(time.Hour)
		env.AssertSent(t, events, sent(env))
		env.Advance(14 * day)
		env.AssertCompleted(t, flow, "o1")
		if got := sagatest.Sent[loanoffer.NudgeDue](env, events); len(got) != 0 {
			t.Errorf("nudged after viewing: %v", got)
		}
	})
}

// Accepted on day 8, after the reminder: the loan is booked and the
// expiry cancelled (Run fails the test if a timeout is left behind).
func TestAcceptedAfterTheReminder(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[loanoffer.State]) {
		env.Send(loanoffer.OfferMade{Offer: "o1", Customer: "ada", Amount: 500000})
		env.Send(loanoffer.OfferViewed{Offer: "o1"})
		env.Advance(8 * day)
		env.Send(loanoffer.OfferAccepted{Offer: "o1"})
		env.AssertCompleted(t, flow, "o1")
		env.AssertSent(t, events, sent(env),
			loanoffer.ReminderDue{Offer: "o1", Customer: "ada", ExpiresAt: at(env, 14*day)},
			loanoffer.LoanBooked{Offer: "o1", Customer: "ada", Amount: 500000})
		env.Advance(14 * day)
		if got := sagatest.Sent[loanoffer.OfferExpired](env, events); len(got) != 0 {
			t.Errorf("expired after acceptance: %v", got)
		}
	})
}

// An acceptance at the very instant the offer expires, in either order
// with the expiry: the offer has expired, and no loan is booked.
func TestAcceptedAtTheExpiryInstant(t *testing.T) {
	flow := loanoffer.New(loanoffer.Config{})
	sagatest.Explore(t, []saga.Saga{flow},
		func(t *testing.T, env *sagatest.Env) {
			env.Send(loanoffer.OfferMade{Offer: "o1", Customer: "ada", Amount: 500000})
			env.Send(loanoffer.OfferViewed{Offer: "o1"})
			env.Advance(14*day - time.Nanosecond) // the reminder fired; the expiry is next
		},
		[]sagatest.Input{sagatest.Timeout(flow, "o1"), sagatest.Send(loanoffer.OfferAccepted{Offer: "o1"})},
		func(t *testing.T, env *sagatest.Env) {
			env.AssertCompleted(t, flow, "o1")
			if got := sagatest.Sent[loanoffer.LoanBooked](env, events); len(got) != 0 {
				t.Errorf("loan booked at the expiry: %v", got)
			}
			if got := sagatest.Sent[loanoffer.OfferExpired](env, events); len(got) != 1 {
				t.Errorf("expired %d times, want once", len(got))
			}
		}, sagatest.WithQueues(events))
}
