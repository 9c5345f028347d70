package temporal

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
)

type (
	recurStart struct {
		ID    string
		Stop  string // how the series stops: the instance's ID
		Every time.Duration
	}
	recurTick struct{}
	recurStop struct{ ID string }
	recurData struct {
		First  time.Time // the first occurrence's nominal time
		Every  time.Duration
		Stop   string
		Handle saga.TimeoutHandle
	}
)

// recurLog records what a dispatcher did with the recurring saga's
// messages, per instance: the due times of the occurrences whose steps
// committed, in the order they did, from the StepDone hook (a handler
// runs again after a conflict; a step commits once), and what the
// handlers saw.
type recurLog struct {
	mu        sync.Mutex
	first     map[string]time.Time   // the first occurrence's due time
	handled   map[string][]time.Time // committed occurrences' due times
	lateness  map[string][]time.Duration
	dropped   map[string]int  // occurrences delivered after the stop
	stoppedAt map[string]int  // the occurrence pending at the stop message
	raced     map[string]bool // the stop came less than raceMargin before it was due
	stopped   map[string]bool // the stop message's step committed
	problems  []string
}

func (l *recurLog) do(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
}

func (l *recurLog) stepDone(_ context.Context, info saga.StepInfo, res saga.StepResult) {
	committed := res.Outcome == saga.Handled || res.Outcome == saga.EffectsPending
	l.do(func() {
		switch {
		case info.MessageType == saga.MessageName[recurTick]() && committed:
			l.handled[info.ID] = append(l.handled[info.ID], info.TimeoutDue)
			l.lateness[info.ID] = append(l.lateness[info.ID], info.StartedAt.Sub(info.TimeoutDue).Round(time.Millisecond))
		case info.MessageType == saga.MessageName[recurTick]() && res.Outcome == saga.Dropped:
			l.dropped[info.ID]++
		case info.MessageType == saga.MessageName[recurStop]() && committed:
			l.stopped[info.ID] = true
		case !committed:
			l.problems = append(l.problems, fmt.Sprintf("%s: step of %s: %s %v", info.ID, info.MessageType, res.Outcome, res.Err))
		}
	})
}

// occurrences returns the numbers of the occurrences of instance id that
// were handled, from their due times, and "" or why they are not on the
// grid.
func (l *recurLog) occurrences(id string, every time.Duration) (ns []int, offGrid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, due := range l.handled[id] {
		off := due.Sub(l.first[id])
		if off%every != 0 {
			offGrid += fmt.Sprintf("due %v is %v after the first; ", due, off)
		}
		ns = append(ns, int(off/every)+1)
	}
	return ns, offGrid
}

