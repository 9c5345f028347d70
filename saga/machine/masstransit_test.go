package machine_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

// MassTransit's own state-machine specs (tests/MassTransit.Tests/
// SagaStateMachineTests), ported: a machine written as the spec writes
// it, and what the spec asserts. Each test is named after the spec's file
// and case.

type (
	mtInstance struct {
		machine.Instance
		Called, CalledAfterAll bool
		Counter, OnEnter       int
		Log                    []string
	}
	MTStart    struct{ ID string }
	MTFirst    struct{ ID string }
	MTSecond   struct{ ID string }
	MTHello    struct{ ID string }
	MTComplete struct{ ID string }
	MTStop     struct{ ID string }
	MTAsk      struct{ ID string }
	MTAnswer   struct{ Text string } // no ID: the responder does not know the saga
	MTThing    struct {
		ID        string
		Condition bool
	}
)

type mtMachine = machine.Machine[mtInstance]

func mtEvents(m *mtMachine) (start machine.Event[mtInstance, MTStart], first machine.Event[mtInstance, MTFirst], second machine.Event[mtInstance, MTSecond]) {
	start = machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	first = machine.NewEvent(m, saga.By(func(e MTFirst) string { return e.ID }))
	second = machine.NewEvent(m, saga.By(func(e MTSecond) string { return e.ID }))
	return start, first, second
}

func mtState(t *testing.T, env *sagatest.Env, d *saga.Definition[mtInstance], id string) string {
	t.Helper()
	return sagatest.State(t, env, d, id).CurrentState()
}

// waitingForSecond is the machine of CompositeEvent_Specs and
// CompositeEventMultipleStates_Specs: Start goes to Waiting, First to
// WaitingForSecond, where Third (First and Second) finalizes; the
// composite is declared before the bindings or between them.
func waitingForSecond(before bool) *saga.Definition[mtInstance] {
	m := machine.New[mtInstance]("composite")
	waiting, waitingForSecond := m.State("Waiting"), m.State("WaitingForSecond")
	start, first, second := mtEvents(m)
	var third machine.Event[mtInstance, machine.CompositeRaised]
	if before {
		third = machine.Composite(m, "Third", first, second)
	}
	m.Initially(machine.When(start).TransitionTo(waiting))
	m.During(waiting, machine.When(first).TransitionTo(waitingForSecond))
	if !before {
		third = machine.Composite(m, "Third", first, second)
	}
	m.During(waitingForSecond, machine.When(third).
		Then(func(ctx context.Context, c *saga.Context[mtInstance], _ machine.CompositeRaised) error {
			return c.Send("done", MTComplete{ID: c.ID()})
		}).
		Finalize())
	return m.MustBuild()
}

// CompositeEvent_Specs, When_combining_events_into_a_single_event: First
// arrives in Waiting (which does not bind the composite) and is recorded
// there; Second in WaitingForSecond completes Third.
func TestMassTransit_CompositeEvent_CombinedEventAcrossStates(t *testing.T) {
	d := waitingForSecond(false)
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "c1"})
		if got := mtState(t, env, d, "c1"); got != "Waiting" {
			t.Fatalf("state %s, want Waiting", got)
		}
		env.Send(MTFirst{ID: "c1"})
		if got := mtState(t, env, d, "c1"); got != "WaitingForSecond" {
			t.Fatalf("state %s, want WaitingForSecond", got)
		}
		env.Send(MTSecond{ID: "c1"})
		env.AssertSent(t, "done", MTComplete{ID: "c1"})
		env.AssertCompleted(t, d, "c1")
	})
}

// CompositeEventMultipleStates_Specs: the composite declared before the
// bindings or between them, Start, First, Second call it.
func TestMassTransit_CompositeEventMultipleStates(t *testing.T) {
	for _, before := range []bool{true, false} {
		name := map[bool]string{true: "DefinedBefore", false: "DefinedDuring"}[before]
		t.Run(name, func(t *testing.T) {
			d := waitingForSecond(before)
			sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
				env.Send(MTStart{ID: "c1"})
				env.Send(MTFirst{ID: "c1"})
				env.Send(MTSecond{ID: "c1"})
				env.AssertSent(t, "done", MTComplete{ID: "c1"})
				env.AssertCompleted(t, d, "c1")
			})
		})
	}
}

