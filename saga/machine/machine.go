package machine

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	"github.com/jetsaga/jetsaga/saga"
)

// State is a state of a machine. Declare states with Machine.State;
// Initial and Final belong to every machine.
type State struct{ name string }

var (
	// Initial is the state of an instance before its first event: the
	// state Machine.Initially binds events in.
	Initial = State{name: "Initial"}
	// Final is the state Activity.Finalize enters. An instance that
	// enters it runs the Finally actions and completes
	// (saga.Context.MarkComplete) when the step commits.
	Final = State{name: "Final"}
)

// Name returns the state's name, as the record stores it.
func (s State) Name() string { return s.name }

func (s State) states() []State { return []State{s} }

// StateSet is one state or several (States), as During takes them.
type StateSet interface{ states() []State }

type stateList []State

func (l stateList) states() []State { return l }

// States groups states for During: the same events, bound once, in each.
func States(s ...State) StateSet { return stateList(s) }

// UnhandledPolicy says what happens to an event that arrives in a state
// that does not accept it (no When or Ignore for it there, nor in
// DuringAny).
type UnhandledPolicy int

const (
	// UnhandledDeadLetter fails the step with an error matching
	// ErrUnhandledEvent and saga.ErrPermanent, which names the event and
	// the state: the message is dead-lettered with that reason, and the
	// instance is left as it was. The default.
	UnhandledDeadLetter UnhandledPolicy = iota
	// UnhandledIgnore completes the message without changing the
	// instance (its inbox records it, so a redelivery is a duplicate).
	UnhandledIgnore
)

// Option configures a Machine.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	unhandled UnhandledPolicy
	history   int
	defOpts   []saga.DefinitionOption
}

// WithUnhandled sets the policy for events that arrive in a state that
// does not accept them. Default: UnhandledDeadLetter.
func WithUnhandled(p UnhandledPolicy) Option {
	return optionFunc(func(c *config) error {
		if p != UnhandledDeadLetter && p != UnhandledIgnore {
			return fmt.Errorf("%w: WithUnhandled: unknown policy %d", saga.ErrInvalidOption, p)
		}
		c.unhandled = p
		return nil
	})
}

// WithHistory keeps the latest n transitions of each instance in its
// data (Status.History, Instance.Path): for tests that assert the path
// an instance took, and for operators reading a record. Each costs about
// 80 bytes of record. Default: 0, no history.
func WithHistory(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 || n > 1000 {
			return fmt.Errorf("%w: WithHistory(%d): want 0 to 1000", saga.ErrInvalidOption, n)
		}
		c.history = n
		return nil
	})
}

// WithDefinitionOptions passes options to the saga definition the
// machine builds (saga.DataVersion, saga.WhenNotFound,
// saga.TimeoutEngine). saga.CheckLiveness is always on.
func WithDefinitionOptions(opts ...saga.DefinitionOption) Option {
	return optionFunc(func(c *config) error {
		c.defOpts = append(c.defOpts, opts...)
		return nil
	})
}

