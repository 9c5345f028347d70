package twofactor_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// These tests run the flow on sagatest's virtual clock with the real
// durations: 5 minutes pass in microseconds.

const events = "auth-events"

// newFlow returns the production flow (5 minutes, 3 attempts) with codes
// 111111, 222222, ... instead of random ones.
func newFlow() *saga.Definition[twofactor.State] {
	return countingFlow(new(atomic.Int32))
}

// countingFlow is newFlow counting codes in n, which a test may reset.
func countingFlow(n *atomic.Int32) *saga.Definition[twofactor.State] {
	// Atomic: handlers run on the dispatcher's goroutine.
	return twofactor.New(twofactor.Config{NewCode: func() string {
		return fmt.Sprintf("%06d", 111111*int(n.Add(1)))
	}})
}

// run runs f in a fresh sagatest environment with the flow.
func run(t *testing.T, f func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State])) {
	t.Helper()
	flow := newFlow()
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		f(t, env, flow)
	}, sagatest.WithQueues(events))
}

// at returns the UTC time d after the Env started, as the saga reports it.
func at(env *sagatest.Env, d time.Duration) time.Time { return env.Start().Add(d).UTC() }

func TestCorrectCode(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
		issued := twofactor.CodeIssued{Login: "l1", User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute)}
		env.AssertSent(t, events, issued)
		sagatest.AssertState(t, env, flow, "l1", twofactor.State{
			User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute),
			Expiry: env.Timeouts(flow, "l1")[0].Handle,
		})

		env.Advance(time.Minute)
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"})
		env.AssertCompleted(t, flow, "l1")
		env.AssertSent(t, events, issued, twofactor.Verified{Login: "l1", User: "ann"})

		// The expiry was cancelled with the flow: nothing happens at 5m.
		env.Advance(time.Hour)
		env.AssertSent(t, events, issued, twofactor.Verified{Login: "l1", User: "ann"})
	})
}

func TestWrongThenCorrectCode(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
		env.Advance(30 * time.Second)
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "000000"})
		env.AssertRunning(t, flow, "l1")
		if got := sagatest.State(t, env, flow, "l1").Attempts; got != 1 {
			t.Errorf("after a wrong code: got %d attempts, want 1", got)
		}

		env.Advance(30 * time.Second)
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"})
		env.AssertCompleted(t, flow, "l1")
		env.AssertSent(t, events,
			twofactor.CodeIssued{Login: "l1", User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
			twofactor.CodeRejected{Login: "l1", Remaining: 2},
			twofactor.Verified{Login: "l1", User: "ann"})
	})
}

func TestThreeWrongCodes(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "carol"})
		for _, code := range []string{"000001", "000002"} {
			env.Advance(10 * time.Second)
			env.Send(twofactor.CodeEntered{Login: "l1", Code: code})
			env.AssertRunning(t, flow, "l1")
		}
		env.Advance(10 * time.Second)
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "000003"})
		env.AssertCompleted(t, flow, "l1")

		// A fourth try, even the right code, finds no flow: dropped.
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"})
		env.Advance(10 * time.Minute) // the cancelled expiry never fires
		env.AssertSent(t, events,
			twofactor.CodeIssued{Login: "l1", User: "carol", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
			twofactor.CodeRejected{Login: "l1", Remaining: 2},
			twofactor.CodeRejected{Login: "l1", Remaining: 1},
			twofactor.Failed{Login: "l1", User: "carol", Reason: twofactor.ReasonTooManyAttempts})
	})
}

func TestCodeExpiresAtFiveMinutes(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "bob"})
		issued := twofactor.CodeIssued{Login: "l1", User: "bob", Code: "111111", ExpiresAt: at(env, 5*time.Minute)}

		env.Advance(4*time.Minute + 59*time.Second)
		env.AssertRunning(t, flow, "l1")
		env.Advance(time.Second - time.Nanosecond)
		env.AssertRunning(t, flow, "l1") // not a nanosecond early
		env.AssertSent(t, events, issued)

		env.Advance(time.Nanosecond)
		env.AssertCompleted(t, flow, "l1")
		env.AssertSent(t, events, issued, twofactor.Failed{Login: "l1", User: "bob", Reason: twofactor.ReasonExpired})
		ms := env.Messages(events)
		if got := ms[len(ms)-1].EnqueuedAt.Sub(env.Start()); got != 5*time.Minute {
			t.Errorf("Failed enqueued at +%v, want +5m0s", got)
		}

		// The code is gone with the flow.
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"})
		env.AssertSent(t, events, issued, twofactor.Failed{Login: "l1", User: "bob", Reason: twofactor.ReasonExpired})
	})
}

