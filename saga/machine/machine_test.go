package machine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

// The test machine: an order is submitted and waits an hour for its
// payment; a large order is reviewed; then stock is checked by a request
// to the warehouse (30 s); a cancel finalizes it in any state.

type (
	order struct {
		machine.Instance
		Total int
	}
	Submit struct {
		Order string
		Total int
	}
	Pay            struct{ Order string }
	Approve        struct{ Order string }
	Retry          struct{ Order string }
	Cancel         struct{ Order string }
	CheckStock     struct{ Order string }
	StockChecked   struct{ Order string }
	PaymentExpired struct{ Order string }
	Shipped        struct{ Order string }
	Cancelled      struct {
		Order string
		Why   string
	}
)

type orderMachine struct {
	m                                 *machine.Machine[order]
	def                               *saga.Definition[order]
	AwaitingPayment, Review, Checking machine.State
	Failed                            machine.State
	Payment                           *machine.Schedule[order, PaymentExpired]
	Stock                             *machine.Request[order, CheckStock, StockChecked]
	Submit                            machine.Event[order, Submit]
}

func newOrderMachine(t testing.TB, opts ...machine.Option) *orderMachine {
	t.Helper()
	m := machine.New[order]("order", opts...)
	o := &orderMachine{m: m}
	o.AwaitingPayment = m.State("AwaitingPayment")
	o.Review = m.State("Review")
	o.Checking = m.State("Checking")
	o.Failed = m.State("Failed")

	o.Submit = machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
	pay := machine.NewEvent(m, saga.By(func(e Pay) string { return e.Order }))
	approve := machine.NewEvent(m, saga.By(func(e Approve) string { return e.Order }))
	retry := machine.NewEvent(m, saga.By(func(e Retry) string { return e.Order }))
	cancel := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
	o.Payment = machine.NewSchedule(m, "PaymentTimeout", time.Hour,
		func(c *saga.Context[order]) PaymentExpired { return PaymentExpired{Order: c.ID()} })
	o.Stock = machine.NewRequest(m, "StockCheck", "warehouse", 30*time.Second,
		func(c *saga.Context[order]) CheckStock { return CheckStock{Order: c.ID()} },
		saga.By(func(e StockChecked) string { return e.Order }))

	m.Initially(
		machine.When(o.Submit).
			Then(func(ctx context.Context, c *saga.Context[order], e Submit) error {
				c.Data.Total = e.Total
				return nil
			}).
			Schedule(o.Payment).
			TransitionTo(o.AwaitingPayment))
	m.During(o.AwaitingPayment,
		machine.When(pay).
			Unschedule(o.Payment).
			IfElse(func(c *saga.Context[order], _ Pay) bool { return c.Data.Total > 1000 },
				func(a *machine.Activity[order, Pay]) { a.TransitionTo(o.Review) },
				func(a *machine.Activity[order, Pay]) { a.Request(o.Stock).TransitionTo(o.Checking) }),
		machine.When(o.Payment.Received).
			Then(func(ctx context.Context, c *saga.Context[order], e PaymentExpired) error {
				return c.Send("sales", Cancelled{Order: e.Order, Why: "unpaid"})
			}).
			Finalize())
	m.During(machine.States(o.AwaitingPayment, o.Review), machine.Ignore(o.Submit))
	m.During(o.Review,
		machine.When(approve).Request(o.Stock).TransitionTo(o.Checking))
	m.During(o.Checking,
		machine.When(o.Stock.Completed).
			Then(func(ctx context.Context, c *saga.Context[order], e StockChecked) error {
				return c.Send("sales", Shipped{Order: c.ID()})
			}).
			Finalize(),
		machine.When(o.Stock.Faulted).TransitionTo(o.Failed),
		machine.When(o.Stock.TimeoutExpired).TransitionTo(o.Failed))
	m.During(o.Failed,
		machine.When(retry).Request(o.Stock).TransitionTo(o.Checking))
	m.DuringAny(
		machine.When(cancel).
			Then(func(ctx context.Context, c *saga.Context[order], e Cancel) error {
				return c.Send("sales", Cancelled{Order: e.Order, Why: "cancelled"})
			}).
			Finalize())
	d, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	o.def = d
	return o
}

