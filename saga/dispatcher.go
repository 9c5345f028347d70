package saga

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jetsaga/jetsaga/timeout"
	"github.com/jetsaga/jetsaga/transport"
)

// Dead-letter reasons the dispatcher gives.
const (
	// ReasonUnknownType: no saga of the dispatcher handles the message's
	// type, or a timeout names a saga or type it does not run.
	ReasonUnknownType = "UnknownMessageType"
	// ReasonMalformed: the body cannot be decoded.
	ReasonMalformed = "MalformedMessage"
	// ReasonSagaNotFound: no instance, under NotFoundPolicy.DeadLetter.
	ReasonSagaNotFound = "SagaNotFound"
	// ReasonPermanent: the step failed with a Permanent error, or asked
	// for something invalid. Nothing of it was committed.
	ReasonPermanent = "PermanentError"
	// ReasonRetriesExhausted: the step failed on every immediate and
	// delayed retry. Nothing of it was committed.
	ReasonRetriesExhausted = "RetriesExhausted"
	// ReasonTimeoutNotDue: a timeout activated early arrived further
	// ahead of its due time, by the dispatcher's clock, than its engine's
	// lead plus a second (ErrTimeoutNotDue). Nothing ran.
	ReasonTimeoutNotDue = "TimeoutNotDue"
)

// Properties of a dead letter the dispatcher moved there after its step
// failed (reasons ReasonPermanent, ReasonRetriesExhausted,
// ReasonMalformed, ReasonSagaNotFound). The dead letter is otherwise the
// message as it was first sent — MessageID, body, CorrelationID, ReplyTo
// and properties — without the dispatcher's bookkeeping of delayed
// retries, so that an operator can send it again as it is. The dispatcher
// never reads these properties: a message sent again starts with a fresh
// history. Mind the queue's DuplicateWindow: within it of the first send,
// a message sent again with the same MessageID is dropped as a duplicate.
const (
	// PropertyAttempts is how many times the step ran, over every
	// immediate and delayed retry (decimal).
	PropertyAttempts = "jetsaga-attempts"
	// PropertyDelayedRetries is how many delayed retries the message had
	// before it was dead-lettered (decimal; at most RetryPolicy.Delayed).
	PropertyDelayedRetries = "jetsaga-delayed-retries"
	// PropertyFirstFailure is when the step first failed (RFC 3339, UTC,
	// by the dispatcher's clock). The dead letter's EnqueuedAt is when it
	// was dead-lettered.
	PropertyFirstFailure = "jetsaga-first-failure"
	// PropertyLastError is the last error, up to 1024 bytes, control
	// characters replaced by spaces. The dead letter's description has
	// it at greater length.
	PropertyLastError = "jetsaga-last-error"
)

// Dispatcher is an endpoint: it receives the messages of one transport
// queue, runs the sagas registered with it, and commits each step all or
// nothing (see the package documentation). Create it with NewDispatcher
// and run it with Run; it is safe for concurrent use.
type Dispatcher struct {
	cfg         config
	broker      *transport.Broker
	store       Store
	queueName   string
	subscribers map[string][]string
	byType      map[string][]sagaRuntime
	byName      map[string]sagaRuntime

	openOnce sync.Once
	q        *transport.Queue
	openErr  error

	cache *recordCache // records this dispatcher wrote last; nil if off
	hits  hitRate      // of the cache, by the steps that found a record

	// keepOutbox: outboxes of timeouts may stay in the stored record (see
	// carryOutKept). Not with several timeout engines: another process
	// (the jetsaga command, a dispatcher configured otherwise) that loads
	// the record carries such an outbox out again with its own scheduler,
	// which might route a timeout to another engine; there the refs are
	// recorded at once instead.
	keepOutbox bool

	topicMu sync.Mutex
	topic   *transport.Topic // opened by openTopic

	onHold func(*transport.Delivery) // tests: called as a hold begins
}