// CompositeOrder_Specs, When_combining_events_into_a_single_event_happily:
// the composite declared after the constituents' own bindings runs after
// them (CalledAfterAll); one constituent alone does not call it.
func TestMassTransit_CompositeOrder(t *testing.T) {
	build := func() *saga.Definition[mtInstance] {
		m := machine.New[mtInstance]("order")
		waiting := m.State("Waiting")
		start, first, second := mtEvents(m)
		m.Initially(machine.When(start).TransitionTo(waiting))
		m.During(waiting,
			machine.When(first).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTFirst) error {
				c.Data.CalledAfterAll = false
				return nil
			}),
			machine.When(second).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTSecond) error {
				c.Data.CalledAfterAll = false
				return nil
			}))
		third := machine.Composite(m, "Third", first, second)
		m.During(waiting, machine.When(third).
			Then(func(ctx context.Context, c *saga.Context[mtInstance], _ machine.CompositeRaised) error {
				c.Data.Called, c.Data.CalledAfterAll = true, true
				return c.Send("done", c.Data.CalledAfterAll)
			}).
			Finalize())
		return m.MustBuild()
	}
	t.Run("CalledAfterAllEvents", func(t *testing.T) {
		d := build()
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(MTStart{ID: "o1"})
			env.Send(MTFirst{ID: "o1"})
			env.Send(MTSecond{ID: "o1"})
			env.AssertCompleted(t, d, "o1")
			env.AssertSent(t, "done", true)
		})
	})
	t.Run("NotCalledForOneEvent", func(t *testing.T) {
		d := build()
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(MTStart{ID: "o1"})
			env.Send(MTSecond{ID: "o1"})
			if s := sagatest.State(t, env, d, "o1"); s.Called {
				t.Errorf("composite called after one of two events")
			}
		})
	})
}

// laterArrival: Third (First and Second) counts its raises in Waiting;
// Start, First, Second, then First again.
func laterArrival(t *testing.T, opts machine.CompositeOptions) int {
	m := machine.New[mtInstance]("again")
	waiting := m.State("Waiting")
	start, first, second := mtEvents(m)
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	third := machine.CompositeWith(m, "Third", opts, first, second)
	m.Initially(machine.When(start).TransitionTo(waiting))
	m.During(waiting,
		machine.When(third).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ machine.CompositeRaised) error {
			c.Data.Counter++
			return nil
		}),
		machine.When(stop).Finalize())
	d := m.MustBuild()
	var n int
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "a1"})
		env.Send(MTFirst{ID: "a1"})
		env.Send(MTSecond{ID: "a1"})
		env.Send(MTFirst{ID: "a1"}, saga.WithMessageID("again"))
		n = sagatest.State(t, env, d, "a1").Counter
	})
	return n
}

// MassTransit keeps a composite's status once complete: each later
// arrival of a constituent raises it again.
func TestMassTransit_CompositeEvent_RaisedAgainByALaterArrival(t *testing.T) {
	if got := laterArrival(t, 0); got != 2 {
		t.Errorf("composite raised %d times, want 2 (complete, then again by the later First)", got)
	}
}

// Anytime_Specs: DuringAny events are handled in any state but Initial;
// in Initial one is unhandled.
func TestMassTransit_Anytime(t *testing.T) {
	m := machine.New[mtInstance]("anytime")
	ready := m.State("Ready")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	hello := machine.NewEvent(m, saga.By(func(e MTHello) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(ready))
	m.DuringAny(machine.When(hello).
		Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTHello) error {
			return c.Send("done", MTComplete{ID: c.ID()})
		}).
		Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "a1"})
		env.Send(MTHello{ID: "a1"})
		env.AssertCompleted(t, d, "a1")
		env.AssertSent(t, "done", MTComplete{ID: "a1"})
		env.Send(MTHello{ID: "never-started"}) // not bound in Initial: no instance
		if env.Exists(d, "never-started") {
			t.Errorf("a DuringAny event started an instance in Initial")
		}
	})
}