// stockRequest returns the latest stock request sent to the warehouse:
// its CorrelationID is what a response carries.
func stockRequest(t *testing.T, env *sagatest.Env) string {
	t.Helper()
	ms := env.Messages("warehouse")
	if len(ms) == 0 {
		t.Fatalf("no request sent to the warehouse\n%s", env.Journal())
	}
	m := ms[len(ms)-1]
	if m.ReplyTo != sagatest.Queue {
		t.Errorf("request ReplyTo %q, want %q", m.ReplyTo, sagatest.Queue)
	}
	return m.CorrelationID
}

func stateOf(t *testing.T, env *sagatest.Env, o *orderMachine, id string) string {
	t.Helper()
	d := sagatest.State(t, env, o.def, id)
	return d.CurrentState()
}

func TestPaidOrderIsCheckedAndShipped(t *testing.T) {
	o := newOrderMachine(t, machine.WithHistory(10))
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		if got := stateOf(t, env, o, "o1"); got != "AwaitingPayment" {
			t.Fatalf("state %s, want AwaitingPayment", got)
		}
		env.Advance(10 * time.Minute)
		env.Send(Pay{Order: "o1"})
		if got := len(env.Timeouts(o.def, "o1")); got != 1 { // the stock request's, not the payment's
			t.Errorf("%d pending timeouts, want 1 (the request's): %v", got, env.Timeouts(o.def, "o1"))
		}
		env.AssertSent(t, "warehouse", CheckStock{Order: "o1"})
		tok := stockRequest(t, env)
		env.Send(StockChecked{Order: "o1"}, saga.WithCorrelationID(tok))
		env.AssertCompleted(t, o.def, "o1")
		env.AssertSent(t, "sales", Shipped{Order: "o1"})
		env.Advance(2 * time.Hour) // neither the payment nor the request timeout comes back
		env.AssertSent(t, "sales", Shipped{Order: "o1"})
	})
}

func TestUnpaidOrderIsCancelledByTheSchedule(t *testing.T) {
	o := newOrderMachine(t)
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Advance(time.Hour - time.Second)
		env.AssertRunning(t, o.def, "o1")
		env.Advance(time.Second)
		env.AssertCompleted(t, o.def, "o1")
		env.AssertSent(t, "sales", Cancelled{Order: "o1", Why: "unpaid"})
	})
}

// Scheduling again replaces the schedule: only the latest timeout is
// handled, an hour after the second Submit... which the machine ignores
// in AwaitingPayment, so a Retry-like reschedule is exercised through a
// second machine binding below.
func TestRescheduleReplacesTheTimeout(t *testing.T) {
	m := machine.New[order]("resched")
	waiting := m.State("Waiting")
	start := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
	again := machine.NewEvent(m, saga.By(func(e Retry) string { return e.Order }))
	expired := machine.NewSchedule[order, PaymentExpired](m, "Deadline", time.Hour, nil)
	m.Initially(machine.When(start).Schedule(expired).TransitionTo(waiting))
	m.During(waiting,
		machine.When(again).Schedule(expired),
		machine.When(expired.Received).
			Then(func(ctx context.Context, c *saga.Context[order], _ PaymentExpired) error {
				return c.Send("sales", Cancelled{Order: c.ID(), Why: c.Now().Format(time.TimeOnly)})
			}).
			Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1"})
		env.Advance(30 * time.Minute)
		env.Send(Retry{Order: "o1"}) // now due at +1h30m
		if n := len(env.Timeouts(d, "o1")); n != 1 {
			t.Fatalf("%d pending timeouts after rescheduling, want 1", n)
		}
		env.Advance(30 * time.Minute) // the first one's due time: nothing
		env.AssertRunning(t, d, "o1")
		env.Advance(30 * time.Minute)
		env.AssertCompleted(t, d, "o1")
		env.AssertSent(t, "sales", Cancelled{Order: "o1", Why: "01:30:00"})
	})
}