// NewDispatcher returns a dispatcher for queue on broker b, keeping saga
// state in store. It returns ErrInvalidDefinition for a saga definition
// that cannot work and ErrInvalidOption for a bad option.
func NewDispatcher(b *transport.Broker, store Store, queue string, opts ...Option) (*Dispatcher, error) {
	if b == nil || store == nil {
		return nil, fmt.Errorf("%w: nil broker or store", ErrInvalidOption)
	}
	if err := transport.ValidateQueueName(queue); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	c := config{
		codec:       JSON{},
		concurrency: 8,
		conflicts:   10,
		drain:       30 * time.Second,
		retry:       RetryPolicy{Immediate: 3, Delayed: 3, Backoff: defaultBackoff},
		subscribers: make(map[string][]string),
		retention:   DefaultRetention,
		now:         time.Now,
		cacheSize:   DefaultRecordCache,
		batch:       8,
	}
	c.queue.Name = queue
	for _, o := range opts {
		if err := o.apply(&c); err != nil {
			return nil, err
		}
	}
	if c.queue.RequiresSession {
		return nil, fmt.Errorf("%w: a dispatcher's queue cannot require sessions: sagas order work per instance with optimistic concurrency", ErrInvalidOption)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.timeouts == nil {
		c.timeouts = timeout.NewTransport(b)
	}
	d := &Dispatcher{
		cfg: c, broker: b, store: store, queueName: queue, subscribers: c.subscribers,
		byType: make(map[string][]sagaRuntime), byName: make(map[string]sagaRuntime),
		cache: newRecordCache(c.cacheSize),
	}
	if r, ok := c.timeouts.(*timeout.Router); !ok || len(r.Engines()) <= 1 {
		d.keepOutbox = true
	}
	if len(c.sagas) == 0 {
		return nil, fmt.Errorf("%w: no sagas (use WithSagas)", ErrInvalidOption)
	}
	for _, s := range c.sagas {
		rt := s.runtime()
		if err := rt.validate(); err != nil {
			return nil, err
		}
		if r, ok := c.timeouts.(*timeout.Router); ok && rt.timeoutEngine() != "" && !slices.Contains(r.Engines(), rt.timeoutEngine()) {
			return nil, fmt.Errorf("%w: saga %s asks for timeout engine %q; the router has %q", ErrInvalidOption, rt.Name(), rt.timeoutEngine(), r.Engines())
		}
		if _, dup := d.byName[rt.Name()]; dup {
			return nil, fmt.Errorf("%w: saga %s registered twice", ErrInvalidDefinition, rt.Name())
		}
		d.byName[rt.Name()] = rt
		for _, mt := range rt.messageTypes() {
			d.byType[mt] = append(d.byType[mt], rt)
		}
	}
	if types := d.eventTypes(); c.topic != nil && len(types) > maxEventTypes {
		return nil, fmt.Errorf("%w: WithTopic: the sagas start or handle %d message types, a subscription filters on at most %d", ErrInvalidOption, len(types), maxEventTypes)
	}
	return d, nil
}

// Queue returns the name of the dispatcher's queue.
func (d *Dispatcher) Queue() string { return d.queueName }

// Open opens the dispatcher's queue, creating it or updating it to the
// config given with WithQueueConfig. Run, Send and Handle open it when
// they need it; call Open to know the queue exists before messages flow.
func (d *Dispatcher) Open(ctx context.Context) error {
	_, err := d.open(ctx)
	return err
}

func (d *Dispatcher) open(ctx context.Context) (*transport.Queue, error) {
	d.openOnce.Do(func() {
		d.q, d.openErr = d.broker.OpenQueue(ctx, d.cfg.queue)
	})
	return d.q, d.openErr
}

// Send sends m to the dispatcher's own queue, for code outside sagas (an
// HTTP handler, say) to start or feed a saga. A MessageID option makes
// retries of the same call idempotent within the queue's duplicate window.
func (d *Dispatcher) Send(ctx context.Context, m any, opts ...SendOption) (transport.SendResult, error) {
	return d.SendTo(ctx, d.queueName, m, opts...)
}

// SendTo sends m to queue, encoded as sagas' messages are.
func (d *Dispatcher) SendTo(ctx context.Context, queue string, m any, opts ...SendOption) (transport.SendResult, error) {
	if _, err := d.open(ctx); err != nil {
		return transport.SendResult{}, err
	}
	q, err := d.broker.Queue(ctx, queue)
	if err != nil {
		return transport.SendResult{}, err
	}
	e, err := d.envelope(m, opts)
	if err != nil {
		return transport.SendResult{}, err
	}
	return q.Send(ctx, e.transportMessage())
}

// envelope encodes m, as sagas' messages are, with opts applied.
func (d *Dispatcher) envelope(m any, opts []SendOption) (*envelope, error) {
	body, err := d.cfg.codec.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("saga: encoding %T: %w", m, err)
	}
	e := &envelope{Type: nameOf(m), Body: body, ContentType: d.cfg.codec.ContentType()}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// WithMessageID sets the outgoing message's MessageID (Dispatcher.Send
// only; messages sent by sagas get IDs derived from the step).
func WithMessageID(id string) SendOption { return func(e *envelope) { e.ID = id } }

// Run receives and handles messages until ctx ends, then stops receiving,
// lets the messages in flight finish (for at most the drain timeout) and
// returns nil. Timeouts activated early that it holds until their due
// time are in flight: it waits for them to come due (the engine's lead
// plus at most a second) and handles them. A step whose message is in its sagas' inboxes acknowledges
// it without waiting for the server's reply, so that acknowledgement may
// reach the server a moment after Run returned; if it is lost (the
// process exits at once), the message is redelivered and handled as the
// duplicate it is. It returns an error if the queue cannot be opened.
func (d *Dispatcher) Run(ctx context.Context) error {
	q, err := d.open(ctx)
	if err != nil {
		return err
	}
	subs, err := d.subscribe(ctx)
	if err != nil {
		return err
	}
	work := context.WithoutCancel(ctx)
	r := newRunner(d, work)
	var wg sync.WaitGroup
	for range d.cfg.concurrency {
		wg.Go(func() { d.worker(ctx, r, r.slots, q, q.Config().LockDuration) })
	}
	for _, s := range subs {
		wg.Go(func() { d.runSubscription(ctx, r, s) })
	}
	wg.Wait()
	r.wg.Wait() // the timeouts held until their due time
	return nil
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
			r.handle(slots, del)
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
		res = d.handleFlush(ctx, del)
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
			res = d.handle(ctx, del, ts, &info)
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

// target is one saga a message goes to, with the message decoded and
// correlated for it.
type target struct {
	rt   sagaRuntime
	kind routeKind
	m    any    // the decoded message
	id   string // the instance ID; "" if correlation failed
	err  error  // why decoding or correlation failed
}

// resolve finds the sagas a message goes to, decodes it and correlates it
// for each. A message for one saga fills in info's Saga and ID.
func (d *Dispatcher) resolve(ctx context.Context, del *transport.Delivery, info *StepInfo) ([]*target, error) {
	rts, err := d.targets(del)
	if err != nil {
		return nil, err
	}
	ts := make([]*target, len(rts))
	for i, rt := range rts {
		ts[i] = &target{rt: rt}
		d.correlate(ctx, del, ts[i])
	}
	if len(ts) == 1 {
		info.Saga, info.ID = ts[0].rt.Name(), ts[0].id
	}
	return ts, nil
}

// correlate decodes the message for t's saga and finds its instance ID.
func (d *Dispatcher) correlate(ctx context.Context, del *transport.Delivery, t *target) {
	typ := del.Properties[propType]
	t.kind, _ = t.rt.lookup(typ)
	t.m, t.id, t.err = nil, "", nil
	var id string
	if t.kind == routeTimeout {
		id = del.Properties[propSagaID]
	}
	m, err := t.rt.decode(d.cfg.codec, typ, del.Body)
	if err != nil {
		t.err = Permanent(fmt.Errorf("%w: %s: %w", ErrMalformed, typ, err))
	} else if t.kind != routeTimeout {
		id, t.err = t.rt.find(ctx, typ, m)
	}
	if verr := validateID(id); verr != nil {
		if t.err == nil {
			t.err = Permanent(fmt.Errorf("%w: saga %s: ID %.64q: %w", ErrCorrelation, t.rt.Name(), id, verr))
		}
		return
	}
	t.m, t.id = m, id
}

func (d *Dispatcher) handle(ctx context.Context, del *transport.Delivery, ts []*target, info *StepInfo) StepResult {
	identity := cmp.Or(del.Properties[propOrigin], del.MessageID, anonymousIdentity(d.queueName, del.Message))
	outcome, conflicts := Duplicate, 0
	inInbox := true // every target has the message in its instance's inbox
	var pending []*target
	var pendingErr error
	for _, t := range ts {
		info.Saga, info.ID = t.rt.Name(), t.id
		var o Outcome
		var err error
		tries := 0
		for {
			tries++
			if tries > 1 && t.err != nil && !errors.Is(t.err, ErrPermanent) {
				d.correlate(ctx, del, t) // a Finder's transient failure
				info.ID = t.id
			}
			if t.err != nil {
				o, err = "", t.err
			} else {
				var n int
				o, n, err = d.process(ctx, t, del, identity)
				conflicts += n
			}
			if err == nil || o == EffectsPending || errors.Is(err, ErrPermanent) || tries > d.cfg.retry.Immediate {
				break
			}
		}
		if o == EffectsPending {
			pending = append(pending, t)
			pendingErr = errors.Join(pendingErr, err)
			outcome = EffectsPending
			continue
		}
		if err != nil {
			if serr := d.flushLater(ctx, pending, identity); serr != nil {
				_ = del.Abandon(ctx)
				return StepResult{Outcome: Abandoned, Err: errors.Join(err, serr), Conflicts: conflicts}
			}
			res := d.fail(ctx, del, identity, err, tries)
			res.Conflicts = conflicts
			return res
		}
		if o != Handled && o != Duplicate {
			inInbox = false
		}
		if outcome != EffectsPending && (o == Handled || o == Dropped && outcome == Duplicate) {
			outcome = o
		}
	}
	var err error
	if len(pending) > 0 {
		err = fmt.Errorf("%w: %w", ErrEffectsPending, pendingErr)
		if serr := d.flushLater(ctx, pending, identity); serr != nil {
			d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling the retry of pending effects failed; abandoning the message, whose redelivery retries them",
				slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", pendingErr))
			_ = del.Abandon(ctx)
			return StepResult{Outcome: Abandoned, Err: errors.Join(err, serr), Conflicts: conflicts}
		}
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: step committed; its effects could not all be carried out and will be retried",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("saga.type", info.Saga),
			slog.String("saga.id", info.ID), slog.Any("error", pendingErr))
	}
	complete := del.Complete
	if inInbox && len(pending) == 0 {
		// Every instance the message went to has its identity in its
		// inbox: a redelivery, should the completion be lost, is a
		// duplicate and has no effect. No need to wait for the broker.
		complete = del.CompleteNoWait
	}
	if cerr := complete(ctx); cerr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: completing message failed; it will be redelivered and deduplicated",
			slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Any("error", cerr))
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, cerr), Conflicts: conflicts}
	}
	return StepResult{Outcome: outcome, Err: err, Conflicts: conflicts}
}

