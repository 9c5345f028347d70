package sagatest_test

import (
	"context"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// A paid order charges the customer's card and ships. The buggy version
// calls the card service from the handler: a side effect outside the
// step's commit, which a crash before the commit does not undo and the
// redelivery repeats. The fixed version asks for the charge with
// c.Send, which happens once the step commits, under a MessageID that a
// second run of the step repeats and the transport drops.

type ChargeCard struct{ Order string }

func chargingSaga(buggy bool, charges *atomic.Int64) *saga.Definition[orderState] {
	d := saga.Define[orderState]("order")
	saga.StartedBy(d, saga.By(func(m OrderPlaced) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m OrderPlaced) error {
			_, err := c.RequestTimeout(time.Hour, payDeadline{})
			return err
		})
	saga.Handles(d, saga.By(func(m PaymentArrived) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m PaymentArrived) error {
			if buggy {
				charges.Add(1) // the card service, called from the handler
			} else if err := c.Send("payments", ChargeCard{Order: c.ID()}); err != nil {
				return err
			}
			c.MarkComplete()
			return c.Send("shipping", Shipped{Order: c.ID()})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[orderState], _ payDeadline) error {
		c.MarkComplete()
		return c.Send("shipping", Cancelled{Order: c.ID()})
	})
	return d
}

// chargedOnceIfShipped is the invariant: the card is charged once if the
// order shipped, never if it was cancelled; and one of the two happened.
func chargedOnceIfShipped(buggy bool, charges *atomic.Int64) func(t *testing.T, env *sagatest.Env) {
	return func(t *testing.T, env *sagatest.Env) {
		var charged int64
		if buggy {
			charged = charges.Load()
		} else {
			charged = int64(len(sagatest.Sent[ChargeCard](env, "payments")))
		}
		shipped := len(sagatest.Sent[Shipped](env, "shipping"))
		cancelled := len(sagatest.Sent[Cancelled](env, "shipping"))
		if charged != int64(shipped) || shipped+cancelled != 1 {
			t.Errorf("order o1: charged %d time(s), shipped %d, cancelled %d; want charged once and shipped, or cancelled and not charged", charged, shipped, cancelled)
		}
	}
}

// crash test begin
func TestExploreFindsTheCrashBug(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		var charges atomic.Int64
		d := chargingSaga(true, &charges)
		sagatest.Explore(t, []saga.Saga{d},
			func(t *testing.T, env *sagatest.Env) {
				charges.Store(0)
				env.Send(OrderPlaced{Order: "o1"})
			},
			[]sagatest.Input{
				sagatest.Crash(sagatest.Send(PaymentArrived{Order: "o1"}), sagatest.BeforeCommit),
				sagatest.Timeout(d, "o1"),
			},
			chargedOnceIfShipped(true, &charges))
	})
	// crash test end
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`crash_test.go:\d+: order o1: charged 1 time\(s\), shipped 0, cancelled 1`),
		regexp.MustCompile(`sagatest: Explore at crash_test.go:\d+: order 1 of 3 failed:\n\s+` +
			`1\. send sagatest_test.PaymentArrived \{"Order":"o1"\}, crashing before commit\n\s+` +
			`2\. timeout sagatest_test.payDeadline of order/o1, due \+1h0m0s\n\s+` +
			`3\. redelivery of input 0 \(MessageID sagatest-[a-z0-9]+-2\) after its crash before commit\n\s+` +
			`re-run it alone with the option sagatest.Replay\(0, 1, 2\)\n`),
		regexp.MustCompile(`\+1h0m0s +explore: crash before commit: the dispatcher died in the step of sagatest_test.PaymentArrived \(MessageID sagatest-[a-z0-9]+-2\); nothing of the step is stored\n` +
			`(.*\n)*` +
			`\s+\+1h0m0s +explore: redelivered sagatest_test.PaymentArrived \{"Order":"o1"\} \(MessageID sagatest-[a-z0-9]+-2, delivery 2\)\n`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the test's output does not match %s:\n%s", want, out)
		}
	}
}

