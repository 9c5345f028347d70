package machine

import (
	"context"
	"slices"

	"github.com/jetsaga/jetsaga/saga"
)

// Binding is an event's behaviour in a state: what When and Ignore
// return, and Initially, During and DuringAny take.
type Binding[S any] interface{ binding() *binding[S] }

type binding[S any] struct {
	event  string
	ignore bool
	run    func(ctx context.Context, c *saga.Context[S], r *run, m any) error
	edges  []edge
}

// edge is a transition an activity may take, for checks and diagrams.
type edge struct {
	to    string
	guard string
}

// run is the machine's view of one step.
type run struct {
	in      *Instance
	event   string // the event's label, for the history
	history int
}

type stepFunc[S, M any] func(ctx context.Context, c *saga.Context[S], r *run, m M) error

// Activity is what an event does in the states it is bound in: its
// steps, run in order within the saga's step, so that they commit
// together (the data, the state, the messages and timeouts) or not at
// all. Build one with When, and chain its steps.
type Activity[S, M any] struct {
	event  string
	ignore bool
	steps  []stepFunc[S, M]
	edges  []edge
}

// When starts the activity of event e.
func When[S, M any](e Event[S, M]) *Activity[S, M] {
	return &Activity[S, M]{event: e.key}
}

// Ignore binds e so that it is accepted and does nothing: the message is
// completed without a change to the instance, instead of following the
// unhandled policy.
func Ignore[S, M any](e Event[S, M]) *Activity[S, M] {
	return &Activity[S, M]{event: e.key, ignore: true}
}

// Then adds an action: a saga handler, which sees the data (c.Data), the
// message and the saga Context, so it may Send, Reply, Publish or request
// timeouts. Its error fails the step as a saga handler's does: nothing
// the step did commits, the state included.
func (a *Activity[S, M]) Then(h saga.Handler[S, M]) *Activity[S, M] {
	a.steps = append(a.steps, func(ctx context.Context, c *saga.Context[S], _ *run, m M) error { return h(ctx, c, m) })
	return a
}

// If runs the steps then adds to a fresh activity when cond holds.
func (a *Activity[S, M]) If(cond func(c *saga.Context[S], m M) bool, then func(a *Activity[S, M])) *Activity[S, M] {
	return a.IfElse(cond, then, nil)
}

// IfElse runs the steps then adds when cond holds, and those els adds
// otherwise (els may be nil).
func (a *Activity[S, M]) IfElse(cond func(c *saga.Context[S], m M) bool, then, els func(a *Activity[S, M])) *Activity[S, M] {
	yes, no := &Activity[S, M]{event: a.event}, &Activity[S, M]{event: a.event}
	if then != nil {
		then(yes)
	}
	if els != nil {
		els(no)
	}
	a.branchEdges("if", yes.edges)
	a.branchEdges("else", no.edges)
	a.steps = append(a.steps, func(ctx context.Context, c *saga.Context[S], r *run, m M) error {
		steps := no.steps
		if cond(c, m) {
			steps = yes.steps
		}
		for _, s := range steps {
			if err := s(ctx, c, r, m); err != nil {
				return err
			}
		}
		return nil
	})
	return a
}

// branchEdges adds a branch's edges under guard g; a branch that
// transitions nowhere is a self-loop (to "") under g.
func (a *Activity[S, M]) branchEdges(g string, edges []edge) {
	if len(edges) == 0 {
		a.edges = append(a.edges, edge{guard: g})
	}
	for _, e := range edges {
		a.edges = append(a.edges, edge{to: e.to, guard: joinGuard(g, e.guard)})
	}
}

func joinGuard(g, inner string) string {
	if inner == "" {
		return g
	}
	return g + " " + inner
}

// TransitionTo moves the instance to state s. Steps after it run in s;
// the instance waits in the state it is in when the activity ends.
func (a *Activity[S, M]) TransitionTo(s State) *Activity[S, M] {
	a.edges = append(a.edges, edge{to: s.name})
	a.steps = append(a.steps, func(_ context.Context, c *saga.Context[S], r *run, _ M) error {
		transition(c, r, s.name)
		return nil
	})
	return a
}

// Finalize moves the instance to Final: after the activity, the Finally
// actions run and the instance completes (saga.Context.MarkComplete:
// its pending timeouts are cancelled and its state removed).
func (a *Activity[S, M]) Finalize() *Activity[S, M] { return a.TransitionTo(Final) }

func transition[S any](c *saga.Context[S], r *run, to string) {
	from := r.in.CurrentState()
	r.in.Machine.State = to
	if r.history > 0 {
		h := append(r.in.Machine.History, Transition{From: from, To: to, Event: r.event, At: c.Now()})
		if len(h) > r.history {
			h = append(h[:0:0], h[len(h)-r.history:]...)
		}
		r.in.Machine.History = h
	}
}

// Schedule schedules s's timeout (see NewSchedule), replacing the one
// scheduled before, if it is still pending: that one is cancelled, and
// never handled.
func (a *Activity[S, M]) Schedule(s Schedulable[S]) *Activity[S, M] {
	sc := s.scheduleOf()
	a.steps = append(a.steps, func(_ context.Context, c *saga.Context[S], r *run, _ M) error {
		return sc.start(c, r.in)
	})
	return a
}

// Unschedule cancels s's timeout if it is pending: it is never handled.
func (a *Activity[S, M]) Unschedule(s Schedulable[S]) *Activity[S, M] {
	sc := s.scheduleOf()
	a.steps = append(a.steps, func(_ context.Context, c *saga.Context[S], r *run, _ M) error {
		sc.stop(c, r.in)
		return nil
	})
	return a
}

// Request sends r's request (see NewRequest) and starts its timeout.
// Exactly one of r.Completed, r.Faulted and r.TimeoutExpired is then
// raised for it. A request of the same name still pending is replaced:
// its timeout is cancelled, and its response, if one comes, is late.
func (a *Activity[S, M]) Request(r Requestable[S]) *Activity[S, M] {
	rq := r.requestOf()
	a.steps = append(a.steps, func(_ context.Context, c *saga.Context[S], rn *run, _ M) error {
		return rq.send(c, rn.in)
	})
	return a
}

func (a *Activity[S, M]) binding() *binding[S] {
	b := &binding[S]{event: a.event, ignore: a.ignore, edges: a.edges}
	// A transition outside any branch follows the branches: their
	// self-loops do not happen.
	if slices.ContainsFunc(a.edges, func(e edge) bool { return e.guard == "" }) {
		b.edges = slices.DeleteFunc(slices.Clone(a.edges), func(e edge) bool { return e.to == "" })
	}
	steps := a.steps
	b.run = func(ctx context.Context, c *saga.Context[S], r *run, m any) error {
		msg, _ := m.(M)
		for _, s := range steps {
			if err := s(ctx, c, r, msg); err != nil {
				return err
			}
		}
		return nil
	}
	return b
}