// anonymousIdentity identifies a message sent without a MessageID: its
// sequence number is unique only within its queue (and queue lifetime), so
// the queue and the enqueue instant are part of it.
func anonymousIdentity(queue string, m *transport.Message) string {
	return "seq:" + queue + ":" + strconv.FormatUint(m.Seq, 10) + ":" + strconv.FormatInt(m.EnqueuedAt.UnixNano(), 10)
}

// targets returns the sagas a message goes to: the one named on a
// timeout, or every saga that starts or handles its type.
func (d *Dispatcher) targets(del *transport.Delivery) ([]sagaRuntime, error) {
	typ := del.Properties[propType]
	if name, ok := del.Properties[propSaga]; ok {
		rt, ok := d.byName[name]
		if !ok {
			return nil, fmt.Errorf("%w: timeout for saga %q, which this dispatcher does not run", ErrUnknownMessage, name)
		}
		if kind, ok := rt.lookup(typ); !ok || kind != routeTimeout {
			return nil, fmt.Errorf("%w: saga %s has no OnTimeout for %q", ErrUnknownMessage, name, typ)
		}
		return []sagaRuntime{rt}, nil
	}
	rts := d.byType[typ]
	if len(rts) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownMessage, typ)
	}
	return rts, nil
}

const maxIDLen = 512

