package temporal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The timeout workflow on Temporal's test environment, whose clock
// skips ahead: a 30-day timeout takes milliseconds.

var start = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

type updateResult struct {
	accepted bool
	rejected error
	outcome  any
	err      error
	at       time.Time
}

type callbacks struct {
	r   *updateResult
	env *testsuite.TestWorkflowEnvironment
}

func (c callbacks) Accept()        { c.r.accepted = true }
func (c callbacks) Reject(e error) { c.r.rejected = e }
func (c callbacks) Complete(v any, err error) {
	c.r.outcome, c.r.err, c.r.at = v, err, c.env.Now()
}

// workflowEnv returns a test environment at start running the timeout
// workflow, whose delivery activity records its calls in calls (with the
// environment's time) and returns deliverErr, if set.
func newSuite() *testsuite.WorkflowTestSuite {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quietLogger()))
	return &s
}

func workflowEnv(t *testing.T, calls *[]time.Time, deliverErr error) *testsuite.TestWorkflowEnvironment {
	s := newSuite()
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	w := &workerConfig{config: config{deliveryTimeout: DefaultDeliveryTimeout, logger: quietLogger()}}
	env.RegisterWorkflowWithOptions(w.timeoutWorkflow, workflow.RegisterOptions{Name: WorkflowType})
	env.RegisterActivityWithOptions(func(ctx context.Context, in input) (delivery, error) {
		*calls = append(*calls, env.Now())
		if deliverErr != nil {
			return delivery{}, deliverErr
		}
		return delivery{At: env.Now()}, nil
	}, activity.RegisterOptions{Name: ActivityDeliver})
	return env
}

func run(t *testing.T, env *testsuite.TestWorkflowEnvironment, at time.Time) result {
	t.Helper()
	env.ExecuteWorkflow(WorkflowType, input{ID: "t", Queue: "q", At: at, Message: message{Body: []byte("x"), MessageID: "t"}})
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var r result
	if err := env.GetWorkflowResult(&r); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestWorkflowThirtyDays(t *testing.T) {
	var calls []time.Time
	env := workflowEnv(t, &calls, nil)
	due := start.Add(30 * 24 * time.Hour)
	r := run(t, env, due)
	if r.Outcome != outcomeFired || len(calls) != 1 {
		t.Fatalf("result %+v, %d deliveries; want fired once", r, len(calls))
	}
	if calls[0].Before(due) || calls[0].After(due.Add(time.Second)) {
		t.Errorf("delivered at %v, due %v", calls[0], due)
	}
}

func TestWorkflowPastDueFiresAtOnce(t *testing.T) {
	var calls []time.Time
	env := workflowEnv(t, &calls, nil)
	r := run(t, env, start.Add(-time.Hour))
	if r.Outcome != outcomeFired || len(calls) != 1 || !calls[0].Equal(start) {
		t.Fatalf("result %+v, deliveries at %v; want fired at once (%v)", r, calls, start)
	}
}

func TestWorkflowCancelBeforeDue(t *testing.T) {
	var calls []time.Time
	env := workflowEnv(t, &calls, nil)
	var u updateResult
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateCancel, "u1", callbacks{&u, env})
	}, 14*24*time.Hour)
	r := run(t, env, start.Add(30*24*time.Hour))
	if r.Outcome != outcomeCancelled || len(calls) != 0 {
		t.Fatalf("result %+v, %d deliveries; want cancelled, none", r, len(calls))
	}
	if !u.accepted || u.err != nil || u.outcome != outcomeCancelled {
		t.Errorf("update %+v, want accepted and cancelled", u)
	}
	if want := start.Add(14 * 24 * time.Hour); !env.Now().Equal(want) {
		t.Errorf("workflow ended at %v, want at the cancel (%v): the timer must not hold it", env.Now(), want)
	}
}

