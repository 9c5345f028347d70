// Package machine writes sagas as state machines, the way MassTransit's
// Automatonymous does: states, events bound to message types, and for
// each state what each event does there — Initially, During, DuringAny,
// When (with filters), Then, If, TransitionTo, Finalize, Schedule,
// Request, Ignore, Catch, WhenEnter, WhenLeave, composite events. A
// machine ported from MassTransit literally behaves as it did there;
// docs/state-machines.md of the repository lists the differences that
// remain, each with its reason.
//
// A Machine compiles (Build) into an ordinary *saga.Definition: the same
// dispatcher runs it, with every promise of package saga — all or nothing
// per step, exactly-once effects, both timeout engines, record
// versioning, liveness — and sagatest, Explore and crash points test it
// as any saga.
//
//	m := machine.New[Order]("order")
//	submitted := m.State("Submitted")
//	submit := machine.NewEvent(m, saga.By(func(e OrderSubmitted) string { return e.OrderID }))
//	accept := machine.NewEvent(m, saga.By(func(e OrderAccepted) string { return e.OrderID }))
//	m.Initially(machine.When(submit).TransitionTo(submitted))
//	m.During(submitted, machine.When(accept).Finalize())
//	def, err := m.Build()
//
// # The state in the record
//
// The data type embeds Instance, which holds the current state by name,
// the handles of scheduled timeouts, pending requests, composite events'
// arrivals and, with WithHistory, the latest transitions. They are stored
// with the data, in the same conditional write as the step's effects.
// Renaming or removing a state is a change of the stored data: give the
// saga a new data version (saga.DataVersion) whose upcaster renames it.
// A record whose state the machine does not have is never guessed at:
// its messages are dead-lettered with ErrUnknownState.
//
// # Events
//
// NewEvent binds a message type to an event, with a saga.Finder as
// saga.StartedBy and saga.Handles take it; an event bound in Initial
// starts instances. A message type is one event of a machine. As in
// MassTransit, an event may be bound several times in a state (During,
// DuringAny, When with filters): every binding runs, in the order
// declared. An event that arrives in a state that does not accept it
// follows the machine's UnhandledPolicy (WithUnhandled): by default it is
// dead-lettered with an error matching ErrUnhandledEvent that names the
// event and the state; Ignore accepts an event in a state and does
// nothing. Composite raises an event once each of several has arrived, in
// any order, recorded in every state but Initial and Final, as
// MassTransit's CompositeEvent.
//
// An activity's steps (Then, TransitionTo, Schedule, Request, ...) run in
// order within one saga step, and commit together or not at all: an
// action's error leaves the instance in its state, as a saga handler's
// does, unless a Catch after it handles the error (moving the instance
// to a fault state, say), and then the step commits. A transition runs
// the WhenLeave activities of the state left and the WhenEnter
// activities of the state entered. Entering Final runs the Finally
// actions and completes the instance.
//
// # Schedules and requests
//
// A Schedule is a named timeout whose handle lives in the data:
// scheduling it again replaces it, Unschedule cancels it, and only the
// latest is ever raised (Received) — saga's definite cancel and timeout
// token check drop the others.
//
// A Request sends a message to a queue, with a CorrelationID naming it and
// the instance, and the dispatcher's queue as ReplyTo, and starts its
// timeout (none for a timeout of zero). A response that echoes the
// CorrelationID finds its instance by it, as MassTransit's RequestId
// does: the responder needs to know nothing of the saga. Exactly one
// of Completed (the response), Faulted (a Fault) and TimeoutExpired is
// raised per request, also when the response and the timeout race: the
// first to commit clears the pending request; a response that arrives
// after that is raised as Late where Late is bound, and otherwise
// dropped — never as Completed.
//
// # Liveness and diagrams
//
// A machine's saga has saga.CheckLiveness on, and needs no
// saga.Context.Expect: at the end of each step the machine declares the
// message types the current state accepts. An instance in a state that
// accepts only timeouts, none of them pending, is stuck, and sagatest says
// so.
//
// Build checks the machine: every state reachable from Initial, every
// state but Final accepting some event (or leaving by its WhenEnter
// activity), no message type bound to two events, no WhenLeave activity
// that transitions. Mermaid draws the machine from its definition.
//
// The guide docs/state-machines.md of the repository ports MassTransit's
// order sample side by side.
package machine