// validateID accepts instance IDs of 1–512 bytes of UTF-8 without control
// characters: they travel in message properties and store keys.
func validateID(id string) error {
	if id == "" || len(id) > maxIDLen || !utf8.ValidString(id) {
		return fmt.Errorf("must be 1-%d bytes of UTF-8", maxIDLen)
	}
	for _, r := range id {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return fmt.Errorf("contains control character %U", r)
		}
	}
	return nil
}

// process runs one saga's handler for a message and commits the result,
// running it again on fresh state after a conflict. It returns the
// outcome and the number of conflicts met.
func (d *Dispatcher) process(ctx context.Context, t *target, del *transport.Delivery, identity string) (Outcome, int, error) {
	key := storeKey(t.rt.Name(), t.id)
	waits := 0
	// The first attempt starts from the cache while it mostly holds what
	// the store holds (see hitRate), and tells how it went; a second
	// attempt starts from a fresh load.
	first, useCache := true, d.cache != nil && d.hits.likely()
	for conflicts := 0; ; {
		o, err := d.attempt(ctx, t, key, identity, del, waits < outboxWaits, useCache, first)
		first, useCache = false, false
		if errors.Is(err, errStaleCache) {
			continue
		}
		if errors.Is(err, errOutboxBusy) {
			waits++
			if err := sleep(ctx, time.Millisecond<<waits); err != nil {
				return "", conflicts, err
			}
			continue
		}
		if !errors.Is(err, ErrConflict) {
			return o, conflicts, err
		}
		if conflicts++; conflicts > d.cfg.conflicts {
			return "", conflicts, fmt.Errorf("saga %s/%s: gave up after %d conflicts: %w", t.rt.Name(), t.id, conflicts, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(d):
		return nil
	}
}

// A step that finds the outbox of a step committed moments ago waits a
// little (1, 2, 4, 8, 16 ms) for its owner to finish carrying it out,
// rather than carrying it out again: a message a step sends to its own
// queue is often received before the sending step has cleared its outbox.
// After that, or for an older outbox (its owner likely crashed), it takes
// the outbox over.
const (
	outboxWaits = 5
	outboxGrace = 5 * time.Second
)

var errOutboxBusy = errors.New("saga: outbox being carried out")

// errStaleCache asks for a step started from a cached record to be run
// again from a fresh load: it came to a decision other than a commit,
// which the cache cannot vouch for.
var errStaleCache = errors.New("saga: cached record needs a fresh load")

// load returns the record stored under key and its revision, or
// ErrNotFound.
func (d *Dispatcher) load(ctx context.Context, key string) (*record, uint64, error) {
	raw, rev, err := d.store.Load(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		return nil, 0, Permanent(fmt.Errorf("saga: stored record %s unreadable: %w", key, err))
	}
	return rec, rev, nil
}

// put stores rec under key if its revision is rev. A completed instance's
// record expires after the retention, if the store can let it.
//
// It keeps the record cache in step: the record as written (if it is not
// completed) after a successful write, nothing after a failed one.
func (d *Dispatcher) put(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	b, err := encodeRecord(rec)
	if err != nil {
		d.cache.forget(key)
		return 0, err
	}
	var n uint64
	if es, ok := d.store.(ExpiringStore); ok && rec.Completed {
		n, err = es.PutTTL(ctx, key, b, rev, d.cfg.retention)
	} else {
		n, err = d.store.Put(ctx, key, b, rev)
	}
	if err != nil || rec.Completed {
		d.cache.forget(key)
	} else {
		d.cache.set(key, rec, n)
	}
	return n, err
}

// loadStep returns the record a step starts from: the cached one if
// useCache and there is one (cached reports it), else the stored one.
//
// If note, it tells d.hits whether the cache held the stored record: at
// once for a record loaded, at the commit (attempt) for a cached one.
func (d *Dispatcher) loadStep(ctx context.Context, key string, useCache, note bool) (rec *record, rev uint64, cached bool, err error) {
	if useCache {
		if rec, rev, ok := d.cache.get(key); ok {
			return rec, rev, true, nil
		}
	}
	rec, rev, err = d.load(ctx, key)
	if note && err == nil && d.cache != nil {
		d.hits.note(d.cache.holds(key, rev))
	}
	return rec, rev, false, err
}

// attempt is one load → handle → commit → carry out effects round. It
// returns EffectsPending with the error when the message's change is
// committed but its effects could not all be carried out.
func (d *Dispatcher) attempt(ctx context.Context, t *target, key, identity string, del *transport.Delivery, patient, useCache, first bool) (Outcome, error) {
	now := d.cfg.now()
	rec, rev, cached, err := d.loadStep(ctx, key, useCache, first)
	// fresh is the way out of every decision but a commit: from a cached
	// record, the step runs again on a fresh load.
	fresh := func(o Outcome, err error) (Outcome, error) {
		if cached {
			d.cache.forget(key)
			return "", errStaleCache
		}
		return o, err
	}
	var tombstone *record
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return "", err
	default:
		// Effects a step committed but did not carry out go first: the
		// next commit would overwrite them.
		if len(rec.Outbox) > 0 {
			if cached {
				return fresh("", nil)
			}
			if !rec.hasSends() {
				// Timeouts to schedule or cancel only: carrying them out
				// again is harmless at any time (see carryOutKept), and
				// this step's commit, if it makes one, stores the record
				// without them.
				if err = d.carryOutKept(ctx, key, rec); err != nil {
					if rec.seen(identity) {
						return EffectsPending, err // this message's own step
					}
					return "", err
				}
			} else {
				if patient && now.Sub(rec.Updated) < outboxGrace {
					return "", errOutboxBusy
				}
				if rev, err = d.flush(ctx, key, rec, rev); err != nil {
					if rec.seen(identity) && !errors.Is(err, ErrConflict) {
						return EffectsPending, err // this message's own step
					}
					return "", err
				}
			}
		}
		if rec.seen(identity) {
			return fresh(Duplicate, nil)
		}
		if rec.Completed {
			if cached {
				return fresh("", nil)
			}
			tombstone = rec
			rec = &record{Inbox: rec.Inbox} // a finished instance: as if not found
		}
	}
	isNew := rec == nil || rec.Started.IsZero()
	if isNew && cached {
		return fresh("", nil)
	}
	if isNew && t.kind != routeTimeout && t.kind != routeStart {
		return d.notFound(ctx, t, key, identity, del, tombstone)
	}
	if isNew && t.kind == routeTimeout {
		return Dropped, nil
	}
	if isNew {
		if rec == nil {
			rec = &record{}
		}
		rec.Started = now
		rec.Originator = &address{ReplyTo: del.ReplyTo, CorrelationID: cmp.Or(del.CorrelationID, del.MessageID)}
	}
	var token string
	if t.kind == routeTimeout {
		token = del.Properties[propToken]
		if _, ok := rec.Timeouts[token]; !ok {
			return fresh(Dropped, nil) // cancelled, rescheduled or already handled
		}
		delete(rec.Timeouts, token)
	}
	s := &step{ctx: ctx, d: d, rt: t.rt, sagaName: t.rt.Name(), id: t.id, key: key, identity: identity, in: del.Message,
		rec: rec, isNew: isNew, now: now, codec: d.cfg.codec, timeout: token}
	typ := del.Properties[propType]
	if err := runHandler(ctx, t.rt, s, typ, t.m); err != nil {
		return fresh("", &HandlerError{Saga: t.rt.Name(), ID: t.id, Message: typ, Err: err})
	}
	rec.remember(identity)
	if rec.Completed {
		s.complete()
	}
	if rev, err = d.put(ctx, key, rec, rev); err != nil {
		if cached && errors.Is(err, ErrConflict) {
			d.hits.note(false)
		}
		if cached && !errors.Is(err, ErrConflict) {
			return fresh("", err)
		}
		return "", err
	}
	if cached {
		d.hits.note(true)
	}
	switch {
	case len(rec.Outbox) == 0:
	case rec.hasSends() || d.cache == nil || !d.keepOutbox || !d.hits.likely():
		if _, err := d.flush(ctx, key, rec, rev); err != nil && !errors.Is(err, ErrConflict) {
			d.cache.forget(key)
			return EffectsPending, err
		}
	default:
		// Timeouts only: the outbox stays in the stored record until the
		// next commit on the instance (see carryOutKept); this
		// dispatcher's cache knows it was carried out.
		if err := d.carryOutKept(ctx, key, rec); err != nil {
			d.cache.forget(key)
			return EffectsPending, err
		}
		d.cache.carried(key, rev, rec)
	}
	return Handled, nil
}

// hasSends reports whether the outbox holds messages to send: only those
// must be cleared from the record once carried out, because sending them
// again after the queue's DuplicateWindow would deliver them twice.
func (r *record) hasSends() bool {
	return slices.ContainsFunc(r.Outbox, func(e effect) bool { return e.Kind == effectSend || e.Kind == effectPublish })
}

// carryOutKept carries out an outbox of timeouts to schedule and cancel
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
func (d *Dispatcher) carryOutKept(ctx context.Context, key string, rec *record) error {
	for _, e := range rec.Outbox {
		if err := d.carryOut(ctx, key, rec, e); err != nil {
			return err
		}
	}
	rec.Outbox = nil
	return nil
}

func runHandler(ctx context.Context, rt sagaRuntime, s *step, typ string, m any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v\n%s", ErrPanic, p, debug.Stack())
		}
	}()
	return rt.run(ctx, s, typ, m)
}

