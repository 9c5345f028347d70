package sagatest_test

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

// An order is paid within an hour or cancelled. The buggy version cancels
// at the deadline but keeps the instance running, and a payment that
// arrives at the same instant, after the deadline's step, still ships the
// cancelled order. Nothing in a test that sends the payment and then
// advances the clock (or advances and then pays a second later) shows it.

type (
	OrderPlaced    struct{ Order string }
	PaymentArrived struct{ Order string }
	payDeadline    struct{}
	Shipped        struct{ Order string }
	Cancelled      struct{ Order string }
	orderState     struct{ Cancelled bool }
)

func orderSaga(buggy bool) *saga.Definition[orderState] {
	d := saga.Define[orderState]("order")
	saga.StartedBy(d, saga.By(func(m OrderPlaced) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m OrderPlaced) error {
			_, err := c.RequestTimeout(time.Hour, payDeadline{})
			return err
		})
	saga.Handles(d, saga.By(func(m PaymentArrived) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[orderState], m PaymentArrived) error {
			c.MarkComplete()
			return c.Send("shipping", Shipped{Order: c.ID()})
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[orderState], _ payDeadline) error {
		c.Data.Cancelled = true
		if !buggy {
			c.MarkComplete() // a late payment finds no instance
		}
		return c.Send("shipping", Cancelled{Order: c.ID()})
	})
	return d
}

// placed is the setup: an order placed an hour before its deadline.
func placed(t *testing.T, env *sagatest.Env) {
	env.Send(OrderPlaced{Order: "o1"})
}

// shippedXorCancelled is the invariant: an order is shipped or
// cancelled, never both, and the saga is over.
func shippedXorCancelled(d *saga.Definition[orderState]) func(t *testing.T, env *sagatest.Env) {
	return func(t *testing.T, env *sagatest.Env) {
		shipped := len(sagatest.Sent[Shipped](env, "shipping"))
		cancelled := len(sagatest.Sent[Cancelled](env, "shipping"))
		if shipped+cancelled != 1 {
			t.Errorf("order o1: shipped %d time(s) and cancelled %d time(s); want one of them once", shipped, cancelled)
		}
	}
}

func TestExploreFindsTheSeededBug(t *testing.T) {
	out := expectFailure(t, func(t *testing.T) {
		d := orderSaga(true)
		sagatest.Explore(t, []saga.Saga{d}, placed,
			[]sagatest.Input{
				sagatest.Send(PaymentArrived{Order: "o1"}),
				sagatest.Timeout(d, "o1"),
			},
			shippedXorCancelled(d))
	})
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`explore_test.go:\d+: order o1: shipped 1 time\(s\) and cancelled 1 time\(s\); want one of them once`),
		regexp.MustCompile(`sagatest: Explore at explore_test.go:\d+: order 2 of 2 failed:\n\s+` +
			`1\. timeout sagatest_test.payDeadline of order/o1, due \+1h0m0s\n\s+` +
			`2\. send sagatest_test.PaymentArrived \{"Order":"o1"\}\n\s+` +
			`re-run it alone with the option sagatest.Replay\(1, 0\)\n\s+` +
			`journal \(now \+1h0m0s\):\n`),
		regexp.MustCompile(`\+1h0m0s +explore: inputs in the order \(1, 0\)\n\s+` +
			`\+1h0m0s +explore: timeout sagatest_test.payDeadline of order/o1, due \+1h0m0s\n\s+` +
			`\+1h0m0s +order/o1: timeout sagatest_test.payDeadline handled\n\s+` +
			`\+1h0m0s +state \{"Cancelled":true\}\n\s+` +
			`\+1h0m0s +sent sagatest_test.Cancelled to shipping \{"Order":"o1"\}\n\s+` + // watched from the first message
			`\+1h0m0s +test sent sagatest_test.PaymentArrived \{"Order":"o1"\}\n\s+` +
			`\+1h0m0s +order/o1: sagatest_test.PaymentArrived handled, completed\n`),
	} {
		if !want.MatchString(out) {
			t.Errorf("the test's output does not match %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "order 1 of 2 failed") {
		t.Errorf("the order in which the payment comes first failed:\n%s", out)
	}
}

func TestExplorePassesWhenTheBugIsFixed(t *testing.T) {
	d := orderSaga(false)
	var orders []string
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Send(PaymentArrived{Order: "o1"}),
			sagatest.Timeout(d, "o1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			shippedXorCancelled(d)(t, env)
			env.AssertCompleted(t, d, "o1")
			orders = append(orders, exploredOrder(t, env))
			if got, want := env.Now().Sub(env.Start()), time.Hour; got != want {
				t.Errorf("inputs delivered at +%v, want +%v", got, want)
			}
		})
	if want := []string{"(0, 1)", "(1, 0)"}; !slices.Equal(orders, want) {
		t.Errorf("orders explored: got %v, want %v", orders, want)
	}
}

// exploredOrder returns the order the journal says Explore ran.
func exploredOrder(t *testing.T, env *sagatest.Env) string {
	t.Helper()
	_, rest, ok := strings.Cut(env.Journal(), "explore: inputs in the order ")
	if !ok {
		t.Fatalf("no order in the journal:\n%s", env.Journal())
	}
	o, _, _ := strings.Cut(rest, "\n")
	return o
}

