package machine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/saga"
	"github.com/jetsaga/jetsaga/saga/machine"
	"github.com/jetsaga/jetsaga/sagatest"
)

// MassTransit's specs of what saga/machine lacked before: filtered When
// and Ignore, Catch, WhenEnter and WhenLeave, composite options, a
// schedule's delay per call.

func mtLog(line string) func(ctx context.Context, c *saga.Context[mtInstance], _ any) error {
	return func(ctx context.Context, c *saga.Context[mtInstance], _ any) error {
		c.Data.Log = append(c.Data.Log, line)
		return nil
	}
}

// FilterExpression_Specs, When_specifying_a_conditional_event_activity:
// two bindings of one event in a state, each with its filter.
func TestMassTransit_FilterExpression(t *testing.T) {
	m := machine.New[mtInstance]("filter")
	yes, no := m.State("True"), m.State("False")
	thing := machine.NewEvent(m, saga.By(func(e MTThing) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.During(machine.Initial,
		machine.When(thing, func(_ *saga.Context[mtInstance], e MTThing) bool { return e.Condition }).TransitionTo(yes),
		machine.When(thing, func(_ *saga.Context[mtInstance], e MTThing) bool { return !e.Condition }).TransitionTo(no))
	m.During(machine.States(yes, no), machine.When(stop).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTThing{ID: "t", Condition: true})
		env.Send(MTThing{ID: "f", Condition: false})
		if got := mtState(t, env, d, "t"); got != "True" {
			t.Errorf("condition true: state %s, want True", got)
		}
		if got := mtState(t, env, d, "f"); got != "False" {
			t.Errorf("condition false: state %s, want False", got)
		}
	})
}

// A filtered When whose filter fails accepts the event and does nothing
// (MassTransit binds it as a condition): no dead letter.
func TestMassTransit_FilterExpression_FailedFilterIsHandled(t *testing.T) {
	m := machine.New[mtInstance]("filter")
	running := m.State("Running")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	thing := machine.NewEvent(m, saga.By(func(e MTThing) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(running))
	m.During(running, machine.When(thing, func(_ *saga.Context[mtInstance], e MTThing) bool { return e.Condition }).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "x"})
		env.Send(MTThing{ID: "x", Condition: false})
		if n := len(env.DeadLetters()); n != 0 {
			t.Fatalf("%d dead letters for a When whose filter failed, want 0", n)
		}
		env.AssertRunning(t, d, "x")
		env.Send(MTThing{ID: "x", Condition: true})
		env.AssertCompleted(t, d, "x")
	})
}

// Ignore_Specs, When_an_event_is_defined_as_ignored_for_state, with
// MassTransit's Ignore(event, filter): an ignored Start raises no fault;
// a Start the filter does not ignore is unhandled.
func TestMassTransit_Ignore_Filtered(t *testing.T) {
	m := machine.New[mtInstance]("ignore")
	running := m.State("Running")
	start := machine.NewEvent(m, saga.By(func(e MTThing) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(running))
	m.During(running,
		machine.When(stop).Finalize(),
		machine.Ignore(start, func(_ *saga.Context[mtInstance], e MTThing) bool { return e.Condition }))
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTThing{ID: "i1"})
		env.Send(MTThing{ID: "i1", Condition: true}, saga.WithMessageID("ignored"))
		if n := len(env.DeadLetters()); n != 0 {
			t.Fatalf("%d dead letters for an ignored event, want 0", n)
		}
		env.Send(MTThing{ID: "i1", Condition: false}, saga.WithMessageID("not-ignored"))
		dl := env.DeadLetters()
		if len(dl) != 1 || !strings.Contains(dl[0].DeadLetterDescription, machine.ErrUnhandledEvent.Error()) {
			t.Fatalf("dead letters %v, want the Start the filter does not ignore, unhandled", dl)
		}
		env.AssertRunning(t, d, "i1")
	})
}

// boom is Exception_Specs' ApplicationException.
type boom struct{ msg string }

func (b *boom) Error() string { return b.msg }

