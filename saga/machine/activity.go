package machine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/saga"
)

// Binding is an event's behaviour in a state: what When and Ignore
// return, and Initially, During and DuringAny take.
type Binding[S any] interface{ binding() *binding[S] }

type binding[S any] struct {
	event    string
	seq      int  // declaration order among a state's bindings of the event
	ignore   bool // Ignore: accepted, nothing done (where match holds)
	recorder bool // a composite's record of a constituent, not the user's
	// match is an Ignore's filter; nil matches every message.
	match func(c *saga.Context[S], m any) bool
	run   func(ctx context.Context, c *saga.Context[S], r *run[S], m any) error
	edges []edge
}

// edge is a transition an activity may take, for checks and diagrams.
type edge struct {
	to    string
	guard string
}

// run is the machine's view of one raised event in a step.
type run[S any] struct {
	m     *Machine[S]
	in    *Instance
	event string // the label of the event being raised, for the history
	moves int    // transitions so far in the step
}

type stepFunc[S, M any] func(ctx context.Context, c *saga.Context[S], r *run[S], m M) error

// step is an activity's step: an action (do), or a Catch.
type step[S, M any] struct {
	do    stepFunc[S, M]
	catch *catcher[S, M]
}

type catcher[S, M any] struct {
	match func(err error) bool
	steps []step[S, M]
}

// Activity is what an event does in the states it is bound in: its
// steps, run in order within the saga's step, so that they commit
// together (the data, the state, the messages and timeouts) or not at
// all. Build one with When, and chain its steps.
type Activity[S, M any] struct {
	event      string
	ignore     bool
	filters    []func(c *saga.Context[S], m M) bool
	steps      []step[S, M]
	edges      []edge // transitions of the steps
	catchEdges []edge // transitions of the Catch activities
}

// When starts the activity of event e. With filters (MassTransit's
// When(event, filter)), the activity runs only for a message for which
// every filter holds; for another, the event is still accepted in the
// state and nothing is done — other bindings of e in the state (During,
// DuringAny) run as they would. Bind e more than once in a state, each
// with its filter, to choose among activities.
func When[S, M any](e Event[S, M], filters ...func(c *saga.Context[S], m M) bool) *Activity[S, M] {
	return &Activity[S, M]{event: e.key, filters: filters}
}

// Ignore binds e so that it is accepted and does nothing: the message is
// completed without a change to the instance, instead of following the
// unhandled policy. With filters (MassTransit's Ignore(event, filter)),
// only a message for which every filter holds is ignored; another
// follows the unhandled policy. An Ignore applies only in a state where
// e has no When binding (During or DuringAny): where it has one, that
// runs.
func Ignore[S, M any](e Event[S, M], filters ...func(c *saga.Context[S], m M) bool) *Activity[S, M] {
	return &Activity[S, M]{event: e.key, ignore: true, filters: filters}
}

// Then adds an action: a saga handler, which sees the data (c.Data), the
// message and the saga Context, so it may Send, Reply, Publish or request
// timeouts. Its error fails the step as a saga handler's does — nothing
// the step did commits, the state included — unless a Catch after it
// handles the error.
func (a *Activity[S, M]) Then(h saga.Handler[S, M]) *Activity[S, M] {
	return a.add(func(ctx context.Context, c *saga.Context[S], _ *run[S], m M) error { return h(ctx, c, m) })
}

func (a *Activity[S, M]) add(f stepFunc[S, M]) *Activity[S, M] {
	a.steps = append(a.steps, step[S, M]{do: f})
	return a
}

// If runs the steps then adds to a fresh activity when cond holds.
func (a *Activity[S, M]) If(cond func(c *saga.Context[S], m M) bool, then func(a *Activity[S, M])) *Activity[S, M] {
	return a.IfElse(cond, then, nil)
}

// IfElse runs the steps then adds when cond holds, and those els adds
// otherwise (els may be nil).
func (a *Activity[S, M]) IfElse(cond func(c *saga.Context[S], m M) bool, then, els func(a *Activity[S, M])) *Activity[S, M] {
	yes, no := a.sub(then), a.sub(els)
	a.branchEdges("if", yes)
	a.branchEdges("else", no)
	return a.add(func(ctx context.Context, c *saga.Context[S], r *run[S], m M) error {
		if cond(c, m) {
			return runSteps(ctx, c, r, m, yes.steps)
		}
		return runSteps(ctx, c, r, m, no.steps)
	})
}

