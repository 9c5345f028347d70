package temporal

import (
	"context"
	"fmt"
	"sync"
	"time"

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
// timeouts. Give that worker autoscaling pollers
// (worker.Options.WorkflowTaskPollerBehavior and
// ActivityTaskPollerBehavior, worker.NewPollerBehaviorAutoscaling), as
// NewWorker does: see the package documentation, Worker pollers.
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
// the Temporal worker's options; the pollers it leaves unset autoscale
// (see the package documentation, Worker pollers).
func NewWorker(c client.Client, b *transport.Broker, opts ...Option) (*Worker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	w := worker.New(c, cfg.taskQueue, workerOptions(cfg.workerOptions))
	if err := Register(w, b, opts...); err != nil {
		return nil, err
	}
	return &Worker{w: w}, nil
}

// Pollers of the workers NewWorker creates, unless WithWorkerOptions sets
// them: Temporal's poller autoscaling (worker.NewPollerBehaviorAutoscaling)
// for workflow tasks and activity tasks alike, starting with
// DefaultInitialPollers of each and scaling between DefaultMinPollers and
// DefaultMaxPollers as the server asks.
const (
	DefaultInitialPollers = 5
	DefaultMinPollers     = 1
	DefaultMaxPollers     = 100
)

// DefaultDeadlockDetectionTimeout is the worker.Options
// DeadlockDetectionTimeout of the workers NewWorker creates, unless
// WithWorkerOptions sets one: the workflow task's own timeout (Temporal's
// default, 10 s), where the SDK's default is 1 s. The timeout workflow
// never blocks, so on a worker that runs only it the SDK's deadlock check
// only ever fires on a CPU so loaded that a workflow goroutine waits a
// second for it — seen on 2 saturated cores under -race — and then fails
// the workflow task: the cancels waiting on it wait for Temporal's retry
// of the task, and from its third attempt on Temporal refuses updates and
// backs the retries off.
const DefaultDeadlockDetectionTimeout = 10 * time.Second

// workerOptions returns o with the engine's default pollers where o sets
// none, and its DefaultDeadlockDetectionTimeout.
//
// The SDK's default, 2 pollers shared by the worker's sticky queue and the
// task queue, falls behind a burst of cancels, and a worker that polls
// with a fixed number of pollers sends every poll to its sticky queue
// while that queue reported a backlog — which it goes on doing, once the
// backlog is gone, until a sticky poll comes back empty a minute later.
// Meanwhile the task queue is not polled: the first task of a new
// timeout, and the cancel of a timeout whose update could not start on
// the sticky queue within 5 seconds (Temporal then moves it to the task
// queue), wait past Cancel's timeout. Autoscaling polls the two queues
// with pollers of their own, and adds pollers when tasks wait.
func workerOptions(o worker.Options) worker.Options {
	auto := worker.PollerBehaviorAutoscalingOptions{
		InitialNumberOfPollers: DefaultInitialPollers, MinimumNumberOfPollers: DefaultMinPollers, MaximumNumberOfPollers: DefaultMaxPollers,
	}
	if o.MaxConcurrentWorkflowTaskPollers == 0 && o.WorkflowTaskPollerBehavior == nil {
		o.WorkflowTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(auto)
	}
	if o.MaxConcurrentActivityTaskPollers == 0 && o.ActivityTaskPollerBehavior == nil {
		o.ActivityTaskPollerBehavior = worker.NewPollerBehaviorAutoscaling(auto)
	}
	if o.DeadlockDetectionTimeout == 0 {
		o.DeadlockDetectionTimeout = DefaultDeadlockDetectionTimeout
	}
	return o
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
