package temporal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// maxSubSecondLate bounds how late a timeout whose wait is under a second
// may fire in these tests: generous for a loaded 2-core machine under
// -race, and well under the 0.3-0.9 s a Temporal timer shorter than a
// second adds (measured with the timer path: 0.7-0.9 s late at 300 ms,
// 0.3-0.45 s at 700 ms).
const maxSubSecondLate = 250 * time.Millisecond

// scheduleOn schedules a timeout due at at on e, to a queue of its own,
// and returns the queue.
func scheduleOn(t *testing.T, e *Engine, b *transport.Broker, id string, at time.Time) *transport.Queue {
	t.Helper()
	q, err := b.Queue(t.Context(), "subsecond-"+id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Schedule(t.Context(), timeout.Timeout{ID: id, Queue: q.Name(), At: at, Message: &transport.Message{Body: []byte(id)}}); err != nil {
		t.Fatal(err)
	}
	return q
}

// onTime receives the timeout due at at from q and fails t unless the
// queue accepted it at or after at and at most maxSubSecondLate after.
// It returns how late it was.
func onTime(t *testing.T, q *transport.Queue, at time.Time) time.Duration {
	t.Helper()
	d := receive(t, q, time.Until(at)+10*time.Second)
	if d == nil {
		t.Fatalf("%s: not delivered", q.Name())
	}
	late := d.EnqueuedAt.Sub(at)
	if late < 0 || late > maxSubSecondLate {
		t.Errorf("%s: delivered %v after its due time, want 0 to %v", q.Name(), late, maxSubSecondLate)
	}
	return late
}

// TestSubSecondTimeoutOnTime schedules timeouts due in less than a
// second, which Temporal's timers (a second at least) would deliver up
// to a second late, and one due in more (a timer): each is delivered
// within maxSubSecondLate of its due time, never before.
func TestSubSecondTimeoutOnTime(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	for i, d := range []time.Duration{300 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond, 1300 * time.Millisecond} {
		at := time.Now().Add(d)
		q := scheduleOn(t, e, b, fmt.Sprintf("%s-%d", tq, i), at)
		t.Logf("due in %v: delivered %v late", d, onTime(t, q, at))
	}
}

// TestCancelDuringSubSecondWait cancels a timeout while its delivery
// activity waits for the due time (the workflow's wait was under a
// second): Cancel answers nil and nothing is delivered. And a Cancel
// once the activity sent (the workflow answered its UpdateDeliver)
// answers ErrAlreadyFired, the message delivered once.
func TestCancelDuringSubSecondWait(t *testing.T) {
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	q, err := b.Queue(t.Context(), "subsecond-cancel-"+tq)
	if err != nil {
		t.Fatal(err)
	}
	for round := 1; ; round++ {
		id := fmt.Sprintf("wait-%d", round)
		at := time.Now().Add(900 * time.Millisecond)
		ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: id, Queue: q.Name(), At: at, Message: &transport.Message{Body: []byte(id)}})
		if err != nil {
			t.Fatal(err)
		}
		wid, _ := e.parseRef(ref)
		awaitActivity(t, c, wid)
		left := time.Until(at)
		err = e.Cancel(t.Context(), ref)
		if left < 100*time.Millisecond || time.Now().After(at) {
			// Too slow a machine to cancel within the wait: any definite
			// outcome will do; try again.
			if round == 3 {
				t.Fatalf("no round cancelled within the activity's wait (last: %v left when its activity ran; Cancel: %v)", left, err)
			}
			t.Logf("round %d: %v left when the activity ran; again", round, left)
			receive(t, q, time.Until(at)+time.Second) // drain a delivery, if any
			continue
		}
		if err != nil {
			t.Fatalf("Cancel %v before the due time, during the activity's wait: %v, want nil", left, err)
		}
		if d := receive(t, q, time.Until(at)+time.Second); d != nil {
			t.Fatalf("cancelled timeout delivered: %q", d.Body)
		}
		var r result
		if err := c.GetWorkflow(t.Context(), wid, "").Get(t.Context(), &r); err != nil || r.Outcome != outcomeCancelled {
			t.Fatalf("workflow result %+v, %v; want cancelled", r, err)
		}
		if err := e.Cancel(t.Context(), ref); !errors.Is(err, timeout.ErrNotFound) {
			t.Fatalf("second Cancel: %v, want ErrNotFound", err)
		}
		t.Logf("cancelled %v before the due time, during the activity's wait", left.Round(time.Millisecond))
		break
	}

	// A Cancel once the activity has sent: fired.
	refc, cancelled := make(chan timeout.Ref, 1), make(chan error, 1)
	hook := func(in input) {
		if in.Queue == q.Name() && in.ID == "sent" {
			cancelled <- e.Cancel(context.Background(), <-refc)
		}
	}
	afterSend.Store(&hook)
	defer afterSend.Store(nil)
	ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: "sent", Queue: q.Name(), At: time.Now().Add(300 * time.Millisecond), Message: &transport.Message{Body: []byte("sent")}})
	if err != nil {
		t.Fatal(err)
	}
	refc <- ref
	if err := <-cancelled; !errors.Is(err, timeout.ErrAlreadyFired) {
		t.Errorf("Cancel after the send: %v, want ErrAlreadyFired", err)
	}
	if d := receive(t, q, 5*time.Second); d == nil || string(d.Body) != "sent" {
		t.Fatalf("received %v, want the fired timeout", d)
	}
	if d := receive(t, q, 500*time.Millisecond); d != nil {
		t.Errorf("delivered again: %q", d.Body)
	}
}

