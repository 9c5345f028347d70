package machine

import (
	"context"
	"fmt"
	"slices"

	"github.com/jetsaga/jetsaga/saga"
)

// Build checks the machine and compiles it into a saga definition, run by
// the same dispatcher (saga.WithSagas), sagatest and Explore as any saga.
// Calls after the first return the same definition (or error):
// declare every state, event and binding before the first Build.
//
// Build returns an error matching ErrInvalidMachine and
// saga.ErrInvalidDefinition, and the sentinel of the first problem: the
// data type does not embed Instance (ErrNoInstance); a state no
// transition from Initial reaches (ErrUnreachableState); a state other
// than Final that accepts no event and leaves by no WhenEnter activity
// (ErrNoWayOut); an event declared twice, or a message type bound to two
// events (ErrDuplicateEvent); a state that is not the machine's, or
// WhenLeave(Final) (ErrInvalidState); a WhenLeave activity that
// transitions, or a composite with unknown options (ErrInvalidMachine).
func (m *Machine[S]) Build() (*saga.Definition[S], error) {
	if m.def != nil || m.err != nil {
		return m.def, m.err
	}
	m.buildTable()
	if err := m.check(); err != nil {
		m.fail(err)
		return nil, m.err
	}
	d := saga.Define[S](m.name, append(slices.Clip(m.cfg.defOpts), saga.CheckLiveness())...)
	starters := m.starters()
	for _, k := range m.order {
		if e := m.events[k]; e.register != nil {
			e.register(d, starters[k])
		}
	}
	for _, r := range m.registrars {
		r(d)
	}
	if len(m.requests) > 0 {
		m.registerRequestRoutes(d)
	}
	m.expects = make(map[string][]string)
	for _, st := range m.allStates() {
		m.expects[st] = m.waitsFor(st)
	}
	saga.DescribeStates(d, m.Mermaid(), m.stateGraph()) // diagram.go
	m.def = d
	return d, nil
}

// MustBuild is Build for a machine declared at program start: it panics
// on error.
func (m *Machine[S]) MustBuild() *saga.Definition[S] {
	d, err := m.Build()
	if err != nil {
		panic(err)
	}
	return d
}

// starters returns the message events that start instances: bound in
// Initial (When, Ignore), or recorded there for a composite.
func (m *Machine[S]) starters() map[string]bool {
	s := make(map[string]bool)
	for k := range m.table[Initial.name] {
		s[k] = true
	}
	return s
}

// waitsFor lists the message types an instance in st waits for: those
// of the events it accepts, as saga.Context.Expect takes them (timeouts
// are pending timeouts, which liveness counts by themselves).
func (m *Machine[S]) waitsFor(st string) []string {
	var names []string
	add := func(k string) {
		if n := m.events[k].msgName; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	for _, k := range m.accepts(st) {
		add(k)
		for _, c := range m.composites[k] {
			add(c)
		}
	}
	return names
}

// edgesFrom lists the transitions out of st: those of each accepted
// event's bindings (a self-loop for one that changes no state), then
// those of st's WhenEnter activities, each once.
func (m *Machine[S]) edgesFrom(st string) []edgeOf {
	var out []edgeOf
	add := func(key string, bs []*binding[S], loops bool) {
		for _, b := range bs {
			if b.ignore || b.recorder {
				continue
			}
			for _, e := range b.edges {
				if e.to == "" {
					if !loops {
						continue
					}
					e.to = st
				}
				if eo := (edgeOf{event: key, edge: e}); !slices.Contains(out, eo) {
					out = append(out, eo)
				}
			}
		}
	}
	for _, k := range m.accepts(st) {
		add(k, m.lookup(st, k).acts, true)
	}
	add("enter/"+st, m.enter[st], false)
	return out
}

type edgeOf struct {
	event string
	edge
}

func (m *Machine[S]) check() error {
	for _, st := range m.allStates() {
		for _, e := range m.edgesFrom(st) {
			if !m.known[e.to] {
				return fmt.Errorf("%w: %s in %s goes to %q, not a state of the machine", ErrInvalidState, m.label(e.event), st, e.to)
			}
		}
	}
	if len(m.accepts(Initial.name)) == 0 && len(m.table[Initial.name]) == 0 {
		return fmt.Errorf("%w: Initial accepts no event (Initially)", ErrNoWayOut)
	}
	reached := map[string]bool{Initial.name: true}
	queue := []string{Initial.name}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		for _, e := range m.edgesFrom(st) {
			if !reached[e.to] {
				reached[e.to] = true
				queue = append(queue, e.to)
			}
		}
	}
	for _, st := range m.states {
		if !reached[st] {
			return fmt.Errorf("%w: %s: no transition from Initial leads to it", ErrUnreachableState, st)
		}
		if len(m.accepts(st)) == 0 && !slices.ContainsFunc(m.edgesFrom(st), func(e edgeOf) bool { return e.to != st }) {
			return fmt.Errorf("%w: %s accepts no event (During, DuringAny)", ErrNoWayOut, st)
		}
	}
	return nil
}

