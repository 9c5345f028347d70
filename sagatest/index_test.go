package sagatest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/sagatest"
)

type (
	ticketOpened struct{ Ticket, Customer string }
	ticketClosed struct{ Ticket string }
	ticketStale  struct{}
	ticketData   struct{ Customer string }
)

func (ticketOpened) MessageName() string { return "ticket.Opened" }
func (ticketClosed) MessageName() string { return "ticket.Closed" }
func (ticketStale) MessageName() string  { return "ticket.Stale" }

// ticketSaga: a support ticket, indexed by customer, closed by a message
// or after a week.
func ticketSaga() *saga.Definition[ticketData] {
	d := saga.Define[ticketData]("ticket")
	saga.Index(d, "customer", func(t ticketData) string { return t.Customer })
	saga.StartedBy(d, saga.By(func(m ticketOpened) string { return m.Ticket }),
		func(_ context.Context, c *saga.Context[ticketData], m ticketOpened) error {
			c.Data.Customer = m.Customer
			_, err := c.RequestTimeout(7*24*time.Hour, ticketStale{})
			return err
		})
	saga.Handles(d, saga.By(func(m ticketClosed) string { return m.Ticket }),
		func(_ context.Context, c *saga.Context[ticketData], _ ticketClosed) error {
			c.MarkComplete()
			return nil
		})
	saga.OnTimeout(d, func(_ context.Context, c *saga.Context[ticketData], _ ticketStale) error {
		c.MarkComplete()
		return nil
	})
	return d
}

// TestFind: Env.Find sees an index as the store holds it, after each
// step settles: closed and timed-out tickets leave it.
func TestFind(t *testing.T) {
	tickets := ticketSaga()
	sagatest.Run(t, []saga.Saga{tickets}, func(t *testing.T, env *sagatest.Env) {
		env.Send(ticketOpened{"t1", "ann"})
		env.Send(ticketOpened{"t2", "bob"})
		env.Send(ticketOpened{"t3", "ann"})
		if got := env.Find(tickets, saga.Where("customer", "ann")); !slices.Equal(got, []string{"t1", "t3"}) {
			t.Fatalf("ann's tickets: got %q, want [t1 t3]", got)
		}
		env.Send(ticketClosed{"t1"})
		if got := env.Find(tickets, saga.Where("customer", "ann")); !slices.Equal(got, []string{"t3"}) {
			t.Fatalf("ann's tickets after t1 closed: got %q, want [t3]", got)
		}
		env.Advance(8 * 24 * time.Hour)
		if got := env.Find(tickets, saga.Where("customer", "ann")); len(got) != 0 {
			t.Fatalf("ann's tickets after a week: got %q, want none", got)
		}
	})
}
