package temporal_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/transport"
)

// A service whose timeouts a day or more away go to Temporal and the
// others to JetStream, with the Temporal worker running inside the
// service next to the dispatcher. (Not run: it needs a NATS server and a
// Temporal server.)
func Example() {
	ctx := context.Background()
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: client.DefaultHostPort, Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	engine, err := temporal.New(c, temporal.WithBroker(broker))
	if err != nil {
		log.Fatal(err)
	}
	w, err := temporal.NewWorker(c, broker) // delivers fired timeouts on broker
	if err != nil {
		log.Fatal(err)
	}
	go w.Run(ctx)

	router := &timeout.Router{
		Default: timeout.NewQueue(broker),
		Routes:  []timeout.Route{engine.Route(24 * time.Hour)},
	}
	loan := saga.Define[struct{}]("loan") // its handlers elided
	d, err := saga.NewDispatcher(broker, memstore.New(), "loans", saga.WithSagas(loan), saga.WithTimeouts(router))
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(d.Run(ctx))
}

// Engine.Route makes the route a timeout.Router needs; here every
// timeout of the sagas "loan" and "policy" goes to Temporal, whatever
// its delay. (A lazy client connects on first use: this one never does.)
func ExampleEngine_Route() {
	c, err := client.NewLazyClient(client.Options{HostPort: client.DefaultHostPort})
	if err != nil {
		log.Fatal(err)
	}
	engine, err := temporal.New(c, temporal.WithEngineName("long"))
	if err != nil {
		log.Fatal(err)
	}
	rt := engine.Route(0, "loan", "policy")
	fmt.Println(rt.Engine, rt.Beyond, rt.Sagas)
	// Output: long 0s [loan policy]
}

// Cancel's outcomes are definite; anything else leaves the outcome
// unknown, and Cancel can be called again. (Not run: it needs a Temporal
// server.)
func ExampleEngine_Cancel() {
	var engine *temporal.Engine                                              // from temporal.New
	var ref timeout.Ref                                                      // from Schedule, or a listing
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // Cancel waits for a worker
	defer cancel()
	switch err := engine.Cancel(ctx, ref); {
	case err == nil:
		fmt.Println("cancelled: never delivered")
	case errors.Is(err, timeout.ErrAlreadyFired):
		fmt.Println("fired: delivered, or being delivered")
	case errors.Is(err, timeout.ErrNotFound):
		fmt.Println("nothing pending: cancelled before, or unknown")
	default:
		fmt.Println("outcome unknown, try again:", err)
	}
}

// A standalone worker, or one you already run for other workflows:
// Register adds the timeout workflow and its activity to it. (Not run: it
// needs a Temporal server and a NATS server.)
func ExampleRegister() {
	c, err := client.Dial(client.Options{HostPort: client.DefaultHostPort, Namespace: "default"})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	broker, err := transport.NewJetStream(nc)
	if err != nil {
		log.Fatal(err)
	}
	w := worker.New(c, temporal.DefaultTaskQueue, worker.Options{MaxConcurrentActivityExecutionSize: 200})
	if err := temporal.Register(w, broker); err != nil {
		log.Fatal(err)
	}
	// w.RegisterWorkflow(...) for your own workflows.
	log.Fatal(w.Run(worker.InterruptCh()))
}
