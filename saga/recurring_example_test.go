package saga_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// The dunning saga of docs/calendar.md: a reminder every second business
// day at 09:00 Warsaw time, from the invoice's issue until it is paid.

type (
	Invoice struct {
		Reminders saga.TimeoutHandle
	}
	InvoiceIssued struct {
		Invoice string
		Issued  time.Time
	}
	InvoicePaid  struct{ Invoice string }
	DunningEmail struct {
		Invoice string
		N       int
	}
	dun struct{} // the recurring timeout's payload
)

func (dun) MessageName() string { return "dunning.Dun" }

var Dunning = saga.Define[Invoice]("dunning")

func init() {
	saga.StartedBy(Dunning, saga.By(func(m InvoiceIssued) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[Invoice], m InvoiceIssued) error {
			// every second business day at 09:00 Warsaw time, until paid
			every := calendar.BusinessDays(2).At(calendar.ClockOf(9, 0)).In("Europe/Warsaw")
			r, err := c.RequestRecurringTimeoutBy(every, dun{}, saga.RuleFrom(m.Issued))
			c.Data.Reminders = r.Handle // the same handle for every occurrence
			return err
		})
	saga.OnTimeout(Dunning, func(ctx context.Context, c *saga.Context[Invoice], _ dun) error {
		// c.TimeoutDue() is the occurrence's nominal time, c.Occurrence() its number
		return c.Send("mail", DunningEmail{Invoice: c.ID(), N: c.Occurrence()})
	}, saga.CatchUp(saga.CatchUpCoalesce, time.Hour)) // after an outage: one email, not a backlog
	saga.Handles(Dunning, saga.By(func(m InvoicePaid) string { return m.Invoice }),
		func(ctx context.Context, c *saga.Context[Invoice], m InvoicePaid) error {
			c.CancelTimeout(c.Data.Reminders) // ends the series; so would c.MarkComplete()
			return nil
		})
}

// A recurring timeout by a calendar rule: one occurrence pending at a
// time, the next computed from the nominal time of the one handled.
func ExampleContext_RequestRecurringTimeoutBy() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	pl, _ := calendar.New("pl", "2026.1", calendar.Yearly(time.May, 1, "Labour Day"), calendar.Yearly(time.May, 3, "Constitution Day"))
	banks := new(calendar.Registry)
	banks.Add(pl)
	d, _ := saga.NewDispatcher(broker, memstore.New(), "billing", saga.WithSagas(Dunning), saga.WithCalendars(banks))

	run, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()

	// Friday May 2; Monday May 5 is the first business day after it.
	d.Send(ctx, InvoiceIssued{Invoice: "inv-1", Issued: time.Date(2036, time.May, 2, 12, 0, 0, 0, time.UTC)})
	var inst *saga.Instance
	for inst == nil && ctx.Err() == nil {
		inst, _ = d.Instance(ctx, "dunning", "inv-1")
	}
	for _, t := range inst.Timeouts {
		fmt.Printf("%s occurrence %d due %s\n  by %q on %s, recurring: %v\n", t.Type, t.Occurrence, t.At.Format(time.RFC3339), t.Rule, t.Calendar, t.Recurring)
	}
	cancel()
	<-done
	// Output:
	// dunning.Dun occurrence 1 due 2036-05-06T07:00:00Z
	//   by "2 business days after, at 09:00 Europe/Warsaw" on pl@2026.1, recurring: true
}