func TestWorkflowCancelDuringDelivery(t *testing.T) {
	var calls []time.Time
	s := newSuite()
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	w := &workerConfig{config: config{deliveryTimeout: DefaultDeliveryTimeout, logger: quietLogger()}}
	env.RegisterWorkflowWithOptions(w.timeoutWorkflow, workflow.RegisterOptions{Name: WorkflowType})
	due := start.Add(time.Hour)
	var u updateResult
	env.RegisterActivityWithOptions(func(ctx context.Context, in input) (delivery, error) {
		calls = append(calls, env.Now())
		// A cancel arriving while the message is being delivered.
		env.UpdateWorkflow(UpdateCancel, "u1", callbacks{&u, env})
		return delivery{At: env.Now()}, nil
	}, activity.RegisterOptions{Name: ActivityDeliver})
	r := run(t, env, due)
	if r.Outcome != outcomeFired || len(calls) != 1 {
		t.Fatalf("result %+v, %d deliveries; want fired once", r, len(calls))
	}
	if u.outcome != outcomeFired || u.err != nil {
		t.Errorf("update during delivery: %+v, want outcome fired", u)
	}
}

// TestWorkflowCancelAtTheDueInstant sends the cancel update at the very
// instant the timer fires, and just before: whichever the workflow takes
// first decides, and the update's answer always agrees with what
// happened to the message. (After the due time, see
// TestWorkflowCancelDuringDelivery.)
func TestWorkflowCancelAtTheDueInstant(t *testing.T) {
	due := start.Add(time.Hour)
	for _, off := range []time.Duration{-time.Millisecond, 0} {
		var calls []time.Time
		env := workflowEnv(t, &calls, nil)
		var u updateResult
		env.RegisterDelayedCallback(func() {
			env.UpdateWorkflow(UpdateCancel, "u1", callbacks{&u, env})
		}, time.Hour+off)
		r := run(t, env, due)
		switch {
		case u.err != nil || u.outcome == nil:
			t.Errorf("offset %v: update %+v, want an outcome", off, u)
		case u.outcome == outcomeCancelled && (r.Outcome != outcomeCancelled || len(calls) != 0):
			t.Errorf("offset %v: update said cancelled; result %+v, %d deliveries", off, r, len(calls))
		case u.outcome == outcomeFired && (r.Outcome != outcomeFired || len(calls) != 1):
			t.Errorf("offset %v: update said fired; result %+v, %d deliveries", off, r, len(calls))
		}
		if off < 0 && u.outcome != outcomeCancelled {
			t.Errorf("offset %v: a cancel before the due time got %v", off, u.outcome)
		}
		t.Logf("cancel at due%+v: %v", off, u.outcome)
	}
}

func TestWorkflowUndeliverable(t *testing.T) {
	var calls []time.Time
	refused := temporal.NewNonRetryableApplicationError("refused", errUndeliverableType, transport.ErrMessageTooLarge)
	env := workflowEnv(t, &calls, refused)
	r := run(t, env, start.Add(time.Minute))
	if r.Outcome != outcomeUndeliverable || len(calls) != 1 || r.Error == "" {
		t.Fatalf("result %+v after %d attempts; want undeliverable after one", r, len(calls))
	}
	if err := r.err("temporal:q/t"); !errors.Is(err, ErrUndeliverable) {
		t.Errorf("Cancel would say %v, want ErrUndeliverable", err)
	}
}

func TestWorkflowDeliveryRetried(t *testing.T) {
	var calls []time.Time
	s := newSuite()
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(start)
	w := &workerConfig{config: config{deliveryTimeout: DefaultDeliveryTimeout, logger: quietLogger()}}
	env.RegisterWorkflowWithOptions(w.timeoutWorkflow, workflow.RegisterOptions{Name: WorkflowType})
	env.RegisterActivityWithOptions(func(ctx context.Context, in input) (delivery, error) {
		calls = append(calls, env.Now())
		if len(calls) < 4 {
			return delivery{}, transport.ErrQueueFull // retried
		}
		return delivery{At: env.Now(), Duplicate: true}, nil
	}, activity.RegisterOptions{Name: ActivityDeliver})
	r := run(t, env, start.Add(time.Minute))
	if r.Outcome != outcomeFired || len(calls) != 4 || !r.Duplicate {
		t.Fatalf("result %+v after %d attempts; want fired after 4", r, len(calls))
	}
}