// sub returns the activity fill adds steps to (fill may be nil).
func (a *Activity[S, M]) sub(fill func(a *Activity[S, M])) *Activity[S, M] {
	s := &Activity[S, M]{event: a.event}
	if fill != nil {
		fill(s)
	}
	return s
}

// branchEdges adds a branch's edges under guard g; a branch that
// transitions nowhere is a self-loop (to "") under g.
func (a *Activity[S, M]) branchEdges(g string, b *Activity[S, M]) {
	if len(b.edges) == 0 {
		a.edges = append(a.edges, edge{guard: g})
	}
	for _, e := range b.edges {
		a.edges = append(a.edges, edge{to: e.to, guard: joinGuard(g, e.guard)})
	}
	for _, e := range b.catchEdges {
		a.catchEdges = append(a.catchEdges, edge{to: e.to, guard: joinGuard(g, e.guard)})
	}
}

func joinGuard(g, inner string) string {
	if inner == "" {
		return g
	}
	return g + " " + inner
}

// TransitionTo moves the instance to state s: the WhenLeave activities
// of the state it leaves run, then those of WhenEnter of s. A transition
// to the state the instance is in does nothing (no leave, no enter, no
// history), as in MassTransit. Steps after it run in s; the instance
// waits in the state it is in when the activity ends.
func (a *Activity[S, M]) TransitionTo(s State) *Activity[S, M] {
	a.edges = append(a.edges, edge{to: s.name})
	return a.add(func(ctx context.Context, c *saga.Context[S], r *run[S], m M) error {
		return r.m.transition(ctx, c, r, s.name, m)
	})
}

// Finalize moves the instance to Final: after the activity, the Finally
// actions run and the instance completes (saga.Context.MarkComplete:
// its pending timeouts are cancelled and its state removed).
func (a *Activity[S, M]) Finalize() *Activity[S, M] { return a.TransitionTo(Final) }

// Schedule schedules s's timeout (see NewSchedule) after the schedule's
// delay, replacing the one scheduled before, if it is still pending:
// that one is cancelled, and never handled.
func (a *Activity[S, M]) Schedule(s Schedulable[S]) *Activity[S, M] {
	sc := s.scheduleOf()
	return a.add(func(_ context.Context, c *saga.Context[S], r *run[S], _ M) error {
		return sc.start(c, r.in, sc.delay)
	})
}

// ScheduleAfter is Schedule with the delay delay returns for this
// message, instead of the schedule's (MassTransit's Schedule with a
// delay provider). A delay of zero or less makes the timeout due at
// once.
func (a *Activity[S, M]) ScheduleAfter(s Schedulable[S], delay func(c *saga.Context[S], m M) time.Duration) *Activity[S, M] {
	sc := s.scheduleOf()
	return a.add(func(_ context.Context, c *saga.Context[S], r *run[S], m M) error {
		return sc.start(c, r.in, delay(c, m))
	})
}

// Unschedule cancels s's timeout if it is pending: it is never handled.
func (a *Activity[S, M]) Unschedule(s Schedulable[S]) *Activity[S, M] {
	sc := s.scheduleOf()
	return a.add(func(_ context.Context, c *saga.Context[S], r *run[S], _ M) error {
		sc.stop(c, r.in)
		return nil
	})
}

// Request sends r's request (see NewRequest) and starts its timeout, if
// it has one. Exactly one of r.Completed, r.Faulted and r.TimeoutExpired
// is then raised for it. A request of the same name still pending is replaced:
// its timeout is cancelled, and its response, if one comes, is late.
func (a *Activity[S, M]) Request(r Requestable[S]) *Activity[S, M] {
	rq := r.requestOf()
	return a.add(func(_ context.Context, c *saga.Context[S], rn *run[S], _ M) error {
		return rq.send(c, rn.in)
	})
}

