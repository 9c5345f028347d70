package main

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
)

// Temporal: the dev server jetsaga's tests use (the temporal CLI built
// from the module proxy, SQLite in memory), a worker in this process with
// default options. A timer is a workflow that sleeps (workflow.Sleep) to
// its due time and then runs its handler; cancel is CancelWorkflow. The
// saga is a workflow of an activity, a timer and an activity.

var temporalSeq atomic.Int64

func (e *env) ensureTemporal(ctx context.Context) (string, error) {
	if e.cfg.temporalURL != "" {
		return e.cfg.temporalURL, nil
	}
	if e.temporal == nil {
		srv, err := temporaltest.Start(ctx, temporaltest.Options{}, logf)
		if err != nil {
			return "", err
		}
		e.temporal = srv
	}
	return e.temporal.HostPort(), nil
}

func temporalPeer(ctx context.Context, e *env) (peer, error) {
	hostPort, err := e.ensureTemporal(ctx)
	if err != nil {
		return peer{}, err
	}
	return peer{
		name:   "Temporal",
		config: "dev server (temporal CLI " + temporaltest.CLIVersion + ", SQLite in memory), worker with default options in the bench process; one workflow per timer (workflow.Sleep to the due time); cancel = CancelWorkflow; saga = activity, Sleep, activity",
		open: func(ctx context.Context, fire func(int)) (timers, error) {
			return openTemporal(ctx, hostPort, fire, 0, nil)
		},
		saga: func(ctx context.Context, d time.Duration, done func(int)) (sagas, error) {
			return openTemporal(ctx, hostPort, nil, d, done)
		},
		servers: func() []int { return childrenNamed("temporal") },
		pending: []string{"-child", "pending", "-peer", "temporal"},
		// (d) on a server of its own, so that (a)–(c)'s histories do not count.
		pendingSetup: func(ctx context.Context) ([]string, func() []int, func(), error) {
			before := childrenNamed("temporal")
			srv, err := temporaltest.Start(ctx, temporaltest.Options{}, logf)
			if err != nil {
				return nil, nil, nil, err
			}
			var pids []int
			for _, p := range childrenNamed("temporal") {
				if !slices.Contains(before, p) {
					pids = append(pids, p)
				}
			}
			return []string{"-temporal", srv.HostPort()}, func() []int { return pids }, func() { srv.Stop() }, nil
		},
	}, nil
}

type temporalTimers struct {
	c     client.Client
	w     worker.Worker
	queue string
}

func openTemporal(ctx context.Context, hostPort string, fire func(int), delay time.Duration, done func(int)) (*temporalTimers, error) {
	c, err := client.DialContext(ctx, client.Options{HostPort: hostPort, Logger: temporalLogger{}})
	if err != nil {
		return nil, err
	}
	t := &temporalTimers{c: c, queue: fmt.Sprintf("peers-%d", temporalSeq.Add(1))}
	t.w = worker.New(c, t.queue, worker.Options{})
	t.w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in timerInput) error {
		if d := in.Due.Sub(workflow.Now(ctx)); d > 0 {
			if err := workflow.Sleep(ctx, d); err != nil {
				return err
			}
		}
		if fire != nil && !workflow.IsReplaying(ctx) {
			fire(in.ID)
		}
		return nil
	}, workflow.RegisterOptions{Name: "timer"})
	t.w.RegisterWorkflowWithOptions(func(ctx workflow.Context, id int) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
		if err := workflow.ExecuteActivity(ctx, "one", id).Get(ctx, nil); err != nil {
			return err
		}
		if err := workflow.Sleep(ctx, delay); err != nil {
			return err
		}
		return workflow.ExecuteActivity(ctx, "two", id).Get(ctx, nil)
	}, workflow.RegisterOptions{Name: "saga"})
	t.w.RegisterActivityWithOptions(func(context.Context, int) error { return nil }, activity.RegisterOptions{Name: "one"})
	t.w.RegisterActivityWithOptions(func(_ context.Context, id int) error {
		if done != nil {
			done(id)
		}
		return nil
	}, activity.RegisterOptions{Name: "two"})
	if err := t.w.Start(); err != nil {
		c.Close()
		return nil, err
	}
	return t, nil
}

func (t *temporalTimers) schedule(ctx context.Context, id int, due time.Time) (any, error) {
	wid := fmt.Sprintf("%s-t%d", t.queue, id)
	_, err := t.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: wid, TaskQueue: t.queue}, "timer", timerInput{ID: id, Due: due})
	return wid, err
}

func (t *temporalTimers) cancel(ctx context.Context, ref any) error {
	return t.c.CancelWorkflow(ctx, ref.(string), "")
}

func (t *temporalTimers) start(ctx context.Context, id int) error {
	_, err := t.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("%s-s%d", t.queue, id), TaskQueue: t.queue}, "saga", id)
	return err
}

func (t *temporalTimers) close() {
	t.w.Stop()
	t.c.Close()
}

// temporalLogger keeps the SDK's logging to warnings and errors.
type temporalLogger struct{}

func (temporalLogger) Debug(string, ...any) {}
func (temporalLogger) Info(string, ...any)  {}
func (temporalLogger) Warn(msg string, kv ...any) {
	quietLogger().Warn(msg, kv...)
}
func (temporalLogger) Error(msg string, kv ...any) { quietLogger().Error(msg, kv...) }