// MassTransit adds activities per state and event: a state's own binding
// and DuringAny's both run, in the order declared.
func TestMassTransit_DuringAnyBesideDuring(t *testing.T) {
	m := machine.New[mtInstance]("both")
	ready := m.State("Ready")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	hello := machine.NewEvent(m, saga.By(func(e MTHello) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	logHello := func(line string) saga.Handler[mtInstance, MTHello] {
		return func(ctx context.Context, c *saga.Context[mtInstance], _ MTHello) error {
			c.Data.Log = append(c.Data.Log, line)
			return nil
		}
	}
	m.Initially(machine.When(start).TransitionTo(ready))
	m.During(ready, machine.When(hello).Then(logHello("during")), machine.When(stop).Finalize())
	m.DuringAny(machine.When(hello).Then(logHello("any")))
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "b1"})
		env.Send(MTHello{ID: "b1"})
		if got, want := sagatest.State(t, env, d, "b1").Log, []string{"during", "any"}; !slices.Equal(got, want) {
			t.Errorf("ran %v, want %v (the state's own binding, then DuringAny's)", got, want)
		}
	})
}

// Request_Specs with a responder that knows nothing of the saga: it
// answers with the request's CorrelationID (MassTransit's RequestId) and
// a body without the instance's ID.
func TestMassTransit_Request_RespondedByRequestID(t *testing.T) {
	m := machine.New[mtInstance]("request")
	waiting := m.State("Waiting")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	ask := machine.NewRequest[mtInstance, MTAsk, MTAnswer](m, "Ask", "responder", 30*time.Second,
		func(c *saga.Context[mtInstance]) MTAsk { return MTAsk{ID: c.ID()} }, nil)
	m.Initially(machine.When(start).Request(ask).TransitionTo(waiting))
	m.During(waiting,
		machine.When(ask.Completed).
			Then(func(ctx context.Context, c *saga.Context[mtInstance], a MTAnswer) error {
				return c.Send("done", a)
			}).
			Finalize(),
		machine.When(ask.TimeoutExpired).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "r/1"})
		req := env.Messages("responder")
		if len(req) != 1 {
			t.Fatalf("%d requests sent, want 1", len(req))
		}
		// A plain responder: reply to ReplyTo with the request's
		// CorrelationID, nothing of the instance in the body.
		env.Send(MTAnswer{Text: "42"}, saga.WithCorrelationID(req[0].CorrelationID))
		env.AssertCompleted(t, d, "r/1")
		env.AssertSent(t, "done", MTAnswer{Text: "42"})
		env.Send(MTAnswer{Text: "stray"}) // no request's CorrelationID: cannot be correlated
		if dl := env.DeadLetters(); len(dl) != 1 || !strings.Contains(dl[0].DeadLetterDescription, saga.ErrCorrelation.Error()) {
			t.Errorf("dead letters %v, want the stray answer, uncorrelated", dl)
		}
	})
}

// A request with a zero timeout (MassTransit's Timeout = TimeSpan.Zero)
// has none: it waits for its response however long it takes.
func TestMassTransit_Request_ZeroTimeoutMeansNone(t *testing.T) {
	m := machine.New[mtInstance]("request")
	waiting := m.State("Waiting")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	ask := machine.NewRequest[mtInstance, MTAsk, MTAnswer](m, "Ask", "responder", 0,
		func(c *saga.Context[mtInstance]) MTAsk { return MTAsk{ID: c.ID()} }, nil)
	m.Initially(machine.When(start).Request(ask).TransitionTo(waiting))
	m.During(waiting,
		machine.When(ask.Completed).Finalize(),
		machine.When(ask.TimeoutExpired).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ machine.Expired) error {
			return c.Send("done", "expired")
		}).Finalize())
	d, err := m.Build()
	if err != nil {
		t.Fatalf("a request with a zero timeout: %v", err)
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "z1"})
		if n := len(env.Timeouts(d, "z1")); n != 0 {
			t.Fatalf("%d timeouts pending, want none", n)
		}
		env.Advance(365 * 24 * time.Hour)
		env.AssertRunning(t, d, "z1")
		req := env.Messages("responder")[0]
		env.Send(MTAnswer{Text: "late but fine"}, saga.WithCorrelationID(req.CorrelationID))
		env.AssertCompleted(t, d, "z1")
		if got := sagatest.Sent[string](env, "done"); len(got) != 0 {
			t.Errorf("TimeoutExpired raised: %v", got)
		}
	})
}