// Exception_Specs, When_an_action_throws_an_exception: the first action
// runs, the one after the failure does not, the matching Catch runs its
// conditions and actions, sees the error, and transitions to Failed; the
// Catch<Exception> after it is not called.
func TestMassTransit_Exception_CaughtByType(t *testing.T) {
	m := machine.New[mtInstance]("exception")
	failed := m.State("Failed")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	log := func(line string) saga.Handler[mtInstance, MTStart] {
		return func(ctx context.Context, c *saga.Context[mtInstance], _ MTStart) error {
			c.Data.Log = append(c.Data.Log, line)
			return nil
		}
	}
	yes := func(*saga.Context[mtInstance], MTStart) bool { return true }
	no := func(*saga.Context[mtInstance], MTStart) bool { return false }
	m.During(machine.Initial, machine.When(start).
		Then(log("called")).
		Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTStart) error {
			return fmt.Errorf("charging: %w", &boom{"Boom!"})
		}).
		Then(log("not called")).
		Catch(machine.ErrorAs[*boom](), func(x *machine.Activity[mtInstance, MTStart]) {
			x.If(yes, func(b *machine.Activity[mtInstance, MTStart]) { b.Then(log("then clause")) }).
				IfElse(no,
					func(b *machine.Activity[mtInstance, MTStart]) { b.Then(log("then should not")) },
					func(b *machine.Activity[mtInstance, MTStart]) { b.Then(log("else")) }).
				Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTStart) error {
					var b *boom
					if errors.As(machine.CaughtError(ctx), &b) {
						c.Data.Log = append(c.Data.Log, "caught "+b.msg)
					}
					return nil
				}).
				TransitionTo(failed)
		}).
		Catch(nil, func(x *machine.Activity[mtInstance, MTStart]) { x.Then(log("should not")) }).
		Then(log("after the catch")))
	m.During(failed, machine.When(stop).Finalize())
	d := m.MustBuild() // Failed is reached by the Catch alone
	if !strings.Contains(m.Mermaid(), "Initial --> Failed : MTStart [catch]") {
		t.Errorf("the diagram lacks the Catch's transition:\n%s", m.Mermaid())
	}
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "e1"})
		if n := len(env.DeadLetters()); n != 0 {
			t.Fatalf("%d dead letters, want the error caught", n)
		}
		s := sagatest.State(t, env, d, "e1")
		if got := s.CurrentState(); got != "Failed" {
			t.Errorf("state %s, want Failed", got)
		}
		want := []string{"called", "then clause", "else", "caught Boom!", "after the catch"}
		if !slices.Equal(s.Log, want) {
			t.Errorf("ran %v, want %v", s.Log, want)
		}
	})
}

// Exception_Specs, When_the_exception_does_not_match_the_type: a Catch
// for another error is passed over, a Catch of every error after it
// handles it; with no Catch that matches, the step fails as before.
func TestMassTransit_Exception_DoesNotMatchTheType(t *testing.T) {
	other := errors.New("other")
	build := func(catchAll bool) *saga.Definition[mtInstance] {
		m := machine.New[mtInstance]("exception")
		failed := m.State("Failed")
		start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
		stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
		a := machine.When(start).
			Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTStart) error {
				c.Data.Called = true
				return saga.Permanent(&boom{"Boom!"}) // uncaught: dead-lettered at once
			}).
			Catch(machine.ErrorIs(other), func(x *machine.Activity[mtInstance, MTStart]) { x.Finalize() })
		if catchAll {
			a.Catch(nil, func(x *machine.Activity[mtInstance, MTStart]) { x.TransitionTo(failed) })
		}
		m.Initially(a, machine.When(stop).TransitionTo(failed))
		m.During(failed, machine.When(stop).Finalize())
		return m.MustBuild()
	}
	t.Run("CaughtByCatchAll", func(t *testing.T) {
		d := build(true)
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(MTStart{ID: "e1"})
			if got := mtState(t, env, d, "e1"); got != "Failed" {
				t.Errorf("state %s, want Failed", got)
			}
		})
	})
	t.Run("NotCaught", func(t *testing.T) {
		d := build(false)
		sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
			env.Send(MTStart{ID: "e1"})
			if env.Exists(d, "e1") {
				t.Errorf("the instance was created by a step whose error no Catch matched")
			}
			if dl := env.DeadLetters(); len(dl) != 1 || !strings.Contains(dl[0].DeadLetterDescription, "Boom!") {
				t.Errorf("dead letters %v, want the Start with Boom!", dl)
			}
		})
	})
}

