package twofactor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/jetsaga/jetsaga/examples/twofactor"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/transport"
)

// The flow in one process, on the in-memory transport and store; a service
// uses NATS JetStream and saga/kvstore instead (see the demo). Codes live
// 100ms here, so that bob's expires while the example runs.
func Example() {
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	broker, err := transport.NewMemory()
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	flow := twofactor.New(twofactor.Config{
		TTL:     100 * time.Millisecond,
		NewCode: func() string { return "123456" },
	})
	d, err := saga.NewDispatcher(broker, memstore.New(), "auth", saga.WithSagas(flow))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	// The user's service sends commands through the dispatcher and reads
	// the flow's events from the "auth-events" queue.
	events, err := broker.Queue(ctx, "auth-events")
	if err != nil {
		log.Fatal(err)
	}
	send := func(m any) {
		if _, err := d.Send(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	next := func() string { // waits for the next event and describes it
		ds, err := events.Receive(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		m := ds[0]
		if err := m.Complete(ctx); err != nil {
			log.Fatal(err)
		}
		switch m.Properties[saga.TypeProperty] {
		case saga.MessageName[twofactor.CodeIssued]():
			var e twofactor.CodeIssued
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: code %s issued to %s", e.Login, e.Code, e.User)
		case saga.MessageName[twofactor.CodeRejected]():
			var e twofactor.CodeRejected
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: wrong code, %d attempts left", e.Login, e.Remaining)
		case saga.MessageName[twofactor.Verified]():
			var e twofactor.Verified
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: %s verified", e.Login, e.User)
		case saga.MessageName[twofactor.Failed]():
			var e twofactor.Failed
			_ = json.Unmarshal(m.Body, &e)
			return fmt.Sprintf("%s: %s failed: %s", e.Login, e.User, e.Reason)
		}
		return "unexpected " + m.Properties[saga.TypeProperty]
	}

	send(twofactor.CodeRequested{Login: "l1", User: "ann"})
	fmt.Println(next())
	send(twofactor.CodeEntered{Login: "l1", Code: "000000"})
	fmt.Println(next())
	send(twofactor.CodeEntered{Login: "l1", Code: "123456"})
	fmt.Println(next())

	send(twofactor.CodeRequested{Login: "l2", User: "bob"})
	fmt.Println(next())
	fmt.Println(next()) // bob never enters the code

	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// l1: code 123456 issued to ann
	// l1: wrong code, 2 attempts left
	// l1: ann verified
	// l2: code 123456 issued to bob
	// l2: bob failed: expired
}
