package saga

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetsaga/jetsaga/calendar"
	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Option configures a Dispatcher.
type Option interface{ apply(*config) error }

type optionFunc func(*config) error

func (f optionFunc) apply(c *config) error { return f(c) }

type config struct {
	sagas       []Saga
	queue       transport.QueueConfig
	timeouts    timeout.Scheduler
	codec       Codec
	logger      *slog.Logger
	hooks       Hooks
	concurrency int
	retry       RetryPolicy
	killSwitch  *KillSwitch // WithKillSwitch; nil: off
	conflicts   int
	drain       time.Duration
	subscribers map[string][]string
	retention   time.Duration
	now         func() time.Time
	cacheSize   int
	batch       int
	topic       *transport.TopicConfig  // WithTopic
	calendars   *calendar.Registry      // WithCalendars
	currentCal  map[string]calendar.Ref // WithCalendars: the version requests use, by name
	defaultCal  string                  // WithCalendars: the calendar of a request that names none
	versionWait time.Duration           // WithVersionWait

	inboxRetention time.Duration // WithInboxRetention; 0: InboxRetention(queue)

	services []Service // WithService

	keyLimit int // WithKeyLimit

	// loseCompletion (tests): a step whose message it returns true for
	// does not complete it, as if its worker died right after the commit.
	loseCompletion func(*transport.Delivery) bool
}

// RetryPolicy says how a failing message is retried before it is
// dead-lettered.
type RetryPolicy struct {
	// Immediate is how many times a failed step is run again at once.
	// Default: 3.
	Immediate int
	// Delayed is how many times the message is then rescheduled, with
	// Backoff between tries. Default: 3.
	Delayed int
	// Backoff returns the delay before delayed retry n (1-based).
	// Default: 10s, 20s, 40s, ... up to 10 minutes.
	Backoff func(n int) time.Duration
}

// NoRetry dead-letters a failing message at once.
var NoRetry = RetryPolicy{Immediate: -1, Delayed: -1}

func defaultBackoff(n int) time.Duration {
	return min(10*time.Second<<(n-1), 10*time.Minute)
}

// WithSagas registers saga definitions. Required, at least one.
func WithSagas(sagas ...Saga) Option {
	return optionFunc(func(c *config) error {
		c.sagas = append(c.sagas, sagas...)
		return nil
	})
}

// WithQueueConfig sets the config the dispatcher opens its queue with;
// its Name is set to the dispatcher's queue. Default: the defaults of
// transport.QueueConfig.
func WithQueueConfig(qc transport.QueueConfig) Option {
	return optionFunc(func(c *config) error {
		name := c.queue.Name
		c.queue, c.queue.Name = qc, name
		return nil
	})
}

// WithTimeouts sets the timeout engine. Default: timeout.NewQueue on
// the dispatcher's broker, which on JetStream activates timeouts early
// (timeout.DefaultEarlyActivation) for the dispatcher to hold until their
// due time; give timeout.NewQueue(b, timeout.WithEarlyActivation(0))
// for messages that activate at their due time or after.
func WithTimeouts(s timeout.Scheduler) Option {
	return optionFunc(func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil timeout scheduler", ErrInvalidOption)
		}
		c.timeouts = s
		return nil
	})
}

// WithCodec sets the codec of message bodies and saga data. Default: JSON.
func WithCodec(codec Codec) Option {
	return optionFunc(func(c *config) error {
		if codec == nil {
			return fmt.Errorf("%w: nil codec", ErrInvalidOption)
		}
		c.codec = codec
		return nil
	})
}

// WithLogger sets the logger. Default: slog.Default().
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		c.logger = l
		return nil
	})
}

// WithHooks adds callbacks for metrics and tracing. Hooks given by
// several WithHooks options are all called, in the order given: each
// StepStarted gets the context the one before returned, and StepDone
// runs in the same order.
func WithHooks(h Hooks) Option {
	return optionFunc(func(c *config) error {
		c.hooks = c.hooks.then(h)
		return nil
	})
}

