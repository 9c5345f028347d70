package temporal

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/timeouttest"
	"github.com/jetsaga/jetsaga/transport"
)

// TestConformance runs the timeout conformance suite against the engine
// on a real Temporal dev server, with workers delivering to JetStream,
// and with listings filtered by search attributes.
func TestConformance(t *testing.T) {
	t.Parallel() // its cases wait on Temporal: beside the package's other long waits
	srv, ns := servers(t)
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		c := srv.Client(t)
		b := broker(t, ns)
		tq := newTaskQueue()
		opts := []Option{WithTaskQueue(tq), WithSearchAttributes()}
		startWorker(t, c, b, opts...)
		e, err := New(c, append(opts, WithBroker(b))...)
		if err != nil {
			t.Fatal(err)
		}
		return timeouttest.Env{Scheduler: e, Broker: b}
	}, timeouttest.Features{Slack: 5 * time.Second, ListingLag: 5 * time.Second, RaceRounds: 300})
}

// TestConformanceRouter runs the suite on a timeout.Router whose long
// route is the Temporal engine (without search attributes: listings
// filtered in the client), so that both engines' paths are covered.
func TestConformanceRouter(t *testing.T) {
	t.Parallel() // its cases wait on Temporal: beside the package's other long waits
	srv, ns := servers(t)
	timeouttest.Run(t, func(t *testing.T) timeouttest.Env {
		c := srv.Client(t)
		b := broker(t, ns)
		e, _ := servedEngine(t, c, b)
		r := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{e.Route(1200 * time.Millisecond)}}
		return timeouttest.Env{Scheduler: r, Broker: b}
	}, timeouttest.Features{Slack: 5 * time.Second, ListingLag: 5 * time.Second, RaceRounds: 50,
		EarlyActivation: timeout.DefaultEarlyActivation}) // the router's JetStream engine activates early by default
}

// TestCancelUpdateDeduplicated checks what Cancel's resends rely on: an
// update sent again under the ID of one already answered gets that
// answer, even once the workflow has closed, where an update of another
// ID gets none.
func TestCancelUpdateDeduplicated(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: "dedup", Queue: "dedup-" + tq, At: time.Now().Add(time.Hour), Message: &transport.Message{}})
	if err != nil {
		t.Fatal(err)
	}
	wid, err := e.parseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	id := newUpdateID()
	for i := range 2 {
		if got, err := e.sendCancel(t.Context(), wid, id); got != outcomeCancelled || err != nil {
			t.Fatalf("update %d under one ID: %q, %v; want %q", i+1, got, err, outcomeCancelled)
		}
	}
	if got, err := e.sendCancel(t.Context(), wid, newUpdateID()); err == nil {
		t.Fatalf("update under a new ID to the closed workflow: %q, want an error", got)
	}
	if err := e.Cancel(t.Context(), ref); !errors.Is(err, timeout.ErrNotFound) {
		t.Fatalf("Cancel after the cancel: %v, want ErrNotFound", err)
	}
}

// TestWorkerPollers checks NewWorker's defaults: autoscaling pollers and
// DefaultDeadlockDetectionTimeout where the worker options set none, the
// options' own otherwise.
func TestWorkerPollers(t *testing.T) {
	o := workerOptions(worker.Options{})
	if o.WorkflowTaskPollerBehavior == nil || o.ActivityTaskPollerBehavior == nil || o.MaxConcurrentWorkflowTaskPollers != 0 || o.MaxConcurrentActivityTaskPollers != 0 {
		t.Errorf("default pollers: %+v, want autoscaling", o)
	}
	if o.DeadlockDetectionTimeout != DefaultDeadlockDetectionTimeout {
		t.Errorf("default deadlock detection timeout %v, want %v", o.DeadlockDetectionTimeout, DefaultDeadlockDetectionTimeout)
	}
	if o := workerOptions(worker.Options{DeadlockDetectionTimeout: time.Second}); o.DeadlockDetectionTimeout != time.Second {
		t.Errorf("deadlock detection timeout set by the options changed: %v", o.DeadlockDetectionTimeout)
	}
	fixed := worker.NewPollerBehaviorSimpleMaximum(worker.PollerBehaviorSimpleMaximumOptions{MaximumNumberOfPollers: 4})
	o = workerOptions(worker.Options{MaxConcurrentWorkflowTaskPollers: 8, ActivityTaskPollerBehavior: fixed})
	if o.WorkflowTaskPollerBehavior != nil || o.MaxConcurrentWorkflowTaskPollers != 8 || o.ActivityTaskPollerBehavior != fixed || o.MaxConcurrentActivityTaskPollers != 0 {
		t.Errorf("pollers set by the options changed: %+v", o)
	}
}
