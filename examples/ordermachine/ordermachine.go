package ordermachine

import (
	"context"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
)

// Messages the machine takes.
type (
	// SubmitOrder starts an order.
	SubmitOrder struct {
		OrderID   string
		OrderDate time.Time
		Customer  string
	}
	// OrderAccepted accepts a submitted (or stalled) order for
	// processing.
	OrderAccepted struct{ OrderID string }
	// OrderProcessed answers a ProcessOrder request.
	OrderProcessed struct{ OrderID string }
)

// Messages the machine sends.
type (
	// ProcessOrder is the request to the processing queue.
	ProcessOrder struct {
		OrderID string
		Attempt int
	}
	// OrderCompleted, OrderRejected and OrderExpired go to the
	// notifications queue.
	OrderCompleted struct{ OrderID string }
	OrderRejected  struct {
		OrderID string
		Reason  string
	}
	OrderExpired struct{ OrderID string }
	// OrderCompletionTimeout is the schedule's payload.
	OrderCompletionTimeout struct{ OrderID string }
)

// OrderState is an order's data: the machine's Instance (its current
// state, scheduled timeout and pending request) and the order's own.
type OrderState struct {
	machine.Instance
	OrderDate time.Time
	Customer  string
	Attempts  int
}

// Queues the machine sends to.
const (
	ProcessingQueue    = "processing"
	NotificationsQueue = "notifications"
)

// Config sets the machine's times.
type Config struct {
	// ProcessTimeout is how long a processing request waits for its
	// answer. Default: 30 seconds.
	ProcessTimeout time.Duration
	// Attempts is how many processing requests an acceptance sends at
	// most. Default: 3.
	Attempts int
	// CompletionTimeout is how long after submission an order that has
	// not completed expires. Default: 30 days.
	CompletionTimeout time.Duration
	// History is how many transitions each order keeps
	// (machine.WithHistory). Default: 0.
	History int
}

// Order is the order machine and the saga it builds.
type Order struct {
	Machine *machine.Machine[OrderState]
	Saga    *saga.Definition[OrderState]
}

// New builds the order machine.
func New(cfg Config) (*Order, error) {
	if cfg.ProcessTimeout == 0 {
		cfg.ProcessTimeout = 30 * time.Second
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 3
	}
	if cfg.CompletionTimeout == 0 {
		cfg.CompletionTimeout = 30 * 24 * time.Hour
	}
	m := machine.New[OrderState]("order", machine.WithHistory(cfg.History))
	submitted := m.State("Submitted")
	accepted := m.State("Accepted")
	stalled := m.State("Stalled")

	submitOrder := machine.NewEvent(m, saga.By(func(e SubmitOrder) string { return e.OrderID }))
	orderAccepted := machine.NewEvent(m, saga.By(func(e OrderAccepted) string { return e.OrderID }))
	completion := machine.NewSchedule(m, "OrderCompletionTimeout", cfg.CompletionTimeout,
		func(c *saga.Context[OrderState]) OrderCompletionTimeout {
			return OrderCompletionTimeout{OrderID: c.ID()}
		})
	process := machine.NewRequest(m, "ProcessOrder", ProcessingQueue, cfg.ProcessTimeout,
		func(c *saga.Context[OrderState]) ProcessOrder {
			return ProcessOrder{OrderID: c.ID(), Attempt: c.Data.Attempts}
		},
		saga.By(func(e OrderProcessed) string { return e.OrderID }))

	attempt := func(ctx context.Context, c *saga.Context[OrderState], _ any) error {
		c.Data.Attempts++
		return nil
	}

	m.Initially(
		machine.When(submitOrder).
			Then(func(ctx context.Context, c *saga.Context[OrderState], e SubmitOrder) error {
				c.Data.OrderDate, c.Data.Customer = e.OrderDate, e.Customer
				return nil
			}).
			Schedule(completion).
			TransitionTo(submitted))

	m.During(machine.States(submitted, stalled),
		machine.When(orderAccepted).
			Then(func(ctx context.Context, c *saga.Context[OrderState], e OrderAccepted) error {
				c.Data.Attempts = 0
				return attempt(ctx, c, e)
			}).
			Request(process).
			TransitionTo(accepted))

	m.During(accepted,
		machine.When(process.Completed).
			Unschedule(completion).
			Then(func(ctx context.Context, c *saga.Context[OrderState], e OrderProcessed) error {
				return c.Send(NotificationsQueue, OrderCompleted{OrderID: c.ID()})
			}).
			Finalize(),
		machine.When(process.Faulted).
			Then(func(ctx context.Context, c *saga.Context[OrderState], f machine.Fault) error {
				return c.Send(NotificationsQueue, OrderRejected{OrderID: c.ID(), Reason: f.Reason})
			}).
			Finalize(),
		machine.When(process.TimeoutExpired).
			IfElse(func(c *saga.Context[OrderState], _ machine.Expired) bool { return c.Data.Attempts < cfg.Attempts },
				func(a *machine.Activity[OrderState, machine.Expired]) {
					a.Then(func(ctx context.Context, c *saga.Context[OrderState], e machine.Expired) error {
						return attempt(ctx, c, e)
					}).Request(process)
				},
				func(a *machine.Activity[OrderState, machine.Expired]) { a.TransitionTo(stalled) }))

	m.DuringAny(
		machine.Ignore(submitOrder),
		machine.Ignore(process.Late),
		machine.When(completion.Received).
			Then(func(ctx context.Context, c *saga.Context[OrderState], e OrderCompletionTimeout) error {
				return c.Send(NotificationsQueue, OrderExpired(e))
			}).
			Finalize())

	def, err := m.Build()
	if err != nil {
		return nil, err
	}
	return &Order{Machine: m, Saga: def}, nil
}
