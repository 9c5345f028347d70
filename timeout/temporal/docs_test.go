package temporal_test

import (
	"context"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal"
	"github.com/jetsaga/jetsaga/transport"
)

// LoanOffer stands for the guide's saga (its handlers elided).
var LoanOffer = saga.Define[struct{}]("loanoffer")

// docsTemporal is the snippet of docs/temporal.md (internal/doccheck
// checks that the guide quotes it). Compiled, not run: it needs a Temporal
// server; the engine's tests run the same calls on dev servers.
func docsTemporal(ctx context.Context, broker *transport.Broker, store saga.Store) *saga.Dispatcher {
	c, _ := client.Dial(client.Options{HostPort: "temporal:7233", Namespace: "loans"})
	engine, _ := temporal.New(c, temporal.WithBroker(broker)) // WithTaskQueue, WithSearchAttributes, ...
	w, _ := temporal.NewWorker(c, broker, temporal.WithWorkerOptions(worker.Options{}))
	go w.Run(ctx) // or temporal.Register(yourWorker, broker) on a worker you already run

	router := &timeout.Router{
		Default: timeout.NewQueue(broker),                      // JetStream
		Routes:  []timeout.Route{engine.Route(24 * time.Hour)}, // Temporal beyond a day
	}
	d, _ := saga.NewDispatcher(broker, store, "loans", saga.WithSagas(LoanOffer), saga.WithTimeouts(router))
	return d
}

var _ = docsTemporal