func TestResendReplacesTheTimeout(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "bob"})
		first := env.Timeouts(flow, "l1")
		if len(first) != 1 || !first[0].At.Equal(at(env, 5*time.Minute)) {
			t.Fatalf("after the request: pending timeouts %+v, want one due +5m", first)
		}

		env.Advance(2 * time.Minute)
		env.Send(twofactor.CodeResendRequested{Login: "l1"})
		second := env.Timeouts(flow, "l1")
		if len(second) != 1 || !second[0].At.Equal(at(env, 7*time.Minute)) || second[0].Handle == first[0].Handle {
			t.Fatalf("after the resend: pending timeouts %+v, want one new one due +7m", second)
		}
		sagatest.AssertState(t, env, flow, "l1", twofactor.State{
			User: "bob", Code: "222222", ExpiresAt: at(env, 7*time.Minute), Expiry: second[0].Handle,
		})

		// The original expiry time passes: nothing happens.
		env.Advance(3 * time.Minute)
		env.AssertRunning(t, flow, "l1")
		env.AssertSent(t, events,
			twofactor.CodeIssued{Login: "l1", User: "bob", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
			twofactor.CodeIssued{Login: "l1", User: "bob", Code: "222222", ExpiresAt: at(env, 7*time.Minute)})

		// The new one fires at resend + 5m.
		env.Advance(2*time.Minute - time.Nanosecond)
		env.AssertRunning(t, flow, "l1")
		env.Advance(time.Nanosecond)
		env.AssertCompleted(t, flow, "l1")
		env.AssertSent(t, events,
			twofactor.CodeIssued{Login: "l1", User: "bob", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
			twofactor.CodeIssued{Login: "l1", User: "bob", Code: "222222", ExpiresAt: at(env, 7*time.Minute)},
			twofactor.Failed{Login: "l1", User: "bob", Reason: twofactor.ReasonExpired})
		if got := env.Now().Sub(env.Start()); got != 7*time.Minute {
			t.Errorf("virtual time passed: got %v, want 7m0s", got)
		}
	})
}

func TestResendInvalidatesTheOldCode(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "bob"})
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "000000"})
		env.Advance(time.Minute)
		env.Send(twofactor.CodeResendRequested{Login: "l1"})
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"}) // the old code
		if got := sagatest.State(t, env, flow, "l1").Attempts; got != 2 {
			t.Errorf("after the old code: got %d attempts, want 2 (a resend keeps the count)", got)
		}
		env.Send(twofactor.CodeEntered{Login: "l1", Code: "222222"})
		env.AssertCompleted(t, flow, "l1")
		env.AssertSent(t, events,
			twofactor.CodeRejected{Login: "l1", Remaining: 2},
			twofactor.CodeRejected{Login: "l1", Remaining: 1},
			twofactor.Verified{Login: "l1", User: "bob"})
	})
}

func TestRepeatedRequestChangesNothing(t *testing.T) {
	run(t, func(t *testing.T, env *sagatest.Env, flow *saga.Definition[twofactor.State]) {
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
		env.Advance(time.Minute)
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
		if got := sagatest.Sent[twofactor.CodeIssued](env, events); len(got) != 1 {
			t.Errorf("got %d codes issued, want 1", len(got))
		}
		env.Advance(4 * time.Minute) // still the first expiry
		env.AssertCompleted(t, flow, "l1")

		// After the flow ended, a request starts a new one.
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
		env.AssertRunning(t, flow, "l1")
		env.AssertSent(t, events,
			twofactor.CodeIssued{Login: "l1", User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
			twofactor.CodeIssued{Login: "l1", User: "ann", Code: "222222", ExpiresAt: at(env, 10*time.Minute)})
		env.Advance(5 * time.Minute)
	})
}

func TestRandomCodes(t *testing.T) {
	flow := twofactor.New(twofactor.Config{})
	sagatest.Run(t, []saga.Saga{flow}, func(t *testing.T, env *sagatest.Env) {
		for i := range 20 {
			env.Send(twofactor.CodeRequested{Login: fmt.Sprint("l", i), User: "u"})
		}
		seen := make(map[string]bool)
		for _, m := range sagatest.Sent[twofactor.CodeIssued](env, events) {
			if len(m.Code) != 6 || strings.Trim(m.Code, "0123456789") != "" {
				t.Errorf("code %q: want 6 digits", m.Code)
			}
			seen[m.Code] = true
		}
		if len(seen) < 15 {
			t.Errorf("20 codes, %d distinct: want them random", len(seen))
		}
		env.Advance(5 * time.Minute)
	})
}
