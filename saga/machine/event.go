package machine

import (
	"context"
	"fmt"
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

// Composite declares an event raised once each of events has arrived, in
// any order, while the instance is in a state that accepts the composite
// (When(composite) in During or DuringAny): each arrival in such a state
// is recorded in the data (Status.Arrived), even where the constituent
// itself is not bound, and the arrival that completes the set raises the
// composite, after the constituent's own activity, with the binding of
// the state the constituent arrived in. The record of arrivals is then
// cleared. A constituent that arrives in a state that accepts neither it
// nor the composite follows the unhandled policy.
func Composite[S any](m *Machine[S], name string, events ...AnyEvent) Event[S, CompositeRaised] {
	key := "composite/" + name
	if !namePattern.MatchString(name) {
		m.fail(fmt.Errorf("%w: composite event name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidMachine, name))
	}
	if len(events) < 2 {
		m.fail(fmt.Errorf("%w: composite event %s needs two events or more", ErrInvalidMachine, name))
	}
	m.addEvent(&eventInfo[S]{key: key, label: name, kind: kindComposite})
	for _, e := range events {
		k := e.eventKey()
		if _, ok := m.events[k]; !ok {
			m.fail(fmt.Errorf("%w: composite event %s: %s is not one of this machine's events", ErrInvalidMachine, name, k))
			continue
		}
		m.composites[key] = append(m.composites[key], k)
		m.compositeOf[k] = append(m.compositeOf[k], key)
	}
	return Event[S, CompositeRaised]{key: key}
}

func shortName(name string) string {
	if i := strings.LastIndexByte(name, '.'); i >= 0 && i < len(name)-1 {
		return name[i+1:]
	}
	return name
}
