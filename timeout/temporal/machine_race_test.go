package temporal

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/jetsaga/jetsaga/internal/requestrace"
	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/kvstore"
	"github.com/jetsaga/jetsaga/timeout"
)

// TestMachineRequestRacesTimeoutOnTemporal is saga/machine's
// request/timeout race with the request's timeout on the Temporal
// engine (a timeout.Router routes the machine's timeouts to it): 200
// requests with a 3 s timeout, each answered from 1,000 ms before to
// 1,500 ms after its timeout. Each instance handles exactly one of
// Completed and TimeoutExpired, every expired one handles its answer as
// Late, nothing is dead-lettered or lost; and on Temporal, each expired
// instance's timeout workflow fired, and none of those listed ended
// otherwise than fired or cancelled, or belongs to a request that has
// another.
func TestMachineRequestRacesTimeoutOnTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 200 requests on Temporal take 15-60 s")
	}
	const n = 200
	const timeoutAfter = 3 * time.Second
	srv, ns := servers(t)
	c := srv.Client(t)
	b := broker(t, ns)
	e, tq := servedEngine(t, c, b)
	names := requestrace.Names{Saga: "race-" + tq, Asks: "asks-" + tq, Outcomes: "outcomes-" + tq}
	queue := "orders-" + tq
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(ctx, js, kvstore.Config{Bucket: "race-" + tq})
	if err != nil {
		t.Fatal(err)
	}
	// Every timeout of the machine's saga goes to Temporal; the rest
	// (none here) to the queue engine.
	router := &timeout.Router{Default: timeout.NewQueue(b), Routes: []timeout.Route{e.Route(0, names.Saga)}}
	d, err := saga.NewDispatcher(b, store, queue,
		saga.WithSagas(requestrace.Machine(t, names, timeoutAfter)),
		saga.WithTimeouts(router), saga.WithConcurrency(32), saga.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	testutil.RunUntilCleanup(t, d.Run)

	// send sends m with MessageID id, as a service would: again after an
	// error, which leaves the outcome unknown (the queue's duplicate
	// detection drops a second copy).
	send := func(ctx context.Context, queue string, m any, id string, opts ...saga.SendOption) {
		opts = append(opts, saga.WithMessageID(id))
		var err error
		for range 5 {
			if _, err = d.SendTo(ctx, queue, m, opts...); err == nil || ctx.Err() != nil {
				return
			}
			t.Logf("sending %s (will send again): %v", id, err)
		}
		t.Errorf("sending %s: %v", id, err)
	}

	// The responder answers each request from 1,000 ms before to
	// 1,500 ms after its timeout, counted from when it was sent.
	askq, err := b.Queue(ctx, names.Asks)
	if err != nil {
		t.Fatal(err)
	}
	requestrace.Respond(t, askq, timeoutAfter, func(i int) time.Duration { return time.Duration(i%26-10) * 100 * time.Millisecond },
		func(ctx context.Context, replyTo string, a requestrace.Answer, cid string) {
			send(ctx, replyTo, a, "answer-"+a.ID, saga.WithCorrelationID(cid))
		})

	outq, err := b.Queue(ctx, names.Outcomes)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("r%03d", i)
		send(ctx, queue, requestrace.Begin{ID: id}, "begin-"+id)
	}
	q, err := b.Queue(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	// Minutes, not seconds: on a loaded machine the Temporal worker
	// answers cancels slowly (each may take up to the engine's 30 s
	// cancel timeout) and they hold the dispatcher's slots meanwhile.
	r := requestrace.Collect(t, ctx, outq, n, 3*time.Minute, func() { requestrace.NoDeadLetters(t, ctx, q) })
	r.Check(t, n)
	requestrace.NoDeadLetters(t, ctx, q)
	got, counts, expiredBy := r.Got, r.Counts, r.ExpiredBy

	// On Temporal: each expired instance's timeout workflow fired.
	for _, id := range slices.Sorted(maps.Keys(expiredBy)) {
		var r result
		wid := workflowID(e.Name(), queue, expiredBy[id])
		if err := c.GetWorkflow(ctx, wid, "").Get(ctx, &r); err != nil || r.Outcome != outcomeFired {
			t.Errorf("%s: expired, but its timeout workflow %s ended %+v, %v; want fired", id, wid, r, err)
		}
	}
	// As far as the visibility store shows them (it lags, more so on a
	// loaded machine): no request had two timeout workflows; each ended
	// fired or cancelled. A completed instance's was cancelled, or fired
	// and was dropped by the machine, or is not listed: not yet visible,
	// or never started, where the answer's step committed before the
	// dispatcher had scheduled the timeout (the step then drops the
	// schedule).
	wfs := raceWorkflows(t, ctx, c, e, tq)
	byOutcome := make(map[string]int)
	for id, whats := range got {
		outcome, ok := wfs[id]
		if !ok {
			outcome = "not listed"
		}
		byOutcome[whats[0]+"/"+outcome]++
		if ok && outcome != outcomeFired && outcome != outcomeCancelled {
			t.Errorf("%s: timeout workflow ended %q", id, outcome)
		}
	}
	t.Logf("outcomes %v; instance outcome/timeout workflow outcome: %v", counts, byOutcome)
}

// raceWorkflows returns the outcome, by saga instance, of each timeout
// workflow of task queue tq that Temporal's visibility store lists as
// closed. An instance with two timeout workflows fails t.
func raceWorkflows(t *testing.T, ctx context.Context, c client.Client, e *Engine, tq string) map[string]string {
	t.Helper()
	closed := make(map[string]string)
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: 1000, NextPageToken: token,
			Query: fmt.Sprintf("WorkflowType = '%s' AND TaskQueue = '%s' AND ExecutionStatus != 'Running'", WorkflowType, tq),
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range resp.GetExecutions() {
			var m memo
			if err := e.cfg.dataConverter.FromPayload(ex.GetMemo().GetFields()[MemoKey], &m); err != nil {
				t.Fatal(err)
			}
			if _, dup := closed[m.Instance]; dup {
				t.Errorf("%s: two timeout workflows", m.Instance)
			}
			closed[m.Instance] = ex.GetExecution().GetWorkflowId()
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	out := make(map[string]string, len(closed))
	for _, id := range slices.Sorted(maps.Keys(closed)) {
		var r result
		if err := c.GetWorkflow(ctx, closed[id], "").Get(ctx, &r); err != nil {
			t.Fatalf("%s: timeout workflow: %v", id, err)
		}
		out[id] = r.Outcome
	}
	return out
}
