package saga

import (
	"errors"
	"fmt"

	"github.com/jetsaga/jetsaga/transport"
)

var (
	// ErrConflict is returned by a Store when the record changed since it
	// was read (or exists, on create). The dispatcher reloads and runs the
	// handler again on the fresh state.
	ErrConflict = errors.New("saga: state changed concurrently")
	// ErrNotFound is returned by a Store for a missing record.
	ErrNotFound = errors.New("saga: not found")
	// ErrUnknownMessage is the reason a message whose type no saga of the
	// dispatcher handles is dead-lettered.
	ErrUnknownMessage = errors.New("saga: unknown message type")
	// ErrMalformed is the reason a message whose body cannot be decoded is
	// dead-lettered.
	ErrMalformed = errors.New("saga: malformed message")
	// ErrInvalidDefinition is returned for a saga definition that cannot
	// work (no name, no starting message, a type handled twice).
	ErrInvalidDefinition = errors.New("saga: invalid definition")
	// ErrInvalidOption is wrapped by options given invalid values.
	ErrInvalidOption = errors.New("saga: invalid option")
	// ErrSagaNotFound is the reason a message for a missing instance is
	// dead-lettered under NotFoundPolicy.DeadLetter.
	ErrSagaNotFound = errors.New("saga: instance not found")
	// ErrCorrelation is returned when a message maps to no saga ID.
	ErrCorrelation = errors.New("saga: cannot correlate message")
	// ErrPanic wraps a value a handler panicked with.
	ErrPanic = errors.New("saga: handler panicked")
	// ErrUnavailable says that something a step needs cannot be reached
	// for now: the saga store (its database or bucket), the NATS server
	// or a stream with no leader, a timeout engine. It is the same value
	// as transport.ErrUnavailable. Stores and engines wrap their outages
	// in it; a handler may wrap its own dependency's (a database, an HTTP
	// API it cannot reach, shared by the queue's messages: while a step
	// waits the dispatcher takes no new work) to opt its message into
	// the same treatment. A
	// step that fails with it (and not with ErrPermanent) is an outage,
	// not the message's failure: it counts against no retry policy and
	// is never dead-lettered; the dispatcher keeps the message, pauses
	// receiving and runs the step again when the dependency is back (see
	// Waiting, and Dispatcher.Health).
	ErrUnavailable = transport.ErrUnavailable
	// ErrPermanent matches errors made by Permanent.
	ErrPermanent = errors.New("saga: permanent error")
	// ErrNoTimeoutHandler is returned (with ErrPermanent) by
	// Context.RequestTimeout for a payload type the saga has no OnTimeout
	// for: such a timeout could only be dead-lettered when it fires.
	ErrNoTimeoutHandler = errors.New("saga: no OnTimeout for the timeout's type")
	// ErrTimeoutNotPending is returned (with ErrPermanent) by
	// Context.RescheduleTimeout for a handle that is not pending.
	ErrTimeoutNotPending = errors.New("saga: timeout not pending")
	// ErrNoReplyTo is returned (with ErrPermanent) by Context.Reply and
	// ReplyToOriginator, and NotFoundContext.Reply, when the message
	// replied to has no ReplyTo.
	ErrNoReplyTo = errors.New("saga: no ReplyTo to reply to")
	// ErrEffectsPending says that a change was committed but its effects
	// (messages, timeouts scheduled or cancelled) could not all be carried
	// out yet: they are kept with the instance and carried out later,
	// exactly once (see EffectsPending). It is not a failure of the change.
	ErrEffectsPending = errors.New("saga: committed; effects pending")
	// ErrTimeoutNotDue is the reason (with ErrPermanent) a timeout
	// activated early (timeout.WithEarlyActivation) is dead-lettered when
	// it arrives further ahead of its due time than its engine's lead plus
	// a second, by the dispatcher's clock: the clocks of the dispatcher
	// and the server disagree, or the message's due time is not the one
	// its engine wrote. Its handler did not run.
	ErrTimeoutNotDue = errors.New("saga: timeout not due")
	// ErrNoCurrentCalendar is returned (with ErrInvalidOption) by
	// NewDispatcher when the registry given to WithCalendars holds a
	// calendar at several versions and none of them is named current: the
	// dispatcher could not tell which one new requests use.
	ErrNoCurrentCalendar = errors.New("saga: calendar at several versions, none current")
)

// Permanent marks err as not worth retrying: the dispatcher dead-letters
// the message at once instead of retrying it. The result matches both
// ErrPermanent and err with errors.Is.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string        { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error        { return e.err }
func (e *permanentError) Is(target error) bool { return target == ErrPermanent }

// HandlerError is the error a failed step reports: which saga, instance
// and message type, and why.
type HandlerError struct {
	Saga, ID, Message string
	Err               error
}

// Error describes the failed step.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("saga %s/%s: handling %s: %v", e.Saga, e.ID, e.Message, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }
