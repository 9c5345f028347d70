package saga

import (
	"fmt"
	"time"

	"github.com/jetsaga/jetsaga/transport"
)

// Context is what a handler gets besides the message: the instance's data
// to read and change, and the effects it may ask for. The effects — sent
// messages, timeouts requested or cancelled, completion — take place only
// if the step commits, together with the new Data; if the handler returns
// an error, none of them happen.
type Context[S any] struct {
	// Data is the instance's state. A new instance starts with S's zero
	// value.
	Data S
	step *step
}

// ID returns the instance's ID (what the message's Finder returned).
func (c *Context[S]) ID() string { return c.step.id }

// IsNew reports whether this step creates the instance.
func (c *Context[S]) IsNew() bool { return c.step.isNew }

// Now returns the current time: the dispatcher's clock, which in sagatest
// is virtual.
func (c *Context[S]) Now() time.Time { return c.step.now }

// Incoming returns the message being handled, with its transport
// metadata (Seq, EnqueuedAt, ScheduledAt, MessageID, ...). Do not modify it.
func (c *Context[S]) Incoming() *transport.Message { return c.step.in }

// Send sends m to queue.
func (c *Context[S]) Send(queue string, m any, opts ...SendOption) error {
	if err := transport.ValidateQueueName(queue); err != nil {
		return err
	}
	return c.step.send(queue, m, opts)
}

// Publish sends m to every queue subscribed to its type on the
// dispatcher (WithSubscribers). With no subscriber it does nothing.
func (c *Context[S]) Publish(m any, opts ...SendOption) error {
	for _, q := range c.step.subscribers(nameOf(m)) {
		if err := c.step.send(q, m, opts); err != nil {
			return err
		}
	}
	return nil
}

// Reply sends m to the ReplyTo queue of the message being handled, with
// its CorrelationID (or, if it has none, its MessageID).
func (c *Context[S]) Reply(m any, opts ...SendOption) error {
	return c.step.reply(c.step.replyAddress(), m, opts)
}

// ReplyToOriginator sends m to the ReplyTo queue of the message that
// started the instance, like Reply did then.
func (c *Context[S]) ReplyToOriginator(m any, opts ...SendOption) error {
	return c.step.reply(c.step.rec.Originator, m, opts)
}

// TimeoutHandle names a requested timeout. Keep it in Data to cancel or
// reschedule the timeout in a later step.
type TimeoutHandle string

// RequestTimeout asks for payload to come back to this instance after d,
// to the OnTimeout handler for its type.
func (c *Context[S]) RequestTimeout(d time.Duration, payload any) (TimeoutHandle, error) {
	return c.RequestTimeoutAt(c.step.now.Add(d), payload)
}

// RequestTimeoutAt asks for payload to come back to this instance at at.
func (c *Context[S]) RequestTimeoutAt(at time.Time, payload any) (TimeoutHandle, error) {
	return c.step.requestTimeout(at, payload)
}

// CancelTimeout cancels a timeout requested earlier. If it has fired but
// not yet been handled, it is dropped when it arrives. Cancelling an
// unknown or already handled timeout does nothing.
func (c *Context[S]) CancelTimeout(h TimeoutHandle) {
	c.step.cancelTimeout(string(h))
}

// RescheduleTimeout cancels h and requests the same payload again for at,
// returning the new handle. If h is no longer pending it returns an error.
func (c *Context[S]) RescheduleTimeout(h TimeoutHandle, at time.Time, payload any) (TimeoutHandle, error) {
	if _, ok := c.step.rec.Timeouts[string(h)]; !ok {
		return "", fmt.Errorf("saga %s/%s: timeout %s is not pending", c.step.sagaName, c.step.id, h)
	}
	c.CancelTimeout(h)
	return c.RequestTimeoutAt(at, payload)
}

// PendingTimeout describes a timeout requested and not yet handled.
type PendingTimeout struct {
	Handle TimeoutHandle
	Type   string
	At     time.Time
}

// PendingTimeouts lists the instance's pending timeouts, including those
// requested in this step.
func (c *Context[S]) PendingTimeouts() []PendingTimeout { return c.step.pending() }

// MarkComplete ends the instance when the step commits: its pending
// timeouts are cancelled, its state removed, and messages that arrive for
// it later follow the saga's NotFoundPolicy.
func (c *Context[S]) MarkComplete() { c.step.rec.Completed = true }

// SendOption sets transport properties of an outgoing message.
type SendOption func(*envelope)

// WithSessionID sets the outgoing message's SessionID.
func WithSessionID(id string) SendOption { return func(e *envelope) { e.SessionID = id } }

// WithCorrelationID sets the outgoing message's CorrelationID.
func WithCorrelationID(id string) SendOption { return func(e *envelope) { e.CorrelationID = id } }

// WithReplyTo sets the queue replies to the outgoing message go to.
func WithReplyTo(queue string) SendOption { return func(e *envelope) { e.ReplyTo = queue } }

// WithProperty sets an application property of the outgoing message.
func WithProperty(key, value string) SendOption {
	return func(e *envelope) {
		if e.Properties == nil {
			e.Properties = make(map[string]string)
		}
		e.Properties[key] = value
	}
}