// TestSubSecondCancelRace cancels timeouts due 600 ms after they are
// scheduled (a wait under a second: the activity's, which asks the
// workflow at the due time) at instants from 200 ms before their due time
// to 130 ms after, many times: each Cancel's outcome must be true — nil,
// never delivered; ErrAlreadyFired, delivered exactly once.
func TestSubSecondCancelRace(t *testing.T) {
	const n = 60
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	q, err := b.Queue(t.Context(), "subsecond-race-"+tq)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		time.Sleep(30 * time.Millisecond) // staggered, so that the cores keep up
		wg.Go(func() {
			id := fmt.Sprintf("race-%d", i)
			at := time.Now().Add(600 * time.Millisecond)
			ref, err := e.Schedule(t.Context(), timeout.Timeout{ID: id, Queue: q.Name(), At: at, Message: &transport.Message{Body: []byte(id)}})
			if err != nil {
				errs[i] = err
				return
			}
			off := -200*time.Millisecond + time.Duration(i%12)*30*time.Millisecond
			time.Sleep(time.Until(at.Add(off))) // the cancel's instant
			errs[i] = e.Cancel(t.Context(), ref)
		})
	}
	wg.Wait()
	want := map[string]bool{}
	cancelled := 0
	for i, err := range errs {
		switch {
		case err == nil:
			cancelled++
		case errors.Is(err, timeout.ErrAlreadyFired):
			want[fmt.Sprintf("race-%d", i)] = true
		default:
			t.Fatalf("race-%d: %v, want nil or ErrAlreadyFired", i, err)
		}
	}
	got := map[string]int{}
	for {
		d := receive(t, q, 2*time.Second) // the last was due before the cancels ended
		if d == nil {
			break
		}
		got[string(d.Body)]++
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("%s: Cancel said already fired; delivered %d times, want 1", id, got[id])
		}
	}
	for id, k := range got {
		if !want[id] {
			t.Errorf("%s: Cancel said cancelled; delivered %d times", id, k)
		}
	}
	if cancelled == 0 || len(want) == 0 {
		t.Errorf("%d cancelled, %d fired: the cancels did not race the due time", cancelled, len(want))
	}
	t.Logf("%d cancels from 200 ms before the due time to 130 ms after: %d cancelled, %d already fired", n, cancelled, len(want))
}

// awaitActivity waits until workflow wid has a pending activity.
func awaitActivity(t *testing.T, c client.Client, wid string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		desc, err := c.DescribeWorkflowExecution(t.Context(), wid, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(desc.GetPendingActivities()) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no pending activity after 10 s (status %v)", wid, desc.GetWorkflowExecutionInfo().GetStatus())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
