package cli

import (
	"context"
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
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