// then returns hooks that call h's after a's.
func (a Hooks) then(h Hooks) Hooks {
	out := a
	switch {
	case a.StepStarted == nil:
		out.StepStarted = h.StepStarted
	case h.StepStarted != nil:
		first, second := a.StepStarted, h.StepStarted
		out.StepStarted = func(ctx context.Context, info StepInfo) context.Context {
			return second(first(ctx, info), info)
		}
	}
	switch {
	case a.StepDone == nil:
		out.StepDone = h.StepDone
	case h.StepDone != nil:
		first, second := a.StepDone, h.StepDone
		out.StepDone = func(ctx context.Context, info StepInfo, res StepResult) {
			first(ctx, info, res)
			second(ctx, info, res)
		}
	}
	switch {
	case a.Outgoing == nil:
		out.Outgoing = h.Outgoing
	case h.Outgoing != nil:
		first, second := a.Outgoing, h.Outgoing
		out.Outgoing = func(ctx context.Context, props map[string]string) {
			first(ctx, props)
			second(ctx, props)
		}
	}
	switch {
	case a.TimeoutLate == nil:
		out.TimeoutLate = h.TimeoutLate
	case h.TimeoutLate != nil:
		first, second := a.TimeoutLate, h.TimeoutLate
		out.TimeoutLate = func(ctx context.Context, l LateTimeout) {
			first(ctx, l)
			second(ctx, l)
		}
	}
	switch {
	case a.Sent == nil:
		out.Sent = h.Sent
	case h.Sent != nil:
		first, second := a.Sent, h.Sent
		out.Sent = func(ctx context.Context, queue string, m *transport.Message) {
			first(ctx, queue, m)
			second(ctx, queue, m)
		}
	}
	return out
}

// WithConcurrency sets how many messages are handled at once.
// Default: 8.
func WithConcurrency(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: concurrency %d: must be at least 1", ErrInvalidOption, n)
		}
		c.concurrency = n
		return nil
	})
}

// WithRecordCache sets how many saga records a dispatcher keeps in memory
// after writing them, so that the next step on an instance skips loading
// it (see the package documentation, "All or nothing"). 0 turns the cache
// off. Default: DefaultRecordCache. The cache needs a Store whose
// revisions never come back for a key (a record deleted or expired and
// written again must not reach a revision it had before): kvstore and
// memstore qualify; turn it off for a store that reuses revisions. A
// dispatcher whose store is a UnitStore has no cache: its steps load in
// their unit of work.
func WithRecordCache(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: record cache %d: must not be negative", ErrInvalidOption, n)
		}
		c.cacheSize = n
		return nil
	})
}

// WithReceiveBatch sets how many messages each of the dispatcher's workers
// receives at once. It handles them one after the other (with
// WithKeyLimit, at once, each in a concurrency slot); before each step
// it renews the locks of the batch's waiting messages that have less than
// half their LockDuration left, so a step that takes longer than half the
// LockDuration can still make the next one's lock expire (it is then
// redelivered and, if it had been handled, deduplicated). Larger batches
// save receive requests; 1 receives one message at a time. Default: 8.
func WithReceiveBatch(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: receive batch %d: must be at least 1", ErrInvalidOption, n)
		}
		c.batch = n
		return nil
	})
}

// WithRetry sets the retry policy. Default: RetryPolicy's defaults.
func WithRetry(p RetryPolicy) Option {
	return optionFunc(func(c *config) error {
		if p.Backoff == nil {
			p.Backoff = defaultBackoff
		}
		c.retry = p
		return nil
	})
}

// WithConflictRetries sets how many times a step is run again on fresh
// state after a concurrent update, before it counts as a failure.
// Default: 10.
func WithConflictRetries(n int) Option {
	return optionFunc(func(c *config) error {
		if n < 0 {
			return fmt.Errorf("%w: conflict retries %d: must not be negative", ErrInvalidOption, n)
		}
		c.conflicts = n
		return nil
	})
}

// WithDrainTimeout bounds each step, and so how long Run waits for the
// messages in flight after its context ends. Default: 30s.
func WithDrainTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: drain timeout %v: must be positive", ErrInvalidOption, d)
		}
		c.drain = d
		return nil
	})
}

