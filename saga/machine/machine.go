package machine

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

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
// that does not accept it: no When for it there (During, DuringAny), no
// composite that records it there, no Ignore whose filters hold. A
// composite raised in a state that does not accept it follows it too.
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

	seq          int                                 // bindings declared so far
	bound        map[string]map[string][]*binding[S] // state -> event key -> bindings
	duringAny    map[string][]*binding[S]            // event key -> bindings
	enter, leave map[string][]*binding[S]            // state -> WhenEnter, WhenLeave
	finally      []func(ctx context.Context, c *saga.Context[S]) error

	compositeOf map[string][]string // constituent key -> composite keys
	composites  map[string][]string // composite key -> constituent keys
	compOpts    map[string]compositeInfo

	schedules  []*schedule[S]
	requests   []*request[S]
	registrars []func(d *saga.Definition[S]) // routes of schedules and requests

	table   map[string]map[string]*slot[S] // state -> event key -> what runs (Build)
	def     *saga.Definition[S]
	expects map[string][]string // state -> message names it waits for
}

// slot is what an event does in a state: its When bindings and the
// records of the composites it is part of, in declaration order, and its
// Ignores.
type slot[S any] struct {
	acts     []*binding[S]
	ignores  []*binding[S]
	accepted bool // some When binding (not only records or Ignores)
}

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// New starts a machine named name (the saga's name: see saga.Define).
func New[S any](name string, opts ...Option) *Machine[S] {
	m := &Machine[S]{
		name:        name,
		known:       map[string]bool{Initial.name: true, Final.name: true},
		events:      make(map[string]*eventInfo[S]),
		types:       make(map[string]string),
		bound:       make(map[string]map[string][]*binding[S]),
		duringAny:   make(map[string][]*binding[S]),
		enter:       make(map[string][]*binding[S]),
		leave:       make(map[string][]*binding[S]),
		compositeOf: make(map[string][]string),
		composites:  make(map[string][]string),
		compOpts:    make(map[string]compositeInfo),
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
//
// An event may be bound more than once in a state — by several During,
// by DuringAny, each When with its filter — as MassTransit adds
// activities per state and event: all of them run, in the order they were
// declared (MassTransit's order: a During declared before DuringAny runs
// first).
func (m *Machine[S]) During(states StateSet, b ...Binding[S]) { m.bind(states.states(), b) }

// DuringAny binds events in every state but Initial and Final, beside
// the states' own bindings (During): where a state binds the event too,
// both run, in the order they were declared. A composite event bound in
// DuringAny is bound in Initial and Final too, as in MassTransit.
func (m *Machine[S]) DuringAny(b ...Binding[S]) {
	for _, x := range b {
		bb := m.take(x)
		if bb == nil {
			continue
		}
		m.duringAny[bb.event] = append(m.duringAny[bb.event], bb)
	}
}

// WhenEnter adds the activity then fills to state s's entering: it runs
// whenever a transition enters s from another state (TransitionTo,
// Finalize), within the step, after the WhenLeave activities of the
// state left, with the message that caused the transition. It may
// transition again; more than 100 transitions in one step fail it with
// an error matching ErrInvalidMachine and saga.ErrPermanent (enter
// activities in a circle). Its error is the TransitionTo's (see Catch).
func (m *Machine[S]) WhenEnter(s State, then func(a *Activity[S, any])) {
	m.onTransition(m.enter, "enter/", s, then)
}

// WhenLeave adds the activity then fills to state s's leaving: it runs
// whenever a transition leaves s for another state, before the state
// changes. It may not transition (Build refuses it).
func (m *Machine[S]) WhenLeave(s State, then func(a *Activity[S, any])) {
	if s.name == Final.name {
		m.fail(fmt.Errorf("%w: WhenLeave(Final): an instance never leaves Final", ErrInvalidState))
		return
	}
	m.onTransition(m.leave, "leave/", s, then)
}

func (m *Machine[S]) onTransition(to map[string][]*binding[S], prefix string, s State, then func(a *Activity[S, any])) {
	if !m.known[s.name] {
		m.fail(fmt.Errorf("%w: %q is not a state of the machine", ErrInvalidState, s.name))
		return
	}
	a := &Activity[S, any]{event: prefix + s.name}
	if then != nil {
		then(a)
	}
	b := a.binding()
	if prefix == "leave/" && slices.ContainsFunc(b.edges, func(e edge) bool { return e.to != "" }) {
		m.fail(fmt.Errorf("%w: WhenLeave(%s) transitions: a leave activity cannot", ErrInvalidMachine, s.name))
	}
	to[s.name] = append(to[s.name], b)
}

// Finally adds actions run when an instance enters Final, after the
// activity that finalized it, in the same step; the instance then
// completes.
func (m *Machine[S]) Finally(then ...func(ctx context.Context, c *saga.Context[S]) error) {
	m.finally = append(m.finally, then...)
}

// take returns x's binding, numbered in declaration order, or nil for an
// event that is not the machine's.
func (m *Machine[S]) take(x Binding[S]) *binding[S] {
	bb := x.binding()
	if _, ok := m.events[bb.event]; !ok {
		m.fail(fmt.Errorf("%w: event %s is not one of this machine's", ErrInvalidMachine, bb.event))
		return nil
	}
	m.seq++
	bb.seq = m.seq
	return bb
}

func (m *Machine[S]) bind(states []State, bs []Binding[S]) {
	var taken []*binding[S]
	for _, x := range bs {
		if bb := m.take(x); bb != nil {
			taken = append(taken, bb)
		}
	}
	for _, s := range states {
		if !m.known[s.name] || s.name == Final.name {
			m.fail(fmt.Errorf("%w: %q is not a state of the machine that can accept events", ErrInvalidState, s.name))
			continue
		}
		if m.bound[s.name] == nil {
			m.bound[s.name] = make(map[string][]*binding[S])
		}
		for _, bb := range taken {
			m.bound[s.name][bb.event] = append(m.bound[s.name][bb.event], bb)
		}
	}
}

// buildTable gathers, for each state and event, the bindings that run:
// the state's own, DuringAny's (not in Initial and Final, but for
// composite events) and composites' records of their constituents, in
// declaration order.
func (m *Machine[S]) buildTable() {
	m.table = make(map[string]map[string]*slot[S])
	add := func(st string, b *binding[S]) {
		if m.table[st] == nil {
			m.table[st] = make(map[string]*slot[S])
		}
		sl := m.table[st][b.event]
		if sl == nil {
			sl = &slot[S]{}
			m.table[st][b.event] = sl
		}
		if b.ignore {
			sl.ignores = append(sl.ignores, b)
			return
		}
		sl.acts = append(sl.acts, b)
		sl.accepted = sl.accepted || !b.recorder
	}
	for _, st := range m.allStates() {
		edge := st == Initial.name || st == Final.name
		for _, k := range m.order {
			for _, b := range m.bound[st][k] {
				add(st, b)
			}
			if !edge || m.events[k].kind == kindComposite {
				for _, b := range m.duringAny[k] {
					add(st, b)
				}
			}
			for _, ck := range m.compositeOf[k] {
				if m.records(st, ck) {
					add(st, m.recorder(ck, k))
				}
			}
		}
		for _, sl := range m.table[st] {
			slices.SortStableFunc(sl.acts, func(a, b *binding[S]) int { return a.seq - b.seq })
		}
	}
}

// records reports whether composite ck records its constituents' arrivals
// in state st: in every state but Initial and Final, in Initial with
// IncludeInitial or where Initial binds ck, in Final with IncludeFinal.
func (m *Machine[S]) records(st, ck string) bool {
	o := m.compOpts[ck]
	switch st {
	case Initial.name:
		return o.opts&IncludeInitial != 0 || slices.ContainsFunc(m.bound[st][ck], func(b *binding[S]) bool { return !b.ignore })
	case Final.name:
		return o.opts&IncludeFinal != 0
	}
	return true
}

// lookup returns what event key does in state st, or nil.
func (m *Machine[S]) lookup(st, key string) *slot[S] { return m.table[st][key] }

func (m *Machine[S]) label(key string) string {
	if e, ok := m.events[key]; ok {
		return e.label
	}
	if st, ok := strings.CutPrefix(key, "enter/"); ok {
		return st + ".Enter"
	}
	return key
}

// accepts lists the event keys st has a When binding for, in declared
// order.
func (m *Machine[S]) accepts(st string) []string {
	var keys []string
	for _, k := range m.order {
		if sl := m.lookup(st, k); sl != nil && sl.accepted {
			keys = append(keys, k)
		}
	}
	return keys
}

func (m *Machine[S]) allStates() []string {
	return slices.Concat([]string{Initial.name}, m.states, []string{Final.name})
}
