package emailconfirm_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/emailconfirm"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// These tests run the saga on sagatest's virtual clock with the real
// durations: 30 minutes, an hour, a week.

const (
	events = "signup-events"
	week   = 7 * 24 * time.Hour
)

// newFlow returns the production flow with tokens t1, t2, ... instead of
// random ones.
func newFlow() *saga.Definition[emailconfirm.State] {
	var n atomic.Int32 // handlers run on the dispatcher's goroutine
	return emailconfirm.New(emailconfirm.Config{NewToken: func() string { return fmt.Sprint("t", n.Add(1)) }})
}

func run(t *testing.T, f func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State])) {
	t.Helper()
	flow := newFlow()
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		f(t, env, flow)
	}, sagatest.WithQueues(events))
}

// at returns the UTC time d after the Env started, as the saga reports it.
func at(env *sagatest.Env, d time.Duration) time.Time { return env.Start().Add(d).UTC() }

// requested is the first message of every sign-up made at the Env's start.
func requested(env *sagatest.Env) emailconfirm.ConfirmationRequested {
	return emailconfirm.ConfirmationRequested{Account: "dana", Email: "dana@example.com", Token: "t1", ExpiresAt: at(env, time.Hour)}
}

// wantTimeouts checks an instance's pending timeouts: type and offset.
func wantTimeouts(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State], id string, want ...string) {
	t.Helper()
	var got []string
	for _, p := range env.Timeouts(flow, id) {
		got = append(got, fmt.Sprintf("%s +%v", p.Type, p.At.Sub(env.Start())))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("pending timeouts of %s at +%v:\n got  %v\n want %v", id, env.Now().Sub(env.Start()), got, want)
	}
}

func TestReminderAtThirtyMinutes(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.AssertSent(t, events, requested(env))
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Remind +30m0s", "emailconfirm.Release +1h0m0s")

		env.Advance(30*time.Minute - time.Nanosecond)
		env.AssertSent(t, events, requested(env)) // not a nanosecond early
		env.Advance(time.Nanosecond)
		env.AssertSent(t, events, requested(env),
			emailconfirm.ReminderDue{Account: "dana", Email: "dana@example.com", Token: "t1", ExpiresAt: at(env, time.Hour)})
		ms := env.Messages(events)
		if got := ms[1].EnqueuedAt.Sub(env.Start()); got != 30*time.Minute {
			t.Errorf("reminder enqueued at +%v, want +30m0s", got)
		}
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Release +1h0m0s")
		env.Advance(time.Hour + week) // to the end, for the leak check
	})
}

func TestReleaseAtOneHour(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(time.Hour - time.Nanosecond)
		if sagatest.State(t, env, flow, "dana").Released {
			t.Error("released before the hour")
		}
		env.Advance(time.Nanosecond)
		released := emailconfirm.AccountReleased{Account: "dana", Email: "dana@example.com", ExpiredAt: at(env, time.Hour)}
		env.AssertSent(t, events, requested(env),
			emailconfirm.ReminderDue{Account: "dana", Email: "dana@example.com", Token: "t1", ExpiresAt: at(env, time.Hour)},
			released)
		ms := env.Messages(events)
		if got := ms[2].EnqueuedAt.Sub(env.Start()); got != time.Hour {
			t.Errorf("release enqueued at +%v, want +1h0m0s", got)
		}
		sagatest.AssertState(t, env, flow, "dana", emailconfirm.State{
			Email: "dana@example.com", Token: "t1", ExpiresAt: at(env, time.Hour), Released: true,
		})
		// The saga stays to refuse late confirmations for a week, then ends.
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Forget +169h0m0s")
		env.Advance(week - time.Nanosecond)
		env.AssertRunning(t, flow, "dana")
		env.Advance(time.Nanosecond)
		env.AssertCompleted(t, flow, "dana")
		if got := len(env.Messages(events)); got != 3 {
			t.Errorf("got %d events, want 3: the saga ends silently", got)
		}
	})
}

func TestConfirmBeforeReminderCancelsBoth(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(10 * time.Minute)
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		env.AssertCompleted(t, flow, "dana")
		wantTimeouts(t, env, flow, "dana")
		for st, err := range env.Dispatcher().ScheduledTimeouts(t.Context(), flow.Name()) {
			t.Errorf("still scheduled in the queue: %+v (err %v)", st, err)
		}

		env.Advance(2 * time.Hour) // neither the reminder nor the release comes
		env.AssertSent(t, events, requested(env), emailconfirm.Confirmed{Account: "dana", Email: "dana@example.com"})
	})
}

