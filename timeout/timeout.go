package timeout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

var (
	// ErrNotFound is returned by Cancel when the timeout was cancelled
	// before, or the ref names nothing the engine scheduled.
	ErrNotFound = errors.New("timeout: not found")
	// ErrAlreadyFired is returned by Cancel when the timeout fired first:
	// its message has been or will be delivered.
	ErrAlreadyFired = errors.New("timeout: already fired")
	// ErrInvalidTimeout is returned by Schedule for a timeout without ID,
	// queue, due time or message.
	ErrInvalidTimeout = errors.New("timeout: invalid timeout")
	// ErrInvalidRef is returned by Cancel for a ref no engine issued.
	ErrInvalidRef = errors.New("timeout: invalid ref")
)

// Timeout is a message to deliver to a queue at or after a due time.
type Timeout struct {
	// ID identifies the timeout; scheduling the same ID twice (within the
	// engine's duplicate window) schedules it once. Required.
	ID string
	// Queue is the transport queue the message is delivered to. Required.
	Queue string
	// At is the due time. The message is never delivered before it.
	At time.Time
	// Message is what is delivered. Its MessageID is set to ID.
	Message *transport.Message
}

func (t Timeout) validate() error {
	switch {
	case t.ID == "":
		return fmt.Errorf("%w: empty ID", ErrInvalidTimeout)
	case t.Queue == "":
		return fmt.Errorf("%w: empty Queue", ErrInvalidTimeout)
	case t.At.IsZero():
		return fmt.Errorf("%w: zero At", ErrInvalidTimeout)
	case t.Message == nil:
		return fmt.Errorf("%w: nil Message", ErrInvalidTimeout)
	}
	return nil
}

// Ref names a scheduled timeout for Cancel. It starts with the name of the
// engine that issued it ("queue:", "temporal:", ...), so that a Router
// can send Cancel to the right engine; treat the rest as opaque.
type Ref string

// Engine returns the engine prefix of r.
func (r Ref) Engine() string {
	e, _, _ := strings.Cut(string(r), ":")
	return e
}

// Scheduler arranges for timeouts to be delivered at or after their due
// time. Implementations: Transport (scheduled messages on a transport
// queue, the default) and Router (several engines by duration). A
// Temporal engine for long timeouts is planned, not yet released.
type Scheduler interface {
	// Schedule is idempotent on t.ID and returns the ref Cancel takes.
	Schedule(ctx context.Context, t Timeout) (Ref, error)
	// Cancel stops a pending timeout. nil means it will never be
	// delivered; ErrAlreadyFired that it has been or will be; ErrNotFound
	// that nothing with this ref is pending.
	Cancel(ctx context.Context, ref Ref) error
}
