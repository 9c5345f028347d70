package saga_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type OrderPlaced struct{ OrderID string }
type PaymentReceived struct{ OrderID string }
type PaymentDue struct{}
type Reminder struct{ OrderID string }

type order struct {
	OrderID   string
	Paid      bool
	Reminders int
	Due       saga.TimeoutHandle
}

func orderSaga() *saga.Definition[order] {
	d := saga.Define[order]("order")
	saga.StartedBy(d, saga.By(func(m OrderPlaced) string { return m.OrderID }),
		func(ctx context.Context, c *saga.Context[order], m OrderPlaced) error {
			c.Data.OrderID = m.OrderID
			h, err := c.RequestTimeout(14*24*time.Hour, PaymentDue{})
			c.Data.Due = h
			return err
		})
	saga.Handles(d, saga.By(func(m PaymentReceived) string { return m.OrderID }),
		func(ctx context.Context, c *saga.Context[order], m PaymentReceived) error {
			c.Data.Paid = true
			c.MarkComplete()
			return nil
		})
	saga.OnTimeout(d, func(ctx context.Context, c *saga.Context[order], _ PaymentDue) error {
		c.Data.Reminders++
		if err := c.Send("billing-out", Reminder{OrderID: c.Data.OrderID}); err != nil {
			return err
		}
		h, err := c.RequestTimeout(7*24*time.Hour, PaymentDue{})
		c.Data.Due = h
		return err
	})
	return d
}

func TestOrderRemindersOnVirtualClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		b, err := transport.NewMemory()
		if err != nil {
			t.Fatal(err)
		}
		store := memstore.New()
		d, err := saga.NewDispatcher(b, store, "orders", saga.WithSagas(orderSaga()))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- d.Run(ctx) }()
		if _, err := d.Send(ctx, OrderPlaced{OrderID: "o-1"}); err != nil {
			t.Fatal(err)
		}
		out, err := b.OpenQueue(ctx, transport.QueueConfig{Name: "billing-out"})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		time.Sleep(28*24*time.Hour + time.Minute) // 14 days, then 7, then 7
		synctest.Wait()
		ms, err := out.Peek(ctx, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 3 {
			t.Fatalf("got %d reminders after 28 days, want 3", len(ms))
		}
		for i, m := range ms {
			want := start.Add(time.Duration(14+7*i) * 24 * time.Hour)
			if m.EnqueuedAt.Before(want) {
				t.Errorf("reminder %d at %v, before its due time %v", i, m.EnqueuedAt, want)
			}
		}
		if _, err := d.Send(ctx, PaymentReceived{OrderID: "o-1"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		time.Sleep(30 * 24 * time.Hour)
		synctest.Wait()
		if ms, _ := out.Peek(ctx, 0, 10); len(ms) != 3 {
			t.Errorf("got %d reminders after payment, want still 3", len(ms))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