// flush carries out the effects in rec.Outbox, whose IDs the committed
// record fixes, then stores rec without them (and with the refs of the
// timeouts it scheduled). Carrying out effects twice is harmless: sends
// and schedules are deduplicated by MessageID within the queue's duplicate
// window, and cancels are idempotent.
func (d *Dispatcher) flush(ctx context.Context, key string, rec *record, rev uint64) (uint64, error) {
	for _, e := range rec.Outbox {
		if err := d.carryOut(ctx, key, rec, e); err != nil {
			return 0, err
		}
	}
	rec.Outbox = nil
	return d.put(ctx, key, rec, rev)
}

// carryOut carries out one effect of rec's outbox.
func (d *Dispatcher) carryOut(ctx context.Context, key string, rec *record, e effect) error {
	switch e.Kind {
	case effectSend:
		q, err := d.broker.Queue(ctx, e.Queue)
		if err != nil {
			return fmt.Errorf("saga: sending %s to %s: %w", e.Msg.Type, e.Queue, err)
		}
		if _, err := q.Send(ctx, e.Msg.transportMessage()); errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
			d.dropEffect(ctx, key, e, err)
		} else if err != nil {
			return fmt.Errorf("saga: sending %s to %s: %w", e.Msg.Type, e.Queue, err)
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
		if _, err := t.Send(ctx, e.Msg.eventMessage()); errors.Is(err, transport.ErrInvalidMessage) || errors.Is(err, transport.ErrMessageTooLarge) {
			d.dropEffect(ctx, key, e, err)
		} else if err != nil {
			return fmt.Errorf("saga: publishing %s to topic %s: %w", e.Msg.Type, e.Queue, err)
		}
	case effectSchedule:
		m := e.Msg.transportMessage()
		ref, err := d.cfg.timeouts.Schedule(ctx, timeout.Timeout{
			ID: e.Token, Queue: e.Queue, At: e.At, Message: m,
			Saga: m.Properties[propSaga], Instance: m.Properties[propSagaID], Engine: e.Engine,
		})
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

// handleFlush handles a message of flushType: it carries out the pending
// effects of one instance, and schedules itself again if they still
// cannot be. It gives up only on a record it cannot read.
func (d *Dispatcher) handleFlush(ctx context.Context, del *transport.Delivery) StepResult {
	name, id, origin := del.Properties[propSaga], del.Properties[propSagaID], del.Properties[propOrigin]
	n, _ := strconv.Atoi(del.Properties[propAttempt])
	var outcome Outcome
	var err error
	if transport.ValidateQueueName(name) != nil || validateID(id) != nil {
		outcome, err = Dropped, Permanent(fmt.Errorf("%w: pending-effects message for %.64q/%.64q", ErrMalformed, name, id))
	} else {
		outcome, err = d.flushStored(ctx, storeKey(name, id))
	}
	if err != nil && !errors.Is(err, ErrPermanent) {
		err = fmt.Errorf("%w: saga %s/%s: %w", ErrEffectsPending, name, id, err)
		if serr := d.scheduleFlush(ctx, name, id, origin, n+1); serr != nil {
			_ = del.Abandon(ctx)
			return StepResult{Outcome: Abandoned, Err: errors.Join(err, serr)}
		}
		outcome = EffectsPending
		d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: pending effects still cannot be carried out; retrying later",
			slog.String("saga.type", name), slog.String("saga.id", id), slog.Int("attempt", n), slog.Any("error", err))
	} else if err != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: pending effects cannot be carried out; giving up",
			slog.String("saga.type", name), slog.String("saga.id", id), slog.Any("error", err))
	}
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, cerr)}
	}
	return StepResult{Outcome: outcome, Err: err}
}

