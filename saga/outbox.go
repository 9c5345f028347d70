package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// The outbox stage: the effects a step committed (messages to send or
// publish, timeouts to schedule or cancel) are carried out after the
// commit, each with an ID fixed in the record so that doing it again is
// deduplicated; effects that cannot go out yet are retried by a flush
// message the dispatcher schedules on its own queue.

// carryOutInMemory carries out an outbox of timeouts to schedule and cancel
// and empties rec.Outbox (with the refs of the scheduled timeouts in
// rec.Timeouts) in memory only: the stored record keeps the outbox until
// the next commit on the instance writes the record without it. That
// saves the Put that would clear it, and is safe because carrying such an
// outbox out again, at any time, changes nothing: Schedule is idempotent
// on the timeout's ID and returns its ref while it is pending
// (timeout.Scheduler), and once it fired its token is no longer pending
// in a record that dropped the outbox — a schedule made again after the
// engine forgot the ID could only deliver a timeout that the token check
// drops; Cancel of what is no longer pending reports ErrNotFound or
// ErrAlreadyFired, which are ignored. A step that loads the record from
// the store carries such an outbox out again before it runs, which also
// finishes the work of a dispatcher that crashed before carrying it out.
func (d *Dispatcher) carryOutInMemory(ctx context.Context, key string, rec *record) error {
	for _, e := range rec.Outbox {
		if err := d.carryOut(ctx, key, rec, e); err != nil {
			return err
		}
	}
	rec.Outbox = nil
	return nil
}

// carryOutAndClear carries out the effects in rec.Outbox, whose IDs the
// committed record fixes, then stores rec without them (and with the refs
// of the timeouts it scheduled). Carrying out effects twice is harmless:
// sends and schedules are deduplicated by MessageID within the queue's
// duplicate window, and cancels are idempotent.
func (d *Dispatcher) carryOutAndClear(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	for _, e := range rec.Outbox {
		if err := d.carryOut(ctx, key, rec, e); err != nil {
			return 0, err
		}
	}
	rec.Outbox = nil
	return d.records.commit(ctx, key, rec, rev)
}

// carryOut carries out one effect of rec's outbox.
func (d *Dispatcher) carryOut(ctx context.Context, key string, rec *record, e effect) error {
	switch e.Kind {
	case effectSend:
		q, err := d.broker.Queue(ctx, e.Queue)
		if err != nil {
			return fmt.Errorf("saga: sending %s to %s: %w", e.Msg.Type, e.Queue, err)
		}
		m := transportMessage(e.Msg)
		if _, err := q.Send(ctx, m); errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
			d.dropEffect(ctx, key, e, err)
		} else if err != nil {
			return fmt.Errorf("saga: sending %s to %s: %w", e.Msg.Type, e.Queue, err)
		} else if h := d.cfg.hooks.Sent; h != nil {
			h(ctx, e.Queue, m)
		}
	case effectPublish:
		var t *transport.Topic
		var err error
		if d.cfg.topic != nil && d.cfg.topic.Name == e.Queue {
			t, err = d.openTopic(ctx)
		} else {
			t, err = d.broker.Topic(ctx, e.Queue) // committed under an earlier WithTopic
		}
		if err != nil {
			return fmt.Errorf("saga: publishing %s to topic %s: %w", e.Msg.Type, e.Queue, err)
		}
		if _, err := t.Send(ctx, eventMessage(e.Msg)); errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
			d.dropEffect(ctx, key, e, err)
		} else if err != nil {
			return fmt.Errorf("saga: publishing %s to topic %s: %w", e.Msg.Type, e.Queue, err)
		}
	case effectSchedule:
		ref, err := d.cfg.timeouts.Schedule(ctx, timeoutOf(e))
		if errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
			d.dropEffect(ctx, key, e, err)
			return nil
		}
		if err != nil {
			return fmt.Errorf("saga: scheduling timeout %s: %w", e.Msg.Type, err)
		}
		if te, ok := rec.Timeouts[e.Token]; ok {
			te.Ref = ref
			rec.Timeouts[e.Token] = te
		}
	case effectCancel:
		err := d.cfg.timeouts.Cancel(ctx, e.Ref)
		if err != nil && !errors.Is(err, timeout.ErrNotFound) && !errors.Is(err, timeout.ErrAlreadyFired) {
			return fmt.Errorf("saga: cancelling timeout %s: %w", e.Ref, err)
		}
	}
	return nil
}