// DefaultRetention is how long a completed instance's tombstone is kept
// by default (see WithCompletedRetention).
const DefaultRetention = 7 * 24 * time.Hour

// WithCompletedRetention sets how long the tombstone of a completed
// instance is kept: its inbox, which stops a redelivered or late message
// from starting the finished instance again, and its completion, which a
// NotFoundContext reports. This is the window in which a redelivered
// starting message cannot restart a finished instance; after it the
// record expires and such a message starts a new instance with the same
// ID. Default: DefaultRetention (7 days). It needs a store that can let
// records expire (ExpiringStore, as kvstore and memstore are); with any
// other store tombstones are kept for good.
func WithCompletedRetention(d time.Duration) Option {
	return optionFunc(func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: completed retention %v: must be positive", ErrInvalidOption, d)
		}
		c.retention = d
		return nil
	})
}

// WithSubscribers makes Context.Publish of messages of type M send them
// to the given queues.
func WithSubscribers[M any](queues ...string) Option {
	return optionFunc(func(c *config) error {
		for _, q := range queues {
			if err := transport.ValidateQueueName(q); err != nil {
				return fmt.Errorf("%w: subscriber: %w", ErrInvalidOption, err)
			}
		}
		name := MessageName[M]()
		c.subscribers[name] = append(c.subscribers[name], queues...)
		return nil
	})
}

// Hooks are optional callbacks for metrics and tracing. Unset hooks cost
// nothing.
type Hooks struct {
	// StepStarted is called before a message is handled, after it was
	// decoded and correlated (so that StepInfo names the instance; a
	// Finder runs before it); the context it returns (e.g. with a span)
	// is used for the handler and the commit.
	StepStarted func(context.Context, StepInfo) context.Context
	// StepDone is called after a message is settled.
	StepDone func(context.Context, StepInfo, StepResult)
	// Outgoing is called for each message a handler sends, publishes,
	// replies or requests as a timeout, when it asks for it, with the
	// step's context (the one StepStarted returned) and the message's
	// properties, to which it may add (a W3C traceparent, say: the
	// properties travel with the message and come back in the receiving
	// step's StepInfo.Properties). Keys must be 1-64 characters of
	// [A-Za-z0-9_-], values valid UTF-8 without control characters.
	Outgoing func(ctx context.Context, props map[string]string)
	// TimeoutLate is called for a timeout handled more than its type's
	// catch-up tolerance after its due time (OnTimeout, CatchUp,
	// HandleLate), once its step committed, with what its policy did.
	// Types without a tolerance never call it.
	TimeoutLate func(ctx context.Context, late LateTimeout)
	// Sent is called for each message a step sent to a queue (Send,
	// Reply, ReplyToOriginator, a NotFoundPolicy Handler's), once the
	// queue accepted it, with the message as sent; not for timeouts,
	// nor events published to a topic. A step that carries out the
	// effects of an earlier step (after a crash) calls it for those
	// messages, which may then be duplicates the queue dropped. Read
	// only.
	Sent func(ctx context.Context, queue string, m *transport.Message)
}

// StepInfo identifies a step for hooks.
//
// Saga and ID name the instance. In StepStarted they are set for a
// timeout, for a message whose type one saga handles (once decoded and
// correlated), and for the dispatcher's own retry of pending effects; they
// are empty for a message no saga handles, and ID is empty for one that
// cannot be decoded or correlated. A message type several sagas handle
// leaves both empty in StepStarted; StepDone then names the last saga
// that handled it.
type StepInfo struct {
	Queue, MessageType, Saga, ID string
	Seq                          uint64
	DeliveryCount                int
	// MessageID is the incoming message's MessageID (may be empty).
	MessageID string
	// PartitionKey is the incoming message's PartitionKey (may be empty).
	PartitionKey string
	// EnqueuedAt is when the message became active on the queue.
	EnqueuedAt time.Time
	// TimeoutDue is the due time of a timeout, zero for other messages:
	// EnqueuedAt minus TimeoutDue is how late it was activated, and
	// StartedAt minus TimeoutDue how late its handler got it. A timeout
	// activated early (by default on JetStream: timeout.WithEarlyActivation)
	// has an EnqueuedAt before TimeoutDue; it is held until TimeoutDue
	// before StepStarted is called. A handler reads it as
	// Context.TimeoutDue.
	TimeoutDue time.Time
	// StartedAt is when the step began, by the dispatcher's clock (after
	// any hold of an early-activated timeout): StartedAt minus TimeoutDue
	// is how late the timeout's handler got it.
	StartedAt time.Time
	// Properties are the incoming message's properties. Read only.
	Properties map[string]string
}

