package renewal_test

import (
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/examples/renewal"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// The payment of the last retry arrives at the instant the grace period
// ends. Whichever the dispatcher takes first, the customer is charged
// once for a subscription that runs, or refunded for one that lapsed:
// never charged for a lapsed subscription, never renewed and lapsed.
func TestPaymentAtGraceExpiry(t *testing.T) {
	pl := poland(t, "2024.1")
	sagatest.Explore(t, []saga.Saga{flow},
		func(t *testing.T, env *sagatest.Env) { // before the race
			env.Send(renewal.Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Amount: 999,
				Renews: utc(2024, time.February, 15, 9, 0)}) // grace ends February 20, 09:00 UTC
			env.AdvanceTo(utc(2024, time.February, 20, 8, 30)) // charged four times, not paid
			if ts := env.Timeouts(flow, "s1"); len(ts) != 1 || !ts[0].At.Equal(utc(2024, time.February, 20, 9, 0)) {
				t.Fatalf("pending %+v; want only the end of grace", ts)
			}
		},
		[]sagatest.Input{ // at 09:00 UTC, in every order
			sagatest.Timeout(flow, "s1"),
			sagatest.Send(renewal.PaymentSucceeded{Sub: "s1", Period: 1}),
		},
		func(t *testing.T, env *sagatest.Env) { // the invariant
			renewed := sagatest.Sent[renewal.Renewed](env, events)
			lapsed := sagatest.Sent[renewal.Lapsed](env, events)
			refunds := sagatest.Sent[renewal.Refund](env, events)
			switch {
			case len(renewed) == 1 && len(lapsed) == 0 && len(refunds) == 0:
				env.AssertRunning(t, flow, "s1")
				sagatest.AssertState(t, env, flow, "s1", renewal.State{Customer: "ann", Zone: "Europe/Warsaw", Amount: 999,
					Period: 2, Renews: utc(2024, time.March, 15, 9, 0), First: utc(2024, time.February, 15, 9, 0)})
				env.Send(renewal.CancelRequested{Sub: "s1"})
			case len(renewed) == 0 && len(lapsed) == 1 && len(refunds) == 1:
				env.AssertCompleted(t, flow, "s1")
			default:
				t.Errorf("renewed %v, lapsed %v, refunded %v: want renewed alone, or lapsed and refunded", renewed, lapsed, refunds)
			}
		}, registry(t, pl), sagatest.WithStart(utc(2024, time.February, 1, 0, 0)), sagatest.WithQueues(events))
}
