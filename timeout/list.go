package timeout

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"
)

// Pending is a timeout an engine holds: scheduled, not yet fired or
// cancelled.
type Pending struct {
	// Ref is what Cancel takes.
	Ref Ref
	// ID, Queue, Saga and Instance are the Timeout's.
	ID, Queue      string
	Saga, Instance string
	// At is the due time.
	At time.Time
	// Properties are the properties of the message to deliver.
	Properties map[string]string
	// Seq is the scheduled message's sequence number on the transport
	// engine (the active message's, for one Activating); 0 on other
	// engines.
	Seq uint64
	// Activating is true for a timeout activated early and not yet due
	// (see Activating): its message is on the queue, where a receiver
	// holds it until At or has yet to receive it. Cancel of its Ref
	// returns ErrAlreadyFired: it will be delivered (a saga drops it by
	// its token if the saga cancelled it).
	Activating bool
}

// Filter selects pending timeouts; an empty field matches every value.
type Filter struct {
	Queue, Saga, Instance string
}

func (f Filter) match(p Pending) bool {
	return (f.Queue == "" || f.Queue == p.Queue) &&
		(f.Saga == "" || f.Saga == p.Saga) &&
		(f.Instance == "" || f.Instance == p.Instance)
}

// Lister is implemented by engines that list the timeouts they hold.
// Listings are snapshots: a timeout may fire or be cancelled while it is
// listed, so Cancel of a listed ref can still return ErrAlreadyFired or
// ErrNotFound.
type Lister interface {
	// Pending yields the pending timeouts that f selects. The order is
	// the engine's (Queue: sequence order). An error ends the
	// listing, except in a Router, which goes on with the next engine.
	Pending(ctx context.Context, f Filter) iter.Seq2[Pending, error]
}

// ErrNoListing is returned (it matches errors.ErrUnsupported) by a
// listing that an engine cannot make: a scheduler that does not implement
// Lister, or a Queue asked for every queue.
var ErrNoListing = fmt.Errorf("timeout: engine cannot list pending timeouts: %w", errors.ErrUnsupported)

// List lists the pending timeouts of s if it is a Lister, and yields
// ErrNoListing otherwise.
func List(ctx context.Context, s Scheduler, f Filter) iter.Seq2[Pending, error] {
	if l, ok := s.(Lister); ok {
		return l.Pending(ctx, f)
	}
	return func(yield func(Pending, error) bool) {
		yield(Pending{}, fmt.Errorf("%w: %T", ErrNoListing, s))
	}
}
