package temporal

import (
	"context"
	"fmt"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/transport"
)

// workerConfig is what the workflow and the activity run with.
type workerConfig struct {
	config
	broker *transport.Broker
}

// Register registers the timeout workflow and its delivery activity on a
// worker you run yourself, which must poll the engine's task queue
// (WithTaskQueue). The activity delivers messages on b: a broker on the
// same NATS server (and WithPrefix) as the dispatchers that receive the
// timeouts.
func Register(r worker.Registry, b *transport.Broker, opts ...Option) error {
	if b == nil {
		return fmt.Errorf("%w: nil broker", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	w := &workerConfig{config: cfg, broker: b}
	r.RegisterWorkflowWithOptions(w.timeoutWorkflow, workflow.RegisterOptions{Name: WorkflowType})
	r.RegisterActivityWithOptions(w.deliver, activity.RegisterOptions{Name: ActivityDeliver})
	return nil
}

// Worker runs timeouts' workflows and delivers their messages: a Temporal
// worker on the engine's task queue with the timeout workflow and the
// delivery activity registered. Run one or more, inside the service next
// to its dispatcher or standalone, for as long as timeouts are pending on
// the engine: without a worker, timeouts do not fire (they fire late,
// once one runs again) and Cancel of a pending timeout waits.
type Worker struct {
	w    worker.Worker
	once sync.Once
}

// NewWorker returns a worker that polls the engine's task queue through c
// (in c's namespace) and delivers messages on b. WithWorkerOptions sets
// the Temporal worker's options.
func NewWorker(c client.Client, b *transport.Broker, opts ...Option) (*Worker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	w := worker.New(c, cfg.taskQueue, cfg.workerOptions)
	if err := Register(w, b, opts...); err != nil {
		return nil, err
	}
	return &Worker{w: w}, nil
}

// Start starts polling in the background; Stop stops it.
func (w *Worker) Start() error { return w.w.Start() }

// Stop stops the worker, waiting for the activities in flight up to the
// worker's WorkerStopTimeout. An interrupted delivery is retried by
// another worker; its message is delivered once.
func (w *Worker) Stop() { w.once.Do(w.w.Stop) }

// Run runs the worker until ctx ends, then stops it and returns nil; or
// returns the error that kept it from starting.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.w.Start(); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop()
	return nil
}