func instanceOf[S any](c *saga.Context[S]) *Instance {
	return any(&c.Data).(instancer).machineInstance()
}

// maxMoves bounds the transitions of one step: WhenEnter activities that
// transition in a circle would not end.
const maxMoves = 100

// handle raises event key with msg on the instance, then ends the step.
func (m *Machine[S]) handle(ctx context.Context, c *saga.Context[S], key string, msg any) error {
	in := instanceOf(c)
	st := in.CurrentState()
	if !m.known[st] {
		return saga.Permanent(fmt.Errorf("%w: machine %s, instance %.64q: state %q (removed or renamed? see saga.DataVersion)", ErrUnknownState, m.name, c.ID(), st))
	}
	if err := m.raiseStrict(ctx, c, &run[S]{m: m, in: in}, key, msg); err != nil {
		return err
	}
	return m.finish(ctx, c, in)
}

// late raises a request's Late event where it is bound; elsewhere the
// response is dropped.
func (m *Machine[S]) late(ctx context.Context, c *saga.Context[S], in *Instance, key string, msg any) error {
	if m.known[in.CurrentState()] {
		if _, err := m.raise(ctx, c, &run[S]{m: m, in: in}, key, msg); err != nil {
			return err
		}
	}
	return m.finish(ctx, c, in)
}

// raiseStrict raises event key, and applies the unhandled policy where
// the current state does not accept it.
func (m *Machine[S]) raiseStrict(ctx context.Context, c *saga.Context[S], r *run[S], key string, msg any) error {
	accepted, err := m.raise(ctx, c, r, key, msg)
	if err == nil && !accepted && m.cfg.unhandled == UnhandledDeadLetter {
		return saga.Permanent(fmt.Errorf("%w: machine %s, instance %.64q: %s in state %s", ErrUnhandledEvent, m.name, c.ID(), m.label(key), r.in.CurrentState()))
	}
	return err
}

// raise runs the bindings of event key in the instance's current state,
// in order, under r (whose event it names meanwhile); it reports whether
// the state accepts the event: a binding runs, or an Ignore's filter
// holds.
func (m *Machine[S]) raise(ctx context.Context, c *saga.Context[S], r *run[S], key string, msg any) (bool, error) {
	sl := m.lookup(r.in.CurrentState(), key)
	if sl == nil {
		return false, nil
	}
	if len(sl.acts) == 0 {
		for _, b := range sl.ignores {
			if b.match == nil || b.match(c, msg) {
				return true, nil
			}
		}
		return false, nil
	}
	outer := r.event
	r.event = m.label(key)
	defer func() { r.event = outer }()
	for _, b := range sl.acts {
		if err := b.run(ctx, c, r, msg); err != nil {
			return true, err
		}
	}
	return true, nil
}

// transition moves the instance to state to, with the leave and enter
// activities; a transition to the current state does nothing.
func (m *Machine[S]) transition(ctx context.Context, c *saga.Context[S], r *run[S], to string, msg any) error {
	from := r.in.CurrentState()
	if from == to {
		return nil
	}
	if r.moves++; r.moves > maxMoves {
		return saga.Permanent(fmt.Errorf("%w: machine %s, instance %.64q: more than %d transitions in one step (%s to %s): WhenEnter activities in a circle?", ErrInvalidMachine, m.name, c.ID(), maxMoves, from, to))
	}
	for _, b := range m.leave[from] {
		if err := b.run(ctx, c, r, msg); err != nil {
			return err
		}
	}
	r.in.Machine.State = to
	if n := m.cfg.history; n > 0 {
		h := append(r.in.Machine.History, Transition{From: from, To: to, Event: r.event, At: c.Now()})
		if len(h) > n {
			h = append(h[:0:0], h[len(h)-n:]...)
		}
		r.in.Machine.History = h
	}
	for _, b := range m.enter[to] {
		if err := b.run(ctx, c, r, msg); err != nil {
			return err
		}
	}
	return nil
}

// finish ends a step: the Finally actions and completion in Final, else
// the expectations of the current state.
func (m *Machine[S]) finish(ctx context.Context, c *saga.Context[S], in *Instance) error {
	st := in.CurrentState()
	if st == Final.name {
		for _, f := range m.finally {
			if err := f(ctx, c); err != nil {
				return err
			}
		}
		c.MarkComplete()
		return nil
	}
	if names := m.expects[st]; len(names) > 0 {
		return c.Expect(names...)
	}
	return nil
}