// Machine is a state machine over a saga whose data is S, which embeds
// Instance. Declare its states, events, schedules and requests, bind
// events in states with Initially, During and DuringAny, then Build it
// into a saga.Definition, once, at program start.
type Machine[S any] struct {
	name string
	cfg  config
	err  error

	states []string // declared order; Initial first, Final last at Build
	known  map[string]bool

	events map[string]*eventInfo[S] // by key
	order  []string                 // event keys, declared order
	types  map[string]string        // message name -> event key

	bound     map[string]map[string]*binding[S] // state -> event key -> binding
	duringAny map[string]*binding[S]
	finally   []func(ctx context.Context, c *saga.Context[S]) error

	compositeOf map[string][]string // constituent key -> composite keys
	composites  map[string][]string // composite key -> constituent keys

	schedules  []*schedule[S]
	requests   []*request[S]
	registrars []func(d *saga.Definition[S]) // routes of schedules and requests

	def     *saga.Definition[S]
	expects map[string][]string // state -> message names it waits for
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// New starts a machine named name (the saga's name: see saga.Define).
func New[S any](name string, opts ...Option) *Machine[S] {
	m := &Machine[S]{
		name:        name,
		known:       map[string]bool{Initial.name: true, Final.name: true},
		events:      make(map[string]*eventInfo[S]),
		types:       make(map[string]string),
		bound:       make(map[string]map[string]*binding[S]),
		duringAny:   make(map[string]*binding[S]),
		compositeOf: make(map[string][]string),
		composites:  make(map[string][]string),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(&m.cfg); err != nil {
			m.fail(err)
		}
	}
	if !namePattern.MatchString(name) {
		m.fail(fmt.Errorf("%w: name %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidMachine, name))
	}
	if _, ok := any(new(S)).(instancer); !ok {
		m.fail(fmt.Errorf("%w: %T", ErrNoInstance, *new(S)))
	}
	return m
}

// Name returns the machine's (and its saga's) name.
func (m *Machine[S]) Name() string { return m.name }

func (m *Machine[S]) fail(err error) {
	if m.err == nil {
		m.err = fmt.Errorf("%w: %w: machine %s: %w", saga.ErrInvalidDefinition, ErrInvalidMachine, m.name, err)
	}
}

// State declares a state named name: 1–64 characters of [A-Za-z0-9_-],
// not Initial or Final, stored in the record (see Instance).
func (m *Machine[S]) State(name string) State {
	switch {
	case !namePattern.MatchString(name):
		m.fail(fmt.Errorf("%w: %q: 1-64 characters of [A-Za-z0-9_-]", ErrInvalidState, name))
	case m.known[name]:
		m.fail(fmt.Errorf("%w: %q declared twice (or reserved)", ErrInvalidState, name))
	}
	m.known[name] = true
	m.states = append(m.states, name)
	return State{name: name}
}

// Initially binds events in Initial: those that start an instance.
func (m *Machine[S]) Initially(b ...Binding[S]) { m.bind([]State{Initial}, b) }

// During binds events in each of the states (a State or States).
func (m *Machine[S]) During(states StateSet, b ...Binding[S]) { m.bind(states.states(), b) }

// DuringAny binds events in every state but Initial and Final. A state's
// own binding of an event (During) comes first.
func (m *Machine[S]) DuringAny(b ...Binding[S]) {
	for _, x := range b {
		bb := x.binding()
		if _, dup := m.duringAny[bb.event]; dup {
			m.fail(fmt.Errorf("%w: %s in DuringAny", ErrDuplicateEvent, m.label(bb.event)))
		}
		m.duringAny[bb.event] = bb
	}
}

// Finally adds actions run when an instance enters Final, after the
// activity that finalized it, in the same step; the instance then
// completes.
func (m *Machine[S]) Finally(then ...func(ctx context.Context, c *saga.Context[S]) error) {
	m.finally = append(m.finally, then...)
}

func (m *Machine[S]) bind(states []State, bs []Binding[S]) {
	for _, s := range states {
		if !m.known[s.name] || s.name == Final.name {
			m.fail(fmt.Errorf("%w: %q is not a state of the machine that can accept events", ErrInvalidState, s.name))
			continue
		}
		if m.bound[s.name] == nil {
			m.bound[s.name] = make(map[string]*binding[S])
		}
		for _, x := range bs {
			bb := x.binding()
			if _, ok := m.events[bb.event]; !ok {
				m.fail(fmt.Errorf("%w: event %s is not one of this machine's", ErrInvalidMachine, bb.event))
				continue
			}
			if _, dup := m.bound[s.name][bb.event]; dup {
				m.fail(fmt.Errorf("%w: %s in state %s", ErrDuplicateEvent, m.label(bb.event), s.name))
			}
			m.bound[s.name][bb.event] = bb
		}
	}
}

// lookup returns the binding of event key in state st, or nil.
func (m *Machine[S]) lookup(st, key string) *binding[S] {
	if b := m.bound[st][key]; b != nil {
		return b
	}
	if st != Initial.name && st != Final.name {
		return m.duringAny[key]
	}
	return nil
}

func (m *Machine[S]) label(key string) string {
	if e, ok := m.events[key]; ok {
		return e.label
	}
	return key
}

// accepts lists the event keys st accepts (not Ignore), sorted.
func (m *Machine[S]) accepts(st string) []string {
	var keys []string
	for _, k := range m.order {
		if b := m.lookup(st, k); b != nil && !b.ignore {
			keys = append(keys, k)
		}
	}
	return keys
}

func (m *Machine[S]) allStates() []string {
	return slices.Concat([]string{Initial.name}, m.states, []string{Final.name})
}
