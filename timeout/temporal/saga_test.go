package temporal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/memstore"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/timeout/temporal/temporaltest"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	longStarted struct{ ID string }
	shortDue    struct{}
	longDue     struct{}
)

// TestDispatcherOnTwoEngines runs a saga.Dispatcher on a timeout.Router
// whose long route is the Temporal engine: each instance requests a
// short timeout (JetStream) and a long one (Temporal).
// Dispatcher.ScheduledTimeouts lists both engines, the short timeouts
// fire, and CancelAllTimeouts cancels the long ones on Temporal, whose
// workflows then end cancelled.
func TestDispatcherOnTwoEngines(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	tq := newTaskQueue()
	startWorker(t, c, b, WithTaskQueue(tq))
	e, err := New(c, WithTaskQueue(tq), WithBroker(b))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fired := map[string]int{}
	type data struct{}
	flow := saga.Define[data]("twoengines")
	saga.StartedBy(flow, saga.By(func(m longStarted) string { return m.ID }),
		func(_ context.Context, c *saga.Context[data], _ longStarted) error {
			if _, err := c.RequestTimeout(500*time.Millisecond, shortDue{}); err != nil {
				return err
			}
			_, err := c.RequestTimeout(30*24*time.Hour, longDue{})
			return err
		})
	saga.OnTimeout(flow, func(_ context.Context, c *saga.Context[data], _ shortDue) error {
		mu.Lock()
		defer mu.Unlock()
		fired[c.ID()]++
		return nil
	})
	saga.OnTimeout(flow, func(_ context.Context, c *saga.Context[data], _ longDue) error {
		t.Errorf("%s: the 30-day timeout fired", c.ID())
		return nil
	})
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{e.Route(time.Hour)}}
	d, err := saga.NewDispatcher(b, memstore.New(), "two-"+tq, saga.WithSagas(flow), saga.WithTimeouts(router), saga.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ids := []string{"i1", "i2", "i3"}
	for _, id := range ids {
		if _, err := d.Send(t.Context(), longStarted{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// Listed: the short ones on JetStream (until they fire), the long
	// ones on Temporal (once the visibility store shows them).
	listed := func() map[string]string {
		out := map[string]string{}
		for st, err := range d.ScheduledTimeouts(t.Context(), "twoengines") {
			if err != nil {
				t.Fatalf("ScheduledTimeouts: %v", err)
			}
			out[st.ID+" "+st.Type] = st.Ref.Engine()
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := listed()
		n := 0
		for _, id := range ids {
			if got[id+" "+saga.MessageName[longDue]()] == DefaultEngineName {
				n++
			}
			if eng, ok := got[id+" "+saga.MessageName[shortDue]()]; ok && eng != timeout.QueueEngine {
				t.Fatalf("short timeout of %s listed on %q", id, eng)
			}
		}
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listed %v, want the three long timeouts on %s", got, DefaultEngineName)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(fired)
		mu.Unlock()
		if n == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("short timeouts fired for %v, want %v", fired, ids)
		}
	}

	res, err := d.CancelAllTimeouts(t.Context(), "twoengines")
	if err != nil {
		t.Fatalf("CancelAllTimeouts: %v", err)
	}
	var cancelled []string
	for _, r := range res {
		for range r.Cancelled {
			cancelled = append(cancelled, r.ID)
		}
	}
	slices.Sort(cancelled)
	if !slices.Equal(cancelled, ids) {
		t.Errorf("cancelled %v, want one timeout of each of %v", cancelled, ids)
	}
	// The workflows end cancelled: the cancel reached Temporal.
	await := time.Now().Add(10 * time.Second)
	for {
		left := map[string]bool{}
		for p, err := range e.Pending(t.Context(), timeout.Filter{Saga: "twoengines"}) {
			if err != nil {
				t.Fatal(err)
			}
			left[p.Instance] = true
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(await) {
			t.Fatalf("still pending on Temporal after CancelAllTimeouts: %v", slices.Sorted(maps.Keys(left)))
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if fired[id] != 1 {
			t.Errorf("%s: short timeout fired %d times", id, fired[id])
		}
	}
}

// TestListingAcrossQueues lists without a queue: the engine lists every
// queue's timeouts (the transport engine cannot), filtered by saga and
// instance, with search attributes and without.
func TestListingAcrossQueues(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	for _, sa := range []bool{true, false} {
		t.Run(fmt.Sprintf("searchattributes=%v", sa), func(t *testing.T) {
			tq := newTaskQueue()
			opts := []Option{WithTaskQueue(tq)}
			if sa {
				opts = append(opts, WithSearchAttributes())
			}
			e, err := New(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			startWorker(t, c, b, opts...)
			at := time.Now().Add(time.Hour)
			refs := map[string]timeout.Ref{}
			for _, s := range []struct{ id, queue, saga, inst string }{
				{"x1", "qa-" + tq, "S", "1"}, {"x2", "qb-" + tq, "S", "1"}, {"x3", "qb-" + tq, "S", "2"},
				{"x4", "qa-" + tq, "T", "1"}, {"x5", "qa-" + tq, "S", "it's \"quoted\""},
			} {
				ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: s.id, Queue: s.queue, At: at, Saga: s.saga, Instance: s.inst, Message: &transport.Message{}})
				if err != nil {
					t.Fatal(err)
				}
				refs[s.id] = ref
			}
			t.Cleanup(func() {
				for _, ref := range refs {
					e.Cancel(context.WithoutCancel(t.Context()), ref)
				}
			})
			for _, tc := range []struct {
				f    timeout.Filter
				want []string
			}{
				{timeout.Filter{}, []string{"x1", "x2", "x3", "x4", "x5"}},
				{timeout.Filter{Saga: "S", Instance: "1"}, []string{"x1", "x2"}},
				{timeout.Filter{Queue: "qb-" + tq}, []string{"x2", "x3"}},
				{timeout.Filter{Saga: "T"}, []string{"x4"}},
				{timeout.Filter{Instance: `it's "quoted"`}, []string{"x5"}},
			} {
				var got []string
				for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					got = got[:0]
					for p, err := range e.Pending(t.Context(), tc.f) {
						if err != nil {
							t.Fatalf("Pending(%+v): %v", tc.f, err)
						}
						got = append(got, p.ID)
					}
					slices.Sort(got)
					if slices.Equal(got, tc.want) || time.Now().After(deadline) {
						break
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("Pending(%+v) = %v, want %v", tc.f, got, tc.want)
				}
			}
			if err := e.Cancel(t.Context(), refs["x5"]); err != nil {
				t.Errorf("Cancel: %v", err)
			}
			if err := e.Cancel(t.Context(), refs["x5"]); !errors.Is(err, timeout.ErrNotFound) {
				t.Errorf("second Cancel: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestCancelWithoutWorker cancels a pending timeout while no worker runs:
// Cancel gives up after WithCancelTimeout with an error that is no
// outcome (context.DeadlineExceeded). Once a worker runs, Cancel again
// tells what became of it: cancelled, by this call or by the update the
// first one left behind — never delivered either way.
func TestCancelWithoutWorker(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	tq := newTaskQueue()
	const cancelTimeout = time.Second
	e, err := New(c, WithTaskQueue(tq), WithCancelTimeout(cancelTimeout))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: "nw", Queue: "nw-" + tq, At: time.Now().Add(time.Hour), Message: &transport.Message{}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = e.Cancel(t.Context(), ref)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, timeout.ErrNotFound) || errors.Is(err, timeout.ErrAlreadyFired) {
		t.Fatalf("Cancel without a worker: %v, want a deadline error and no outcome", err)
	}
	// Cancel waits for a worker up to its cancel timeout, and no longer:
	// not up to DefaultCancelTimeout (the option ignored), nor until ctx
	// ends (t.Context() has no deadline). The upper bound tells the
	// option's 1s from the default's 30s with room for a loaded -race run
	// to wake up; the lower bound says Cancel did not give up before it.
	if d := time.Since(start); d < cancelTimeout || d > DefaultCancelTimeout/3 {
		t.Errorf("Cancel took %v with a %v cancel timeout (default %v)", d, cancelTimeout, DefaultCancelTimeout)
	}
	t.Logf("without a worker: %v after %v", err, time.Since(start).Round(time.Millisecond))
	startWorker(t, c, b, WithTaskQueue(tq))
	e, err = New(c, WithTaskQueue(tq)) // the default cancel timeout: the worker is starting
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := e.Cancel(t.Context(), ref); err != nil && !errors.Is(err, timeout.ErrNotFound) {
		t.Fatalf("Cancel with a worker: %v, want nil or ErrNotFound", err)
	}
	t.Logf("with a worker: %v after %v", err, time.Since(start).Round(time.Millisecond))
	var r result
	wid, _ := e.parseRef(ref)
	if err := c.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &r); err != nil || r.Outcome != outcomeCancelled {
		t.Errorf("workflow result %+v, %v; want cancelled", r, err)
	}
}

// TestRegisterSearchAttributes registers the search attributes on a
// server that lacks them: then an engine WithSearchAttributes schedules
// and lists; registering again changes nothing.
func TestRegisterSearchAttributes(t *testing.T) {
	srv := temporaltest.New(t, temporaltest.Options{})
	c := srv.Client(t)
	tq := newTaskQueue()
	e, err := New(c, WithTaskQueue(tq), WithSearchAttributes())
	if err != nil {
		t.Fatal(err)
	}
	tm := timeout.Timeout{ID: "sa", Queue: "sa", At: time.Now().Add(time.Hour), Saga: "S", Instance: "1", Message: &transport.Message{}}
	if _, err := e.Schedule(t.Context(), tm); err == nil {
		t.Fatal("Schedule with unregistered search attributes succeeded")
	} else {
		t.Logf("before registering: %v", err)
	}
	for range 2 {
		if err := RegisterSearchAttributes(t.Context(), c, srv.Namespace()); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := e.Schedule(t.Context(), tm)
	if err != nil {
		t.Fatalf("Schedule after registering: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var got []timeout.Ref
		for p, err := range e.Pending(t.Context(), timeout.Filter{Saga: "S", Instance: "1"}) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, p.Ref)
		}
		if len(got) == 1 && got[0] == ref {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("listed %v, want [%s]", got, ref)
		}
	}
}