// TestDeliverActivity runs the delivery activity on a memory broker: it
// never sends before the due time by the worker's clock, and a second
// attempt (a retry after a crash) is a duplicate the queue drops.
func TestDeliverActivity(t *testing.T) {
	b, err := transport.NewMemory()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	w := &workerConfig{config: config{deliveryTimeout: DefaultDeliveryTimeout, logger: quietLogger()}, broker: b}
	env.RegisterActivityWithOptions(w.deliver, activity.RegisterOptions{Name: ActivityDeliver})
	due := time.Now().Add(300 * time.Millisecond) // as if the timer fired early by this worker's clock
	in := input{ID: "d1", Queue: "deliver", At: due, Message: message{Body: []byte("d1"), MessageID: "d1"}}
	for i, wantDup := range []bool{false, true} {
		v, err := env.ExecuteActivity(ActivityDeliver, in)
		if err != nil {
			t.Fatal(err)
		}
		var d delivery
		if err := v.Get(&d); err != nil {
			t.Fatal(err)
		}
		if d.At.Before(due) || d.Duplicate != wantDup {
			t.Errorf("attempt %d: %+v, want at or after %v, duplicate %v", i+1, d, due, wantDup)
		}
	}
	q, err := b.Queue(t.Context(), "deliver")
	if err != nil {
		t.Fatal(err)
	}
	if got := receive(t, q, time.Second); got == nil || string(got.Body) != "d1" || got.MessageID != "d1" {
		t.Fatalf("received %v, want d1", got)
	}
	if got := receive(t, q, 200*time.Millisecond); got != nil {
		t.Errorf("delivered twice")
	}
	// A message the transport refuses is not retried.
	in.ID, in.Message.MessageID, in.At = "d2", "d2", time.Now()
	in.Message.Properties = map[string]string{"bad key!": "v"}
	_, err = env.ExecuteActivity(ActivityDeliver, in)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != errUndeliverableType || !app.NonRetryable() {
		t.Errorf("invalid message: %v, want a non-retryable %s", err, errUndeliverableType)
	}
}

func TestWorkflowIDs(t *testing.T) {
	ids := []string{"a", "a.b", "a b", "a%20b", "a/b", "#x", "*", ">", "ünï/cödé:%", strings.Repeat("x", 200), strings.Repeat("x", 201), strings.Repeat("é", 128)}
	seen := map[string]string{}
	for _, id := range ids {
		wid := workflowID("temporal", "q", id)
		if other, dup := seen[wid]; dup {
			t.Errorf("%q and %q share workflow ID %q", id, other, wid)
		}
		seen[wid] = id
		if len(wid) > 300 || !quotable(wid) || strings.ContainsAny(wid[len("jetsaga/temporal/q/"):], "/ *>'\"") {
			t.Errorf("%q: workflow ID %q", id, wid)
		}
		e := &Engine{cfg: config{name: "temporal"}}
		ref := e.ref(wid)
		if ref.Engine() != "temporal" {
			t.Errorf("%q: ref %q", id, ref)
		}
		if back, err := e.parseRef(ref); err != nil || back != wid {
			t.Errorf("%q: parseRef(%q) = %q, %v; want %q", id, ref, back, err, wid)
		}
	}
	e := &Engine{cfg: config{name: "temporal"}}
	for _, bad := range []string{"", "temporal", "temporal:", "queue:q/x", "temporal:q", "temporal:bad queue/x", "temporal:q/"} {
		if _, err := e.parseRef(timeout.Ref(bad)); !errors.Is(err, timeout.ErrInvalidRef) {
			t.Errorf("parseRef(%q): %v, want ErrInvalidRef", bad, err)
		}
	}
}

// TestWorkflowDeliverUpdateOutsideItsWait sends UpdateDeliver to a
// workflow waiting on its timer, which did not ask for it: the update is
// rejected and changes nothing — a later cancel still cancels.
func TestWorkflowDeliverUpdateOutsideItsWait(t *testing.T) {
	var calls []time.Time
	env := workflowEnv(t, &calls, nil)
	var deliver, cancel updateResult
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateDeliver, "d1", callbacks{&deliver, env})
	}, 24*time.Hour)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(UpdateCancel, "u1", callbacks{&cancel, env})
	}, 48*time.Hour)
	r := run(t, env, start.Add(30*24*time.Hour))
	if !errors.Is(deliver.rejected, errNotConfirming) || deliver.accepted {
		t.Errorf("UpdateDeliver during the timer: %+v, want rejected with errNotConfirming", deliver)
	}
	if r.Outcome != outcomeCancelled || len(calls) != 0 || cancel.outcome != outcomeCancelled {
		t.Fatalf("result %+v, %d deliveries, cancel %+v; want cancelled, none", r, len(calls), cancel)
	}
}
