package saga_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

type (
	Invoiced    struct{ Invoice string }
	Paid        struct{ Invoice string }
	InvoiceDue  struct{}
	InvoiceData struct{ Reminders int }
)

func (Invoiced) MessageName() string   { return "billing.Invoiced" }
func (Paid) MessageName() string       { return "billing.Paid" }
func (InvoiceDue) MessageName() string { return "billing.InvoiceDue" }

// Definition.Mermaid draws a saga from its declarations: the message that
// starts it, the one it handles, its timeout and completion.
func ExampleDefinition_Mermaid() {
	d := saga.Define[InvoiceData]("invoice", saga.CheckLiveness())
	saga.StartedBy(d, saga.By(func(m Invoiced) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[InvoiceData], m Invoiced) error {
			_, err := c.RequestTimeout(14*24*time.Hour, InvoiceDue{})
			return err
		})
	saga.Handles(d, saga.By(func(m Paid) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[InvoiceData], m Paid) error {
			c.MarkComplete()
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[InvoiceData], _ InvoiceDue) error {
		c.Data.Reminders++
		_, err := c.RequestTimeout(7*24*time.Hour, InvoiceDue{})
		return err
	}, saga.CatchUp(saga.CatchUpCoalesce, time.Hour))
	fmt.Print(d.Mermaid())
	// Output:
	// flowchart LR
	//     start((start))
	//     saga["invoice<br/>liveness checked"]
	//     done((completed))
	//     start -- "billing.Invoiced" --> saga
	//     h1>"billing.Paid"] --> saga
	//     saga -. RequestTimeout .-> t1{{"timeout billing.InvoiceDue<br/>catch-up: coalesce beyond 1h0m0s"}}
	//     t1 -.-> saga
	//     saga -- MarkComplete --> done
}
