package saga_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type ItemAdded struct{ Cart, Item string }

// Version 1 of a cart saga counted items; version 2 keeps them. Version
// 2 declares its data version and how version-1 data becomes version 2.
// Both run here on one queue and one store, as two releases do during a
// rolling deploy: version 2 reads the record version 1 wrote, upcast;
// version 1 never writes the record version 2 wrote, and leaves the
// message for a newer worker.
func ExampleDataVersion() {
	type cartV1 struct{ Count int }
	type cartV2 struct {
		Items []string
		Lost  int // items counted by version 1, unnamed
	}
	v1 := saga.Define[cartV1]("cart")
	saga.StartedBy(v1, saga.By(func(m ItemAdded) string { return m.Cart }),
		func(_ context.Context, c *saga.Context[cartV1], _ ItemAdded) error {
			c.Data.Count++
			return nil
		})
	v2 := saga.Define[cartV2]("cart", saga.DataVersion(2,
		saga.Upcast(func(old cartV1) (cartV2, error) { return cartV2{Lost: old.Count}, nil })))
	saga.StartedBy(v2, saga.By(func(m ItemAdded) string { return m.Cart }),
		func(_ context.Context, c *saga.Context[cartV2], m ItemAdded) error {
			c.Data.Items = append(c.Data.Items, m.Item)
			return nil
		})

	ctx := context.Background()
	broker, _ := transport.NewMemory()
	store := memstore.New()
	quiet := saga.WithLogger(slog.New(slog.DiscardHandler))
	report := saga.WithHooks(saga.Hooks{StepDone: func(_ context.Context, info saga.StepInfo, res saga.StepResult) {
		fmt.Printf("  step: %s\n", res.Outcome)
	}})
	old, _ := saga.NewDispatcher(broker, store, "carts", saga.WithSagas(v1), quiet, report)
	nu, _ := saga.NewDispatcher(broker, store, "carts", saga.WithSagas(v2), quiet, report)
	q, _ := broker.OpenQueue(ctx, transport.QueueConfig{Name: "carts"})
	handle := func(d *saga.Dispatcher, m ItemAdded) {
		d.Send(ctx, m)
		ds, _ := q.Receive(ctx, 1)
		d.Handle(ctx, ds[0])
	}
	show := func() {
		data, inst, err := saga.InstanceOf(ctx, nu, v2, "c1")
		fmt.Printf("  stored at version %d, read as %+v %v\n", inst.DataVersion, data, err)
	}

	fmt.Println("version 1 adds an apple:")
	handle(old, ItemAdded{Cart: "c1", Item: "apple"})
	show()
	fmt.Println("version 2 adds a pear:")
	handle(nu, ItemAdded{Cart: "c1", Item: "pear"})
	show()
	fmt.Println("version 1 gets a plum:")
	handle(old, ItemAdded{Cart: "c1", Item: "plum"})
	show()
	// Output:
	// version 1 adds an apple:
	//   step: handled
	//   stored at version 1, read as {Items:[] Lost:1} <nil>
	// version 2 adds a pear:
	//   step: handled
	//   stored at version 2, read as {Items:[pear] Lost:1} <nil>
	// version 1 gets a plum:
	//   step: version-wait
	//   stored at version 2, read as {Items:[pear] Lost:1} <nil>
}

type Refund struct{ Order string }

// MessageName: the type's name since it got a new field.
func (Refund) MessageName() string { return "shop.Refund.v2" }

// MessageAliases: the names Refund travelled under before, and how each
// old shape becomes Refund's.
func (Refund) MessageAliases() []saga.Alias {
	return []saga.Alias{
		{Name: "shop.Refund"}, // the same shape, named by version 1
		{Name: "shop.RefundRequested", Upcast: saga.Upcast(func(old struct{ OrderID string }) (Refund, error) {
			return Refund{Order: old.OrderID}, nil
		})},
	}
}

// A message type renamed, or given a new shape under a new name, keeps
// receiving what was sent under its old names: a saga's StartedBy,
// Handles or OnTimeout, Decode and Decoder accept them.
func ExampleAliased() {
	for _, m := range []*transport.Message{
		{Body: []byte(`{"Order":"o-1"}`), Properties: map[string]string{saga.TypeProperty: "shop.Refund.v2"}},
		{Body: []byte(`{"Order":"o-2"}`), Properties: map[string]string{saga.TypeProperty: "shop.Refund"}},
		{Body: []byte(`{"OrderID":"o-3"}`), Properties: map[string]string{saga.TypeProperty: "shop.RefundRequested"}},
		{Body: []byte(`{}`), Properties: map[string]string{saga.TypeProperty: "shop.Refunded"}},
	} {
		r, err := saga.Decode[Refund](m)
		fmt.Printf("%s: %+v %v\n", m.Properties[saga.TypeProperty], r, err)
	}
	// Output:
	// shop.Refund.v2: {Order:o-1} <nil>
	// shop.Refund: {Order:o-2} <nil>
	// shop.RefundRequested: {Order:o-3} <nil>
	// shop.Refunded: {Order:} saga: message of another type: got "shop.Refunded", want "shop.Refund.v2"
}

// A scheduled timeout prints its sequence number as the jetsaga command
// shows it.
func ExampleScheduledTimeout_String() {
	st := saga.ScheduledTimeout{Saga: "dunning", ID: "inv-1", Type: "dunning.Remind",
		At: time.Date(2024, 1, 22, 0, 0, 0, 0, time.UTC), Seq: transport.ScheduledBit | 2, Ref: "queue:billing:140737488355330@1705881600000000000"}
	fmt.Println(st)
	// Output:
	// dunning/inv-1 dunning.Remind due 2024-01-22T00:00:00Z seq 0:s2 (queue:billing:140737488355330@1705881600000000000)
}
