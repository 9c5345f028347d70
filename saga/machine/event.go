package machine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jetsaga/jetsaga/saga"
)

type eventKind int

const (
	kindMessage eventKind = iota + 1
	kindScheduled
	kindCompleted
	kindFaulted
	kindExpired
	kindLate
	kindComposite
)

type eventInfo[S any] struct {
	key, label string
	kind       eventKind
	msgName    string // the message type a step waits for (Expect), if any
	// register adds the event's saga route (kindMessage); start for an
	// event bound in Initial.
	register func(d *saga.Definition[S], start bool)
}

// Event is an event of a machine with data S, carried by messages of
// type M. Declare one with NewEvent (a message), Composite, or take it
// from a Schedule or a Request.
type Event[S, M any] struct{ key string }

// Name returns the event's name, as diagrams and errors show it.
func (e Event[S, M]) Name() string { return e.key }

func (e Event[S, M]) eventKey() string { return e.key }

// AnyEvent is an event of any message type, as Composite takes them.
type AnyEvent interface{ eventKey() string }

func (m *Machine[S]) addEvent(e *eventInfo[S]) {
	if _, dup := m.events[e.key]; dup {
		m.fail(fmt.Errorf("%w: %s declared twice", ErrDuplicateEvent, e.label))
		return
	}
	m.events[e.key] = e
	m.order = append(m.order, e.key)
}

func (m *Machine[S]) claimType(name, key string) {
	if other, dup := m.types[name]; dup {
		m.fail(fmt.Errorf("%w: message type %s is bound to %s and %s", ErrDuplicateEvent, name, m.label(other), m.label(key)))
		return
	}
	m.types[name] = key
}

// NewEvent declares the event that messages of type M are, correlated to
// their instance by find, as saga.StartedBy and saga.Handles do. An event
// bound in Initial starts instances (saga.StartedBy); any other is
// handled by existing ones (saga.Handles, so a message for a missing
// instance follows the saga's NotFoundPolicy). A message type is one
// event of a machine.
func NewEvent[S, M any](m *Machine[S], find saga.Finder[M]) Event[S, M] {
	name := saga.MessageName[M]()
	key := name
	m.claimType(name, key)
	m.addEvent(&eventInfo[S]{
		key: key, label: shortName(name), kind: kindMessage, msgName: name,
		register: func(d *saga.Definition[S], start bool) {
			h := func(ctx context.Context, c *saga.Context[S], msg M) error { return m.handle(ctx, c, key, msg) }
			if start {
				saga.StartedBy(d, find, h)
			} else {
				saga.Handles(d, find, h)
			}
		},
	})
	return Event[S, M]{key: key}
}

// CompositeRaised is the message of a composite event (Composite): its
// name.
type CompositeRaised struct {
	Name string
}

// CompositeOptions change how a composite event records and raises
// (CompositeWith), as MassTransit's CompositeEventOptions do.
type CompositeOptions int

const (
	// IncludeInitial records the constituents' arrivals in Initial too.
	// A composite bound in Initial (Initially(When(composite))) records
	// there without it.
	IncludeInitial CompositeOptions = 1 << iota
	// IncludeFinal records the constituents' arrivals in Final too. An
	// instance that enters Final completes, so no message of it arrives
	// there: the option is accepted for machines ported from MassTransit
	// and changes nothing.
	IncludeFinal
	// RaiseOnce raises the composite at most once per instance: an
	// arrival of a constituent already recorded does nothing.
	RaiseOnce
)

type compositeInfo struct {
	opts CompositeOptions
	seq  int // declaration order of its records
}

// Composite declares an event raised once each of events has arrived, in
// any order, as MassTransit's CompositeEvent: each constituent's arrival
// is recorded in the data (Status.Arrived) in every state but Initial
// and Final — whether or not the state binds the constituent or the
// composite — and the arrival that completes the set raises the
// composite in the state the instance is then in, where it runs the
// composite's bindings or, if the state has none, follows the unhandled
// policy. The record is kept: each later arrival of a constituent raises
// the composite again (see RaiseOnce).
//
// The record is a binding of each constituent in each of those states,
// run in declaration order with the state's own bindings of it: declared
// before them (the usual place, with the events), it runs first, so the
// composite is raised before the completing constituent's own activity,
// in the state it arrived in; declared after a During that transitions
// on a constituent, after that transition. A constituent recorded in a
// state is accepted there, never unhandled. A composite bound in Initial
// records there too (see IncludeInitial).
func Composite[S any](m *Machine[S], name string, events ...AnyEvent) Event[S, CompositeRaised] {
	return CompositeWith(m, name, 0, events...)
}

// CompositeWith is Composite with options (IncludeInitial, IncludeFinal,
// RaiseOnce, or-ed together).
func CompositeWith[S any](m *Machine[S], name string, opts CompositeOptions, events ...AnyEvent) Event[S, CompositeRaised] {
	key := "composite/" + name
	if !namePattern.MatchString(name) {
		m.fail(fmt.Errorf("%w: composite event name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidMachine, name))
	}
	if len(events) < 2 {
		m.fail(fmt.Errorf("%w: composite event %s needs two events or more", ErrInvalidMachine, name))
	}
	if opts&^(IncludeInitial|IncludeFinal|RaiseOnce) != 0 {
		m.fail(fmt.Errorf("%w: composite event %s: unknown options %#x", ErrInvalidMachine, name, int(opts)))
	}
	m.addEvent(&eventInfo[S]{key: key, label: name, kind: kindComposite})
	m.seq++
	m.compOpts[key] = compositeInfo{opts: opts, seq: m.seq}
	for _, e := range events {
		k := e.eventKey()
		if _, ok := m.events[k]; !ok {
			m.fail(fmt.Errorf("%w: composite event %s: %s is not one of this machine's events", ErrInvalidMachine, name, k))
			continue
		}
		if slices.Contains(m.composites[key], k) {
			continue
		}
		m.composites[key] = append(m.composites[key], k)
		m.compositeOf[k] = append(m.compositeOf[k], key)
	}
	return Event[S, CompositeRaised]{key: key}
}

// recorder is composite ck's binding of its constituent k: it records
// k's arrival and, once all have arrived, raises ck.
func (m *Machine[S]) recorder(ck, k string) *binding[S] {
	info := m.compOpts[ck]
	return &binding[S]{event: k, seq: info.seq, recorder: true,
		run: func(ctx context.Context, c *saga.Context[S], r *run[S], _ any) error {
			st := &r.in.Machine
			arrived := st.Arrived[ck]
			if slices.Contains(arrived, k) {
				if info.opts&RaiseOnce != 0 {
					return nil
				}
			} else {
				if st.Arrived == nil {
					st.Arrived = make(map[string][]string)
				}
				arrived = append(arrived, k)
				st.Arrived[ck] = arrived
			}
			if len(arrived) < len(m.composites[ck]) {
				return nil
			}
			return m.raiseStrict(ctx, c, r, ck, CompositeRaised{Name: m.label(ck)})
		}}
}

func shortName(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 && i < len(name)-1 {
		return name[i+1:]
	}
	return name
}
