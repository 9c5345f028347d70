package timeouttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Env is what a backend gives the suite for one subtest.
type Env struct {
	// Scheduler under test.
	Scheduler timeout.Scheduler
	// Broker holds the queues timeouts are delivered to; the suite
	// receives from them to see what fired.
	Broker *transport.Broker
}

// Features tunes the suite to a backend.
type Features struct {
	// Slack bounds how late a timeout may fire (JetStream: ~250 ms; Temporal: more).
	Slack time.Duration
	// ListingLag bounds how long a listing (timeout.Lister) may take to
	// show a change: 0 for engines whose listings are current, a few
	// seconds for Temporal's visibility store. Default: 0.
	ListingLag time.Duration
	// RaceRounds is how many timeouts the cancel-race test schedules at
	// its due time. Default: 200.
	RaceRounds int
	// EarlyActivation is how long before its due time the engine may put
	// a timeout's message on the queue, for a receiver that holds it
	// until then (timeout.WithEarlyActivation). The suite's receiver
	// checks that no message becomes active earlier than that and holds
	// each until the due time its PropertyDue carries. Default: 0, never
	// before the due time.
	EarlyActivation time.Duration
}

// Run runs the suite; newEnv is called once per subtest.
func Run(t *testing.T, newEnv func(t *testing.T) Env, f Features) {
	if f.Slack == 0 {
		f.Slack = time.Second
	}
	if f.RaceRounds == 0 {
		f.RaceRounds = 200
	}
	tests := []struct {
		name string
		run  func(t *testing.T, e Env, f Features)
	}{
		{"FiresNotEarly", testFiresNotEarly},
		{"IdempotentOnID", testIdempotent},
		{"CancelPending", testCancelPending},
		{"CancelAfterFire", testCancelAfterFire},
		{"CancelUnknown", testCancelUnknown},
		{"ScheduleAgainAfterFate", testScheduleAgain},
		{"Invalid", testInvalid},
		{"Message", testMessage},
		{"HostileIDs", testHostileIDs},
		{"Listing", testListing},
		{"CancelRace", testCancelRace},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, newEnv(t), f)
		})
	}
}

var seq struct {
	sync.Mutex
	n int
}

func queueFor(t *testing.T, e Env) *transport.Queue {
	t.Helper()
	seq.Lock()
	seq.n++
	name := fmt.Sprintf("tt-%d-%d", time.Now().UnixNano()%1e9, seq.n)
	seq.Unlock()
	q, err := e.Broker.OpenQueue(t.Context(), transport.QueueConfig{Name: name})
	if err != nil {
		t.Fatalf("OpenQueue: %v", err)
	}
	t.Cleanup(func() { e.Broker.DeleteQueue(context.WithoutCancel(t.Context()), name) })
	return q
}

// receiveOne receives one message within the given time, as a receiver
// of the engine's timeouts would: one activated early (f.EarlyActivation)
// is checked not to have become active more than that before its due time
// and held until that due time.
func receiveOne(t *testing.T, q *transport.Queue, within time.Duration, f Features) *transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	ds, err := q.Receive(ctx, 1)
	if err != nil {
		return nil
	}
	if f.EarlyActivation > 0 {
		due, err := time.Parse(time.RFC3339Nano, ds[0].Properties[timeout.PropertyDue])
		if err != nil {
			t.Fatalf("message %q: property %s: %v", ds[0].MessageID, timeout.PropertyDue, err)
		}
		if early := due.Sub(ds[0].EnqueuedAt); early > f.EarlyActivation {
			t.Errorf("message %q became active at %v, %v before its due time %v: more than the early activation %v",
				ds[0].MessageID, ds[0].EnqueuedAt, early, due, f.EarlyActivation)
		}
		time.Sleep(time.Until(due)) // the hold
	}
	if err := ds[0].Complete(t.Context()); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	return ds[0]
}

func schedule(t *testing.T, e Env, q *transport.Queue, id string, at time.Time) timeout.Ref {
	t.Helper()
	ref, err := e.Scheduler.Schedule(t.Context(), timeout.Timeout{
		ID: id, Queue: q.Name(), At: at, Message: &transport.Message{Body: []byte(id)},
	})
	if err != nil {
		t.Fatalf("Schedule(%s): %v", id, err)
	}
	return ref
}

func testFiresNotEarly(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	due := time.Now().Add(500 * time.Millisecond)
	schedule(t, e, q, "t1", due)
	d := receiveOne(t, q, time.Until(due)+f.Slack+5*time.Second, f)
	if d == nil {
		t.Fatal("timeout did not fire")
	}
	if want := due.Add(-f.EarlyActivation); d.EnqueuedAt.Before(want) {
		t.Errorf("active at %v, %v before %v (due time less early activation %v)", d.EnqueuedAt, want.Sub(d.EnqueuedAt), want, f.EarlyActivation)
	}
	if now := time.Now(); now.Before(due) {
		t.Errorf("fired at %v, %v before its due time", now, due.Sub(now))
	}
	if string(d.Body) != "t1" || d.MessageID != "t1" {
		t.Errorf("got body %q MessageID %q, want t1/t1", d.Body, d.MessageID)
	}
}