func TestLargeOrderIsReviewedFirst(t *testing.T) {
	o := newOrderMachine(t, machine.WithHistory(10))
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 5000})
		env.Send(Submit{Order: "o1", Total: 1}) // ignored: a duplicate submit
		env.Send(Pay{Order: "o1"})
		if got := stateOf(t, env, o, "o1"); got != "Review" {
			t.Fatalf("state %s, want Review", got)
		}
		env.Send(Submit{Order: "o1", Total: 2}) // ignored in Review too (States)
		if n := len(env.DeadLetters()); n != 0 {
			t.Fatalf("%d dead letters, want the Submit in Review ignored", n)
		}
		if got := sagatest.State(t, env, o.def, "o1").Total; got != 5000 {
			t.Errorf("total %d, want 5000 (the second Submit ignored)", got)
		}
		env.Send(Approve{Order: "o1"})
		env.Advance(30 * time.Second) // the warehouse never answers
		d := sagatest.State(t, env, o.def, "o1")
		want := []string{"Initial", "AwaitingPayment", "Review", "Checking", "Failed"}
		if got := d.Path(); !slices.Equal(got, want) {
			t.Errorf("path %v, want %v", got, want)
		}
		if h := d.Machine.History; h[len(h)-1].Event != "StockCheck.TimeoutExpired" {
			t.Errorf("last transition by %q, want StockCheck.TimeoutExpired", h[len(h)-1].Event)
		}
	})
}

func TestHistoryIsBounded(t *testing.T) {
	o := newOrderMachine(t, machine.WithHistory(2))
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Send(Pay{Order: "o1"})
		env.Advance(30 * time.Second)
		env.Send(Retry{Order: "o1"})
		d := sagatest.State(t, env, o.def, "o1")
		want := []string{"Checking", "Failed", "Checking"}
		if got := d.Path(); !slices.Equal(got, want) {
			t.Errorf("path %v, want %v (the last two transitions)", got, want)
		}
	})
}

func TestRequestFaulted(t *testing.T) {
	o := newOrderMachine(t)
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Send(Pay{Order: "o1"})
		req := env.Messages("warehouse")[0]
		env.Send(machine.NewFault(req, "out of stock"), saga.WithCorrelationID(req.CorrelationID))
		if got := stateOf(t, env, o, "o1"); got != "Failed" {
			t.Fatalf("state %s, want Failed", got)
		}
		if n := len(env.Timeouts(o.def, "o1")); n != 0 {
			t.Errorf("%d timeouts pending after the fault, want 0 (the request's cancelled)", n)
		}
		env.Advance(time.Minute) // the request's timeout never comes
		if got := stateOf(t, env, o, "o1"); got != "Failed" {
			t.Fatalf("state %s, want Failed", got)
		}
	})
}

// A response after the timeout is Late, never Completed: here Late is not
// bound, so it is dropped and the instance stays Failed.
func TestLateResponseIsNeverCompleted(t *testing.T) {
	o := newOrderMachine(t)
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Send(Pay{Order: "o1"})
		tok := stockRequest(t, env)
		env.Advance(30 * time.Second)
		env.Send(StockChecked{Order: "o1"}, saga.WithCorrelationID(tok))
		if got := stateOf(t, env, o, "o1"); got != "Failed" {
			t.Fatalf("state %s, want Failed", got)
		}
		if got := sagatest.Sent[Shipped](env, "sales"); len(got) != 0 {
			t.Errorf("shipped %v after a late response", got)
		}
		// A retry sends a new request: the old token's response is late
		// too, the new one's completes.
		env.Send(Retry{Order: "o1"})
		tok2 := stockRequest(t, env)
		if tok2 == tok {
			t.Fatalf("the retry's request has the first one's CorrelationID %q", tok)
		}
		env.Send(StockChecked{Order: "o1"}, saga.WithCorrelationID(tok))
		env.AssertRunning(t, o.def, "o1")
		env.Send(StockChecked{Order: "o1"}, saga.WithCorrelationID(tok2))
		env.AssertCompleted(t, o.def, "o1")
	})
}

