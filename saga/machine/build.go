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
// than Final that accepts no event (ErrNoWayOut); an event bound twice in
// a state, or a message type bound to two events (ErrDuplicateEvent); a
// state that is not the machine's (ErrInvalidState).
func (m *Machine[S]) Build() (*saga.Definition[S], error) {
	if m.def != nil || m.err != nil {
		return m.def, m.err
	}
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
// Initial, or constituents of a composite bound there.
func (m *Machine[S]) starters() map[string]bool {
	s := make(map[string]bool)
	for k := range m.bound[Initial.name] {
		s[k] = true
		for _, c := range m.composites[k] {
			s[c] = true
		}
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

// edgesFrom lists the transitions out of st: each accepted event's
// edges, or a self-loop for one that changes no state.
func (m *Machine[S]) edgesFrom(st string) []edgeOf {
	var out []edgeOf
	for _, k := range m.accepts(st) {
		b := m.lookup(st, k)
		if len(b.edges) == 0 {
			out = append(out, edgeOf{event: k, edge: edge{to: st}})
		}
		for _, e := range b.edges {
			if e.to == "" {
				e.to = st
			}
			out = append(out, edgeOf{event: k, edge: e})
		}
	}
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
	if len(m.accepts(Initial.name)) == 0 {
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
		if len(m.accepts(st)) == 0 {
			return fmt.Errorf("%w: %s accepts no event (During, DuringAny)", ErrNoWayOut, st)
		}
	}
	return nil
}

func instanceOf[S any](c *saga.Context[S]) *Instance {
	return any(&c.Data).(instancer).machineInstance()
}

// handle raises event key with msg on the instance, then ends the step.
func (m *Machine[S]) handle(ctx context.Context, c *saga.Context[S], key string, msg any) error {
	in := instanceOf(c)
	st := in.CurrentState()
	if !m.known[st] {
		return saga.Permanent(fmt.Errorf("%w: machine %s, instance %.64q: state %q (removed or renamed? see saga.DataVersion)", ErrUnknownState, m.name, c.ID(), st))
	}
	r := &run{in: in, event: m.label(key), history: m.cfg.history}
	accepted, err := m.raise(ctx, c, r, st, key, msg)
	if err != nil {
		return err
	}
	if !accepted && m.cfg.unhandled == UnhandledDeadLetter {
		return saga.Permanent(fmt.Errorf("%w: machine %s, instance %.64q: %s in state %s", ErrUnhandledEvent, m.name, c.ID(), m.label(key), st))
	}
	return m.finish(ctx, c, in)
}

// late raises a request's Late event where it is bound; elsewhere the
// response is dropped.
func (m *Machine[S]) late(ctx context.Context, c *saga.Context[S], in *Instance, key string, msg any) error {
	st := in.CurrentState()
	if b := m.lookup(st, key); m.known[st] && b != nil && !b.ignore {
		if err := b.run(ctx, c, &run{in: in, event: m.label(key), history: m.cfg.history}, msg); err != nil {
			return err
		}
	}
	return m.finish(ctx, c, in)
}

// raise runs the activity of event key in state st, and records it for
// the composites st accepts; it reports whether st accepts it.
func (m *Machine[S]) raise(ctx context.Context, c *saga.Context[S], r *run, st, key string, msg any) (bool, error) {
	b := m.lookup(st, key)
	accepted := b != nil
	if b != nil && !b.ignore {
		if err := b.run(ctx, c, r, msg); err != nil {
			return true, err
		}
	}
	for _, ck := range m.compositeOf[key] {
		cb := m.lookup(st, ck)
		if cb == nil {
			continue
		}
		accepted = true
		arrived := r.in.Machine.Arrived[ck]
		if !slices.Contains(arrived, key) {
			arrived = append(arrived, key)
		}
		if len(arrived) < len(m.composites[ck]) {
			if r.in.Machine.Arrived == nil {
				r.in.Machine.Arrived = make(map[string][]string)
			}
			r.in.Machine.Arrived[ck] = arrived
			continue
		}
		delete(r.in.Machine.Arrived, ck)
		if !cb.ignore {
			cr := &run{in: r.in, event: m.label(ck), history: r.history}
			if err := cb.run(ctx, c, cr, CompositeRaised{Name: m.label(ck)}); err != nil {
				return true, err
			}
		}
	}
	return accepted, nil
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