func testIdempotent(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(300 * time.Millisecond)
	r1 := schedule(t, e, q, "same", at)
	r2 := schedule(t, e, q, "same", at)
	if r1 != r2 {
		t.Errorf("second Schedule of the same ID gave ref %q, want %q", r2, r1)
	}
	if receiveOne(t, q, time.Until(at)+f.Slack+5*time.Second, f) == nil {
		t.Fatal("timeout did not fire")
	}
	if d := receiveOne(t, q, f.Slack+500*time.Millisecond, f); d != nil {
		t.Errorf("timeout fired twice")
	}
}

func testCancelPending(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(time.Second)
	ref := schedule(t, e, q, "c1", at)
	if err := e.Scheduler.Cancel(t.Context(), ref); err != nil {
		t.Fatalf("Cancel: %v, want nil", err)
	}
	if d := receiveOne(t, q, time.Until(at)+f.Slack+500*time.Millisecond, f); d != nil {
		t.Errorf("cancelled timeout fired: %q", d.Body)
	}
	if err := e.Scheduler.Cancel(t.Context(), ref); !errors.Is(err, timeout.ErrNotFound) {
		t.Errorf("second Cancel: %v, want ErrNotFound", err)
	}
}

func testCancelAfterFire(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(200 * time.Millisecond)
	ref := schedule(t, e, q, "f1", at)
	if receiveOne(t, q, time.Until(at)+f.Slack+5*time.Second, f) == nil {
		t.Fatal("timeout did not fire")
	}
	err := e.Scheduler.Cancel(t.Context(), ref)
	if !errors.Is(err, timeout.ErrAlreadyFired) {
		t.Errorf("Cancel after firing: %v, want ErrAlreadyFired", err)
	}
}

func testCancelUnknown(t *testing.T, e Env, f Features) {
	err := e.Scheduler.Cancel(t.Context(), "nonsense")
	if !errors.Is(err, timeout.ErrInvalidRef) {
		t.Errorf("Cancel(nonsense): %v, want ErrInvalidRef", err)
	}
}

func testInvalid(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	for _, tc := range []struct {
		name string
		t    timeout.Timeout
	}{
		{"no ID", timeout.Timeout{Queue: q.Name(), At: time.Now(), Message: &transport.Message{}}},
		{"no queue", timeout.Timeout{ID: "x", At: time.Now(), Message: &transport.Message{}}},
		{"zero time", timeout.Timeout{ID: "x", Queue: q.Name(), Message: &transport.Message{}}},
		{"no message", timeout.Timeout{ID: "x", Queue: q.Name(), At: time.Now()}},
	} {
		if _, err := e.Scheduler.Schedule(t.Context(), tc.t); !errors.Is(err, timeout.ErrInvalidTimeout) {
			t.Errorf("%s: Schedule: %v, want ErrInvalidTimeout", tc.name, err)
		}
	}
}

// testScheduleAgain schedules a timeout again after it fired, and another
// after it was cancelled (a flush retried after a crash does this): the
// timeout is not scheduled a second time, and Cancel of the new ref still
// tells what became of it.
func testScheduleAgain(t *testing.T, e Env, f Features) {
	q := queueFor(t, e)
	at := time.Now().Add(200 * time.Millisecond)
	schedule(t, e, q, "again-fired", at)
	if receiveOne(t, q, time.Until(at)+f.Slack+5*time.Second, f) == nil {
		t.Fatal("timeout did not fire")
	}
	later := time.Now().Add(time.Hour)
	ref := schedule(t, e, q, "again-cancelled", later)
	if err := e.Scheduler.Cancel(t.Context(), ref); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	fired := schedule(t, e, q, "again-fired", at)
	cancelled := schedule(t, e, q, "again-cancelled", later)
	if err := e.Scheduler.Cancel(t.Context(), fired); !errors.Is(err, timeout.ErrAlreadyFired) {
		t.Errorf("Cancel of a fired timeout scheduled again: %v, want ErrAlreadyFired", err)
	}
	if err := e.Scheduler.Cancel(t.Context(), cancelled); !errors.Is(err, timeout.ErrNotFound) {
		t.Errorf("Cancel of a cancelled timeout scheduled again: %v, want ErrNotFound", err)
	}
	if d := receiveOne(t, q, f.Slack+time.Second, f); d != nil {
		t.Errorf("received %q: a timeout scheduled again after it fired or was cancelled came back", d.Body)
	}
}