func TestExploreWithoutACrashMissesTheCrashBug(t *testing.T) {
	var charges atomic.Int64
	d := chargingSaga(true, &charges)
	sagatest.Explore(t, []saga.Saga{d},
		func(t *testing.T, env *sagatest.Env) {
			charges.Store(0)
			env.Send(OrderPlaced{Order: "o1"})
		},
		[]sagatest.Input{
			sagatest.Send(PaymentArrived{Order: "o1"}),
			sagatest.Timeout(d, "o1"),
			sagatest.Redeliver(PaymentArrived{Order: "o1"}), // a crash after the commit
		},
		chargedOnceIfShipped(true, &charges))
}

func TestExploreCrashBeforeCommitPassesWhenTheChargeIsInTheOutbox(t *testing.T) {
	d := chargingSaga(false, nil)
	var orders []string
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Crash(sagatest.Send(PaymentArrived{Order: "o1"}), sagatest.BeforeCommit),
			sagatest.Timeout(d, "o1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			chargedOnceIfShipped(false, nil)(t, env)
			orders = append(orders, exploredOrder(t, env))
		})
	// The redelivery (2) lands anywhere after the crashed input (0).
	if want := []string{"(0, 1, 2)", "(0, 2, 1)", "(1, 0, 2)"}; !slices.Equal(orders, want) {
		t.Errorf("orders explored: got %v, want %v", orders, want)
	}
}

func TestExploreCrashBeforeTheOutboxIsCleared(t *testing.T) {
	d := chargingSaga(false, nil)
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Crash(sagatest.Send(PaymentArrived{Order: "o1"}), sagatest.BeforeOutboxCleared),
			sagatest.Crash(sagatest.Send(OrderPlaced{Order: "o2"}), sagatest.BeforeOutboxCleared),
		},
		func(t *testing.T, env *sagatest.Env) {
			chargedOnceIfShipped(false, nil)(t, env)
			j := env.Journal()
			o := exploredOrder(t, env)
			for _, want := range []*regexp.Regexp{
				regexp.MustCompile(`explore: crash before the outbox is cleared: the dispatcher died in the step of sagatest_test.PaymentArrived \(MessageID sagatest-[a-z0-9]+-\d\) after carrying out its effects; the record still holds them\n`),
				regexp.MustCompile(`explore: redelivered sagatest_test.PaymentArrived \{"Order":"o1"\} \(MessageID sagatest-[a-z0-9]+-\d, delivery 2\)\n`),
				regexp.MustCompile(`order/o1: sagatest_test.PaymentArrived duplicate\n`),
			} {
				if !want.MatchString(j) {
					t.Errorf("order %s: the journal does not match %s:\n%s", o, want, j)
				}
			}
			// The timeout o2's step requested is requested again on
			// recovery, under the same ID: one is pending (and Run's
			// checks find no stray schedule).
			if ts := env.Timeouts(d, "o2"); len(ts) != 1 {
				t.Errorf("order %s: o2 has %d pending timeouts, want 1", o, len(ts))
			}
		})
}

func TestExploreCrashBeforeTheAck(t *testing.T) {
	d := chargingSaga(false, nil)
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Crash(sagatest.Send(PaymentArrived{Order: "o1"}), sagatest.BeforeAck),
			sagatest.Timeout(d, "o1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			chargedOnceIfShipped(false, nil)(t, env)
			j := env.Journal()
			if !regexp.MustCompile(`explore: crash before the ack: the dispatcher died after the step of sagatest_test.PaymentArrived \(MessageID sagatest-[a-z0-9]+-2\), before acknowledging it\n`).MatchString(j) ||
				!regexp.MustCompile(`explore: redelivered sagatest_test.PaymentArrived \{"Order":"o1"\} \(MessageID sagatest-[a-z0-9]+-2, delivery 2\)`).MatchString(j) {
				t.Errorf("order %s: the journal shows no crash before the ack and redelivery:\n%s", exploredOrder(t, env), j)
			}
		})
}

func TestCrashOfATimeoutInput(t *testing.T) {
	d := chargingSaga(false, nil)
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Send(PaymentArrived{Order: "o1"}),
			sagatest.Crash(sagatest.Timeout(d, "o1"), sagatest.BeforeCommit),
		},
		func(t *testing.T, env *sagatest.Env) {
			chargedOnceIfShipped(false, nil)(t, env)
			if j := env.Journal(); !regexp.MustCompile(`explore: crash before commit: .*sagatest_test.payDeadline`).MatchString(j) {
				t.Errorf("order %s: no crash in the journal:\n%s", exploredOrder(t, env), j)
			}
		})
}