// TestRecurringTimeoutOnTemporal routes a saga's recurring timeouts to
// the Temporal engine: each occurrence is a workflow of its own,
// delivered once, in order, never before its due time. Four instances
// stop their series four ways: in the step of the fifth occurrence (every
// second), by CancelTimeout or by completing; or in the step of a stop
// message sent after the second occurrence (every 3 seconds, so that the
// stop comes well before the third), by CancelTimeout of the pending
// occurrence or by completing, which cancel its workflow on Temporal. Then every
// timeout workflow on the task queue has closed, one fired per occurrence
// handled or dropped, and none is left pending.
func TestRecurringTimeoutOnTemporal(t *testing.T) {
	const (
		every = time.Second     // of the instances that stop in a step
		slow  = 3 * time.Second // of those stopped by a message
		stop  = 5
		name  = "recur-temporal"
		// A stop handled less than raceMargin before the pending
		// occurrence is due may find it fired (its message is then
		// dropped); one handled earlier must cancel it.
		raceMargin = 500 * time.Millisecond
	)
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b, WithBroker(b))

	log := &recurLog{first: map[string]time.Time{}, handled: map[string][]time.Time{}, lateness: map[string][]time.Duration{}, dropped: map[string]int{},
		stoppedAt: map[string]int{}, raced: map[string]bool{}, stopped: map[string]bool{}}
	flow := saga.Define[recurData](name)
	saga.StartedBy(flow, saga.By(func(m recurStart) string { return m.ID }),
		func(_ context.Context, c *saga.Context[recurData], m recurStart) error {
			p, err := c.RequestRecurringTimeout(m.Every, recurTick{})
			c.Data.First, c.Data.Stop, c.Data.Handle, c.Data.Every = p.At, m.Stop, p.Handle, m.Every
			log.do(func() { log.first[c.ID()] = p.At })
			return err
		})
	saga.Handles(flow, saga.By(func(m recurStop) string { return m.ID }),
		func(_ context.Context, c *saga.Context[recurData], _ recurStop) error {
			for _, p := range c.PendingTimeouts() {
				log.do(func() {
					log.stoppedAt[c.ID()] = p.Occurrence
					log.raced[c.ID()] = p.At.Sub(c.Now()) < raceMargin
				})
			}
			if c.Data.Stop == "stop-complete" {
				c.MarkComplete()
			} else {
				c.CancelTimeout(c.Data.Handle)
			}
			return nil
		})
	saga.OnTimeout(flow, func(_ context.Context, c *saga.Context[recurData], _ recurTick) error {
		n := c.Occurrence()
		due := c.Data.First.Add(time.Duration(n-1) * c.Data.Every)
		in := c.Incoming()
		var problem string
		switch {
		case !c.TimeoutDue().Equal(due):
			problem = fmt.Sprintf("TimeoutDue %v, want %v on the grid", c.TimeoutDue(), due)
		case c.Now().Before(due):
			problem = fmt.Sprintf("handled %v early", due.Sub(c.Now()))
		case in.EnqueuedAt.Before(due):
			problem = fmt.Sprintf("reached the queue %v early", due.Sub(in.EnqueuedAt))
		case !in.ScheduledAt.IsZero():
			// The queue engine schedules its messages; Temporal's activity
			// sends them when due.
			problem = "delivered by a scheduled message, not by the Temporal engine"
		}
		if problem != "" {
			log.do(func() { log.problems = append(log.problems, fmt.Sprintf("%s occurrence %d: %s", c.ID(), n, problem)) })
		}
		switch {
		case n == stop && c.Data.Stop == "complete":
			c.MarkComplete()
		case n == stop && c.Data.Stop == "cancel":
			c.CancelTimeout(c.Timeout())
		}
		return nil
	})
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{e.Route(0, name)}}
	d, err := saga.NewDispatcher(b, memstore.New(), "recur-"+tq, saga.WithSagas(flow), saga.WithTimeouts(router),
		saga.WithLogger(quietLogger()), saga.WithHooks(saga.Hooks{StepDone: log.stepDone}))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)

	// An instance's ID says how it stops.
	inStep := []string{"cancel", "complete"}
	byMessage := []string{"stop-cancel", "stop-complete"}
	all := append(slices.Clone(inStep), byMessage...)
	period := func(id string) time.Duration {
		if slices.Contains(inStep, id) {
			return every
		}
		return slow
	}
	for _, id := range all {
		if _, err := d.Send(t.Context(), recurStart{ID: id, Stop: id, Every: period(id)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Await(t, 30*time.Second, func() string {
		for _, id := range byMessage {
			if got, _ := log.occurrences(id, slow); len(got) < 2 {
				return fmt.Sprintf("%s: occurrences handled %v, want 2 before the stop", id, got)
			}
		}
		return ""
	})
	for _, id := range byMessage {
		if _, err := d.Send(t.Context(), recurStop{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	upTo := func(n int) []int {
		out := make([]int, max(n, 0))
		for i := range out {
			out[i] = i + 1
		}
		return out
	}
	// want returns the occurrences instance id handles: up to the fifth,
	// or those before the one pending when the stop message came.
	want := func(id string) []int {
		if slices.Contains(inStep, id) {
			return upTo(stop)
		}
		var at int
		log.do(func() { at = log.stoppedAt[id] })
		return upTo(at - 1)
	}
	testutil.Await(t, 40*time.Second, func() string {
		for _, id := range inStep {
			if got, _ := log.occurrences(id, every); len(got) < stop {
				return fmt.Sprintf("%s: occurrences handled %v, want %v", id, got, want(id))
			}
		}
		for _, id := range byMessage {
			var done bool
			log.do(func() { done = log.stopped[id] })
			if !done {
				return fmt.Sprintf("%s: stop message not handled yet", id)
			}
		}
		if running := timeoutWorkflows(t, c, tq, true); len(running) > 0 {
			return fmt.Sprintf("timeout workflows still running: %v", running)
		}
		return ""
	})
	handled := 0
	for _, id := range all {
		got, offGrid := log.occurrences(id, period(id))
		if w := want(id); !slices.Equal(got, w) || offGrid != "" {
			t.Errorf("%s: occurrences handled %v %s, want %v: each once, in order, on the grid, none after the stop", id, got, offGrid, w)
		}
		handled += len(got)
	}
	dropped := 0
	log.do(func() {
		for _, id := range byMessage {
			if at := log.stoppedAt[id]; at < 3 {
				t.Errorf("%s: stopped with occurrence %d pending, want one after the second", id, at)
			}
			dropped += log.dropped[id]
			if log.dropped[id] > 0 && !log.raced[id] {
				t.Errorf("%s: the occurrence pending at the stop fired, though the stop came %v or more before it was due", id, raceMargin)
			}
		}
		for _, id := range inStep {
			if log.dropped[id] > 0 {
				t.Errorf("%s: %d occurrences delivered after the series stopped in a step", id, log.dropped[id])
			}
		}
		for _, p := range log.problems {
			t.Error(p)
		}
	})
	// What Temporal did: one workflow per occurrence handled, each fired,
	// and one per stop message, cancelled (or fired before the stop and
	// dropped by the dispatcher); none left running.
	outcomes := map[string]int{}
	for _, wid := range timeoutWorkflows(t, c, tq, false) {
		var r result
		if err := c.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &r); err != nil {
			t.Fatalf("result of %s: %v", wid, err)
		}
		outcomes[r.Outcome]++
	}
	t.Logf("timeout workflows by outcome %v; %d occurrences handled, %d dropped", outcomes, handled, dropped)
	log.do(func() {
		for _, id := range all {
			t.Logf("%s: handlers got the occurrences late by %v", id, log.lateness[id])
		}
	})
	if outcomes[outcomeFired] != handled+dropped || outcomes[outcomeCancelled]+dropped != len(byMessage) || len(outcomes) > 2 {
		t.Errorf("timeout workflows by outcome %v, want %d fired (%d handled, %d dropped) and %d cancelled",
			outcomes, handled+dropped, handled, dropped, len(byMessage)-dropped)
	}
	for _, id := range []string{"cancel", "stop-cancel"} {
		if inst, err := d.Instance(t.Context(), name, id); err != nil || inst.Completed || len(inst.Timeouts) != 0 {
			t.Errorf("instance %s: %+v, %v; want it running with no timeout pending", id, inst, err)
		}
	}
	for _, id := range []string{"complete", "stop-complete"} {
		if inst, err := d.Instance(t.Context(), name, id); err == nil && !inst.Completed {
			t.Errorf("instance %s: %+v, want it completed", id, inst)
		}
	}
}

// timeoutWorkflows returns the IDs of the timeout workflows on task queue
// tq: the running ones, or all of them.
func timeoutWorkflows(t *testing.T, c client.Client, tq string, running bool) []string {
	t.Helper()
	q := fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s'", WorkflowType, tq)
	if running {
		q += " AND ExecutionStatus = 'Running'"
	}
	var out []string
	var token []byte
	for {
		resp, err := c.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token})
		if err != nil {
			t.Fatalf("listing workflows (%s): %v", q, err)
		}
		for _, ex := range resp.GetExecutions() {
			if !running && ex.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Errorf("workflow %s still running", ex.GetExecution().GetWorkflowId())
			}
			out = append(out, ex.GetExecution().GetWorkflowId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out
		}
	}
}
