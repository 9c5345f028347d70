package saga

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The receive stage: Run's workers receive batches from the queue (and a
// subscription's workers from the subscription), renew the locks of what a
// batch still holds behind slow steps, and hand each delivery to Handle in
// a concurrency slot — or, a timeout activated early, to a goroutine that
// holds it first (hold.go). Handle runs one delivery through the stages:
// hold, resolve (resolve.go), step (step.go, commit.go), outbox
// (outbox.go) and settle (settle.go).

// runner is what one Run shares among its workers: the concurrency slots
// and the timeouts held until their due time.
type runner struct {
	d     *Dispatcher
	work  context.Context // for holds and steps, which outlive Run's context
	slots chan struct{}   // one per message handled at once (WithConcurrency)
	held  atomic.Int64
	wg    sync.WaitGroup // the holding goroutines
}

func newRunner(d *Dispatcher, work context.Context) *runner {
	return &runner{d: d, work: work, slots: make(chan struct{}, d.cfg.concurrency)}
}

// dispatch runs del through the dispatcher in a concurrency slot, if slots
// (nil for a subscription's workers, which have their own).
func (r *runner) dispatch(slots chan struct{}, del *transport.Delivery) {
	if slots != nil {
		slots <- struct{}{}
		defer func() { <-slots }()
	}
	wctx, cancel := context.WithTimeout(r.work, r.d.cfg.drain)
	defer cancel()
	r.d.Handle(wctx, del)
}

// receiver is a queue or a subscription.
type receiver interface {
	Receive(ctx context.Context, max int) ([]*transport.Delivery, error)
}

// worker receives from q and handles what it receives, each message in
// one of slots if slots is not nil; it hands timeouts activated early to
// r to hold until their due time.
func (d *Dispatcher) worker(ctx context.Context, r *runner, slots chan struct{}, q receiver, lock time.Duration) {
	work := r.work
	backoff := 10 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := q.Receive(ctx, d.cfg.batch)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, transport.ErrClosed) {
				return
			}
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: receive failed", slog.String("queue", d.queueName), slog.Any("error", err))
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			}
			continue
		}
		backoff = 10 * time.Millisecond
		for i, del := range ds {
			if i > 0 && ctx.Err() != nil {
				// Stopping: the rest of the batch was not started, so it
				// goes back to the queue at once rather than when its lock
				// expires.
				_ = del.Abandon(work)
				continue
			}
			if r.holdLater(del) {
				continue
			}
			if i > 0 && lock > 0 {
				// The rest of the batch waited behind slow steps: renew
				// the locks that are half gone, so that each step starts
				// with at least half a lock and none expires while it waits.
				for _, next := range ds[i:] {
					if time.Until(next.LockedUntil()) < lock/2 {
						_ = next.RenewLock(work)
					}
				}
			}
			r.dispatch(slots, del)
		}
	}
}

// Handle runs one received message through the sagas and settles it:
// complete, delayed retry or dead-letter. Run calls it; it is exported for
// custom receive loops, such as one that shares a queue with other
// consumers.
//
// A timeout activated early (timeout.WithEarlyActivation) that is not due
// yet is held first, until its due time by the dispatcher's clock (see
// "Timeouts" in the package documentation): Handle then takes up to the
// engine's lead (plus a second of clock skew) to return, renewing the
// message's lock as needed. If ctx ends meanwhile, the message is
// abandoned for redelivery.
func (d *Dispatcher) Handle(ctx context.Context, del *transport.Delivery) {
	due, isTimeout, dueErr := timeoutDue(del)
	var hold time.Time
	var notDue error
	if isTimeout {
		hold, notDue = d.holdFor(del, due)
	}
	if !hold.IsZero() && !d.holdInPlace(ctx, del, hold) {
		return
	}
	start := d.cfg.now()
	if _, err := d.open(ctx); err != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: cannot open queue; abandoning message", slog.String("queue", d.queueName), slog.Any("error", err))
		_ = del.Abandon(ctx)
		return
	}
	info := StepInfo{Queue: d.queueName, MessageType: del.Properties[propType], Seq: del.Seq, DeliveryCount: del.DeliveryCount,
		MessageID: del.MessageID, EnqueuedAt: del.EnqueuedAt, StartedAt: start, Properties: del.Properties}
	if isTimeout {
		info.TimeoutDue = due
		if dueErr != nil {
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: timeout with an unreadable due time; handling it on arrival",
				slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq),
				slog.String("due", truncate(del.Properties[timeout.PropertyDue], 64)), slog.Any("error", dueErr))
		}
	}
	var res StepResult
	if info.MessageType == flushType {
		info.Saga, info.ID = del.Properties[propSaga], del.Properties[propSagaID]
		ctx = d.stepStarted(ctx, info)
		res = d.flushMessage(ctx, del)
	} else {
		// Decode and correlate first, so that StepStarted knows the
		// instance when there is one.
		ts, err := d.resolve(ctx, del, &info)
		ctx = d.stepStarted(ctx, info)
		switch {
		case err != nil:
			res = d.deadLetter(ctx, del, ReasonUnknownType, err, nil)
		case notDue != nil:
			res = d.deadLetter(ctx, del, ReasonTimeoutNotDue, notDue, nil)
		default:
			res = d.runTargets(ctx, del, ts, &info)
		}
	}
	res.Duration = d.cfg.now().Sub(start)
	if h := d.cfg.hooks.StepDone; h != nil {
		h(ctx, info, res)
	}
}

func (d *Dispatcher) stepStarted(ctx context.Context, info StepInfo) context.Context {
	if h := d.cfg.hooks.StepStarted; h != nil {
		return h(ctx, info)
	}
	return ctx
}
