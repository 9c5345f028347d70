package cli

import (
	"context"
	"iter"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// fakeEngine stands for an engine of another module (Temporal): it holds
// one timeout and lists it.
type fakeEngine struct{ at time.Time }

func (f fakeEngine) Schedule(context.Context, timeout.Timeout) (timeout.Ref, error) {
	return "", timeout.ErrInvalidTimeout
}
func (f fakeEngine) Cancel(context.Context, timeout.Ref) error { return timeout.ErrNotFound }
func (f fakeEngine) Pending(ctx context.Context, flt timeout.Filter) iter.Seq2[timeout.Pending, error] {
	return func(yield func(timeout.Pending, error) bool) {
		p := timeout.Pending{Ref: "temporal:wf-1", ID: "t-1", Queue: "orders", Saga: "order", Instance: "o9", At: f.at,
			Properties: map[string]string{"jetsaga-type": "shop.Expire"}}
		if (flt.Saga == "" || flt.Saga == p.Saga) && (flt.Instance == "" || flt.Instance == p.Instance) {
			yield(p, nil)
		}
	}
}

// TestEngineHook: a binary that adds an engine with WithEngine lists its
// timeouts beside the transport's, opened from --temporal-address and
// --temporal-namespace.
func TestEngineHook(t *testing.T) {
	w := setUp(t)
	var gotAddr, gotNS string
	closed := false
	opts := []Option{WithEngine("temporal", func(ctx context.Context, addr, ns string) (EngineScheduler, func(), error) {
		gotAddr, gotNS = addr, ns
		return fakeEngine{at: time.Now().Add(24 * time.Hour)}, func() { closed = true }, nil
	})}
	r := w.runWith(opts, "", "timeouts", "list", "--saga", "order", "--temporal-address", "temporal:7233", "--json")
	if r.code != 0 {
		t.Fatalf("%v", r)
	}
	ps := decode[[]PendingView](t, r.stdout)
	if len(ps) != 5 || ps[4].Engine != "temporal" || ps[4].ID != "o9" || ps[4].Ref != "temporal:wf-1" || ps[0].Engine != "queue" {
		t.Fatalf("timeouts across engines: %+v", ps)
	}
	if gotAddr != "temporal:7233" || gotNS != "default" || !closed {
		t.Fatalf("opener got %q %q, closed %t", gotAddr, gotNS, closed)
	}
	r = w.runWith(opts, "", "timeouts", "list", "--saga", "order", "--id", "o9", "--temporal-address", "t:1", "--temporal-namespace", "prod")
	if r.code != 0 || !strings.Contains(r.stdout, "temporal") || gotNS != "prod" {
		t.Fatalf("%v", r)
	}
}

// recordingEngine schedules nothing for real: it hands out refs and
// records cancels, as a Temporal engine would from the operator's view.
type recordingEngine struct {
	mu        sync.Mutex
	n         int
	cancelled []timeout.Ref
}

func (r *recordingEngine) Schedule(ctx context.Context, t timeout.Timeout) (timeout.Ref, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return timeout.Ref("temporal:wf-" + t.ID), nil
}

func (r *recordingEngine) Cancel(ctx context.Context, ref timeout.Ref) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancelled = append(r.cancelled, ref)
	return nil
}

func (r *recordingEngine) cancels() []timeout.Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cancelled)
}

// TestCancelTimeoutsOnAnEngineTheCLILacks: the application routes its
// long timeouts to another engine ("temporal"); the plain jetsaga binary
// cancels them in the instance's record, says the engine's cancel is
// left to the application, and the application's dispatcher does it.
func TestCancelTimeoutsOnAnEngineTheCLILacks(t *testing.T) {
	eng := &recordingEngine{}
	w := newWorkloadWith(t, func(b *transport.Broker) timeout.Scheduler {
		return &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{{Engine: "temporal", Scheduler: eng, Beyond: 90 * time.Minute}}}
	})
	w.send(OrderPlaced{Order: "o1"})
	testutil.AwaitTrue(t, 15*time.Second, "o1 placed", func() bool { return w.handledCount("placed/o1") == 1 })
	v := jsonOf[InstanceView](w, 0, "sagas", "show", "order", "o1")
	if len(v.Timeouts) != 2 || v.Timeouts[0].Engine != "queue" || v.Timeouts[1].Engine != "temporal" {
		t.Fatalf("o1's timeouts: %+v", v.Timeouts)
	}
	r := w.must(0, "sagas", "cancel-timeouts", "order", "o1", "--yes")
	if !strings.Contains(r.stdout, "cancelled 2 timeout(s)") || !strings.Contains(r.stdout, "left to the application's dispatcher") {
		t.Fatalf("cancel-timeouts: %v", r)
	}
	if v := jsonOf[InstanceView](w, 0, "sagas", "show", "order", "o1"); len(v.Timeouts) != 0 {
		t.Fatalf("o1 still waits: %+v", v.Timeouts)
	}
	testutil.AwaitTrue(t, 15*time.Second, "the application's dispatcher to cancel the temporal timeout", func() bool {
		c := eng.cancels()
		return len(c) == 1 && c[0] == timeout.Ref(v.Timeouts[1].Ref)
	})
	if left := jsonOf[[]PendingView](w, 0, "timeouts", "list", "--saga", "order"); len(left) != 0 {
		t.Fatalf("transport timeouts left: %+v", left)
	}
}
