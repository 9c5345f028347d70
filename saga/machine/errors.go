package machine

import "errors"

var (
	// ErrInvalidMachine is wrapped by every error Build returns for a
	// machine that cannot work, beside the sentinel that says why. It
	// also matches saga.ErrInvalidDefinition.
	ErrInvalidMachine = errors.New("machine: invalid state machine")
	// ErrNoInstance: the machine's data type does not embed Instance, so
	// the machine has nowhere to keep the current state.
	ErrNoInstance = errors.New("machine: data type does not embed machine.Instance")
	// ErrUnreachableState: a declared state that no transition from the
	// initial state leads to.
	ErrUnreachableState = errors.New("machine: unreachable state")
	// ErrNoWayOut: a state other than Final that accepts no event, so an
	// instance that enters it stays there for good.
	ErrNoWayOut = errors.New("machine: state with no way out")
	// ErrDuplicateEvent: an event (a composite, say) declared twice, or a
	// message type bound to two events (events, schedules, requests). An
	// event bound several times in a state is not an error: every binding
	// runs, as in MassTransit.
	ErrDuplicateEvent = errors.New("machine: event bound twice")
	// ErrInvalidState: a state name that is not 1–64 characters of
	// [A-Za-z0-9_-], reserved (Initial, Final) or declared twice, or a
	// state this machine did not declare.
	ErrInvalidState = errors.New("machine: invalid state")
	// ErrUnhandledEvent is the reason (with saga.ErrPermanent) an event
	// that the instance's current state does not accept is dead-lettered,
	// under the default policy (see WithUnhandled).
	ErrUnhandledEvent = errors.New("machine: event not accepted in the current state")
	// ErrUnknownState is the reason (with saga.ErrPermanent) a message for
	// an instance whose stored state is not a state of the machine — a
	// state removed or renamed in a new version — is dead-lettered.
	ErrUnknownState = errors.New("machine: stored state unknown to the machine")
)