// EnterEvent_Specs, Triggering_a_change_event_from_a_transition: entering
// Running runs its WhenEnter activity (which sees what the first
// activity did) and that transitions on to RunningFaster.
func TestMassTransit_EnterEvent_TransitionFromEnter(t *testing.T) {
	m := machine.New[mtInstance]("enter", machine.WithHistory(10))
	running, faster := m.State("Running"), m.State("RunningFaster")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(start).
		Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTStart) error {
			c.Data.Counter = 1
			return nil
		}).
		TransitionTo(running))
	m.During(machine.States(running, faster), machine.When(stop).Finalize())
	m.WhenEnter(running, func(x *machine.Activity[mtInstance, any]) {
		x.Then(func(ctx context.Context, c *saga.Context[mtInstance], _ any) error {
			c.Data.OnEnter = c.Data.Counter
			return nil
		}).TransitionTo(faster)
	})
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "s1"})
		s := sagatest.State(t, env, d, "s1")
		if got := s.CurrentState(); got != "RunningFaster" {
			t.Errorf("state %s, want RunningFaster", got)
		}
		if s.OnEnter != 1 {
			t.Errorf("OnEnter %d, want 1", s.OnEnter)
		}
		if got, want := s.Path(), []string{"Initial", "Running", "RunningFaster"}; !slices.Equal(got, want) {
			t.Errorf("path %v, want %v", got, want)
		}
	})
	if !strings.Contains(m.Mermaid(), "Running --> RunningFaster : Running.Enter") {
		t.Errorf("the diagram lacks the enter activity's transition:\n%s", m.Mermaid())
	}
}

// Transition_Specs, Transitioning_to_a_state_from_a_state: leaving and
// entering run in MassTransit's order — the state left's leave activity,
// then the state entered's enter activity, Final's too — and a
// transition to the current state runs neither.
func TestMassTransit_Transition_EnterAndLeave(t *testing.T) {
	m := machine.New[mtInstance]("transition")
	running := m.State("Running")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	hello := machine.NewEvent(m, saga.By(func(e MTHello) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(running))
	m.During(running,
		machine.When(hello).TransitionTo(running), // no re-entry
		machine.When(stop).Finalize())
	m.WhenLeave(machine.Initial, func(x *machine.Activity[mtInstance, any]) { x.Then(mtLog("leave Initial")) })
	m.WhenEnter(running, func(x *machine.Activity[mtInstance, any]) { x.Then(mtLog("enter Running")) })
	m.WhenLeave(running, func(x *machine.Activity[mtInstance, any]) { x.Then(mtLog("leave Running")) })
	m.WhenEnter(machine.Final, func(x *machine.Activity[mtInstance, any]) {
		x.Then(func(ctx context.Context, c *saga.Context[mtInstance], msg any) error {
			return c.Send("log", append(c.Data.Log, fmt.Sprintf("enter Final on %T", msg)))
		})
	})
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "t1"})
		env.Send(MTHello{ID: "t1"})
		env.Send(MTStop{ID: "t1"})
		env.AssertCompleted(t, d, "t1")
		env.AssertSent(t, "log", []string{"leave Initial", "enter Running", "leave Running", "enter Final on machine_test.MTStop"})
	})
}