// Catch handles an error of a step before it in the activity (an
// action's, a Request's, a WhenEnter or WhenLeave activity's), as
// MassTransit's Catch<T>: the first Catch after the failed step whose
// match reports true for the error runs the steps then adds — typically
// a TransitionTo a fault state, or compensating actions — and the
// activity goes on with the steps after that Catch; the steps between
// the failed one and the Catch do not run. The step then commits as any
// other: what the steps before the failure did (data, messages,
// timeouts), the Catch's steps, and the failed action's own effects up
// to its error. In then's actions, CaughtError(ctx) returns the error.
//
// match nil catches every error (Catch<Exception>); ErrorIs and ErrorAs
// make one for an error or an error type. An error no Catch matches
// fails the step as before, and so does an error of a Catch's own steps
// (a later Catch does not handle it), and any error once the step's
// context is done (the dispatcher stopping). A Catch is skipped when no
// step before it failed.
func (a *Activity[S, M]) Catch(match func(err error) bool, then func(a *Activity[S, M])) *Activity[S, M] {
	x := a.sub(then)
	if match == nil {
		match = func(error) bool { return true }
	}
	for _, e := range slices.Concat(x.edges, x.catchEdges) {
		if e.to != "" {
			a.catchEdges = append(a.catchEdges, edge{to: e.to, guard: joinGuard("catch", e.guard)})
		}
	}
	a.steps = append(a.steps, step[S, M]{catch: &catcher[S, M]{match: match, steps: x.steps}})
	return a
}

// ErrorIs returns a match for Catch: errors.Is(err, target).
func ErrorIs(target error) func(err error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

// ErrorAs returns a match for Catch: an error in err's chain is an E
// (errors.As), as Catch<T> catches an exception of type T.
func ErrorAs[E error]() func(err error) bool {
	return func(err error) bool {
		var e E
		return errors.As(err, &e)
	}
}

type caughtKey struct{}

// CaughtError returns, in a Catch's actions, the error it caught; nil
// elsewhere.
func CaughtError(ctx context.Context) error {
	err, _ := ctx.Value(caughtKey{}).(error)
	return err
}

// runSteps runs steps in order; a failed step's error goes to the first
// Catch after it that matches, and the steps after that Catch run.
func runSteps[S, M any](ctx context.Context, c *saga.Context[S], r *run[S], m M, steps []step[S, M]) error {
	for i := 0; i < len(steps); i++ {
		if steps[i].do == nil {
			continue // a Catch, and nothing failed
		}
		err := steps[i].do(ctx, c, r, m)
		if err == nil {
			continue
		}
		j := i + 1
		for ; j < len(steps); j++ {
			if x := steps[j].catch; x != nil && x.match(err) {
				break
			}
		}
		if j == len(steps) || ctx.Err() != nil {
			return err
		}
		if err := runSteps(context.WithValue(ctx, caughtKey{}, err), c, r, m, steps[j].catch.steps); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (a *Activity[S, M]) binding() *binding[S] {
	b := &binding[S]{event: a.event, ignore: a.ignore}
	b.edges = a.edges
	// A transition outside any branch follows the branches: their
	// self-loops do not happen.
	if slices.ContainsFunc(a.edges, func(e edge) bool { return e.guard == "" }) {
		b.edges = slices.DeleteFunc(slices.Clone(a.edges), func(e edge) bool { return e.to == "" })
	}
	if len(b.edges) == 0 {
		b.edges = []edge{{}} // stays in its state
	}
	b.edges = slices.Concat(b.edges, a.catchEdges)
	if len(a.filters) > 0 {
		for i, e := range b.edges {
			b.edges[i].guard = joinGuard("when", e.guard)
		}
	}
	filters, steps := a.filters, a.steps
	pass := func(c *saga.Context[S], msg M) bool {
		for _, f := range filters {
			if !f(c, msg) {
				return false
			}
		}
		return true
	}
	if a.ignore {
		if len(filters) > 0 {
			b.match = func(c *saga.Context[S], m any) bool {
				msg, _ := m.(M)
				return pass(c, msg)
			}
		}
		return b
	}
	b.run = func(ctx context.Context, c *saga.Context[S], r *run[S], m any) error {
		msg, _ := m.(M)
		if len(filters) > 0 && !pass(c, msg) {
			return nil
		}
		return runSteps(ctx, c, r, msg, steps)
	}
	return b
}
