package transport

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidQueueName is returned for an empty or malformed queue name.
	ErrInvalidQueueName = errors.New("transport: invalid queue name")
	// ErrInvalidMessage is returned for a message that cannot be stored as
	// given: a bad ID, session ID, property key or value, or a zero
	// schedule time. The wrapping error says which field.
	ErrInvalidMessage = errors.New("transport: invalid message")
	// ErrMessageTooLarge is returned when a message exceeds the server's
	// max payload. Nothing is stored.
	ErrMessageTooLarge = errors.New("transport: message too large")
	// ErrQueueNotFound is returned for a queue that does not exist.
	ErrQueueNotFound = errors.New("transport: queue not found")
	// ErrQueueFull is returned when a partition's MaxBytes is reached.
	// Nothing is stored and nothing is evicted.
	ErrQueueFull = errors.New("transport: queue full")
	// ErrInvalidConfig is returned by OpenQueue for a QueueConfig it refuses,
	// for example one whose limits would silently drop pending schedules.
	ErrInvalidConfig = errors.New("transport: invalid queue config")
	// ErrInvalidOption is wrapped by options given invalid values.
	ErrInvalidOption = errors.New("transport: invalid option")

	// ErrNotFound is returned by Cancel when no pending scheduled message
	// has the sequence number: it never existed, was already cancelled, or
	// activated earlier than this call could observe.
	ErrNotFound = errors.New("transport: scheduled message not found")
	// ErrAlreadyActivated is returned by Cancel when the scheduled message
	// has activated: it has been or will be delivered.
	ErrAlreadyActivated = errors.New("transport: scheduled message already activated")

	// ErrSessionRequired is returned when a message without SessionID is
	// sent to a session queue, or when Receive is used on one.
	ErrSessionRequired = errors.New("transport: queue requires sessions")
	// ErrNotSessionQueue is returned by AcceptSession on a queue without
	// RequiresSession.
	ErrNotSessionQueue = errors.New("transport: queue does not use sessions")
	// ErrNoSession is returned by AcceptNextSession when no session has
	// messages before the context ends.
	ErrNoSession = errors.New("transport: no session available")
	// ErrSessionLocked is returned by AcceptSession when another receiver,
	// in this process or another, holds the session.
	ErrSessionLocked = errors.New("transport: session locked by another receiver")
	// ErrSessionLockLost is returned by a SessionReceiver whose session
	// lock expired (it neither received nor renewed within LockDuration):
	// another receiver may hold the session now. Close it and accept the
	// session again.
	ErrSessionLockLost = errors.New("transport: session lock lost")
	// ErrLockLost is returned when settling a delivery whose lock expired:
	// the message has been or will be redelivered.
	ErrLockLost = errors.New("transport: message lock lost")
	// ErrAlreadySettled is returned when a delivery is settled twice.
	ErrAlreadySettled = errors.New("transport: delivery already settled")
	// ErrReceiveInterrupted, given as the cause when cancelling a
	// Receive's context (context.WithCancelCause), ends the Receive as a
	// deadline would, and at once: what its pulls bring later is kept for
	// the next Receive rather than released (which would count a
	// delivery). A receiver that means to receive again at once (with
	// other partitions, say: Queue.ReceiveFrom) interrupts with it; one
	// that stops cancels without it.
	ErrReceiveInterrupted = errors.New("transport: receive interrupted")
	// ErrClosed is returned after the broker or its connection closed.
	ErrClosed = errors.New("transport: closed")
	// ErrUnavailable wraps a failure to reach the server or to get an
	// answer from it — the connection away and reconnecting, a request
	// that timed out or met no responders, a stream with no leader or no
	// quorum — as opposed to a refusal: the same call may work later.
	// saga.ErrUnavailable is the same value: stores and timeout engines
	// wrap their own outages in it, and a saga dispatcher waits through
	// them instead of counting them against a message's retries. A
	// connection closed for good is ErrClosed, not ErrUnavailable.
	ErrUnavailable = errors.New("transport: unavailable")
	// ErrUnsupported matches errors.ErrUnsupported; it is returned for
	// operations a queue does not offer, such as scheduling on a
	// dead-letter queue.
	ErrUnsupported = fmt.Errorf("transport: %w", errors.ErrUnsupported)

	// ErrStateNotFound is returned by LoadState and DeleteState for a key
	// that holds no record (never written, deleted, or expired).
	ErrStateNotFound = errors.New("transport: state not found")
	// ErrStateConflict is returned by CommitState and DeleteState when the
	// record's revision is not the one given (see Queue.CommitState).
	// Nothing is stored.
	ErrStateConflict = errors.New("transport: state revision conflict")
	// ErrDuplicateMessage is returned by CommitState when a message to
	// schedule has a MessageID the queue remembers (see
	// QueueConfig.DuplicateWindow). Nothing is stored.
	ErrDuplicateMessage = errors.New("transport: duplicate MessageID")
	// ErrInvalidStateKey is returned for a key that is empty, longer than
	// MaxStateKey bytes, or not dot-separated tokens of [A-Za-z0-9_=-].
	ErrInvalidStateKey = errors.New("transport: invalid state key")
)

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidMessage, field, fmt.Sprintf(format, args...))
}
