package saga

import (
	"fmt"
	"slices"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
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
	step *stepState
}

// ID returns the instance's ID (what the message's Finder returned).
func (c *Context[S]) ID() string { return c.step.id }

// IsNew reports whether this step creates the instance.
func (c *Context[S]) IsNew() bool { return c.step.isNew }

// Now returns the time the step started, in UTC (as times come back from
// the store and from messages): the dispatcher's clock, which in sagatest
// is virtual. It is the same instant for the whole step, and the instant
// RequestTimeout and RequestTimeoutBy count from.
func (c *Context[S]) Now() time.Time { return c.step.now.UTC() }

// Incoming returns the message being handled, with its transport
// metadata (Seq, EnqueuedAt, ScheduledAt, MessageID, ...). Do not modify it.
//
// For a timeout, EnqueuedAt is its activation time — when its message
// became active on the queue — and ScheduledAt the activation time its
// engine asked for, not its due time: a timeout activated early (the
// default on JetStream, see timeout.WithEarlyActivation) is enqueued up to
// its engine's lead before its due time and held until then. TimeoutDue
// returns the due time.
func (c *Context[S]) Incoming() *transport.Message { return c.step.in }

// TimeoutDue returns the due time of the timeout being handled, in UTC:
// the instant it was requested for (RequestTimeoutAt, or computed by
// RequestTimeout or RequestTimeoutBy), which its handler never runs
// before. It is zero in other handlers. Now minus TimeoutDue is how late
// the handler runs; the activation time is Incoming().EnqueuedAt.
func (c *Context[S]) TimeoutDue() time.Time { return c.step.timeoutDue.UTC() }

// Occurrence returns the number of the occurrence being handled of a
// recurring timeout (RequestRecurringTimeout), from 1, whose nominal time
// is TimeoutDue; 0 in other handlers. An occurrence its catch-up policy
// skipped keeps its number: the next one handled shows the gap.
func (c *Context[S]) Occurrence() int { return c.step.occurrence }

// Send sends m to queue.
//
// Like every effect, it is checked at the call: an invalid queue name, a
// message that cannot be encoded or that the transport would refuse
// (invalid property, too large) is an error that matches ErrPermanent and
// the cause (transport.ErrInvalidQueueName, transport.ErrInvalidMessage,
// transport.ErrMessageTooLarge); returned from the handler, it
// dead-letters the message at once with ReasonPermanent.
func (c *Context[S]) Send(queue string, m any, opts ...SendOption) error {
	return c.step.send(queue, m, opts)
}

// Publish publishes event m: to the dispatcher's topic (WithTopic), where
// every endpoint whose sagas start or handle m's type receives it, and to
// the queues listed for its type with WithSubscribers. With neither it
// does nothing. Like Send, it happens once the step commits.
func (c *Context[S]) Publish(m any, opts ...SendOption) error {
	return c.step.publish(m, opts)
}

// Reply sends m to the ReplyTo queue of the message being handled, with
// its CorrelationID (or, if it has none, its MessageID). Without a
// ReplyTo it returns an error matching ErrNoReplyTo and ErrPermanent.
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
// to the OnTimeout handler for its type. d counts from the step's start
// (Now), not from the call: the timeout is due at c.Now().Add(d), the
// same on every run of the step, so compare with c.Now(), not time.Now(). A payload type the saga has no
// OnTimeout for is refused with an error matching ErrNoTimeoutHandler
// and ErrPermanent.
func (c *Context[S]) RequestTimeout(d time.Duration, payload any) (TimeoutHandle, error) {
	return c.RequestTimeoutAt(c.step.now.Add(d), payload)
}

// RequestTimeoutAt asks for payload to come back to this instance at at.
func (c *Context[S]) RequestTimeoutAt(at time.Time, payload any) (TimeoutHandle, error) {
	return c.step.requestTimeout(at, payload, nil)
}

