package saga

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetsaga/jetsaga/internal/statelog"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The receive stage: Run's workers receive batches from the queue (and a
// subscription's workers from the subscription), renew the locks of what a
// batch still holds behind slow steps, plan each delivery's hold once
// (hold.go) and hand it to handle in a concurrency slot — or, a timeout
// activated early, to a goroutine that holds it first. handle runs one
// delivery through the stages: hold, resolve (resolve.go), step (step.go,
// commit.go), outbox (outbox.go), and settle (settle.go), which ends
// every delivery.

// runner is what one Run shares among its workers: the concurrency slots
// and the timeouts held until their due time.
type runner struct {
	d     *Dispatcher
	work  context.Context         // for holds and steps, which outlive Run's context
	stop  context.CancelCauseFunc // ends Run's receiving: see closed
	live  context.Context         // Run's receiving context: ends on shutdown
	slots chan struct{}           // one per message handled at once (WithConcurrency)
	held  atomic.Int64
	wg    sync.WaitGroup // the holding goroutines, and those of set-aside deliveries
	keys  *keyLimiter    // WithKeyLimit; nil without
}

func newRunner(d *Dispatcher, live, work context.Context, stop context.CancelCauseFunc) *runner {
	return &runner{d: d, live: live, work: work, stop: stop, slots: make(chan struct{}, d.cfg.concurrency),
		keys: newKeyLimiter(d.cfg.keyLimit, KeyLimitBacklog(d.cfg.concurrency, d.cfg.batch))}
}

// take takes a concurrency slot of slots (none if slots is nil: a
// subscription's workers have their own), waiting for one.
func (r *runner) take(slots chan struct{}) {
	if slots != nil {
		slots <- struct{}{}
	}
}

// takeRenewing takes a slot for del as take does; while it waits (slow
// steps, or steps waiting out an outage) it renews the locks of del and
// rest (the rest of its batch, waiting behind it) that are half gone, so
// that none expires — and is redelivered, spending a delivery — while it
// waits (none with lock 0). It returns false, having taken none, when ctx
// ends.
func (r *runner) takeRenewing(ctx context.Context, slots chan struct{}, del *transport.Delivery, rest []*transport.Delivery, lock time.Duration) bool {
	if slots == nil {
		return true
	}
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	var tick <-chan time.Time
	if lock > 0 {
		t := time.NewTicker(renewEvery(lock))
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-tick:
			renewHalfGone(r.work, del, lock)
			for _, next := range rest {
				renewHalfGone(r.work, next, lock)
			}
		}
	}
}

// renewHalfGone renews del's lock if less than half of lock is left.
func renewHalfGone(ctx context.Context, del *transport.Delivery, lock time.Duration) {
	if time.Until(del.LockedUntil()) < lock/2 {
		_ = del.RenewLock(ctx)
	}
}

// handle runs del, whose hold is planned (h), through the dispatcher in
// the concurrency slot taken for it (see take), which it gives back. rest
// are the deliveries of del's batch that wait behind it in the worker:
// should del's step wait out an outage, their locks are renewed too.
func (r *runner) handle(slots chan struct{}, del *transport.Delivery, h holdPlan, rest []*transport.Delivery) {
	if slots != nil {
		defer func() { <-slots }()
	}
	for attempt := 1; ; attempt++ {
		wctx, cancel := context.WithTimeout(r.work, r.d.cfg.drain)
		res := r.d.handle(wctx, del, h)
		cancel()
		if res.Outcome != Waiting {
			r.d.outage.worked()
			return
		}
		if !r.d.outage.wait(r.live, del, rest, res.Err, attempt) {
			return
		}
		h.until = time.Time{} // held until due already
	}
}

// receiver is a queue or a subscription.
type receiver interface {
	Receive(ctx context.Context, max int) ([]*transport.Delivery, error)
	ReceiveFrom(ctx context.Context, max int, partitions []int) ([]*transport.Delivery, error)
}

// worker receives from q, of parts partitions, and handles what it
// receives, each message in one of slots if slots is not nil; it hands
// timeouts activated early to r to hold until their due time.
func (d *Dispatcher) worker(ctx context.Context, r *runner, slots chan struct{}, q receiver, parts int, lock time.Duration) {
	work := r.work
	backoff := 10 * time.Millisecond
	failing := statelog.Failures{Logger: d.cfg.logger, What: "saga: receive", Attrs: []slog.Attr{slog.String("queue", d.queueName)}}
	for ctx.Err() == nil {
		batch, ok := r.d.outage.mayReceive(ctx, d.cfg.batch)
		if !ok {
			return
		}
		from, wake, ok := r.keys.waitRoom(ctx, parts)
		if !ok {
			return
		}
		ds, err := receiveFrom(ctx, q, batch, from, wake)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, transport.ErrClosed) {
				r.closed(err)
				return
			}
			if errors.Is(err, transport.ErrReceiveInterrupted) {
				continue // a partition held back has room again
			}
			failing.Failed(ctx, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
				backoff = min(2*backoff, 5*time.Second)
			}
			continue
		}
		failing.Worked(ctx)
		backoff = 10 * time.Millisecond
		// With a key limit the batch's steps run at once (see dispatch);
		// the worker receives again once they have all ended.
		var steps sync.WaitGroup
		for i, del := range ds {
			if i > 0 && ctx.Err() != nil {
				d.abandonUnstarted(work, del)
				continue
			}
			if held, ok := r.d.outage.holdBatch(ctx, ds[i:]); !ok {
				d.abandonUnstarted(work, del) // Run stops; the rest of the batch too (above)
				continue
			} else if held && !time.Now().Before(del.LockedUntil()) {
				continue // its lock ran out during the outage: the server redelivers it
			}
			h := d.planHold(del)
			if r.holdAside(del, h) {
				continue
			}
			if i > 0 && lock > 0 {
				// The rest of the batch waited behind slow steps: renew
				// the locks that are half gone, so that each step starts
				// with at least half a lock and none expires while it waits.
				for _, next := range ds[i:] {
					renewHalfGone(work, next, lock)
				}
			}
			r.dispatchIn(ctx, &steps, slots, del, h, ds[i+1:], lock)
		}
		steps.Wait()
	}
}

