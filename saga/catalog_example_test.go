package saga_test

import (
	"context"
	"fmt"

	"github.com/jetsaga/jetsaga/saga"
)

type (
	ParcelSent      struct{ Parcel string }
	ParcelDelivered struct{ Parcel string }
	ParcelLate      struct{}
)

// A plain saga's catalog entry, as a dispatcher on queue "parcels"
// publishes it: three states, its messages and timeouts the transitions.
func ExampleDefinition_Describe() {
	d := saga.Define[struct{}]("parcel")
	saga.StartedBy(d, saga.By(func(m ParcelSent) string { return m.Parcel }),
		func(context.Context, *saga.Context[struct{}], ParcelSent) error { return nil })
	saga.Handles(d, saga.By(func(m ParcelDelivered) string { return m.Parcel }),
		func(context.Context, *saga.Context[struct{}], ParcelDelivered) error { return nil })
	saga.OnTimeout(d, func(context.Context, *saga.Context[struct{}], ParcelLate) error { return nil })

	e := d.Describe("parcels")
	fmt.Println(e.Saga, e.Kind, "version", e.Version, "on", e.Queue)
	fmt.Println(e.Graph.States)
	for _, t := range e.Graph.Transitions {
		fmt.Printf("%s -> %s: %s\n", t.From, t.To, t.Event)
	}
	// Output:
	// parcel saga version 1 on parcels
	// [Initial Running Completed]
	// Initial -> Running: saga_test.ParcelSent
	// Running -> Running: saga_test.ParcelDelivered
	// Running -> Running: timeout saga_test.ParcelLate
	// Running -> Completed: MarkComplete
}
