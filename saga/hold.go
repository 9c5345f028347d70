package saga

import (
	"context"
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Timeouts activated early.
//
// A timeout engine with early activation (timeout.NewQueue on
// JetStream by default, see timeout.WithEarlyActivation) puts a timeout's
// message on the queue up to a lead before its due time, with the due
// time in timeout.PropertyDue and ScheduledAt = due − lead. The
// dispatcher holds such a message, locked, until its due time by the
// dispatcher's clock, and then handles it as any other; Run hands it to a
// goroutine of its own for the hold, so that the worker goes on with other
// messages. A timeout is held only if it was activated early: its due
// time is after its ScheduledAt. A crash while holding only delays it:
// the lock expires and the message is redelivered.

// holdSlack is how much further ahead of its due time than its lead a
// timeout activated early may arrive and still be held: room for the
// dispatcher's clock to be behind the server's.
const holdSlack = time.Second

// maxHeld bounds the timeouts one Run holds in goroutines of its own;
// beyond it, a worker holds a timeout itself, which slows it down but
// loses nothing.
const maxHeld = 4096

// A holdPlan is what a delivery's early activation asks of handle,
// decided once, when it arrives (planHold).
type holdPlan struct {
	timeout bool      // the message is a timeout's
	due     time.Time // a timeout's due time (see timeoutDue)
	dueErr  error     // why its timeout.PropertyDue could not be read
	until   time.Time // hold it until then before handling it; zero: handle it now
	notDue  error     // it arrived too far ahead of due to be held (ErrTimeoutNotDue)
}

// planHold decides whether del must be held before it is handled, and
// until when.
//
// Only a timeout activated early is held: one with a readable
// timeout.PropertyDue after its ScheduledAt. Others are handled on
// arrival as they always were, among them a timeout whose PropertyDue is
// missing or unreadable (engines always write it; handle logs such a
// timeout). One held may be held for at most its lead (at most
// timeout.MaxEarlyActivation) plus holdSlack: one that arrives further
// ahead of its due time, by the dispatcher's clock, is not held (nor
// handled early) but dead-lettered (notDue, matching ErrTimeoutNotDue),
// since either the clocks of the dispatcher and the server disagree by
// more than holdSlack or its due property is not the one its engine
// wrote.
func (d *Dispatcher) planHold(del *transport.Delivery) holdPlan {
	var h holdPlan
	if h.due, h.timeout, h.dueErr = timeoutDue(del); !h.timeout || del.ScheduledAt.IsZero() {
		return h
	}
	lead := h.due.Sub(del.ScheduledAt)
	wait := h.due.Sub(d.cfg.now())
	if lead <= 0 || wait <= 0 {
		return h
	}
	if bound := min(lead, timeout.MaxEarlyActivation) + holdSlack; wait > bound {
		h.notDue = Permanent(fmt.Errorf("%w: due at %s, %v ahead of the dispatcher's clock; scheduled %v before its due time, so at most %v was expected",
			ErrTimeoutNotDue, h.due.UTC().Format(time.RFC3339Nano), wait, lead, bound))
		return h
	}
	h.until = h.due
	return h
}

// timeoutDue returns the due time of a timeout's message: its
// timeout.PropertyDue, or its ScheduledAt if that property is missing or
// cannot be read (err then says why). ok is false for other messages.
func timeoutDue(del *transport.Delivery) (due time.Time, ok bool, err error) {
	if _, ok := del.Properties[propToken]; !ok {
		return time.Time{}, false, nil
	}
	raw, has := del.Properties[timeout.PropertyDue]
	if !has {
		return del.ScheduledAt, true, nil
	}
	if due, err = time.Parse(time.RFC3339Nano, raw); err != nil {
		return del.ScheduledAt, true, err
	}
	return due, true, nil
}

// hold waits until due by the dispatcher's clock, renewing del's lock
// before it expires. It returns ctx's error if ctx ends first, or the
// renewal's if the lock cannot be renewed (the message is then
// redelivered).
func (d *Dispatcher) hold(ctx context.Context, del *transport.Delivery, due time.Time) error {
	if d.onHold != nil {
		d.onHold(del)
	}
	locked := !del.LockedUntil().IsZero()
	// Renew when less than margin is left: half the lock as received, at
	// most a second.
	margin := min(time.Until(del.LockedUntil())/2, time.Second)
	for {
		wait := due.Sub(d.cfg.now())
		if wait <= 0 {
			return nil
		}
		if left := time.Until(del.LockedUntil()); locked && left-margin < wait {
			if left <= margin {
				if err := del.RenewLock(ctx); err != nil {
					return fmt.Errorf("saga: renewing the lock of a timeout held until its due time: %w", err)
				}
				continue
			}
			wait = left - margin
		}
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// holdInPlace holds del until due in handle, for a caller that does not
// hand it over (a custom receive loop, or Run beyond maxHeld). It reports
// whether del is to be handled; if not, it has been abandoned for
// redelivery.
func (d *Dispatcher) holdInPlace(ctx context.Context, del *transport.Delivery, due time.Time) bool {
	err := d.hold(ctx, del, due)
	if err == nil {
		return true
	}
	d.abandonHeld(ctx, del, due, err)
	return false
}

// holdAside takes del over if its plan h is to hold it and fewer than
// maxHeld are held: a goroutine holds it until its due time, then
// handles it in a concurrency slot. It reports whether it took del.
//
// Run's context ending does not end a hold: Run waits for its held
// timeouts to come due and handles them, as it lets the steps in flight
// finish; a hold lasts at most the engine's lead plus holdSlack. (Handing
// them back at once would not be quicker for the timeout, and on
// JetStream the pulls of the workers that are stopping would release each
// such message again, raising its DeliveryCount once per worker.)
func (r *runner) holdAside(del *transport.Delivery, h holdPlan) bool {
	if h.until.IsZero() {
		return false // handle handles it now (or dead-letters it)
	}
	if r.held.Add(1) > maxHeld {
		r.held.Add(-1)
		return false // handle holds it in place
	}
	due := h.until
	h.until = time.Time{} // for handle: held by then
	r.wg.Go(func() {
		defer r.held.Add(-1)
		if !r.d.holdInPlace(r.work, del, due) {
			return
		}
		r.dispatch(r.work, r.slots, del, h, nil, 0)
	})
	return true
}
