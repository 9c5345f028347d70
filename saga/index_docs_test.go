package saga_test

import (
	"context"
	"fmt"

	"github.com/jetsaga/jetsaga/saga"
)

// The snippets of docs/indexes.md (internal/doccheck checks that the guide
// quotes them). Compiled, not run: the index tests run the same calls.

type (
	Order struct {
		Customer, PaymentID string
		SKUs                []string
	}
	PaymentCaptured struct{ PaymentID string }
)

func docsIndexes(ctx context.Context, d *saga.Dispatcher, last string) error {
	orders := saga.Define[Order]("order")
	// Not unique: a customer has many orders.
	saga.Index(orders, "customer", func(o Order) string { return o.Customer })
	// Unique: one live order per payment.
	saga.Index(orders, "payment", func(o Order) string { return o.PaymentID }, saga.Unique())
	// Several values an instance: found by any of them.
	saga.IndexValues(orders, "sku", func(o Order) []string { return o.SKUs })

	for inst, err := range saga.Find(ctx, d, orders, saga.Where("customer", "c-17")) {
		if err != nil {
			return err
		}
		fmt.Println(inst.ID, inst.Updated, inst.Timeouts) // state, status and pending timeouts
	}
	// Paged: after the last ID of the previous page, 50 at a time.
	saga.Find(ctx, d, orders, saga.Where("customer", "c-17").After(last).Limit(50))

	saga.Handles(orders, saga.ByIndex(orders, "payment", func(m PaymentCaptured) string { return m.PaymentID }),
		func(ctx context.Context, c *saga.Context[Order], m PaymentCaptured) error {
			return nil
		})
	return nil
}

var _ = docsIndexes
