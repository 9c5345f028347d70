package saga_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type SignedUp struct{ Email string }
type Confirmed struct{ Email string }
type lapse struct{}
type Released struct{ Email string }

// A sign-up saga on the in-memory transport: a timeout releases the
// account unless it is confirmed first. Production code swaps in
// transport.NewJetStream and kvstore; tests use sagatest's virtual clock
// instead of the short real timeout here.
func Example() {
	signup := saga.Define[struct{ Confirmed bool }]("signup")
	saga.StartedBy(signup, saga.By(func(m SignedUp) string { return m.Email }),
		func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], m SignedUp) error {
			_, err := c.RequestTimeout(50*time.Millisecond, lapse{})
			return err
		})
	saga.Handles(signup, saga.By(func(m Confirmed) string { return m.Email }),
		func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], m Confirmed) error {
			c.Data.Confirmed = true
			c.MarkComplete() // cancels the pending timeout
			return nil
		})
	saga.OnTimeout(signup, func(ctx context.Context, c *saga.Context[struct{ Confirmed bool }], _ lapse) error {
		c.MarkComplete()
		return c.Send("accounts", Released{Email: c.ID()})
	})

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	broker, _ := transport.NewMemory()
	// One step at a time, in queue order, so the example's output is fixed;
	// with more, Confirmed could overtake SignedUp.
	d, err := saga.NewDispatcher(broker, memstore.New(), "signups", saga.WithSagas(signup), saga.WithConcurrency(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()

	d.Send(ctx, SignedUp{Email: "ann@example.com"})
	d.Send(ctx, SignedUp{Email: "bob@example.com"})
	d.Send(ctx, Confirmed{Email: "ann@example.com"})

	accounts, _ := broker.Queue(ctx, "accounts")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ds, err := accounts.Receive(rctx, 10)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, del := range ds {
		fmt.Printf("%s %s\n", del.Properties[saga.TypeProperty], del.Body)
		del.Complete(ctx)
	}
	stop()
	<-done
	// Output:
	// saga_test.Released {"Email":"bob@example.com"}
}
