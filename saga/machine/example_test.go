package machine_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	Ticket struct {
		machine.Instance
		Title string
	}
	TicketOpened struct{ ID, Title string }
	TicketClosed struct{ ID string }
)

// A ticket opens and closes; the machine is a saga, run by a dispatcher.
func Example() {
	m := machine.New[Ticket]("ticket")
	open := m.State("Open")
	opened := machine.NewEvent(m, saga.By(func(e TicketOpened) string { return e.ID }))
	closed := machine.NewEvent(m, saga.By(func(e TicketClosed) string { return e.ID }))
	m.Initially(machine.When(opened).
		Then(func(ctx context.Context, c *saga.Context[Ticket], e TicketOpened) error {
			c.Data.Title = e.Title
			return nil
		}).
		TransitionTo(open))
	m.During(open, machine.When(closed).Finalize())
	def, err := m.Build()
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	broker, err := transport.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	stepped := make(chan struct{}, 1)
	d, err := saga.NewDispatcher(broker, memstore.New(), "tickets", saga.WithSagas(def),
		saga.WithHooks(saga.Hooks{StepDone: func(context.Context, saga.StepInfo, saga.StepResult) { stepped <- struct{}{} }}))
	if err != nil {
		log.Fatal(err)
	}
	go d.Run(ctx)

	if _, err := d.Send(ctx, TicketOpened{ID: "t1", Title: "printer on fire"}); err != nil {
		log.Fatal(err)
	}
	<-stepped
	t, _, err := saga.InstanceOf(ctx, d, def, "t1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(t.CurrentState(), t.Title)
	fmt.Print(m.Mermaid())
	// Output:
	// Open printer on fire
	// stateDiagram-v2
	//     [*] --> Initial
	//     Initial --> Open : TicketOpened
	//     Open --> Final : TicketClosed
	//     Final --> [*]
}
