package sagatest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

type (
	Bill    struct{ Order string }
	Charged struct {
		Order, Key string
		N          int
	}
	billState struct{ Receipt Charged }
)

// billingSaga charges each order through the provider with saga.Call and
// completes, reporting the receipt.
func billingSaga(p *sagatest.Provider[Charged], opts ...saga.CallOption) *saga.Definition[billState] {
	d := saga.Define[billState]("billing")
	saga.StartedBy(d, saga.By(func(m Bill) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[billState], m Bill) error {
			r, err := saga.Call(ctx, c, "charge", p.Call, opts...)
			if err != nil {
				return err
			}
			c.Data.Receipt = r
			c.MarkComplete()
			return c.Send("receipts", r)
		})
	return d
}

func newChargeProvider() *sagatest.Provider[Charged] {
	return sagatest.NewProvider(func(key string, n int) Charged { return Charged{Key: key, N: n} })
}

// chargedOnce: each order charged exactly once, its receipt the one the
// provider gave, and nothing dead-lettered.
func chargedOnce(p *sagatest.Provider[Charged], orders ...string) func(t *testing.T, env *sagatest.Env) {
	return func(t *testing.T, env *sagatest.Env) {
		receipts := sagatest.Sent[Charged](env, "receipts")
		if p.Executions() != len(orders) || len(receipts) != len(orders) {
			t.Errorf("%d charges, %d receipts sent; want one each for %v", p.Executions(), len(receipts), orders)
		}
		for _, r := range receipts {
			if p.Calls(r.Key) == 0 {
				t.Errorf("receipt %+v under a key the provider never saw", r)
			}
		}
		if dl := env.DeadLetters(); len(dl) > 0 {
			t.Errorf("dead-lettered: %s: %s", dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
		}
	}
}

// A crash between a call's intent and the call, and one between the
// call's answer and the step's commit, in every order with another
// order's step: with the default policy (the same key again) and with
// ReconcileWith, each order is charged once.
func TestExploreCrashAroundACall(t *testing.T) {
	for _, policy := range []string{"retry", "reconcile"} {
		for _, point := range []sagatest.CrashPoint{sagatest.AfterCallIntent, sagatest.BeforeCommit} {
			t.Run(fmt.Sprintf("%s/%s", policy, point), func(t *testing.T) {
				p := newChargeProvider()
				var opts []saga.CallOption
				if policy == "reconcile" {
					opts = append(opts, saga.ReconcileWith(p.Lookup))
				}
				sagatest.Explore(t, []saga.Saga{billingSaga(p, opts...)},
					func(t *testing.T, env *sagatest.Env) { p.Reset() },
					[]sagatest.Input{
						sagatest.Crash(sagatest.Send(Bill{Order: "o1"}), point),
						sagatest.Send(Bill{Order: "o2"}),
					},
					chargedOnce(p, "o1", "o2"))
			})
		}
	}
}

// AtMostOnce never calls again after a crash that left the outcome
// unknown: the order is not charged twice; its message is dead-lettered
// as CallInDoubt for an operator, even when the crash came before the
// call (the intent alone cannot tell).
func TestExploreCrashAfterIntentAtMostOnce(t *testing.T) {
	p := newChargeProvider()
	sagatest.Explore(t, []saga.Saga{billingSaga(p, saga.AtMostOnce())},
		func(t *testing.T, env *sagatest.Env) { p.Reset() },
		[]sagatest.Input{sagatest.Crash(sagatest.Send(Bill{Order: "o1"}), sagatest.AfterCallIntent)},
		func(t *testing.T, env *sagatest.Env) {
			dl := env.DeadLetters()
			if p.Executions() != 0 || len(dl) != 1 || dl[0].DeadLetterReason != saga.ReasonCallInDoubt {
				t.Errorf("%d charges, %d dead letters (%v); want none charged, the message dead-lettered as %s", p.Executions(), len(dl), dl, saga.ReasonCallInDoubt)
			}
		})
}

// A call whose answer is lost is made again, with its key, by the step's
// retry while the key window lasts (exactly one charge); a retry after
// the window does not call with a key the provider may have forgotten:
// ErrCallInDoubt, dead-lettered.
func TestCallKeyWindow(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		doubt  bool
	}{{time.Minute, false}, {5 * time.Second, true}} {
		t.Run(fmt.Sprint(tc.window), func(t *testing.T) {
			p := newChargeProvider()
			d := billingSaga(p, saga.RetryWithin(tc.window))
			sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
				p.LoseAnswers(1)
				env.Send(Bill{Order: "o1"})
				env.Advance(time.Minute) // the delayed retry: 10 s by default
				dl := env.DeadLetters()
				switch {
				case p.Executions() != 1:
					t.Errorf("%d charges; want the one before the answer was lost", p.Executions())
				case tc.doubt && (len(dl) != 1 || dl[0].DeadLetterReason != saga.ReasonCallInDoubt):
					t.Errorf("after the window: %d dead letters %v; want one, %s", len(dl), dl, saga.ReasonCallInDoubt)
				case !tc.doubt && (len(dl) != 0 || len(sagatest.Sent[Charged](env, "receipts")) != 1):
					t.Errorf("within the window: %d dead letters, %d receipts; want the retry to get the receipt", len(dl), len(sagatest.Sent[Charged](env, "receipts")))
				}
			}, sagatest.WithDispatcherOptions(saga.WithRetry(saga.RetryPolicy{Immediate: -1, Delayed: 1, Backoff: func(int) time.Duration { return 10 * time.Second }})))
		})
	}
}
