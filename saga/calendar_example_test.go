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

// The calendar saga of the documentation (docs/calendar.md
// quote it): a reminder seven business days before a renewal, at 09:00
// in the customer's zone. examples/renewal is the full version.

type (
	Sub struct {
		Customer string
		RemindAt time.Time
	}
	Subscribed struct {
		Sub, Customer, Zone string
		Renews              time.Time
	}
	SendReminder struct{ Sub string }
	remind       struct{} // the timeout's payload
)

func (remind) MessageName() string { return "renewal.Remind" }

var Renewal = saga.Define[Sub]("renewal")

func init() {
	saga.StartedBy(Renewal, saga.By(func(m Subscribed) string { return m.Sub }),
		func(ctx context.Context, c *saga.Context[Sub], m Subscribed) error {
			c.Data.Customer = m.Customer
			// 09:00 in the customer's zone, seven business days before the renewal
			reminder := calendar.BusinessDays(-7).At(calendar.ClockOf(9, 0)).In(m.Zone)
			r, err := c.RequestTimeoutBy(reminder, remind{}, saga.RuleFrom(m.Renews))
			c.Data.RemindAt = r.At // the instant it computed, for the saga's messages
			return err
		})
	saga.OnTimeout(Renewal, func(ctx context.Context, c *saga.Context[Sub], _ remind) error {
		return c.Send("billing-events", SendReminder{Sub: c.ID()})
	}, saga.CatchUp(saga.CatchUpSkip, 2*time.Hour)) // two hours late: dropped, logged, counted
}

// A timeout requested by a calendar rule: the dispatcher computes its
// instant with the calendar of its registry, and keeps the rule and the
// calendar's version with it.
func ExampleContext_RequestTimeoutBy() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer broker.Close()
	store := memstore.New()

	pl, _ := calendar.New("pl", "2026.1", calendar.Yearly(time.May, 1, "Labour Day"), calendar.Yearly(time.May, 3, "Constitution Day"))
	banks := new(calendar.Registry)
	banks.Add(pl) // and every older version that pending timeouts name
	// pl@2026.1 is the version new requests use: with several versions of pl
	// in banks, NewDispatcher refuses a registry without one named current.
	d, _ := saga.NewDispatcher(broker, store, "billing", saga.WithSagas(Renewal), saga.WithCalendars(banks, calendar.RefOf(pl)))

	run, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(run) }()

	renews := time.Date(2036, time.May, 12, 10, 0, 0, 0, time.UTC)
	d.Send(ctx, Subscribed{Sub: "s1", Customer: "ann", Zone: "Europe/Warsaw", Renews: renews})
	var inst *saga.Instance
	for inst == nil && ctx.Err() == nil {
		inst, _ = d.Instance(ctx, "renewal", "s1")
	}
	fmt.Printf("data %s\n", inst.Data)
	for _, t := range inst.Timeouts {
		fmt.Printf("%s due %s\n  by %q on %s\n", t.Type, t.At.Format(time.RFC3339), t.Rule, t.Calendar)
	}
	cancel()
	<-done
	// Output:
	// data {"Customer":"ann","RemindAt":"2036-04-30T07:00:00Z"}
	// renewal.Remind due 2036-04-30T07:00:00Z
	//   by "7 business days before, at 09:00 Europe/Warsaw" on pl@2026.1
}