// The response and the timeout at one instant, in both orders: exactly
// one of Completed and TimeoutExpired is handled.
func TestExploreResponseRacingTimeout(t *testing.T) {
	o := newOrderMachine(t)
	var tok string
	sagatest.Explore(t, []saga.Saga{o.def},
		func(t *testing.T, env *sagatest.Env) {
			env.Send(Submit{Order: "o1", Total: 10})
			env.Send(Pay{Order: "o1"})
			tok = stockRequest(t, env)
		},
		[]sagatest.Input{
			sagatest.TimeoutOf[machine.Expired](o.def, "o1"),
			sagatest.Send(StockChecked{Order: "o1"}, saga.WithCorrelationID("order/StockCheck/1/o1")),
		},
		func(t *testing.T, env *sagatest.Env) {
			shipped := len(sagatest.Sent[Shipped](env, "sales"))
			failed := env.Exists(o.def, "o1") && stateOf(t, env, o, "o1") == "Failed"
			if shipped == 1 == failed {
				t.Errorf("shipped %d, failed %v: want exactly one of Completed and TimeoutExpired", shipped, failed)
			}
		})
	if tok != "order/StockCheck/1/o1" {
		t.Errorf("request CorrelationID %q, want order/StockCheck/1/o1", tok)
	}
}

func TestUnhandledEventIsDeadLettered(t *testing.T) {
	o := newOrderMachine(t)
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Send(Approve{Order: "o1"}) // only in Review
		dl := env.DeadLetters()
		if len(dl) != 1 {
			t.Fatalf("%d dead letters, want 1", len(dl))
		}
		if !strings.Contains(dl[0].DeadLetterDescription, "Approve in state AwaitingPayment") ||
			!strings.Contains(dl[0].DeadLetterDescription, machine.ErrUnhandledEvent.Error()) {
			t.Errorf("dead letter reason %q, description %q: want the event and the state", dl[0].DeadLetterReason, dl[0].DeadLetterDescription)
		}
		if got := stateOf(t, env, o, "o1"); got != "AwaitingPayment" {
			t.Errorf("state %s, want AwaitingPayment", got)
		}
	})
}

func TestUnhandledEventIgnored(t *testing.T) {
	o := newOrderMachine(t, machine.WithUnhandled(machine.UnhandledIgnore))
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		env.Send(Approve{Order: "o1"})
		if n := len(env.DeadLetters()); n != 0 {
			t.Fatalf("%d dead letters, want 0", n)
		}
		if got := stateOf(t, env, o, "o1"); got != "AwaitingPayment" {
			t.Errorf("state %s, want AwaitingPayment", got)
		}
	})
}

// A record whose state the machine no longer has (removed in a new
// version) dead-letters its messages with ErrUnknownState.
func TestUnknownStoredStateIsDeadLettered(t *testing.T) {
	o := newOrderMachine(t)
	var rec []byte
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		env.Send(Submit{Order: "o1", Total: 10})
		rec = env.StoredRecord(o.def, "o1")
	})
	// Version 2 renamed AwaitingPayment: its record is foreign.
	m := machine.New[order]("order")
	awaiting := m.State("AwaitingPay")
	submit := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
	cancel := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
	m.Initially(machine.When(submit).TransitionTo(awaiting))
	m.During(awaiting, machine.When(cancel).Finalize())
	v2 := m.MustBuild()
	sagatest.Run(t, []saga.Saga{v2}, func(t *testing.T, env *sagatest.Env) {
		env.Restore(v2, "o1", rec)
		env.Send(Cancel{Order: "o1"})
		dl := env.DeadLetters()
		if len(dl) != 1 || !strings.Contains(dl[0].DeadLetterDescription, machine.ErrUnknownState.Error()) ||
			!strings.Contains(dl[0].DeadLetterDescription, `"AwaitingPayment"`) {
			t.Fatalf("dead letters %v: want one naming the unknown state", dl)
		}
		env.AssertRunning(t, v2, "o1")
	})
}