// timeoutOf is the timeout a schedule effect asks for.
func timeoutOf(e effect) timeout.Timeout {
	m := transportMessage(e.Msg)
	return timeout.Timeout{
		ID: cmp.Or(e.ID, e.Token), Queue: e.Queue, At: e.At, Message: m,
		Saga: m.Properties[propSaga], Instance: m.Properties[propSagaID], Engine: e.Engine, PartitionKey: m.PartitionKey,
	}
}

// dropEffect logs an effect that can never be carried out (the step
// checks effects before commit, so only a record written otherwise has
// one) and leaves it out, so that it cannot block the instance forever.
func (d *Dispatcher) dropEffect(ctx context.Context, key string, e effect, err error) {
	typ := ""
	if e.Msg != nil {
		typ = e.Msg.Type
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: dropping an effect the transport refuses",
		slog.String("key", key), slog.String("kind", string(e.Kind)), slog.String("type", typ), slog.Any("error", err))
}

// flushType is the type of the dispatcher's own messages that retry the
// pending effects of a committed step (see EffectsPending).
const flushType = "jetsaga.flush"

// flushLater schedules, for each target, a message to the dispatcher's
// own queue that carries out its instance's pending effects. Scheduled
// messages are not held back by a full queue.
func (d *Dispatcher) flushLater(ctx context.Context, ts []*target, origin string) error {
	var errs []error
	for _, t := range ts {
		errs = append(errs, d.scheduleFlush(ctx, t.rt.Name(), t.id, origin, 1))
	}
	return errors.Join(errs...)
}

func (d *Dispatcher) scheduleFlush(ctx context.Context, sagaName, id, origin string, n int) error {
	q, err := d.open(ctx)
	if err != nil {
		return err
	}
	m := &transport.Message{
		MessageID: effectID(storeKey(sagaName, id), "flush\x00"+origin, n),
		Properties: map[string]string{
			propType: flushType, propSaga: sagaName, propSagaID: id, propOrigin: origin, propAttempt: strconv.Itoa(n),
		},
	}
	_, err = q.Schedule(ctx, m, d.cfg.now().Add(d.cfg.retry.Backoff(min(n, 16))))
	return err
}

// A flushed message is what a message of flushType did.
type flushed struct {
	saga, id, origin string
	attempt          int // the message's: 1 for the first
	outcome          Outcome
	err              error
}

// flushMessage handles a message of flushType: it carries out the pending
// effects of one instance. It gives up only on a record it cannot read;
// settleFlush schedules it again if they still cannot be carried out.
func (d *Dispatcher) flushMessage(ctx context.Context, del *transport.Delivery) flushed {
	f := flushed{saga: del.Properties[propSaga], id: del.Properties[propSagaID], origin: del.Properties[propOrigin]}
	f.attempt, _ = strconv.Atoi(del.Properties[propAttempt])
	if transport.ValidateQueueName(f.saga) != nil || validateID(f.id) != nil {
		f.outcome, f.err = Dropped, Permanent(fmt.Errorf("%w: pending-effects message for %.64q/%.64q", ErrMalformed, f.saga, f.id))
		return f
	}
	f.outcome, f.err = d.carryOutLeftover(ctx, f.saga, f.id)
	return f
}

// carryOutLeftover carries out the outbox stored for the instance, if
// there is one: Handled if it did, Duplicate if there was none (left),
// Dropped if the instance is gone.
func (d *Dispatcher) carryOutLeftover(ctx context.Context, sagaName, id string) (Outcome, error) {
	u, err := d.update(ctx, update{saga: sagaName, id: id, change: func(*record) (bool, error) { return false, nil }})
	switch {
	case errors.Is(err, ErrNotFound) && u.rec == nil:
		return Dropped, nil
	case err != nil:
		return "", err
	case u.carried:
		return Handled, nil
	}
	return Duplicate, nil
}