// StepResult reports how a step ended.
type StepResult struct {
	Outcome   Outcome
	Err       error
	Duration  time.Duration
	Conflicts int
}

// Outcome is how a message was settled.
type Outcome string

const (
	Handled Outcome = "handled" // committed and completed
	// EffectsPending: the step committed (its change stands, the message
	// is completed and will not be redelivered), but its effects could
	// not all be carried out yet, e.g. a destination queue is full
	// (StepResult.Err matches ErrEffectsPending and the cause). They are
	// kept with the instance and carried out, exactly once, by the next
	// step on the instance or by a retry the dispatcher schedules on its
	// own queue, whichever comes first; the retry repeats with
	// RetryPolicy.Backoff until they are out — except while what they
	// need is unavailable (a timeout engine or the server is down): then
	// the retry waits as a step does (see Waiting) and goes out within
	// seconds of its return.
	EffectsPending Outcome = "effects-pending"
	Duplicate      Outcome = "duplicate"     // already handled: no second effect
	Dropped        Outcome = "dropped"       // stale timeout, or no instance (NotFoundPolicy: ignored, or its Hook)
	Retried        Outcome = "retried"       // rescheduled for a delayed retry
	DeadLettered   Outcome = "dead-lettered" // moved to the dead-letter queue
	Abandoned      Outcome = "abandoned"     // left to redelivery (e.g. on shutdown)

	// Skipped: a timeout handled beyond its type's catch-up tolerance was
	// dropped by its policy (CatchUpSkip, CatchUpCoalesce); the instance
	// no longer waits for it.
	Skipped Outcome = "skipped"

	// VersionWait: the instance's record was written by a newer version
	// of the saga's data than this dispatcher's definition knows
	// (DataVersion). Nothing ran and nothing was written: the message
	// was scheduled again on the queue for a newer worker
	// (WithVersionWait), and completed. StepResult.Err matches
	// ErrDataVersionAhead. Count it: during a rolling deploy it shows
	// the old workers leaving work to the new ones; after one, a worker
	// left behind.
	VersionWait Outcome = "version-wait"

	// NotFoundHandled: no instance, and the NotFoundPolicy's Handler ran
	// and returned nil; the messages it sent were sent.
	NotFoundHandled Outcome = "not-found-handled"

	// Waiting: the step failed because something it needs is unavailable
	// (StepResult.Err matches ErrUnavailable: the store, the server, a
	// timeout engine, or a dependency the handler reported so). Nothing
	// was committed and nothing counted against the retry policy: the
	// dispatcher keeps the message (renewing its lock), stops receiving
	// new ones while the outage lasts, and runs the step again when the
	// dependency is back. StepDone reports each attempt that waited.
	Waiting Outcome = "waiting"
)

// Service is background work that runs beside a dispatcher, such as the
// relay of a transactional outbox (saga/pgstore/outbox): Run works until
// its context ends, then returns.
type Service interface {
	Run(ctx context.Context) error
}

// WithService runs s beside the dispatcher: Dispatcher.Run starts s.Run
// once it has opened its queue, keeps it running while it drains, then
// ends s's context and waits for s.Run to return before it returns
// itself. An error s.Run returns before then is logged at Error; s is not
// started again. Give the option once per service.
func WithService(s Service) Option {
	return optionFunc(func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: nil service", ErrInvalidOption)
		}
		c.services = append(c.services, s)
		return nil
	})
}