// CancelTimeout cancels a timeout requested earlier. If it has fired but
// not yet been handled, it is dropped when it arrives. Cancelling an
// unknown or already handled timeout does nothing. Cancelling a recurring
// timeout ends its series, whichever occurrence is pending; in the handler
// of one of its occurrences, it cancels the next.
func (c *Context[S]) CancelTimeout(h TimeoutHandle) {
	c.step.cancelTimeout(string(h))
}

// RescheduleTimeout replaces the pending timeout h with a new one: h is
// cancelled, and payload — the payload given here, which the new timeout
// carries; h's own payload is not kept — is requested for at. It returns
// the new handle. Its type need not be h's, but needs an OnTimeout.
//
// Rescheduling a recurring timeout ends its series: the new timeout is a
// one-shot.
//
// If h is not pending (handled, cancelled, or the timeout being handled
// now: see Timeout), it changes nothing and returns an error matching
// ErrTimeoutNotPending and ErrPermanent; to request a timeout whether or
// not h is still pending, call CancelTimeout and RequestTimeoutAt.
func (c *Context[S]) RescheduleTimeout(h TimeoutHandle, at time.Time, payload any) (TimeoutHandle, error) {
	if !c.IsPending(h) {
		return "", Permanent(fmt.Errorf("saga %s/%s: timeout %s: %w", c.step.sagaName, c.step.id, h, ErrTimeoutNotPending))
	}
	outbox := slices.Clone(c.step.rec.Outbox)
	te := c.step.rec.Timeouts[string(h)]
	c.CancelTimeout(h)
	nh, err := c.RequestTimeoutAt(at, payload)
	if err != nil {
		// Undo the cancel: a refused reschedule changes nothing.
		c.step.rec.Outbox = outbox
		c.step.rec.Timeouts[string(h)] = te
		return "", err
	}
	return nh, nil
}

// IsPending reports whether the timeout h is pending: requested (in an
// earlier step or this one), and not yet handled or cancelled. The
// timeout being handled (Timeout) is no longer pending.
func (c *Context[S]) IsPending(h TimeoutHandle) bool {
	_, ok := c.step.rec.Timeouts[string(h)]
	return ok
}

// Timeout returns the handle of the timeout being handled — the one
// RequestTimeout returned for it — in an OnTimeout handler, and "" in
// other handlers. Compare it with handles kept in Data to tell which of
// several timeouts of one type fired.
func (c *Context[S]) Timeout() TimeoutHandle { return TimeoutHandle(c.step.timeout) }

// PendingTimeout describes a timeout requested and not yet handled.
type PendingTimeout struct {
	Handle TimeoutHandle
	Type   string
	At     time.Time
	// Rule is the calendar rule a timeout requested with RequestTimeoutBy
	// was computed by, as calendar.Rule.String writes it (ParseRule reads
	// it back); "" for a timeout requested by a duration or an instant.
	Rule string
	// Calendar names the calendar and version At was computed with; zero
	// if the rule needs none.
	Calendar calendar.Ref
	// From is the instant the rule counted from (the handler's Now, or
	// RuleFrom; for a recurring timeout's later occurrences, the nominal
	// time of the one before); zero without a rule.
	From time.Time
	// Recurring marks the pending occurrence of a recurring timeout
	// (RequestRecurringTimeout, RequestRecurringTimeoutBy): Every is its
	// interval (zero for a rule's), and Occurrence its number, from 1.
	Recurring  bool
	Every      time.Duration
	Occurrence int
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

// WithPartitionKey sets the outgoing message's PartitionKey, which
// chooses its partition on a queue with several (transport.Message's
// PartitionKey): give one tenant's messages one key, and a burst of one
// tenant's work fills only its partition. A worker of a release before
// this option carries out an outbox without the key, which sends the
// message to another partition, where its MessageID is not known: during a
// rolling deploy from such a release, a message whose step crashed before
// its effects were carried out may be delivered twice.
func WithPartitionKey(key string) SendOption { return func(e *envelope) { e.PartitionKey = key } }

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