// closed ends Run's receiving because a receive found the connection or
// the broker closed for good (err): Run then drains and returns err.
func (r *runner) closed(err error) { r.stop(err) }

// receiveFrom receives up to max from q: from every partition if from is
// nil, else from those listed only (see WithKeyLimit), interrupting the
// receive (transport.ErrReceiveInterrupted) when wake is closed, so that
// the worker takes a partition held back again as soon as it has room.
func receiveFrom(ctx context.Context, q receiver, max int, from []int, wake <-chan struct{}) ([]*transport.Delivery, error) {
	if from == nil {
		return q.Receive(ctx, max)
	}
	rctx, interrupt := context.WithCancelCause(ctx)
	defer interrupt(nil)
	go func() {
		select {
		case <-wake:
			interrupt(transport.ErrReceiveInterrupted)
		case <-rctx.Done():
		}
	}()
	ds, err := q.ReceiveFrom(rctx, max, from)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(rctx), transport.ErrReceiveInterrupted) {
		return nil, transport.ErrReceiveInterrupted
	}
	return ds, err
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
	d.handle(ctx, del, d.planHold(del))
}

// handle is Handle for a delivery whose hold is planned (h.until is zero
// once it has been held). It holds, resolves and steps the delivery, and
// settles it (settle.go) by what the step made of it.
func (d *Dispatcher) handle(ctx context.Context, del *transport.Delivery, h holdPlan) StepResult {
	if !h.until.IsZero() && !d.holdInPlace(ctx, del, h.until) {
		return StepResult{Outcome: Abandoned}
	}
	start := d.cfg.now()
	if _, err := d.open(ctx); err != nil {
		d.abandonUnopened(ctx, del, err)
		return StepResult{Outcome: Abandoned, Err: err}
	}
	info := d.stepInfo(ctx, del, h, start)
	var res StepResult
	if info.MessageType == flushType {
		info.Saga, info.ID = del.Properties[propSaga], del.Properties[propSagaID]
		ctx = d.stepStarted(ctx, info)
		res = d.settleFlush(ctx, del, d.flushMessage(ctx, del))
	} else if info.MessageType == ReindexMessageType {
		info.Saga = del.Properties[propSaga]
		ctx = d.stepStarted(ctx, info)
		res = d.reindexMessage(ctx, del) // reindex.go
	} else {
		var st stepped
		ctx, st = d.run(ctx, del, h, &info)
		res = d.settle(ctx, del, st, &info)
	}
	res.Duration = d.cfg.now().Sub(start)
	d.recent.add(&info, res)
	if done := d.cfg.hooks.StepDone; done != nil {
		done(ctx, info, res)
	}
	return res
}

// stepInfo describes del for the hooks; it logs a timeout whose due time
// cannot be read.
func (d *Dispatcher) stepInfo(ctx context.Context, del *transport.Delivery, h holdPlan, start time.Time) StepInfo {
	info := StepInfo{Queue: d.queueName, MessageType: del.Properties[propType], Seq: del.Seq, DeliveryCount: del.DeliveryCount,
		MessageID: del.MessageID, PartitionKey: del.PartitionKey, EnqueuedAt: del.EnqueuedAt, StartedAt: start, Properties: del.Properties}
	if h.timeout {
		info.TimeoutDue = h.due
		if h.dueErr != nil {
			d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: timeout with an unreadable due time; handling it on arrival",
				slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq),
				slog.String("due", truncate(del.Properties[timeout.PropertyDue], 64)), slog.Any("error", h.dueErr))
		}
	}
	return info
}

// run resolves a saga's message and runs its step on each saga it goes
// to, unless it is to be dead-lettered at once: no saga of the
// dispatcher takes it, or it is a timeout that arrived too far ahead of
// its due time. It returns the context StepStarted gave.
func (d *Dispatcher) run(ctx context.Context, del *transport.Delivery, h holdPlan, info *StepInfo) (context.Context, stepped) {
	// Decode and correlate first, so that StepStarted knows the instance
	// when there is one.
	ts, err := d.resolve(ctx, del, info)
	ctx = d.stepStarted(ctx, *info)
	switch {
	case err != nil:
		return ctx, stepped{deadLetter: ReasonUnknownType, err: err}
	case h.notDue != nil:
		return ctx, stepped{deadLetter: ReasonTimeoutNotDue, err: h.notDue}
	}
	return ctx, d.runTargets(ctx, del, ts, info)
}

func (d *Dispatcher) stepStarted(ctx context.Context, info StepInfo) context.Context {
	if h := d.cfg.hooks.StepStarted; h != nil {
		return h(ctx, info)
	}
	return ctx
}
