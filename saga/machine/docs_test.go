package machine_test

import (
	"context"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
)

// The state-machine guide's snippets (docs/state-machines.md), compiled
// (internal/doccheck checks that the guide quotes them).

type (
	S struct {
		machine.Instance
		Reason string
	}
	Thing struct {
		ID        string
		Condition bool
	}
	OrderState struct {
		machine.Instance
		Reason string
	}
	OrderAccepted struct{ OrderID string }
	PaymentFailed struct{ OrderID string }
	PaymentError  struct{ Code string }
)

func (e *PaymentError) Error() string { return "payment refused: " + e.Code }

// docsFilteredWhen: two filtered Whens of one event choose between
// activities.
func docsFilteredWhen() *machine.Machine[S] {
	m := machine.New[S]("filtered")
	yes, no := m.State("Yes"), m.State("No")
	thing := machine.NewEvent(m, saga.By(func(e Thing) string { return e.ID }))
	m.During(machine.Initial,
		machine.When(thing, func(_ *saga.Context[S], e Thing) bool { return e.Condition }).TransitionTo(yes),
		machine.When(thing, func(_ *saga.Context[S], e Thing) bool { return !e.Condition }).TransitionTo(no))
	return m
}

// docsCatch: a payment error moves the order to its fault state.
func docsCatch(charge func(context.Context, *saga.Context[OrderState], OrderAccepted) error) *machine.Machine[OrderState] {
	m := machine.New[OrderState]("catch")
	accepted, paid, faulted := m.State("Accepted"), m.State("Paid"), m.State("Faulted")
	orderAccepted := machine.NewEvent(m, saga.By(func(e OrderAccepted) string { return e.OrderID }))
	m.During(accepted,
		machine.When(orderAccepted).
			Then(charge). // returns a *PaymentError
			TransitionTo(paid).
			Catch(machine.ErrorAs[*PaymentError](), func(a *machine.Activity[OrderState, OrderAccepted]) {
				a.Then(func(ctx context.Context, c *saga.Context[OrderState], e OrderAccepted) error {
					c.Data.Reason = machine.CaughtError(ctx).Error()
					return c.Publish(PaymentFailed{OrderID: c.ID()})
				}).TransitionTo(faulted)
			}))
	return m
}

var _, _ = docsFilteredWhen, docsCatch
