package timeout

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Getter is implemented by engines that read a pending timeout back: what
// Schedule was given, message and all, so that it can be scheduled on
// another engine (saga.Dispatcher.MigrateTimeouts moves timeouts between
// the engines of a Router this way). Queue, Router and the Temporal
// engine implement it.
type Getter interface {
	// Get returns the timeout ref names while it is pending: its ID,
	// queue, due time, saga and instance, and the message it delivers
	// (Timeout.DeliveryMessage of what was scheduled). Once it is no
	// longer pending the outcome is definite, as Cancel's: an error
	// matching ErrAlreadyFired if it fired (it has been or will be
	// delivered), ErrNotFound if it was cancelled or never scheduled.
	// Get changes nothing on the engine.
	Get(ctx context.Context, ref Ref) (Timeout, error)
}

// ErrNoGet is returned (it matches errors.ErrUnsupported) by Get of a
// scheduler that does not implement Getter.
var ErrNoGet = fmt.Errorf("timeout: engine cannot read pending timeouts back: %w", errors.ErrUnsupported)

// Get reads the pending timeout ref names back from s if it is a Getter,
// and returns ErrNoGet otherwise.
func Get(ctx context.Context, s Scheduler, ref Ref) (Timeout, error) {
	if g, ok := s.(Getter); ok {
		return g.Get(ctx, ref)
	}
	return Timeout{}, fmt.Errorf("%w: %T", ErrNoGet, s)
}

// Get reads ref back from the engine that issued it.
func (r *Router) Get(ctx context.Context, ref Ref) (Timeout, error) {
	if s := r.engine(ref.Engine()); s != nil {
		return Get(ctx, s, ref)
	}
	return Timeout{}, fmt.Errorf("%w: no engine %q in router", ErrInvalidRef, ref.Engine())
}

// HasEngine reports whether the router has an engine named name (as
// Default or in a route).
func (r *Router) HasEngine(name string) bool { return r.engine(name) != nil }

// Get reads back the scheduled message ref names. A message no longer
// scheduled has activated (ErrAlreadyFired) or was cancelled
// (ErrNotFound): the queue's Cancel, which changes nothing for a message
// no longer scheduled, tells which. With WithEarlyActivation a timeout
// within its lead of its due time has activated.
func (s *Queue) Get(ctx context.Context, ref Ref) (Timeout, error) {
	queue, seq, due, err := s.parseRef(ref)
	if err != nil {
		return Timeout{}, err
	}
	if seq == 0 {
		return Timeout{}, s.Cancel(ctx, ref) // the outcome only: nothing to cancel
	}
	q, err := s.b.Queue(ctx, queue)
	if err != nil {
		return Timeout{}, err
	}
	ms, err := q.Peek(ctx, seq, 1)
	if err != nil {
		return Timeout{}, err
	}
	if len(ms) == 0 || ms[0].Seq != seq || ms[0].State != transport.Scheduled {
		// No longer scheduled, and a scheduled message cannot come back:
		// Cancel only reads its outcome.
		switch err := s.Cancel(ctx, ref); {
		case err == nil:
			return Timeout{}, fmt.Errorf("timeout: %s: not found by a peek, then cancelled: the engine contradicts itself", ref)
		default:
			return Timeout{}, err
		}
	}
	m := ms[0]
	if m.Properties[PropertyTimeout] != s.name {
		return Timeout{}, fmt.Errorf("%w: %s: not a timeout of engine %s", ErrNotFound, ref, s.name)
	}
	if at, err := time.Parse(time.RFC3339Nano, m.Properties[PropertyDue]); err == nil {
		due = at
	}
	msg := &transport.Message{
		Body: m.Body, ContentType: m.ContentType, MessageID: m.MessageID, CorrelationID: m.CorrelationID,
		ReplyTo: m.ReplyTo, SessionID: m.SessionID, Subject: m.Subject, Properties: maps.Clone(m.Properties),
	}
	return Timeout{
		ID: m.MessageID, Queue: queue, At: due, Message: msg,
		Saga: m.Properties[PropertySaga], Instance: m.Properties[PropertyInstance],
	}, nil
}
