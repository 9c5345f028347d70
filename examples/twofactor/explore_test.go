package twofactor_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// These tests explore races: inputs that arrive at the same instant, which
// the dispatcher may take in any order. sagatest.Explore runs each test
// once per order and checks the outcome every time.

// raceFlow returns the flow of newFlow and the setup of the races: ann
// asks for a code at +0s, which is 111111 and expires at +5m. (Explore
// runs the setup in a fresh Env for each order, with the same flow: the
// setup starts counting codes again.)
func raceFlow() (*saga.Definition[twofactor.State], func(t *testing.T, env *sagatest.Env)) {
	var n atomic.Int32
	return countingFlow(&n), func(t *testing.T, env *sagatest.Env) {
		n.Store(0)
		env.Send(twofactor.CodeRequested{Login: "l1", User: "ann"})
	}
}

// The right code typed at the instant it expires, racing its expiry
// timeout. Whichever the dispatcher takes first, the code has expired.
func TestRightCodeAtTheInstantItExpires(t *testing.T) {
	flow, requested := raceFlow()
	sagatest.Explore(t, []saga.Saga{flow}, requested, // setup: ann asked for a code at +0s
		[]sagatest.Input{ // at +5m, in every order
			sagatest.Timeout(flow, "l1"),
			sagatest.Send(twofactor.CodeEntered{Login: "l1", Code: "111111"}),
		},
		func(t *testing.T, env *sagatest.Env) { // after each order
			env.AssertCompleted(t, flow, "l1")
			env.AssertSent(t, events,
				twofactor.CodeIssued{Login: "l1", User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute)},
				twofactor.Failed{Login: "l1", User: "ann", Reason: twofactor.ReasonExpired})
			if got := sagatest.Sent[twofactor.Verified](env, events); len(got) != 0 {
				t.Errorf("verified with an expired code: %v", got)
			}
		}, sagatest.WithQueues(events))
}

// A resend racing the expiry. If the resend comes first, a new code is
// issued and the old timeout, already due, is dropped when it arrives;
// if the expiry comes first, the flow fails and the resend finds no flow.
// Either way the events and the state agree, and no timeout is left
// behind (Explore fails the test if one is).
func TestResendRacingTheExpiry(t *testing.T) {
	flow, requested := raceFlow()
	sagatest.Explore(t, []saga.Saga{flow}, requested,
		[]sagatest.Input{
			sagatest.Timeout(flow, "l1"),
			sagatest.Send(twofactor.CodeResendRequested{Login: "l1"}),
		},
		func(t *testing.T, env *sagatest.Env) {
			first := twofactor.CodeIssued{Login: "l1", User: "ann", Code: "111111", ExpiresAt: at(env, 5*time.Minute)}
			if !env.Completed(flow, "l1") { // the resend won
				second := twofactor.CodeIssued{Login: "l1", User: "ann", Code: "222222", ExpiresAt: at(env, 10*time.Minute)}
				env.AssertSent(t, events, first, second)
				pending := env.Timeouts(flow, "l1")
				if len(pending) != 1 || !pending[0].At.Equal(second.ExpiresAt) {
					t.Errorf("after the resend: pending timeouts %+v, want one, due with the new code at +10m", pending)
				}
				sagatest.AssertState(t, env, flow, "l1", twofactor.State{User: "ann", Code: "222222", ExpiresAt: second.ExpiresAt, Expiry: pending[0].Handle})
				env.Advance(5 * time.Minute) // and the new code expires in turn
				env.AssertSent(t, events, first, second, twofactor.Failed{Login: "l1", User: "ann", Reason: twofactor.ReasonExpired})
				return
			}
			env.AssertSent(t, events, first, twofactor.Failed{Login: "l1", User: "ann", Reason: twofactor.ReasonExpired})
		}, sagatest.WithQueues(events))
}

// A wrong code whose delivery is repeated (the dispatcher crashed after
// the step committed, before it settled the message) racing the expiry:
// the repeat costs no second attempt, in any order.
func TestRedeliveredWrongCodeRacingTheExpiry(t *testing.T) {
	flow, requested := raceFlow()
	wrong := twofactor.CodeEntered{Login: "l1", Code: "000000"}
	sagatest.Explore(t, []saga.Saga{flow},
		func(t *testing.T, env *sagatest.Env) {
			requested(t, env)
			env.Advance(4 * time.Minute)
		},
		[]sagatest.Input{
			sagatest.Send(wrong),
			sagatest.Redeliver(wrong),
			sagatest.Timeout(flow, "l1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			if got := sagatest.Sent[twofactor.CodeRejected](env, events); len(got) > 1 {
				t.Errorf("one wrong code, delivered twice: rejected %d times: %v", len(got), got)
			}
			env.AssertCompleted(t, flow, "l1")
		}, sagatest.WithQueues(events))
}
