package saga_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	OrderPaid  struct{ Order string }
	payReceipt struct{ ChargeID string }
	checkout   struct {
		ChargeID string
		Review   bool
	}
)

// chargeCard stands for a payment API that honours idempotency keys, as
// Stripe's does for 24 hours (a POST with the key in its Idempotency-Key
// header).
var chargeCard = func(ctx context.Context, order, key string) (payReceipt, error) {
	charged <- order
	return payReceipt{ChargeID: "ch_" + order}, nil
}

var charged = make(chan string, 10)

// docs: call begin
var Checkout = saga.Define[checkout]("checkout")

func init() {
	saga.StartedBy(Checkout, saga.By(func(m OrderPaid) string { return m.Order }),
		func(ctx context.Context, c *saga.Context[checkout], m OrderPaid) error {
			r, err := saga.Call(ctx, c, "charge", func(ctx context.Context, key string) (payReceipt, error) {
				return chargeCard(ctx, m.Order, key) // key: the Idempotency-Key, the same on every run
			}, saga.RetryWithin(24*time.Hour)) // the provider's key window (the default)
			if errors.Is(err, saga.ErrCallInDoubt) {
				c.Data.Review = true // an earlier run may have charged: for an operator
				return c.Send("payment-reviews", m)
			}
			if err != nil {
				return err // the step fails and is retried: the next run's key is the same
			}
			c.Data.ChargeID = r.ChargeID
			c.MarkComplete()
			return nil
		})
}

// docs: call end

// A step calls a payment API once through saga.Call.
func ExampleCall() {
	b, _ := transport.NewMemory()
	defer b.Close()
	d, _ := saga.NewDispatcher(b, memstore.New(), "checkout", saga.WithSagas(Checkout))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Run(ctx)
	_, _ = d.Send(ctx, OrderPaid{Order: "o-1"})
	fmt.Println("charged", <-charged)
	for {
		if inst, err := d.Instance(ctx, "checkout", "o-1"); err == nil && inst.Completed {
			fmt.Println("completed")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output:
	// charged o-1
	// completed
}