// flushStored carries out the outbox stored under key, if there is one:
// Handled if it did, Duplicate if there was none (left), Dropped if the
// instance is gone.
func (d *Dispatcher) flushStored(ctx context.Context, key string) (Outcome, error) {
	for conflicts := 0; ; conflicts++ {
		rec, rev, err := d.load(ctx, key)
		if errors.Is(err, ErrNotFound) {
			return Dropped, nil
		}
		if err != nil {
			return "", err
		}
		if len(rec.Outbox) == 0 {
			return Duplicate, nil
		}
		_, err = d.flush(ctx, key, rec, rev)
		if !errors.Is(err, ErrConflict) {
			if err != nil {
				return "", err
			}
			return Handled, nil
		}
		if conflicts >= d.cfg.conflicts {
			return "", err
		}
	}
}

// fail settles a message whose handling failed: a delayed retry while the
// policy allows, else the dead-letter queue with the error. tries is how
// many times the step ran on this delivery.
func (d *Dispatcher) fail(ctx context.Context, del *transport.Delivery, identity string, err error, tries int) StepResult {
	h := d.history(del, err, tries)
	switch {
	case errors.Is(err, ErrMalformed):
		return d.deadLetter(ctx, del, ReasonMalformed, err, h)
	case errors.Is(err, ErrSagaNotFound):
		return d.deadLetter(ctx, del, ReasonSagaNotFound, err, h)
	case errors.Is(err, ErrPermanent):
		return d.deadLetter(ctx, del, ReasonPermanent, err, h)
	}
	if h.delayed >= d.cfg.retry.Delayed {
		return d.deadLetter(ctx, del, ReasonRetriesExhausted, err, h)
	}
	delay := d.cfg.retry.Backoff(h.delayed + 1)
	retry := del.Message.Clone()
	if _, isRetry := del.Properties[propOrigin]; !isRetry {
		delete(retry.Properties, propMessageID)
		if del.MessageID != "" {
			retry.Properties[propMessageID] = del.MessageID
		}
	}
	retry.MessageID = effectID(identity, "retry", h.delayed+1)
	retry.Properties[propOrigin] = identity
	retry.Properties[propAttempt] = strconv.Itoa(h.delayed + 1)
	retry.Properties[propTries] = strconv.Itoa(h.attempts)
	retry.Properties[propSince] = h.first.UTC().Format(time.RFC3339Nano)
	retry.ScheduledAt = time.Time{}
	if _, serr := d.q.Schedule(ctx, retry, d.cfg.now().Add(delay)); serr != nil {
		d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: scheduling a delayed retry failed; abandoning",
			slog.Uint64("seq", del.Seq), slog.Any("error", serr), slog.Any("cause", err))
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: err}
	}
	d.cfg.logger.LogAttrs(ctx, slog.LevelWarn, "saga: handler failed; retrying later",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.Int("attempt", h.delayed+1),
		slog.Duration("delay", delay), slog.Any("error", err))
	if cerr := del.Complete(ctx); cerr != nil {
		return StepResult{Outcome: Abandoned, Err: err}
	}
	return StepResult{Outcome: Retried, Err: err}
}

