package saga

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// NotFoundContext is what a NotFoundPolicy.Handler gets besides the
// message: what is known of the missing instance, and the messages it may
// send. Unlike a Context there is no state to change: the messages are
// sent after the handler returns nil, not committed with anything.
type NotFoundContext struct {
	step        *stepState
	completed   bool
	completedAt time.Time
}

// Saga returns the saga's name.
func (c *NotFoundContext) Saga() string { return c.step.sagaName }

// ID returns the ID the message correlates to.
func (c *NotFoundContext) ID() string { return c.step.id }

// Completed reports whether the instance existed and completed; at is
// when. It is false for an instance that never existed, and for one whose
// tombstone expired (see WithCompletedRetention).
func (c *NotFoundContext) Completed() (at time.Time, ok bool) { return c.completedAt, c.completed }

// Now returns the dispatcher's clock, in UTC (as Context.Now).
func (c *NotFoundContext) Now() time.Time { return c.step.now.UTC() }

// Incoming returns the message being handled, with its transport
// metadata. Do not modify it.
func (c *NotFoundContext) Incoming() *transport.Message { return c.step.in }

// Send sends m to queue once the handler returns nil. Invalid requests
// are refused at the call, as by Context.Send.
func (c *NotFoundContext) Send(queue string, m any, opts ...SendOption) error {
	return c.step.send(queue, m, opts)
}

// Reply sends m to the ReplyTo queue of the message being handled, with
// its CorrelationID (or, if it has none, its MessageID), once the handler
// returns nil. Without a ReplyTo it returns an error matching
// ErrNoReplyTo and ErrPermanent.
func (c *NotFoundContext) Reply(m any, opts ...SendOption) error {
	return c.step.reply(c.step.replyAddress(), m, opts)
}

// Publish publishes m as Context.Publish does, once the handler returns
// nil.
func (c *NotFoundContext) Publish(m any, opts ...SendOption) error {
	return c.step.publish(m, opts)
}

// notFound applies t's saga's NotFoundPolicy to a message for a missing
// instance; tombstone is the completed instance's record, if it is kept.
func (d *Dispatcher) notFound(ctx context.Context, t *target, key, identity string, del *transport.Delivery, tombstone *record) (Outcome, error) {
	p := t.rt.policy()
	switch {
	case p.Handler != nil:
		s := &stepState{ctx: ctx, d: d, rt: t.rt, sagaName: t.rt.Name(), id: t.id, key: key, identity: "notfound\x00" + identity,
			in: del.Message, rec: &record{}, now: d.cfg.now(), codec: d.cfg.codec}
		c := &NotFoundContext{step: s}
		if tombstone != nil {
			c.completed, c.completedAt = true, tombstone.Updated
		}
		if err := runNotFound(ctx, p.Handler, c, t.m); err != nil {
			return "", &HandlerError{Saga: t.rt.Name(), ID: t.id, Message: del.Properties[propType], Err: err}
		}
		for _, e := range s.rec.Outbox {
			if err := d.carryOut(ctx, key, s.rec, e); err != nil {
				return "", err
			}
		}
		return NotFoundHandled, nil
	case p.Hook != nil:
		if err := p.Hook(ctx, t.rt.Name(), t.id, t.m); err != nil {
			return "", err
		}
	case p.DeadLetter:
		return "", Permanent(fmt.Errorf("%w: saga %s/%s", ErrSagaNotFound, t.rt.Name(), t.id))
	default:
		d.cfg.logger.LogAttrs(ctx, slog.LevelDebug, "saga: no instance for message; ignored",
			slog.String("saga.type", t.rt.Name()), slog.String("saga.id", t.id), slog.Bool("completed", tombstone != nil))
	}
	return Dropped, nil
}

func runNotFound(ctx context.Context, h func(context.Context, *NotFoundContext, any) error, c *NotFoundContext, m any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	return h(ctx, c, m)
}