// CompositeEventsInInitialState_Specs: with IncludeInitial, First and
// Second, each bound in Initial without a transition, complete Third in
// Initial.
func TestMassTransit_CompositeEventsInInitialState(t *testing.T) {
	m := machine.New[mtInstance]("initial")
	_, first, second := mtEvents(m)
	m.Initially(
		machine.When(first).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTFirst) error {
			c.Data.Log = append(c.Data.Log, "first")
			return nil
		}),
		machine.When(second).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTSecond) error {
			c.Data.Log = append(c.Data.Log, "second")
			return nil
		}))
	third := machine.CompositeWith(m, "Third", machine.IncludeInitial, first, second)
	m.Initially(machine.When(third).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ machine.CompositeRaised) error {
		return c.Send("done", MTComplete{ID: c.ID()})
	}).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTFirst{ID: "i1"})
		if got := mtState(t, env, d, "i1"); got != "Initial" {
			t.Fatalf("state %s, want Initial", got)
		}
		env.Send(MTSecond{ID: "i1"})
		env.AssertSent(t, "done", MTComplete{ID: "i1"})
		env.AssertCompleted(t, d, "i1")
	})
}

// CompositeEventOptions.RaiseOnce: a later arrival does not raise the
// composite again.
func TestMassTransit_CompositeEvent_RaiseOnce(t *testing.T) {
	if got := laterArrival(t, machine.RaiseOnce); got != 1 {
		t.Errorf("composite raised %d times, want 1", got)
	}
}

// A schedule's delay per call (MassTransit's Schedule with a delay
// provider) overrides the schedule's.
func TestMassTransit_Schedule_DelayPerCall(t *testing.T) {
	m := machine.New[mtInstance]("schedule")
	waiting := m.State("Waiting")
	start := machine.NewEvent(m, saga.By(func(e MTThing) string { return e.ID }))
	remind := machine.NewSchedule[mtInstance, MTHello](m, "Remind", time.Hour,
		func(c *saga.Context[mtInstance]) MTHello { return MTHello{ID: c.ID()} })
	m.Initially(machine.When(start).
		ScheduleAfter(remind, func(_ *saga.Context[mtInstance], e MTThing) time.Duration {
			if e.Condition {
				return 5 * time.Minute
			}
			return 0 // due at once
		}).
		TransitionTo(waiting))
	m.During(waiting, machine.When(remind.Received).Then(func(ctx context.Context, c *saga.Context[mtInstance], _ MTHello) error {
		return c.Send("done", c.Now().Format(time.TimeOnly))
	}).Finalize())
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTThing{ID: "s1", Condition: true})
		env.Advance(5*time.Minute - time.Second)
		env.AssertRunning(t, d, "s1")
		env.Advance(time.Second)
		env.AssertCompleted(t, d, "s1")
		env.Send(MTThing{ID: "s0"})
		env.Advance(0)
		env.AssertCompleted(t, d, "s0")
		env.AssertSent(t, "done", "00:05:00", "00:05:00")
	})
}

// Enter activities that transition in a circle fail the step, with the
// states named, instead of looping for ever.
func TestEnterActivitiesInACircleFailTheStep(t *testing.T) {
	m := machine.New[mtInstance]("circle")
	a, b := m.State("A"), m.State("B")
	start := machine.NewEvent(m, saga.By(func(e MTStart) string { return e.ID }))
	stop := machine.NewEvent(m, saga.By(func(e MTStop) string { return e.ID }))
	m.Initially(machine.When(start).TransitionTo(a))
	m.During(machine.States(a, b), machine.When(stop).Finalize())
	m.WhenEnter(a, func(x *machine.Activity[mtInstance, any]) { x.TransitionTo(b) })
	m.WhenEnter(b, func(x *machine.Activity[mtInstance, any]) { x.TransitionTo(a) })
	d := m.MustBuild()
	sagatest.Run(t, []saga.Saga{d}, func(t *testing.T, env *sagatest.Env) {
		env.Send(MTStart{ID: "c1"})
		dl := env.DeadLetters()
		if len(dl) != 1 || !strings.Contains(dl[0].DeadLetterDescription, "more than 100 transitions in one step") {
			t.Fatalf("dead letters %v, want the Start, failed for its transitions in a circle", dl)
		}
		if env.Exists(d, "c1") {
			t.Errorf("the failed step created the instance")
		}
	})
}