func TestConfirmBetweenReminderAndExpiry(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(45 * time.Minute)
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		env.AssertCompleted(t, flow, "dana")

		env.Advance(2 * time.Hour) // the release never comes
		env.AssertSent(t, events, requested(env),
			emailconfirm.ReminderDue{Account: "dana", Email: "dana@example.com", Token: "t1", ExpiresAt: at(env, time.Hour)},
			emailconfirm.Confirmed{Account: "dana", Email: "dana@example.com"})
	})
}

func TestConfirmAfterExpiryIsRefused(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(time.Hour + time.Minute)
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		refused := emailconfirm.ConfirmationRefused{Account: "dana", Email: "dana@example.com", Reason: emailconfirm.ReasonExpired, ExpiredAt: at(env, time.Hour)}
		env.AssertSent(t, events, refused)
		env.AssertRunning(t, flow, "dana") // still released, not confirmed
		if !sagatest.State(t, env, flow, "dana").Released {
			t.Error("a refused confirmation changed the state")
		}

		// Until a week after the release, every try is refused; after it,
		// the saga is gone and a try is dropped.
		env.Advance(week - 2*time.Minute)
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		env.Advance(2 * time.Minute)
		env.AssertCompleted(t, flow, "dana")
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		env.AssertSent(t, events, refused, refused)
		if got := sagatest.Sent[emailconfirm.Confirmed](env, events); len(got) != 0 {
			t.Errorf("got %v, want no confirmation", got)
		}
	})
}

func TestWrongTokenIsRefused(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(5 * time.Minute)
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "guess"})
		env.AssertRunning(t, flow, "dana")
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Remind +30m0s", "emailconfirm.Release +1h0m0s")
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
		env.AssertCompleted(t, flow, "dana")
		env.AssertSent(t, events,
			emailconfirm.ConfirmationRefused{Account: "dana", Email: "dana@example.com", Reason: emailconfirm.ReasonInvalidToken, ExpiredAt: at(env, time.Hour)},
			emailconfirm.Confirmed{Account: "dana", Email: "dana@example.com"})
	})
}

func TestSignUpAgainAfterRelease(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(2 * time.Hour)
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.org"})
		env.AssertSent(t, events,
			requested(env),
			emailconfirm.ConfirmationRequested{Account: "dana", Email: "dana@example.org", Token: "t2", ExpiresAt: at(env, 3*time.Hour)})
		// A fresh wait: the week-long one is cancelled.
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Remind +2h30m0s", "emailconfirm.Release +3h0m0s")

		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"}) // the first link
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t2"})
		env.AssertCompleted(t, flow, "dana")
		env.AssertSent(t, events,
			emailconfirm.ConfirmationRefused{Account: "dana", Email: "dana@example.org", Reason: emailconfirm.ReasonInvalidToken, ExpiredAt: at(env, 3*time.Hour)},
			emailconfirm.Confirmed{Account: "dana", Email: "dana@example.org"})
	})
}

func TestSignUpTwiceWhileWaiting(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[emailconfirm.State]) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(10 * time.Minute)
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"}) // a double submit
		env.AssertSent(t, events, requested(env))
		wantTimeouts(t, env, flow, "dana", "emailconfirm.Remind +30m0s", "emailconfirm.Release +1h0m0s")
		env.Send(emailconfirm.ConfirmEmail{Account: "dana", Token: "t1"})
	})
}

func TestReminderNotShorterThanExpiry(t *testing.T) {
	flow := emailconfirm.New(emailconfirm.Config{Reminder: time.Hour, Expiry: time.Hour})
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		env.Send(emailconfirm.SignedUp{Account: "dana", Email: "dana@example.com"})
		env.Advance(time.Hour + week)
		if got := sagatest.Sent[emailconfirm.ReminderDue](env, events); len(got) != 0 {
			t.Errorf("got %d reminders, want none", len(got))
		}
		if got := sagatest.Sent[emailconfirm.AccountReleased](env, events); len(got) != 1 {
			t.Errorf("got %d releases, want 1", len(got))
		}
		if tok := sagatest.Sent[emailconfirm.ConfirmationRequested](env, events)[0].Token; len(tok) < 20 {
			t.Errorf("random token %q: want at least 20 characters", tok)
		}
	})
}