func TestBuildErrors(t *testing.T) {
	type plain struct{ N int }
	tests := []struct {
		name    string
		build   func() error
		wantErr error
	}{
		{"no Instance", func() error {
			m := machine.New[plain]("p")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			m.Initially(machine.When(e).Finalize())
			_, err := m.Build()
			return err
		}, machine.ErrNoInstance},
		{"unreachable state", func() error {
			m := machine.New[order]("p")
			a, b := m.State("A"), m.State("B")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			f := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
			m.Initially(machine.When(e).TransitionTo(a))
			m.During(machine.States(a, b), machine.When(f).Finalize())
			_, err := m.Build()
			return err
		}, machine.ErrUnreachableState},
		{"no way out", func() error {
			m := machine.New[order]("p")
			a := m.State("A")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			m.Initially(machine.When(e).TransitionTo(a))
			_, err := m.Build()
			return err
		}, machine.ErrNoWayOut},
		{"composite declared twice", func() error {
			m := machine.New[order]("p")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			f := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
			machine.Composite(m, "Both", e, f)
			machine.Composite(m, "Both", e, f)
			m.Initially(machine.When(e).Finalize())
			_, err := m.Build()
			return err
		}, machine.ErrDuplicateEvent},
		{"leave activity that transitions", func() error {
			m := machine.New[order]("p")
			a, b := m.State("A"), m.State("B")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			f := machine.NewEvent(m, saga.By(func(e Cancel) string { return e.Order }))
			m.Initially(machine.When(e).TransitionTo(a))
			m.During(machine.States(a, b), machine.When(f).Finalize())
			m.WhenLeave(a, func(x *machine.Activity[order, any]) { x.TransitionTo(b) })
			_, err := m.Build()
			return err
		}, machine.ErrInvalidMachine},
		{"message type bound to two events", func() error {
			m := machine.New[order]("p")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			machine.NewSchedule[order, Submit](m, "S", time.Hour, nil)
			m.Initially(machine.When(e).Finalize())
			_, err := m.Build()
			return err
		}, machine.ErrDuplicateEvent},
		{"state declared twice", func() error {
			m := machine.New[order]("p")
			m.State("A")
			m.State("A")
			_, err := m.Build()
			return err
		}, machine.ErrInvalidState},
		{"hostile state name", func() error {
			m := machine.New[order]("p")
			m.State("a.>")
			_, err := m.Build()
			return err
		}, machine.ErrInvalidState},
		{"hostile machine name", func() error {
			m := machine.New[order]("orders.>")
			e := machine.NewEvent(m, saga.By(func(e Submit) string { return e.Order }))
			m.Initially(machine.When(e).Finalize())
			_, err := m.Build()
			return err
		}, machine.ErrInvalidMachine},
		{"bad option", func() error {
			_, err := machine.New[order]("p", machine.WithHistory(-1)).Build()
			return err
		}, saga.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.build()
			if !errors.Is(err, tt.wantErr) || !errors.Is(err, machine.ErrInvalidMachine) || !errors.Is(err, saga.ErrInvalidDefinition) {
				t.Errorf("got %v, want %v (and ErrInvalidMachine, saga.ErrInvalidDefinition)", err, tt.wantErr)
			}
		})
	}
}

// IDs with subject wildcards, slashes and spaces travel in the request's
// CorrelationID and come back in a Fault, which finds its instance.
func TestHostileIDsInRequests(t *testing.T) {
	o := newOrderMachine(t)
	sagatest.Run(t, []saga.Saga{o.def}, func(t *testing.T, env *sagatest.Env) {
		for _, id := range []string{"a.b.*", "o/1/>", " spaced id ", "zażółć/../x"} {
			env.Send(Submit{Order: id, Total: 10})
			env.Send(Pay{Order: id})
			ms := env.Messages("warehouse")
			req := ms[len(ms)-1]
			env.Send(machine.NewFault(req, "no"), saga.WithCorrelationID(req.CorrelationID))
			if got := stateOf(t, env, o, id); got != "Failed" {
				t.Errorf("%q: state %s after the fault, want Failed", id, got)
			}
		}
	})
}