func TestReplayRunsOneOrderTheSameWayEveryTime(t *testing.T) {
	run := func() string {
		return expectFailure(t, func(t *testing.T) {
			d := orderSaga(true)
			sagatest.Explore(t, []saga.Saga{d}, placed,
				[]sagatest.Input{
					sagatest.Send(PaymentArrived{Order: "o1"}),
					sagatest.Timeout(d, "o1"),
				},
				shippedXorCancelled(d), sagatest.Replay(1, 0))
		})
	}
	durations := regexp.MustCompile(`\(\d+\.\d+s\)`)
	first, second := durations.ReplaceAllString(run(), ""), durations.ReplaceAllString(run(), "")
	if first != second {
		t.Errorf("two replays differ:\n%s\n---\n%s", first, second)
	}
	if !strings.Contains(first, ": order 1 of 1 failed:") || !strings.Contains(first, "order/o1: sagatest_test.PaymentArrived handled, completed") {
		t.Errorf("the replay's output:\n%s", first)
	}
	d := orderSaga(false)
	calls := 0
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Send(PaymentArrived{Order: "o1"}),
			sagatest.Timeout(d, "o1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			calls++
			shippedXorCancelled(d)(t, env)
			if got := exploredOrder(t, env); got != "(1, 0)" {
				t.Errorf("Replay(1, 0) ran order %s", got)
			}
		}, sagatest.Replay(1, 0))
	if calls != 1 {
		t.Errorf("Replay ran %d orders, want 1", calls)
	}
}

func TestExploreRedeliversAfterTheOriginal(t *testing.T) {
	d := orderSaga(false)
	var orders []string
	sagatest.Explore(t, []saga.Saga{d}, placed,
		[]sagatest.Input{
			sagatest.Redeliver(PaymentArrived{Order: "o1"}),
			sagatest.Send(PaymentArrived{Order: "o1"}),
			sagatest.Timeout(d, "o1"),
		},
		func(t *testing.T, env *sagatest.Env) {
			shippedXorCancelled(d)(t, env)
			o := exploredOrder(t, env)
			orders = append(orders, o)
			j := env.Journal()
			if !regexp.MustCompile(`explore: redelivered sagatest_test.PaymentArrived \{"Order":"o1"\} \(MessageID sagatest-[a-z0-9]+-2, delivery 2\)`).MatchString(j) {
				t.Errorf("order %s: the journal shows no redelivery:\n%s", o, j)
			}
			// Shipped: the redelivery is a duplicate of a handled step.
			// Cancelled first: the instance is gone when both arrive.
			if sagatest.Sent[Shipped](env, "shipping") != nil && !strings.Contains(j, "order/o1: sagatest_test.PaymentArrived duplicate\n") {
				t.Errorf("order %s: the redelivery is not a duplicate:\n%s", o, j)
			}
		})
	if want := []string{"(1, 0, 2)", "(1, 2, 0)", "(2, 1, 0)"}; !slices.Equal(orders, want) {
		t.Errorf("orders explored: got %v, want %v", orders, want)
	}
}

func TestExploreDrawsOrdersWithASeed(t *testing.T) {
	d := orderSaga(false)
	explore := func(opts ...sagatest.Option) []string {
		var orders []string
		inputs := []sagatest.Input{sagatest.Timeout(d, "o1")}
		for i := range 6 {
			inputs = append(inputs, sagatest.Send(PaymentArrived{Order: fmt.Sprint("other-", i)}))
		}
		sagatest.Explore(t, []saga.Saga{d}, placed, inputs, func(t *testing.T, env *sagatest.Env) {
			orders = append(orders, exploredOrder(t, env))
		}, opts...)
		return orders
	}
	a := explore(sagatest.WithOrderings(5))
	b := explore(sagatest.WithOrderings(5), sagatest.WithSeed(1))
	c := explore(sagatest.WithOrderings(5), sagatest.WithSeed(2))
	if len(a) != 5 || !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("5 of 7! orders: default seed %v, seed 1 %v, seed 2 %v; want 5 each, the first two equal", a, b, c)
	}
	if all := explore(); len(all) != sagatest.DefaultOrderings {
		t.Errorf("orders of 7 inputs by default: got %d, want %d", len(all), sagatest.DefaultOrderings)
	}
}

// BenchmarkExplore measures what one order costs: a fresh Env, the setup
// (one message) and two inputs at the deadline (a payment and the
// timeout), then the check.
func BenchmarkExplore(b *testing.B) {
	d := orderSaga(false)
	var orders atomic.Int64
	inTest(b, func(t *testing.T) {
		for b.Loop() {
			sagatest.Explore(t, []saga.Saga{d}, placed,
				[]sagatest.Input{
					sagatest.Send(PaymentArrived{Order: "o1"}),
					sagatest.Timeout(d, "o1"),
				},
				func(t *testing.T, env *sagatest.Env) {
					orders.Add(1)
					shippedXorCancelled(d)(t, env)
				})
		}
	})
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(orders.Load()), "ns/order")
}

// inTest runs f as a test inside the benchmark b: synctest bubbles need a
// *testing.T, which a benchmark lacks. It gets one from testing.RunTests,
// which the go command's generated main uses.
func inTest(b *testing.B, f func(t *testing.T)) {
	procs := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(procs) // RunTests sets it for each -cpu value
	ran := false
	ok := testing.RunTests(func(string, string) (bool, error) { return true, nil }, []testing.InternalTest{{
		Name: b.Name(),
		F: func(t *testing.T) {
			if ran { // -count and -cpu make RunTests run it again
				return
			}
			ran = true
			runtime.GOMAXPROCS(procs)
			b.ReportAllocs()
			f(t)
		},
	}})
	switch {
	case !ok:
		b.Fatal("the scenario failed")
	case !ran:
		b.Skip("the scenario did not run (-test.skip?)")
	}
}
