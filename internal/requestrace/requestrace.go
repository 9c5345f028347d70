// Package requestrace is the request/timeout race of saga/machine's
// Request, shared by the tests that run it on each timeout engine (the
// queue engine on an embedded nats-server, the Temporal engine, the
// virtual clock): a machine sends one request per instance and waits for
// its answer or its timeout; a responder answers each request around its
// timeout; every instance must handle exactly one of Completed and
// TimeoutExpired, and an expired one its answer as Late.
package requestrace

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/transport"
)

type (
	// Data is the race machine's instance data.
	Data struct{ machine.Instance }
	// Begin starts an instance, which sends its request at once.
	Begin struct{ ID string }
	// Ask is the request.
	Ask struct{ ID string }
	// Answer is the response.
	Answer struct{ ID string }
	// Outcome reports what an instance handled: What is "completed",
	// "expired" or "late".
	Outcome struct {
		ID   string
		What string
		// Timeout is the MessageID of the timeout that expired the
		// request (its timeout ID), for an "expired" outcome.
		Timeout string `json:",omitempty"`
	}
)

// Names are the race's saga name and the queues it sends requests and
// outcomes to.
type Names struct{ Saga, Asks, Outcomes string }

// Machine is the race machine: Begin sends an Ask with the given timeout
// and waits in Waiting; Completed reports "completed" and finalizes;
// TimeoutExpired reports "expired" and moves to Expired, where Late
// reports "late" and finalizes.
func Machine(t testing.TB, n Names, timeout time.Duration) *saga.Definition[Data] {
	t.Helper()
	m := machine.New[Data](n.Saga)
	waiting, expired := m.State("Waiting"), m.State("Expired")
	begin := machine.NewEvent(m, saga.By(func(e Begin) string { return e.ID }))
	ask := machine.NewRequest(m, "Ask", n.Asks, timeout,
		func(c *saga.Context[Data]) Ask { return Ask{ID: c.ID()} },
		saga.By(func(e Answer) string { return e.ID }))
	report := func(what string) func(ctx context.Context, c *saga.Context[Data], _ Answer) error {
		return func(ctx context.Context, c *saga.Context[Data], _ Answer) error {
			return c.Send(n.Outcomes, Outcome{ID: c.ID(), What: what})
		}
	}
	m.Initially(machine.When(begin).Request(ask).TransitionTo(waiting))
	m.During(waiting,
		machine.When(ask.Completed).Then(report("completed")).Finalize(),
		machine.When(ask.TimeoutExpired).
			Then(func(ctx context.Context, c *saga.Context[Data], _ machine.Expired) error {
				return c.Send(n.Outcomes, Outcome{ID: c.ID(), What: "expired", Timeout: c.Incoming().MessageID})
			}).
			TransitionTo(expired))
	m.During(expired, machine.When(ask.Late).Then(report("late")).Finalize())
	def, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// Answerer sends an answer to a request's reply queue with its
// correlation ID.
type Answerer func(ctx context.Context, replyTo string, a Answer, correlationID string)

// Respond runs, until t's cleanup, a responder on asks: it answers the
// i-th request it receives at the request's enqueue time plus timeout
// plus offset(i), through answer. The cleanup waits for the answers
// still due.
func Respond(t testing.TB, asks *transport.Queue, timeout time.Duration, offset func(i int) time.Duration, answer Answerer) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	testutil.RunUntilCleanup(t, func(ctx context.Context) error {
		i := 0
		for ctx.Err() == nil {
			ds, err := asks.Receive(ctx, 64)
			if err != nil {
				continue
			}
			for _, del := range ds {
				req, err := saga.Decode[Ask](del.Message)
				if err != nil {
					t.Errorf("request: %v", err)
					continue
				}
				delay := time.Until(del.EnqueuedAt.Add(timeout + offset(i)))
				i++
				replyTo, cid := del.ReplyTo, del.CorrelationID
				wg.Add(1)
				time.AfterFunc(delay, func() {
					defer wg.Done()
					answer(context.WithoutCancel(ctx), replyTo, Answer(req), cid)
				})
				if err := del.Complete(ctx); err != nil && ctx.Err() == nil {
					t.Errorf("complete: %v", err)
				}
			}
		}
		return nil
	})
}

// Result is what the instances reported.
type Result struct {
	// Got is each instance's outcomes in the order they arrived.
	Got map[string][]string
	// Counts counts outcomes by What.
	Counts map[string]int
	// ExpiredBy is, for each expired instance, the timeout that expired it.
	ExpiredBy map[string]string
}

// Collect receives outcomes from q until n instances have reported
// "completed" or "expired" and every expired one "late", for at most
// within (then it fails t). check, if not nil, runs before each receive
// (to fail early on dead letters).
func Collect(t testing.TB, ctx context.Context, q *transport.Queue, n int, within time.Duration, check func()) Result {
	t.Helper()
	r := Result{Got: make(map[string][]string), Counts: make(map[string]int), ExpiredBy: make(map[string]string)}
	testutil.Await(t, within, func() string {
		if check != nil {
			check()
		}
		rctx, stop := context.WithTimeout(ctx, time.Second)
		defer stop()
		ds, err := q.Receive(rctx, 256)
		if err != nil && rctx.Err() == nil {
			return err.Error()
		}
		for _, del := range ds {
			o, err := saga.Decode[Outcome](del.Message)
			if err != nil {
				return err.Error()
			}
			r.add(o)
			_ = del.Complete(ctx)
		}
		if r.Counts["completed"]+r.Counts["expired"] < n || r.Counts["late"] < r.Counts["expired"] {
			return fmt.Sprintf("outcomes so far: %v", r.Counts)
		}
		return ""
	})
	return r
}

// Outcomes collects outcomes already at hand (as sagatest's Sent returns
// them).
func Outcomes(os []Outcome) Result {
	r := Result{Got: make(map[string][]string), Counts: make(map[string]int), ExpiredBy: make(map[string]string)}
	for _, o := range os {
		r.add(o)
	}
	return r
}

func (r Result) add(o Outcome) {
	r.Got[o.ID] = append(r.Got[o.ID], o.What)
	r.Counts[o.What]++
	if o.What == "expired" {
		r.ExpiredBy[o.ID] = o.Timeout
	}
}

// Check fails t unless each of n instances reported [completed] or
// [expired late], and both sides of the race were seen.
func (r Result) Check(t testing.TB, n int) {
	t.Helper()
	for id, whats := range r.Got {
		switch {
		case len(whats) == 1 && whats[0] == "completed":
		case len(whats) == 2 && whats[0] == "expired" && whats[1] == "late":
		default:
			t.Errorf("%s: outcomes %v, want [completed] or [expired late]", id, whats)
		}
	}
	if len(r.Got) != n {
		t.Errorf("%d instances reported, want %d", len(r.Got), n)
	}
	if r.Counts["completed"] == 0 || r.Counts["expired"] == 0 {
		t.Errorf("outcomes %v: want both sides of the race", r.Counts)
	}
}

// NoDeadLetters fails t (now) if q's dead-letter queue holds a message.
func NoDeadLetters(t testing.TB, ctx context.Context, q *transport.Queue) {
	t.Helper()
	ms, err := q.DeadLetterQueue().Peek(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("dead letter: %s %s", m.DeadLetterReason, m.DeadLetterDescription)
	}
	if len(ms) > 0 {
		t.FailNow()
	}
}