// history is a failing message's retry history, as its dead letter
// reports it.
type history struct {
	attempts int       // step runs over all deliveries
	delayed  int       // delayed retries so far
	first    time.Time // first failure
	last     string    // the last error
}

func (d *Dispatcher) history(del *transport.Delivery, err error, tries int) *history {
	h := &history{attempts: tries, first: d.cfg.now(), last: err.Error()}
	if _, isRetry := del.Properties[propOrigin]; isRetry {
		h.delayed, _ = strconv.Atoi(del.Properties[propAttempt])
		prev, _ := strconv.Atoi(del.Properties[propTries])
		h.attempts += prev
		if t, perr := time.Parse(time.RFC3339Nano, del.Properties[propSince]); perr == nil {
			h.first = t
		}
	}
	return h
}

// deadLetter moves the message to the dead-letter queue as it was first
// received: a delayed retry's copy gets the original's MessageID back and
// loses the dispatcher's bookkeeping properties. A failed step's dead
// letter (h != nil) carries its retry history (PropertyAttempts, ...).
func (d *Dispatcher) deadLetter(ctx context.Context, del *transport.Delivery, reason string, err error, h *history) StepResult {
	desc := sanitize(truncate(err.Error(), 4000))
	d.cfg.logger.LogAttrs(ctx, slog.LevelError, "saga: message dead-lettered",
		slog.String("queue", d.queueName), slog.Uint64("seq", del.Seq), slog.String("reason", reason), slog.Any("error", err))
	var restore []transport.DeadLetterOption
	props := make(map[string]string)
	if _, isRetry := del.Properties[propOrigin]; isRetry {
		restore = append(restore, transport.WithDeadLetterMessageID(del.Properties[propMessageID]))
		for _, k := range retryProps {
			props[k] = "" // removes it
		}
	}
	if len(props) > 0 {
		restore = append(restore, transport.WithDeadLetterProperties(props))
	}
	opts := restore
	if h != nil {
		opts = append(slices.Clip(restore), transport.WithDeadLetterProperties(map[string]string{
			PropertyAttempts:       strconv.Itoa(h.attempts),
			PropertyDelayedRetries: strconv.Itoa(h.delayed),
			PropertyFirstFailure:   h.first.UTC().Format(time.RFC3339Nano),
			PropertyLastError:      sanitize(truncate(h.last, maxLastError)),
		}))
	}
	derr := del.DeadLetter(ctx, reason, desc, opts...)
	if errors.Is(derr, transport.ErrInvalidMessage) || errors.Is(derr, transport.ErrMessageTooLarge) {
		// No room for the history (too many properties, or a message
		// close to the size limit): the message as it came is what counts.
		if derr = del.DeadLetter(ctx, reason, desc, restore...); errors.Is(derr, transport.ErrInvalidMessage) || errors.Is(derr, transport.ErrMessageTooLarge) {
			derr = del.DeadLetter(ctx, reason, desc)
		}
	}
	if derr != nil {
		_ = del.Abandon(ctx)
		return StepResult{Outcome: Abandoned, Err: errors.Join(err, derr)}
	}
	return StepResult{Outcome: DeadLettered, Err: err}
}

// maxLastError bounds PropertyLastError; the dead letter's description
// has the error at greater length.
const maxLastError = 1024

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// sanitize replaces control characters, which a dead-letter description
// may not carry, with spaces.
func sanitize(s string) string {
	b := []rune(s)
	for i, r := range b {
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			b[i] = ' '
		}
	}
	return string(b)
}