// UnobservedEvent_Specs: an event the current state does not handle is
// an error (MassTransit's UnhandledEventException): dead-lettered, the
// instance unchanged.
func TestMassTransit_UnobservedEvent(t *testing.T) {
	m := machine.New[mtInstance]("unobserved")
	running := m.State("Running")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	machine.NewEvent(m, saga.By(func(e MTHello) string { return e.ID })) // bound nowhere
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(running))
	m.During(running, machine.When(stop).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "u1"})
		env.Send(MTHello{ID: "u1"})
		if dl := env.DeadLetters(); len(dl) != 1 {
			t.Fatalf("%d dead letters, want the unobserved Hello", len(dl))
		}
		if got := mtState(t, env, d, "u1"); got != "Running" {
			t.Errorf("state %s, want Running", got)
		}
	})
}

// Finalize_Specs: Finalize enters Final, the Finally activity runs, and
// the instance is complete (SetCompletedWhenFinalized).
func TestMassTransit_Finalize(t *testing.T) {
	m := machine.New[mtInstance]("finalize")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	m.Initially(machine.When(start).Finalize())
	m.Finally(func(ctx context.Context, c *saga.Context[mtInstance]) error {
		return c.Send("done", MTComplete{ID: c.ID()})
	})
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "f1"})
		env.AssertCompleted(t, d, "f1")
		env.AssertSent(t, "done", MTComplete{ID: "f1"})
	})
}

// Condition_Specs: If and IfElse choose the activity's steps by the
// instance and the message.
func TestMassTransit_Condition(t *testing.T) {
	m := machine.New[mtInstance]("condition")
	yes, no := m.State("True"), m.State("False")
	thing := machine.NewEvent(m, saga.By(func(e MTThing) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(thing).
		If(func(_ *saga.Context[mtInstance], e MTThing) bool { return e.Condition },
			func(a *machine.Activity[mtInstance, MTThing]) {
				a.Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTThing) error {
					c.Data.Called = true
					return nil
				})
			}).
		IfElse(func(_ *saga.Context[mtInstance], e MTThing) bool { return e.Condition },
			func(a *machine.Activity[mtInstance, MTThing]) { a.TransitionTo(yes) },
			func(a *machine.Activity[mtInstance, MTThing]) { a.TransitionTo(no) }))
	m.During(machine.States(yes, no), machine.When(stop).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTThing{ID: "t", Condition: true})
		env.Send(MTThing{ID: "f"})
		if s := sagatest.State(t, env, d, "t"); s.CurrentState() != "True" || !s.Called {
			t.Errorf("true: state %s, called %v; want True, called", s.CurrentState(), s.Called)
		}
		if s := sagatest.State(t, env, d, "f"); s.CurrentState() != "False" || s.Called {
			t.Errorf("false: state %s, called %v; want False, not called", s.CurrentState(), s.Called)
		}
	})
}

// MissingInstance_Specs: OnMissingInstance answers a request for an
// instance that does not exist; in jetsaga the saga's NotFoundPolicy
// (machine.WithDefinitionOptions(saga.WhenNotFound(...))).
func TestMassTransit_MissingInstance(t *testing.T) {
	m := machine.New[mtInstance]("missing", machine.WithDefinitionOptions(saga.WhenNotFound(saga.NotFoundPolicy{
		Handler: func(ctx context.Context, c *saga.NotFoundContext, msg any) error {
			return c.Reply(MTComplete{ID: c.ID()})
		},
	})))
	running := m.State("Running")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	hello := machine.NewEvent(m, saga.By(func(e MTHello) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(running))
	m.During(running, machine.When(hello).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTHello{ID: "nobody"}, saga.WithReplyTo("client"))
		env.AssertSent(t, "client", MTComplete{ID: "nobody"})
		if env.Exists(d, "nobody") {
			t.Errorf("a status request created an instance")
		}
	})
}
